"""The cold-start set of stage 2: a few readable long chains of thought (DeepSeek-R1, section 2.3.1).

Input: stage 1's ``cold_start_candidates.jsonl`` (completions that were correct and well formed when
scored) plus, optionally, a user set (rows with ``problem``, ``answer`` and either ``reasoning`` or a
whole ``completion``). Each candidate goes through the filters below in order; the first that fails
names the drop reason, and every reason is counted:

- ``no_think``:       no ``<think>`` block to keep (or an empty one);
- ``incorrect``:      the answer is re-graded with the verifiers and is wrong (user rows are not
                      trusted more than stage 1's);
- ``mixed_language``: the chain of thought mixes languages (the same measure as the language reward);
- ``long_paragraph``: a paragraph (text between blank lines or line breaks) longer than
                      ``max_paragraph_chars``: the unreadable wall of text R1-Zero writes;
- ``repetition``:     degenerate repetition (one word n-gram makes up more than ``max_repeat_share``
                      of all n-grams);
- ``too_short`` / ``too_long``: the chain of thought's length in characters is outside the bounds;
- ``duplicate``:      the same problem with the same reasoning (whitespace-insensitive) was kept already;
- ``per_problem_cap``: ``max_per_problem`` samples of this problem were kept already;
- ``over_cap``:       the set is full (``max_samples``).

Kept samples are rewritten into the readable pattern the paper defines as
``|special_token|<reasoning_process>|special_token|<summary>``, here ``<think>…</think>`` then a one-line
summary with the final answer in ``\\boxed{}`` (:func:`data.templates.r1_response`).

Deviation from the paper: its cold-start data also came from few-shot prompting with long CoT
examples and from human post-processing; here it comes from stage 1's own correct outputs and an
optional user set, filtered by rule.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from data.templates import chat_user_message, r1_response, think_text
from eval.language import is_mixed
from eval.verify import grade_batch

DROP_REASONS = ("no_think", "incorrect", "mixed_language", "long_paragraph", "repetition", "too_short",
                "too_long", "duplicate", "per_problem_cap", "over_cap")

_WORD_RE = re.compile(r"\w+", re.UNICODE)


@dataclass
class Candidate:
    """One chain of thought offered to the builder."""

    id: str  # the problem's id
    problem: str
    answer: str  # the gold answer
    reasoning: str  # the chain of thought (no tags)
    completion: str  # what the model (or the user set) answered, graded against ``answer``
    lang: str | None
    source: str  # "stage1" or "user"
    correct: bool | None = None  # None: grade it; True: graded correct already by ``eval.rejection``


def candidate_from_rl(row: dict) -> Candidate:
    """A row of ``cold_start_candidates.jsonl`` (written by ``stages/training/grpo.py``), or a sample kept by
    ``eval.rejection`` (its ``drop`` is None: graded correct by the same verifiers, not graded again)."""
    completion = row["completion"]
    return Candidate(id=row["id"], problem=row["problem"], answer=str(row["answer"]),
                     reasoning=(think_text(completion) or "").strip(), completion=completion,
                     lang=row.get("lang"), source="stage1", correct=True if "drop" in row and row["drop"] is None else None)


def candidate_from_user(row: dict) -> Candidate:
    """A user row: ``problem``, ``answer``, and ``reasoning`` (the chain of thought alone) or
    ``completion`` (a whole response whose think block is the reasoning)."""
    if row.get("reasoning"):
        reasoning = str(row["reasoning"]).strip()
        completion = r1_response(reasoning, str(row["answer"]))
    else:
        completion = str(row.get("completion") or "")
        reasoning = (think_text(completion) or "").strip()
    return Candidate(id=str(row.get("id") or row["problem"]), problem=row["problem"], answer=str(row["answer"]),
                     reasoning=reasoning, completion=completion, lang=row.get("lang"), source="user")


def longest_paragraph(text: str) -> int:
    """Characters in the longest run of text without a line break."""
    return max((len(p.strip()) for p in text.splitlines()), default=0)


def repeat_share(text: str, n: int = 4) -> float:
    """The share of word ``n``-grams taken by the most frequent one (0 for texts under 2n words):
    near 1 for a degenerate loop such as 'the the the the …', small for ordinary text."""
    words = _WORD_RE.findall(text.lower())
    if len(words) < 2 * n:
        return 0.0
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return grams.most_common(1)[0][1] / sum(grams.values())


def build_cold_start(candidates: list[Candidate], cfg, *, language_target: str = "en",
                     seed: int = 0) -> tuple[list[dict], Counter]:
    """Filter and reformat ``candidates``; returns (SFT rows, drop counts by reason).

    ``cfg`` has ``max_samples``, ``max_per_problem``, ``min_reasoning_chars``,
    ``max_reasoning_chars``, ``max_paragraph_chars``, ``max_repeat_share`` (``stages/pipeline/recipe.py``
    ``ColdStartConfig``). Candidates are shuffled under ``seed`` before the caps apply, so the caps
    do not favour early RL steps. Each row: ``id``, ``problem``, ``answer``, ``lang``, ``source``,
    ``messages`` (the user turn every chat stage uses, ``chat_user_message``; the assistant response)
    for TRL's SFTTrainer.
    """
    drops: Counter = Counter()
    order = list(candidates)
    random.Random(seed).shuffle(order)
    todo = [c for c in order if c.correct is None]
    grades = iter(grade_batch([c.completion for c in todo], [c.answer for c in todo], problems=[c.problem for c in todo]))
    kept: list[dict] = []
    seen: set[tuple[str, str]] = set()
    per_problem: Counter = Counter()
    for c in order:
        correct = next(grades).correct if c.correct is None else c.correct
        reason = _drop_reason(c, correct, cfg, language_target)
        key = (c.id, " ".join(c.reasoning.split()))
        if reason is None:  # a duplicate of any sample that passed the filters, kept or capped
            reason = "duplicate" if key in seen else None
            seen.add(key)
        if reason is None and per_problem[c.id] >= cfg.max_per_problem:
            reason = "per_problem_cap"
        if reason is None and len(kept) >= cfg.max_samples:
            reason = "over_cap"
        if reason is not None:
            drops[reason] += 1
            continue
        per_problem[c.id] += 1
        kept.append({"id": c.id, "problem": c.problem, "answer": c.answer, "lang": c.lang, "source": c.source,
                     "messages": [{"role": "user", "content": chat_user_message(c.problem)},
                                  {"role": "assistant", "content": r1_response(c.reasoning, c.answer)}]})
    return kept, drops


def _drop_reason(c: Candidate, correct: bool, cfg, language_target: str) -> str | None:
    if not c.reasoning:
        return "no_think"
    if not correct:
        return "incorrect"
    if is_mixed(c.reasoning, target=c.lang or language_target):
        return "mixed_language"
    if longest_paragraph(c.reasoning) > cfg.max_paragraph_chars:
        return "long_paragraph"
    if repeat_share(c.reasoning) > cfg.max_repeat_share:
        return "repetition"
    if len(c.reasoning) < cfg.min_reasoning_chars:
        return "too_short"
    if len(c.reasoning) > cfg.max_reasoning_chars:
        return "too_long"
    return None
