"""Budget forcing at test time (s1, Muennighoff et al. 2025): control how long a model thinks.

    r1 eval --model M --think-budget 32 [--min-think 16]
    .venv/bin/python scripts/budget_curve.py --model M --budgets 8,16,32,64,128     # pass@1 against budget

:func:`budget_sampler` wraps any sampler with the contract of ``eval.generate.make_sampler``:

1. **Think** for at most ``think_budget`` tokens (the first generation's ``max_new_tokens``).
2. **Extend**: a chain of thought closed (``</think>``) before ``min_think`` tokens is cut at the tag and
   continued after " Wait" (s1's trick), up to ``max_waits`` times, within the budget.
3. **Stop**: a chain of thought still open at the budget is closed by force: ``</think>`` plus the start
   of the answer (``<answer>`` for the R1-Zero template, "The final answer is" for the chat template),
   then the model writes the answer in at most ``answer_tokens`` tokens.

Continuations are new prompts (prompt + text so far), sampled with ``n=1``; the text is re-tokenized
at each boundary, as s1 does. ``num_tokens`` counts every generated and forced token.
"""

from __future__ import annotations

from collections.abc import Callable

from data.templates import THINK_CLOSE, THINK_OPEN

ANSWER_START = {"r1_zero": " </think> <answer>", "chat": " </think> The final answer is"}


def budget_sampler(sampler: Callable, tokenizer, *, think_budget: int, template: str, min_think: int = 0,
                   answer_tokens: int = 32, max_waits: int = 2) -> Callable:
    """A sampler with the same contract as ``sampler`` whose chains of thought obey the budget."""
    if think_budget < 1 or min_think < 0 or min_think > think_budget:
        raise ValueError(f"need 1 <= think_budget and 0 <= min_think <= think_budget, got {think_budget}, {min_think}")
    close = ANSWER_START[template]

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def run(prompts: list[str], *, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int,
            desc: str = "sampling", progress: bool = False) -> list[list[dict]]:
        kw = dict(temperature=temperature, top_p=top_p, progress=progress, desc=desc)
        first = sampler(prompts, n=n, max_new_tokens=think_budget, seed=seed, **kw)
        # one state per sample: its prompt, its text so far, tokens generated, and whether it is done
        states = [{"prompt": p, "text": c["text"], "tokens": c["num_tokens"], "truncated": c["truncated"]}
                  for p, cs in zip(prompts, first, strict=True) for c in cs]
        for wait in range(max_waits):  # extend chains of thought that closed too early
            short = [s for s in states if s["tokens"] < think_budget
                     and (n := _thinking_tokens(s["text"], count)) is not None and n < min_think]
            if not short:
                break
            for s in short:
                s["text"] = s["text"].split(THINK_CLOSE, 1)[0].rstrip() + " Wait"
            more = sampler([s["prompt"] + s["text"] for s in short], n=1, seed=seed + 1000 * (wait + 1),
                           max_new_tokens=max(1, think_budget - min(s["tokens"] for s in short)), **kw)
            for s, (c,) in zip(short, more, strict=True):
                s["text"] += c["text"]
                s["tokens"] += c["num_tokens"]
                s["truncated"] = c["truncated"]
        # close the chains of thought still open at the budget, and let the model answer
        still_open = [s for s in states if THINK_OPEN in s["text"] and THINK_CLOSE not in s["text"]]
        if still_open:
            for s in still_open:
                s["text"] += close
            answers = sampler([s["prompt"] + s["text"] for s in still_open], n=1, seed=seed + 7,
                              max_new_tokens=answer_tokens, **kw)
            for s, (c,) in zip(still_open, answers, strict=True):
                s["text"] += c["text"]
                s["tokens"] += count(close) + c["num_tokens"]
                s["truncated"] = c["truncated"]
        out = [{"text": s["text"], "num_tokens": s["tokens"], "truncated": s["truncated"]} for s in states]
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]

    return run


def _thinking_tokens(text: str, count: Callable[[str], int]) -> int | None:
    """Tokens inside a closed think block (None when there is no closed block)."""
    if THINK_OPEN not in text or THINK_CLOSE not in text:
        return None
    return count(text.split(THINK_OPEN, 1)[1].split(THINK_CLOSE, 1)[0])
