"""The fault-injection suite: every stage and sub-step is SIGKILLed at chosen instants through the real
CLI (``R1_FAULT``, see data/faults.py; each run a process forked from tests/zygote.py's, which has the
libraries imported already), then run again. Each case asserts that the killed run never
claimed ``complete``, that the rerun completes with the right step count and an intact checkpoint,
and that no completed work was lost or done twice (no step logged twice, the rejection set and the
base weights equal an uninterrupted run's).

``make faults`` runs all of them (marker ``faults``); the cases not marked ``slow`` are the quick
subset that runs in CI: at least one kill in every stage and in each of stage 4's sub-steps (rejection
sampling, the SFT on the mix, the reward models, the final RL) and in the distillation control. Stage 1's kill at a random instant is in test_stage1.py.
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

import stages.stage2_cold_start
import stages.stage3_reasoning_rl
from data.faults import ENV
from data.jsonl import read_jsonl, read_jsonl_tolerant
from stages.pipeline.common import load_model_and_tokenizer, weights_digest
from stages.pipeline.manifest import Manifest
from stages.pipeline.runner import run_stage
from stages.training.skeleton import last_complete_checkpoint
from tests import zygote
from tests.micro import MICRO, MICRO4, MICRO23

pytestmark = [pytest.mark.faults, pytest.mark.train]
REPO = Path(__file__).resolve().parents[1]
slow = pytest.mark.slow


# -- running a stage, killing it, running it again ------------------------------------------------


def cli(stage: str, root: Path, name: str, *extra: str) -> list[str]:
    """The CLI for ``stage`` on the micro chain; through the rejection oracle (tests/oracle.py), which
    only changes stage 4's rejection sampler."""
    sets = [f"run_root={root}", f"name={name}", *MICRO, *MICRO23, *MICRO4, "stage1.steps=8", *extra]
    return [sys.executable, "-m", "tests.oracle", stage, "--recipe", "tiny", *[a for s in sets for a in ("--set", s)]]


def run(cmd: list[str], fault: str | None = None, threads: dict | None = None) -> subprocess.CompletedProcess:
    """``threads``: the thread settings of the environment (one thread per process unless given)."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "OMP_NUM_THREADS", "R1_THREADS")}
    env.update(threads or {"OMP_NUM_THREADS": "1"}, TOKENIZERS_PARALLELISM="false", **({ENV: fault} if fault else {}))
    return zygote.run(cmd, cwd=REPO, env=env, timeout=600)  # a fork of tests/zygote.py where it can


def tail(p: subprocess.CompletedProcess) -> str:
    return p.stdout[-2000:] + p.stderr[-3000:]


def kill_then_resume(cmd: list[str], stage_dir: Path, fault: str, on_killed=None, threads: dict | None = None) -> Manifest:
    """Run with ``fault`` (it must be reached: the process dies by SIGKILL), check the killed state,
    run again without it, and return the completed manifest."""
    killed = run(cmd, fault, threads)
    assert killed.returncode == -signal.SIGKILL, f"fault {fault} was not reached:\n{tail(killed)}"
    assert f"SIGKILL at {fault.partition('@')[0]}" in killed.stderr
    assert Manifest.load(stage_dir).status == "running"  # never "complete" (nor "failed": no handler ran)
    if on_killed:
        on_killed()
    done = run(cmd, threads=threads)
    assert done.returncode == 0, tail(done)
    m = Manifest.load(stage_dir)
    assert m.status == "complete" and m.verify_checkpoint() == []
    assert m.data["resumes"][-1]["from_status"] == "running"
    assert not list(stage_dir.rglob("*.tmp")), "a temporary file of the killed run was left behind"
    return m


def copy_chain(src_root: Path, dst_root: Path, name: str, stages_: tuple[str, ...]) -> Path:
    for stage in stages_:
        shutil.copytree(src_root / "tiny" / stage, dst_root / name / stage)  # manifests keep naming the originals
    return dst_root / name


def logged_steps(path: Path) -> list[int]:
    return [row["step"] for row in read_jsonl_tolerant(path) if "loss" in row or "reward" in row]


# -- base: the tiny model's pretraining, save, probe and manifest --------------------------------


@pytest.mark.parametrize("fault", [
    "pretrain_step@10",
    pytest.param("save:checkpoint", marks=slow),
    pytest.param("generate@1", marks=slow),  # the probe
    pytest.param("write:manifest.json:complete", marks=slow),
])
def test_base(chain, tmp_path, fault):  # noqa: F811
    root = chain[0]
    d = tmp_path / "tiny" / "base"
    m = kill_then_resume(cli("base", tmp_path, "tiny"), d, fault)
    assert m.data["metrics"]["pretrain"]["loss_curve"] == Manifest.load(root / "tiny" / "base").data["metrics"]["pretrain"]["loss_curve"]
    digest = [weights_digest(load_model_and_tokenizer(str(r / "tiny" / "base" / "checkpoint"), device="cpu",
                                                      trust_remote_code=False)[0]) for r in (root, tmp_path)]
    assert digest[0] == digest[1]  # the rebuilt base is the uninterrupted one, bit for bit


# -- stage 1: GRPO (8 steps, a checkpoint every 2) -----------------------------------------------


def partial_checkpoint_left(d: Path, step: int):
    def check():
        partial = d / "trainer" / f"checkpoint-{step}"
        assert partial.is_dir() and not (partial / "trainer_state.json").exists()  # weights, no state
        assert last_complete_checkpoint(d / "trainer").name == f"checkpoint-{step - 2}"
    return check


LORA = "stage1.lora={r: 4, alpha: 8, dropout: 0.0}"


@pytest.mark.parametrize("fault,extra", [
    ("trainer_save@2", None),
    ("write:manifest.json:complete", None),
    pytest.param("reward@3", None, marks=slow),  # between a step's generation and its loss
    pytest.param("optimizer_step@5", None, marks=slow),
    pytest.param("generate@2", None, marks=slow),  # the evaluation after training
    pytest.param("save:checkpoint", None, marks=slow),  # the last checkpoint-N is complete: no step more
    pytest.param("save:checkpoint", LORA, marks=slow),  # ... and holds only the adapter
])
def test_stage1(chain, tmp_path, fault, extra):  # noqa: F811
    root = copy_chain(chain[0], tmp_path, "s1", ("base",))
    d = root / "stage1"
    check = partial_checkpoint_left(d, 4) if fault == "trainer_save@2" else None
    m = kill_then_resume(cli("stage1", tmp_path, "s1", *([extra] if extra else [])), d, fault, check)
    assert m.data["metrics"]["train"]["steps"] == 8
    assert logged_steps(d / "metrics.jsonl") == list(range(1, 9))  # each step once, none lost
    assert json.loads((d / "trainer" / "checkpoint-8" / "trainer_state.json").read_text())["global_step"] == 8
    if fault == "trainer_save@2":
        assert m.data["resumes"][-1]["from_step"] == 2  # the half-saved checkpoint-4 was not loaded
    assert "eval_before" in m.data["metrics"] and "eval_after" in m.data["metrics"]


# -- stage 2: the cold-start set and its SFT (20 epochs of 2 steps, a checkpoint every 2) ---------


def stage2_cmd(chain, tmp_path):  # noqa: F811
    root = copy_chain(chain[0], tmp_path, "s2", ("base", "stage1"))
    user = chain[1]
    cmd = cli("stage2", tmp_path, "s2", "stage2.sft.epochs=20",
              f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}")
    return cmd, root / "stage2"


@pytest.mark.parametrize("fault", [
    "optimizer_step@7",
    pytest.param("trainer_save@3", marks=slow),
    pytest.param("write:cold_start.jsonl", marks=slow),
    pytest.param("save:checkpoint", marks=slow),
    pytest.param("write:manifest.json:complete", marks=slow),
])
def test_stage2(chain, tmp_path, fault):  # noqa: F811
    cmd, d = stage2_cmd(chain, tmp_path)
    m = kill_then_resume(cmd, d, fault)
    sft = m.data["metrics"]["sft_checkpoint"]
    assert sft["steps"] == 40
    if fault == "optimizer_step@7":
        assert sft["resumed_from_step"] == 6  # the last checkpoint before the kill: its 6 steps not redone
    assert logged_steps(d / "checkpoint_metrics.jsonl") == sorted(set(logged_steps(d / "checkpoint_metrics.jsonl")))
    assert len(read_jsonl(d / "cold_start.jsonl")) == m.data["metrics"]["cold_start"]["kept"] == 6


# -- stages 3, 4 and distillation: from a chain built once ---------------------------------------


@pytest.fixture(scope="module")
def chain3(chain, tmp_path_factory):  # noqa: F811
    """<tmp>/c3/{base,stage1,stage2} complete (stage 2 in-process)."""
    from tests.micro import chain_recipe

    tmp = tmp_path_factory.mktemp("c3")
    r = chain_recipe(chain, tmp, "tiny", MICRO4)
    assert run_stage(r, "stage2", stages.stage2_cold_start.run).status == "complete"
    return tmp


@pytest.mark.parametrize("fault", ["reward@2", pytest.param("trainer_save@1", marks=slow)])
def test_stage3(chain3, tmp_path, fault):
    root = copy_chain(chain3, tmp_path, "s3", ("base", "stage1", "stage2"))
    m = kill_then_resume(cli("stage3", tmp_path, "s3"), root / "stage3", fault)
    assert m.data["metrics"]["train"]["steps"] == 2
    assert logged_steps(root / "stage3" / "metrics.jsonl") == [1, 2]


def completed(root: Path, stage: str) -> Path:
    """``root`` after running ``stage`` of its chain to completion through the CLI."""
    done = run(cli(stage, root, "tiny"))
    assert done.returncode == 0, tail(done)
    return root


@pytest.fixture(scope="module")
def chain4(chain3):
    """... and stage 3."""
    return completed(chain3, "stage3")


@pytest.mark.parametrize("fault", [
    "write:shard-00001.jsonl",  # rejection sampling: the second shard's file, before its rename
    pytest.param("write:sft_mix.jsonl", marks=slow),
    pytest.param("generate@1", marks=slow),  # the SFT model's answers sampled for the reward models' pairs
    "optimizer_step@2",  # the SFT on the mix
    "save:rm_helpfulness",  # the first reward model, while the second trains beside it
    "reward@2",  # the final RL's second step
    pytest.param("write:manifest.json:complete", marks=slow),
])
def test_stage4(chain4, tmp_path, fault):
    root = copy_chain(chain4, tmp_path, "s4", ("base", "stage1", "stage2", "stage3"))
    d = root / "stage4"
    m = kill_then_resume(cli("stage4", tmp_path, "s4"), d, fault)
    metrics = m.data["metrics"]
    assert all(v["status"] == "complete" for v in metrics["substeps"].values())
    assert metrics["rejection"]["prompts"] == 12 and metrics["rejection"]["kept"] == 12
    assert sorted(p.name for p in (d / "rejection").glob("shard-*.jsonl")) == [f"shard-0000{i}.jsonl" for i in range(3)]
    kept = read_jsonl(d / "reasoning_sft.jsonl")
    assert len(kept) == 12 and len({r["id"] for r in kept}) == 12  # no shard lost, none sampled twice
    assert metrics["train"]["steps"] == 2 and logged_steps(d / "metrics.jsonl") == [1, 2]


@pytest.fixture(scope="module")
def chain5(chain4):
    """... and stage 4."""
    return completed(chain4, "stage4")


@pytest.mark.parametrize("stage,fault", [
    ("distill", "optimizer_step@1"),  # the student's SFT
    pytest.param("distill", "pretrain_step@4", marks=slow),  # the student's own pretraining
    pytest.param("distill", "save:sft", marks=slow),
    ("distill_rl", "reward@1"),
])
def test_distill(chain5, tmp_path, stage, fault):
    root = copy_chain(chain5, tmp_path, "d", ("base", "stage1", "stage2", "stage3", "stage4"))
    if stage == "distill_rl":
        assert run(cli("distill", tmp_path, "d")).returncode == 0
    m = kill_then_resume(cli(stage, tmp_path, "d"), root / stage, fault)
    if stage == "distill":
        assert m.data["metrics"]["students"]["s1"]["sft"]["rows"] == 16
    else:
        assert m.data["metrics"]["train"]["steps"] == 2


@slow  # a whole `r1 pipeline` from stage 4 on, twice (make faults)
def test_pipeline_killed_while_side_work_runs(chain4, tmp_path):
    """`r1 pipeline` killed in stage 4's SFT while the student's base is being built beside it: the side
    process dies with it (no orphan), and the rerun builds the base again beside the resumed SFT; distill
    adopts it, the same weights as a base built in the stage."""
    from stages.distill import _build_student_base, _student_recipe, prebuilt_dir
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.threads import part_threads

    root = copy_chain(chain4, tmp_path, "p", ("base", "stage1", "stage2", "stage3"))
    cmd = cli("pipeline", tmp_path, "p")
    recipe_json = str(tmp_path / "p" / ".prebuilt" / "recipe.json")

    def no_side_process_left():
        assert (tmp_path / "p" / ".prebuilt" / "build.log").is_file()  # the side work had started
        deadline = time.time() + 5
        while any(recipe_json in cmdline for cmdline in command_lines()) and time.time() < deadline:
            time.sleep(0.1)  # the kernel's SIGKILL of the orphan is asynchronous
        assert not any(recipe_json in cmdline for cmdline in command_lines()), "the side work outlived the stage"

    m = kill_then_resume(cmd, root / "stage4", "optimizer_step@2", on_killed=no_side_process_left,
                         threads={"R1_THREADS": "2"})
    # R1_THREADS=2 fixes distill_rl's count at 2, not the recipe's 1: no training of the control beside stage 4
    side = m.data["metrics"]["side_work"]
    assert list(side) == ["distill"] and side["distill"]["exit_code"] == 0 and m.data["metrics"]["part_threads"]["sft"] == 1
    student = Manifest.load(root / "distill").data["metrics"]["students"]["s1"]
    assert student["pretrain"]["built"] == "beside stage4.sft (side work)"
    control = Manifest.load(root / "distill_rl")
    assert control.status == "complete" and "built" not in control.data["metrics"]["train"]
    r = load_recipe("tiny", [f"run_root={tmp_path}", "name=p", *MICRO, *MICRO23, *MICRO4, "stage1.steps=8"])
    assert not prebuilt_dir(r, r.distill.students[0]).exists()
    with part_threads(1):
        _build_student_base(_student_recipe(r, r.distill.students[0]), tmp_path / "here")
    assert (tmp_path / "here" / "model.safetensors").read_bytes() == \
        (root / "distill" / "s1" / "base" / "model.safetensors").read_bytes()


def command_lines() -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, NotADirectoryError):
            continue
    return out
