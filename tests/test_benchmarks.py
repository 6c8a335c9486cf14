"""Tests for data.benchmarks: local files, errors, and the hub adapters on hand-made rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from data import benchmarks
from data.benchmarks import BENCHMARKS, load_benchmark

README_ROWS = {
    ("gsm8k", "test"): 1319,
    ("gsm8k", "train"): 7473,
    ("math500", "test"): 500,
    ("math", "train"): 11998,
    ("aime24", "test"): 30,
    ("aime25", "test"): 30,
    ("amc23", "test"): 40,
    ("cmath", "test"): 600,
    ("mgsm", "test"): 2750,
}


def _shared_dir() -> Path:
    env = os.environ.get("R1_BENCHMARKS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


@pytest.fixture
def shared_dir() -> Path:
    path = _shared_dir()
    if not (path / "math500" / "test.jsonl").exists():
        pytest.skip(f"benchmark files not found in {path} (set R1_BENCHMARKS_DIR)")
    return path


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    """Tests never reach the hub: unless a test installs a fake, any hub access fails."""

    def refuse(*args, **kwargs):
        raise AssertionError("the hub must not be used in tests")

    monkeypatch.setattr(benchmarks, "_hub_rows", refuse)
    monkeypatch.delenv("R1_BENCHMARKS_DIR", raising=False)


@pytest.mark.parametrize(("name", "split"), sorted(README_ROWS))
def test_local_files_match_readme(shared_dir, name, split):
    rows = load_benchmark(name, split, data_dir=shared_dir)
    assert len(rows) == README_ROWS[(name, split)] == BENCHMARKS[name].rows[split]
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(row["problem"], str) and isinstance(row["answer"], str) for row in rows)


def test_registry_covers_every_local_file(shared_dir):
    on_disk = {(p.parent.name, p.stem) for p in shared_dir.glob("*/*.jsonl")}
    registered = {(name, split) for name, b in BENCHMARKS.items() for split in b.splits}
    assert on_disk == registered


def test_env_var_default_split_limit_langs(shared_dir, monkeypatch):
    monkeypatch.setenv("R1_BENCHMARKS_DIR", str(shared_dir))
    assert len(load_benchmark("gsm8k")) == 1319  # default split is test
    assert len(load_benchmark("math500", limit=5)) == 5
    rows = load_benchmark("mgsm", langs=["zh", "de"])
    assert len(rows) == 500 and {row["lang"] for row in rows} == {"zh", "de"}
    assert load_benchmark("mgsm", langs="en", limit=1)[0]["id"] == "mgsm-en-000"
    row = load_benchmark("cmath", limit=1)[0]
    assert row["lang"] == "zh" and "grade" in row  # extra fields are kept
    assert "solution" in load_benchmark("math500", limit=1)[0]


def test_unknown_name_lists_known():
    with pytest.raises(ValueError, match="known: aime24, aime25, amc23, cmath, gsm8k, math, math500, mgsm"):
        load_benchmark("mathh", data_dir=".")


def test_unknown_split():
    with pytest.raises(ValueError, match="splits: test"):
        load_benchmark("math500", "train", data_dir=".")


def test_missing_file_names_path_and_env_var(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_benchmark("aime24", data_dir=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "aime24" / "test.jsonl") in message and "R1_BENCHMARKS_DIR" in message


def _write(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "amc23").mkdir()
    (tmp_path / "amc23" / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("field", ["problem", "answer"])
def test_missing_field_names_file_line_and_field(tmp_path, field):
    good = {"id": "a", "problem": "1+1?", "answer": "2"}
    bad = {k: v for k, v in good.items() if k != field}
    data_dir = _write(tmp_path, [json.dumps(good), json.dumps(bad)])
    with pytest.raises(ValueError) as err:
        load_benchmark("amc23", data_dir=data_dir)
    message = str(err.value)
    assert "amc23/test.jsonl" in message and "line 2" in message and repr(field) in message


def test_invalid_json_and_lenient_rows(tmp_path):
    data_dir = _write(tmp_path, ['{"problem": "p", "answer": 27.0, "extra": 1}', "", "{not json"])
    with pytest.raises(ValueError, match=":3: not valid JSON"):
        load_benchmark("amc23", data_dir=data_dir)
    (data_dir / "amc23" / "test.jsonl").write_text('{"problem": "p", "answer": 27.0, "extra": 1}\n')
    [row] = load_benchmark("amc23", data_dir=data_dir)
    assert row == {"problem": "p", "answer": "27", "extra": 1, "id": "amc23-test-0"}


# ------------------------------------------------------------------ hub adapters (hand-made rows)


def test_gsm8k_adapter():
    row = {"question": "How many?", "answer": "3 * 400 = <<3*400=1200>>1200\n#### 1,200"}
    out = BENCHMARKS["gsm8k"].adapter(row, 7, "test", None)
    assert out == {
        "id": "gsm8k-test-00007",
        "problem": "How many?",
        "answer": "1200",
        "solution": "3 * 400 = <<3*400=1200>>1200",
        "source_index": 7,
    }


def test_math_adapters():
    row = {
        "problem": "p",
        "solution": "s \\boxed{5}",
        "answer": "5",
        "subject": "Algebra",
        "level": 2,
        "unique_id": "test/algebra/1.json",
    }
    out = BENCHMARKS["math500"].adapter(row, 0, "test", None)
    assert out["id"] == "test/algebra/1.json" and out["answer"] == "5" and out["level"] == 2
    train = BENCHMARKS["math"].adapter({**row, "unique_id": "train/algebra/9.json"}, 0, "train", None)
    assert train["orig_split"] == "train"
    assert BENCHMARKS["math"].adapter({**row, "answer": ""}, 0, "train", None) is None
    # the hub's classic MATH rows (DigitalLearningGmbH/MATH-lighteval): no answer field, the last box is it
    hub = {"problem": "p", "level": "Level 3", "type": "Number Theory",
           "solution": "First $\\boxed{2}$ is wrong; so the answer is $\\boxed{\\frac{1}{2}}$."}
    out = BENCHMARKS["math"].adapter(hub, 7, "train", None)
    assert (out["answer"], out["id"], out["subject"]) == ("\\frac{1}{2}", "train/number_theory/7.json", "Number Theory")
    assert BENCHMARKS["math"].adapter({**hub, "solution": "no box"}, 7, "train", None) is None
    assert BENCHMARKS["math"].hub_id == "DigitalLearningGmbH/MATH-lighteval"


def test_aime_and_amc_adapters():
    url = "https://artofproblemsolving.com/wiki/index.php/2024_AIME_II_Problems/Problem_8"
    out = BENCHMARKS["aime24"].adapter(
        {"id": 67, "problem": "p", "solution": "s", "answer": "025", "url": url, "year": "2024"},
        0,
        "test",
        None,
    )
    assert (out["id"], out["answer"], out["contest"], out["problem_number"]) == (
        "aime-2024-II-08",
        "25",
        "AIME II",
        8,
    )
    out = BENCHMARKS["aime25"].adapter({"problem_idx": 16, "problem": " p ", "answer": 70}, 15, "test", None)
    assert (out["id"], out["answer"], out["problem"]) == ("aime-2025-II-01", "70", "p")
    url = "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_1"
    out = BENCHMARKS["amc23"].adapter({"id": 0, "question": "q", "answer": 27.0, "url": url}, 0, "test", None)
    assert (out["id"], out["problem"], out["answer"], out["contest"]) == (
        "amc-2023-12A-01",
        "q",
        "27",
        "AMC 12A",
    )
    assert BENCHMARKS["amc23"].adapter({"question": "q", "answer": -1.0}, 3, "test", None)["answer"] == "-1"


def test_cmath_and_mgsm_adapters():
    out = BENCHMARKS["cmath"].adapter({"question": "多少？", "golden": "2/6", "grade": 3}, 5, "test", None)
    assert out == {
        "id": "cmath-test-0005",
        "problem": "多少？",
        "answer": "2/6",
        "lang": "zh",
        "source_index": 5,
        "grade": 3,
    }
    out = BENCHMARKS["mgsm"].adapter(
        {"question": "q", "answer": None, "answer_number": 5600}, 249, "test", "zh"
    )
    assert out == {"id": "mgsm-zh-249", "problem": "q", "answer": "5600", "lang": "zh", "index": 249}


def test_hub_path_uses_adapters_and_lang_configs(monkeypatch):
    calls = []

    def fake_hub(hub_id, config, split):
        calls.append((hub_id, config, split))
        return [{"question": f"{config} q{i}", "answer": None, "answer_number": i} for i in range(3)]

    monkeypatch.setattr(benchmarks, "_hub_rows", fake_hub)
    rows = load_benchmark("mgsm", langs=["de", "fr"], limit=4)
    assert calls == [("juletxara/mgsm", "de", "test"), ("juletxara/mgsm", "fr", "test")]
    assert [r["id"] for r in rows] == ["mgsm-de-000", "mgsm-de-001", "mgsm-de-002", "mgsm-fr-000"]


def test_hub_failure_mentions_env_var(monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(benchmarks, "_hub_rows", broken)
    with pytest.raises(RuntimeError, match="R1_BENCHMARKS_DIR"):
        load_benchmark("aime25")
