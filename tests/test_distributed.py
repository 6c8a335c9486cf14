"""Two CPU processes (gloo) through the project's launcher: a few GRPO steps (stage 1) and a few SFT
steps (stage 2). Each process trains on its own data, the weights agree afterwards (and moved), and
only the main process writes the manifest. The same two stages under FSDP2 (each process holds half of
every decoder layer): the checkpoints are whole, load into a fresh model, and LoRA adapters merge. And
scripts/gpu_smoke.sh's own bounds and checks on the CPU (its vLLM sequence: tests/test_vllm.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.pipeline.common import weights_digest
from stages.pipeline.manifest import Manifest
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


# FSDP2 as recipes/accelerate/fsdp.yaml sets it, on CPU processes: tests/fsdp_on_cpu/sitecustomize.py
# lets accelerate shard on a CPU (it only does so on accelerators); the project's code runs unchanged.
FSDP_ON_CPU = {"PYTHONPATH": os.path.join(REPO, "tests", "fsdp_on_cpu"), "R1_TEST_FSDP_ON_CPU": "1",
               "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
               "FSDP_TRANSFORMER_CLS_TO_WRAP": "Qwen2DecoderLayer", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
               "FSDP_RESHARD_AFTER_FORWARD": "true"}


# DeepSpeed ZeRO-3 as recipes/accelerate/zero3.yaml sets it, on DeepSpeed's CPU accelerator (gloo). DeepSpeed is
# in the GPU set only: the test runs where it imports, or from R1_TEST_DEEPSPEED_PATH (a `pip install --target`
# folder of deepspeed and its pure-Python dependencies, without torch).
ZERO3_ON_CPU = {"DS_ACCELERATOR": "cpu", "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
                "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true", "ACCELERATE_DEEPSPEED_ZERO3_INIT": "false",
                "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
                "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none",
                **({"PYTHONPATH": os.environ["R1_TEST_DEEPSPEED_PATH"]} if os.environ.get("R1_TEST_DEEPSPEED_PATH") else {})}


def deepspeed_available() -> bool:
    import importlib.util

    return bool(os.environ.get("R1_TEST_DEEPSPEED_PATH")) or importlib.util.find_spec("deepspeed") is not None


def launch(stage: str, sets: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/launch", stage, "--recipe", "tiny", "--cpu", "--processes", "2"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MAIN_PROCESS_PORT": str(29600 + os.getpid() % 300), **(env or {})}
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

    # the cold start's sampling ran once (on the main process) and gave the set one process gives
    import stages.stage2_cold_start
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import run_stage

    one = load_recipe("tiny", sets)
    run_stage(one, "stage2", stages.stage2_cold_start.run, stage_dir=tmp_path / "one" / "stage2",
              parent_dir=runs / "tiny" / "stage1")
    assert "cold start: sampling" in (runs / "tiny" / "stage2" / "stage.log").read_text()
    assert "cold start: sampling" not in (runs / "tiny" / "stage2" / "stage.rank1.log").read_text()
    two_kept = (runs / "tiny" / "stage2" / "cold_start.jsonl").read_text()
    assert two_kept and two_kept == (tmp_path / "one" / "stage2" / "cold_start.jsonl").read_text()
    shards = sorted(p.name for p in (runs / "tiny" / "stage2" / "stage1_samples").iterdir())
    assert shards == sorted(p.name for p in (tmp_path / "one" / "stage2" / "stage1_samples").iterdir())


def whole_checkpoint(path) -> dict:
    """The tensors of a saved checkpoint, checked to be every weight of a fresh model of its config, none
    empty (ZeRO-3 saves placeholders of size 0; a shard has the wrong shape)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    saved = load_file(str(path / "model.safetensors"))
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    expected = {k: v.shape for k, v in fresh.state_dict().items()}
    missing = set(expected) - set(saved)
    assert missing <= {"lm_head.weight"} and (not missing or fresh.config.tie_word_embeddings), missing
    assert all(saved[k].shape == expected[k] and saved[k].numel() > 0 for k in saved), "a shard or an empty tensor saved"
    return saved


@pytest.mark.parametrize("backend", ["fsdp2", pytest.param("zero3", marks=pytest.mark.skipif(
    not deepspeed_available(), reason="DeepSpeed is not installed (GPU set; or set R1_TEST_DEEPSPEED_PATH)"))])
def test_sharded_two_processes_save_whole_checkpoints(small_base, tmp_path, backend):
    """Stages 1 and 2 sharded over two processes save whole checkpoints that reload to the gathered weights.
    Stage 1 is first SIGKILLed at its third optimizer step (after the checkpoint of step 2) and resumes from
    that checkpoint: the one FSDP or DeepSpeed writes (its optimizer state is no ``optimizer.pt``) is complete,
    not deleted as a torn one. Its held-out evaluation at step 1 (``eval_steps``) and its progress evaluation
    (``eval_every``) sample the whole model, gathered by both processes, while training goes on."""
    import shutil

    from transformers import AutoModelForCausalLM

    recipe, base = small_base
    runs = tmp_path / "runs"
    shutil.copytree(recipe.stage_dir("base"), runs / "tiny" / "base")
    user = tmp_path / "user_cot.jsonl"
    user.write_text("".join(json.dumps(r) + "\n" for r in USER_ROWS))
    lora = "stage2.sft.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj, gate_proj]}"
    sets = [*SMALL, f"run_root={runs}", *MICRO, f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}", lora,
            "stage1.trl.save_steps=1", "stage1.trl.save_total_limit=null", "stage1.eval_steps=[1]",
            "stage1.eval_every=2", "launch.timeout_minutes=2"]
    env = FSDP_ON_CPU if backend == "fsdp2" else ZERO3_ON_CPU
    before = weights_digest(AutoModelForCausalLM.from_pretrained(base.checkpoint))
    p = launch("stage1", sets, {**env, "R1_FAULT": "optimizer_step@3"})
    assert p.returncode != 0 and "fault injected: SIGKILL at optimizer_step" in p.stderr, p.stdout[-2000:] + p.stderr[-3000:]
    trainer = runs / "tiny" / "stage1" / "trainer"
    assert sorted(c.name for c in trainer.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    for stage, key in (("stage1", "train"), ("stage2", "sft_checkpoint")):
        p = launch(stage, sets, env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        m = Manifest.load(runs / "tiny" / stage)
        if stage == "stage1":  # resumed from the checkpoint of step 2; evaluated while sharded
            assert m.data["metrics"]["train"]["steps"] == 3 and m.data["resumes"][-1]["from_step"] == 2
            assert m.data["metrics"]["eval_steps"]["1"]["samples"] == 12  # 6 problems × 2 samples, at step 1
            rows = [json.loads(line) for line in (runs / "tiny" / "stage1" / "metrics.jsonl").read_text().splitlines()]
            assert [r["step"] for r in rows if r["eval_pass@1"] is not None] == [2]
        procs = m.data["metrics"][key]["processes"]
        # sharded: the whole weights were gathered on the main process only
        assert procs["count"] == 2 and procs["weights_agree"] is None and procs["weight_digests"][1] is None
        whole_checkpoint(m.checkpoint)
        reloaded = weights_digest(AutoModelForCausalLM.from_pretrained(m.checkpoint))
        assert reloaded == procs["weight_digests"][0] != before  # what was gathered is what was saved; it trained
        assert not any(f.name.startswith("adapter") for f in Path(m.checkpoint).iterdir())  # LoRA merged (stage 2)


def test_gpu_smoke_steps_are_bounded_and_a_failure_ends_it():
    """Every step of scripts/gpu_smoke.sh runs within the smoke's time (SMOKE_LIMIT): a step past it is killed
    and the script ends there, saying which step failed, with a non-zero status (its full sequence runs in
    tests/test_vllm.py, on vLLM's CPU build)."""
    p = subprocess.run(["bash", "scripts/gpu_smoke.sh", "--cpu"], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "SMOKE_LIMIT": "4"})
    # the base step is killed at the limit (124); on a loaded machine the preamble (torch's import) may spend
    # the 4 s before the step starts, and the smoke ends there instead: either way the bound ended it
    bounded = "gpu_smoke: FAILED base: exit status 124" in p.stdout or "FAILED base: the smoke's 4 s are spent" in p.stdout
    assert p.returncode == 1 and bounded, p.stdout[-2000:] + p.stderr[-2000:]
    assert "gpu_smoke: ok" not in p.stdout and "all checks passed" not in p.stdout


def test_gpu_smoke_refuses_contradicting_arguments():
    p = subprocess.run(["bash", "scripts/gpu_smoke.sh", "--cpu", "--vllm", "--no-vllm"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--vllm and --no-vllm contradict" in p.stdout


def test_gpu_smoke_fails_a_stage1_whose_groups_all_earned_the_same():
    """The smoke's stage-1 check needs a gradient step: on an H200 the untrained real-vocabulary model cut
    every completion at the limit, every group's rewards were equal and the weights did not move (docs/gpu.md;
    that run generated with transformers, `--no-vllm`, as this rehearsal does). With only the format reward
    (which an untrained model never earns) every group's rewards are equal here too, and the smoke must fail
    at stage 1's check, not pass on weights that moved some other way."""
    p = subprocess.run(["bash", "scripts/gpu_smoke.sh", "--cpu"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1",
                                         "SMOKE_SETS": "--set 'stage1.rewards={format: 1.0}'"})
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "gpu_smoke: ok base" in p.stdout and "gpu_smoke: FAILED stage1: m['metrics']['train']['steps'] == 2 and " \
        "m['metrics']['train']['mean_frac_reward_zero_std'] < 1" in p.stdout, p.stdout[-2000:]
