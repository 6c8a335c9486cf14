"""Released base models: the tiny default's base and its distillation student's base, kept in the
repository (``recipes/tiny/base/``, ``recipes/tiny/students/<name>/``) as a real recipe names a hub model.

As DeepSeek-R1 starts from a released model (DeepSeek-V3-Base), ``r1 base`` *registers* the release that
``base.release`` names (and distill the one a student's ``release`` names) instead of pretraining. A
release folder is an ordinary checkpoint plus ``release.json``: ``files`` (the sha256 of every other file),
``build_key`` (the hashes of what decides the weights, computed again when registering) and ``built`` (how
it was built). Registering refuses a release that was changed after it was built, or is stale.
``r1 base --rebuild`` (``make rebuild-base``) pretrains from scratch and writes new releases;
``base.release: null`` builds the base in the run folder instead. Details: docs/architecture.md,
stages/release.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

from data.jsonl import atomic_write_json, atomic_write_text
from stages.pipeline.manifest import device_info, git_commit, hash_checkpoint, library_versions, now

log = logging.getLogger("r1")

RELEASE_FILE = "release.json"
REPO = Path(__file__).resolve().parents[1]


def release_path(ref: str) -> Path:
    """A recipe's release folder: an absolute path as it is, a relative one inside the repository (the
    releases ship with it, wherever ``r1`` is run from)."""
    path = Path(ref)
    return path if path.is_absolute() else REPO / path


class ReleaseError(ValueError):
    """A release that cannot be registered: missing, changed after it was built, or stale."""


def rebuild_command(recipe_name: str) -> str:
    return f"make rebuild-base RECIPE={recipe_name}  (r1 base --recipe {recipe_name} --rebuild)"


def read_release(folder: Path, *, field: str, recipe_name: str) -> dict:
    """``folder``'s ``release.json``, checked against the files beside it; :class:`ReleaseError` naming
    ``field`` (the recipe field that points here) when it is missing, unreadable or the files differ."""
    folder = Path(folder)
    info_path = folder / RELEASE_FILE
    if not info_path.is_file():
        raise ReleaseError(f"{field}: {folder} holds no {RELEASE_FILE} (not a released base); build one: "
                           f"{rebuild_command(recipe_name)}, or set {field}=null to build the base in the run folder")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        recorded = dict(info["files"])
        key = dict(info["build_key"])
    except (ValueError, KeyError, TypeError) as e:
        raise ReleaseError(f"{field}: {info_path} is not a release record ({type(e).__name__}: {e}); "
                           f"rebuild it: {rebuild_command(recipe_name)}") from None
    present = {k: v for k, v in hash_checkpoint(folder).items() if k != RELEASE_FILE}
    changed = sorted(k for k in recorded.keys() & present.keys() if recorded[k] != present[k])
    missing, extra = sorted(recorded.keys() - present.keys()), sorted(present.keys() - recorded.keys())
    if changed or missing or extra:
        what = "; ".join(f"{label}: {', '.join(names)}" for label, names in
                         (("changed since it was built", changed), ("missing", missing), ("not in the release", extra))
                         if names)
        raise ReleaseError(f"{field}: the release in {folder} does not match its {RELEASE_FILE} ({what}): refused. "
                           f"Restore it (git checkout -- {folder}) or rebuild it: {rebuild_command(recipe_name)}")
    info["build_key"] = key
    return info


def stale_reasons(recorded: dict, current: dict, recorded_settings: dict | None, current_settings: dict) -> list[str]:
    """Why a release's build key differs from the one this code and recipe give (empty: it does not)."""
    reasons = []
    if recorded.get("corpus_sha256") != current["corpus_sha256"]:
        reasons.append("the corpus this code generates differs from the one it was pretrained on "
                       f"(corpus_sha256 {str(recorded.get('corpus_sha256'))[:12]}… → {current['corpus_sha256'][:12]}…)")
    if recorded.get("tokenizer_sha256") != current["tokenizer_sha256"]:
        reasons.append("the tokenizer this code trains differs from the release's "
                       f"(tokenizer_sha256 {str(recorded.get('tokenizer_sha256'))[:12]}… → "
                       f"{current['tokenizer_sha256'][:12]}…)")
    if recorded.get("settings_sha256") != current["settings_sha256"]:
        diffs = _setting_diffs(recorded_settings or {}, current_settings)
        reasons.append("the recipe's pretraining settings differ from the release's"
                       + (f" ({'; '.join(diffs[:6])}{' …' if len(diffs) > 6 else ''})" if diffs else ""))
    return reasons


def _setting_diffs(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(old.keys() | new.keys()):
        a, b = old.get(k), new.get(k)
        name = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _setting_diffs(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: {a!r} → {b!r}")
    return out


def register_release(folder: Path, recipe, target: Path, *, field: str) -> dict:
    """Check the release in ``folder`` (files, then build key against ``recipe``, the recipe the base is
    built with) and copy it to ``target`` (atomically: a partial copy never has the final name). Returns
    what the manifest records of it. Raises :class:`ReleaseError` before anything is written."""
    from stages.training.pretrain import build_key, build_settings, corpus_and_tokenizer

    folder = Path(folder)
    info = read_release(folder, field=field, recipe_name=recipe.name)
    docs, tokenizer = corpus_and_tokenizer(recipe)
    key = build_key(recipe, docs, tokenizer)
    reasons = stale_reasons(info["build_key"], key, info.get("settings"), build_settings(recipe))
    if reasons:
        raise ReleaseError(f"{field}: the release in {folder} is stale, not the base this code and recipe would "
                           f"build: {'; '.join(reasons)}. Rebuild it: {rebuild_command(recipe.name)}; or set "
                           f"{field}=null to build this recipe's base in the run folder only")
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    built = info.get("built", {})
    log.info("registered the released base %s (built %s on %s, commit %s): files and build key verified", folder,
             built.get("date", "?"), (built.get("machine") or {}).get("cpu", "?"), built.get("commit", "?"))
    return {"release": str(folder), "files_verified": len(info["files"]), "build_key": key, "built": built}


def write_release(checkpoint: Path, folder: Path, recipe, stats: dict, *, what: str) -> dict:
    """Make ``checkpoint`` (a freshly pretrained base; ``stats`` from ``pretrain_tiny``) the release in
    ``folder``: its files, a model card and ``release.json``, swapped in whole (the old release stays
    until the new one is complete). Returns the record."""
    from stages.training.pretrain import build_settings

    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns("README.md", RELEASE_FILE))
    built = {"date": now(), "commit": git_commit(), "recipe": recipe.name, "recipe_hash": recipe.hash(),
             "machine": device_info(), "threads": stats.get("threads"), "bf16_autocast": stats.get("bf16_autocast"),
             "pretrain_seconds": round(stats.get("pretrain_seconds", 0.0), 1), "parameters": stats.get("parameters"),
             "loss_first": stats.get("loss_first"), "loss_last_avg": stats.get("loss_last_avg"),
             "libraries": library_versions()}
    atomic_write_text(tmp / "README.md", _card(what, recipe, built, stats["build_key"]))
    info = {"what": what, "build_key": stats["build_key"], "settings": build_settings(recipe), "built": built,
            "files": hash_checkpoint(tmp)}
    atomic_write_json(tmp / RELEASE_FILE, info)
    old = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    log.info("released %s into %s (%d files)", what, folder, len(info["files"]))
    return info


def _card(what: str, recipe, built: dict, key: dict) -> str:
    arch = recipe.base.architecture
    return "\n".join([
        "---", "library_name: transformers", "tags: [r1-pipeline, base-model, synthetic]", "---", "",
        f"# {what[0].upper()}{what[1:]}", "",
        f"A Qwen2 model of {built['parameters']:,} parameters (hidden {arch.hidden_size}, {arch.num_hidden_layers} "
        f"layers), pretrained from scratch by r1-pipeline (`stages/training/pretrain.py`) on the synthetic corpus of "
        f"`data/corpus.py` for recipe `{recipe.name}`: {recipe.base.pretrain.steps} steps of "
        f"{recipe.base.pretrain.batch_size} documents. It is released with the repository so that the "
        "pipeline starts, like DeepSeek-R1, from a released base model.", "",
        f"- built {built['date']} at commit `{built['commit']}` on {built['machine'].get('cpu', '?')}, "
        f"{built['threads']} thread(s), bf16 autocast {built['bf16_autocast']}, {built['pretrain_seconds']} s",
        f"- loss {built['loss_first']:.3f} → {built['loss_last_avg']:.3f} (mean of the last 20 steps)",
        f"- build key: corpus `{key['corpus_sha256'][:16]}…`, tokenizer `{key['tokenizer_sha256'][:16]}…`, "
        f"settings `{key['settings_sha256'][:16]}…` (`release.json`)", "",
        f"Rebuild: `{rebuild_command(recipe.name)}`.", ""])


def student_recipe(recipe, student):
    """The recipe a tiny distillation student's base is built with: the tiny base's, with the student's
    width, depth and steps."""
    base = recipe.base
    pretrain = dataclasses.replace(base.pretrain, steps=student.pretrain_steps or base.pretrain.steps)
    return dataclasses.replace(recipe, base=dataclasses.replace(base, architecture=student.architecture or
                                                                base.architecture, pretrain=pretrain))


def build_student_release(recipe, student) -> dict:
    """``r1 base --rebuild``: pretrain a student's base from scratch (on the base stage's threads) and write
    it as the release its ``release`` names. Returns its build key."""
    import torch

    from stages.pipeline.common import save_model_atomically
    from stages.training.pretrain import pretrain_tiny

    built_with = student_recipe(recipe, student)
    folder = release_path(student.release)
    scratch = folder.with_name(f".{folder.name}.build")
    log.info("student %s: --rebuild: pretraining its base from scratch (%d thread(s))", student.name,
             torch.get_num_threads())
    model, tokenizer, stats = pretrain_tiny(built_with, log=log.info)
    save_model_atomically(model, tokenizer, scratch)
    try:
        info = write_release(scratch, folder, built_with, stats,
                             what=f"the tiny base of distillation student {student.name} (recipe {recipe.name})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return info["build_key"]
