"""Stage 1 once per GRPO loss type (grpo, dr_grpo, dapo) from the same base; one comparison figure.

    .venv/bin/python scripts/compare_loss_types.py                  # tiny recipe, its stage-1 settings
    .venv/bin/python scripts/compare_loss_types.py --steps 40 --set stage1.trl.learning_rate=5e-5

Each run is an ordinary stage 1 under ``runs/<recipe>-<loss>/`` whose base is the recipe's own base
(``make base`` first; it is copied, not rebuilt), so runs resume and show in ``r1 status`` like any
other. Writes ``runs/<recipe>/stage1_loss_types.png`` (training accuracy and mean length per loss type)
and ``stage1_loss_types.json`` (held-out pass@1 before/after and final training accuracy per loss).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.jsonl import atomic_write_json  # noqa: E402
from eval.plots import plot_compare  # noqa: E402
from stages.pipeline.manifest import require_parent  # noqa: E402
from stages.pipeline.recipe import load_recipe  # noqa: E402
from stages.pipeline.runner import run_stage, setup_logging  # noqa: E402
from stages.stage1_zero import run as stage1  # noqa: E402
from stages.training.grpo import METRICS_NAME  # noqa: E402

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="tiny")
    ap.add_argument("--steps", type=int, help="stage1.steps for every run (default: the recipe's)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override key=value")
    args = ap.parse_args()
    setup_logging()
    overrides = args.overrides + ([f"stage1.steps={args.steps}"] if args.steps else [])
    recipe = load_recipe(args.recipe, overrides)
    base_dir = recipe.stage_dir("base")
    require_parent(base_dir, "base", "base")

    results, curves = {}, {}
    for loss in LOSS_TYPES:
        r = load_recipe(args.recipe, [*overrides, f"name={recipe.name}-{loss}", f"stage1.trl.loss_type={loss}"])
        if not r.stage_dir("base").exists():
            shutil.copytree(base_dir, r.stage_dir("base"))
        m = run_stage(r, "stage1", stage1)
        metrics = m.data["metrics"]
        results[loss] = {"pass@1_before": metrics["eval_before"]["pass@1"], "pass@1_after": metrics["eval_after"]["pass@1"],
                         "final_train_accuracy": metrics["train"]["final_accuracy"],
                         "final_mean_length": metrics["train"]["final_mean_length"], "run": str(r.stage_dir("stage1"))}
        curves[f"{loss} (held-out pass@1 {results[loss]['pass@1_after']:.3f})"] = r.stage_dir("stage1") / METRICS_NAME

    out = recipe.stage_dir("base").parent
    png = plot_compare(curves, out / "stage1_loss_types.png", "Stage 1 by GRPO loss type",
                       keys=("accuracy", "mean_length"))
    atomic_write_json(out / "stage1_loss_types.json", results)
    for loss, res in results.items():
        print(f"{loss:8s} held-out pass@1 {res['pass@1_before']:.3f} → {res['pass@1_after']:.3f}, "
              f"final training accuracy {res['final_train_accuracy']}, mean length {res['final_mean_length']}")
    print(f"figure: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
