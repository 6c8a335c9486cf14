#!/usr/bin/env python3
"""The verifying world: issue 43's moonshot, a tiny world in which RL, rewarded for correct answers only,
grows checks that catch the model's *own* slips (docs/experiments.md, "Arm E").

    make verifying-world                              # base from scratch, stage 1 for 3 seeds, the table
    python scripts/verifying_world.py --table-only    # the table again, from the folders

It is the tiny recipe with five corpus settings changed (:data:`SETTINGS`): 8% of the base's corpus are
chat turns, the base's own facts slip at random (not only the planted misconceptions), and a check writes
the value to match before it computes it. Its base is pretrained here from scratch (no released artifact:
``base.release: null``, the recipe's two threads), then stage 1 (R1-Zero) runs for each training seed of
``--seeds`` (seed 0 in ``<root>/tiny/stage1``, others in ``findings/seed<s>/stage1`` as ``make findings``
puts them), each evaluated on the recipe's held-out split. The table: pass@1 and, from the checks the
models write, planted facts caught, the model's own slips caught, rubber stamps and false alarms
(``eval/verdicts.py``), before stage 1 (the base) and after it.

Not the default world: its stage 1 alone comes within a few points of the ceiling, which leaves stages
2-4 no headroom to show their findings (docs/tuning.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SETTINGS = ["base.release=null", "base.corpus.chat_direct=0.08", "base.corpus.direct=0.05",
            "base.corpus.template_direct=0.19", "base.corpus.slip=0.6", "base.corpus.check_form=compare_first"]


def recipe_for(root: Path, extra: list[str]):
    from stages.pipeline.recipe import load_recipe

    return load_recipe("tiny", [*SETTINGS, f"run_root={root}", *extra])


def train(recipe, seeds: list[int]) -> None:
    from stages import stage1_zero
    from stages.commands.cli import stage_body
    from stages.commands.findings import variant_dir, variant_recipe
    from stages.pipeline.runner import run_stage

    run_stage(recipe, "base", stage_body("base"))
    run_dir = recipe.stage_dir("base").parent
    for seed in seeds:
        reuse = {} if seed == 0 else {"eval_before": recipe.stage_dir("stage1") / "eval_before"}
        run_stage(variant_recipe(recipe, seed, "stage1"), "stage1", stage1_zero.run,
                  stage_dir=variant_dir(run_dir, seed, "stage1"), parent_dir=recipe.stage_dir("base"), reuse=reuse)


def _rate(verification: dict, key: str) -> str:
    e = verification.get(key)
    if not e or not e["n"]:
        return "none read"
    return f"{e['hits']} of {e['n']}, {e['mean']:.1%} [{e['lo']:.1%}, {e['hi']:.1%}]"


def table(run_dir: Path, seeds: list[int]) -> tuple[str, dict]:
    """The markdown table of the base (stage 1's ``eval_before``) and each seed's stage 1 (``eval_after``)."""
    from eval.stats import estimate, per_problem
    from eval.verdicts import _verification_lines
    from stages.commands.findings import variant_dir
    from stages.commands.report import _misconceptions, _samples

    misconceptions = _misconceptions(run_dir)
    models = [("base (before stage 1)", run_dir / "stage1" / "eval_before")]
    models += [(f"stage 1, training seed {s}", variant_dir(run_dir, s, "stage1") / "eval_after") for s in seeds]
    rows, data = [], {}
    for name, folder in models:
        records = _samples(folder)
        if not records:
            rows.append(f"| {name} | not run ({folder}) | | | | | |")
            continue
        acc = estimate(list(per_problem(records).values()))  # bootstrap over problems, as the report's
        checked = sum(r.get("recheck") in ("rechecked", "corrected") for r in records)  # eval/runner.py's labels
        _, v = _verification_lines(name, records, misconceptions, 0)
        rows.append(f"| {name} | {acc.fmt()} | {checked} of {len(records)} | {_rate(v, 'own caught')} | "
                    f"{_rate(v, 'planted caught')} | {_rate(v, 'rubber stamps')} | {_rate(v, 'false alarms')} |")
        data[name] = {"pass@1": acc.to_dict(), "checked": checked, "samples": len(records), "verification": v}
    head = ("| model | pass@1 | samples with checks | own slips caught | planted facts caught | rubber stamps "
            "(of the \"ok\"s) | false alarms (of the right steps checked) |\n|---|---|---|---|---|---|---|")
    return "\n".join([head, *rows]), data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=REPO / "runs" / "verifying", help="the run root (default: runs/verifying)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="stage 1's training seeds (0 first)")
    p.add_argument("--table-only", action="store_true", help="print the table from the folders; train nothing")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more recipe overrides")
    args = p.parse_args(argv)
    if args.seeds[0] != 0:
        p.error("--seeds: seed 0 comes first (the other seeds reuse its evaluation of the base)")
    recipe = recipe_for(args.root, args.set)
    if not args.table_only:
        from stages.pipeline.runner import setup_logging

        setup_logging()
        train(recipe, args.seeds)
    run_dir = recipe.stage_dir("base").parent
    text, data = table(run_dir, args.seeds)
    print(text)
    from data.jsonl import atomic_write_json

    atomic_write_json(run_dir / "verifying_world.json", {"settings": SETTINGS + args.set, "split": recipe.data.test.split,
                                                         "models": data})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
