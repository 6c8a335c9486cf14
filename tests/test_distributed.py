"""Two CPU processes (gloo) through the project's launcher: a few GRPO steps (stage 1) and a few SFT
steps (stage 2). Each process trains on its own data, the weights agree afterwards (and moved), and
only the main process writes the manifest."""

import json
import os
import subprocess
import sys

import pytest

from stages.common import weights_digest
from stages.manifest import Manifest
from tests.micro import SMALL, USER_ROWS

pytestmark = pytest.mark.train  # every test here trains a model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MICRO = [
    "stage1.steps=3", "stage1.prompts_per_step=4", "stage1.num_generations=4", "stage1.max_completion_length=24",
    "stage1.trl.learning_rate=1e-2", "stage1.trl.warmup_steps=0", "stage1.trl.save_steps=10",
    "stage1.rewards={format: 1.0, accuracy: 1.0, overlong: 1.0}", "stage1.overlong_max_length=24",
    "stage1.overlong_buffer=20",  # lengths vary, so the advantages are not all zero and the weights move
    "stage2.sft.epochs=1", "stage2.sft.batch_size=2", "stage2.sft.trl.learning_rate=3e-3", "stage2.sft.trl.logging_steps=1",
    "stage2.sft.trl.save_steps=100", "stage2.sft.max_length=128", "stage2.cold_start.max_samples=8",
]


def launch(stage: str, sets: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/launch", stage, "--recipe", "tiny", "--cpu", "--processes", "2"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MAIN_PROCESS_PORT": str(29600 + os.getpid() % 300)}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_two_processes_train_grpo_and_sft(small_base, tmp_path):
    import shutil

    from transformers import AutoModelForCausalLM

    recipe, base = small_base
    runs = tmp_path / "runs"
    shutil.copytree(recipe.stage_dir("base"), runs / "tiny" / "base")  # its manifest names the original checkpoint
    user = tmp_path / "user_cot.jsonl"
    user.write_text("".join(json.dumps(r) + "\n" for r in USER_ROWS))
    sets = [*SMALL, f"run_root={runs}", *MICRO, f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}"]

    p = launch("stage1", sets)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "--nproc-per-node 2" in p.stdout
    m1 = Manifest.load(runs / "tiny" / "stage1")
    procs = m1.data["metrics"]["train"]["processes"]
    assert m1.status == "complete" and m1.data["metrics"]["train"]["steps"] == 3
    assert procs["count"] == 2 and procs["weights_agree"]
    assert procs["prompts_scored"] == [6, 6] and procs["prompts_scored_by_every_process"] == 0  # 3 steps × 4 prompts
    before = weights_digest(AutoModelForCausalLM.from_pretrained(base.checkpoint))
    assert procs["weight_digests"][0] != before  # the processes trained (and stayed in step)
    assert (runs / "tiny" / "stage1" / "stage.rank1.log").exists()
    assert len(list((runs / "tiny" / "stage1").glob("*.json*"))) == 2  # manifest.json + metrics.jsonl, once each
    assert len((runs / "tiny" / "stage1" / "metrics.jsonl").read_text().splitlines()) == 3  # one row per step

    p = launch("stage2", sets)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sft = Manifest.load(runs / "tiny" / "stage2").data["metrics"]["sft_checkpoint"]
    assert sft["processes"]["count"] == 2 and sft["processes"]["weights_agree"]
    assert sft["steps"] == 2  # 8 rows / (2 per process × 2 processes), one epoch
    assert sft["processes"]["rows_seen"] == [4, 4] and sft["processes"]["rows_seen_by_every_process"] == 0
