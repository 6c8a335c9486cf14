"""Manifests: atomic round trip, and parents that are missing, corrupt, incomplete or tampered with
are refused with a message that says what to run."""

import json

import pytest

from data.jsonl import atomic_write_json
from stages.pipeline.manifest import Manifest, ManifestError, require_parent
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import run_stage


@pytest.fixture
def recipe(tmp_path):
    return load_recipe("tiny", [f"run_root={tmp_path}"])


def fake_stage(ctx):
    ckpt = ctx.dir / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "weights.bin").write_bytes(b"\x00" * 64)
    ctx.manifest.update_metrics(score=0.5)
    return ckpt


def test_round_trip(recipe):
    m = run_stage(recipe, "base", fake_stage)
    loaded = Manifest.load(m.path)
    assert loaded.data == m.data
    d = loaded.data
    assert d["status"] == "complete" and d["stage"] == "base"
    assert d["recipe_hash"] == recipe.hash() and d["recipe"]["name"] == "tiny"
    assert d["metrics"]["score"] == 0.5 and "wall_seconds" in d["metrics"]
    assert set(d["metrics"]["core_gflops"]) == {"start", "end"} and min(d["metrics"]["core_gflops"].values()) > 0
    assert d["output"]["files"]["weights.bin"]
    assert d["libraries"]["torch"] and d["libraries"]["trl"]
    assert d["started_at"] and d["ended_at"]


def test_child_refuses_missing_parent(recipe):
    with pytest.raises(ManifestError, match=r"no manifest.*make base"):
        require_parent(recipe.stage_dir("base"), "base", "base")


def test_child_refuses_corrupt_parent(recipe):
    run_stage(recipe, "base", fake_stage)
    path = recipe.stage_dir("base") / "manifest.json"
    path.write_text(path.read_text()[:50])
    with pytest.raises(ManifestError, match="not valid JSON"):
        require_parent(recipe.stage_dir("base"), "base", "base")


def test_child_refuses_incomplete_parent(recipe):
    def crash(ctx):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        run_stage(recipe, "base", crash)
    m = Manifest.load(recipe.stage_dir("base"))
    assert m.status == "failed" and "boom" in m.data["error"]
    with pytest.raises(ManifestError, match="'failed', not complete"):
        require_parent(recipe.stage_dir("base"), "base", "base")


def test_child_refuses_wrong_stage(recipe):
    run_stage(recipe, "base", fake_stage)
    path = recipe.stage_dir("base") / "manifest.json"
    data = json.loads(path.read_text())
    data["stage"] = "stage1"
    atomic_write_json(path, data)
    with pytest.raises(ManifestError, match="expected a 'base' manifest"):
        require_parent(recipe.stage_dir("base"), "base", "base")


def test_child_refuses_changed_checkpoint(recipe):
    m = run_stage(recipe, "base", fake_stage)
    (recipe.stage_dir("base") / "checkpoint" / "weights.bin").write_bytes(b"\x01" * 64)
    with pytest.raises(ManifestError, match=r"weights.bin \(changed\)"):
        require_parent(recipe.stage_dir("base"), "base", "base")
    assert m.status == "complete"


def test_interrupted_stage_is_never_complete_and_resume_is_recorded(recipe):
    def interrupted(ctx):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stage(recipe, "base", interrupted)
    assert Manifest.load(recipe.stage_dir("base")).status == "failed"
    m = run_stage(recipe, "base", fake_stage)
    assert m.status == "complete" and len(m.data["resumes"]) == 1
    # a complete stage is not run again unless restarted
    again = run_stage(recipe, "base", lambda ctx: pytest.fail("must not run"))
    assert again.data["ended_at"] == m.data["ended_at"]
    fresh = run_stage(recipe, "base", fake_stage, restart=True)
    assert fresh.data["resumes"] == []


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "m.json"
    atomic_write_json(target, {"a": 1})

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("stages.pipeline.manifest.os.fsync", disk_full)  # fails after writing, before the rename
    with pytest.raises(OSError):
        atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
