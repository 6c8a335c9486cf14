"""Registry and loader for the math benchmarks (and the MATH train prompts).

Every benchmark loads as a list of dicts with at least ``id``, ``problem`` and ``answer`` (the final
answer only, a string), plus whatever else the source has (``solution``, ``lang``, ``level``...).

Where the rows come from (first that applies):

1. ``data_dir`` argument, else the ``R1_BENCHMARKS_DIR`` environment variable: the local file
   ``<data_dir>/<name>/<split>.jsonl`` in the shared/benchmarks format (one JSON object a line;
   see shared/benchmarks/README.md). Rows are returned as stored, extra fields included.
2. Otherwise the Hugging Face hub, via ``datasets.load_dataset(hub_id, config, split=...)``;
   each hub row goes through the benchmark's adapter, which produces the same fields and ids as
   the local files.

Hub sources (the defaults; override by replacing an entry of ``BENCHMARKS``):

==========  ==================================  ================================================
name        hub dataset (config) : split         adapter
==========  ==================================  ================================================
gsm8k       openai/gsm8k (main) : test/train     answer = text after "####", commas removed;
                                                 the text before it → solution
math500     HuggingFaceH4/MATH-500 : test        fields as-is; id = unique_id
aime24      HuggingFaceH4/aime_2024 : train      answer = str(int(answer)); id from the AoPS url
aime25      MathArena/aime_2025 : train          problem_idx 1–15 → AIME I, 16–30 → AIME II
amc23       math-ai/amc23 : test                 question → problem; 27.0 → "27"; id from url
cmath       weitianwen/cmath : test              question → problem, golden → answer, lang "zh"
mgsm        juletxara/mgsm (<lang>) : test       one config per language; answer_number → answer
math        local: the PRM800K "12k" train split (MATH minus MATH-500, 11998 rows; problem/
            solution/answer/subject/level/unique_id). Hub: DigitalLearningGmbH/MATH-lighteval
            (default) : train, the classic 7,500 MATH train problems (lighteval's copy); answer
            = the last \\boxed{…} of the solution, id <split>/<type>/<index>.json
==========  ==================================  ================================================

``math`` on the hub: the original ``hendrycks/competition_math`` is gone, and no maintained copy of
PRM800K's 12k split exists (only personal mirrors), so the hub fallback is the classic 7,500-problem
MATH train split as Hugging Face's lighteval uses it. MATH-500 is drawn from MATH's *test* split, so
the classic train split shares no problem with it; it is 4,498 problems smaller than the local file.
Local files are the reference; the hub copies are for users without them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from data.jsonl import iter_jsonl
from data.templates import boxes

__all__ = ["BENCHMARKS", "MGSM_LANGS", "Benchmark", "benchmark_names", "load_benchmark"]

ENV_VAR = "R1_BENCHMARKS_DIR"
MGSM_LANGS = ("en", "bn", "de", "es", "fr", "ja", "ru", "sw", "te", "th", "zh")

# adapter(row, index, split, lang) -> dict with id/problem/answer/..., or None to drop the row
Adapter = Callable[[dict, int, str, "str | None"], "dict | None"]


@dataclass(frozen=True)
class Benchmark:
    name: str
    splits: tuple[str, ...]  # local splits; the first is the default
    hub_id: str
    hub_config: str | None
    hub_splits: dict[str, str]  # our split -> hub split
    adapter: Adapter
    langs: tuple[str, ...] = ()  # per-language hub configs (mgsm)
    rows: dict[str, int] | None = None  # expected row counts of the local files

    @property
    def default_split(self) -> str:
        return self.splits[0]


def _int_string(value) -> str:
    """27.0 / "025" / 27 → "27"; anything non-integral is returned as a stripped string."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value).strip()
    return str(int(number)) if number.is_integer() else str(value).strip()


def _first(row: dict, *keys: str):
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    raise KeyError(f"none of the fields {keys} in hub row with fields {sorted(row)}")


def _gsm8k(row: dict, index: int, split: str, lang: str | None) -> dict:
    solution, _, answer = row["answer"].rpartition("####")
    return {
        "id": f"gsm8k-{split}-{index:05d}",
        "problem": row["question"],
        "answer": answer.strip().replace(",", ""),
        "solution": solution.strip(),
        "source_index": index,
    }


def _math(row: dict, index: int, split: str, lang: str | None) -> dict | None:
    """MATH-500 and the local MATH train file (``answer``, ``unique_id``), or the hub's classic MATH rows
    (``problem``, ``solution``, ``type``, ``level`` "Level N", no ``answer``): the answer is then the last balanced
    ``\\boxed{…}`` of the solution, the id ``<split>/<subject>/<row index>.json``."""
    answer = str(row["answer"] if "answer" in row else _last_box(row.get("solution") or "")).strip()
    if not answer:
        return None
    out = dict(row)
    unique_id = row.get("unique_id") or f"{split}/{str(row.get('type', 'math')).lower().replace(' ', '_')}/{index}.json"
    out.update(id=unique_id, unique_id=unique_id, problem=row["problem"], answer=answer)
    if "type" in row and "subject" not in row:
        out["subject"] = row["type"]
    if split == "train" and "/" in unique_id:
        out.setdefault("orig_split", unique_id.split("/", 1)[0])
    return out


def _last_box(solution: str) -> str:
    spans = boxes(solution)
    return solution[spans[-1][1]:spans[-1][2]] if spans else ""


_AOPS_URL_RE = re.compile(r"(\d{4})_(AIME_I{1,2}|AMC_1[02][AB])_Problems/Problem_(\d+)")


def _contest_from_url(url: str | None) -> tuple[int, str, int] | None:
    m = _AOPS_URL_RE.search(url or "")
    if not m:
        return None
    return int(m.group(1)), m.group(2).replace("_", " "), int(m.group(3))


def _with_contest(out: dict, row: dict, index: int, prefix: str, fallback: str) -> dict:
    """``out`` with the contest's id, year, name and problem number read from the row's AoPS url
    (``<prefix>-<year>-<I|II|12A|…>-NN``), or ``<fallback>-NNN`` without one; and the source id."""
    parsed = _contest_from_url(row.get("url"))
    if parsed:
        year, contest, number = parsed
        out.update(id=f"{prefix}-{year}-{contest.split()[-1]}-{number:02d}", year=year, contest=contest,
                   problem_number=number, url=row["url"])
    else:
        out["id"] = f"{fallback}-{index:03d}"
    out["source_id"] = row.get("id")
    return out


def _aime24(row: dict, index: int, split: str, lang: str | None) -> dict:
    out = {"problem": row["problem"], "answer": _int_string(row["answer"])}
    if row.get("solution"):
        out["solution"] = row["solution"]
    return _with_contest(out, row, index, "aime", "aime24")


def _aime25(row: dict, index: int, split: str, lang: str | None) -> dict:
    number = int(row.get("problem_idx") or index + 1)
    part, within = ("I", number) if number <= 15 else ("II", number - 15)
    return {
        "id": f"aime-2025-{part}-{within:02d}",
        "problem": row["problem"].strip(),
        "answer": _int_string(row["answer"]),
        "year": 2025,
        "contest": f"AIME {part}",
        "problem_number": within,
    }


def _amc23(row: dict, index: int, split: str, lang: str | None) -> dict:
    out = {"problem": _first(row, "question", "problem"), "answer": _int_string(row["answer"])}
    return _with_contest(out, row, index, "amc", "amc23")


def _cmath(row: dict, index: int, split: str, lang: str | None) -> dict:
    out = {
        "id": f"cmath-{split}-{index:04d}",
        "problem": _first(row, "question", "problem"),
        "answer": str(_first(row, "golden", "answer")).strip(),
        "lang": "zh",
        "source_index": index,
    }
    out.update({k: row[k] for k in ("grade", "reasoning_step", "num_digits") if k in row})
    return out


def _mgsm(row: dict, index: int, split: str, lang: str | None) -> dict:
    return {
        "id": f"mgsm-{lang}-{index:03d}",
        "problem": row["question"],
        "answer": _int_string(_first(row, "answer_number", "answer")).replace(",", ""),
        "lang": lang,
        "index": index,
    }


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "gsm8k",
            ("test", "train"),
            "openai/gsm8k",
            "main",
            {"test": "test", "train": "train"},
            _gsm8k,
            rows={"test": 1319, "train": 7473},
        ),
        Benchmark(
            "math500", ("test",), "HuggingFaceH4/MATH-500", None, {"test": "test"}, _math, rows={"test": 500}
        ),
        Benchmark(
            "aime24",
            ("test",),
            "HuggingFaceH4/aime_2024",
            None,
            {"test": "train"},
            _aime24,
            rows={"test": 30},
        ),
        Benchmark(
            "aime25", ("test",), "MathArena/aime_2025", None, {"test": "train"}, _aime25, rows={"test": 30}
        ),
        Benchmark("amc23", ("test",), "math-ai/amc23", None, {"test": "test"}, _amc23, rows={"test": 40}),
        Benchmark("cmath", ("test",), "weitianwen/cmath", None, {"test": "test"}, _cmath, rows={"test": 600}),
        Benchmark(
            "mgsm",
            ("test",),
            "juletxara/mgsm",
            None,
            {"test": "test"},
            _mgsm,
            langs=MGSM_LANGS,
            rows={"test": 2750},
        ),
        Benchmark(
            "math",
            ("train",),
            "DigitalLearningGmbH/MATH-lighteval",
            "default",
            {"train": "train"},
            _math,
            rows={"train": 11998},
        ),
    )
}


def benchmark_names() -> list[str]:
    return sorted(BENCHMARKS)


def _get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(benchmark_names())}") from None


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, row in iter_jsonl(path):
        for field in ("problem", "answer"):
            if row.get(field) is None or (isinstance(row[field], str) and not row[field].strip()):
                raise ValueError(f"{path}, line {lineno}: row is missing the {field!r} field")
        if not isinstance(row["answer"], str):
            row["answer"] = _int_string(row["answer"])
        row.setdefault("id", f"{path.parent.name}-{path.stem}-{lineno - 1}")
        rows.append(row)
    return rows


def _load_local(bench: Benchmark, split: str, data_dir: Path) -> list[dict]:
    path = data_dir / bench.name / f"{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"benchmark file {path} not found. Point {ENV_VAR} (or data_dir=) at the folder holding "
            f"<name>/<split>.jsonl files, e.g. `export {ENV_VAR}=/path/to/shared/benchmarks`, or unset "
            f"it to download {bench.hub_id} from the Hugging Face hub."
        )
    return _read_jsonl(path)


def _hub_rows(hub_id: str, config: str | None, split: str) -> Iterable[dict]:
    """Rows of one hub dataset split (the only place that touches the network)."""
    import datasets

    return datasets.load_dataset(hub_id, config, split=split)


def _load_hub(bench: Benchmark, split: str, langs: Iterable[str] | None) -> list[dict]:
    configs: list[tuple[str | None, str | None]]
    if bench.langs:
        configs = [(lang, lang) for lang in (langs or bench.langs)]
    else:
        configs = [(bench.hub_config, None)]
    rows = []
    for config, lang in configs:
        try:
            hub_rows = _hub_rows(bench.hub_id, config, bench.hub_splits[split])
        except Exception as e:
            raise RuntimeError(
                f"could not load {bench.hub_id} ({config or 'default'}) from the hub: {e}. "
                f"For offline use set {ENV_VAR} to a folder with {bench.name}/{split}.jsonl."
            ) from e
        for index, row in enumerate(hub_rows):
            adapted = bench.adapter(dict(row), index, split, lang)
            if adapted is not None:
                rows.append(adapted)
    return rows


def load_benchmark(
    name: str,
    split: str | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    langs: Iterable[str] | None = None,
) -> list[dict]:
    """Load a benchmark as a list of row dicts (see the module docstring for the sources).

    ``split`` defaults to the benchmark's first split; ``langs`` keeps rows whose ``lang`` is
    listed (mgsm; on the hub only those configs are downloaded); ``limit`` keeps the first rows.
    """
    bench = _get(name)
    split = split or bench.default_split
    if split not in bench.splits:
        raise ValueError(f"benchmark {name!r} has no split {split!r}; splits: {', '.join(bench.splits)}")
    langs = [langs] if isinstance(langs, str) else (list(langs) if langs is not None else None)
    data_dir = data_dir or os.environ.get(ENV_VAR)
    rows = _load_local(bench, split, Path(data_dir)) if data_dir else _load_hub(bench, split, langs)
    if langs is not None:
        rows = [row for row in rows if row.get("lang") in langs]
    if limit is not None:
        rows = rows[: max(0, limit)]
    return rows
