"""eval/sandbox.py: rewards for correct/partial/broken code, and attacks that must fail safely.

Attacks run with small limits (max_processes=32, short timeouts).  Where the machine allows it
(root with namespaces: CI), the filesystem/network/signal attacks are run twice, once with the
audit hook off, to show that the kernel layers hold on their own.  The verdict forgeries (patched
builtins, rewritten frames, forged result lines, ...) all scored 1.0 when the code and the tests
shared an interpreter; they run with the hook on and off, directly and through the reward.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from eval import sandbox
from eval.sandbox import STATUSES, run_tests
from eval.sandbox_child import _decode, _encode

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
    # Lines without the per-call token, written to fds 1 and 3 (the candidate has no result
    # channel at all now: fd 3, if open, is one of its own pipes), then a hard exit at import.
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
        judges = {layer for r in results for layer in r.isolation if layer.startswith("judge_uid:")}
        assert len(judges) == 6 and not judges & {f"judge_uid:{r.uid}" for r in results}


def test_internal_failure_is_sandbox_error_not_raised(monkeypatch):
    before = sandbox.sandbox_error_count()
    monkeypatch.setattr(sandbox.sys, "executable", "/nonexistent/python")
    res = run_tests(SQUARE, ["assert square(2) == 4"])
    assert (res.status, res.fraction) == ("sandbox_error", 0.0)
    assert sandbox.sandbox_error_count() == before + 1


# ---------------------------------------------------------------------------------------------
# Verdict forgeries.  Each one made the old single-interpreter harness report tests it fails as
# passed (2/2 below), except two guards for the new design: ``atexit_handler`` (the old harness
# left with os._exit after its last record, so handlers ran too late) and
# ``result_channel_reopened_via_proc`` (needs the caller's uid, i.e. no root: it forged through a
# pipe as result channel; test_without_root_forgeries_still_fail runs it unprivileged).  All are
# judged by a process the code never runs in, so they simply fail.
# ---------------------------------------------------------------------------------------------

FORGE_TESTS = ["assert f(1) == 2", "assert f(2) == 3"]
WRONG = "def f(x):\n    return 0\n"
_FIND_TOKEN = """
import os, sys
def _token(frames):
    for frame in frames:
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if isinstance(value, dict) and isinstance(value.get("token"), str):
                    return value["token"]
                if isinstance(getattr(value, "token", None), str):
                    return value.token
            frame = frame.f_back
def _forge():
    tok = _token([sys._getframe()] + list(sys._current_frames().values()))
    if tok:
        lines = "".join(f"{tok} {rec}\\n" for rec in ("code ok", "test 0 1 - -", "test 1 1 - -", "done"))
        for fd in range(3, 32):
            try:
                os.write(fd, lines.encode())
            except OSError:
                pass
"""
FORGERIES = {
    "exec_override": WRONG + "import builtins\nbuiltins.exec = lambda *a, **k: None\n",
    "compile_override": WRONG + ("import builtins\n_compile = builtins.compile\n"
                                 "builtins.compile = lambda *a, **k: _compile('pass', '<forged>', 'exec')\n"),
    "tests_rewritten_via_f_locals": WRONG + (
        "import sys\nframe = sys._getframe()\nwhile frame is not None:\n"
        "    for value in list(frame.f_locals.values()):\n"
        "        tests = value.get('tests') if isinstance(value, dict) else None\n"
        "        if isinstance(tests, list):\n            tests[:] = ['pass'] * len(tests)\n"
        "    frame = frame.f_back\n"),
    "forged_result_lines": WRONG + _FIND_TOKEN + "_forge()\n",
    "forged_lines_then_exit_at_import": WRONG + _FIND_TOKEN + "_forge()\nos._exit(0)\n",
    "forging_thread": WRONG + _FIND_TOKEN + "import threading\nt = threading.Thread(target=_forge)\nt.start()\nt.join()\n",
    "atexit_handler": WRONG + _FIND_TOKEN + ("import atexit\natexit.register(_forge)\n_exit = os._exit\n"
                                             "os._exit = lambda code: (atexit._run_exitfuncs(), _exit(code))\n"),
    "always_true_eq": ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                       "    __hash__ = object.__hash__\ndef f(x):\n    return Anything()\n"),
    # Without root the candidate shares the caller's uid: reopening the caller's end of a *pipe*
    # through /proc/<pid>/fd gave it a working result channel (the token it has from memory).
    "result_channel_reopened_via_proc": WRONG + _FIND_TOKEN + (
        "tok = _token([sys._getframe()])\n"
        "lines = ''.join(f'{tok} test {i} 1 - -\\n' for i in (0, 1)).encode()\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    try:\n        fds = os.listdir(f'/proc/{pid}/fd')\n    except OSError:\n        continue\n"
        "    for fd in fds:\n        try:\n"
        "            w = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)\n"
        "            os.write(w, lines)\n            os.close(w)\n"
        "        except OSError:\n            pass\n"),
}


def _completion(code: str) -> str:
    return f" <think> x </think> <answer>\n```python\n{code}```\n</answer>"


@pytest.mark.parametrize("hook", [True, False], ids=lambda h: f"hook={h}")
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_verdicts_score_zero(name, hook):
    res = run_tests(FORGERIES[name], FORGE_TESTS, audit_hook=hook)
    assert (res.passed, res.fraction, res.per_test) == (0, 0.0, (False, False)), (res.status, res.detail)
    assert res.status in STATUSES and res.status != "sandbox_error"
    assert "judge" in res.isolation


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_verdicts_earn_no_reward(name):
    from stages.training.rewards import accuracy_reward

    assert accuracy_reward([_completion(FORGERIES[name])], answer=[None], verifier=["code"],
                           tests=[FORGE_TESTS]) == [0.0]


def test_honest_solutions_score_as_before():
    from stages.training.rewards import accuracy_reward

    right, half = "def f(x):\n    return x + 1\n", "def f(x):\n    return 2 if x == 1 else 0\n"
    assert [run_tests(c, FORGE_TESTS).fraction for c in (WRONG, right, half)] == [0.0, 1.0, 0.5]
    assert accuracy_reward([_completion(c) for c in (WRONG, right, half)], answer=[None] * 3,
                           verifier=["code"] * 3, tests=[FORGE_TESTS] * 3) == [0.0, 1.0, 0.5]


def _unprivileged_python() -> str | None:
    """An interpreter of this Python version that an unprivileged uid can run (ours may live under
    a root-only directory), or None."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for path in (os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        try:
            probe = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"], user=65534,
                                   group=65534, extra_groups=[], capture_output=True, text=True, cwd="/")
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return path
    return None


@pytest.mark.skipif(not ROOT, reason="needs root to switch to an unprivileged uid")
def test_without_root_forgeries_still_fail():
    """The fallback without root (no namespaces, no uid drop, no cgroup: C and O share the
    caller's uid): honest code is graded as usual and every forgery, hook on or off, scores 0."""
    python = _unprivileged_python()
    if python is None or not os.access(REPO / "eval" / "sandbox.py", os.R_OK):
        pytest.skip("no interpreter of this version that an unprivileged uid can run")
    script = (f"import json, sys\nsys.path.insert(0, {str(REPO)!r})\nfrom eval.sandbox import run_tests\n"
              "cases = json.load(sys.stdin)\n"
              "print(json.dumps([[run_tests(c, t, audit_hook=h).fraction, run_tests(c, t).isolation]"
              " for c, t, h in cases]))\n")
    cases = [["def f(x):\n    return x + 1\n", FORGE_TESTS, True],
             ["def f(x):\n    return 2 if x == 1 else 0\n", FORGE_TESTS, True]]
    cases += [[code, FORGE_TESTS, hook] for code in FORGERIES.values() for hook in (True, False)]
    out = subprocess.run([python, "-c", script], input=json.dumps(cases), capture_output=True, text=True,
                         user=65534, group=65534, extra_groups=[], cwd="/", timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout)
    assert [fraction for fraction, _ in results] == [1.0, 0.5] + [0.0] * (len(cases) - 2)
    layers = set(results[0][1])
    assert {"judge", "session", "rlimits", "seccomp"} <= layers and not any(x.startswith("uid:") for x in layers)


def test_candidate_never_sees_tests_or_expected_values():
    """The test text and its expected value are nowhere the candidate can look: not in its
    frames or memory, not behind any descriptor it can open (its own, the worker's, the judge's)."""
    marker = f"EXPECTED-{uuid.uuid4().hex}"
    code = f"""import os, sys
def look():
    seen = []
    frame = sys._getframe()
    while frame is not None:
        seen.append(repr(frame.f_locals))
        frame = frame.f_back
    for pid in os.listdir('/proc'):
        for sub in ('fd', 'map_files'):
            try:
                names = os.listdir(f'/proc/{{pid}}/{{sub}}')
            except OSError:
                continue
            for name in names:
                try:
                    fd = os.open(f'/proc/{{pid}}/{{sub}}/{{name}}', os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    seen.append(os.pread(fd, 1 << 16, 0).decode('latin-1'))
                except OSError:
                    try:
                        seen.append(os.read(fd, 1 << 16).decode('latin-1'))  # pipes: no pread
                    except OSError:
                        pass
                finally:
                    os.close(fd)
    return 'LEAKED' if {marker[:8]!r} + {marker[8:]!r} in ''.join(seen) else 'clean'
def f(x):
    print(look())
    return x
print(look())
"""
    res = run_tests(code, [f"assert f(1) == {marker!r}"], timeout_s=20)
    assert res.status == "ok" and res.passed == 0
    assert res.output.split() == ["clean", "clean"]  # at import, then in the call


def test_values_cross_as_plain_data():
    code = ("from collections import Counter, namedtuple\nimport math\nP = namedtuple('P', 'x y')\n"
            "MOD = 10 ** 9 + 7\n"
            "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return Counter('aab')\n"
            "def p():\n    return P(1, [2.5, float('nan'), 2 ** 70, b'z', {3}])\n"
            "def gen(n):\n    yield from range(n)\n"
            "class Solution:\n    def add(self, a, b):\n        return a + b\n"
            "def push(xs):\n    xs.append(1)\n    return xs\n"
            "sorted = lambda xs: [1, 2, 3]\n")
    tests = ["assert f(1) == {'a': 2, 'b': 1}",
             "try:\n    f(-1)\nexcept ValueError as e:\n    assert str(e) == 'negative'\nelse:\n    assert False",
             "x, (a, b, c, d, e) = p()\nassert (x, a, c, d, e) == (1, 2.5, 2 ** 70, b'z', {3}) and b != b",
             "assert list(gen(3)) == [0, 1, 2] and 2 in gen(3)",
             "assert Solution().add(2, 3) == 5 and MOD % 7 == MOD % 7",
             "assert math.isclose(math.pi, 3.14159, rel_tol=1e-4)",
             "assert sorted([3, 1]) == [1, 3]",  # the candidate's rebinding of a builtin is not used
             "assert f(lambda: 1) is None",  # a lambda is no plain data: this call fails
             "xs = []\nassert push(xs) == [1] and xs == []"]  # an in-place mutation does not come back
    res = run_tests(code, tests)
    assert res.per_test == (True,) * 7 + (False, True), (res.detail, res.output)


# A test that uses a module it does not import (MBPP's often do): the candidate must not supply it.
CONE_TEST = ["assert math.isclose(volume_cone(5, 12), 314.1592653589793, rel_tol=0.001)"]
WRONG_CONE = "def volume_cone(r, h):\n    return 0\n"
FREE_NAME_ATTACKS = {
    "class_named_like_the_module": WRONG_CONE + "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n",
    "assignment": WRONG_CONE + "import types\nmath = types.SimpleNamespace(isclose=lambda *a, **k: True)\n",
    "import_alias_of_a_mock": WRONG_CONE + "from unittest import mock as math\n",
    "import_alias_of_another_module": WRONG_CONE + "import operator as math\nmath.isclose = lambda *a, **k: True\n",
    "global_in_a_function": WRONG_CONE + ("def _install():\n    global math\n    class math:\n"
                                           "        isclose = staticmethod(lambda *a, **k: True)\n_install()\n"),
    "sys_modules_patched": WRONG_CONE + ("import sys, types\nsys.modules['math'] = types.SimpleNamespace("
                                          "isclose=lambda *a, **k: True)\n"),
}


@pytest.mark.parametrize("name", sorted(FREE_NAME_ATTACKS))
def test_a_tests_free_names_never_resolve_to_the_candidates_objects(name):
    """``math`` in a test that never imports it is the real module, whatever the candidate binds to that name
    (a class, an assignment, an import alias of a mock or another module, a global set in a function, a
    patched sys.modules): a wrong answer fails. The right one passes."""
    res = run_tests(FREE_NAME_ATTACKS[name], CONE_TEST)
    assert (res.passed, res.per_test) == (0, (False,)), (res.status, res.detail, res.output)
    right = "import math\ndef volume_cone(r, h):\n    return math.pi * r * r * h / 3\n"
    assert run_tests(right, CONE_TEST).per_test == (True,)
    assert run_tests(right.replace("import math\n", "from math import pi\nclass math:\n    pi = pi\n")
                     .replace("math.pi", "pi"), CONE_TEST).per_test == (True,)


def test_a_name_no_one_declares_is_a_test_error_and_declared_imports_are_the_benchmarks():
    """A test's bare name that neither the test, its declared imports, the standard library nor the code
    under test binds is a test error, counted apart (never a pass), even where the candidate imports it;
    with the benchmark's ``test_imports`` it is theirs, not the candidate's."""
    from stages.training.rewards import STATS, accuracy_reward

    tests = ["assert isclose(volume_cone(5, 12), 314.1592653589793, rel_tol=0.001)"]
    alias = WRONG_CONE + "from unittest.mock import MagicMock as isclose\n"
    res = run_tests(alias, tests)
    assert (res.passed, res.test_errors) == (0, 1), (res.detail, res.output)
    declared = ["from math import isclose"]
    res = run_tests(alias.replace("MagicMock as isclose", "MagicMock as other"), tests, test_imports=declared)
    assert (res.passed, res.test_errors) == (0, 0)
    defined = WRONG_CONE + "def isclose(*a, **k):\n    return True\n"
    assert run_tests(defined, tests, test_imports=declared).passed == 0  # the declared import wins
    right = "import math\ndef volume_cone(r, h):\n    return math.pi * r * r * h / 3\n"
    assert run_tests(right, tests, test_imports=declared).per_test == (True,)
    with pytest.raises(ValueError, match="not only absolute import statements"):  # the benchmark's input
        run_tests(right, tests, test_imports=["import math; print('x')"])
    was = STATS["code_test_error"]
    assert accuracy_reward([_completion(alias)], answer=[None], verifier=["code"], tests=[tests]) == [0.0]
    assert STATS["code_test_error"] == was + 1
    assert accuracy_reward([_completion(right)], answer=[None], verifier=["code"], tests=[tests],
                           test_imports=[declared]) == [1.0]


def test_decoder_accepts_plain_data_only():
    plain = [1, -2.5, float("inf"), 3j, complex(1, -1), 2 ** 20000, "s\ud800", b"\x00", None, True,
             (1,), [[], {}], {1: {2, 3}}, frozenset({4}), set(), frozenset()]
    text = _encode(plain, lambda obj: pytest.fail(f"{obj!r} is plain data"))
    assert _decode(text, None) == plain
    for bad in ("__import__('os')", "(1).real", "f'{1}'", "[*a]", "{**a}", "x", "lambda: 0", "1 + 1",
                "ref(1)", "[" * 150 + "]" * 150, "'x' * 10", "frozenset('ab')"):
        with pytest.raises((ValueError, SyntaxError, RecursionError, MemoryError)):
            _decode(bad, None)
    assert _decode("[ref(3)]", lambda n: ("handle", n)) == [("handle", 3)]


@pytest.mark.skipif(not NAMESPACES, reason="without a pid namespace /proc/1 is the host's init")
def test_host_paths_do_not_show_inside():
    code = ("import os, sys\n"
            "print(open('/proc/1/cmdline', 'rb').read(), open('/proc/self/cmdline', 'rb').read())\n"
            "print(sys.argv, sys.orig_argv, sys.executable, sys.prefix, sys._getframe(1).f_code.co_filename)\n")
    res = run_tests(code, [])
    assert res.status == "ok", res.detail
    assert "b'sandbox\\x00' b'sandbox\\x00'" in res.output
    for leak in (str(REPO), ".venv", "sandbox.py", sys.prefix if sys.prefix != sys.base_prefix else str(REPO)):
        assert leak not in res.output


def test_memfd_cannot_hold_memory_past_the_bound(monkeypatch):
    """4 processes each try to keep ~900 MiB in memfds (pages no rlimit counts; each file below
    RLIMIT_FSIZE) against a call bound of 256 + 16 + 64 MiB: the memory cgroup OOM-kills them, or
    (no cgroup) seccomp refuses memfd_create.  Unbounded (the old sandbox), this holds 3.6 GiB and
    the test passes.  The call's own cgroup peak is checked, not the host's free memory, which
    other work on the machine moves by gigabytes."""
    peaks: list[int] = []
    remove = sandbox._memcg.remove

    def record_peak(group):
        peaks.append(sandbox._memcg.peak_bytes(group))
        remove(group)

    monkeypatch.setattr(sandbox._memcg, "remove", record_peak)
    code = ("import os, time\nfor _ in range(2):\n    os.fork()\nfds = []\n"
            "for _ in range(60):\n    fd = os.memfd_create('hog')\n"
            "    for _ in range(15):\n        os.write(fd, b'x' * (1 << 20))\n    fds.append(fd)\n"
            "time.sleep(2)\ndef f():\n    return 1\n")
    res = run_tests(code, ["assert f() == 1"], memory_mb=256, disk_mb=16, timeout_s=30)
    assert res.passed == 0
    if "memcg" in res.isolation:
        assert res.status == "memory" and "OOM" in res.detail, res.detail
        assert 0 < peaks[0] <= (256 + 16 + sandbox._MEMCG_SLACK_MB) << 20
    else:
        assert "seccomp" in res.isolation
        assert res.status == "runtime_error" and "PermissionError" in res.detail, res.detail
    assert_gone(res)
    assert run_tests(SQUARE, ["assert square(3) == 9"]).fraction == 1.0  # we are alive and well


@pytest.mark.skipif(not ROOT, reason="the fallback is only distinguishable where a cgroup can be made")
def test_without_a_cgroup_seccomp_refuses_memfd_and_shm(monkeypatch):
    monkeypatch.setattr(sandbox, "_USE_MEMCG", False)
    code = ("import os, ctypes\ndef f(kind):\n    try:\n        if kind == 'memfd':\n"
            "            os.memfd_create('x')\n        else:\n"
            "            libc = ctypes.CDLL(None, use_errno=True)\n"
            "            if libc.shmget(0, 1 << 20, 0o1600) < 0:\n"
            "                raise OSError(ctypes.get_errno(), 'shmget')\n"
            "    except OSError as e:\n        return e.errno\n    return 0\n")
    res = run_tests(code, ["assert f('memfd') == 1", "assert f('shm') == 1"], audit_hook=False)
    assert "seccomp" in res.isolation and "memcg" not in res.isolation
    assert res.per_test == (True, True), res.detail  # EPERM


def test_each_test_starts_in_an_empty_working_folder():
    """What the code writes while one test runs (a file, a folder it then locks) is gone when the next starts."""
    code = ("import os\n"
            "def write():\n    open('left.txt', 'w').write('x')\n    os.makedirs('d/e', exist_ok=True)\n"
            "    open('d/e/f', 'w').write('y')\n    os.chmod('d', 0)\n    return 1\n"
            "def seen():\n    return sorted(os.listdir('.'))\n")
    res = run_tests(code, ["assert write() == 1", "assert seen() == []", "assert write() == 1", "assert seen() == []"])
    assert res.per_test == (True,) * 4, (res.detail, res.output)
