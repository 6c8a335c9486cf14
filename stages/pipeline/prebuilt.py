"""Work done ahead in a side process (``stages.pipeline.threads.SideJob``) and taken by the stage that needs it.

A side process trains into ``runs/<recipe>/.prebuilt/<name>/run`` (a scratch stage folder with its own
manifest) and writes ``build.json`` last, holding what the work depended on: the recipe's hash, its thread
count, the hashes of its input model and data. The stage that needs the work takes it (:func:`adopt`) only
when every one of those is what it would use itself, so that the files it copies in are the ones it would
have written, bit for bit (one thread, seeded); anything else is removed and the stage does the work itself.
Users: stage 4's second reward model, distill's students' SFT, distill_rl's control (the student's base,
built beside stage 4's SFT where it is not released, keeps its own record in ``stages/distill.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from data.jsonl import atomic_write_json
from stages.pipeline.manifest import MANIFEST_NAME, Manifest
from stages.pipeline.runner import StageContext

log = logging.getLogger("r1")
INFO = "build.json"
NOT_COPIED = (MANIFEST_NAME, "stage.log")  # the scratch stage's own records; its outputs are copied


def _not_copied(_folder: str, names: list[str]) -> list[str]:
    """What is not copied: the scratch stage's records, the trainers' checkpoint folders (``*trainer``),
    hidden files."""
    return [n for n in names if n in NOT_COPIED or n.endswith("trainer") or n.startswith(".")]


def folder(recipe, name: str) -> Path:
    """``runs/<recipe>/.prebuilt/<name>``: where a side process leaves one piece of work."""
    return recipe.stage_dir("base").parent / ".prebuilt" / name


def write_recipe_json(recipe) -> Path:
    """The resolved recipe, for the side process (JSON, which ``load_recipe`` reads as YAML)."""
    path = recipe.stage_dir("base").parent / ".prebuilt" / "recipe.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, recipe.to_dict())
    return path


def scratch_stage(recipe, stage: str, name: str) -> StageContext:
    """A fresh scratch stage folder (``<folder>/run``) for the side process's work; a stale or half-done
    one is removed first."""
    where = folder(recipe, name)
    shutil.rmtree(where, ignore_errors=True)
    run = where / "run"
    run.mkdir(parents=True)
    return StageContext(recipe, stage, run, Manifest.start(run, stage, recipe), None, False)


def finish(ctx: StageContext, metric_keys: list[str], **depends) -> None:
    """The side process's last act: ``build.json`` with what the work ``depends`` on and the scratch
    manifest's ``metric_keys`` (the records the stage takes with the files). Written atomically: a killed
    side process leaves none, and its work is not taken."""
    metrics = ctx.manifest.data["metrics"]
    atomic_write_json(Path(ctx.dir).parent / INFO, {
        "recipe_hash": ctx.recipe.hash(), **depends, "metrics": {k: metrics[k] for k in metric_keys if k in metrics}})


def done(recipe, name: str, **depends) -> dict | None:
    """``build.json`` of complete work of this recipe whose dependencies are ``depends``, else None."""
    path = folder(recipe, name) / INFO
    if not path.is_file():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    same = info.get("recipe_hash") == recipe.hash() and all(info.get(k) == v for k, v in depends.items())
    return info if same and (path.parent / "run").is_dir() else None


def adopt(ctx: StageContext, name: str, what: str, **depends) -> dict | None:
    """Take the work in ``.prebuilt/<name>`` if it is what this stage would do (:func:`done`): its files
    copied into the stage folder (copied, not moved: a run killed here copies again), its metrics into the
    manifest (the stage records its inputs itself), the folder removed; returns its ``build.json``. None (and the folder
    removed) when there is none, or a partial or different one."""
    info, where = done(ctx.recipe, name, **depends), folder(ctx.recipe, name)
    if info is None:
        if where.exists():
            log.info("%s: %s holds no complete work of this recipe and these inputs; "
                                         "doing it here", what, where)
        shutil.rmtree(where, ignore_errors=True)
        return None
    # merged into the stage folder (a student's folder holds its base)
    shutil.copytree(where / "run", ctx.dir, ignore=_not_copied, dirs_exist_ok=True)
    ctx.manifest.update_metrics(**{k: {**v, "built": "side work"} if isinstance(v, dict) else v
                        for k, v in info["metrics"].items()})
    shutil.rmtree(where, ignore_errors=True)
    return info
