"""The run report renders from a fixture run folder: measured stages with their numbers, stages that
have not run as missing (not as zeros), and findings that say plainly when a claim does not reproduce."""

import json

from eval.report import build_report
from stages.manifest import Manifest
from stages.recipe import load_recipe


def _eval(p1: float, length: float, mix: float) -> dict:
    return {"pass@1": p1, "cons@4": p1 + 0.05, "pass@4": p1 + 0.2, "k": 4, "mean_length_tokens": length,
            "language_mix_rate": mix}


def _stage(recipe, stage: str, parent=None, **metrics) -> Manifest:
    m = Manifest.start(recipe.stage_dir(stage), stage, recipe, parent=parent)
    m.update_metrics(wall_seconds=90.0, peak_rss_mb=512.0, **metrics)
    m.complete(None)
    return m


def fixture_run(tmp_path, stage1_after: float):
    r = load_recipe("tiny", [f"run_root={tmp_path}"])
    base = _stage(r, "base", probe=_eval(0.17, 35.0, 0.22))
    _stage(r, "stage1", base, eval_before=_eval(0.18, 34.8, 0.2), eval_after=_eval(stage1_after, 52.6, 0.075))
    rows = [{"step": s, "accuracy": 0.2 + 0.01 * s, "mean_length": 30 + s} for s in range(1, 11)]
    (r.stage_dir("stage1") / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return r.stage_dir("base").parent


def test_report_shows_measured_and_missing_stages(tmp_path):
    path = build_report(fixture_run(tmp_path, stage1_after=0.354))
    text = path.read_text()
    table = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| complete | 0.354 | 0.404 | 0.554 | 52.6 | 0.075 |" in table["stage 1: R1-Zero (RL from the base)"]
    assert "1.5 min" in table["stage 1: R1-Zero (RL from the base)"]
    for missing in ("stage 3: reasoning RL", "stage 4: rejection SFT + all-scenario RL", "distillation"):
        assert "| missing |" in table[missing] and "0.000" not in table[missing]
    assert "reproduced: held-out pass@1 0.180 → 0.354, mean length 34.8 → 52.6" in text
    assert (path.parent / "stage1_curves.png").stat().st_size > 1000 and "![stage1](stage1_curves.png)" in text
    assert "distillation: missing" in text


def test_report_says_when_a_finding_does_not_reproduce(tmp_path):
    text = build_report(fixture_run(tmp_path, stage1_after=0.10)).read_text()
    assert "**not reproduced** at this scale: held-out pass@1 0.180 → 0.100" in text
