"""The dry run: every real recipe plans every stage without loading weights; impossible batch splits
fail with the numbers to change; the memory accounting follows the sharding."""

import pytest
import torch

from stages.commands.cli import STAGES, main
from stages.pipeline.plan import GB, PlanError, memory_per_device, parameters, plan
from stages.pipeline.recipe import RECIPES_DIR, load_recipe
from stages.training.grpo import grpo_config

REAL = sorted(p.parent.name for p in RECIPES_DIR.glob("*/recipe.yaml") if p.parent.name != "tiny")


@pytest.mark.parametrize("name", REAL)
def test_every_real_recipe_plans_every_stage(name):
    r = load_recipe(name)
    for stage in STAGES:
        lines = plan(r, stage)
        assert lines[0].startswith(f"recipe {name}, stage {stage}")
        if stage not in ("base",):
            assert any("memory per process" in line for line in lines), (stage, lines)
            assert not any("DOES NOT FIT" in line for line in lines), (stage, lines)
    samples = r.stage2.cold_start.sample is not None  # the stages that sample say how
    assert any(line.startswith("stage2.cold_start.sample:") for line in plan(r, "stage2")) == samples
    assert any(line.startswith("stage4.rejection:") for line in plan(r, "stage4"))
    assert [line.split(":")[0] for line in plan(r, "stage4") if not line.startswith(" ")][2:] == [
        "stage4.sft", "stage4.helpfulness", "stage4.harmlessness", "stage4.rl", "stage4.rejection"]  # every trainer


def test_a_batch_that_cannot_be_split_names_the_numbers():
    r = load_recipe("qwen2.5-math-7b", ["launch.processes_per_node=6"])
    with pytest.raises(PlanError, match=r"64 × 8 = 512 completions .* 8 × 6 = 48: make the completions per step 480 or 528"):
        plan(r, "stage1")
    assert main(["stage1", "--recipe", "qwen2.5-math-7b", "--set", "launch.processes_per_node=6", "--dry-run"]) == 2


def test_the_stage_checks_its_batch_like_the_dry_run(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "6")  # six processes launched, whatever the recipe's launch says
    r = load_recipe("qwen2.5-math-7b", [])
    with pytest.raises(PlanError, match=r"stage1: .* 8 × 6 = 48: make the completions per step 480 or 528"):
        grpo_config(r.stage1, output_dir=tmp_path, seed=0, device=torch.device("cpu"), bf16=False,
                    reward_weights=[1.0, 1.0], section="stage1")


def test_memory_follows_the_sharding():
    n = 7.6e9
    ddp = memory_per_device(n, "ddp", 8, reference=False)
    z2 = memory_per_device(n, "zero2", 8, reference=False)
    z3 = memory_per_device(n, "zero3", 8, reference=True)
    assert ddp.total - ddp.context == pytest.approx(16 * n)  # 2 + 2 + 12 bytes per parameter, nothing sharded
    assert z2.weights == ddp.weights and z2.optimizer == pytest.approx(ddp.optimizer / 8)
    assert z3.total - z3.context == pytest.approx((16 + 2) * n / 8)  # everything sharded, the reference model too
    assert ddp.total / GB > 80  # a 7B model does not fit one 80 GB GPU under DDP: the plan says so
    r = load_recipe("qwen2.5-math-7b", ["launch.accelerate_config=ddp"])
    assert any("DOES NOT FIT" in line for line in plan(r, "stage1"))


def test_tiny_parameter_count_matches_the_built_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    r = load_recipe("tiny")
    a = r.base.architecture
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=a.tokenizer_vocab_size, hidden_size=a.hidden_size, num_hidden_layers=a.num_hidden_layers,
        num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
        intermediate_size=a.intermediate_size, tie_word_embeddings=True))
    assert parameters(r) == pytest.approx(sum(p.numel() for p in model.parameters()), rel=1e-3)


def _memory_line(lines, trainer):
    i = next(i for i, line in enumerate(lines) if line.startswith(f"{trainer}:"))
    return next(line for line in lines[i + 1:] if "memory per process" in line)


OLD_7B_FINAL_RL = ["stage4.rl.prompts_per_step=64", "stage4.rl.gradient_accumulation_steps=8"]


def test_logits_vllm_and_reward_models_are_counted():
    lines = plan(load_recipe("qwen2.5-math-7b", OLD_7B_FINAL_RL), "stage4")
    # 64 × 8 completions / (8 accumulation × 8 GPUs) = 8 per micro-batch × 3,072 positions × 152,064 × 2 bytes
    assert "logits 7.0" in _memory_line(lines, "stage4.rl") and "vLLM 24.0" in _memory_line(lines, "stage4.rl")
    assert "reward models 28.3" in _memory_line(lines, "stage4.rl")  # two 7.6B reward models in bf16, whole
    assert "logits 4.6" in _memory_line(lines, "stage4.sft")  # 4 sequences × 4,096 positions
    assert "reward models" not in _memory_line(lines, "stage4.sft")
    # the 1.5B final RL with micro-batches of 64 completions: 55.6 GB of logits alone
    r = load_recipe("qwen2.5-1.5b", ["stage4.rl.gradient_accumulation_steps=8"])
    assert "DOES NOT FIT" in _memory_line(plan(r, "stage4"), "stage4.rl")
    r = load_recipe("qwen2.5-math-7b", ["base.vocab_size=null"])
    assert "logits unknown: set base.vocab_size" in _memory_line(plan(r, "stage1"), "stage1")


def test_what_a_run_would_run_out_of_memory_on_is_flagged():
    """The 7B final RL as it was shipped (micro-batches of 8 completions, 64 prompts a step, two 7B reward models
    whole on every GPU) fitted by weights, logits and vLLM's share alone: with its activations, ZeRO-3's gathered
    parameters and the CUDA context it does not. The colocated engine's KV cache, the start of a trainer and
    the evaluation engine beside the whole policy are each checked too."""
    line = _memory_line(plan(load_recipe("qwen2.5-math-7b", OLD_7B_FINAL_RL), "stage4"), "stage4.rl")
    # micro-batch 8 × (512 + 3,072) tokens × 3,584 hidden: 28 layer inputs (2 bytes) + one layer's working set (34)
    assert "activations 8.6" in line and "sharding buffers 1.9" in line and "CUDA context 1.0" in line
    assert "84.9 GB of 80 GB (DOES NOT FIT" in line
    tight = [x for x in plan(load_recipe("qwen2.5-math-7b", ["stage1.trl.vllm_gpu_memory_utilization=0.3"]), "stage1")
             if "KV cache" in x]
    assert len(tight) == 1 and "8.8 GB, 165,598 tokens; one generation's 64 rollouts × 3,584 tokens = 229,376" in \
        tight[0] and "TIGHT: vLLM preempts" in tight[0]
    full = plan(load_recipe("qwen2.5-math-7b", ["stage1.trl.vllm_gpu_memory_utilization=0.15"]), "stage1")
    assert any("KV cache" in x and "DOES NOT FIT: the weights fill" in x for x in full)
    start = plan(load_recipe("qwen2.5-math-7b", ["stage4.rl.trl.beta=0.04", "stage4.rl.trl.vllm_gpu_memory_utilization=0.4"]),
                 "stage4")
    assert any(x.startswith("  at the trainer's start: policy, whole 14.2 + reference, whole 14.2 + reward models 28.3 + "
                            "vLLM 32.0") and x.endswith("(DOES NOT FIT)") for x in start)
    evaluation = plan(load_recipe("qwen2.5-math-7b", ["launch.vllm_memory_fraction=0.9"]), "stage3")
    assert any(x.startswith("  evaluations (main process): policy, whole 14.2 + vLLM engine 72.0") and
               x.endswith("(DOES NOT FIT)") for x in evaluation)
    tight = _memory_line(plan(load_recipe("qwen2.5-1.5b", ["stage1.gradient_accumulation_steps=8"]), "stage1"), "stage1")
    assert "74.3 GB of 80 GB (TIGHT" in tight


def test_the_plan_says_what_would_fail_and_names_the_student():
    r = load_recipe("qwen2.5-math-7b")
    assert plan(r, "distill")[1].startswith("model: student qwen2.5-1.5b (Qwen/Qwen2.5-1.5B), 1.54B")
    assert not any(line.startswith("WILL FAIL") for stage in STAGES for line in plan(r, stage))
    r = load_recipe("qwen2.5-math-7b", ["distill.students=[]", "distill.control={}"])
    fails = [line for line in plan(r, "distill_rl") if line.startswith("WILL FAIL")]
    assert len(fails) == 2 and "distill.students is empty" in fails[0] and "RLConfig's defaults" in fails[1]
    assert any("distill.students is empty" in line for line in plan(r, "distill"))


def test_launch_problems():
    from stages.pipeline.plan import launch_problems, vllm_server_layout

    r = load_recipe("qwen2.5-math-7b", ["stage1.trl.max_grad_norm=0.2"])
    found = launch_problems(r, "stage1", {"distributed_type": "DEEPSPEED", "deepspeed_config": {"gradient_clipping": 1.0}},
                            "x.yaml")
    assert len(found) == 1 and "gradient_clipping 1.0 but stage1.trl.max_grad_norm is 0.2" in found[0]
    two_nodes = load_recipe("qwen2.5-math-7b", ["launch.nodes=2"])
    assert "deepspeed_multinode_launcher: standard" in launch_problems(
        two_nodes, "stage1", {"distributed_type": "DEEPSPEED", "deepspeed_config": {}})[0]
    assert "FSDP version 1" in launch_problems(r, "stage1", {"distributed_type": "FSDP", "fsdp_config": {}})[0]
    tp3 = load_recipe("qwen2.5-math-7b", ["stage1.trl.vllm_tensor_parallel_size=3"])
    assert [p.split(" (")[0] for p in launch_problems(tp3, "stage1", None)] == [
        "stage1.trl.vllm_tensor_parallel_size 3 does not divide the model's 28 attention heads",
        "stage1.trl.vllm_tensor_parallel_size 3 does not divide the 8 training processes"]
    assert vllm_server_layout(r, "stage1", 8) == (4, 2)  # two copies of the model: no GPU of the node idle
    assert vllm_server_layout(load_recipe("qwen2.5-math-7b", ["launch.vllm_server_data_parallel=1"]), "stage1", 8) == (4, 1)
    with pytest.raises(PlanError, match="8 does not divide the model's 28 attention heads"):
        vllm_server_layout(load_recipe("qwen2.5-math-7b", ["launch.vllm_server_tensor_parallel=8"]), "stage1", 8)
    with pytest.raises(PlanError, match="4 × launch.vllm_server_data_parallel 3 is more than the server node's 8 GPUs"):
        vllm_server_layout(load_recipe("qwen2.5-math-7b", ["launch.vllm_server_data_parallel=3"]), "stage1", 8)
    # the shipped accelerate configs agree with every real recipe, on two nodes too
    import yaml

    for name in REAL:
        for config in ("ddp", "zero2", "zero3", "fsdp"):
            parsed = yaml.safe_load((RECIPES_DIR / "accelerate" / f"{config}.yaml").read_text())
            for stage in STAGES:
                assert launch_problems(load_recipe(name, ["launch.nodes=2"]), stage, parsed) == [], (name, config, stage)


def test_the_launcher_refuses_what_would_fail(tmp_path):
    import os
    import sys

    from tests import zygote
    from tests.test_distributed import REPO

    env = {**os.environ, "OMP_NUM_THREADS": zygote.THREADS}  # the launcher in a fork of tests/zygote.py
    p = zygote.run([sys.executable, "scripts/launch", "stage1", "--recipe", "qwen2.5-math-7b", "--set",
                    "stage1.trl.vllm_tensor_parallel_size=3"], cwd=REPO, env=env, timeout=120)
    assert p.returncode == 2 and "WILL FAIL: stage1.trl.vllm_tensor_parallel_size 3" in p.stderr
    p = zygote.run([sys.executable, "scripts/launch", "stage1", "--recipe", "qwen2.5-math-7b", "--vllm-server-args", "8",
                    "--set", "launch.vllm_server_tensor_parallel=8"], cwd=REPO, env=env, timeout=120)
    assert p.returncode == 2 and "does not divide the model's 28 attention heads" in p.stderr and "Traceback" not in p.stderr


def test_a_multi_process_recipe_is_not_run_as_one_process(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["stage1", "--recipe", "qwen2.5-math-7b"]) == 2
    assert "launch asks for 8 process(es) per node × 1 node(s) (zero3), and this is one process. Run scripts/launch " \
           "stage1 --recipe qwen2.5-math-7b" in capsys.readouterr().err
    from stages.commands.cli import launch_refusal

    assert launch_refusal(load_recipe("qwen2.5-math-7b"), "base") is None  # registers the model: one process


def test_one_process_launches_r1_itself():
    import argparse
    import importlib.machinery
    import importlib.util
    import sys

    from tests.test_distributed import REPO

    loader = importlib.machinery.SourceFileLoader("launch_script", f"{REPO}/scripts/launch")
    launch = importlib.util.module_from_spec(importlib.util.spec_from_loader("launch_script", loader))
    loader.exec_module(launch)
    args = argparse.Namespace(stage="stage1", recipe="tiny", processes=None, nodes=None, config=None, cpu=False)
    assert launch.command(args, ["--resume"]) == [sys.executable, "-m", "stages.commands.cli", "stage1", "--recipe", "tiny", "--resume"]
    args.processes = 2
    assert launch.command(args, [])[0] == "torchrun" and "--set=launch.processes_per_node=2" in launch.command(args, [])


def test_the_slurm_script_runs_the_launcher_with_the_projects_python(tmp_path):
    """scripts/slurm.sbatch under stand-ins for SLURM's commands (srun runs its command here, scontrol names two
    nodes) and a system ``python3`` without the project's packages: the launcher must run on .venv's Python (its
    shebang would take the system one), and the server node gets the recipe's tensor- and data-parallel sizes."""
    import os
    import stat
    import subprocess

    from tests.test_distributed import REPO

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    fakes = {
        "scontrol": "echo node-a; echo node-b",
        # srun: log its arguments; run the training command (after its options), not the vLLM server
        "srun": f'echo "srun $*" >> {log}\nwhile [[ $1 == --* ]]; do shift; done\n'
                '[[ $1 == *trl ]] && exit 0\nexec "$@"',
        "python3": 'echo "the system python3 has no project packages" >&2; exit 3',
    }
    for name, body in fakes.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_GPUS_PER_NODE": "8", "SLURM_SUBMIT_DIR": REPO}
    p = subprocess.run(["bash", "scripts/slurm.sbatch", "stage1", "qwen2.5-math-7b", "--dry-run"], cwd=REPO,
                       env={**env, "VLLM_SERVER_MODEL": "Qwen/Qwen2.5-Math-7B"}, capture_output=True, text=True, timeout=120)
    # one training node (the other serves), its 8 processes launched by accelerate with the recipe's ZeRO-3
    assert p.returncode == 0 and "launch: " in p.stdout and "--num_processes 8" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    server = [line for line in log.read_text().splitlines() if "vllm-serve" in line]
    assert len(server) == 1 and "--tensor-parallel-size 4 --data-parallel-size 2" in server[0], log.read_text()
