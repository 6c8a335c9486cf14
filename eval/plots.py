"""Plots of training metrics (matplotlib, Agg backend: no display needed).

``plot_training(metrics.jsonl, out.png)``: training accuracy and mean response length against step,
the two curves of DeepSeek-R1's Figures 2 (AIME accuracy of R1-Zero during training) and 3 (average
response length of R1-Zero during training). Raw per-step values are drawn faintly, with a moving
average over them.

``plot_compare({label: metrics.jsonl}, out.png, title)``: several runs on shared axes (stage 1 against
stage 3: the cold start's head start in accuracy, and language mixing falling).
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


def steps_to_reach(rows: list[dict], target: float, key: str = "accuracy", window: int = 5) -> int | None:
    """The first step at which the moving average (``window``) of ``key`` reaches ``target``; None if never."""
    steps, values = _series(rows, key)
    for step, v in zip(steps, _moving_average(values, window), strict=True):
        if v >= target:
            return step
    return None


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


def _save(fig, out_path: Path) -> Path:
    """savefig to a temporary name, then rename (atomic)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out_path)
    return out_path


def plot_training(metrics_path: Path, out_path: Path, title: str | None = None,
                  evals: dict[int, float] | None = None) -> Path | None:
    """Write the accuracy / response-length figure; None when there are no rows to plot.

    ``evals``: step → held-out pass@1 (e.g. before and after training), drawn as markers.
    """
    rows = read_jsonl_tolerant(metrics_path)
    if not rows:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panels = [("accuracy", "training accuracy", "C0"),
              ("mean_length", "mean response length (tokens)", "C1")]
    for ax, (key, label, color) in zip(axes, panels, strict=True):
        steps, values = _series(rows, key)
        if steps:
            window = max(1, len(values) // 20)
            ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
            ax.plot(steps, _moving_average(values, window), color=color, linewidth=2,
                    label=f"moving average ({window})" if window > 1 else None)
        if key == "accuracy":
            f_steps, f_values = _series(rows, "format_rate")
            if f_steps:
                ax.plot(f_steps, _moving_average(f_values, max(1, len(f_values) // 20)), color="C2",
                        linewidth=1.5, linestyle="--", label="format rate")
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
