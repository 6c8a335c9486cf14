"""``r1 findings``: the runs the report's verdicts need beyond the pipeline's single seed.

    make pipeline        # one seed: every stage, and the report
    make findings        # then: the extra runs below, and the report again (now with seeds)

The pipeline measures each finding once (seed 0). A verdict that holds for one training seed may not
hold for another, so for each seed of ``findings.seeds`` this runs, from the pipeline's own models:

- ``stage1``: R1-Zero again from the base (findings F1 and F3), with ``stage1.seed`` = the seed;
- ``stage3``: reasoning RL from the pipeline's stage-2 model, ``stage3.seed`` = the seed (F2, F3);
- ``stage3_nolang``: the same, without the language-consistency reward (F2: the reward's effect is the
  difference between the two on the same prompts, steps and seed);

and for each seed of ``findings.clip_seeds``, the two arms of F7 (DAPO's clip-higher), stage 1 with
``findings.clip_iterations`` optimizer steps per generation (``trl.num_iterations``: with one, the
importance ratio is 1 and clipping never acts):

- ``stage1_clip``: with the recipe's clip-higher (``trl.epsilon_high``);
- ``stage1_clip_sym``: with symmetric clipping (``trl.epsilon_high`` = ``trl.epsilon``).

Seed 0's ``stage1`` and ``stage3`` are the pipeline's own, so they are not run again. Only the
training seed changes: every run evaluates the same held-out problems with the same sampling seed
(``recipe.seed``), so arms are paired problem by problem, and the before-training evaluation, the same
for every run from the same model, is measured once and reused.

Each run is an ordinary stage folder under ``runs/<recipe>/findings/seed<s>/<variant>/`` with its own
manifest: a killed ``make findings`` resumes where it stopped, and complete runs are skipped.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

from stages.pipeline.runner import run_stage

log = logging.getLogger("r1")

VARIANTS = ("stage1", "stage3", "stage3_nolang")
CLIP_VARIANTS = ("stage1_clip", "stage1_clip_sym")


def variant_dir(run_dir: Path, seed: int, variant: str) -> Path:
    """Where a seed's variant lives in a run folder (``runs/<recipe>``): the pipeline's own stage
    folder for seed 0's stage 1 and 3, else ``findings/seed<s>/<variant>``."""
    if seed == 0 and variant in ("stage1", "stage3"):
        return Path(run_dir) / variant
    return Path(run_dir) / "findings" / f"seed{seed}" / variant


def variant_recipe(recipe, seed: int, variant: str):
    """The recipe of one run: the training seed of its RL section, no language reward for
    ``stage3_nolang``, several optimizer steps per generation for the F7 arms and symmetric clipping for
    ``stage1_clip_sym``."""
    r = copy.deepcopy(recipe)
    section = r.stage1 if variant.startswith("stage1") else r.stage3
    section.seed = seed
    if variant in CLIP_VARIANTS:  # F7 reads the training curves alone: no held-out evaluations by step
        section.trl = {**section.trl, "num_iterations": r.findings.clip_iterations}
        section.eval_steps = []
        if variant == "stage1_clip_sym":
            section.trl["epsilon_high"] = section.setting("epsilon")
    if variant == "stage3_nolang":
        section.rewards = {k: v for k, v in section.rewards.items() if k != "language"}
        if not section.rewards:
            raise ValueError("stage3.rewards holds only the language reward: nothing to train without it")
    return r


def run_findings(recipe, restart: bool = False) -> list[Path]:
    """Run every missing variant of every seed; returns their folders (seed 0's pipeline stages too)."""
    from stages import stage1_zero, stage3_reasoning_rl

    if 0 not in recipe.findings.seeds:
        raise ValueError(f"findings.seeds must include 0 (the pipeline's own run), got {recipe.findings.seeds}")
    done = []
    runs = [(seed, v) for seed in recipe.findings.seeds for v in VARIANTS]
    runs += [(seed, v) for seed in recipe.findings.clip_seeds for v in CLIP_VARIANTS]
    for seed, variant in runs:
        out = variant_dir(recipe.stage_dir(variant).parent, seed, variant)
        if seed == 0 and variant in ("stage1", "stage3"):
            done.append(out)  # the pipeline's; `make pipeline` runs it
            continue
        stage = "stage1" if variant.startswith("stage1") else "stage3"
        parent = "base" if stage == "stage1" else "stage2"
        body = stage1_zero.run if stage == "stage1" else stage3_reasoning_rl.run_without_comparison
        log.info("findings: seed %d, %s → %s", seed, variant, out)
        run_stage(variant_recipe(recipe, seed, variant), stage, body, restart=restart,
                  stage_dir=out, parent_dir=recipe.stage_dir(parent),
                  reuse={"eval_before": recipe.stage_dir(stage) / "eval_before"})
        done.append(out)
    return done
