"""The ``r1`` command: one entry point for every stage, evaluation and status.

    r1 base   --recipe tiny [--rebuild]           register the released tiny base (--rebuild: pretrain it
                                                  again and write the release) or a real recipe's model
    r1 stage1 --recipe tiny [--set k=v …] [--resume | --restart]
    r1 pipeline --recipe tiny                     every stage in one process, then status and report
    r1 eval   --model PATH_OR_ID --bench task,gsm8k --k 4 [--limit N]
    r1 status [RUN_DIR]
    r1 findings --recipe tiny                     the extra seeds and variants the verdicts need
    r1 passk --recipe tiny                        pass@k for k = 1 … 64, base and every stage, one figure
    r1 report [RUN_DIR]                           every stage's results in RUN_DIR/report/report.md

The Makefile calls these; ``make stage1 RECIPE=qwen2.5-math-7b RESUME=1`` is ``r1 stage1 --recipe
qwen2.5-math-7b --resume``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stages.pipeline.manifest import MANIFEST_NAME, Manifest, ManifestError
from stages.pipeline.recipe import RecipeError, load_recipe
from stages.pipeline.runner import STAGES, running_pid


def _stage_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", default="tiny", help="recipe name under recipes/ or a YAML path (default: tiny)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe field, e.g. --set stage1.trl.learning_rate=5e-5 (repeatable)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true",
                   help="resume an incomplete run (the default when one exists)")
    g.add_argument("--restart", action="store_true", help="discard any existing run of this stage and start over")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (batches, steps, tokens, memory per process) and check it; load nothing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="r1", description="DeepSeek-R1 pipeline")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in STAGES:
        _stage_args(sub.add_parser(name, help=f"run the {name} stage"))
    sub.choices["base"].add_argument(
        "--rebuild", action="store_true", help="pretrain the tiny base (and the students' released bases) from "
        "scratch and write them as the recipe's releases (base.release; implies --restart)")

    _stage_args(sub.add_parser("pipeline", help="every stage in order in one process (base … distill_rl), then "
                               "status and the report; complete stages are skipped"))

    ev = sub.add_parser("eval", help="evaluate a model on benchmarks and/or the task world")
    ev.add_argument("--model", help="checkpoint folder or hub id (default: the recipe's latest complete stage)")
    ev.add_argument("--bench", default="task", help="comma-separated: task,gsm8k,math500,aime24,aime25,amc23,cmath,mgsm")
    ev.add_argument("--k", type=positive_int, help="samples per problem (default: recipe eval.k)")
    ev.add_argument("--limit", type=positive_int, help="problems per benchmark (default: all; task: the recipe's data.test)")
    ev.add_argument("--split", choices=["test", "val"], default="test",
                    help="the task world's split for bench 'task': test (reported figures) or val (choosing settings)")
    ev.add_argument("--out", help="output folder (default: <model>/eval, or runs/<recipe>/eval/<id>)")
    ev.add_argument("--benchmarks-dir", help="local benchmark files (default: $R1_BENCHMARKS_DIR, else the hub)")
    ev.add_argument("--backend", choices=["transformers", "vllm"])
    ev.add_argument("--template", choices=["r1_zero", "chat"],
                    help="prompt format (default: chat for models of stage 2 and later, else eval.prompt_template)")
    ev.add_argument("--think-budget", type=positive_int, help="budget forcing: stop thinking after N tokens (eval/budget.py)")
    ev.add_argument("--min-think", type=non_negative_int, default=0,
                    help="budget forcing: extend shorter thinking with 'Wait'")
    ev.add_argument("--recipe", default="tiny")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    fd = sub.add_parser("findings", help="the extra seeds and variants the report's verdicts need (after the pipeline)")
    fd.add_argument("--recipe", default="tiny")
    fd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    fd.add_argument("--restart", action="store_true", help="discard the findings' runs and start over")

    pk = sub.add_parser("passk", help="pass@k for k = 1 … passk.samples, base and every stage, one figure (after the pipeline)")
    pk.add_argument("--recipe", default="tiny")
    pk.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    rp = sub.add_parser("report", help="write RUN_DIR/report/report.md: every stage's results, curves, findings")
    rp.add_argument("run_dir", nargs="?", help="runs/<recipe> (default: runs/tiny)")

    pu = sub.add_parser("push", help="upload a complete stage's checkpoint (with its model card) and its curated "
                        "datasets to the Hugging Face hub")
    pu.add_argument("stage", choices=list(STAGES))
    pu.add_argument("repo_id", help="the model repo, e.g. your-name/tiny-r1-stage2 (datasets go to <repo_id>-<set>)")
    pu.add_argument("--run-dir", help="runs/<recipe> (default: runs/tiny)")
    pu.add_argument("--public", action="store_true", help="create public repos (default: private)")
    pu.add_argument("--no-datasets", action="store_true", help="push the checkpoint only")

    st = sub.add_parser("status", help="print the chain of stage manifests of a run")
    st.add_argument("run_dir", nargs="?", help="runs/<recipe> (default: runs/tiny)")
    return parser


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def cmd_stage(args) -> int:
    from stages.pipeline.runner import run_stage, setup_logging, side_work_for

    recipe = load_recipe(args.recipe, args.overrides)
    stages = list(STAGES) if args.command == "pipeline" else [args.command]
    if args.dry_run:
        from stages.pipeline.plan import plan

        for stage in stages:
            print("\n".join(plan(recipe, stage)))
        return 0
    refusal = launch_refusal(recipe, args.command)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    setup_logging()
    for i, stage in enumerate(stages):  # r1 pipeline: a later stage's independent work may run beside this one
        run_stage(recipe, stage, stage_body(stage), restart=args.restart,
                  side_work=side_work_for(stage, stages[i + 1:]), rebuild=getattr(args, "rebuild", False))
    if args.command == "pipeline":  # what `make pipeline` ends with
        cmd_status(argparse.Namespace(run_dir=str(recipe.stage_dir("base").parent)))
        cmd_report(argparse.Namespace(run_dir=str(recipe.stage_dir("base").parent), verdicts=True))
    return 0


def launch_refusal(recipe, command: str) -> str | None:
    """Why ``r1 <command>`` may not run here: a recipe whose ``launch`` asks for several processes, run
    as one process (a plain ``r1 stage1``), would train on one GPU what was planned for many, with the
    batch arithmetic of another run; the message gives the command that launches it as planned. The base
    stage trains nothing on a real recipe (it registers the model) and runs in one process anywhere."""
    from stages.pipeline.common import world_size

    launch = recipe.launch
    if world_size() > 1 or launch.processes == 1 or command == "base":
        return None
    how = (f"scripts/launch {command} --recipe {recipe.name} [--set …]" if command != "pipeline" else
           f"each stage with scripts/launch <stage> --recipe {recipe.name} (make stage1 … RECIPE={recipe.name})")
    return (f"recipe {recipe.name}: launch asks for {launch.processes_per_node} process(es) per node × {launch.nodes} "
            f"node(s) ({launch.accelerate_config or 'no accelerate config'}), and this is one process. Run {how}, "
            "or set launch.processes_per_node=1 and launch.nodes=1 to run it in one process.")


def stage_body(stage: str):
    """The function a stage runs, from the stage table (``module[:function]``, default ``run``)."""
    import importlib

    module_name, _, function = STAGES[stage][0].partition(":")
    return getattr(importlib.import_module(module_name), function or "run")


def cmd_status(args) -> int:
    run_dir = Path(args.run_dir) if args.run_dir else load_recipe("tiny").stage_dir("x").parent
    if not run_dir.is_dir():
        print(f"{run_dir}: no such run folder", file=sys.stderr)
        return 1
    print(f"run {run_dir}")
    for stage in [*STAGES, "eval"]:
        path = run_dir / stage / MANIFEST_NAME
        pid = running_pid(run_dir / stage)
        running = f" (RUNNING now, process {pid})" if pid else ""
        if not path.exists():
            print(f"  {stage:8s} —{running}")
            continue
        try:
            m = Manifest.load(path)
        except ManifestError as e:
            print(f"  {stage:8s} UNREADABLE{running}: {e}")
            continue
        if m.stage != stage:
            print(f"  {stage:8s} WRONG STAGE{running}: {path} says it is stage {m.stage!r}")
            continue
        bad = m.verify_checkpoint() if m.status == "complete" else []
        metrics = m.data.get("metrics", {})
        probe = metrics.get("probe") or metrics.get("eval_after") or {}
        extra = f" pass@1={probe['pass@1']:.3f}" if probe.get("pass@1") is not None else ""
        wall = f" {metrics['wall_seconds']:.0f}s" if metrics.get("wall_seconds") is not None else ""
        resumes = f" resumed×{len(m.data.get('resumes', []))}" if m.data.get("resumes") else ""
        state = m.status + (" (CHECKPOINT CHANGED)" if bad else "") + running
        print(f"  {stage:8s} {state:9s}{wall}{extra}{resumes}  {m.checkpoint or m.data['output'].get('model_ref') or ''}")
    return 0


def cmd_push(args) -> int:
    from stages.pipeline.cards import push

    run_dir = Path(args.run_dir) if args.run_dir else load_recipe("tiny").stage_dir("x").parent
    for repo in push(run_dir / args.stage, args.repo_id, private=not args.public, datasets=not args.no_datasets):
        print(f"pushed: https://huggingface.co/{'datasets/' if repo != args.repo_id else ''}{repo}")
    return 0


def cmd_findings(args) -> int:
    from stages.commands.findings import run_findings
    from stages.pipeline.runner import setup_logging

    setup_logging()
    recipe = load_recipe(args.recipe, args.overrides)
    for path in run_findings(recipe, restart=args.restart):
        print(f"findings: {path}")
    return 0


def cmd_passk(args) -> int:
    from stages.commands.passk import run_passk
    from stages.pipeline.runner import setup_logging

    setup_logging()
    print(f"passk: {run_passk(load_recipe(args.recipe, args.overrides))}")
    return 0


def cmd_report(args) -> int:
    from stages.commands.report import build_report

    run_dir = Path(args.run_dir) if args.run_dir else load_recipe("tiny").stage_dir("x").parent
    path = build_report(run_dir)
    if getattr(args, "verdicts", False):  # what `r1 pipeline` ends with: each finding's verdict, one line each
        summary = json.loads((path.parent / "summary.json").read_text(encoding="utf-8"))
        print("\nfindings (the rules and numbers are in the report):")
        for f in summary["findings"]:
            print(f"  {f['key']} {f['verdict'].upper():<16} {f['claim']}")
    print(f"report: {path}")
    return 0


def cmd_eval(args) -> int:
    from stages.commands.eval_command import run_eval

    return run_eval(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        commands = {"status": cmd_status, "eval": cmd_eval, "report": cmd_report, "findings": cmd_findings,
                    "passk": cmd_passk, "push": cmd_push}
        return commands.get(args.command, cmd_stage)(args)
    except (RecipeError, ManifestError, FileNotFoundError, ValueError) as e:  # PlanError is a ValueError
        print(f"r1 {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"r1 {args.command}: interrupted; run it again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

