"""The run report: every stage's measured results on one page (``r1 report RUN_DIR``, ``make report``).

Reads only what the stages wrote (``<stage>/manifest.json`` and ``<stage>/metrics.jsonl``) and writes
``RUN_DIR/report/report.md`` with its figures beside it:

- one row per stage and per distilled student: status, held-out pass@1, cons@k, pass@k, mean length,
  language-mix rate, helpfulness and harmful-answer rate where measured, wall time, peak memory. A stage
  that has not run is shown as missing, never as zero;
- the training curves of each RL stage, stage 1 against stage 3, and the distillation-against-RL table;
- findings: each of the paper's claims this pipeline measures, with the numbers, and plainly "not
  reproduced" where the numbers say so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from data.jsonl import atomic_write_text
from eval.plots import plot_compare, plot_training
from stages.manifest import MANIFEST_NAME, Manifest, ManifestError

STAGE_TITLES = {
    "base": "base model (probe, R1-Zero template, T=1.0)",
    "stage1": "stage 1: R1-Zero (RL from the base)",
    "stage2": "stage 2: cold-start SFT",
    "stage3": "stage 3: reasoning RL",
    "stage4": "stage 4: rejection SFT + all-scenario RL",
    "distill": "distillation",
    "distill_rl": "control: RL on the student's base",
}
RL_STAGES = ("stage1", "stage3", "stage4", "distill_rl")
MISSING = "missing"


def load_run(run_dir: Path) -> dict[str, Manifest | None]:
    """Every stage's manifest (None for a stage that has not run or whose manifest is unreadable)."""
    return {stage: _load(run_dir, stage) for stage in STAGE_TITLES}


def _load(run_dir: Path, stage: str) -> Manifest | None:
    path = run_dir / stage / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return Manifest.load(path)
    except ManifestError:
        return None


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _row(name: str, status: str, ev: dict | None, m: Manifest | None, general: dict | None = None) -> list[str]:
    ev = ev or {}
    k = ev.get("k")
    metrics = m.data.get("metrics", {}) if m else {}
    wall = metrics.get("wall_seconds")
    return [name, status, _fmt(ev.get("pass@1")), _fmt(ev.get(f"cons@{k}")), _fmt(ev.get(f"pass@{k}")),
            _fmt(ev.get("mean_length_tokens"), 1), _fmt(ev.get("language_mix_rate")),
            _fmt((general or {}).get("helpfulness_score"), 2), _fmt((general or {}).get("harmful_rate")),
            f"{wall / 60:.1f} min" if wall else "–",
            f"{metrics['peak_rss_mb']:.0f} MB" if metrics.get("peak_rss_mb") else "–"]


def stage_rows(run: dict) -> list[list[str]]:
    """The results table: one row per stage (missing ones included) and per distilled student."""
    rows = []
    for stage, title in STAGE_TITLES.items():
        m = run[stage]
        if m is None:
            rows.append([title, MISSING] + ["–"] * 9)
            continue
        metrics = m.data.get("metrics", {})
        ev = metrics.get("probe") if stage == "base" else metrics.get("eval_after")
        rows.append(_row(title, m.status, ev, m, metrics.get("general_final")))
        for name, student in (metrics.get("students") or {}).items():
            rows.append(_row(f"  student {name} (distilled)", m.status, student.get("eval"), None))
    return rows


def findings(run: dict) -> list[str]:
    """The paper's claims that this run measures, each with its numbers and a verdict."""
    out = []
    s1, s3, s4 = run["stage1"], run["stage3"], run["stage4"]
    if s1 and "eval_after" in s1.data["metrics"]:
        b, a = s1.data["metrics"]["eval_before"], s1.data["metrics"]["eval_after"]
        acc_up = a["pass@1"] > b["pass@1"]
        len_up = a["mean_length_tokens"] > b["mean_length_tokens"]
        verdict = "reproduced" if acc_up and len_up else "**not reproduced** at this scale"
        out.append(f"**R1-Zero: accuracy and response length rise together under pure RL** — {verdict}: "
                   f"held-out pass@1 {b['pass@1']:.3f} → {a['pass@1']:.3f}, mean length "
                   f"{b['mean_length_tokens']:.1f} → {a['mean_length_tokens']:.1f} tokens.")
    if s1 and s3 and "eval_after" in s3.data["metrics"] and "eval_after" in s1.data["metrics"]:
        mix1 = s1.data["metrics"]["eval_after"].get("language_mix_rate")
        mix3 = s3.data["metrics"]["eval_after"].get("language_mix_rate")
        p1, p3 = s1.data["metrics"]["eval_after"]["pass@1"], s3.data["metrics"]["eval_after"]["pass@1"]
        if mix1 is not None and mix3 is not None:
            verdict = "reproduced" if mix3 < mix1 else "**not reproduced**"
            out.append(f"**Cold start + language reward end language mixing** — {verdict}: chains of thought that "
                       f"mix languages {mix1:.1%} after stage 1 → {mix3:.1%} after stage 3 "
                       f"(held-out pass@1 {p1:.3f} → {p3:.3f}).")
        benefit = s3.data["metrics"].get("cold_start_benefit")
        if benefit:
            s1n, s3n = benefit.get("stage1_steps_to_target"), benefit.get("stage3_steps_to_target")
            faster = s3n is not None and s1n is not None and s3n < s1n
            steps3 = (s3.data["metrics"].get("train") or {}).get("steps")
            out.append(f"**The cold start speeds up RL** — {'reproduced' if faster else '**not reproduced**'}: "
                       f"stage 1's final training accuracy ({benefit['target_accuracy']:.3f}, moving average of 5 "
                       f"steps) reached at step {s1n} by stage 1, and "
                       + (f"at step {s3n} by stage 3." if s3n is not None else f"never in stage 3's {steps3} steps."))
    if s4 and "general_final" in s4.data["metrics"]:
        g0, g1 = s4.data["metrics"]["general_sft"], s4.data["metrics"]["general_final"]
        ok = (g1["helpfulness_score"] > g0["helpfulness_score"]) and (g1["harmful_rate"] or 0) <= (g0["harmful_rate"] or 0)
        out.append(f"**All-scenario RL makes the model more helpful and harmless** — "
                   f"{'reproduced' if ok else '**not reproduced**'}: helpfulness score {g0['helpfulness_score']:.2f} → "
                   f"{g1['helpfulness_score']:.2f}, harmful answers {g0['harmful_rate']:.1%} → {g1['harmful_rate']:.1%}.")
    d, c = run["distill"], run["distill_rl"]
    if d and c and "eval_after" in c.data["metrics"]:
        name = c.data["metrics"].get("student")
        student = (d.data["metrics"].get("students") or {}).get(name, {})
        if "eval" in student:
            pd, pr = student["eval"]["pass@1"], c.data["metrics"]["eval_after"]["pass@1"]
            verdict = "reproduced" if pd > pr else "**not reproduced** at this scale"
            out.append(f"**Distillation beats RL on the same small model** (the paper's Table 6) — {verdict}: "
                       f"student {name} distilled {pd:.3f} against RL-trained {pr:.3f} held-out pass@1.")
    return out


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
    parts = [f"# Run report: `{run_dir}`", "",
             "Held-out results of every stage (the task world's test split; k samples per problem at the "
             "eval protocol's temperature; stages 2+ in the chat template). `–`: not measured; `missing`: the "
             "stage has not run.", "",
             _table(["stage", "status", "pass@1", "cons@k", "pass@k", "mean length", "language mix",
                     "helpfulness", "harmful", "wall", "peak memory"], stage_rows(run)), "",
             "## Findings", ""]
    found = findings(run)
    parts += [f"- {f}" for f in found] if found else ["- none yet: run the stages first."]
    parts += ["", "## Training curves", ""]
    for stage in RL_STAGES:
        metrics = run_dir / stage / "metrics.jsonl"
        png = plot_training(metrics, out / f"{stage}_curves.png", title=STAGE_TITLES[stage]) if metrics.exists() else None
        parts.append(f"![{stage}]({png.name})" if png else f"- {STAGE_TITLES[stage]}: {MISSING}")
    if (run_dir / "stage1" / "metrics.jsonl").exists() and (run_dir / "stage3" / "metrics.jsonl").exists():
        plot_compare({"stage 1": run_dir / "stage1" / "metrics.jsonl", "stage 3": run_dir / "stage3" / "metrics.jsonl"},
                     out / "stage1_vs_stage3.png", "Stage 1 against stage 3")
        parts += ["", "![stage 1 against stage 3](stage1_vs_stage3.png)"]
    losses = run_dir / "stage1_loss_types.png"
    if losses.exists():
        shutil.copy(losses, out / losses.name)
        parts += ["", f"![GRPO loss types]({losses.name})"]
    parts += ["", "## Distillation against RL", ""]
    rows = distill_table(run)
    parts.append(_table(["student", "trained by", "pass@1", "parameters", "train time"], rows) if rows
                 else f"distillation: {MISSING}")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(parts) + "\n")
    return path
