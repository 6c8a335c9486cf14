"""``r1 findings``: the runs the report's verdicts need beyond the pipeline's single seed.

    make pipeline        # one seed: every stage, and the report
    make findings        # then: the extra runs below, and the report again (now with seeds)

For each seed of ``findings.seeds``, from the pipeline's own models: ``stage1`` (R1-Zero again from the base;
findings F1, F3), ``stage3`` (reasoning RL from the stage-2 model; F2, F3) and ``stage3_nolang`` (the same
without the language-consistency reward; F2); for each seed of ``findings.clip_seeds``, the two stage-1 arms
of F7: ``stage1_clip`` (clip-higher) and ``stage1_clip_sym`` (symmetric clipping); and F0's intervention:
the base and each seed's stage 1 sample the held-out problems with checks forced and suppressed
(``eval/intervene.py``, ``findings/intervention/<model>/<arm>/``). Seed 0's ``stage1`` and ``stage3`` are the
pipeline's own, not run again. Only the training seed changes, so the arms are paired problem by problem.
Each run is an ordinary stage folder, ``runs/<recipe>/findings/seed<s>/<variant>/``: a
killed ``make findings`` resumes, complete runs are skipped. Why, and the details: docs/architecture.md,
stages/commands/findings.py.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
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
    return done + run_check_intervention(recipe, restart)


def intervened(run_dir: Path, seeds) -> dict[str | int, Path]:
    """The models F0's intervention samples, with their stage folders: ``base``, and each training seed in
    ``seeds`` for its stage 1 (seed 0: the pipeline's)."""
    run_dir = Path(run_dir)
    return {"base": run_dir / "base", 0: run_dir / "stage1",
            **{s: variant_dir(run_dir, s, "stage1") for s in seeds if s != 0}}


def _intervention_root(run_dir: Path, model: str | int) -> Path:
    """One model's intervention (``base`` or a training seed's stage 1: ``stage1``, ``stage1_seed<s>``): its
    arms' folders and ``model.json`` (the weights they were sampled from)."""
    name = model if model == "base" else "stage1" if model == 0 else f"stage1_seed{model}"
    return Path(run_dir) / "findings" / "intervention" / name


def intervention_dir(run_dir: Path, model: str | int, arm: str) -> Path:
    return _intervention_root(run_dir, model) / arm


def _sampled_from(run_dir: Path, model: str | int) -> str | None:
    record = _intervention_root(run_dir, model) / "model.json"
    return json.loads(record.read_text())["weights"] if record.exists() else None


def model_identity(stage_folder: Path) -> str | None:
    """Which weights a complete stage folder holds: its checkpoint's recorded hash (else its model reference;
    None when it is not complete), so that an intervention sampled from other weights is known as stale."""
    from stages.pipeline.manifest import Manifest, ManifestError
    from stages.pipeline.runner import model_ref

    try:
        m = Manifest.load(Path(stage_folder))
    except (ManifestError, OSError):
        return None
    if m.status != "complete":
        return None
    return (m.data.get("output") or {}).get("files", {}).get("model.safetensors") or str(model_ref(m))


def intervention_current(run_dir: Path, model: str | int, stage_folder: Path) -> bool:
    """Both arms of ``model`` finished, from the weights its stage folder holds now."""
    sampled_from = _sampled_from(run_dir, model)
    return sampled_from is not None and sampled_from == model_identity(stage_folder) and _arms_done(run_dir, model)


def _arms_done(run_dir: Path, model: str | int) -> bool:
    from eval.intervene import ARMS

    return all((intervention_dir(run_dir, model, arm) / "results.json").exists() for arm in ARMS)


def run_check_intervention(recipe, restart: bool = False) -> list[Path]:
    """F0's within-model effect of checking: the base and each training seed's stage 1 (:func:`intervened`)
    sample stage 1's held-out problems in its template and protocol twice, checks forced after every step and
    checks suppressed (``eval.intervene``), into ``findings/intervention/<model>/<arm>/``. An arm resumes from
    the problems it has; a model whose weights changed since (or ``restart``) is sampled again from the start;
    a seed whose stage 1 is not complete is left out. Only for a base pretrained on the tiny world's corpus
    with checks in it (``base.corpus.recheck``/``template_recheck``): the processor reads its check syntax."""
    from transformers import AutoModelForCausalLM

    from data.datasets import load_rows
    from data.jsonl import atomic_write_json
    from eval.intervene import ARMS, CheckIntervention
    from stages.pipeline.common import load_tokenizer
    from stages.pipeline.manifest import Manifest
    from stages.pipeline.runner import model_ref
    from stages.training.evaluation import held_out

    corpus = recipe.base.corpus
    if recipe.base.pretrained or not (corpus.recheck or corpus.template_recheck):
        log.info("findings: no check intervention: the base's corpus writes no checks (a pretrained model's "
                 "checks look like anything; eval/intervene.py reads the tiny world's)")
        return []
    run_dir = recipe.stage_dir("stage1").parent
    rows, _, _ = load_rows(recipe.data.test, recipe)
    out = []
    for name, stage_folder in intervened(run_dir, recipe.findings.seeds).items():
        weights = model_identity(stage_folder)
        if weights is None:
            continue
        out += [intervention_dir(run_dir, name, arm) for arm in ARMS]
        stale = restart or _sampled_from(run_dir, name) != weights
        if not stale and _arms_done(run_dir, name):
            continue
        folder = _intervention_root(run_dir, name)
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
        path = model_ref(Manifest.load(stage_folder))
        model, tokenizer = AutoModelForCausalLM.from_pretrained(path), load_tokenizer(path)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "model.json", {"model": str(path), "weights": weights})
        for arm in ARMS:
            log.info("findings: %s with checks %s, %d held-out problems → %s", folder.name, arm, len(rows),
                     intervention_dir(run_dir, name, arm))
            held_out(recipe, rows, model=model, tokenizer=tokenizer, out_dir=intervention_dir(run_dir, name, arm),
                     template="r1_zero", progress=True, logits_processor=[CheckIntervention(tokenizer, arm)])
    return out
