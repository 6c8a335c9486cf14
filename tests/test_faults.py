"""Fault injection through the CLI: SIGKILL a stage at a chosen point, run it again, and check that it
completes with the right number of steps, lost nothing, and never claimed ``complete`` before.
(Stage 1's kill-and-resume test is in test_stage1.py; in-process interruptions of stage 4 and of
rejection sampling are in test_stage4.py and test_rejection.py.)"""

import json
import os
import subprocess
import sys

from data.jsonl import read_jsonl_tolerant
from stages.manifest import Manifest
from stages.rl import last_complete_checkpoint
from tests.test_stage1 import MICRO, run_until
from tests.test_stage23 import MICRO23, chain, chain_recipe  # noqa: F401 (the module fixture)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sigkill_during_the_cold_start_sft_then_resume(chain, tmp_path):  # noqa: F811
    r = chain_recipe(chain, tmp_path, "kill2")
    user = chain[1]
    sets = [*MICRO, *MICRO23, f"run_root={tmp_path}", "name=kill2", "stage2.sft.epochs=20", "stage2.sft.save_steps=2",
            f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}"]
    cmd = [sys.executable, "-m", "stages.cli", "stage2", "--recipe", "tiny"] + [a for s in sets for a in ("--set", s)]
    d = r.stage_dir("stage2")
    run_until(cmd, lambda: last_complete_checkpoint(d / "checkpoint_trainer") is not None)
    assert Manifest.load(d).status == "running"  # killed mid-SFT: never "complete"
    assert not (d / "checkpoint").exists()  # no final model from a killed run

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    m = Manifest.load(d)
    sft = m.data["metrics"]["sft_checkpoint"]
    assert m.status == "complete" and m.data["resumes"][-1]["from_status"] == "running"
    assert sft["steps"] == 40 and sft["resumed_from_step"] >= 2  # 6 rows / batch 4 → 2 steps × 20 epochs
    steps = [row["step"] for row in read_jsonl_tolerant(d / "checkpoint_metrics.jsonl") if "loss" in row]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # no step logged twice after the resume
    assert json.loads((d / "checkpoint_trainer" / "checkpoint-40" / "trainer_state.json").read_text())["global_step"] == 40
    assert m.verify_checkpoint() == []
