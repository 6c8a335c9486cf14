"""Prompt-set loading: bad rows are skipped and counted, bad files are errors naming file and line."""

import json

import pytest

from data.datasets import DataError, load_rows
from stages.pipeline.recipe import load_recipe


def spec_for(tmp_path, lines: list[str] | bytes):
    p = tmp_path / "d.jsonl"
    if isinstance(lines, bytes):
        p.write_bytes(lines)
    else:
        p.write_text("\n".join(lines) + "\n")
    return load_recipe("tiny", ["data.train.source=jsonl", f"data.train.name={p}"]), p


def test_task_world_rows_load():
    r = load_recipe("tiny")
    rows, skipped, where = load_rows(r.data.test, r)
    assert len(rows) == 200 and skipped == {} and where == "task_world:test"


def test_bad_rows_are_skipped_and_counted(tmp_path):
    lines = [json.dumps(x) for x in [
        {"id": "a", "problem": "1+1?", "answer": "2"},
        {"id": "b", "problem": "", "answer": "2"},
        {"id": "c", "answer": "2"},
        {"id": "d", "problem": "2+2?", "answer": None},
        {"id": "a", "problem": "dup", "answer": "3"},
        {"id": "e", "problem": "3+3?", "answer": 6},
        {"id": "f", "problem": ["not", "a", "string"], "answer": "1"},
    ]]
    r, _ = spec_for(tmp_path, lines)
    rows, skipped, _ = load_rows(r.data.train, r)
    assert [x["id"] for x in rows] == ["a", "e"] and rows[1]["answer"] == "6"
    assert skipped == {"missing or empty problem": 3, "missing or empty answer": 1, "duplicate id": 1}


def test_invalid_json_names_file_and_line(tmp_path):
    r, p = spec_for(tmp_path, ['{"id": "a", "problem": "x", "answer": "1"}', '{"id": "b", '])
    with pytest.raises(DataError, match=f"{p}:2: not valid JSON"):
        load_rows(r.data.train, r)


def test_invalid_utf8_is_an_error(tmp_path):
    r, p = spec_for(tmp_path, b'{"id": "a", "problem": "\xff\xfe", "answer": "1"}\n')
    with pytest.raises(DataError, match="not valid UTF-8"):
        load_rows(r.data.train, r)


def test_empty_dataset_is_an_error(tmp_path):
    r, p = spec_for(tmp_path, [json.dumps({"id": "a", "problem": "", "answer": "1"})])
    with pytest.raises(DataError, match="no usable rows"):
        load_rows(r.data.train, r)


def test_benchmark_source(monkeypatch):
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"
    if not bench.is_dir():
        pytest.skip(f"{bench} not present")
    r = load_recipe("qwen2.5-1.5b", [f"data.benchmarks_dir={bench}"])
    rows, skipped, where = load_rows(r.data.test, r)
    assert len(rows) == 500 and where == "benchmark:gsm8k/test" and not skipped
