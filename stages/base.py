"""The base stage: the model every later stage starts from.

Real recipes name a pretrained model (``base.pretrained``): the stage loads nothing heavy, and only
records the model (hub id or local path, with file hashes when local) in its manifest.

The tiny CPU default starts the same way, from a released base (``base.release``: ``recipes/tiny/base``,
kept in the repository): the stage verifies it (its files' hashes, and that it is the base this code
and recipe would build: ``stages/release.py``) and copies it into the run folder. The base was built by
``stages/training/pretrain.py``: a Qwen2 architecture of about a million parameters and a byte-level BPE
tokenizer, pretrained for minutes on the synthetic corpus of ``data/corpus.py``; ``r1 base --rebuild``
does that again and writes a new release, and ``base.release: null`` builds it in the run folder only.
Either way the base is then probed under the R1-Zero template on held-out problems. The checkpoint is
an ordinary transformers checkpoint (``save_pretrained``), loaded by every later stage through the same
code that loads real models.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.templates import r1_zero_prompt
from eval.runner import evaluate_rows
from stages.pipeline.common import (
    check_model_ref,
    load_sampler,
    load_tokenizer,
    release,
    save_model_atomically,
)
from stages.release import build_student_release, register_release, release_path, write_release
from stages.training.pretrain import pretrain_tiny

log = logging.getLogger("r1")


def check_tokenizer_round_trip(checkpoint: Path, sample_text: str) -> None:
    """Reload the saved tokenizer the way every later stage will, and insist it tokenizes ``sample_text``
    exactly as the saved ``tokenizer.json`` does and round-trips it (a tokenizer reloaded as another
    class can split text differently, or drop spaces, without any error)."""
    from tokenizers import Tokenizer

    tok = load_tokenizer(str(checkpoint))
    ids = tok(sample_text, add_special_tokens=False)["input_ids"]
    saved = Tokenizer.from_file(str(checkpoint / "tokenizer.json")).encode(sample_text, add_special_tokens=False).ids
    if ids != saved:
        raise RuntimeError(f"tokenizer reloaded from {checkpoint} as {type(tok).__name__} splits text differently "
                           f"from its tokenizer.json: {tok.convert_ids_to_tokens(ids)[:12]} …")
    back = tok.decode(ids)
    if back != sample_text:
        raise RuntimeError(f"tokenizer saved in {checkpoint} does not round-trip: {sample_text!r} → {back!r}")


def check_pretrained(ref: str, *, trust_remote_code: bool) -> dict:
    """Check that ``base.pretrained`` names a model whose config and tokenizer load (from local files
    first, the hub only when they are not there and the hub is not offline), so that a misspelt id or a
    folder that holds no model fails here, at registration, not in stage 1 after the hub's retries.
    Returns what the manifest records of it."""
    import os

    from transformers import AutoConfig

    def config(local_only: bool):
        return AutoConfig.from_pretrained(ref, trust_remote_code=trust_remote_code, local_files_only=local_only)

    try:
        cfg = config(local_only=True)
    except (OSError, ValueError) as e:
        if Path(ref).exists():
            raise ValueError(f"base.pretrained: {ref} is a folder but not a model ({e})") from None
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ValueError(f"base.pretrained: {ref}: not in the local cache, and the hub is offline "
                             "(HF_HUB_OFFLINE=1)") from None
        try:
            cfg = config(local_only=False)
        except (OSError, ValueError) as e2:
            raise ValueError(f"base.pretrained: {ref}: not a model, locally or on the hub ({e2})") from None
    try:
        tokenizer = load_tokenizer(ref, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ValueError(f"base.pretrained: {ref}: its tokenizer does not load ({e})") from None
    return {"model_type": cfg.model_type, "vocab_size": getattr(cfg, "vocab_size", None), "tokenizer_size": len(tokenizer)}


def run(ctx) -> Path | str:
    """Stage body (see stages/pipeline/runner.py): register a pretrained base or a released tiny one, or build the
    tiny one (``base.release: null``, or ``--rebuild``, which also writes the releases)."""
    recipe, m = ctx.recipe, ctx.manifest
    if recipe.base.pretrained:
        ref = recipe.base.pretrained
        check_model_ref(ref)
        log.info("base: registering pretrained model %s", ref)
        m.update_metrics(registered=check_pretrained(ref, trust_remote_code=recipe.trust_remote_code))
        m.set_input_model(ref)
        return ref

    checkpoint, loaded = ctx.dir / "checkpoint", None
    if recipe.base.release and not ctx.rebuild:
        log.info("base: registering the released base %s (r1 base --rebuild pretrains it again)", recipe.base.release)
        record = register_release(release_path(recipe.base.release), recipe, checkpoint, field="base.release")
        m.update_metrics(release={**record, "release": recipe.base.release})  # as the recipe names it
        m.set_input_model(str(release_path(recipe.base.release)))
    else:
        if ctx.rebuild:
            releases = rebuild_targets(recipe)
            log.info("base: --rebuild: pretraining from scratch, then writing %s", ", ".join(str(f) for f, _ in releases))
        model, tokenizer, stats = pretrain_tiny(recipe, log=log.info)
        m.add_input_data("synthetic_corpus", "data/corpus.py (procedural, train-split problems only)",
                         rows_used=stats["corpus_documents"])
        m.update_metrics(pretrain=stats)
        save_model_atomically(model, tokenizer, checkpoint)
        check_tokenizer_round_trip(checkpoint, r1_zero_prompt("What is 347 + 589?") + " <think> 7+9=16，写6")
        loaded = (model, tokenizer)
        if ctx.rebuild:
            m.update_metrics(rebuilt=rebuild_releases(recipe, checkpoint, stats))

    rows, _, source = load_rows(recipe.data.test, recipe)
    log.info("base: probing %d held-out problems of %s × %d samples at temperature %.1f under the R1-Zero template",
             len(rows), source, recipe.eval.k, recipe.base.probe_temperature)
    sampler, tokenizer = load_sampler(recipe, str(checkpoint), backend=recipe.eval.backend,
                                      batch_size=recipe.eval.batch_size, loaded=loaded)
    try:
        summary = evaluate_rows(sampler, tokenizer, rows, cfg=recipe.eval, seed=recipe.seed, out_dir=ctx.dir / "probe",
                                name="task_test", temperature=recipe.base.probe_temperature)
    finally:
        release(sampler)
    m.update_metrics(probe=summary)
    log.info("base probe: pass@1 %.3f, think %.2f, language mix %.2f, mean length %.1f tokens",
             summary["pass@1"], summary["think_rate"], summary["language_mix_rate"] or 0.0,
             summary["mean_length_tokens"])
    return checkpoint


def rebuild_targets(recipe) -> list[tuple[Path, str]]:
    """The release folders ``--rebuild`` writes: the base's and each tiny student's that names one (checked
    before anything is built)."""
    if not recipe.base.release:
        raise ValueError("--rebuild: the recipe names no base.release to write (base.release is null); "
                         "without it, r1 base builds the base in the run folder already")
    return [(release_path(recipe.base.release), "base")] + [(release_path(s.release), s.name)
                                                             for s in recipe.distill.students
                                                             if s.release and not s.pretrained]


def rebuild_releases(recipe, checkpoint: Path, stats: dict) -> dict:
    """Write the base just built as the release, then build each student's base that names a release (on
    the base stage's threads) and release it too."""
    out = {"base": write_release(checkpoint, release_path(recipe.base.release), recipe, stats,
                                 what=f"the tiny base of recipe {recipe.name}")["build_key"]}
    for student in recipe.distill.students:
        if student.release and not student.pretrained:
            out[student.name] = build_student_release(recipe, student)
    return out
