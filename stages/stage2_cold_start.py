"""Stage 2: cold start. A small set of readable long chains of thought, then SFT of the *base* model.

    r1 stage2 --recipe tiny                               # or: make stage2
    r1 stage2 --recipe tiny --set stage2.sft.epochs=1     # override any stage2.* field

The parent is stage 1: its ``cold_start_candidates.jsonl`` (correct, well-formed completions it
produced while training) is the raw material, plus the recipe's optional user set
(``stage2.cold_start.user_dataset``). ``data/cold_start.py`` filters them (correct, single-language,
readable, not degenerate, within length bounds, deduplicated, capped) and rewrites each into the
readable pattern: ``<think>`` reasoning ``</think>`` then a summary with the boxed answer. The model
fine-tuned is the **base** model that stage 1 started from (found through stage 1's manifest), as in
the paper, not the stage-1 model.

Outputs: ``cold_start.jsonl`` (the SFT set), the manifest's ``cold_start`` metrics (counts in and out,
drops per reason), ``checkpoint/`` (the SFT model), ``checkpoint_metrics.jsonl``, and an evaluation of
the held-out split with the chat template (``eval_after``).

Where this deviates from the paper: the paper gathers "thousands" of cold-start samples by few-shot
prompting with long CoT, by prompting R1-Zero for detailed answers with reflection and verification,
and by human post-processing; here they are stage 1's own correct outputs filtered by rule (hundreds
on the tiny default), plus whatever the user provides.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.cold_start import DROP_REASONS, build_cold_start, candidate_from_rl, candidate_from_user
from data.datasets import load_rows
from data.jsonl import read_jsonl_tolerant, write_jsonl_atomic
from stages.manifest import require_parent
from stages.rl import CANDIDATES_NAME, evaluate
from stages.runner import model_ref
from stages.sft import run_sft

log = logging.getLogger("r1")


def base_of(stage_manifest) -> str:
    """The base model a stage's chain started from: the model of the ``base`` manifest upstream."""
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


def run(ctx) -> Path:
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.stage2
    if ctx.parent is None or ctx.parent.stage != "stage1":
        raise ValueError("stage2 builds on stage 1 (its cold-start candidates): run it with parent_stage='stage1'")
    base = base_of(ctx.parent)

    # -- the cold-start set ------------------------------------------------------------------------
    source = Path(ctx.parent.path).parent / CANDIDATES_NAME
    rl_rows = read_jsonl_tolerant(source)
    candidates = [candidate_from_rl(r) for r in rl_rows]
    m.add_input_data("stage1_candidates", str(source), rows_used=len(rl_rows))
    user_rows = []
    if cfg.cold_start.user_dataset is not None:
        user_rows, skipped, where = load_rows(cfg.cold_start.user_dataset, recipe)
        candidates += [candidate_from_user(r) for r in user_rows]
        m.add_input_data("user_cold_start", where, rows_used=len(user_rows), skipped=skipped)
    rows, drops = build_cold_start(candidates, cfg.cold_start, language_target=cfg.cold_start.language_target,
                                   seed=recipe.seed)
    write_jsonl_atomic(ctx.dir / "cold_start.jsonl", rows)
    stats = {"candidates_stage1": len(rl_rows), "candidates_user": len(user_rows), "kept": len(rows),
             "kept_from_user": sum(r["source"] == "user" for r in rows),
             "problems": len({r["id"] for r in rows}),
             "dropped": {reason: drops.get(reason, 0) for reason in DROP_REASONS}}
    m.update_metrics(cold_start=stats)
    log.info("cold start: %d candidates → %d kept (%d problems); dropped %s", len(candidates), len(rows),
             stats["problems"], {k: v for k, v in stats["dropped"].items() if v} or "none")
    if not rows:
        raise ValueError(f"cold start: no candidate survived the filters (dropped: {dict(drops)}); "
                         "run stage 1 longer or give stage2.cold_start.user_dataset")

    # -- SFT of the base model, then the held-out evaluation with the chat template ----------------
    final = run_sft(ctx, cfg.sft, rows=rows, model_ref=base)
    if "eval_after" not in m.data["metrics"]:
        eval_rows, _, _ = load_rows(recipe.data.test, recipe)
        summary = evaluate(recipe, None, None, eval_rows, ctx.dir / "eval_after", str(final), prompt_template="chat")
        m.update_metrics(eval_after=summary)
        log.info("stage2 after SFT: pass@1 %.3f, readable %.2f, language mix %s", summary["pass@1"],
                 summary["readable_rate"], summary["language_mix_rate"])
    return final
