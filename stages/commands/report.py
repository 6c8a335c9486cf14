"""The run report: every stage's measured results on one page (``r1 report RUN_DIR``, ``make report``).

Reads only what the stages wrote (``<stage>/manifest.json``, ``metrics.jsonl`` and the graded samples
of every evaluation) and writes ``RUN_DIR/report/report.md`` with its figures beside it:

- one row per stage and per distilled student: status, the sampling temperature of its evaluation
  (the base's probe is at its own temperature, the stages at the protocol's), held-out pass@1 with its
  95% interval, cons@k, pass@k, mean length, language-mix rate, wall time, peak memory. A stage that has
  not run is shown as missing, never as zero;
- the paper's findings (``eval/verdicts.py``), each with its rule, its paired difference with a 95%
  interval and a verdict that can be "reproduced", "not reproduced" or "inconclusive" ("not testable"
  where the data cannot answer the rule, "not measured" where a stage has not run); over the
  training seeds of ``make findings`` when it has run (``stages/commands/findings.py``), else over the
  pipeline's one seed, and the report says which;
- the training curves of each RL stage, held-out pass@1 against RL step for stages 1 and 3, pass@k of
  every stage (``make passk``) and the distillation-against-RL table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from data.jsonl import atomic_write_json, atomic_write_text, read_jsonl_tolerant
from data.taskworld import misconceived_facts
from data.timing import KINDS
from eval import verdicts
from eval.intervene import ARMS
from eval.plots import plot_step_curves, plot_training
from eval.stats import METHOD, across_seeds, estimate, per_problem
from stages.commands.findings import (
    CLIP_VARIANTS,
    VARIANTS,
    intervened,
    intervention_current,
    intervention_dir,
    variant_dir,
)
from stages.pipeline.manifest import MANIFEST_NAME, Manifest, ManifestError
from stages.training.records import held_out_by_step

STAGE_TITLES = {
    "base": "base model (probe, R1-Zero template)",
    "stage1": "stage 1: R1-Zero (RL from the base)",
    "stage2": "stage 2: cold-start SFT",
    "stage3": "stage 3: reasoning RL",
    "stage4": "stage 4: rejection SFT + all-scenario RL",
    "distill": "distillation",
    "distill_rl": "control: RL on the student's base",
}
RL_STAGES = ("stage1", "stage3", "stage4", "distill_rl")
MISSING = "missing"
SAMPLES = "samples.jsonl"


def load_run(run_dir: Path) -> dict[str, Manifest | None]:
    """Every stage's manifest (None for a stage that has not run or whose manifest is unreadable)."""
    return {stage: _load(Path(run_dir) / stage) for stage in STAGE_TITLES}


def _load(stage_dir: Path) -> Manifest | None:
    path = Path(stage_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return Manifest.load(path)
    except ManifestError:
        return None


def _samples(folder: Path) -> list[dict]:
    return read_jsonl_tolerant(Path(folder) / SAMPLES) if (Path(folder) / SAMPLES).exists() else []


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pass_at_1(folder: Path | None, ev: dict) -> str:
    """pass@1 with its 95% interval from the graded samples, or the summary's number alone."""
    records = _samples(folder) if folder is not None else []
    if records:
        return estimate(list(per_problem(records).values())).fmt()
    return _fmt(ev.get("pass@1"))


def _row(name: str, status: str, ev: dict | None, m: Manifest | None, folder: Path | None) -> list[str]:
    ev = ev or {}
    k = ev.get("k")
    metrics = m.data.get("metrics", {}) if m else {}
    wall = metrics.get("wall_seconds")
    temperature = ev.get("temperature")
    return [name, status, _fmt(temperature, 1) if temperature is not None else "–", _pass_at_1(folder, ev),
            _fmt(ev.get(f"cons@{k}")), _fmt(ev.get(f"pass@{k}")), _fmt(ev.get("mean_length_tokens"), 1),
            _fmt(ev.get("language_mix_rate")), f"{wall / 60:.1f} min" if wall else "–",
            f"{metrics['peak_rss_mb']:.0f} MB" if metrics.get("peak_rss_mb") else "–"]


SEEDED = ("stage1", "stage3")  # the stages `make findings` trains again with other seeds


def over_seeds(run_dir: Path, stage: str) -> dict | None:
    """A stage's held-out pass@1 on each training seed that has a complete run of it (seed 0: the pipeline's;
    the others: ``make findings``), with their mean, standard deviation and range; None when only one seed has
    one (a single draw)."""
    by_seed = {}
    for seed in _seeds(run_dir):
        folder = variant_dir(run_dir, seed, stage)
        records = _samples(folder / "eval_after") if _complete(folder) else []
        if records:
            by_seed[seed] = estimate(list(per_problem(records).values())).mean
    if len(by_seed) < 2:
        return None
    return {"seeds": sorted(by_seed), "pass@1": [by_seed[s] for s in sorted(by_seed)],
            **across_seeds(list(by_seed.values()))}


def seed_lines(spreads: dict[str, dict | None]) -> list[str]:
    """What the results table's numbers are: one draw each, except the stages re-run over seeds
    (``spreads``: :func:`over_seeds` of each stage of :data:`SEEDED`)."""
    lines = []
    for stage, spread in spreads.items():
        if spread:
            each = ", ".join(f"seed {s}: {v:.3f}" for s, v in zip(spread["seeds"], spread["pass@1"], strict=True))
            lines.append(f"- {STAGE_TITLES[stage]}: held-out pass@1 over {spread['n']} training seeds: mean "
                         f"{spread['mean']:.3f}, sd {spread['sd']:.3f}, range [{spread['min']:.3f}, {spread['max']:.3f}] "
                         f"({each}).")
    lines.append("- Every other number in the table is one draw: one training seed (the pipeline's), its interval "
                 "covering the problems sampled, not the training." if any(spreads.values()) else
                 "- Every number in the table is one draw: one training seed (the pipeline's); its interval covers "
                 "the problems sampled, not the training (`make findings` trains stages 1 and 3 on more seeds).")
    return lines


def stage_summary(run: dict, run_dir: Path, spreads: dict[str, dict | None]) -> dict:
    """Per stage, machine-readable (``report/summary.json``, which the README's status is made from):
    status, wall minutes, the evaluation's temperature, pass@1 with its interval, and for the stages
    ``make findings`` re-trains, pass@1 over the training seeds (``spreads``, :func:`over_seeds`; null: one draw)."""
    out = {}
    for stage in STAGE_TITLES:
        m = run[stage]
        if m is None:
            out[stage] = {"status": MISSING}
            continue
        metrics = m.data.get("metrics", {})
        probe = stage == "base"
        ev = (metrics.get("probe") if probe else metrics.get("eval_after")) or {}
        records = _samples(run_dir / stage / ("probe" if probe else "eval_after"))
        out[stage] = {"status": m.status, "wall_min": round(metrics["wall_seconds"] / 60, 1)
                      if metrics.get("wall_seconds") else None, "temperature": ev.get("temperature"),
                      "pass@1": estimate(list(per_problem(records).values())).to_dict() if records else None,
                      "over_seeds": spreads.get(stage)}
    return out


def stage_rows(run: dict, run_dir: Path) -> list[list[str]]:
    """The results table: one row per stage (missing ones included) and per distilled student."""
    rows = []
    for stage, title in STAGE_TITLES.items():
        m = run[stage]
        if m is None:
            rows.append([title, MISSING] + ["–"] * 8)
            continue
        metrics = m.data.get("metrics", {})
        probe = stage == "base"
        ev = metrics.get("probe") if probe else metrics.get("eval_after")
        rows.append(_row(title, m.status, ev, m, run_dir / stage / ("probe" if probe else "eval_after")))
        for name, student in (metrics.get("students") or {}).items():
            rows.append(_row(f"  student {name} (distilled)", m.status, student.get("eval"), None,
                             run_dir / stage / name / "eval"))
    return rows


# -- the findings' data ------------------------------------------------------------------------


def _seeds(run_dir: Path) -> list[int]:
    """Seed 0 (the pipeline's run) and every seed ``make findings`` left a folder for."""
    found = {0}
    for d in (Path(run_dir) / "findings").glob("seed*"):
        if d.name[4:].isdigit():
            found.add(int(d.name[4:]))
    return sorted(found)


def _complete(folder: Path) -> Manifest | None:
    m = _load(folder)
    return m if m is not None and m.status == "complete" else None


def _by_step(folder: Path) -> dict[int, list[dict]]:
    """A complete RL run's held-out samples by RL step (``stages.training.records.held_out_by_step``)."""
    m = _complete(folder)
    return held_out_by_step(folder, (m.data["metrics"].get("train") or {}).get("steps")) if m else {}


def findings(run_dir: Path) -> list[verdicts.Finding]:
    run_dir = Path(run_dir)
    seeds = _seeds(run_dir)
    f1, f2, f3, f7 = {}, {}, {}, {}
    for seed in seeds:
        s1, s3, s3n = (variant_dir(run_dir, seed, v) for v in VARIANTS)
        if _complete(s1):
            f1[seed] = (_samples(s1 / "eval_before"), _samples(s1 / "eval_after"))
        higher, symmetric = (variant_dir(run_dir, seed, v) for v in CLIP_VARIANTS)
        if _complete(higher) and _complete(symmetric):
            f7[seed] = (read_jsonl_tolerant(symmetric / "metrics.jsonl"), read_jsonl_tolerant(higher / "metrics.jsonl"))
        if _complete(s3) and _complete(s3n):
            f2[seed] = (_samples(s3n / "eval_after"), _samples(s3 / "eval_after"))
        f3[seed] = (_by_step(s1), _by_step(s3))
    f1 = {s: r for s, r in f1.items() if r[0] and r[1]}
    f2 = {s: r for s, r in f2.items() if r[0] and r[1]}

    s4 = _complete(run_dir / "stage4")
    general = (s4.data["metrics"].get("general_eval") or {}) if s4 else {}
    sft_records = read_jsonl_tolerant(run_dir / "stage4" / general["sft"]) if general.get("sft") else []
    final_records = read_jsonl_tolerant(run_dir / "stage4" / general["final"]) if general.get("final") else []

    d, c = _complete(run_dir / "distill"), _complete(run_dir / "distill_rl")
    base_s, distilled_s, rl_s, budget = [], [], [], ""
    if d and c:
        name = c.data["metrics"].get("student")
        student = (d.data["metrics"].get("students") or {}).get(name, {})
        base_s = _samples(run_dir / "distill" / name / "eval_base")
        distilled_s = _samples(run_dir / "distill" / name / "eval")
        rl_s = _samples(run_dir / "distill_rl" / "eval_after")
        b1, b2 = student.get("budget") or d.data["metrics"].get("budget"), c.data["metrics"].get("budget")
        if b1 and b2:
            budget = f"distillation {_budget(b1)}; RL {_budget(b2)}"
    reward_models = {k: s4.data["metrics"].get(k) for k in ("rm_helpfulness", "rm_harmlessness")} if s4 else {}
    intervention = {model: tuple(_samples(intervention_dir(run_dir, model, arm)) for arm in ARMS)
                    for model, folder in intervened(run_dir, seeds).items()
                    if intervention_current(run_dir, model, folder)}  # from the weights the folders hold now
    return [verdicts.aha(f1, _misconceptions(run_dir), intervention), verdicts.r1_zero(f1), verdicts.language_reward(f2),
            verdicts.cold_start(f3), verdicts.final_rl(sft_records, final_records, reward_models),
            verdicts.distillation(base_s, distilled_s, rl_s, budget), verdicts.clip_higher(f7)]


def _misconceptions(run_dir: Path) -> frozenset[str]:
    """The digit facts the base's corpus wrote wrong (its recipe's ``base.corpus.misconceptions``), to
    tell planted facts from the model's own slips in F0's verification rates; none for a base with no
    such corpus (a registered pretrained model)."""
    base = _load(Path(run_dir) / "base")
    share = (((base.data.get("recipe") or {}).get("base") or {}).get("corpus") or {}).get("misconceptions") if base else None
    return misconceived_facts(share) if share else frozenset()


def _budget(b: dict) -> str:
    def value(v) -> str:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return str(v)
        return f"{v:,}" if isinstance(v, int) else f"{v:.3g}"

    return ", ".join(f"{k.replace('_', ' ')} {value(v)}" for k, v in b.items() if v is not None)


# -- the page ----------------------------------------------------------------------------------


def time_rows(run: dict) -> list[list[str]]:
    """Where the minutes went: one row per stage (and per sub-step of stage 4), one column per kind of
    work (``data/timing.py``), in seconds, then the stage's torch threads and the speed of one core when
    it started and ended (``stages/pipeline/threads.py`` ``core_speed``); a last row sums the stages. Stages
    measured before this was recorded show "–"."""
    rows, total, kinds_total = [], 0.0, dict.fromkeys(KINDS, 0.0)
    for stage, title in STAGE_TITLES.items():
        m = run[stage]
        if m is None:
            continue
        metrics = m.data.get("metrics", {})
        kinds = metrics.get("time_by_kind")
        wall = metrics.get("wall_seconds")
        total += (wall or 0.0) + ((kinds or {}).get("startup") or 0.0)
        for k in KINDS:
            kinds_total[k] += (kinds or {}).get(k) or 0.0
        threads = (metrics.get("threads") or {}).get("threads")
        speed = metrics.get("core_gflops") or {}
        rows.append([title, f"{wall:.0f}" if wall else "–"] + [_seconds(kinds, k) for k in KINDS]
                    + [str(threads) if threads else "–",
                       " → ".join(f"{speed[k]:.0f}" for k in ("start", "end") if k in speed) or "–"])
        part_threads = metrics.get("part_threads") or {}
        for name, sub in (metrics.get("substeps") or {}).items():
            rows.append([f"  {name}", f"{sub['seconds']:.0f}" if sub.get("seconds") else "–"]
                        + [_seconds(sub.get("time_by_kind"), k) for k in KINDS] + [str(part_threads.get(name, "")), ""])
    if rows:
        rows.append(["total (wall + startup)", f"{total:.0f}"] + [_seconds(kinds_total, k) for k in KINDS] + ["", ""])
    return rows


def side_work_lines(run: dict) -> list[str]:
    """What ran beside a stage in another process (``stages.pipeline.threads.SideJob``): its time is not in any row."""
    lines = []
    for stage, title in STAGE_TITLES.items():
        side = (run[stage].data.get("metrics", {}).get("side_work") if run[stage] else None) or {}
        for record in ([side] if "what" in side else side.values()):  # one record (before 2026-12-02) or one per later stage
            outcome = "done" if record.get("exit_code") == 0 else f"failed (exit code {record.get('exit_code')})"
            lines.append(f"- Beside {title} ({record['during']}), another process ran {record['what']}: "
                         f"{record['seconds']:.0f} s, {outcome}; the stage waited {record['waited_seconds']:.0f} s for it.")
    return lines + [""] if lines else []


def provenance_lines(run: dict) -> list[str]:
    """Where the run started (the base: registered from a release, registered pretrained, or built here),
    the machine it ran on against the one the base was released from, and its parallel layout (fixed by
    the recipe: a neighbour slows a run, it does not change its numbers)."""
    base = run.get("base")
    if base is None:
        return []
    metrics, lines = base.data.get("metrics", {}), []
    release = metrics.get("release")
    device = base.data.get("device") or {}
    if release:
        built = release.get("built") or {}
        lines.append(f"- **Base: registered, not built.** The released base `{release['release']}` (built "
                     f"{built.get('date', '?')} at commit `{built.get('commit', '?')}` on {(built.get('machine') or {}).get('cpu', '?')}, "
                     f"{built.get('threads', '?')} thread(s), {built.get('pretrain_seconds', '?')} s of pretraining): its "
                     f"{release.get('files_verified', '?')} files' hashes and its build key (corpus, tokenizer, settings) "
                     "verified against this code; `make rebuild-base` pretrains it again.")
        reference = (built.get("machine") or {}).get("cpu")
        if reference and device.get("cpu") and device["cpu"] != reference:
            lines.append(f"- **This run's CPU differs from the one the release was built on** ({device['cpu']} against "
                         f"{reference}): floating-point sums differ between CPUs' kernels, so this run's numbers are "
                         "other draws than the README's (compare intervals, not digits).")
        elif reference:
            lines.append(f"- CPU: {device.get('cpu', '?')}, the kind the release (and the README's numbers) came from.")
    elif (base.data.get("inputs") or {}).get("model") and "pretrain" not in metrics:
        lines.append(f"- Base: registered pretrained model `{(base.data['inputs']['model'].get('ref'))}`.")
    elif "pretrain" in metrics:
        lines.append(f"- Base: built in this run ({metrics['pretrain'].get('pretrain_seconds', 0):.0f} s of pretraining"
                     f"{', and written as the release: r1 base --rebuild' if metrics.get('rebuilt') else ''}).")
    layouts, busy = set(), 0.0
    for m in run.values():
        t = (m.data.get("metrics", {}).get("threads") if m else None) or {}
        if t:
            layouts.add((t.get("threads"), t.get("sample_processes"), t.get("chosen_by")))
            busy = max(busy, t.get("busy_elsewhere") or 0.0)
    if layouts:
        shown = "; ".join(f"{th} thread(s), {sp} sampling process(es) ({by})" for th, sp, by in sorted(layouts, key=str))
        lines.append(f"- Parallel layout (fixed by the recipe, `stages/pipeline/threads.py`): {shown}. Other processes were busy "
                     f"on up to {busy:.1f} cores when a stage started" + (": they slowed the run, they did not change its "
                                                                          "numbers." if busy >= 0.5 else "."))
    return lines + [""] if lines else []


def _seconds(kinds: dict | None, kind: str) -> str:
    if kinds is None:
        return "–"
    value = kinds.get(kind)
    return f"{value:.0f}" if value else ""


def distill_table(run: dict) -> list[list[str]]:
    d, c = run["distill"], run["distill_rl"]
    rows = []
    for name, student in ((d.data["metrics"].get("students") or {}) if d else {}).items():
        params = (student.get("pretrain") or {}).get("parameters")
        secs = (student.get("sft") or {}).get("train_seconds_this_run")
        rows.append([name, "distilled (SFT on stage 4's set)", _fmt((student.get("eval") or {}).get("pass@1")),
                     f"{params / 1e6:.2f}M" if params else "–", f"{secs:.0f} s" if secs else "–"])
    if c is not None:
        train = c.data["metrics"].get("train") or {}
        rows.append([c.data["metrics"].get("student", "?"), f"RL from its base ({train.get('steps', '?')} steps)",
                     _fmt((c.data["metrics"].get("eval_after") or {}).get("pass@1")), "–",
                     f"{train['train_seconds_this_run']:.0f} s" if train.get("train_seconds_this_run") else "–"])
    return rows


def passk_section(run_dir: Path, out: Path) -> list[str]:
    """pass@k for every stage (``r1 passk``, ``stages/commands/passk.py``): a table, the figure and where curves
    cross; a line saying how to make it when it has not run."""
    path = run_dir / "passk" / "summary.json"
    if not path.is_file():
        return ["Not measured: run `make passk` (pass@k for k = 1 … 64 of the base and every stage)."]
    import json

    summary = json.loads(path.read_text(encoding="utf-8"))
    curves = summary["curves"]
    ks = sorted({int(k) for c in curves.values() for k in c})
    rows = [[stage] + [f"{c[str(k)]['mean']:.3f} [{c[str(k)]['lo']:.3f}, {c[str(k)]['hi']:.3f}]" if str(k) in c
                       else "–" for k in ks] for stage, c in curves.items()]
    png = run_dir / "passk" / "passk.png"
    if png.exists():
        shutil.copy(png, out / png.name)
    lines = [f"{summary['problems']} held-out problems, {summary['samples']} samples each at T={summary['temperature']}, "
             f"top-p {summary['top_p']}; {summary['method']}. Each stage in the format it was trained in.", "",
             _table(["stage", *[f"pass@{k}" for k in ks]], rows), ""]
    lines += ["Where the curves cross (their means; the intervals above say how far apart they are):"]
    lines += [f"- {line}" for line in summary["crossings"]] or ["- no two curves cross"]
    if summary.get("skipped"):
        lines.append(f"- not complete, not measured: {', '.join(summary['skipped'])}")
    if png.exists():
        lines += ["", f"![pass@k]({png.name})"]
    return lines


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def build_report(run_dir: Path) -> Path:
    """Write ``run_dir/report/report.md`` (+ PNGs); returns its path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    out = run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    run = load_run(run_dir)
    spreads = {stage: over_seeds(run_dir, stage) for stage in SEEDED}
    protocol = next((m.data["metrics"].get("eval_after") for m in run.values()
                     if m is not None and m.data["metrics"].get("eval_after")), {}) or {}
    parts = [f"# Run report: `{run_dir}`", "",
             f"Held-out results of every stage on the task world's **test** split (settings are chosen on the "
             f"val split). Each stage samples k={protocol.get('k', '?')} completions per problem at temperature "
             f"{protocol.get('temperature', '?')}, top-p {protocol.get('top_p', '?')} (the base's probe at its "
             f"own temperature, in column T); stages 2 onwards in the chat template. pass@1 is shown with its 95% "
             f"interval ({METHOD}). `–`: not measured; `missing`: the stage has not run.", "",
             _table(["stage", "status", "T", "pass@1 [95% CI]", "cons@k", "pass@k", "mean length", "language mix",
                     "wall", "peak memory"], stage_rows(run, run_dir)), "", *seed_lines(spreads), "",
             "Where the minutes go, in seconds of wall time (each second counted once, for the innermost kind of "
             "work: an evaluation's sampling is `sampling`; GRPO's rollouts are `training`; `startup` is the "
             "process's start to the stage body; `core GFLOP/s`: one core's fp32 matmul speed when the stage "
             "started → ended, to compare minutes across runs on a machine whose speed drifts):", "",
             _table(["stage", "wall", *KINDS, "threads", "core GFLOP/s"], time_rows(run)), ""]
    parts += provenance_lines(run) + side_work_lines(run) + ["## Findings", ""]
    seeds = _seeds(run_dir)
    parts.append(f"Training seeds measured: {seeds}" + (" (one seed: run `make findings` for more)"
                                                          if len(seeds) == 1 else " (`make findings`)") + ".")
    parts.append("")
    found = findings(run_dir)
    for finding in found:
        parts += finding.markdown() + [""]
    parts += ["## Training curves", ""]
    for stage in RL_STAGES:
        metrics = run_dir / stage / "metrics.jsonl"
        png = plot_training(metrics, out / f"{stage}_curves.png", title=STAGE_TITLES[stage]) if metrics.exists() else None
        parts.append(f"![{stage}]({png.name})" if png else f"- {STAGE_TITLES[stage]}: {MISSING}")
    curves = {}
    for seed in seeds:
        for variant, label in (("stage1", "stage 1 (from the base)"), ("stage3", "stage 3 (from the cold start)")):
            by_step = _by_step(variant_dir(run_dir, seed, variant))
            if by_step:
                curves[f"{label}, seed {seed}"] = {s: estimate(list(per_problem(r).values())) for s, r in by_step.items()}
    if curves:
        plot_step_curves(curves, out / "held_out_by_step.png", "Held-out pass@1 against RL step (95% intervals)")
        parts += ["", "![held-out pass@1 by RL step](held_out_by_step.png)"]
    losses = run_dir / "stage1_loss_types.png"
    if losses.exists():
        shutil.copy(losses, out / losses.name)
        parts += ["", f"![GRPO loss types, a side experiment: make compare-losses]({losses.name})"]
    parts += ["", "## The reasoning boundary: pass@k", ""] + passk_section(run_dir, out)
    parts += ["", "## Distillation against RL", ""]
    rows = distill_table(run)
    parts.append(_table(["student", "trained by", "pass@1", "parameters", "train time"], rows) if rows
                 else f"distillation: {MISSING}")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(parts) + "\n")
    atomic_write_json(out / "summary.json", {
        "run": str(run_dir), "protocol": {k: protocol.get(k) for k in ("k", "temperature", "top_p")},
        "interval_method": METHOD, "seeds": seeds, "stages": stage_summary(run, run_dir, spreads),
        "findings": [{"key": f.key, "claim": f.claim, "verdict": f.verdict, "lines": f.lines, "seeds": f.seeds}
                     for f in found]})
    return path

