"""eval/sandbox.py: rewards for correct/partial/broken code, and attacks that must fail safely.

Attacks run with small limits (max_processes=32, short timeouts).  Where the machine allows it
(root with namespaces: CI), the filesystem/network/signal attacks are run twice, once with the
audit hook off, to show that the kernel layers hold on their own.
"""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from eval import sandbox
from eval.sandbox import STATUSES, run_tests

ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parent.parent
SQUARE = "def square(x):\n    return x * x\n"


def _kernel_allows_namespaces() -> bool:
    """Checked independently of the sandbox: can a throwaway child unshare pid/mount/net?"""
    if not ROOT:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            os._exit(0 if libc.unshare(0x20000000 | 0x00020000 | 0x40000000) == 0 else 1)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


NAMESPACES = _kernel_allows_namespaces()
# With namespaces, attacks also run with the audit hook off, to show the kernel layers alone hold.
HOOK_MODES = [True, False] if NAMESPACES else [True]


def assert_gone(res: sandbox.SandboxResult) -> None:
    """Nothing the call started survives: its process group and its uid have no process."""
    assert res.status in STATUSES
    assert res.pid is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(res.pid, 0)
    if res.uid is not None and res.uid >= sandbox._UID_BASE:
        assert sandbox.processes_of_uid(res.uid) == []


def test_correct_code_scores_one():
    res = run_tests(SQUARE, ["assert square(2) == 4", "assert square(-3) == 9"])
    assert (res.status, res.passed, res.total, res.fraction) == ("ok", 2, 2, 1.0)
    assert res.per_test == (True, True)
    assert {"session", "rlimits", "audit_hook"} <= set(res.isolation)
    if ROOT:
        assert res.uid is not None and res.uid != 0 and "no_new_privs" in res.isolation
    if NAMESPACES:
        assert {"pidns", "netns", "chroot", "ipcns", "utsns"} <= set(res.isolation)
    assert_gone(res)


def test_partially_correct_code_gets_the_fraction():
    code = "def add(a, b):\n    return a + b if a < 10 else a - b\n"
    tests = ["assert add(1, 2) == 3", "assert add(10, 2) == 12", "assert add(3, 3) == 6"]
    res = run_tests(code, tests)
    assert res.status == "ok"
    assert (res.passed, res.total) == (2, 3)
    assert res.fraction == pytest.approx(2 / 3)
    assert res.per_test == (True, False, True)
    assert sandbox.code_reward_fraction(code, tests) == pytest.approx(2 / 3)


def test_syntax_error_scores_zero():
    res = run_tests("def square(x)\n    return x*x\n", ["assert square(2) == 4"])
    assert (res.status, res.passed, res.fraction) == ("syntax_error", 0, 0.0)
    assert "SyntaxError" in res.detail


def test_top_level_exception_fails_every_test():
    res = run_tests(SQUARE + "raise ValueError('boom')\n", ["assert square(2) == 4"])
    assert (res.status, res.passed) == ("runtime_error", 0)
    assert "ValueError" in res.detail


def test_no_tests_and_main_guard_and_stdlib():
    code = ("import math, re, collections, heapq, itertools, functools\n"
            "def f(xs):\n    return heapq.nsmallest(1, xs)[0] + math.isqrt(16)\n"
            "if __name__ == '__main__':\n    raise SystemExit('demo block must not run')\n")
    res = run_tests(code, ["assert f([5, 3]) == 7"])
    assert (res.status, res.fraction) == ("ok", 1.0), res.detail
    empty = run_tests(SQUARE, [])
    assert (empty.status, empty.total, empty.fraction) == ("ok", 0, 0.0)


def test_minimal_environment_fixed_hash_seed_and_cwd_writes(monkeypatch):
    monkeypatch.setenv("R1_TEST_SECRET", "hunter2")
    code = ("import os, tempfile\n"
            "print(sorted(os.environ), hash('abc'))\n"
            "open('scratch.txt', 'w').write('ok')\n"
            "with tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n")
    first = run_tests(code, ["assert open('scratch.txt').read() == 'ok'"])
    second = run_tests(code, [])
    assert first.status == "ok" and first.fraction == 1.0, first.detail
    assert "hunter2" not in first.output and "R1_TEST_SECRET" not in first.output
    assert first.output == second.output  # PYTHONHASHSEED is fixed


def test_temporary_directories_are_removed(monkeypatch):
    made: list[str] = []

    def mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", mkdtemp)
    run_tests("open('f', 'w').write('x' * 1000)", [])
    run_tests("while True: pass", [], timeout_s=0.5)
    assert len(made) == 2
    assert not any(os.path.exists(path) for path in made)


def test_infinite_loop_times_out():
    start = time.monotonic()
    res = run_tests(SQUARE + "while True:\n    pass\n", ["assert square(2) == 4"], timeout_s=1.0)
    assert res.status == "timeout" and res.passed == 0
    assert time.monotonic() - start < 4
    assert_gone(res)


def test_hanging_test_keeps_earlier_results():
    code = SQUARE + "def hang():\n    while True:\n        pass\n"
    res = run_tests(code, ["assert square(2) == 4", "hang()", "assert square(3) == 9"], timeout_s=1.0)
    assert res.status == "timeout"
    assert res.per_test == (True, False, False) and res.passed == 1
    assert_gone(res)


def test_cpu_limit():
    start = time.monotonic()
    res = run_tests("while True:\n    pass\n", [], timeout_s=8.0, cpu_s=1)
    assert res.status == "timeout" and "CPU" in res.detail
    assert time.monotonic() - start < 6
    assert_gone(res)


@pytest.mark.parametrize("catch", [False, True], ids=["plain", "retrying"])
def test_fork_bomb_is_contained(catch):
    body = "    try:\n        os.fork()\n    except OSError:\n        pass\n" if catch else "    os.fork()\n"
    start = time.monotonic()
    res = run_tests("import os\nwhile True:\n" + body, ["assert True"], timeout_s=2.0, max_processes=32)
    assert res.passed == 0
    assert res.status == ("timeout" if catch else "runtime_error")
    assert time.monotonic() - start < 6
    assert_gone(res)


def test_background_daemon_does_not_survive():
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    res = run_tests(code, ["assert True"], max_processes=8)
    assert res.status == "ok"
    assert_gone(res)


def test_memory_hog():
    start = time.monotonic()
    res = run_tests("x = bytearray(10 * 1024 ** 3)\n", ["assert True"], memory_mb=512)
    assert (res.status, res.passed) == ("memory", 0)
    assert time.monotonic() - start < 5
    assert_gone(res)


@pytest.mark.parametrize("hook", HOOK_MODES, ids=lambda h: f"hook={h}")
def test_writes_outside_the_cwd_fail(hook):
    targets = [Path(tempfile.gettempdir()) / f"r1-sbx-{uuid.uuid4().hex}", REPO / f"r1-sbx-{uuid.uuid4().hex}"]
    code = "def f():\n    return 1\n" + "".join(
        f"try:\n    open({str(t)!r}, 'w').write('pwned')\nexcept OSError as e:\n    print(type(e).__name__)\n"
        for t in targets)
    try:
        res = run_tests(code, ["assert f() == 1"], audit_hook=hook)
        assert res.status == "ok", res.detail
        for target in targets:
            assert not target.exists()
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


@pytest.mark.parametrize("hook", HOOK_MODES, ids=lambda h: f"hook={h}")
def test_network_is_unreachable(hook):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    code = ("import socket\n"
            "def connect(host, port):\n"
            "    s = socket.socket()\n    s.settimeout(1)\n    s.connect((host, port))\n    return True\n")
    try:
        res = run_tests(code, [f"assert connect('127.0.0.1', {port})", "assert connect('1.1.1.1', 53)"],
                        audit_hook=hook, timeout_s=5)
        assert res.passed == 0
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


@pytest.mark.parametrize("hook", HOOK_MODES, ids=lambda h: f"hook={h}")
def test_killing_the_parent_fails(hook):
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.killpg(os.getpgid(0), 9)\n"
    res = run_tests(code, ["assert True"], audit_hook=hook)
    assert res.passed == 0 and res.status in ("runtime_error", "crash")
    assert_gone(res)
    assert run_tests(SQUARE, ["assert square(3) == 9"]).fraction == 1.0  # we are alive and well


def test_huge_output_is_bounded():
    start = time.monotonic()
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    res = run_tests(code, ["assert True"], max_output_bytes=1_000_000)
    assert res.status == "output_limit"
    assert len(res.output) <= 4096
    assert time.monotonic() - start < 5
    assert_gone(res)


@pytest.mark.skipif(not ROOT, reason="a root-owned 0600 file is only private from a dropped uid")
@pytest.mark.parametrize("namespaces", [True, False], ids=["chroot", "uid-only"])
def test_reading_private_files_fails(namespaces):
    if namespaces and not NAMESPACES:
        pytest.skip("the kernel refuses namespaces here")
    secret = REPO / f".r1-sbx-secret-{uuid.uuid4().hex}"
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    try:
        code = f"def leak():\n    return open({str(secret)!r}).read()\n"
        res = run_tests(code + "try:\n    print(leak())\nexcept OSError as e:\n    print(e)\n",
                        ["assert leak() == 'TOPSECRET'"], namespaces=namespaces)
        assert res.passed == 0
        assert "TOPSECRET" not in res.output
        assert ("No such file" if namespaces else "Permission denied") in res.output
    finally:
        secret.unlink()


def test_forged_results_are_ignored():
    # Lines without the per-call token, written to the result channel and stdout, then a
    # hard exit before the harness reports anything.
    code = ("import os\n"
            "for fd in (1, 3):\n"
            "    try:\n"
            "        os.write(fd, b'x test 0 1 - -\\nx done\\n')\n"
            "    except OSError:\n"
            "        pass\n"
            "os._exit(0)\n")
    res = run_tests(code, ["assert False"])
    assert (res.status, res.passed) == ("crash", 0)


def test_concurrent_calls_from_threads():
    results: list[sandbox.SandboxResult] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        res = run_tests(SQUARE, [f"assert square({i}) == {i * i}", f"assert square({i}) == -1"])
        with lock:
            results.append(res)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.fraction for r in results] == [0.5] * 6
    if ROOT:
        assert len({r.uid for r in results}) == 6


def test_internal_failure_is_sandbox_error_not_raised(monkeypatch):
    before = sandbox.sandbox_error_count()
    monkeypatch.setattr(sandbox.sys, "executable", "/nonexistent/python")
    res = run_tests(SQUARE, ["assert square(2) == 4"])
    assert (res.status, res.fraction) == ("sandbox_error", 0.0)
    assert sandbox.sandbox_error_count() == before + 1
