"""Experiment tracking, evaluation during training, model cards and pushing, all offline: a micro stage 1
tracked with trackio writes its metrics and provenance into trackio's local database (``TRACKIO_DIR``,
a temporary folder for the session: conftest.py); ``eval_every`` puts held-out pass@1 into the step's
metrics; the checkpoint carries a model card; pushing is off unless asked, and goes through
``huggingface_hub`` only when asked (a recorder stands in for the hub here)."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

import stages.stage1_zero
from data.jsonl import read_jsonl_tolerant
from stages.pipeline import cards
from stages.pipeline.recipe import RecipeError, load_recipe
from stages.pipeline.runner import run_stage
from tests.micro import recipe, with_base

RUN = "tracked/stage1/grpo/seed0"


def trackio_records(project: str) -> tuple[dict[int, dict], dict]:
    """(metrics by step, config) of run ``RUN`` in trackio's local database of ``project``."""
    (db,) = Path(os.environ["TRACKIO_DIR"]).glob(f"{project}*.db")
    with sqlite3.connect(db) as con:
        metrics: dict[int, dict] = {}  # (one step may come in several rows: TRL logs its timings apart)
        for name, step, m in con.execute("SELECT run_name, step, metrics FROM metrics"):
            if name == RUN:
                metrics.setdefault(step, {}).update(json.loads(m))
        configs = {name: json.loads(c) for name, c in con.execute("SELECT run_name, config FROM configs")}
    return metrics, configs[RUN]


class Hub:
    """Records what would have been sent to the hub."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw["repo_id"], kw))

    def upload_file(self, **kw):
        self.calls.append(("upload_file", kw["repo_id"], kw))


@pytest.fixture(scope="module")
def tracked(base_run, tmp_path_factory):
    """A micro stage 1 tracked with trackio, evaluated every 2 steps; the hub unreachable."""
    root = with_base(base_run, tmp_path_factory.mktemp("runs"), "tracked")
    r = recipe(root, "tracked", ["tracking.report_to=trackio", "tracking.project=r1-test", "stage1.eval_every=2",
                                 "stage1.eval_problems=3"])
    real = cards.hub_api
    cards.hub_api = lambda: pytest.fail("the hub was called with push_to_hub off")
    try:
        m = run_stage(r, "stage1", stages.stage1_zero.run)
    finally:
        cards.hub_api = real
    return r, m


def test_a_tracked_stage_writes_its_metrics_and_provenance_locally(tracked):
    r, m = tracked
    assert m.status == "complete" and m.data["metrics"]["train"]["trl"]["report_to"] == ["trackio"]
    assert m.data["metrics"]["train"]["trl"]["run_name"] == RUN
    metrics, config = trackio_records("r1-test")
    rows = read_jsonl_tolerant(r.stage_dir("stage1") / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3, 4] and set(metrics) >= {1, 2, 3, 4}
    for row in rows:  # every step's loss reached the tracker
        assert metrics[row["step"]]["train/loss"] == pytest.approx(row["loss"])
    assert config["r1/recipe_hash"] == r.hash() and config["r1/stage"] == "stage1"
    assert config["r1/manifest"] == str(m.path) and config["learning_rate"] == 1e-3  # TRL's args too


def test_eval_every_logs_held_out_pass_at_1_while_training(tracked):
    r, _ = tracked
    rows = read_jsonl_tolerant(r.stage_dir("stage1") / "metrics.jsonl")
    assert [row["eval_pass@1"] is not None for row in rows] == [False, True, False, True]  # steps 2 and 4
    assert all(0.0 <= row["eval_pass@1"] <= 1.0 for row in rows[1::2])
    metrics, _ = trackio_records("r1-test")
    # (transformers' trackers file eval_* keys under eval/)
    assert [metrics[s].get("eval/pass@1") for s in (1, 2, 3, 4)] == [None, rows[1]["eval_pass@1"], None, rows[3]["eval_pass@1"]]


def test_the_checkpoint_carries_a_model_card_and_pushes_only_when_asked(tracked, tmp_path):
    r, m = tracked
    card = (Path(m.checkpoint) / "README.md").read_text()
    assert card.startswith("---\n") and "# tracked / stage1" in card and "`base`" in card
    assert m.data["recipe_hash"][:16] in card and "make stage1 RECIPE=tracked" in card
    assert "pass@1 (95% interval)" in card and "README.md" in m.data["output"]["files"]
    hub = Hub()
    assert cards.push(r.stage_dir("stage1"), "me/tiny-stage1", api=hub) == ["me/tiny-stage1"]
    assert hub.calls[0] == ("create_repo", "me/tiny-stage1", {"private": True, "exist_ok": True})
    assert hub.calls[1][2]["folder_path"] == m.checkpoint
    assert hub.calls[2][2]["path_in_repo"] == "r1_manifest.json" and hub.calls[2][2]["path_or_fileobj"] == str(m.path)
    (Path(m.checkpoint) / "extra.bin").write_bytes(b"x")  # a checkpoint that no longer matches: not pushed
    try:
        with pytest.raises(ValueError, match="no longer matches"):
            cards.push(r.stage_dir("stage1"), "me/tiny-stage1", api=Hub())
    finally:
        (Path(m.checkpoint) / "extra.bin").unlink()


def test_tracking_and_hub_settings_are_checked_before_any_work(base_run, tmp_path):
    root = with_base(base_run, tmp_path, "untracked")
    r = recipe(root, "untracked", ["tracking.report_to=[wandb]"])  # not installed here
    with pytest.raises(ValueError, match="tracking.report_to: wandb is not installed"):
        run_stage(r, "stage1", stages.stage1_zero.run)
    assert not (r.stage_dir("stage1") / "trainer").exists()
    for bad, message in (("tracking.report_to=[none, trackio]", "stand alone"),
                         ("hub.push_to_hub=true", "needs hub.repo_prefix"),
                         ("stage4.helpfulness.eval_every=5", "eval_every applies to RL and SFT")):
        with pytest.raises((RecipeError, ValueError), match=message):
            load_recipe("tiny", [bad])


def test_r1_push_and_push_to_hub_send_the_stage(tracked, base_run, tmp_path, monkeypatch, capsys):
    """`r1 push` uploads the checkpoint with its card; `hub.push_to_hub` does it as a stage completes."""
    from stages.commands.cli import main

    r, m = tracked
    hub = Hub()
    monkeypatch.setattr(cards, "hub_api", lambda: hub)
    assert main(["push", "stage1", "me/tiny-stage1", "--run-dir", str(r.stage_dir("base").parent), "--public"]) == 0
    assert "https://huggingface.co/me/tiny-stage1" in capsys.readouterr().out
    assert hub.calls[0] == ("create_repo", "me/tiny-stage1", {"private": False, "exist_ok": True})
    assert hub.calls[1][2]["folder_path"] == m.checkpoint
    hub.calls.clear()
    pushed = recipe(with_base(base_run, tmp_path, "pushed"), "pushed", ["hub.push_to_hub=true", "hub.repo_prefix=me/tiny",
                                                                        "stage1.steps=2"])
    run_stage(pushed, "stage1", stages.stage1_zero.run)
    assert [c[:2] for c in hub.calls] == [("create_repo", "me/tiny-stage1"), ("upload_folder", "me/tiny-stage1"),
                                          ("upload_file", "me/tiny-stage1")]

    def unreachable(**kw):
        raise ConnectionError("the hub is unreachable")

    hub.upload_folder = unreachable  # a failed push is said; the stage is complete all the same
    m = run_stage(pushed, "stage1", stages.stage1_zero.run, restart=True)
    assert m.status == "complete" and "r1 push stage1 me/tiny-stage1" in (pushed.stage_dir("stage1") / "stage.log").read_text()
