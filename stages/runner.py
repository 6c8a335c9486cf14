"""The shared stage runner: one lifecycle for every stage.

    parent manifest checked → manifest "running" → stage body → checkpoint hashed → "complete"

- A stage whose manifest is already ``complete`` is not run again unless ``restart`` is given.
- An incomplete run (``running`` after a crash or SIGKILL, or ``failed``) is resumed by default,
  and the resume is recorded in the manifest; ``restart`` discards it and starts over.
- Any exception marks the manifest ``failed`` with the error, then propagates. A SIGKILL leaves
  ``running``: never ``complete``, because ``complete`` is the last thing a stage writes.
- Before the body, the stage fixes torch's thread count to the cores other processes leave free
  (``stages/threads.py``) and records it in ``metrics.threads``.
- Under several processes (``scripts/launch``) every process runs the body; only the main one writes
  the manifest and the outputs (``stages.common``), the others wait at barriers.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from data import timing
from stages.common import barrier, init_distributed, is_main, peak_rss_mb, rank
from stages.manifest import MANIFEST_NAME, Manifest, ManifestError, require_parent
from stages.threads import choose_threads

log = logging.getLogger("r1")
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
    # again (``stages/findings.py``: the before-training evaluation of the same model, rows and protocol).
    reuse: dict = field(default_factory=dict)


def setup_logging(log_file: Path | None = None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S", handlers=handlers, force=True)
    for noisy in ("httpx", "urllib3", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_stage(recipe, stage: str, body: Callable[[StageContext], Path | str | None], *,
              restart: bool = False, stage_dir: Path | None = None, parent_dir: Path | None = None,
              reuse: dict | None = None) -> Manifest:
    """Run ``body`` as stage ``stage`` of ``recipe`` under the manifest lifecycle, after checking the
    parent the stage table (:data:`STAGES`) names: its manifest is complete, of that stage, and its
    checkpoint unchanged.

    ``body`` returns the output checkpoint folder (hashed into the manifest) or a model reference
    string (a hub id) or None. ``stage_dir``/``parent_dir`` put the run and find its parent elsewhere
    than the recipe's ``runs/<recipe>/<stage>`` (the findings' extra seeds and variants).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    parent_stage = STAGES[stage][1]
    init_distributed(recipe.launch.timeout_minutes)
    stage_dir = Path(stage_dir) if stage_dir is not None else recipe.stage_dir(stage)
    if parent_stage:
        parent = require_parent(Path(parent_dir) if parent_dir is not None else recipe.stage_dir(parent_stage),
                                parent_stage, parent_stage)
    else:
        parent = None

    manifest_path = stage_dir / MANIFEST_NAME
    resumed = False
    if manifest_path.exists() and not restart:
        try:
            existing = Manifest.load(manifest_path)
        except ManifestError as e:
            raise ManifestError(f"{e}. Run again with --restart to discard this run") from None
        if existing.status == "complete":
            log.info("%s: already complete (%s); use --restart to run it again", stage, manifest_path)
            return existing
        resumed = True
        log.info("%s: resuming an incomplete run (status %r)", stage, existing.status)
        if is_main():
            remove_temporaries(stage_dir)
    elif restart and stage_dir.exists() and is_main():
        log.info("%s: --restart: discarding %s", stage, stage_dir)
        shutil.rmtree(stage_dir)
    barrier()

    setup_logging(stage_dir / ("stage.log" if is_main() else f"stage.rank{rank()}.log"))
    manifest = Manifest.start(stage_dir, stage, recipe, parent=parent, resumed=resumed)
    ctx = StageContext(recipe, stage, stage_dir, manifest, parent, resumed, dict(reuse or {}))
    threads = choose_threads()  # fixed for the stage: see stages/threads.py
    manifest.update_metrics(threads=threads)
    log.info("%s: %d torch threads on %d cores (%s%s)", stage, threads["threads"], threads["cores"],
             threads["chosen_by"], f", other processes busy on {threads['busy_elsewhere']} cores"
             if "busy_elsewhere" in threads else "")
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
        raise
    wall = time.time() - t0
    kinds = timing.snapshot()
    kinds["other"] = round(max(0.0, wall - sum(kinds.values())), 1)
    if startup:
        kinds["startup"] = round(startup, 1)
    manifest.update_metrics(wall_seconds=round(wall, 1), peak_rss_mb=round(peak_rss_mb(), 1), time_by_kind=kinds)
    if isinstance(output, str) and not Path(output).exists():
        manifest.data["output"]["model_ref"] = output  # a hub id: nothing local to hash
        manifest.complete(None)
    else:
        manifest.complete(output)
    log.info("%s: complete → %s", stage, manifest_path)
    barrier()  # the other processes leave only once the main one has written everything
    return manifest


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
        m = require_parent(Path(parent["path"]).parent, parent["stage"], parent["stage"])
    ref = model_ref(m)
    if not ref:
        raise ValueError(f"{m.path}: the base manifest records no model")
    return ref
