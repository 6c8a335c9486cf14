"""Stage 3: reasoning-oriented RL from the cold-start model, with a language-consistency reward.

    r1 stage3 --recipe tiny                          # or: make stage3
    r1 stage3 --recipe tiny --set stage3.steps=30    # override any stage3.* field

The stage-2 checkpoint is trained with GRPO through the same runner as stage 1 (``stages/training/grpo.py``),
on the same training prompts, now in the chat template the cold-start SFT taught. The reward is the weighted
sum of ``stage3.rewards``: by default ``accuracy``, ``summary_format`` and ``language`` (the share of
target-language words in the chain of thought), as in DeepSeek-R1, section 2.3.2.

Where this deviates from the paper: the paper's language reward slightly hurt benchmark accuracy at scale
and was kept for readability; on the tiny default the weights are the recipe's (``stage3.rewards``), and
the prompts are the task world's, not the paper's reasoning mix. In full: docs/architecture.md,
stages/stage3_reasoning_rl.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.templates import chat_user_message
from eval.plots import plot_step_curves
from eval.stats import estimate, per_problem
from stages.pipeline.manifest import Manifest
from stages.pipeline.runner import model_ref
from stages.training.grpo import run_rl
from stages.training.records import held_out_by_step

log = logging.getLogger("r1")


def chat_prompt(row: dict) -> list[dict]:
    """A conversational prompt: TRL applies the tokenizer's chat template with the generation prompt."""
    return [{"role": "user", "content": chat_user_message(row["problem"])}]


def run(ctx, callbacks=None) -> Path:
    final = run_without_comparison(ctx, callbacks)
    compare_with_stage1(ctx)
    return final


def run_without_comparison(ctx, callbacks=None) -> Path:
    """Stage 3's training and evaluations alone (the findings' extra seeds and variants)."""
    recipe = ctx.recipe
    ref = model_ref(ctx.parent)
    # stage 2 evaluated this very model on the same rows with the same protocol: its "after" is our "before"
    parent_eval = Path(ctx.parent.path).parent / "eval_after"
    if ref == ctx.parent.checkpoint and (parent_eval / "results.json").is_file():
        ctx.reuse.setdefault("eval_before", parent_eval)
    train_rows, skipped, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, eval_source = load_rows(recipe.data.test, recipe)
    log.info("stage3 (reasoning RL): %s, %d train problems from %s (skipped: %s), %d held-out from %s",
             ref, len(train_rows), source, skipped or "none", len(eval_rows), eval_source)
    return run_rl(ctx, recipe.stage3, train_rows=train_rows, eval_rows=eval_rows, build_prompt=chat_prompt,
                  model_ref=ref, data_name=source, data_source=source, eval_template="chat", callbacks=callbacks)


def compare_with_stage1(ctx) -> None:
    """The cold start's benefit, measured on held-out problems (finding F3): pass@1 against RL step for
    stage 1 (from the base) and stage 3 (from the cold start) at the steps both evaluated (``eval_steps``),
    step 0 being each one's starting model; in the manifest (``cold_start_curve``) and one figure with
    95% intervals. Training accuracy is no measure here: its first batch is scored before any RL step."""
    parent = ctx.parent.data.get("parent") or {}
    if parent.get("stage") != "stage1":
        return
    stage1_dir = ctx.parent.parent_path.parent
    s1 = held_out_by_step(stage1_dir, (Manifest.load(stage1_dir).data["metrics"].get("train") or {}).get("steps"))
    s3 = held_out_by_step(Path(ctx.dir), (ctx.manifest.data["metrics"].get("train") or {}).get("steps"))
    common = sorted(set(s1) & set(s3))
    if not common:
        log.warning("no held-out evaluation at a step both stage 1 (%s) and stage 3 evaluated", stage1_dir)
        return
    curves = {label: {step: estimate(list(per_problem(runs[step]).values())) for step in sorted(runs)}
              for label, runs in (("stage 1 (R1-Zero, from the base)", s1), ("stage 3 (from the cold start)", s3))}
    ctx.manifest.update_metrics(cold_start_curve={
        "common_steps": common, **{label: {str(s): e.to_dict() for s, e in c.items()} for label, c in curves.items()}})
    plot_step_curves(curves, Path(ctx.dir) / "stage1_vs_stage3.png", "Held-out pass@1 against RL step")
    log.info("held-out pass@1 at step %d: stage 1 %.3f, stage 3 %.3f", common[-1],
             curves["stage 1 (R1-Zero, from the base)"][common[-1]].mean,
             curves["stage 3 (from the cold start)"][common[-1]].mean)
