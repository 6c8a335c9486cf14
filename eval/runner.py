"""The evaluation runner: k samples per problem, graded, summarized the R1 way.

Protocol (DeepSeek-R1, section 3): sample k responses per problem at temperature 0.6 and top-p 0.95;
report pass@1 as the mean correctness over the k samples, cons@k (majority vote) and the unbiased
pass@k. The prompt is the R1-Zero template for base and R1-Zero-style models, or the tokenizer's
chat template with DeepSeek's "Please reason step by step…" instruction for chat models.

Results go to ``<out_dir>/results.json`` and every sample to ``<out_dir>/samples.jsonl``. Samples are
appended problem-chunk by problem-chunk, so a crashed run resumes where it stopped: problems whose
samples are already on disk are not generated again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from data.jsonl import append_jsonl, read_jsonl_tolerant
from data.templates import chat_user_message, is_readable_response, is_well_formed, r1_zero_prompt, think_text
from data.timing import timed_as
from eval.language import is_mixed
from eval.metrics import cons_at_k, pass_at_k
from eval.recheck import label as recheck_label
from eval.verify import grade_batch


def prompt_builder(kind: str, tokenizer) -> Callable[[str], str]:
    if kind == "r1_zero":
        return r1_zero_prompt
    if kind == "chat":
        if tokenizer.chat_template is None:
            raise ValueError("eval.prompt_template is 'chat' but the tokenizer has no chat template")
        return lambda problem: tokenizer.apply_chat_template(
            [{"role": "user", "content": chat_user_message(problem)}], tokenize=False, add_generation_prompt=True
        )
    raise ValueError(f"unknown prompt template {kind!r}")


def grade_samples(rows: list[dict], completions: list[list[dict]], target_lang: str = "en") -> list[dict]:
    """One record per (problem, sample) with correctness, format and language facts."""
    flat = [(row, i, c) for row, cs in zip(rows, completions, strict=True) for i, c in enumerate(cs)]
    grades = grade_batch([c["text"] for _, _, c in flat], [row["answer"] for row, _, _ in flat],
                         problems=[row.get("problem") for row, _, _ in flat])
    records = []
    for (row, i, c), g in zip(flat, grades, strict=True):
        think = think_text(c["text"])
        records.append({
            "id": row["id"], "sample": i, "problem": row.get("problem"), "answer": row["answer"],
            "completion": c["text"],
            "pred": g.pred, "correct": g.correct, "reason": g.reason,
            "num_tokens": c["num_tokens"], "truncated": c["truncated"],
            "has_think": think is not None, "well_formed": is_well_formed(c["text"]),
            "readable": is_readable_response(c["text"]),
            "mixed_language": bool(think and is_mixed(think, target=row.get("lang") or target_lang)),
            "recheck": recheck_label(think) if think is not None else None,
        })
    return records


def summarize(records: list[dict], k: int) -> dict:
    """pass@1 (mean over k samples), cons@k, pass@k, and the shape of the responses."""
    by_id: dict[str, list[dict]] = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    n_prob = len(by_id)
    if n_prob == 0:
        return {"problems": 0}
    thinking = [r for r in records if r["has_think"]]
    out = {
        "problems": n_prob,
        "samples": len(records),
        "k": k,
        "pass@1": sum(sum(r["correct"] for r in rs) / len(rs) for rs in by_id.values()) / n_prob,
        f"cons@{k}": sum(cons_at_k([r["completion"] for r in rs], rs[0]["answer"], rs[0].get("problem"))
                         for rs in by_id.values()) / n_prob,
        f"pass@{k}": sum(pass_at_k(len(rs), sum(r["correct"] for r in rs), k) for rs in by_id.values()) / n_prob,
        "mean_length_tokens": sum(r["num_tokens"] for r in records) / len(records),
        "truncated_rate": sum(r["truncated"] for r in records) / len(records),
        "think_rate": len(thinking) / len(records),
        "format_rate": sum(r["well_formed"] for r in records) / len(records),
        "readable_rate": sum(r.get("readable", False) for r in records) / len(records),
        # share of chains of thought that mix languages (among samples that open a <think> block)
        "language_mix_rate": (sum(r["mixed_language"] for r in thinking) / len(thinking)) if thinking else None,
        "accuracy_when_thinking": (sum(r["correct"] for r in thinking) / len(thinking)) if thinking else None,
        "reasons": dict(Counter(r["reason"] for r in records)),
    }
    direct = [r for r in records if not r["has_think"]]
    out["accuracy_when_direct"] = (sum(r["correct"] for r in direct) / len(direct)) if direct else None
    # re-checks (eval/recheck.py), among chains of thought: how often, and how accurate with and without
    checked = [r for r in thinking if r.get("recheck") in ("rechecked", "corrected")]
    plain = [r for r in thinking if r.get("recheck") == "plain"]
    out["recheck_rate"] = len(checked) / len(thinking) if thinking else None
    out["corrected_rate"] = (sum(r.get("recheck") == "corrected" for r in thinking) / len(thinking)) if thinking else None
    out["accuracy_when_rechecked"] = (sum(r["correct"] for r in checked) / len(checked)) if checked else None
    out["accuracy_when_plain"] = (sum(r["correct"] for r in plain) / len(plain)) if plain else None
    return out


@timed_as("evaluation")
def evaluate_rows(sampler, tokenizer, rows: list[dict], *, cfg, seed: int, out_dir: Path | None = None,
                  name: str = "task", progress: bool = True, temperature: float | None = None,
                  chunk_problems: int = 64) -> dict:
    """Evaluate ``rows`` ({id, problem, answer, [lang]}) with the recipe's eval protocol ``cfg``,
    sampling through ``sampler`` (``eval.generate.make_sampler``).

    With ``out_dir``, samples are appended to ``<out_dir>/samples.jsonl`` chunk by chunk (resumable); the
    summary is returned (``stages.training.evaluation.held_out`` writes it to ``<out_dir>/results.json``).
    """
    build = prompt_builder(cfg.prompt_template, tokenizer)
    temp = cfg.temperature if temperature is None else temperature
    samples_path = Path(out_dir) / "samples.jsonl" if out_dir else None
    done: list[dict] = _read_samples(samples_path, name) if samples_path else []
    done_ids = {r["id"] for r in done}
    todo = [r for r in rows if r["id"] not in done_ids]
    t0 = time.time()
    for start in range(0, len(todo), chunk_problems):
        chunk = todo[start : start + chunk_problems]
        completions = sampler(
            [build(r["problem"]) for r in chunk], n=cfg.k, temperature=temp, top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens, seed=seed + start,
            desc=f"{name} {start + len(done_ids)}/{len(rows)}", progress=progress,
        )
        records = grade_samples(chunk, completions)
        for r in records:
            r["bench"] = name
        done.extend(records)
        if samples_path:
            append_jsonl(samples_path, records)
    wanted = {r["id"] for r in rows}
    summary = summarize([r for r in done if r["id"] in wanted], cfg.k)
    summary.update({"temperature": temp, "top_p": cfg.top_p, "seconds": time.time() - t0})
    return summary


def _read_samples(path: Path, bench: str) -> list[dict]:
    """Samples already on disk for ``bench`` (a torn last line from a crash is skipped)."""
    return [r for r in read_jsonl_tolerant(path) if r.get("bench") == bench]


def compare_samplers(first, second, tokenizer, rows: list[dict], *, cfg, seed: int) -> dict:
    """Two samplers of one checkpoint (``eval.generate.make_sampler``: e.g. the project's decode loop and
    vLLM's engine) on the same ``rows`` with the same protocol ``cfg``, paired problem by problem: each
    one's summary, and ``second − first`` of pass@1 and of the mean completion length, each with its
    interval (``eval.stats.paired_difference``). Samplers of the same model differ only by chance."""
    from eval.stats import paired_difference, per_problem

    build = prompt_builder(cfg.prompt_template, tokenizer)
    summaries, records = [], []
    for sampler in (first, second):
        completions = sampler([build(r["problem"]) for r in rows], n=cfg.k, temperature=cfg.temperature,
                              top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=seed, progress=False)
        out = grade_samples(rows, completions)
        records.append(out)
        summaries.append(summarize(out, cfg.k))
    return {"first": summaries[0], "second": summaries[1],
            "pass@1": paired_difference(per_problem(records[0]), per_problem(records[1]), seed=seed),
            "mean_length_tokens": paired_difference(per_problem(records[0], "num_tokens"),
                                                    per_problem(records[1], "num_tokens"), seed=seed)}
