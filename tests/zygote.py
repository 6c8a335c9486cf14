"""The project's command line, run in forked copies of one process that has already imported torch,
transformers and TRL.

The suite runs the real CLI in a separate process some fifty times (the fault-injection cases SIGKILL
it); a fresh interpreter spends 5-10 s of each run importing the same libraries. :func:`run` does what
``subprocess.run([sys.executable, "-m", module, *args], …)`` (or ``[sys.executable, script, …]``) does:
same argv, environment, working directory, ``sys.path[0]``, captured output and its buffering, exit
status (a SIGKILL's included), the start of interpreter shutdown (non-daemon threads, atexit). But the
process is a fork of a "zygote" started once per test session, which has imported the heavy modules and
computed nothing: no thread pool to inherit, nothing but ``sys.modules``. What the fork does not
repeat is only the import.

A run goes through a fresh interpreter as before when its environment differs from the zygote's in a
variable that imports may read (anything outside :data:`READ_AT_CALL`; ``OMP_NUM_THREADS`` must be
:data:`THREADS`, which OpenMP reads when torch loads). ``R1_TEST_NO_ZYGOTE=1`` sends every run through
a fresh interpreter.

Protocol on the zygote's stdin/stdout, one JSON object a line: the test sends
``{"module" or "path", "args", "env", "cwd", "stdout", "stderr"}`` (the last two: files for the child's
output); the zygote answers ``{"pid": …}`` when the child is forked and ``{"returncode": …}`` when it has
ended.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THREADS = "1"  # the zygote's OMP_NUM_THREADS: one thread per process, as the suite's CLI runs use
PRELOAD = ("torch", "transformers", "trl", "stages.commands.cli", "stages.pipeline.runner", "stages.base", "stages.stage1_zero",
           "stages.stage2_cold_start", "stages.stage3_reasoning_rl", "stages.stage4_final", "stages.distill",
           "tests.oracle")
# Variables read when called, not when imported (the project's: data/faults.py, stages/pipeline/threads.py,
# data/benchmarks.py; tokenizers reads its own at first use; the interpreter's output settings, which
# the child applies itself; pytest's note of the running test): a run may set them and still fork.
READ_AT_CALL = frozenset({"R1_FAULT", "R1_THREADS", "R1_BENCHMARKS_DIR", "TOKENIZERS_PARALLELISM",
                          "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTEST_CURRENT_TEST"})

_zygote: subprocess.Popen | None = None
_zygote_env: dict | None = None
_pending = b""  # bytes read from the zygote's pipe past the last full line


def _child(request: dict) -> None:
    """In the forked child: become ``python -m module args…`` (or ``python script args…``); never
    returns into :func:`serve`'s loop."""
    import io
    import runpy
    import traceback

    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # not the zygote's request pipe
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        # as a fresh interpreter writing to files: stdout block-buffered unless PYTHONUNBUFFERED, stderr
        # line-buffered and never failing on a character
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        encoding = os.environ.get("PYTHONIOENCODING") or "utf-8"
        sys.stdin = open(0, closefd=False)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding=encoding, write_through=unbuffered)
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), encoding=encoding, errors="backslashreplace",
                                      line_buffering=True)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    try:
        if request.get("module"):
            sys.argv = [request["module"], *request["args"]]
            sys.path[0] = os.getcwd()  # as `python -m` sets it
            sys.modules.pop(request["module"], None)  # run afresh as __main__, as `python -m` does
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["path"], *request["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))  # as `python script` sets it
            runpy.run_path(request["path"], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    _shut_down(code)


def _shut_down(code) -> None:
    """The first steps of the interpreter's shutdown, as a fresh one takes them: wait for non-daemon
    threads, run the atexit handlers, print a SystemExit's message, flush. Not the teardown of every
    module after them (seconds with torch loaded): only objects still referenced at exit go unfinalized."""
    import atexit as atexit_
    import threading

    try:
        threading._shutdown()
        atexit_._run_exitfuncs()
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


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
        reply.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        print(json.dumps({"pid": pid}), file=reply, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=reply, flush=True)


def _environment() -> dict:
    """The zygote's environment: the one it was started with, or would be started with now."""
    return _zygote_env if _zygote_env is not None else {**os.environ, "OMP_NUM_THREADS": THREADS}


def _start() -> subprocess.Popen:
    global _zygote, _zygote_env, _pending
    if _zygote is None or _zygote.poll() is not None:
        _zygote_env = _environment()
        _pending = b""
        _zygote = subprocess.Popen([sys.executable, "-m", "tests.zygote"], cwd=REPO, env=_zygote_env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        atexit.register(_zygote.kill)
        assert _read(_zygote, 120) == {"ready": True}, "the test zygote did not start"
    return _zygote


def _stop() -> None:
    """Forget the zygote after a failed exchange: the next run starts a fresh one."""
    global _zygote, _zygote_env
    if _zygote is not None:
        _zygote.kill()
        _zygote.wait()
    _zygote, _zygote_env = None, None


def _read(zygote: subprocess.Popen, timeout: float | None) -> dict:
    """The next reply line, waiting at most ``timeout`` seconds (None: no limit). Reads the unbuffered
    pipe itself, so a line already read is never waited for again."""
    global _pending
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in _pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([zygote.stdout], [], [], left)
        if not ready:
            raise TimeoutError
        chunk = os.read(zygote.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError("the test zygote died")
        _pending += chunk
    line, _pending = _pending.split(b"\n", 1)
    return json.loads(line)


def forkable(env: dict) -> bool:
    """Whether a run with ``env`` behaves in a fork of the zygote as in a fresh interpreter."""
    if os.environ.get("R1_TEST_NO_ZYGOTE") == "1" or env.get("OMP_NUM_THREADS") != THREADS:
        return False
    base = _environment()
    return all(env.get(k) == base.get(k) for k in env.keys() | base.keys() if k not in READ_AT_CALL)


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
        try:
            zygote.stdin.write((json.dumps(request) + "\n").encode())
            pid = _read(zygote, 60)["pid"]
        except BaseException:
            _stop()
            raise
        try:
            code = _read(zygote, timeout)["returncode"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)  # still the child: the zygote has not reaped it
            _read(zygote, 60)
            raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text()) from None
        except BaseException:
            _stop()
            raise
        return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())


if __name__ == "__main__":
    serve()
