"""Stage 1 (R1-Zero) end to end on a micro base model: outputs, manifest, resume, refusals.

A 30-step base of a ~20k-parameter Qwen2 is built once per module; it cannot solve anything, so the
runs add DAPO's overlong penalty (short lengths → graded penalties) to get reward variance and a
real gradient. The SIGKILL test runs the real CLI in a subprocess.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

import stages.base
import stages.stage1_zero
from data.jsonl import read_jsonl_tolerant
from data.templates import r1_zero_prompt
from stages.pipeline.manifest import Manifest, ManifestError
from stages.pipeline.runner import run_stage
from stages.training.skeleton import checkpoint_problem, last_complete_checkpoint, truncate_jsonl
from tests import zygote
from tests.micro import MICRO, recipe, with_base

pytestmark = pytest.mark.train  # every test here trains a model

REPO = Path(__file__).resolve().parents[1]

def tensors(folder) -> dict:
    return load_file(str(Path(folder) / "model.safetensors"))


def test_stage1_tiny_run(base_run, tmp_path, monkeypatch):
    root = with_base(base_run, tmp_path, "run")
    r = recipe(root, "run")
    from transformers import GenerationMixin

    generate_calls = []  # GRPO's rollouts must go through the project's decode loop, not generate
    plain_generate = GenerationMixin.generate
    monkeypatch.setattr(GenerationMixin, "generate", lambda *a, **k: generate_calls.append(1) or plain_generate(*a, **k))
    m = run_stage(r, "stage1", stages.stage1_zero.run)
    assert generate_calls == [], "a rollout fell back to transformers' generate"
    d = r.stage_dir("stage1")

    assert m.status == "complete" and m.stage == "stage1"
    assert m.data["parent"]["stage"] == "base"
    assert m.data["inputs"]["model"]["ref"] == "../base/checkpoint"  # (recorded relative to the stage folder)
    assert [x["name"] for x in m.data["inputs"]["data"]] == ["task_world:train"]
    metrics = m.data["metrics"]
    for key in ("eval_before", "eval_after"):
        assert metrics[key]["problems"] == 8 and metrics[key]["samples"] == 16
        assert (d / key / "results.json").is_file() and (d / key / "samples.jsonl").is_file()
    assert metrics["train"]["steps"] == 4 and metrics["train"]["seconds_per_step"] > 0
    assert m.checkpoint == str(d / "checkpoint") and m.verify_checkpoint() == []

    rows = read_jsonl_tolerant(d / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    for row in rows:
        assert set(row["rewards"]) == {"format", "accuracy", "overlong"}
        for key in ("reward", "accuracy", "format_rate", "mean_length", "language_mix_rate", "entropy",
                    "clip_ratio", "frac_reward_zero_std", "seconds_per_step"):
            assert row[key] is not None, key
    assert sorted(p.name for p in (d / "samples").iterdir()) == ["step_00001.jsonl", "step_00002.jsonl",
                                                                  "step_00004.jsonl"]
    sample = json.loads((d / "samples" / "step_00002.jsonl").read_text().splitlines()[0])
    assert {"step", "id", "problem", "answer", "completion", "rewards", "well_formed"} <= set(sample)
    assert (d / "training_curves.png").stat().st_size > 1000
    assert (d / "trainer" / "checkpoint-4" / "trainer_state.json").is_file()

    before, after = tensors(base_run / "tiny" / "base" / "checkpoint"), tensors(d / "checkpoint")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) >= len(before) // 2, f"only {changed} changed"
    assert (d / "checkpoint" / "tokenizer.json").is_file() or (d / "checkpoint" / "tokenizer_config.json").is_file()

    # complete: a second call does nothing
    again = run_stage(r, "stage1", stages.stage1_zero.run)
    assert again.data["ended_at"] == m.data["ended_at"]


def test_the_accuracy_reward_alone_teaches_the_answer(base_run, tmp_path):
    """GRPO with nothing but the accuracy reward raises the probability of the right answer: after
    "User: What is 3 + 4? Assistant: <answer>" the micro base says "7" 1-2% of the time (its
    one-token answers are nearly uniform); 15 steps of 64 one-token samples, paid only when the
    grader finds them correct, make it the likely answer."""
    from stages.pipeline.common import load_model_and_tokenizer
    from stages.training.grpo import run_rl

    r = recipe(with_base(base_run, tmp_path, "learn"), "learn", [
        "stage1.rewards={accuracy: 1.0}", "stage1.max_completion_length=1", "stage1.steps=15",
        "stage1.trl.learning_rate=1e-2", "stage1.prompts_per_step=4", "stage1.num_generations=16",
        "stage1.trl.save_steps=100"])
    rows = [{"id": f"q{i}", "problem": "What is 3 + 4?", "answer": "7", "verifier": "math"} for i in range(32)]

    def prompt(row):
        return f"User: {row['problem']} Assistant: <answer>"

    def p_seven(path) -> float:
        model, tok = load_model_and_tokenizer(str(path), device=torch.device("cpu"), trust_remote_code=False,
                                              dtype=torch.float32)
        ids = tok(prompt(rows[0]), add_special_tokens=False)["input_ids"]
        [seven] = tok("7", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            return float(torch.softmax(model(torch.tensor([ids])).logits[0, -1], -1)[seven])

    before = p_seven(r.stage_dir("base") / "checkpoint")
    m = run_stage(r, "stage1", lambda ctx: run_rl(ctx, r.stage1, train_rows=rows, eval_rows=rows[:2],
                                                  build_prompt=prompt, model_ref=str(r.stage_dir("base") / "checkpoint")))
    after = p_seven(m.checkpoint)
    assert before < 0.05 and after > 0.5, (before, after)
    train = m.data["metrics"]["train"]
    assert train["final_accuracy"] > train["first_accuracy"] + 0.3


def test_the_pass_rate_filter_chooses_what_grpo_trains_on(base_run, tmp_path):
    """With ``pass_rate_filter``, the stage samples its pool before training, records the filter in the
    manifest and trains on the kept prompts only; a filter that keeps nothing stops the stage, naming it."""
    from stages.training.grpo import POOL_DIR, run_rl

    rows = [{"id": f"q{i}", "problem": f"What is {i} + 3?", "answer": str(i + 3)} for i in range(8)]

    def stage1(name, rule):
        r = recipe(with_base(base_run, tmp_path, name), name, [
            f"stage1.pass_rate_filter={{pool: 3, samples: 2, {rule}}}", "stage1.sample_every=1"])
        return r, lambda ctx: run_rl(ctx, r.stage1, train_rows=rows, eval_rows=rows[:2],
                                     build_prompt=lambda row: r1_zero_prompt(row["problem"]),
                                     model_ref=str(r.stage_dir("base") / "checkpoint"))

    r, run = stage1("kept", "min_pass_rate: 0.0, max_pass_rate: 1.0")
    m = run_stage(r, "stage1", run)
    pool = m.data["metrics"]["pool_filter"]
    assert m.status == "complete" and (pool["scored"], pool["kept"], pool["not_in_pool"]) == (3, 3, 5)
    assert len(read_jsonl_tolerant(r.stage_dir("stage1") / POOL_DIR / "samples.jsonl")) == 3 * 2
    trained = {s["id"] for f in (r.stage_dir("stage1") / "samples").glob("step_*.jsonl") for s in read_jsonl_tolerant(f)}
    assert trained == {"q0", "q1", "q2"}  # 4 steps × 2 prompts drawn from the 3 kept, none from past the pool

    r, run = stage1("none", "min_pass_rate: 1.0, max_pass_rate: 1.0")  # a micro model solves nothing
    with pytest.raises(ValueError, match="pass_rate_filter kept no prompt of 3"):
        run_stage(r, "stage1", run)


def test_same_seed_same_run(base_run, tmp_path):
    """Two runs of stage 1 with the same recipe and seed: the same metrics, step by step, and the same
    weights (what the manifest records is enough to rerun a stage)."""
    runs = []
    for name in ("a", "b"):
        r = recipe(with_base(base_run, tmp_path, name), name)
        m = run_stage(r, "stage1", stages.stage1_zero.run)
        rows = read_jsonl_tolerant(r.stage_dir("stage1") / "metrics.jsonl")
        assert m.data["recipe"] == r.to_dict()  # the resolved recipe, every field: enough to rerun the stage
        runs.append(([{k: v for k, v in row.items() if k not in ("seconds_per_step", "time")} for row in rows],
                     tensors(r.stage_dir("stage1") / "checkpoint")))
    (rows_a, w_a), (rows_b, w_b) = runs
    assert rows_a == rows_b and len(rows_a) == 4
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)


def test_stage1_with_lora_merges_into_plain_weights(base_run, tmp_path):
    """LoRA as a recipe option of an RL stage: only the adapted projections change, and the saved
    checkpoint is a plain model (adapters merged, no adapter files)."""
    lora = "stage1.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}"
    r = recipe(with_base(base_run, tmp_path, "lora"), "lora", [lora])
    m = run_stage(r, "stage1", stages.stage1_zero.run)
    d = r.stage_dir("stage1") / "checkpoint"
    assert m.status == "complete" and not (d / "adapter_config.json").exists()
    before, after = tensors(base_run / "tiny" / "base" / "checkpoint"), tensors(d)
    assert set(after) == set(before)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(("q_proj" in k or "v_proj" in k) for k in changed), changed


class Crash(Exception):
    pass


class CrashAtStep(TrainerCallback):
    """Dies after the metrics of ``step`` are logged (checkpoint-2 exists by then)."""

    def __init__(self, step: int):
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"crash at step {state.global_step}")


def test_resume_after_crash_ignores_partial_checkpoint(base_run, tmp_path):
    root = with_base(base_run, tmp_path, "crash")
    r = recipe(root, "crash")
    d = r.stage_dir("stage1")
    with pytest.raises(Crash):
        run_stage(r, "stage1", lambda ctx: stages.stage1_zero.run(ctx, callbacks=[CrashAtStep(3)]))
    assert Manifest.load(d).status == "failed"
    assert [row["step"] for row in read_jsonl_tolerant(d / "metrics.jsonl")] == [1, 2, 3]
    # a checkpoint cut short: weights written, trainer_state.json not yet
    partial = d / "trainer" / "checkpoint-3"
    shutil.copytree(d / "trainer" / "checkpoint-2", partial)
    (partial / "trainer_state.json").unlink()

    m = run_stage(r, "stage1", stages.stage1_zero.run)
    assert m.status == "complete"
    assert m.data["resumes"][-1]["from_status"] == "failed" and m.data["resumes"][-1]["from_step"] == 2
    assert [row["step"] for row in read_jsonl_tolerant(d / "metrics.jsonl")] == [1, 2, 3, 4]
    state = json.loads((d / "trainer" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert not partial.exists()
    assert "eval_before" in m.data["metrics"] and "eval_after" in m.data["metrics"]


def test_crash_after_training_resumes_without_retraining(base_run, tmp_path, monkeypatch):
    import stages.training.grpo

    root = with_base(base_run, tmp_path, "late")
    r = recipe(root, "late", ["stage1.steps=2"])
    d = r.stage_dir("stage1")
    real = stages.training.grpo.held_out

    def dies_after(recipe_, rows, **kw):
        if kw.get("out_dir") is not None and Path(kw["out_dir"]).name == "eval_after":
            raise Crash("killed during the final evaluation")
        return real(recipe_, rows, **kw)

    monkeypatch.setattr(stages.training.grpo, "held_out", dies_after)
    with pytest.raises(Crash):
        run_stage(r, "stage1", stages.stage1_zero.run)
    trained = tensors(d / "checkpoint")
    monkeypatch.setattr(stages.training.grpo, "held_out", real)
    m = run_stage(r, "stage1", stages.stage1_zero.run)
    assert m.status == "complete" and m.data["resumes"][-1]["from_step"] == 2
    assert [row["step"] for row in read_jsonl_tolerant(d / "metrics.jsonl")] == [1, 2]
    assert all(torch.equal(v, tensors(d / "checkpoint")[k]) for k, v in trained.items())
    assert m.data["metrics"]["eval_after"]["problems"] == 8


def test_checkpoint_completeness(tmp_path):
    t = tmp_path / "trainer"

    def make(step, state=True, weights=True, opt=True, state_step=None):
        p = t / f"checkpoint-{step}"
        p.mkdir(parents=True)
        if state:
            (p / "trainer_state.json").write_text(json.dumps({"global_step": state_step or step}))
        if weights:
            (p / "model.safetensors").write_bytes(b"x" * 10)
        if opt:
            (p / "optimizer.pt").write_bytes(b"x")
            (p / "scheduler.pt").write_bytes(b"x")
        return p

    good = make(2)
    assert checkpoint_problem(good) is None
    assert "trainer_state" in checkpoint_problem(make(4, state=False))
    assert "weights" in checkpoint_problem(make(6, weights=False))
    assert "optimizer" in checkpoint_problem(make(8, opt=False))
    assert "step" in checkpoint_problem(make(10, state_step=9))
    torn = make(12)
    (torn / "trainer_state.json").write_text('{"global_st')
    assert "JSON" in checkpoint_problem(torn)
    (t / "checkpoint-x").mkdir()
    assert last_complete_checkpoint(t) == good
    assert last_complete_checkpoint(t, remove_partial=True) == good
    assert sorted(p.name for p in t.iterdir()) == ["checkpoint-2", "checkpoint-x"]
    assert last_complete_checkpoint(tmp_path / "nothing") is None


@pytest.mark.parametrize("layout", [
    {"pytorch_model_fsdp.bin": 9, "optimizer.bin": 9},  # FSDP, FULL_STATE_DICT (tests/test_distributed.py runs it)
    {"pytorch_model_fsdp_0/__0_0.distcp": 9, "optimizer_0/__0_0.distcp": 9},  # FSDP, SHARDED_STATE_DICT
    {"model.safetensors": 9, "global_step{n}/zero_pp_rank_0_mp_rank_00_model_states.pt": 9,  # DeepSpeed ZeRO-3
     "global_step{n}/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt": 9},
])
def test_sharded_trainers_checkpoints_are_complete(tmp_path, layout):
    """The checkpoints DeepSpeed and FSDP write keep their optimizer state elsewhere than ``optimizer.pt``:
    complete, so a resumed run starts from them; without their optimizer state, or with it empty, torn."""
    def make(step, files):
        p = tmp_path / f"checkpoint-{step}"
        (p / "trainer_state.json").parent.mkdir(parents=True)
        (p / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        for name, size in {"scheduler.pt": 1, **files}.items():
            f = p / name.format(n=step)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x" * size)
        return p

    assert checkpoint_problem(make(3, layout)) is None
    assert "optimizer" in checkpoint_problem(make(5, {k: v for k, v in layout.items() if "optim" not in k}))
    assert "optimizer" in checkpoint_problem(make(7, {k: 0 if "optim" in k else v for k, v in layout.items()}))
    assert "weights" in checkpoint_problem(make(9, {k: v for k, v in layout.items() if "optim" in k}))


def test_truncate_jsonl(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "tor')
    assert truncate_jsonl(p, 2) == 3
    assert [json.loads(x)["step"] for x in p.read_text().splitlines()] == [1, 2]


def test_refuses_missing_or_wrong_parent(base_run, tmp_path):
    r = recipe(tmp_path, "orphan")
    with pytest.raises(ManifestError, match="no manifest"):
        run_stage(r, "stage1", stages.stage1_zero.run)
    # a "base" folder holding another stage's manifest
    wrong = Manifest.start(r.stage_dir("base"), "stage2", r)
    wrong.complete(None)
    with pytest.raises(ManifestError, match="expected a 'base' manifest"):
        run_stage(r, "stage1", stages.stage1_zero.run)
    # an incomplete base
    r2 = recipe(tmp_path, "running")
    Manifest.start(r2.stage_dir("base"), "base", r2)
    with pytest.raises(ManifestError, match="not complete"):
        run_stage(r2, "stage1", stages.stage1_zero.run)
    assert not (r.stage_dir("stage1") / "manifest.json").exists()


def test_vllm_generation_without_vllm_is_refused(base_run, tmp_path):
    """(Where vLLM's CPU build is installed, tests/test_vllm.py trains with it instead.)"""
    root = with_base(base_run, tmp_path, "vllm")
    r = recipe(root, "vllm", ["device=cpu", "stage1.trl.use_vllm=true"])
    with pytest.raises(ValueError, match="vllm is not installed"):
        run_stage(r, "stage1", stages.stage1_zero.run)
    assert Manifest.load(r.stage_dir("stage1")).status == "failed"


def cli(root: Path, name: str, *extra: str) -> list[str]:
    sets = [f"run_root={root}", f"name={name}", *MICRO, "stage1.steps=8", *extra]
    return [sys.executable, "-m", "stages.commands.cli", "stage1", "--recipe", "tiny", *[a for s in sets for a in ("--set", s)]]


def test_sigkill_then_resume_through_the_cli(base_run, tmp_path):
    root = with_base(base_run, tmp_path, "kill")
    d = root / "kill" / "stage1"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    run_until(cli(root, "kill"), lambda: last_complete_checkpoint(d / "trainer") is not None, timeout=120)
    killed = Manifest.load(d)
    assert killed.status == "running"  # never "complete" after a kill

    done = zygote.run(cli(root, "kill"), cwd=REPO, env=env, timeout=300)  # a fork of tests/zygote.py
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    m = Manifest.load(d)
    assert m.status == "complete"
    assert m.data["resumes"][-1]["from_status"] == "running"
    from_step = m.data["resumes"][-1]["from_step"]
    assert from_step >= 2 and from_step % 2 == 0
    assert m.data["metrics"]["train"]["steps"] == 8
    assert [row["step"] for row in read_jsonl_tolerant(d / "metrics.jsonl")] == list(range(1, 9))
    state = json.loads((d / "trainer" / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    assert "eval_before" in m.data["metrics"] and "eval_after" in m.data["metrics"]


def run_until(cmd: list[str], ready, timeout: float = 180) -> None:
    """Start ``cmd``, SIGKILL it as soon as ``ready()`` holds; fail if it ends first."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.1)
        assert proc.poll() is None, "the stage ended before it could be killed"
        assert ready(), f"not ready within {timeout} s"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_several_optimizer_steps_per_generation_log_every_step_and_clipping(base_run, tmp_path):
    """``trl.num_iterations: 2`` (GRPO's μ) trains twice on each generation: TRL logs the generation's
    metrics only on the steps that generated, but every step's loss, entropy and clipping reach
    metrics.jsonl, and on the second pass over a generation the importance ratio is measured."""
    root = with_base(base_run, tmp_path, "mu")
    r = recipe(root, "mu", ["stage1.trl.num_iterations=2", "stage1.trl.learning_rate=5e-2"])
    m = run_stage(r, "stage1", stages.stage1_zero.run)
    rows = read_jsonl_tolerant(r.stage_dir("stage1") / "metrics.jsonl")
    assert m.status == "complete" and [row["step"] for row in rows] == [1, 2, 3, 4]
    assert all(row["entropy"] is not None and row["clip_ratio"] is not None for row in rows)
    assert [row["reward"] is not None for row in rows] == [True, False, True, False]  # generated on 1 and 3
    # the first pass over a generation trains the policy that sampled it (ratio 1, nothing to clip); the
    # second pass, one large step later, is clipped on some tokens: the regime in which clipping acts (F7)
    assert rows[0]["clip_ratio"] == 0 and rows[2]["clip_ratio"] == 0
    assert max(rows[1]["clip_ratio"], rows[3]["clip_ratio"]) > 0
