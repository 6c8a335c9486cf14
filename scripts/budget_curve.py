"""Held-out pass@1 against the thinking budget (s1's budget forcing, eval/budget.py), one figure.

    .venv/bin/python scripts/budget_curve.py --model runs/tiny/stage1/checkpoint --budgets 8,16,32,64,128

Prints one line per budget (pass@1, mean tokens, share of chains of thought cut at the budget) and
writes ``<out>/budget_curve.{json,png}`` (default out: the model folder). Uses the recipe's eval
protocol (k, temperature, top-p) and prompt template (chat for stage 2+ checkpoints).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.datasets import load_rows  # noqa: E402
from data.jsonl import atomic_write_json  # noqa: E402
from eval.budget import budget_sampler  # noqa: E402
from eval.runner import evaluate_rows  # noqa: E402
from stages.commands.eval_command import template_for  # noqa: E402
from stages.pipeline.common import load_sampler  # noqa: E402
from stages.pipeline.recipe import load_recipe  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--recipe", default="tiny")
    p.add_argument("--budgets", default="8,16,32,64,128")
    p.add_argument("--min-think", type=int, default=0)
    p.add_argument("--limit", type=int, help="held-out problems (default: the recipe's data.test)")
    p.add_argument("--out", help="output folder (default: the model folder)")
    args = p.parse_args()

    recipe = load_recipe(args.recipe)
    cfg = recipe.eval
    cfg.prompt_template = template_for(args.model, cfg.prompt_template)
    rows = load_rows(recipe.data.test, recipe)[0][: args.limit]
    inner, tok = load_sampler(recipe, args.model, batch_size=cfg.batch_size)
    points = []
    for budget in (int(b) for b in args.budgets.split(",")):
        sampler = budget_sampler(inner, tok, think_budget=budget, min_think=min(args.min_think, budget),
                                 template=cfg.prompt_template)
        s = evaluate_rows(sampler, tok, rows, cfg=cfg, seed=recipe.seed, name=f"budget{budget}", progress=False)
        points.append({"budget": budget, "pass@1": s["pass@1"], "mean_tokens": s["mean_length_tokens"],
                       "think_rate": s["think_rate"], "format_rate": s["format_rate"]})
        print(f"budget {budget:5d}: pass@1 {s['pass@1']:.3f}, mean tokens {s['mean_length_tokens']:.1f}, "
              f"format {s['format_rate']:.2f}", flush=True)

    out = Path(args.out or args.model)
    atomic_write_json(out / "budget_curve.json", {"model": args.model, "protocol": {"k": cfg.k,
                      "temperature": cfg.temperature, "top_p": cfg.top_p, "template": cfg.prompt_template,
                      "min_think": args.min_think, "problems": len(rows)}, "points": points})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot([q["budget"] for q in points], [q["pass@1"] for q in points], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("thinking budget (tokens)")
    ax.set_ylabel(f"held-out pass@1 (k={cfg.k}, T={cfg.temperature})")
    ax.set_title("Budget forcing")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "budget_curve.png", dpi=100)
    print(f"figure: {out / 'budget_curve.png'}")
    print(json.dumps(points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
