"""The project's command line, run in forked copies of one process that has already imported torch,
transformers and TRL.

The suite runs the real CLI in a separate process some fifty times (the fault-injection cases SIGKILL
it); a fresh interpreter spends 5-10 s of each run importing the same libraries. :func:`run` does what
``subprocess.run([sys.executable, "-m", module, *args], …)`` (or ``[sys.executable, script, …]``) does (same argv, environment, working
directory, captured output, exit status: a SIGKILL's included), but the process is a fork of a "zygote"
started once per test session, which has imported the heavy modules and computed nothing: no thread
pool to inherit, nothing but ``sys.modules``. What the fork does not repeat is only the import.

Runs whose environment the imports themselves read go through a fresh interpreter as before:
``OMP_NUM_THREADS`` other than the zygote's (OpenMP reads it when torch loads) and a ``PYTHONPATH``
(``sitecustomize`` hooks). ``R1_TEST_NO_ZYGOTE=1`` sends every run through a fresh interpreter.

Protocol on the zygote's stdin/stdout, one JSON object a line: the test sends
``{"module" or "path", "args", "env", "cwd", "stdout", "stderr"}`` (the last two: files for the child's output);
the zygote answers ``{"pid": …}`` when the child is forked and ``{"returncode": …}`` when it has ended.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THREADS = "1"  # the zygote's OMP_NUM_THREADS: one thread per process, as the suite's CLI runs use
PRELOAD = ("torch", "transformers", "trl", "stages.cli", "stages.runner", "stages.base", "stages.stage1_zero",
           "stages.stage2_cold_start", "stages.stage3_reasoning_rl", "stages.stage4_final", "stages.distill",
           "tests.oracle")

_zygote: subprocess.Popen | None = None


def _child(request: dict) -> None:
    """In the forked child: become ``python -m module args…`` and never return."""
    import runpy
    import traceback

    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        sys.stdin = open(os.devnull)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # line-buffered, as on a terminal: a SIGKILL
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # loses no finished line
        if request.get("module"):
            sys.argv = [request["module"], *request["args"]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["path"], *request["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))  # as `python script` sets it
            runpy.run_path(request["path"], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """The zygote: import, then fork one child per request line, in turn."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    reply = sys.stdout
    sys.stdout = sys.stderr  # nothing but the protocol on the pipe
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), file=reply, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=reply, flush=True)


def _start() -> subprocess.Popen:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        env = {**os.environ, "OMP_NUM_THREADS": THREADS}
        _zygote = subprocess.Popen([sys.executable, "-m", "tests.zygote"], cwd=REPO, env=env, text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert json.loads(_zygote.stdout.readline()) == {"ready": True}, "the test zygote did not start"
        atexit.register(_zygote.kill)
    return _zygote


def _read(zygote: subprocess.Popen, timeout: float | None) -> dict:
    ready, _, _ = select.select([zygote.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError
    line = zygote.stdout.readline()
    if not line:
        raise RuntimeError("the test zygote died")
    return json.loads(line)


def forkable(env: dict) -> bool:
    return (os.environ.get("R1_TEST_NO_ZYGOTE") != "1" and env.get("OMP_NUM_THREADS") == THREADS
            and not env.get("PYTHONPATH"))


def run(cmd: list[str], *, env: dict | None = None, cwd: str | os.PathLike | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, …)`` for ``cmd = [sys.executable, "-m", module,
    *args]`` or ``[sys.executable, script, *args]``, in a fork of the zygote where :func:`forkable` allows it."""
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    if cmd[0] != sys.executable or len(cmd) < 2 or not forkable(env):
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    zygote = _start()
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        target = {"module": cmd[2], "args": cmd[3:]} if cmd[1] == "-m" else {"path": cmd[1], "args": cmd[2:]}
        request = {**target, "env": env, "cwd": cwd, "stdout": str(out), "stderr": str(err)}
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        pid = _read(zygote, 60)["pid"]
        try:
            code = _read(zygote, timeout)["returncode"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            _read(zygote, 60)
            raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())


if __name__ == "__main__":
    serve()
