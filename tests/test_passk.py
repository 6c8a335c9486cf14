"""``r1 passk``: unbiased pass@k curves for every stage, and where they cross (stages/commands/passk.py)."""

from __future__ import annotations

import json

import pytest

from stages.commands.passk import crossings, curve, ks_up_to


def records(correct_per_problem: list[int], n: int) -> list[dict]:
    return [{"id": f"p{i}", "correct": s < c} for i, c in enumerate(correct_per_problem) for s in range(n)]


def test_ks_double_up_to_n():
    assert ks_up_to(64) == [1, 2, 4, 8, 16, 32, 64] and ks_up_to(6) == [1, 2, 4, 6] and ks_up_to(1) == [1]


def test_curve_is_the_unbiased_estimator_per_problem_averaged():
    # one problem always solved, one solved in 1 of 4 samples, one never
    got = curve(records([4, 1, 0], 4), 4)
    assert got[1]["mean"] == pytest.approx((1 + 0.25 + 0) / 3)
    assert got[4]["mean"] == pytest.approx((1 + 1 + 0) / 3)
    assert got[2]["mean"] == pytest.approx((1 + 0.5 + 0) / 3)  # 1 - C(3,2)/C(4,2) = 0.5
    assert got[1]["lo"] <= got[1]["mean"] <= got[1]["hi"] and got[4]["problems"] == 3
    assert all(got[a]["mean"] <= got[b]["mean"] for a, b in [(1, 2), (2, 4)])


def test_crossings_name_the_curve_above_on_each_side():
    sharp = {1: {"mean": 0.6}, 2: {"mean": 0.65}, 4: {"mean": 0.7}, 8: {"mean": 0.7}}  # RL: higher pass@1
    wide = {1: {"mean": 0.3}, 2: {"mean": 0.5}, 4: {"mean": 0.7}, 8: {"mean": 0.85}}  # base: a wider boundary
    assert crossings({"stage1": sharp, "base": wide}) == ["stage1 is above base up to k=2; base is above from k=8"]
    assert crossings({"stage1": sharp, "stage2": {k: {"mean": v["mean"] - 0.1} for k, v in sharp.items()}}) == []


def test_passk_samples_each_complete_stage_in_its_template(small_base, tmp_path):
    from stages.commands.passk import run_passk
    from stages.pipeline.recipe import load_recipe
    from tests.micro import SMALL

    recipe_, _ = small_base
    r = load_recipe("tiny", [*SMALL, f"run_root={recipe_.run_root}", "passk.samples=4", "passk.problems=3",
                             "eval.max_new_tokens=8"])
    path = run_passk(r)
    summary = json.loads(path.read_text())
    assert list(summary["curves"]) == ["base"] and summary["skipped"] == ["stage1", "stage2", "stage3", "stage4"]
    assert set(summary["curves"]["base"]) == {"1", "2", "4"}
    assert (path.parent / "passk.png").is_file() and (path.parent / "base" / "samples.jsonl").is_file()
    samples = [json.loads(line) for line in (path.parent / "base" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and len({s["id"] for s in samples}) == 3


def test_the_report_shows_passk_or_says_how_to_make_it(tmp_path):
    from stages.commands.report import passk_section

    assert "make passk" in passk_section(tmp_path, tmp_path)[0]
    (tmp_path / "passk").mkdir()
    (tmp_path / "passk" / "summary.json").write_text(json.dumps({
        "problems": 3, "samples": 4, "temperature": 0.6, "top_p": 0.95, "method": "m", "skipped": ["stage4"],
        "curves": {"base": {"1": {"mean": 0.2, "lo": 0.1, "hi": 0.3}, "4": {"mean": 0.6, "lo": 0.5, "hi": 0.7}},
                   "stage1": {"1": {"mean": 0.5, "lo": 0.4, "hi": 0.6}, "4": {"mean": 0.55, "lo": 0.5, "hi": 0.6}}},
        "crossings": ["stage1 is above base up to k=1; base is above from k=4"]}))
    text = "\n".join(passk_section(tmp_path, tmp_path))
    assert "| base | 0.200 [0.100, 0.300] | 0.600 [0.500, 0.700] |" in text
    assert "base is above from k=4" in text and "stage4" in text
