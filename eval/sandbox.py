"""Run model-written Python against assert-style tests, with a verdict the code cannot reach.

``run_tests(code, tests)`` grades ``code`` (a candidate solution) against ``tests`` (MBPP /
HumanEval-style ``assert`` statements) and returns a :class:`SandboxResult` whose ``fraction``
(tests passed / tests given) is the code reward.  It never raises for anything the code does; a
failure of the sandbox itself is status ``"sandbox_error"`` (counted by
:func:`sandbox_error_count`), never a silent "wrong answer".

Why the candidate and the tests run in different processes
----------------------------------------------------------
The first version ran the code and then the tests in one interpreter, which reported over a pipe
with a secret token.  Code running there owns that interpreter, and a red-team probe scored 1.0
on failing tests by replacing ``builtins.exec`` or ``builtins.compile``, by rewriting the list of
tests through ``sys._getframe(1).f_locals``, by reading the token and writing "passed" lines to
the pipe itself, and by returning an object whose ``__eq__`` is always True.  No in-process guard
can stop that, so the rule now is:

    the candidate's code never runs in a process that sees the test source or the expected
    values, and never in the process that decides pass/fail.

For each test the trusted worker W (which never runs candidate code) forks two fresh processes:

* **C, the candidate**, uid B: closes every descriptor but stdio and its two pipes to O (the
  result channel and the tests are gone before any candidate code runs), drops to uid B, keeps
  ``no_new_privs``, installs the audit hook, executes the code as a module (``__name__ ==
  "__solution__"``), tells O whether that raised, and then serves O's requests: *give me these
  top-level names*, *call this object with these arguments*, *read this attribute*, *iterate this
  object*.  It never receives a test's text, only the arguments the test passes.
* **O, the judge**, uid A, ``PR_SET_DUMPABLE=0``, never runs candidate code: reads its test from a
  descriptor C never had, executes it in a fresh namespace in which the candidate's top-level
  names are stand-ins that forward to C, and writes ``test i pass|fail`` to the result channel
  (fd 3), which only O and W hold.  Another uid plus non-dumpable means C can neither signal nor
  ptrace O, nor open ``/proc/<O>/mem`` or ``/proc/<O>/fd``.

Patched builtins, rewritten frames, ``os._exit(0)`` at import, threads, ``atexit`` handlers or
forged lines all happen inside C, which holds nothing to forge with: the tests just fail.

What crosses between them is plain data.  The sender writes a literal (``repr``-style; subclasses
of the builtin types, e.g. a ``Counter`` or a namedtuple, are written as the builtin); the
receiver parses it with ``ast`` in ``eval`` mode and walks the tree by hand, accepting only int,
float (incl. ``nan``/``inf``), complex, str, bytes, bool, None, list, tuple, dict, set and
frozenset, at most 16 MiB and 100 levels deep.  An object the candidate returns that is not plain
data (an instance, a function, a generator) reaches O as an opaque handle: O may call it, read its
attributes and iterate it (each forwarded to C), but every other operation is the plain object's,
so it is equal to nothing but itself - the always-True ``__eq__`` object fails ``assert f(x) ==
y``.  Exceptions come back as the nearest builtin exception class in their MRO (a candidate's
``class Bad(ValueError)`` is caught by ``except ValueError`` in the test), else RuntimeError; if C
dies or sends anything else, the test fails whatever it catches.

How the judge resolves names
    A name the test mentions (its code's ``co_names``, nested code included) resolves, in this order,
    to: what the test binds itself; a builtin (never the candidate's); the test's environment, built
    by W before any candidate code runs - the benchmark's declared imports (``test_imports``, e.g.
    MBPP's ``from math import isclose``) and every standard-library module the test names, by its own
    name, so ``math`` in ``math.isclose(...)`` is the real module even where the test forgot to
    import it and the candidate defines a ``class math`` or imports ``os as math``; and last the code
    under test: names the candidate binds at top level other than by import - found statically with
    ``ast`` in W: def, async def, class, assignment, for/with/except/match targets, walrus,
    ``global`` - fetched from C once when the test starts (plain values as copies, everything else as
    handles). What the candidate imports is never bound to a test's name. A name none of these binds
    is a *test error* (``SandboxResult.test_errors``), a failed test counted apart, never a pass.
    Residual: a test that uses a bare name its benchmark does not declare (``isclose`` with no
    ``from math import isclose``) gets the candidate's top-level object of that name, as it gets the
    function under test; declare such names in ``test_imports``.

Differences from running everything in one interpreter (each makes a test fail, never pass):
  * arguments must be plain data or handles: a test passing a lambda or an instance of its own
    class to the candidate fails;
  * results are copies: mutation of an argument in place is not seen by the test, module-level
    data is a snapshot taken when the test starts, and a numpy array, ``deque``, ``Fraction`` etc.
    arrive as handles, not values (numpy scalars arrive as their Python value);
  * names made dynamically (``globals()['f'] = ...``, ``exec``) are invisible to tests, and so are
    candidate functions named like builtins;
  * each test gets a fresh C, which re-runs the code's top level (tests no longer share state);
  * the candidate's own exception classes cannot be caught by name in a test.

Process layout (as root, where the kernel allows namespaces)::

    caller ── L  launcher: python -s -P -B -S -c <loader> (sandbox_child.py on stdin),
               │  own session; moved into the call's memory cgroup by the caller before it gets
               │  its job; unshare(NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS)
               └─ W  pid 1 of the new pid namespace (root, runs no candidate code): builds a
                  │  minimal read-only root and chroots into it; parses the code (syntax check,
                  │  top-level names) and imports what it imports; then per test:
                  ├─ C_i  candidate (uid B) ──pipes── O_i  judge (uid A) ── fd 3 ──> caller
                  └─ when O_i has exited: kill(-1) (all else in the namespace), reap, next test

When W exits the kernel kills whatever is left in the namespace; on the wall-clock deadline the
caller SIGKILLs W via a pidfd and then the launcher's process group.  Without a pid namespace L is
a child subreaper and W its child in its own process group, as are each C and O; after each test W
kills their groups and every process of uid B and uid A (``kill(-1)`` from helpers running as
those uids; without root only the groups), L sweeps both uids again when W is done, and the caller
once more; nothing is orphaned to the host's pid 1.  Isolation layers, listed in
``SandboxResult.isolation`` when active:

* ``judge``        the verdict comes from O, as above (always).
* ``session``      own session and process group, killed as a whole (always).
* ``pidns``        new pid namespace; the code cannot see or signal anything outside it.
* ``netns``        new network namespace with only a down loopback: no network, not even
                   127.0.0.1.
* ``ipcns``/``utsns`` private SysV IPC / hostname.
* ``chroot``       private mount namespace and a minimal root: the host's files (the repo, /root,
                   /home, /tmp, datasets) are not visible; everything but the cwd (``/tmp/sandbox``,
                   a ``disk_mb`` tmpfs writable by C, readable by O) and a few /dev nodes is
                   read-only; there is no /dev/shm.
* ``uid:B``, ``judge_uid:A`` two unprivileged uids, unique per concurrent call (so RLIMIT_NPROC is
                   per call and per role, and calls cannot signal each other).
* ``no_new_privs`` setuid binaries cannot regain privileges.
* ``rlimits``      RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_CORE=0
                   in C and O (always).
* ``memcg``        the call runs in its own memory cgroup (v1 ``memory.limit_in_bytes`` and
                   ``memsw``, or v2 ``memory.max``), removed afterwards; see "Memory".
* ``seccomp``      where no cgroup could be made: a filter refusing ``memfd_create``,
                   ``memfd_secret`` and ``shmget`` with EPERM (x86-64 and arm64).
* ``audit_hook``   in C only, a second in-process layer (default on): blocks socket
                   connect/bind/sendto and name lookups, subprocess/exec/spawn/os.system, ctypes
                   library loading and raw-memory access, gc object walking, signals to other
                   processes, and writing, removing, renaming, chmod ... of paths outside the cwd.
                   It is Python-level and bypassable; the verdict never depends on it.

Memory
    RLIMIT_AS (``memory_mb``) bounds each process's address space, not what a call holds outside
    address spaces: memfd and tmpfs pages, SysV shared memory, pipe buffers - or many processes
    (memfds alone held several GiB past a 512 MiB RLIMIT_AS before this). With ``memcg`` the whole
    call - W, every C and O and their children, tmpfs and memfd pages, SysV shm, page cache, kernel
    memory - is charged to one cgroup limited to ``memory_mb + disk_mb + 64`` MiB; past it the
    kernel OOM-kills inside the call (C first: oom_score_adj 1000) and the status is ``memory``.
    Memory the kernel does not account to a cgroup is not bounded. Without a cgroup (not root, or
    no writable memory controller) memfd and SysV shm are refused (``seccomp``), the chroot has no
    /dev/shm, and the bound is per process only: ``max_processes * memory_mb`` of address space plus
    the ``disk_mb`` tmpfs plus pipe and socket buffers (64 descriptors per process). Without a
    chroot in that mode the host's /dev/shm and /tmp are writable (only the audit hook stops it)
    and unbounded. What each attack held, measured: docs/reliability.md ("Code tests").

The verdict protocol: the job (code, limits, a random token) goes to L on stdin (marshal; only the
trusted caller writes it); the tests are in a memfd (or an unlinked root-only file) that only O
reads, with ``pread``.  W and O report on fd 3 - a Unix socket: unlike a pipe, it cannot be
reopened through ``/proc/<pid>/fd`` by a process of the same uid - one line per record, each
starting with the token; the caller accepts only lines with the token and the first record per
test.  C never holds fd 3 and cannot obtain it (the caller closes its copy of the tests at once;
W, O and L are root or non-dumpable).

Statuses: ``ok`` (all tests ran; ``passed`` may be < ``total``), ``syntax_error``,
``runtime_error`` (the code's top level raised), ``timeout`` (wall clock, or a CPU limit),
``memory`` (MemoryError, or the memory cgroup's OOM kill), ``output_limit``, ``crash`` (the
candidate died at import, e.g. ``os._exit``, or the sandbox died), ``sandbox_error`` (the sandbox
failed before running the code).  A syntax error or a top-level exception means no test passes
(as in the official MBPP/HumanEval harnesses): detected by W's parse and C's import report, which
only ever lowers the score - a forged "import ok" from C gets it nowhere.  On a timeout or output
limit, tests reported before the kill keep their result and the rest count as failed.

``/proc/1/cmdline`` (and every process's) inside the sandbox reads ``sandbox``: the launcher is
the real interpreter (not the venv's link to it) with a short ``-c`` loader, overwrites its argv
area before forking, and clears ``sys.argv``, ``sys.orig_argv`` and the venv prefix; the code
objects are named ``sandbox``.  ``site_packages=True`` launches the venv's interpreter and mounts
its site-packages at their host paths, which are then visible.

Without root (or without CAP_SYS_ADMIN, e.g. a default Docker container) the namespaces, the uid
drop and the cgroup are unavailable; the call still works with ``judge``, ``session``,
``rlimits``, ``no_new_privs``, ``seccomp`` and ``audit_hook``.  C and O then share the caller's
uid: O (like W and L) is non-dumpable and the result channel is a socket, so C can neither ptrace
nor read O, nor reach fd 3; it can kill or stop O (failing its own tests) and read the host's
world-readable files.  What it can also reach is the caller, a dumpable process of its own uid:
unless yama (``ptrace_scope`` >= 1) or another LSM stops it, ``/proc/<caller>/mem`` and ptrace
would let it read the tests or forge the caller's results.  And it can write wherever the caller
can (a module planted in a user-writable ``sys.path`` entry would be imported by a later call's
judge).  Use root (or a rootful container) for RL.

Interpreter flags: ``-s -P -B -S`` with an environment built from scratch (this is ``-I`` except
``-E``, which would also ignore ``PYTHONHASHSEED=0``); ``site_packages=True`` drops ``-S`` and
exposes the interpreter's site-packages inside the sandbox.

Cost: an interpreter start per call, then two forks, C's top level and O's test per test
(``python scripts/bench_sandbox.py`` prints the per-call overhead).

Two files: this one is the host side (the caller's API, uids, the memory cgroup, starting,
reading and stopping a call); ``eval/sandbox_child.py`` is the child program, L, W, C and O.  The
child is compiled once per caller process (compiling it at every call would cost as much as
starting the interpreter) and goes to the interpreter on stdin; neither file imports the other.
The child uses the standard library only and imports only ``os``, ``sys``, ``marshal``,
``ctypes``, ``_ast``, ``fcntl``, ``gc`` and ``resource``, so that a call starts fast.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import marshal
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

log = logging.getLogger(__name__)

STATUSES = ("ok", "syntax_error", "runtime_error", "timeout", "memory", "output_limit", "crash",
            "sandbox_error")
_TAIL_BYTES = 4096
_RESULT_LIMIT = 4 * 1024 * 1024
# The call's memory cgroup holds memory_mb + disk_mb + this (W, and the interpreters of C and O).
_MEMCG_SLACK_MB = 64
# Tests switch this off to exercise the fallback (seccomp) layer on a machine with cgroups.
_USE_MEMCG = True
_NOBODY = 65534
_UID_BASE = 1_000_000_000  # per-call uids: _UID_BASE + (caller pid % 10**6) * 256 + slot
# The child program (launcher, worker, candidate, judge), sent to the interpreter on stdin.
_CHILD_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    passed: int
    total: int
    fraction: float  # passed / total (0.0 when there are no tests)
    status: str  # one of STATUSES
    detail: str = ""  # short human-readable reason
    output: str = ""  # the last few KB of the code's (and the tests') stdout+stderr
    per_test: tuple[bool, ...] = ()
    test_errors: int = 0  # tests that named something nothing declares (failed, and counted apart)
    isolation: tuple[str, ...] = ()  # layers that were active (see module docstring)
    elapsed_s: float = 0.0
    pid: int | None = None  # launcher pid == process group id
    uid: int | None = None  # the unprivileged uid the candidate ran as (None: not dropped)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_errors_lock = threading.Lock()
_sandbox_errors = 0


def sandbox_error_count() -> int:
    """How many calls in this process ended in ``sandbox_error`` (a sandbox fault)."""
    return _sandbox_errors


def _count_error(detail: str) -> None:
    global _sandbox_errors
    with _errors_lock:
        _sandbox_errors += 1
    log.warning("sandbox_error: %s", detail)


class _UidPool:
    """Hands out two distinct unprivileged uids (candidate, judge) to each concurrent call of this
    process, all distinct from other calls' uids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()
        self._mapped: bool | None = None

    def _is_mapped(self, uid: int) -> bool:
        try:
            with open("/proc/self/uid_map") as f:
                for line in f:
                    inside, _, count = (int(x) for x in line.split())
                    if inside <= uid < inside + count:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def acquire(self) -> tuple[int, int]:
        base = _UID_BASE + (os.getpid() % 1_000_000) * 256
        with self._lock:
            if self._mapped is None:
                self._mapped = self._is_mapped(base) and self._is_mapped(base + 255)
            if not self._mapped:
                return _NOBODY, _NOBODY
            for slot in range(0, 256, 2):
                if base + slot not in self._used:
                    self._used.add(base + slot)
                    return base + slot, base + slot + 1
            slot = 2 * secrets.randbelow(128)  # >128 concurrent calls: share a pair
            return base + slot, base + slot + 1

    def release(self, uids: tuple[int, int]) -> None:
        with self._lock:
            self._used.discard(uids[0])


_uids = _UidPool()


def processes_of_uid(uid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid is ``uid`` (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1 ").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def _kill_uid(uid: int) -> None:
    for _ in range(100):
        pids = processes_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


class _MemoryCgroups:
    """One memory cgroup per call, made under this process's own: cgroup v1's memory controller,
    or v2 where the memory controller is enabled for our subtree.  Needs root (or a delegated,
    writable cgroup); where none can be made, calls fall back to the seccomp layer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parent: tuple[str, int] | None = None
        self._searched = False
        self._count = itertools.count()

    @staticmethod
    def _find() -> tuple[str, int] | None:
        mounts: dict[int, tuple[str, str]] = {}  # version -> (mount point, root of the mount)
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, (fstype, _source, options) = left.split(), right.split()[:3]
                if fstype == "cgroup" and "memory" in options.split(","):
                    mounts[1] = (fields[4], fields[3])
                elif fstype == "cgroup2":
                    mounts.setdefault(2, (fields[4], fields[3]))
        with open("/proc/self/cgroup") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        for version, wanted in ((1, "memory"), (2, "")):
            if version not in mounts:
                continue
            point, root = mounts[version]
            for _, controllers, path in own:
                if (wanted in controllers.split(",")) if wanted else controllers == "":
                    if root != "/" and path.startswith(root):
                        path = path[len(root):]
                    directory = os.path.join(point, path.lstrip("/"))
                    if version == 1 and os.path.exists(os.path.join(directory, "memory.limit_in_bytes")):
                        return directory, 1
                    if version == 2:
                        try:
                            with open(os.path.join(directory, "cgroup.subtree_control")) as sub:
                                if "memory" in sub.read().split():
                                    return directory, 2
                        except OSError:
                            pass
        return None

    def create(self, limit_bytes: int) -> tuple[str, int] | None:
        with self._lock:
            if not self._searched:
                self._searched = True
                try:
                    self._parent = self._find()
                except (OSError, ValueError):
                    self._parent = None
        if self._parent is None:
            return None
        parent, version = self._parent
        path = os.path.join(parent, f"r1-sandbox-{os.getpid()}-{next(self._count)}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        try:
            if version == 1:
                self._write(path, "memory.limit_in_bytes", limit_bytes)
                if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                    self._write(path, "memory.memsw.limit_in_bytes", limit_bytes)
            else:
                self._write(path, "memory.max", limit_bytes)
                if os.path.exists(os.path.join(path, "memory.swap.max")):
                    self._write(path, "memory.swap.max", 0)
        except OSError:
            self.remove((path, version))
            return None
        return path, version

    def attach(self, group: tuple[str, int], pid: int) -> bool:
        try:
            self._write(group[0], "cgroup.procs", pid)
            return True
        except OSError as exc:
            log.warning("sandbox: could not move pid %d into %s: %s", pid, group[0], exc)
            return False

    @staticmethod
    def _write(path: str, name: str, value: int) -> None:
        with open(os.path.join(path, name), "w") as f:
            f.write(str(value))

    @staticmethod
    def _counter(group: tuple[str, int], key: str) -> int:
        path, version = group
        name = "memory.oom_control" if version == 1 else "memory.events"
        try:
            with open(os.path.join(path, name)) as f:
                for line in f:
                    field, _, value = line.partition(" ")
                    if field == key:
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def oom_kills(self, group: tuple[str, int]) -> int:
        return self._counter(group, "oom_kill")

    @staticmethod
    def peak_bytes(group: tuple[str, int]) -> int:
        """Most memory the call held at once (for measurements)."""
        path, version = group
        try:
            with open(os.path.join(path, "memory.max_usage_in_bytes" if version == 1 else "memory.peak")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return -1

    @staticmethod
    def remove(group: tuple[str, int]) -> None:
        for _ in range(100):  # busy while the last processes finish exiting
            try:
                os.rmdir(group[0])
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.005)
        log.warning("sandbox: could not remove cgroup %s", group[0])


_memcg = _MemoryCgroups()
_child_program_lock = threading.Lock()
_child_program_cache: list[tuple[str, bytes]] = []


def _child_program() -> tuple[str, bytes]:
    """(``-c`` bootstrap, marshal'd code) of the child program, ``sandbox_child.py`` beside this
    file, compiled once per process (compiling it costs ~7 ms, as much as the interpreter's
    start-up).  The bootstrap reads the code from stdin, ahead of the job; neither the repo path
    nor the venv appears in argv or in the code objects' file names."""
    with _child_program_lock:
        if not _child_program_cache:
            with open(_CHILD_SOURCE, encoding="utf-8") as f:
                text = f.read()
            code = compile(text, "sandbox", "exec", dont_inherit=True)
            payload = marshal.dumps(code)
            bootstrap = (f"import marshal, sys; exec(marshal.loads(sys.stdin.buffer.read({len(payload)})), "
                         "{'__name__': '__main__'})")
            _child_program_cache.append((bootstrap, payload))
        return _child_program_cache[0]


def _expose_paths(site_packages: bool) -> list[str]:
    paths = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    if site_packages:
        paths |= {sys.prefix, sys.exec_prefix}
        paths |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    return sorted(p for p in paths if p)


def _tests_file(tests: list[str], base: str) -> int:
    """A descriptor holding the marshal'd tests, for the judges only: a memfd, or else an
    unlinked root-only file."""
    data = marshal.dumps(tests)
    try:
        fd = os.memfd_create("r1-sandbox-tests")
    except (AttributeError, OSError):
        path = os.path.join(base, "tests")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


def run_tests(
    code: str,
    tests: list[str],
    *,
    test_imports: list[str] = (),
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    cpu_s: int = 10,
    max_output_bytes: int = 1_000_000,
    max_processes: int = 32,
    disk_mb: int = 64,
    site_packages: bool = False,
    namespaces: bool = True,
    audit_hook: bool = True,
) -> SandboxResult:
    """Run ``code`` against each assert-statement in ``tests``, each test judged by a process the
    code cannot reach (see the module docstring).

    ``timeout_s`` is wall clock for the whole call, ``cpu_s`` CPU seconds per process,
    ``memory_mb`` the address-space limit per process (and, with ``disk_mb`` + 64 MiB, the memory
    cgroup limit of the whole call), ``max_processes`` the process (and thread) limit of the
    candidate's uid, ``disk_mb`` the size of the writable cwd and the largest file,
    ``max_output_bytes`` the stdout+stderr beyond which the run is killed.  ``test_imports``: the
    benchmark's import statements for its tests (``import math``, ``from math import isclose``;
    nothing else).  ``namespaces=False`` /
    ``audit_hook=False`` switch a layer off; they exist so that tests can show each remaining
    layer holding on its own.  Safe to call from several threads at once.  Never raises for
    anything the code does.
    """
    tests = list(tests)
    _check_test_imports(test_imports)
    start = time.monotonic()
    try:
        return _run(code, tests, start, test_imports=list(test_imports), timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                    max_output_bytes=max_output_bytes, max_processes=max_processes, disk_mb=disk_mb,
                    site_packages=site_packages, namespaces=namespaces, audit_hook=audit_hook)
    except Exception as exc:  # a bug or resource exhaustion in the sandbox itself
        detail = f"{type(exc).__name__}: {exc}"
        _count_error(detail)
        return SandboxResult(0, len(tests), 0.0, "sandbox_error", detail=detail[:500],
                             per_test=(False,) * len(tests), elapsed_s=time.monotonic() - start)


def _check_test_imports(statements) -> None:
    """A benchmark's ``test_imports`` are absolute import statements, nothing else (ValueError)."""
    import ast

    for source in statements:
        try:
            body = ast.parse(source).body
        except SyntaxError as exc:
            raise ValueError(f"test_imports: {source[:80]!r} is not Python ({exc.msg})") from None
        if not all(isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0) for n in body):
            raise ValueError(f"test_imports: {source[:80]!r} is not only absolute import statements")


def code_reward_fraction(code: str, tests: list[str], **kwargs) -> float:
    """The code reward: fraction of tests passed (0.0 for any failure, sandbox errors included)."""
    return run_tests(code, tests, **kwargs).fraction


_CODE_RANK = {"ok": 0, "crash": 1, "error": 2, "syntax": 3}


class _Collector:
    """Parses the result records of W and the judges (only lines carrying the token)."""

    def __init__(self, token: str, total: int) -> None:
        self.token = token.encode()
        self.results: list[bool | None] = [None] * total
        self.buffer = b""
        self.size = 0
        self.layers: tuple[str, ...] = ()
        self.ready = self.done = False
        self.code_state: str | None = None  # worst of: ok / crash / error / syntax
        self.code_error = ""
        self.setup_error = ""
        self.notes: list[str] = []
        self.memory_error = False
        self.test_errors = 0
        self.exits: list[int] = []  # how candidates ended by themselves (negative: a signal)
        self.child_pid: int | None = None  # the namespace's pid 1 ("init") or W ("worker")
        self.child_kind = ""
        self.groups: list[int] = []  # process groups of C and O (without a pid namespace)
        self.uid: int | None = None

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._line(line)

    def _line(self, raw: bytes) -> None:
        if self.done:
            return
        parts = raw.split(b" ", 2)
        if len(parts) < 2 or not secrets.compare_digest(parts[0], self.token):
            return
        kind = parts[1].decode("ascii", "replace")
        rest = parts[2].decode("utf-8", "replace") if len(parts) > 2 else ""
        try:
            self._record(kind, rest)
        except (ValueError, IndexError):
            pass

    def _record(self, kind: str, rest: str) -> None:
        if kind == "pid" and not self.ready and self.child_pid is None:
            pid, _, self.child_kind = rest.partition(" ")
            self.child_pid = int(pid)
        elif kind == "group":
            self.groups.append(int(rest))
        elif kind == "ready" and not self.ready:
            self.ready = True
            self.layers = tuple(rest.split(","))
            for layer in self.layers:
                if layer.startswith("uid:"):
                    self.uid = int(layer[4:])
        elif kind == "setup_error" and not self.setup_error:
            self.setup_error = rest
        elif kind == "note":
            self.notes.append(rest)
        elif kind == "code" and self.ready:
            state, _, err = rest.partition(" ")
            if state in _CODE_RANK and _CODE_RANK[state] > _CODE_RANK.get(self.code_state or "ok", -1) \
                    or self.code_state is None:
                self.code_state, self.code_error = state, err
            self.memory_error |= err.startswith("MemoryError")
        elif kind == "exit" and self.ready:
            self.exits.append(int(rest.split(" ")[1]))
        elif kind == "test" and self.ready:
            fields = rest.split(" ", 3)
            index, ok = int(fields[0]), fields[1] == "1"
            if 0 <= index < len(self.results) and self.results[index] is None:
                self.results[index] = ok
                self.memory_error |= len(fields) > 2 and fields[2] == "MemoryError"
                self.test_errors += len(fields) > 2 and fields[2] == "TestError"
        elif kind == "done" and self.ready:
            self.done = True


def _run(code: str, tests: list[str], start: float, *, test_imports: list[str], timeout_s: float, memory_mb: int, cpu_s: int,
         max_output_bytes: int, max_processes: int, disk_mb: int, site_packages: bool,
         namespaces: bool, audit_hook: bool) -> SandboxResult:
    import selectors

    is_root = os.geteuid() == 0
    uids = _uids.acquire() if is_root else None
    base = tempfile.mkdtemp(prefix="r1-sandbox-")
    proc: subprocess.Popen | None = None
    pidfd: int | None = None
    group: tuple[str, int] | None = None
    collector = _Collector(secrets.token_hex(16), len(tests))
    try:
        os.chmod(base, 0o711)
        host_workdir = os.path.join(base, "work")
        newroot = os.path.join(base, "root")
        os.mkdir(host_workdir, 0o750)
        os.mkdir(newroot, 0o700)
        if uids is not None:  # writable by C, readable by O (setgid: new files get O's group)
            os.chown(host_workdir, uids[0], uids[1])
            os.chmod(host_workdir, 0o2750)
        if is_root and _USE_MEMCG:
            group = _memcg.create((int(memory_mb) + int(disk_mb) + _MEMCG_SLACK_MB) << 20)
        job = {
            "token": collector.token.decode(), "code": code, "n_tests": len(tests), "test_imports": test_imports,
            "uid": uids[0] if uids else None, "judge_uid": uids[1] if uids else None,
            "root": uids is not None, "unique_uids": uids is not None and uids[0] >= _UID_BASE,
            "parent_pid": os.getpid(), "namespaces": namespaces, "audit_hook": audit_hook,
            "newroot": newroot, "workdir": "/tmp/sandbox", "host_workdir": host_workdir,
            "expose": _expose_paths(site_packages),
            "memory_mb": int(memory_mb), "cpu_s": max(1, int(cpu_s)), "disk_mb": int(disk_mb),
            "max_processes": int(max_processes), "result_fd": -1, "tests_fd": -1,
            "memcg": False,
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8", "HOME": host_workdir,
               "TMPDIR": host_workdir}
        flags = ["-s", "-P", "-B"] + ([] if site_packages else ["-S"])
        # The real interpreter, not the venv's link to it (its path would show inside), unless the
        # venv's site-packages are wanted.
        executable = sys.executable if site_packages else os.path.realpath(sys.executable)
        bootstrap, program = _child_program()
        tests_fd = _tests_file(tests, base)
        # A socket, not a pipe: /proc/<pid>/fd/N of a pipe can be reopened by any process of the same
        # uid (without root, the candidate's), a socket cannot.
        reader, writer = socket.socketpair()
        read_fd, write_fd = reader.detach(), writer.detach()
        job["result_fd"], job["tests_fd"] = write_fd, tests_fd
        try:
            proc = subprocess.Popen(
                [executable, *flags, "-c", bootstrap],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(write_fd, tests_fd), start_new_session=True, env=env, cwd=base,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
            os.close(tests_fd)
        assert proc.stdin is not None and proc.stdout is not None
        # Into the call's cgroup before L gets its job (it runs nothing untrusted until then); a
        # cgroup v1 move waits ~15 ms for an RCU grace period, overlapped with L's start-up here.
        job["memcg"] = group is not None and _memcg.attach(group, proc.pid)
        try:
            proc.stdin.write(program + marshal.dumps(job))
            proc.stdin.close()
        except BrokenPipeError:
            pass

        deadline = start + timeout_s
        out_fd = proc.stdout.fileno()
        tail = bytearray()
        out_total = 0
        timed_out = over_output = over_results = False
        with selectors.DefaultSelector() as sel:
            for fd in (out_fd, read_fd):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            try:
                while sel.get_map():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        timed_out = True
                        break
                    events = sel.select(min(remaining, 0.1))
                    for key, _ in events:
                        try:
                            chunk = os.read(key.fd, 65536)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            sel.unregister(key.fd)
                        elif key.fd == out_fd:
                            out_total += len(chunk)
                            tail += chunk
                            del tail[:-_TAIL_BYTES]
                        else:
                            collector.feed(chunk)
                            if pidfd is None and collector.child_pid is not None:
                                pidfd = _open_pidfd(collector.child_pid, proc.pid)
                    if out_total > max_output_bytes:
                        over_output = True
                        break
                    if collector.size > _RESULT_LIMIT:
                        over_results = True
                        break
                    if not events and proc.poll() is not None:
                        break  # launcher gone; something it left holds the pipes open
            finally:
                os.close(read_fd)
        killed = timed_out or over_output or over_results or not collector.done
        worker_group = collector.child_pid if collector.child_kind == "worker" else None
        returncode = _stop(proc, pidfd, worker_group, collector.groups, killed=killed)
        if uids is not None and uids[0] >= _UID_BASE and "pidns" not in collector.layers:
            for uid in uids:  # without a pid namespace, sweep what the call's unique uids left
                _kill_uid(uid)
        oom_kills = _memcg.oom_kills(group) if group else 0
        return _result(collector, tests, start, proc, returncode, timed_out=timed_out,
                       over_output=over_output, over_results=over_results, tail=bytes(tail),
                       timeout_s=timeout_s, max_output_bytes=max_output_bytes, oom_kills=oom_kills)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        if proc is not None and proc.returncode is None:  # only after an exception above
            _stop(proc, None, None, collector.groups, killed=True)
        if group is not None:
            _memcg.remove(group)
        shutil.rmtree(base, ignore_errors=True)
        if os.path.exists(base):
            log.warning("sandbox: could not remove %s", base)
        if uids is not None:
            _uids.release(uids)


def _open_pidfd(pid: int, parent: int) -> int | None:
    """A pidfd for ``pid`` if it is (still) a child of ``parent`` - the launcher, which we have
    not reaped, so its pid cannot have been recycled; a recycled ``pid`` fails the check."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != parent:
        os.close(fd)
        return None
    return fd


def _stop(proc: subprocess.Popen, pidfd: int | None, worker_group: int | None, groups: list[int], *,
          killed: bool) -> int:
    """End everything the call started and reap the launcher.

    With a pid namespace, killing its pid 1 (via a pidfd, so a recycled pid can't be hit) makes
    the kernel kill the whole namespace while the launcher reaps it.  Without one, W's process
    group and those of C and O are killed and the launcher, a child subreaper, reaps and sweeps
    what is left.  Either way nothing is orphaned to the host's pid 1.  The launcher's process
    group is SIGKILLed last in any case."""
    if killed:
        if pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
        for pgid in ([worker_group] if worker_group is not None else []) + groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        if pidfd is not None or worker_group is not None:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
    if killed or proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        returncode = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # unkillable (D state); report, don't hang the caller
        return -signal.SIGKILL
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
    try:  # stragglers of the group
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    return returncode


def _result(c: _Collector, tests: list[str], start: float, proc: subprocess.Popen, returncode: int, *,
            timed_out: bool, over_output: bool, over_results: bool, tail: bytes, timeout_s: float,
            max_output_bytes: int, oom_kills: int) -> SandboxResult:
    top_level_failed = c.code_state in ("syntax", "error", "crash")
    per_test = tuple(bool(r) and not top_level_failed for r in c.results)
    passed = sum(per_test)
    total = len(tests)
    output = tail.decode("utf-8", "replace")
    signum = returncode - 128 if returncode > 128 else (-returncode if returncode < 0 else 0)
    cpu_killed = -signal.SIGXCPU in c.exits or signum == signal.SIGXCPU
    memory = c.memory_error or oom_kills > 0
    memory_detail = "memory cgroup limit reached (OOM kill)" if oom_kills else "MemoryError"
    if not c.ready or c.setup_error:
        status = "sandbox_error"
        detail = c.setup_error or (f"timed out after {timeout_s}s during sandbox setup" if timed_out
                                   else f"launcher exited with {returncode} before running code")
        if not c.setup_error:
            detail += f"; output: {output[-300:]!r}"
        _count_error(detail)
        passed, per_test = 0, (False,) * total
    elif over_output:
        status, detail = "output_limit", f"output exceeded {max_output_bytes} bytes"
    elif over_results:
        status, detail = "crash", "result channel flooded"
    elif timed_out:
        status, detail = "timeout", f"wall clock limit {timeout_s}s"
    elif c.code_state == "syntax":
        status, detail = "syntax_error", c.code_error
    elif c.code_state == "error":
        status = "memory" if c.memory_error else "runtime_error"
        detail = c.code_error
    elif cpu_killed:
        status, detail = "timeout", "CPU time limit"
    elif memory:
        status, detail = "memory", memory_detail
    elif c.code_state == "crash":
        ends = sorted(set(c.exits))
        status, detail = "crash", f"the code's process died at import ({c.code_error}; exit {ends})"
    elif c.done:
        status, detail = "ok", ""
    else:
        status = "crash"
        detail = f"exited with {returncode} before finishing" + (f" (signal {signum})" if signum else "")
    if c.notes:
        detail = (detail + "; " if detail else "") + "; ".join(c.notes)
    return SandboxResult(
        passed=passed, total=total, fraction=passed / total if total else 0.0, status=status,
        detail=detail[:500], output=output, per_test=per_test, test_errors=c.test_errors, isolation=c.layers,
        elapsed_s=time.monotonic() - start, pid=proc.pid, uid=c.uid,
    )
