"""Loading the prompt sets stages train and evaluate on, from the recipe's ``data`` section.

Every loader returns rows ``{id, problem, answer, …}`` plus a count of the rows it skipped and why
(missing or empty problem/answer, non-string fields, duplicate ids), so that a stage can record
both in its manifest. Nothing is skipped silently, and an empty result is an error naming the source.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from data import general as G
from data.benchmarks import load_benchmark
from data.jsonl import DataError, read_jsonl

__all__ = ["DataError", "clean_rows", "load_general", "load_preference_pairs", "load_rows"]


def load_rows(spec, recipe) -> tuple[list[dict], dict[str, int], str]:
    """(rows, skipped reasons → counts, a description of the source) for a ``DatasetSpec``."""
    if spec.source == "task_world":
        from data.taskworld import TaskWorld

        raw, where = TaskWorld.from_recipe(recipe).rows(spec.split), f"task_world:{spec.split}"
    elif spec.source == "benchmark":
        raw = load_benchmark(spec.name, split=spec.split, data_dir=recipe.data.benchmarks_dir)
        where = f"benchmark:{spec.name}/{spec.split}"
    elif spec.source == "jsonl":
        raw, where = read_jsonl(Path(spec.name)), spec.name
    else:
        from datasets import load_dataset

        raw = [dict(r) for r in load_dataset(spec.name, spec.config, split=spec.split)]
        where = f"hub:{spec.name}/{spec.split}"
    rows, skipped = clean_rows(raw, where, spec.problem_field, spec.answer_field)
    if spec.limit is not None:
        rows = rows[: spec.limit]
    if not rows:
        raise DataError(f"{where}: no usable rows (skipped: {dict(skipped) or 'none'})")
    return rows, dict(skipped), where


def clean_rows(raw: list[dict], where: str, problem_field: str = "problem",
               answer_field: str = "answer") -> tuple[list[dict], Counter]:
    rows, skipped, seen = [], Counter(), set()
    for i, r in enumerate(raw):
        problem, answer = r.get(problem_field), r.get(answer_field)
        if isinstance(answer, float) and not math.isfinite(answer):  # JSON's NaN / Infinity: no answer at all
            skipped[f"non-finite {answer_field} (NaN or infinity)"] += 1
            continue
        if isinstance(answer, int | float) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(problem, str) or not problem.strip():
            skipped[f"missing or empty {problem_field}"] += 1
            continue
        if not isinstance(answer, str) or not answer.strip():
            skipped[f"missing or empty {answer_field}"] += 1
            continue
        if "id" in r and not isinstance(r["id"], str | int) or isinstance(r.get("id"), bool):
            skipped["id that is not a string or an integer (null, a list…)"] += 1
            continue
        rid = str(r.get("id", f"{where}#{i}"))
        if rid in seen:
            skipped["duplicate id"] += 1
            continue
        seen.add(rid)
        rows.append({**r, "id": rid, "problem": problem, "answer": answer.strip()})
    return rows, skipped


# -- stage 4: general data and preference pairs --------------------------------------------------


def load_general(cfg, seed: int) -> tuple[list[dict], list[dict]]:
    """Stage 4's general data (``stage4.general``): (train rows, held-out rows) of general prompts,
    ``{id, prompt, reference, harmful}``: the procedural tasks of ``data/general.py`` or a chat dataset."""
    if cfg.source == "procedural":
        train = G.general_rows(cfg.procedural_rows, "train", seed, cfg.harmful_share)
        test = G.general_rows(cfg.eval_prompts, "test", seed, cfg.harmful_share)
        return train, test
    rows = _chat_rows(cfg)
    cut = max(1, len(rows) - cfg.eval_prompts)
    return rows[:cut], rows[cut:]


def _chat_rows(cfg) -> list[dict]:
    """Rows of a chat dataset (jsonl file or hub id) whose ``messages_field`` holds a conversation."""
    if cfg.source == "jsonl":
        raw = read_jsonl(Path(cfg.name))
    else:
        from datasets import load_dataset

        raw = load_dataset(cfg.name, cfg.config, split=cfg.split)
    rows = []
    for i, r in enumerate(raw):
        turns = r.get(cfg.messages_field) or []
        user = next((t["content"] for t in turns if t.get("role") == "user"), None)
        reply = next((t["content"] for t in turns if t.get("role") == "assistant"), None)
        if user is None or reply is None:
            continue
        rows.append({"id": f"general-{i}", "prompt": user, "reference": reply, "harmful": False})
    if not rows:
        raise ValueError(f"general data {cfg.name}: no row has a user and an assistant turn in "
                         f"{cfg.messages_field!r}")
    return rows


def load_preference_pairs(spec) -> list[dict]:
    """Reward-model preference pairs (``chosen``/``rejected`` conversations, TRL RewardTrainer's
    format) from a jsonl file or hub dataset (``stage4.<reward model>.dataset``)."""
    if spec.source == "jsonl":
        raw = read_jsonl(Path(spec.name))
    elif spec.source == "hub":
        from datasets import load_dataset

        raw = load_dataset(spec.name, spec.config, split=spec.split)
    else:
        raise ValueError(f"reward model dataset: source must be jsonl or hub, got {spec.source!r}")
    pairs = []
    for r in raw:
        if not (r.get("chosen") and r.get("rejected")):
            continue
        prompt = r.get("prompt") or []  # TRL's "explicit prompt" form: the shared turns apart
        if isinstance(prompt, str):  # a plain-text pair: one user turn, one response each
            prompt = [{"role": "user", "content": prompt}]
        pairs.append({"chosen": list(prompt) + _assistant_turns(r["chosen"]),
                      "rejected": list(prompt) + _assistant_turns(r["rejected"])})
        if spec.limit and len(pairs) >= spec.limit:
            break
    return pairs


def _assistant_turns(response) -> list[dict]:
    return [{"role": "assistant", "content": response}] if isinstance(response, str) else list(response)
