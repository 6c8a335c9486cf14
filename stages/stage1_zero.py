"""Stage 1: DeepSeek-R1-Zero, reinforcement learning straight on the base model.

    r1 stage1 --recipe tiny                         # or: make stage1
    r1 stage1 --recipe tiny --set stage1.steps=50   # override any stage1.* field
    r1 stage1 --recipe tiny --restart               # discard a run; an incomplete one resumes by default

The base stage's model (``stages.pipeline.runner.model_ref`` of the parent manifest: a checkpoint folder, or
a hub id for real recipes) is trained with GRPO (``stages/training/grpo.py``, TRL's GRPOTrainer) on the task
world's train split, each problem put in the R1-Zero template of the paper's Table 1 as a plain-text
prompt (no chat template), with rule-based rewards only: format + accuracy by default
(``stage1.rewards``), no neural reward model. Held-out test problems are evaluated before and after.
Correct, well-formed completions are kept in ``cold_start_candidates.jsonl`` for stage 2.

Where this deviates from the paper:

- GRPO is TRL's implementation, configured by ``stage1.*``: on the tiny recipe the paper's GRPO loss,
  beta 0 (no KL, no reference model) and a much higher learning rate than the paper's 3e-6, chosen
  for a 1M-parameter model on 2 CPU cores. The paper's own settings (lr 3e-6, KL 0.001, clip 10, 16 samples × 32 questions, reference
  replaced every 400 steps) are the RLConfig defaults in ``stages/pipeline/recipe.py``.
- No dynamic sampling (see ``stages/training/grpo.py``); groups with equal rewards only contribute zero advantage.
- Training data is the synthetic arithmetic world (or whatever the recipe's task world is), not the
  paper's math/code/STEM/logic mix; rewards are the project's grader (``eval.verify``) and sandbox.
- Evaluation is the project's protocol (recipe.eval: k samples, temperature 0.6, top-p 0.95) on the
  task world's test split, not AIME.
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.datasets import load_rows
from data.templates import r1_zero_prompt
from stages.pipeline.runner import model_ref
from stages.training.grpo import run_rl

log = logging.getLogger("r1")


def run(ctx, callbacks=None) -> Path:
    """Stage body (see stages/pipeline/runner.py); ``callbacks``: extra TrainerCallbacks (tests use one)."""
    recipe = ctx.recipe
    ref = model_ref(ctx.parent)
    if not ref:
        raise ValueError(f"{ctx.parent.path}: the base manifest records no model")
    train_rows, skipped, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, eval_source = load_rows(recipe.data.test, recipe)
    log.info("stage1 (R1-Zero): %s, %d train problems from %s (skipped: %s), %d held-out from %s",
             ref, len(train_rows), source, skipped or "none", len(eval_rows), eval_source)
    return run_rl(ctx, recipe.stage1, train_rows=train_rows, eval_rows=eval_rows, build_prompt=lambda row: r1_zero_prompt(row["problem"]),
                  model_ref=ref, data_name=source, data_source=source, callbacks=callbacks)
