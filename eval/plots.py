"""Plots of training metrics (matplotlib, Agg backend: no display needed).

``plot_training(metrics.jsonl, out.png)``: training accuracy and mean response length against step,
the two curves of DeepSeek-R1's Figures 2 (AIME accuracy of R1-Zero during training) and 3 (average
response length of R1-Zero during training). Raw per-step values are drawn faintly, with a moving
average over them.

``plot_compare({label: metrics.jsonl}, out.png, title)``: several runs' training curves on shared axes
(``make compare-losses``: stage 1 by GRPO loss type).

``plot_step_curves({label: {step: Estimate}}, out.png, title)``: held-out pass@1 against RL step with
95% intervals (stage 1 from the base against stage 3 from the cold start: finding F3).

``plot_passk({stage: {k: {mean, lo, hi}}}, out.png, title)``: pass@k against k for every stage (``r1 passk``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

from data.jsonl import read_jsonl_tolerant

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pairs], [float(p[1]) for p in pairs]


def plot_compare(runs: dict[str, Path], out_path: Path, title: str, keys=("accuracy", "language_mix_rate")) -> Path:
    """One panel per metric ``keys``, one curve (moving average) per run ``label → metrics.jsonl``: e.g.
    stage 1 against stage 3, to show the cold start's head start and language mixing falling."""
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4))
    for ax, key in zip(axes, keys, strict=True):
        for i, (label, path) in enumerate(runs.items()):
            steps, values = _series(read_jsonl_tolerant(path), key)
            if steps:
                ax.plot(steps, values, color=f"C{i}", alpha=0.25, linewidth=1)
                ax.plot(steps, _moving_average(values, max(1, len(values) // 20)), color=f"C{i}", linewidth=2,
                        label=label)
        ax.set_xlabel("step")
        ax.set_ylabel(key.replace("_", " "))
        if key == "accuracy" or key.endswith("_rate"):
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out_path)


def plot_step_curves(curves: dict, out_path: Path, title: str) -> Path:
    """Held-out pass@1 against RL step, one line per ``label → {step: Estimate}``, with the 95%
    intervals as error bars (finding F3: stage 1 from the base against stage 3 from the cold start)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, points) in enumerate(curves.items()):
        steps = sorted(points)
        means = [points[s].mean for s in steps]
        errors = [[points[s].mean - points[s].lo for s in steps], [points[s].hi - points[s].mean for s in steps]]
        style = "-" if "stage 3" in label else "--"
        ax.errorbar(steps, means, yerr=errors, fmt="o" + style, color=f"C{i}", capsize=3, label=label, alpha=0.85)
    ax.set_xlabel("RL step (0: before RL)")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    return _save(fig, out_path)


def plot_passk(curves: dict[str, dict[int, dict]], out_path: Path, title: str) -> Path:
    """pass@k against k (log scale), one curve per stage ``{stage: {k: {mean, lo, hi}}}``, with 95% bands:
    where the curves cross says whether RL widened what the model can solve or only sharpened it."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, (label, points) in enumerate(curves.items()):
        ks = sorted(points)
        ax.plot(ks, [points[k]["mean"] for k in ks], marker="o", color=f"C{i}", label=label)
        ax.fill_between(ks, [points[k]["lo"] for k in ks], [points[k]["hi"] for k in ks], color=f"C{i}", alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=9)
    return _save(fig, out_path)


def _save(fig, out_path: Path) -> Path:
    """savefig to a temporary name, then rename (atomic)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out_path)
    return out_path


FORMAT_LABELS = {"format_rate": "R1-Zero format rate", "readable_rate": "summary format rate"}


def _overlay(ax, steps: list, values: list, **style) -> None:
    """A rate drawn over the training accuracy: its moving average over a twentieth of the steps."""
    ax.plot(steps, _moving_average(values, max(1, len(values) // 20)), linewidth=1.5, **style)


def plot_training(metrics_path: Path, out_path: Path, title: str | None = None,
                  evals: dict[int, float] | None = None, format_key: str | None = None) -> Path | None:
    """Write the accuracy / response-length figure; None when there are no rows to plot.

    ``evals``: step → held-out pass@1 (before, during and after training), drawn as markers.
    ``format_key``: the format the stage trains (``format_rate``: R1-Zero tags, stage 1;
    ``readable_rate``: the chat stages' summary format); default: whichever was logged non-zero.
    Stage 4's general rows, judged by the rules, are a line of their own (``general_helpful_rate``), and so
    is the share of chains of thought that check their steps (``recheck_rate``, finding F0) once any does.
    """
    rows = read_jsonl_tolerant(metrics_path)
    if not rows:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    general = any(r.get("general_helpful_rate") is not None for r in rows)  # stage 4: two kinds of rows
    panels = [("accuracy", "training accuracy", "C0"),
              ("mean_length", "mean response length (tokens)", "C1")]
    for ax, (key, label, color) in zip(axes, panels, strict=True):
        steps, values = _series(rows, key)
        if steps:
            window = max(1, len(values) // 20)
            curve = f"moving average ({window})" if window > 1 else None
            if key == "accuracy" and general:
                curve = "reasoning rows: accuracy"
            ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
            ax.plot(steps, _moving_average(values, window), color=color, linewidth=2, label=curve)
        if key == "accuracy":
            fmt = format_key or next((k for k in ("readable_rate", "format_rate")
                                      if any(r.get(k) for r in rows)), "format_rate")
            f_steps, f_values = _series(rows, fmt)
            if f_steps:
                _overlay(ax, f_steps, f_values, color="C2", linestyle="--", label=FORMAT_LABELS.get(fmt, fmt))
            c_steps, c_values = _series(rows, "recheck_rate")  # finding F0: the share that checks, by step
            if any(c_values):
                _overlay(ax, c_steps, c_values, color="C5", linestyle=":", label="chains of thought with checks")
            g_steps, g_values = _series(rows, "general_helpful_rate")
            if g_steps:
                _overlay(ax, g_steps, g_values, color="C4", label="general rows: helpful by the rules")
            if evals:
                xs = sorted(evals)
                ax.plot(xs, [evals[x] for x in xs], "o--", color="C3", label="held-out pass@1")
            ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle(title or f"RL training: {Path(metrics_path).parent.name}")
    fig.tight_layout()
    return _save(fig, out_path)
