"""Rejection sampling (DeepSeek-R1, section 2.3.3): sample the reasoning-RL model N times per prompt,
keep only what is correct and clean, and turn it into SFT data for stage 4.

Each sample goes through the filters below in order; the first that fails names the drop reason:

- ``no_answer``:      no final answer after the chain of thought (neither ``\\boxed{}`` nor ``<answer>``);
- ``incorrect``:      the verifiers grade the answer wrong;
- ``mixed_language``: the chain of thought mixes languages (the language reward's measure);
- ``long_paragraph``: a line longer than ``max_paragraph_chars`` (the paper's "long paragraphs");
- ``code_block``:     a fenced code block in a math answer (the paper's "code blocks");
- ``repetition``:     degenerate repetition (``eval.cold_start.repeat_share``);
- ``duplicate``:      the same response (whitespace-insensitive) was kept for this prompt already;
- ``per_prompt_cap``: ``max_kept_per_prompt`` samples of this prompt were kept already.

Sampling is written in shards of ``shard_size`` prompts, each file written whole and atomically
(``shard-00003.jsonl``: every sample with its verdict). A crash loses at most the shard in progress; a
resumed run skips shards on disk. Shard ``i`` samples with seed ``seed + i``, and the caps and
duplicates are decided within a prompt (all of whose samples are in one shard), so an interrupted and
resumed run keeps exactly what an uninterrupted run keeps.

Deviation from the paper: the paper also used DeepSeek-V3 as a judge for prompts whose answers rules
cannot check; here every prompt has a rule-checkable answer.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from data.jsonl import read_jsonl_tolerant, write_jsonl_atomic
from data.templates import think_text
from eval.cold_start import longest_paragraph, repeat_share
from eval.language import is_mixed
from eval.verify import grade_batch

DROP_REASONS = ("no_answer", "incorrect", "mixed_language", "long_paragraph", "code_block", "repetition",
                "duplicate", "per_prompt_cap")
_CODE_FENCE = re.compile(r"```|~~~")
_FINAL_ANSWER = re.compile(r"\\boxed\{|<answer>")


def has_final_answer(completion: str) -> bool:
    """A boxed answer or an ``<answer>`` block after the chain of thought (the verifier alone would
    fall back to the last sentence, which is not an answer the SFT data should teach)."""
    return bool(_FINAL_ANSWER.search(completion.rsplit("</think>", 1)[-1]))


def clean_reason(completion: str, *, lang: str | None, max_paragraph_chars: int, max_repeat_share: float) -> str | None:
    """The first cleanliness filter ``completion`` fails (None: clean). Correctness is separate."""
    think = think_text(completion) or ""
    if think.strip() and is_mixed(think, target=lang or "en"):
        return "mixed_language"
    if longest_paragraph(completion) > max_paragraph_chars:
        return "long_paragraph"
    if _CODE_FENCE.search(completion):
        return "code_block"
    if repeat_share(completion) > max_repeat_share:
        return "repetition"
    return None


def judge_prompt(row: dict, completions: list[str], cfg) -> list[str | None]:
    """Verdicts for one prompt's samples, in order: None (kept) or a drop reason. ``cfg`` has
    ``max_kept_per_prompt``, ``max_paragraph_chars``, ``max_repeat_share``, ``language_target``."""
    distinct = list(dict.fromkeys(completions))  # a sharpened model repeats itself: grade each text once
    graded = dict(zip(distinct, grade_batch(distinct, [str(row["answer"])] * len(distinct),
                                            problems=[row.get("problem")] * len(distinct)), strict=True))
    verdicts: list[str | None] = []
    kept: set[str] = set()
    for text in completions:
        g = graded[text]
        reason = "no_answer" if g.pred is None or not has_final_answer(text) else None if g.correct else "incorrect"
        reason = reason or clean_reason(text, lang=row.get("lang") or cfg.language_target,
                                        max_paragraph_chars=cfg.max_paragraph_chars,
                                        max_repeat_share=cfg.max_repeat_share)
        key = " ".join(text.split())
        if reason is None and key in kept:
            reason = "duplicate"
        if reason is None and len(kept) >= cfg.max_kept_per_prompt:
            reason = "per_prompt_cap"
        if reason is None:
            kept.add(key)
        verdicts.append(reason)
    return verdicts


def shard_path(out_dir: Path, index: int) -> Path:
    return Path(out_dir) / f"shard-{index:05d}.jsonl"


def rejection_sample(sampler, rows: list[dict], build_prompt: Callable[[str], str], out_dir: Path, cfg, *,
                     seed: int, log=print) -> tuple[list[dict], Counter, dict]:
    """Sample ``cfg.samples_per_prompt`` completions for every row, shard by shard, and judge them.

    ``sampler``: ``eval.generate.make_sampler``'s function. Returns (kept samples
    ``{id, problem, answer, lang, completion}`` in row order, drop counts by reason, throughput stats).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_shards = -(-len(rows) // cfg.shard_size)
    sampled_now, seconds = 0, 0.0
    for index in range(n_shards):
        path = shard_path(out_dir, index)
        if path.exists():  # written whole by an earlier (possibly interrupted) run
            continue
        shard = rows[index * cfg.shard_size : (index + 1) * cfg.shard_size]
        t0 = time.time()
        completions = sampler([build_prompt(r["problem"]) for r in shard], n=cfg.samples_per_prompt,
                              temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                              seed=seed + index, desc=f"rejection shard {index + 1}/{n_shards}", progress=False)
        records = []
        for row, samples in zip(shard, completions, strict=True):
            texts = [c["text"] for c in samples]
            for i, (c, verdict) in enumerate(zip(samples, judge_prompt(row, texts, cfg), strict=True)):
                records.append({"id": row["id"], "problem": row["problem"], "answer": str(row["answer"]),
                                "lang": row.get("lang"), "sample": i, "completion": c["text"],
                                "num_tokens": c["num_tokens"], "truncated": c["truncated"], "drop": verdict})
        write_jsonl_atomic(path, records)
        seconds += time.time() - t0
        sampled_now += len(records)
        log(f"rejection sampling: shard {index + 1}/{n_shards}, {sum(r['drop'] is None for r in records)}"
            f"/{len(records)} kept, {sampled_now / max(seconds, 1e-9):.1f} samples/s")

    kept, drops, total = [], Counter(), 0
    for index in range(n_shards):
        for r in read_jsonl_tolerant(shard_path(out_dir, index)):
            total += 1
            if r["drop"] is None:
                kept.append(r)
            else:
                drops[r["drop"]] += 1
    stats = {"samples": total, "sampled_this_run": sampled_now, "sampling_seconds_this_run": round(seconds, 1),
             "samples_per_second": round(sampled_now / seconds, 2) if seconds else None}
    return kept, drops, stats
