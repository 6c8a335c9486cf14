"""Stage 3: reasoning-oriented RL from the cold-start model, with a language-consistency reward.

    r1 stage3 --recipe tiny                          # or: make stage3
    r1 stage3 --recipe tiny --set stage3.steps=30    # override any stage3.* field

The stage-2 checkpoint is trained with GRPO through the same runner as stage 1 (``stages/rl.py``:
metrics, samples, curves, before/after evaluation, resume), on the same training prompts, now in the
chat template the cold-start SFT taught (the user turn of ``data.templates.chat_user_message``). The
reward is the weighted sum of ``stage3.rewards``: by default correctness (``accuracy``), the readable
format (``summary_format``: one think block, then a summary with the boxed answer) and language
consistency (``language``: the share of target-language words in the chain of thought, the row's
``lang`` or ``stage3.language_target``), as in DeepSeek-R1, section 2.3.2, which sums accuracy and
language rewards directly.

Where this deviates from the paper: the paper's language reward slightly hurt benchmark accuracy at
scale and was kept for readability; on the tiny default the weights are the recipe's
(``stage3.rewards``), and the prompts are the task world's, not the paper's reasoning mix.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.jsonl import read_jsonl_tolerant
from data.templates import chat_user_message
from eval.plots import plot_compare, steps_to_reach
from stages.manifest import Manifest
from stages.rl import METRICS_NAME, run_rl
from stages.runner import model_ref

log = logging.getLogger("r1")


def chat_prompt(row: dict) -> list[dict]:
    """A conversational prompt: TRL applies the tokenizer's chat template with the generation prompt."""
    return [{"role": "user", "content": chat_user_message(row["problem"])}]


def run(ctx, callbacks=None) -> Path:
    recipe = ctx.recipe
    if ctx.parent is None or ctx.parent.stage != "stage2":
        raise ValueError("stage3 builds on stage 2 (the cold-start model): run it with parent_stage='stage2'")
    ref = model_ref(ctx.parent)
    train_rows, skipped, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, eval_source = load_rows(recipe.data.test, recipe)
    log.info("stage3 (reasoning RL): %s, %d train problems from %s (skipped: %s), %d held-out from %s",
             ref, len(train_rows), source, skipped or "none", len(eval_rows), eval_source)
    final = run_rl(ctx, recipe.stage3, train_rows=train_rows, eval_rows=eval_rows, build_prompt=chat_prompt,
                   model_ref=ref, data_name=source, data_source=source, eval_template="chat", callbacks=callbacks)
    compare_with_stage1(ctx)
    return final


def compare_with_stage1(ctx) -> None:
    """The cold start's benefit, measured: the step at which stage 3's training accuracy (moving
    average over 5 steps) first reaches stage 1's final training accuracy, against the step stage 1
    itself first reached it; and one figure with both runs' accuracy and language-mixing curves."""
    parent = ctx.parent.data.get("parent") or {}
    if parent.get("stage") != "stage1":
        return
    stage1_dir = Path(parent["path"]).parent
    s1_rows = read_jsonl_tolerant(stage1_dir / METRICS_NAME)
    s3_rows = read_jsonl_tolerant(Path(ctx.dir) / METRICS_NAME)
    target = (Manifest.load(stage1_dir).data["metrics"].get("train") or {}).get("final_accuracy")
    if not s1_rows or not s3_rows or target is None:
        log.warning("no stage-1 curves to compare with (%s)", stage1_dir)
        return
    benefit = {"target_accuracy": target, "stage1_steps_to_target": steps_to_reach(s1_rows, target),
               "stage3_steps_to_target": steps_to_reach(s3_rows, target), "stage1_steps": s1_rows[-1]["step"]}
    ctx.manifest.update_metrics(cold_start_benefit=benefit)
    plot_compare({"stage 1 (R1-Zero, from the base)": stage1_dir / METRICS_NAME,
                  "stage 3 (reasoning RL, from the cold start)": Path(ctx.dir) / METRICS_NAME},
                 Path(ctx.dir) / "stage1_vs_stage3.png", "Cold start: stage 3 against stage 1")
    log.info("stage 1 reached training accuracy %.3f at step %s; stage 3 at step %s", target,
             benefit["stage1_steps_to_target"], benefit["stage3_steps_to_target"])
