"""Stage 1: DeepSeek-R1-Zero, reinforcement learning straight on the base model.

    r1 stage1 --recipe tiny                         # or: make stage1
    r1 stage1 --recipe tiny --set stage1.steps=50   # override any stage1.* field; --restart discards a run

The base stage's model is trained with GRPO (``stages/training/grpo.py``) on the task world's train split,
in the R1-Zero template of the paper's Table 1 (plain text, no chat template), with rule-based rewards only
(``stage1.rewards``; format + accuracy by default). Held-out test problems are evaluated before and after;
correct, well-formed completions are kept in ``cold_start_candidates.jsonl`` for stage 2.

Where this deviates from the paper: GRPO is TRL's, configured by ``stage1.*`` (the tiny recipe: beta 0, a
much higher learning rate; the paper's settings are the RLConfig defaults); no dynamic sampling unless
``stage1.dynamic_sampling`` is set; the task world's data, the project's grader and evaluation protocol,
not the paper's mix and AIME. In full: docs/architecture.md, stages/stage1_zero.py.
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
