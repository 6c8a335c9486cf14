"""Training-curve figures and the 'steps to reach' measure of the cold-start comparison."""

import json

from eval.plots import plot_compare, plot_training, steps_to_reach


def write_rows(path, accs, mix):
    path.write_text("".join(json.dumps({"step": i + 1, "accuracy": a, "language_mix_rate": m, "mean_length": 10 + i,
                                        "format_rate": 0.5}) + "\n" for i, (a, m) in enumerate(zip(accs, mix, strict=True))))
    return path


def test_steps_to_reach_uses_the_moving_average():
    rows = [{"step": i + 1, "accuracy": a} for i, a in enumerate([0, 0, 1, 0, 0, 1, 1, 1, 1, 1])]
    assert steps_to_reach(rows, 0.5, window=1) == 3  # the raw value touches 0.5 at step 3
    assert steps_to_reach(rows, 0.5, window=5) == 7  # the 5-step average only at step 7 (3/5)
    assert steps_to_reach(rows, 1.01) is None


def test_figures_are_written(tmp_path):
    a = write_rows(tmp_path / "a.jsonl", [i / 20 for i in range(20)], [0.3] * 20)
    b = write_rows(tmp_path / "b.jsonl", [0.6 + i / 100 for i in range(10)], [0.0] * 10)
    out = plot_compare({"stage 1": a, "stage 3": b}, tmp_path / "cmp.png", "test")
    assert out.stat().st_size > 5000 and not list(tmp_path.glob(".*tmp*"))
    assert plot_training(a, tmp_path / "curves.png").stat().st_size > 5000
    assert plot_training(write_rows(tmp_path / "empty.jsonl", [], []), tmp_path / "none.png") is None
