"""The base stage: the model every later stage starts from.

Real recipes name a pretrained model (``base.pretrained``): the stage loads nothing heavy, and only
records the model (hub id or local path, with file hashes when local) in its manifest.

The tiny CPU default *builds* its base model (``stages/pretrain.py``): a Qwen2 architecture of about
a million parameters and a byte-level BPE tokenizer, pretrained for a few minutes on the synthetic
corpus of ``data/corpus.py``, then probed under the R1-Zero template on held-out problems. The result is
an ordinary transformers checkpoint (``save_pretrained``), loaded by every later stage through the same
code that loads real models.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.templates import r1_zero_prompt
from eval.runner import evaluate_rows
from stages.common import check_model_ref, load_sampler, load_tokenizer, release, save_model_atomically
from stages.pretrain import pretrain_tiny

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
    """Stage body (see stages/runner.py): register a pretrained base, or build the tiny one."""
    recipe, m = ctx.recipe, ctx.manifest
    if recipe.base.pretrained:
        ref = recipe.base.pretrained
        check_model_ref(ref)
        log.info("base: registering pretrained model %s", ref)
        m.update_metrics(registered=check_pretrained(ref, trust_remote_code=recipe.trust_remote_code))
        m.set_input_model(ref)
        return ref

    model, tokenizer, stats = pretrain_tiny(recipe, log=log.info)
    m.add_input_data("synthetic_corpus", "data/corpus.py (procedural, train-split problems only)",
                     rows_used=stats["corpus_documents"])
    m.update_metrics(pretrain=stats)

    checkpoint = save_model_atomically(model, tokenizer, ctx.dir / "checkpoint")
    check_tokenizer_round_trip(checkpoint, r1_zero_prompt("What is 347 + 589?") + " <think> 7+9=16，写6")

    rows, _, source = load_rows(recipe.data.test, recipe)
    log.info("base: probing %d held-out problems of %s × %d samples at temperature %.1f under the R1-Zero template",
             len(rows), source, recipe.eval.k, recipe.base.probe_temperature)
    sampler, tokenizer = load_sampler(recipe, str(checkpoint), backend=recipe.eval.backend,
                                      batch_size=recipe.eval.batch_size, loaded=(model, tokenizer))
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
