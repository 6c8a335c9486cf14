"""``r1 passk`` (``make passk``): the reasoning boundary, pass@k for k = 1 … n, for every stage of a run.

Does RL expand what the model can solve, or only sharpen what it already samples? pass@1 measures the
second; pass@k at large k approximates the first (the share of problems the model solves at all, given
k tries). This command samples ``n`` answers per held-out problem (``passk.samples``, at the
evaluation protocol's temperature and top-p; ``passk.problems`` of the test split) from the base model
and each stage's checkpoint, each in the prompt format it was trained in (base and stage 1: the R1-Zero
template; stages 2-4: the chat template), and computes the unbiased estimator of pass@k
(``eval.metrics.pass_at_k``) for k = 1, 2, 4, … n, with a 95% interval (percentile bootstrap over
problems, ``eval.stats``). One figure (``passk/passk.png``), ``passk/summary.json``, and, for each pair
of stages, the k at which one curve crosses the other, if they cross: the report prints them.

Each stage's samples live in ``runs/<recipe>/passk/<stage>/samples.jsonl`` (resumable, as ``r1 eval``);
a stage that is not complete is skipped with a line saying so.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from data.datasets import load_rows
from data.jsonl import atomic_write_json, read_jsonl_tolerant
from eval.metrics import pass_at_k
from eval.stats import METHOD, estimate
from stages.pipeline.manifest import MANIFEST_NAME, Manifest

log = logging.getLogger("r1")

STAGES = ("base", "stage1", "stage2", "stage3", "stage4")
CHAT = ("stage2", "stage3", "stage4")


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, … up to n (n itself included)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def curve(records: list[dict], n: int) -> dict[int, dict]:
    """pass@k for k in :func:`ks_up_to` (n) from graded samples, n per problem: {k: {mean, lo, hi}}."""
    by_id: dict[str, list[bool]] = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(bool(r["correct"]))
    full = {i: c for i, c in by_id.items() if len(c) >= n}
    out = {}
    for k in ks_up_to(n):
        e = estimate([pass_at_k(n, sum(c[:n]), k) for c in full.values()])
        out[k] = {"mean": e.mean, "lo": e.lo, "hi": e.hi, "problems": e.n}
    return out


def crossings(curves: dict[str, dict[int, dict]]) -> list[str]:
    """For each pair of stages, where one curve crosses the other: "stage1 is above base up to k=8;
    base is above from k=16" (means compared; equal means count as no change)."""
    lines, names = [], list(curves)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ks = [k for k in curves[a] if k in curves[b]]
            signs = [(k, (curves[a][k]["mean"] > curves[b][k]["mean"]) - (curves[a][k]["mean"] < curves[b][k]["mean"]))
                     for k in ks]
            signs = [(k, s) for k, s in signs if s != 0]
            for (k0, s0), (k1, s1) in zip(signs, signs[1:], strict=False):
                if s0 != s1:
                    above, below = (a, b) if s0 > 0 else (b, a)
                    lines.append(f"{above} is above {below} up to k={k0}; {below} is above from k={k1}")
    return lines


def run_passk(recipe, stages: tuple[str, ...] = STAGES) -> Path:
    """Sample, grade and summarise every complete stage of ``stages``; returns the summary's path."""
    from eval.plots import plot_passk
    from eval.runner import evaluate_rows
    from stages.pipeline.common import load_sampler
    from stages.pipeline.runner import model_ref

    cfg = recipe.passk
    out = recipe.stage_dir("passk")
    rows = load_rows(dataclasses.replace(recipe.data.test, limit=cfg.problems), recipe)[0]
    curves, skipped = {}, []
    for stage in stages:
        path = recipe.stage_dir(stage) / MANIFEST_NAME
        if not path.is_file() or Manifest.load(path).status != "complete":
            skipped.append(stage)
            log.info("passk: %s is not complete, skipped", stage)
            continue
        ref = model_ref(Manifest.load(path))
        template = "chat" if stage in CHAT else recipe.eval.prompt_template
        protocol = dataclasses.replace(recipe.eval, k=cfg.samples, prompt_template=template)
        sampler, tokenizer = load_sampler(recipe, ref, backend=protocol.backend, batch_size=protocol.batch_size)
        log.info("passk: %s, %d problems × %d samples (%s template)", stage, len(rows), cfg.samples, template)
        evaluate_rows(sampler, tokenizer, rows, cfg=protocol, seed=recipe.seed, out_dir=out / stage,
                      name="task_test", progress=False)
        curves[stage] = curve(read_jsonl_tolerant(out / stage / "samples.jsonl"), cfg.samples)
        del sampler
    summary = {"samples": cfg.samples, "problems": len(rows), "temperature": recipe.eval.temperature,
               "top_p": recipe.eval.top_p, "method": f"unbiased pass@k (Chen et al. 2021); {METHOD}",
               "curves": {s: {str(k): v for k, v in c.items()} for s, c in curves.items()},
               "crossings": crossings(curves), "skipped": skipped}
    atomic_write_json(out / "summary.json", summary)
    if curves:
        plot_passk(curves, out / "passk.png", f"pass@k on {len(rows)} held-out problems, "
                   f"{cfg.samples} samples each (T={recipe.eval.temperature}, top-p {recipe.eval.top_p})")
    for line in summary["crossings"] or ["no two curves cross"]:
        log.info("passk: %s", line)
    return out / "summary.json"
