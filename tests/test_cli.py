"""The r1 command: clear errors, not tracebacks."""

import subprocess
import sys


def r1(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "stages.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_unknown_recipe_key_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nbase:\n  pretrian: {}\n")
    res = r1("base", "--recipe", str(p))
    assert res.returncode == 2
    assert "unknown key 'base.pretrian'" in res.stderr and str(p) in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_override_is_a_clear_error():
    res = r1("base", "--set", "base.pretrain.steps=many")
    assert res.returncode == 2 and "base.pretrain.steps" in res.stderr and "Traceback" not in res.stderr


def test_child_stage_without_parent_says_what_to_run(tmp_path):
    res = r1("stage1", "--set", f"run_root={tmp_path}")
    assert res.returncode == 2, res.stderr
    assert "make base" in res.stderr and "Traceback" not in res.stderr


def test_status_of_missing_run(tmp_path):
    res = r1("status", str(tmp_path / "nothing"))
    assert res.returncode == 1 and "no such run folder" in res.stderr
