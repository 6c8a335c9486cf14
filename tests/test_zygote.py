"""tests/zygote.py answers as ``subprocess.run`` does: output and its buffering, exit status (a
SIGKILL's too), argv, environment, working directory and ``sys.path``, atexit handlers, the project's
CLI run with ``-m``, and a timeout that kills the child."""

import os
import subprocess
import sys

import pytest

from tests import zygote

SCRIPT = """
import atexit, os, signal, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ.get("R1_FAULT"), "path", sys.path[0])
print("to stderr", file=sys.stderr)
atexit.register(print, "atexit ran")
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "sleep":
    import time; time.sleep(60)
if sys.argv[1] == "raise":
    raise ValueError("from the script")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("as_module", [False, True])
@pytest.mark.parametrize("how", ["0", "3", "kill", "raise"])
def test_a_forked_run_answers_as_a_fresh_interpreter(tmp_path, how, as_module):
    (tmp_path / "zygote_script.py").write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": zygote.THREADS, "R1_FAULT": "none", "PYTHONUNBUFFERED": ""}
    target = ["-m", "zygote_script"] if as_module else [str(tmp_path / "zygote_script.py")]
    cmd = [sys.executable, *target, how]
    fresh = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    forked = zygote.run(cmd, cwd=tmp_path, env=env, timeout=60)
    assert zygote.forkable(env) and forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout  # block-buffered: a SIGKILL loses what was printed, as fresh
    if how in ("0", "3", "raise"):
        assert f"cwd {tmp_path} var none path {tmp_path}" in forked.stdout and "atexit ran" in forked.stdout
    assert forked.stderr.splitlines()[0] == "to stderr"
    if how == "raise":
        assert "ValueError: from the script" in forked.stderr and forked.returncode == 1
    else:
        assert forked.stderr == fresh.stderr


def test_a_forked_run_past_its_timeout_is_killed(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, str(script), "sleep"], cwd=tmp_path, timeout=2,
                   env={**os.environ, "OMP_NUM_THREADS": zygote.THREADS})
    ok = zygote.run([sys.executable, str(script), "0"], cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": zygote.THREADS})
    assert ok.returncode == 0  # the zygote serves the next run


def test_the_cli_forked_writes_what_it_writes_fresh(tmp_path):
    cmd = [sys.executable, "-m", "stages.commands.cli", "status", str(tmp_path / "nothing")]
    env = {**os.environ, "OMP_NUM_THREADS": zygote.THREADS}
    fresh = subprocess.run(cmd, cwd=zygote.REPO, env=env, capture_output=True, text=True, timeout=120)
    forked = zygote.run(cmd, cwd=zygote.REPO, env=env, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_an_environment_that_imports_read_is_not_forked():
    env = {**os.environ, "OMP_NUM_THREADS": zygote.THREADS}
    assert zygote.forkable(env) and zygote.forkable({**env, "R1_FAULT": "pretrain_step@3"})
    assert not zygote.forkable({**env, "OMP_NUM_THREADS": "2"})
    assert not zygote.forkable({**env, "PYTHONPATH": "/elsewhere"})
    assert not zygote.forkable({**env, "HF_HOME": "/elsewhere"})
