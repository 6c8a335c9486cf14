"""The shared stage runner: one lifecycle for every stage.

    parent manifest checked → manifest "running" → stage body → checkpoint hashed → "complete"

A ``complete`` stage is not run again unless ``restart`` is given; an incomplete one (``running`` after a
crash, or ``failed``) is resumed by default, and ``restart`` sets the previous run aside until the new one
completes. One run per stage folder (an ``flock`` on ``.<stage>.lock``). An exception marks the manifest
``failed``; a SIGKILL leaves ``running``, never ``complete``. Before the body, the stage fixes torch's
thread count and the CPU sampler's processes (``stages/pipeline/threads.py``). Under several processes only
the main one writes. The rules in full: docs/architecture.md, stages/pipeline/runner.py.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from data import timing
from eval.decode import set_sample_processes
from stages.pipeline import cards
from stages.pipeline.common import barrier, init_distributed, is_main, peak_rss_mb, rank, world_size
from stages.pipeline.manifest import MANIFEST_NAME, Manifest, ManifestError, require_parent
from stages.pipeline.threads import core_speed, cores, fix_threads, part_threads

log = logging.getLogger("r1")
STEP_LOG = "r1.steps"  # the logger of every trainer's per-step rows: the stage's log file, not the terminal
_first_stage_of_process = True

# The stage table: stage → (module[:function] of its body, the stage it builds on). A stage's parent is
# declared here and nowhere else: run_stage checks it (require_parent) before the body runs.
STAGES: dict[str, tuple[str, str | None]] = {
    "base": ("stages.base", None),
    "stage1": ("stages.stage1_zero", "base"),
    "stage2": ("stages.stage2_cold_start", "stage1"),
    "stage3": ("stages.stage3_reasoning_rl", "stage2"),
    "stage4": ("stages.stage4_final", "stage3"),
    "distill": ("stages.distill", "stage4"),
    "distill_rl": ("stages.distill:run_control", "distill"),  # the RL-only control of distillation
}
PIPELINE_ORDER = [s for s in STAGES if s != "distill_rl"]  # the main line; distill_rl is a control

# The parts of a stage the recipe's ``threads`` may name (``stage4.sft``): each runs on its own thread count
# (``stages.pipeline.threads.part_threads``), whatever else runs beside it.
STAGE_PARTS: dict[str, tuple[str, ...]] = {
    "stage4": ("rejection", "sft", "reward_models", "final_rl"),
    "distill": ("student_base",),
}

# Side work (``stages.pipeline.threads.SideJob``): while parts of ``stage`` leave a core free, a later stage's
# independent work runs in a second process, when that later stage runs in the same command (``r1
# pipeline``). stage → {name: (the later stage, ``module:function`` giving the job, or None when nothing is
# left to do)}; the name is what ``side_work`` asks for and the manifest records.
SIDE_WORK: dict[str, dict[str, tuple[str, str]]] = {
    "stage4": {
        "distill": ("distill", "stages.distill:student_bases_job"),  # the student's base needs only the corpus
        "distill_rl": ("distill_rl", "stages.distill:control_job"),  # the control's RL needs only the student's base
        "distill_sft": ("distill", "stages.distill:student_sft_job"),  # the students' SFT needs only the SFT mix
    },
}


@dataclass
class StageContext:
    """What a stage body gets: where to write, its manifest, its parent, and whether it resumes."""

    recipe: object
    stage: str
    dir: Path
    manifest: Manifest
    parent: Manifest | None
    resumed: bool
    # Results that another run measured already and that this one may take instead of measuring them
    # again (``stages/commands/findings.py``: the before-training evaluation of the same model, rows and protocol).
    reuse: dict = field(default_factory=dict)
    # Later stages' independent work, to run while parts of this stage leave a core free (:func:`side_work`):
    # the side work's name (:data:`SIDE_WORK`) → a function of the recipe that returns a started ``SideJob`` or None.
    side_work: dict[str, Callable] = field(default_factory=dict)
    # The body took a later stage's work done beside an earlier one instead of doing it (distill_rl's
    # training): ``stages.training.skeleton.begin`` treats it as finished, as for a resumed run.
    adopted: bool = False
    # r1 base --rebuild: pretrain the tiny base from scratch and write the releases (stages/release.py)
    rebuild: bool = False


@contextmanager
def stage_part(ctx: StageContext, part: str):
    """``with stage_part(ctx, "sft"):`` runs the block on the recipe's thread count for ``<stage>.<part>``
    (``threads``; else the stage's), and records it in the manifest."""
    with part_threads(part_count(ctx, part)):
        ctx.manifest.data["metrics"].setdefault("part_threads", {})[part] = torch.get_num_threads()
        yield


def part_count(ctx: StageContext, part: str) -> int | None:
    """The recipe's thread count for ``<stage>.<part>`` (None: the stage's)."""
    if part not in STAGE_PARTS.get(ctx.stage, ()):
        raise ValueError(f"{ctx.stage} has no part {part!r} (stages.pipeline.runner.STAGE_PARTS)")
    return ctx.recipe.threads.get(f"{ctx.stage}.{part}")


def stage_threads(recipe, stage: str) -> int | None:
    """The recipe's thread count for ``stage``: its own, else ``default`` (None: torch's default)."""
    return recipe.threads.get(stage, recipe.threads.get("default"))


def stage_sample_processes(recipe, stage: str) -> int | None:
    """The recipe's count of CPU sampling processes for ``stage`` (``sample_processes``: one count, or a
    mapping by stage with a ``default``); None: one per torch thread."""
    counts = recipe.sample_processes
    return counts.get(stage, counts.get("default")) if isinstance(counts, dict) else counts


@contextmanager
def side_work(ctx: StageContext, name: str, parts: tuple[str, ...], *, pending: bool = True):
    """``with side_work(ctx, "distill", ("sft",)):`` around those parts of the stage: when every one of them
    leaves a core free (its count in the recipe's ``threads`` is below the machine's cores) and the command runs
    the later stage the side work ``name`` serves afterwards (:attr:`StageContext.side_work`), that work runs
    meanwhile in another process (:data:`SIDE_WORK`). The block's end waits for it; a failure in the block
    stops it. ``pending=False`` (the parts are done already and will be skipped) asks for none. The counts
    come from the recipe, not from whether side work runs, so the stage computes the same numbers either way.
    The manifest records what ran (``metrics.side_work.<name>``)."""
    job, start = None, ctx.side_work.get(name)
    counts = [part_count(ctx, p) or torch.get_num_threads() for p in parts]
    if pending and start is not None and max(counts) < cores() and is_main() and world_size() == 1:
        job = start(ctx.recipe)
    try:
        yield
    except BaseException:
        if job is not None:
            job.stop()
        raise
    if job is not None:
        ctx.manifest.data["metrics"].setdefault("side_work", {})[name] = {
            **job.finish(), "during": " + ".join(f"{ctx.stage}.{p}" for p in parts)}
        ctx.manifest.save()


def _not_news(record: logging.LogRecord) -> bool:
    """transformers' notice that it sorts checkpoints by number, not mtime: the tiny model's checkpoints come
    less than a second apart, so it always does, in the right order; no news to a user. One function, so
    that the logger keeps one filter however often :func:`setup_logging` runs."""
    return "mtime may not be reliable" not in record.getMessage()


def setup_logging(log_file: Path | None = None) -> None:
    """The project's lines on the terminal and in ``log_file``; trainers' per-step rows (logger
    :data:`STEP_LOG`: ``stages.training.skeleton.StepProgress``) in the file only."""
    from transformers.utils import logging as hf_logging


    terminal = logging.StreamHandler(sys.stdout)
    terminal.addFilter(lambda record: not record.name.startswith(STEP_LOG))
    handlers: list[logging.Handler] = [terminal]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S", handlers=handlers, force=True)
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # transformers' bars for loading and saving a checkpoint ("Loading weights", "Writing model shards"): one
    # per evaluation and checkpoint, each done in a blink on the tiny model; the stages' own bars say more
    hf_logging.disable_progress_bar()
    import datasets

    datasets.disable_progress_bars()  # TRL's dataset preparation (templating, tokenizing): seconds, several bars
    logging.getLogger("transformers.trainer_utils").addFilter(_not_news)


def run_stage(recipe, stage: str, body: Callable[[StageContext], Path | str | None], *,
              restart: bool = False, stage_dir: Path | None = None, parent_dir: Path | None = None,
              reuse: dict | None = None, side_work: dict[str, Callable] | None = None,
              rebuild: bool = False) -> Manifest:
    """Run ``body`` as stage ``stage`` of ``recipe`` under the manifest lifecycle, after checking the
    parent the stage table (:data:`STAGES`) names: its manifest is complete, of that stage, and its
    checkpoint unchanged.

    ``body`` returns the output checkpoint folder (hashed into the manifest) or a model reference
    string (a hub id) or None. ``stage_dir``/``parent_dir`` put the run and find its parent elsewhere
    than the recipe's ``runs/<recipe>/<stage>`` (the findings' extra seeds and variants). ``side_work``:
    see :attr:`StageContext.side_work` (:func:`side_work_for` gives a stage's). ``rebuild``: the base
    stage pretrains from scratch and writes the recipe's releases (``r1 base --rebuild``; implies ``restart``).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    check_threads_keys(recipe.threads, recipe.sample_processes)
    parent_stage = STAGES[stage][1]
    init_distributed(recipe.launch.timeout_minutes)
    stage_dir = Path(stage_dir) if stage_dir is not None else recipe.stage_dir(stage)
    if is_main():
        lock_stage(stage_dir)  # a second run of the same stage folder refuses, naming the first one's process
    try:
        return _run_locked(recipe, stage, body, stage_dir, parent_stage, restart or rebuild, parent_dir, reuse,
                           side_work, rebuild)
    finally:
        unlock_stage(stage_dir)


def check_threads_keys(threads: dict, sample_processes=None) -> None:
    """The recipe's ``threads`` names stages and parts of stages that exist, and ``sample_processes`` (as a
    mapping) stages."""
    known = ["default", *STAGES, *(f"{s}.{p}" for s, parts in STAGE_PARTS.items() for p in parts)]
    unknown = sorted(set(threads) - set(known))
    if unknown:
        raise ValueError(f"threads: unknown stage or part {', '.join(unknown)}; known: {', '.join(known)}")
    unknown = sorted(set(sample_processes or {}) - {"default", *STAGES}) if isinstance(sample_processes, dict) else []
    if unknown:
        raise ValueError(f"sample_processes: unknown stage {', '.join(unknown)}; known: default, {', '.join(STAGES)}")


def side_work_for(stage: str, later: list[str]) -> dict[str, Callable]:
    """The side work :data:`SIDE_WORK` gives ``stage`` for the stages among ``later`` (those the same
    command runs afterwards): its name → the function that starts it."""
    import importlib

    jobs = {}
    for name, (serves, where) in SIDE_WORK.get(stage, {}).items():
        if serves in later:
            module, _, function = where.partition(":")
            jobs[name] = getattr(importlib.import_module(module), function)
    return jobs


def _open(recipe, stage: str, stage_dir: Path, restart: bool) -> Manifest | bool:
    """The stage folder before a run: its manifest when the stage is already complete; else whether the run
    resumes an incomplete one (``--restart`` sets the previous run aside, put back if the new one fails)."""
    manifest_path = stage_dir / MANIFEST_NAME
    if manifest_path.exists() and not restart:
        try:
            existing = Manifest.load(manifest_path)
        except ManifestError as e:
            raise ManifestError(f"{e}. Run again with --restart to discard this run") from None
        if existing.status == "complete":
            log.info("%s: already complete (%s); use --restart to run it again", stage, manifest_path)
            return existing
        log.info("%s: resuming an incomplete run (status %r)", stage, existing.status)
        if is_main():
            remove_temporaries(stage_dir)
        return True
    elif restart and stage_dir.exists() and is_main():
        # not deleted yet: moved aside to .<stage>.previous, deleted once the new run completes, and put
        # back if it fails (a restart given a bad dataset or model loses nothing)
        aside = previous_dir(stage_dir)
        inside_run_folder(stage_dir, recipe)
        if _complete(aside) and not _complete(stage_dir):
            # an earlier --restart was killed: the complete run it set aside stays there (the run in
            # stage_dir is that killed restart's, which this restart replaces)
            log.info("%s: --restart: keeping the complete run set aside in %s; discarding the incomplete run "
                     "in %s", stage, aside, stage_dir)
            shutil.rmtree(stage_dir)
        else:
            log.info("%s: --restart: moving the previous run aside to %s until this one completes", stage, aside)
            shutil.rmtree(aside, ignore_errors=True)
            stage_dir.rename(aside)
    return False


def _finish(recipe, stage: str, stage_dir: Path, manifest: Manifest, output) -> None:
    """A stage's body returned ``output`` (its checkpoint, a registered model's folder or hub id, or None):
    model card and datasets, the manifest completed, the hub push the recipe asks for, the set-aside run gone."""
    manifest_path = stage_dir / MANIFEST_NAME
    hub_id = isinstance(output, str) and not Path(output).exists()
    # a checkpoint this stage wrote (not a registered model's own folder, not a hub id)
    ours = output is not None and not hub_id and stage_dir.resolve() in Path(output).resolve().parents
    if is_main() and ours:  # the hub-ready outputs: a model card, hashed with the checkpoint; the curated sets
        cards.write_model_card(Path(output), manifest)
        cards.export_datasets(stage_dir, manifest)
    if hub_id:
        manifest.data["output"]["model_ref"] = output  # nothing local to hash
        manifest.complete(None)
    else:
        manifest.complete(output)
    log.info("%s: complete → %s", stage, manifest_path)
    if is_main() and ours and recipe.hub.push_to_hub:  # the stage is complete whatever the hub says
        repo = f"{recipe.hub.repo_prefix}-{stage.replace('_', '-')}"
        try:
            cards.push(stage_dir, repo, private=recipe.hub.private)
        except Exception as e:  # noqa: BLE001 - a network or permission error: said, and the run goes on
            log.error("%s: pushing to the hub failed (%s: %s); `r1 push %s %s` tries again", stage,
                      type(e).__name__, e, stage, repo)
    if is_main() and previous_dir(stage_dir).exists():
        shutil.rmtree(previous_dir(stage_dir), ignore_errors=True)  # the run --restart replaced


def _run_locked(recipe, stage, body, stage_dir: Path, parent_stage, restart, parent_dir, reuse,
                side_work, rebuild) -> Manifest:
    if parent_stage:
        parent = require_parent(Path(parent_dir) if parent_dir is not None else recipe.stage_dir(parent_stage),
                                parent_stage, parent_stage)
    else:
        parent = None

    opened = _open(recipe, stage, stage_dir, restart)
    if isinstance(opened, Manifest):  # already complete
        return opened
    resumed = opened
    barrier()

    setup_logging(stage_dir / ("stage.log" if is_main() else f"stage.rank{rank()}.log"))
    manifest = Manifest.start(stage_dir, stage, recipe, parent=parent, resumed=resumed)
    ctx = StageContext(recipe, stage, stage_dir, manifest, parent, resumed, dict(reuse or {}), dict(side_work or {}),
                       rebuild=rebuild)
    threads = fix_threads(stage_threads(recipe, stage))  # the recipe's, for the whole stage: stages/pipeline/threads.py
    threads["sample_processes"] = set_sample_processes(stage_sample_processes(recipe, stage))
    speed = {"start": core_speed()}  # the machine's speed, to compare this stage's minutes with other runs'
    manifest.update_metrics(threads=threads, core_gflops=speed)
    log.info("%s: %d torch thread(s), %d sampling process(es) on %d cores (%s%s)", stage, threads["threads"],
             threads["sample_processes"], threads["cores"], threads["chosen_by"],
             f"; other processes busy on {threads['busy_elsewhere']} cores" if threads.get("busy_elsewhere") else "")
    global _first_stage_of_process
    startup = timing.process_age() if _first_stage_of_process else 0.0  # interpreter, imports, recipe
    _first_stage_of_process = False
    timing.reset()
    t0 = time.time()
    try:
        output = body(ctx)
    except BaseException as e:  # KeyboardInterrupt too: the run is incomplete, say so
        manifest.data["metrics"]["wall_seconds"] = time.time() - t0
        manifest.fail(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
        aside = previous_dir(stage_dir)
        if restart and is_main() and aside.exists():  # the restart failed: the previous run comes back
            log.error("%s: the restarted run failed (%s); restoring the previous run from %s", stage, e, aside)
            shutil.rmtree(stage_dir, ignore_errors=True)
            aside.rename(stage_dir)
        raise
    wall = time.time() - t0
    kinds = timing.snapshot()
    kinds["other"] = round(max(0.0, wall - sum(kinds.values())), 1)
    if startup:
        kinds["startup"] = round(startup, 1)
    speed["end"] = core_speed()
    manifest.update_metrics(wall_seconds=round(wall, 1), peak_rss_mb=round(peak_rss_mb(), 1), time_by_kind=kinds,
                            core_gflops=speed)
    _finish(recipe, stage, stage_dir, manifest, output)
    barrier()  # the other processes leave only once the main one has written everything
    return manifest


# -- One run per stage folder, and deletions inside the run folder only -------------------------------

_locks: dict[Path, object] = {}


class StageBusy(ValueError):
    """Another process is running the same stage folder."""


def lock_path(stage_dir: Path) -> Path:
    return Path(stage_dir).parent / f".{Path(stage_dir).name}.lock"


def _complete(stage_dir: Path) -> bool:
    """Whether ``stage_dir`` holds a run whose manifest says complete."""
    try:
        return Manifest.load(stage_dir).status == "complete"
    except (ManifestError, OSError, ValueError):
        return False


def previous_dir(stage_dir: Path) -> Path:
    return Path(stage_dir).parent / f".{Path(stage_dir).name}.previous"


def lock_stage(stage_dir: Path) -> None:
    """Take the exclusive lock of ``stage_dir`` (an ``flock`` on ``.<stage>.lock`` beside it, holding the
    PID), or raise :class:`StageBusy` naming the process that holds it. The kernel releases the lock when
    the process ends, however it ends: a SIGKILL leaves no stale lock."""
    import fcntl
    import os

    path = lock_path(stage_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the stage's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise StageBusy(f"{stage_dir}: this stage is already running in process {holder} (lock {path}); wait for "
                        "it to finish or stop it, then run again") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _locks[Path(stage_dir)] = handle


def unlock_stage(stage_dir: Path) -> None:
    handle = _locks.pop(Path(stage_dir), None)
    if handle is not None:
        handle.close()  # releases the flock


def running_pid(stage_dir: Path) -> str | None:
    """The PID of the process running ``stage_dir`` now (its lock is held), else None."""
    import fcntl

    path = lock_path(stage_dir)
    if not path.exists() or Path(stage_dir) in _locks:
        return None
    with open(path, encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "?"
        return None


def inside_run_folder(path: Path, recipe) -> None:
    """Refuse to delete or move ``path`` unless it lies inside the recipe's run folder
    (``<run_root>/<name>``): no recipe name or stage folder can point a deletion elsewhere."""
    run_folder = recipe.stage_dir("base").parent.resolve()
    target = Path(path).resolve()
    if target == run_folder or run_folder not in target.parents:
        raise ValueError(f"refusing to discard {target}: it is not inside the run folder {run_folder}")


def remove_temporaries(stage_dir: Path) -> None:
    """Delete the ``.<name>.tmp`` files and folders a killed run left: atomic writes and saves
    (data/jsonl.py, save_model_atomically) write there and rename, so none of them is ever read."""
    for tmp in sorted(stage_dir.rglob(".*.tmp"), reverse=True):  # deepest first
        log.info("removing %s, left by the interrupted run", tmp)
        if tmp.is_dir():
            shutil.rmtree(tmp)
        else:
            tmp.unlink(missing_ok=True)


def model_ref(manifest: Manifest) -> str:
    """The model a manifest's stage produced: its checkpoint folder, or the hub id it recorded."""
    return manifest.checkpoint or manifest.data["output"].get("model_ref")


def base_of(stage_manifest: Manifest) -> str:
    """The base model a stage's chain started from: the model of the ``base`` manifest upstream
    (stage 2 and stage 4 fine-tune the base, not their parent, as the paper does)."""
    m = stage_manifest
    while m.stage != "base":
        parent = m.data.get("parent")
        if not parent:
            raise ValueError(f"{m.path}: no parent recorded, cannot find the base model")
        m = require_parent(m.parent_path.parent, parent["stage"], parent["stage"])
    ref = model_ref(m)
    if not ref:
        raise ValueError(f"{m.path}: the base manifest records no model")
    return ref
