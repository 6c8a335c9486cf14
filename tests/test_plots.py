"""Figures: training curves (with the format each stage trains), several runs, and held-out pass@1 by
RL step with intervals."""

import json

from eval.plots import plot_compare, plot_step_curves, plot_training
from eval.stats import Estimate


def write_rows(path, accs, mix, **extra):
    path.write_text("".join(json.dumps({"step": i + 1, "accuracy": a, "language_mix_rate": m, "mean_length": 10 + i,
                                        "format_rate": 0.5, **extra}) + "\n"
                            for i, (a, m) in enumerate(zip(accs, mix, strict=True))))
    return path


def test_figures_are_written(tmp_path):
    a = write_rows(tmp_path / "a.jsonl", [i / 20 for i in range(20)], [0.3] * 20)
    b = write_rows(tmp_path / "b.jsonl", [0.6 + i / 100 for i in range(10)], [0.0] * 10)
    out = plot_compare({"stage 1": a, "stage 3": b}, tmp_path / "cmp.png", "test")
    assert out.stat().st_size > 5000 and not list(tmp_path.glob(".*tmp*"))
    assert plot_training(a, tmp_path / "curves.png").stat().st_size > 5000
    assert plot_training(write_rows(tmp_path / "empty.jsonl", [], []), tmp_path / "none.png") is None
    curves = {"stage 1, seed 0": {0: Estimate(0.1, 0.05, 0.15, 200), 40: Estimate(0.5, 0.45, 0.55, 200)},
              "stage 3, seed 0": {0: Estimate(0.6, 0.55, 0.65, 200), 40: Estimate(0.62, 0.57, 0.67, 200)}}
    assert plot_step_curves(curves, tmp_path / "steps.png", "t").stat().st_size > 5000


def test_chat_stages_plot_the_summary_format_stage_4_its_two_kinds_of_rows_and_stage_1_its_checks(tmp_path, monkeypatch):
    import eval.plots as P

    drawn = []
    real = P.plt.Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(P.plt.Axes, "plot", spy)
    chat = write_rows(tmp_path / "s3.jsonl", [0.5] * 10, [0.0] * 10, readable_rate=0.9)
    plot_training(chat, tmp_path / "s3.png", format_key="readable_rate")
    assert "summary format rate" in drawn and "R1-Zero format rate" not in drawn
    drawn.clear()
    s4 = write_rows(tmp_path / "s4.jsonl", [0.5] * 10, [0.0] * 10, readable_rate=0.9, general_helpful_rate=0.3)
    plot_training(s4, tmp_path / "s4.png", format_key="readable_rate")
    assert "reasoning rows: accuracy" in drawn and "general rows: helpful by the rules" in drawn
    drawn.clear()
    plot_training(chat, tmp_path / "s3.png", format_key="readable_rate")  # no chain of thought checks: no line
    assert "chains of thought with checks" not in drawn
    s1 = write_rows(tmp_path / "s1.jsonl", [0.5] * 10, [0.0] * 10, recheck_rate=0.0)
    s1.write_text(s1.read_text() + json.dumps({"step": 11, "accuracy": 0.8, "mean_length": 30, "recheck_rate": 1.0}) + "\n")
    plot_training(s1, tmp_path / "s1.png")
    assert "chains of thought with checks" in drawn
