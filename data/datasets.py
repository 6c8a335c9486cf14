"""Loading the prompt sets stages train and evaluate on, from the recipe's ``data`` section.

Every loader returns rows ``{id, problem, answer, …}`` plus a count of the rows it skipped and why
(missing or empty problem/answer, non-string fields, duplicate ids), so that a stage can record
both in its manifest. Nothing is skipped silently, and an empty result is an error naming the source.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from data.jsonl import DataError, read_jsonl
from eval.benchmarks import load_benchmark

__all__ = ["DataError", "clean_rows", "load_rows"]


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
        if isinstance(answer, int | float) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(problem, str) or not problem.strip():
            skipped[f"missing or empty {problem_field}"] += 1
            continue
        if not isinstance(answer, str) or not answer.strip():
            skipped[f"missing or empty {answer_field}"] += 1
            continue
        rid = str(r.get("id", f"{where}#{i}"))
        if rid in seen:
            skipped["duplicate id"] += 1
            continue
        seen.add(rid)
        rows.append({**r, "id": rid, "problem": problem, "answer": answer.strip()})
    return rows, skipped
