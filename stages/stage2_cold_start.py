"""Stage 2: cold start. A small set of readable long chains of thought, then SFT of the *base* model.

    r1 stage2 --recipe tiny                               # or: make stage2
    r1 stage2 --recipe tiny --set stage2.sft.epochs=1     # override any stage2.* field

The raw material: stage 1's ``cold_start_candidates.jsonl``, the stage-1 model's answers sampled afresh
(``stage2.cold_start.sample``) and the user's set (``stage2.cold_start.user_dataset``). ``eval/cold_start.py``
filters them and rewrites each into the readable pattern (``<think>`` reasoning ``</think>``, then a summary
with the boxed answer): ``cold_start.jsonl``. The **base** model that stage 1 started from, as in the paper,
not the stage-1 model, is fine-tuned on it, then evaluated on the held-out split with the chat template.

Where this deviates from the paper: the paper gathers its cold-start samples by few-shot prompting, by
prompting R1-Zero and by human post-processing; here they are stage 1's own correct outputs filtered by
rule, plus whatever the user provides. docs/architecture.md, stages/stage2_cold_start.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.jsonl import read_jsonl_tolerant, write_jsonl_atomic
from eval.cold_start import DROP_REASONS, build_cold_start, candidate_from_rl, candidate_from_user
from eval.rejection import rejection_sample
from eval.runner import prompt_builder
from stages.pipeline.common import load_sampler, release, run_once
from stages.pipeline.runner import base_of, model_ref
from stages.training.evaluation import held_out
from stages.training.records import CANDIDATES_NAME
from stages.training.sft import run_sft

log = logging.getLogger("r1")


def run(ctx) -> Path:
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.stage2
    base = base_of(ctx.parent)

    # -- the cold-start set ------------------------------------------------------------------------
    source = Path(ctx.parent.path).parent / CANDIDATES_NAME
    rl_rows = read_jsonl_tolerant(source)
    m.add_input_data("stage1_candidates", str(source), rows_used=len(rl_rows))
    sampled = run_once(sample_stage1, ctx) if cfg.cold_start.sample is not None else []
    candidates = [candidate_from_rl(r) for r in rl_rows + sampled]
    user_rows = []
    if cfg.cold_start.user_dataset is not None:
        user_rows, skipped, where = load_rows(cfg.cold_start.user_dataset, recipe)
        candidates += [candidate_from_user(r) for r in user_rows]
        m.add_input_data("user_cold_start", where, rows_used=len(user_rows), skipped=skipped)
    rows, drops = build_cold_start(candidates, cfg.cold_start, language_target=cfg.cold_start.language_target,
                                   seed=recipe.seed)
    write_jsonl_atomic(ctx.dir / "cold_start.jsonl", rows)
    stats = {"candidates_stage1": len(rl_rows), "candidates_sampled": len(sampled),
             "candidates_user": len(user_rows), "kept": len(rows),
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
        summary = run_once(held_out, recipe, eval_rows, model_path=str(final), out_dir=ctx.dir / "eval_after",
                           template="chat")
        m.update_metrics(eval_after=summary)
        log.info("stage2 after SFT: pass@1 %.3f, readable %.2f, language mix %s", summary["pass@1"],
                 summary["readable_rate"], summary["language_mix_rate"])
    return final


def sample_stage1(ctx) -> list[dict]:
    """The stage-1 model's correct, clean answers on ``cold_start.sample.prompts`` (R1-Zero template),
    as rows of ``cold_start_candidates.jsonl``; shards in ``stage1_samples/`` (a rerun skips them)."""
    recipe, cfg = ctx.recipe, ctx.recipe.stage2.cold_start.sample
    rows, skipped, source = load_rows(cfg.prompts or recipe.data.train, recipe)
    ctx.manifest.add_input_data("stage1_sample_prompts", source, rows_used=len(rows), skipped=skipped)
    sampler, tokenizer = load_sampler(recipe, model_ref(ctx.parent), backend=cfg.backend, batch_size=cfg.batch_size)
    log.info("cold start: sampling the stage-1 model on %d prompts × %d (T=%.2f)", len(rows),
             cfg.samples_per_prompt, cfg.temperature)
    try:
        kept, drops, stats = rejection_sample(sampler, rows, prompt_builder("r1_zero", tokenizer),
                                              ctx.dir / "stage1_samples", cfg, seed=recipe.seed, log=log.info)
    finally:
        release(sampler)
    ctx.manifest.update_metrics(cold_start_sampling={**stats, "prompts": len(rows), "kept": len(kept),
                                                     "dropped": dict(drops)})
    return kept
