"""`r1 eval`: runs on a small model over the task world and a real benchmark, writes results.json and
samples.jsonl, and resumes from the samples already written."""

import json
import os
import sys
from pathlib import Path

import pytest

from eval.runner import summarize
from tests import zygote

BENCH = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


def r1_eval(model, out, *extra):
    env = {**os.environ, "R1_BENCHMARKS_DIR": str(BENCH), "OMP_NUM_THREADS": zygote.THREADS}
    return zygote.run([sys.executable, "-m", "stages.commands.cli", "eval", "--model", str(model), "--out", str(out),
                       "--k", "2", "--set", "eval.max_new_tokens=16", *extra], env=env, timeout=300)  # a fork of tests/zygote.py


@pytest.mark.skipif(not BENCH.is_dir(), reason="shared/benchmarks not present")
def test_eval_writes_results_and_resumes(small_base, tmp_path):
    _, base = small_base
    out = tmp_path / "eval"
    res = r1_eval(base.checkpoint, out, "--bench", "task,gsm8k", "--limit", "3")
    assert res.returncode == 0, res.stderr
    results = json.loads((out / "results.json").read_text())
    assert set(results["benchmarks"]) == {"task", "gsm8k"}
    assert results["protocol"]["temperature"] == 0.6 and results["protocol"]["top_p"] == 0.95
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 12
    samples = [json.loads(line) for line in lines]
    for bench, summary in results["benchmarks"].items():
        assert summary["problems"] == 3 and summary["samples"] == 6
        # the summary is what the graded samples say: pass@1 their mean per problem, pass@2 the unbiased
        # estimator (1 if any of the 2 is correct), both averaged over problems
        by_id = {}
        for r in samples:
            if r["bench"] == bench:
                by_id.setdefault(r["id"], []).append(r["correct"])
        assert summary["pass@1"] == pytest.approx(sum(sum(c) / len(c) for c in by_id.values()) / 3)
        assert summary["pass@2"] == pytest.approx(sum(any(c) for c in by_id.values()) / 3)
    # a torn last line (crash mid-write) is tolerated, and finished problems are not generated again
    with open(out / "samples.jsonl", "a") as f:
        f.write('{"bench": "task", "id": ')
    res = r1_eval(base.checkpoint, out, "--bench", "task,gsm8k", "--limit", "3")
    assert res.returncode == 0, res.stderr
    assert "0/6" not in res.stderr  # nothing left to sample
    assert json.loads((out / "results.json").read_text())["benchmarks"]["task"]["problems"] == 3


def test_eval_unknown_benchmark_is_a_clear_error(small_base, tmp_path):
    _, base = small_base
    res = r1_eval(base.checkpoint, tmp_path, "--bench", "mmlu")
    assert res.returncode == 2 and "mmlu" in res.stderr and "Traceback" not in res.stderr


def test_summary_metrics_by_hand():
    recs = []
    for pid, correct in (("a", [1, 1, 0, 0]), ("b", [0, 0, 0, 0])):
        for i, c in enumerate(correct):
            recs.append({"id": pid, "answer": "5", "completion": f"<answer>{5 if c else 6}</answer>",
                         "correct": bool(c), "num_tokens": 10, "truncated": False, "has_think": i == 0,
                         "well_formed": False, "mixed_language": False, "reason": "x"})
    s = summarize(recs, k=4)
    assert s["pass@1"] == pytest.approx(0.25)
    assert s["pass@4"] == pytest.approx(0.5)
    assert s["cons@4"] == pytest.approx(0.5)  # a: 5,5,6,6 ties, the first answer (5) wins; b: all 6
    assert s["think_rate"] == pytest.approx(0.25)


def test_prompt_format_follows_the_stage_of_the_model(small_base, tmp_path):
    import shutil

    from stages.commands.eval_command import template_for
    from stages.pipeline.manifest import Manifest

    _, base = small_base
    assert template_for(base.checkpoint, "r1_zero") == "r1_zero"  # a base checkpoint: the recipe's format
    assert template_for("Qwen/Qwen2.5-1.5B", "r1_zero") == "r1_zero"  # a hub id: no manifest to read
    later = tmp_path / "stage3"
    shutil.copytree(Path(base.checkpoint).parent, later)
    m = Manifest.load(later)
    m.data["stage"] = "stage3"
    m.save()
    assert template_for(str(later / "checkpoint"), "r1_zero") == "chat"


def test_the_task_benchmark_reads_val_for_tuning_and_test_for_reporting():
    from stages.commands.eval_command import benchmark_rows
    from stages.pipeline.recipe import load_recipe

    r = load_recipe("tiny", ["task_world.n_train=50", "task_world.n_val=30", "task_world.n_test=30",
                             "data.val.limit=30", "data.test.limit=30"])
    val, test = benchmark_rows("task", r, None, None, "val"), benchmark_rows("task", r, None, None, "test")
    assert len(val) == len(test) == 30 and {x["split"] for x in val} == {"val"} and {x["split"] for x in test} == {"test"}
    assert not {x["id"] for x in val} & {x["id"] for x in test}
