"""tests/zygote.py answers as ``subprocess.run`` does: output, exit status (a SIGKILL's too), argv,
environment and working directory, and a timeout that kills the child."""

import os
import subprocess
import sys

import pytest

from tests import zygote

SCRIPT = """
import os, signal, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ.get("R1_ZYGOTE_TEST"))
print("to stderr", file=sys.stderr)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "sleep":
    import time; time.sleep(60)
if sys.argv[1] == "raise":
    raise ValueError("from the script")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("how", ["0", "3", "kill", "raise"])
def test_a_forked_run_answers_as_a_fresh_interpreter(tmp_path, how):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": zygote.THREADS, "R1_ZYGOTE_TEST": "yes"}
    cmd = [sys.executable, str(script), how]
    fresh = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    forked = zygote.run(cmd, cwd=tmp_path, env=env, timeout=60)
    assert zygote.forkable(env) and forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout and f"cwd {tmp_path} var yes" in forked.stdout
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
