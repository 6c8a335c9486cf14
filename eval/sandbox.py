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
    Names the test mentions (its code's ``co_names``, nested code included) that the candidate
    binds at top level - found statically with ``ast`` in W: def, async def, class, assignment,
    for/with/except/match targets, walrus, ``global`` - are fetched from C once when the test
    starts: plain values as copies, everything else as handles.  Names the candidate imports
    (``import math``, ``from heapq import nsmallest``) are imported by W before any candidate code
    runs and bound to the real objects, and builtins are never taken from the candidate: a test's
    ``sorted``, ``len`` or ``math.isclose`` is the real one even if the code rebinds it.

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

    caller ── L  launcher: python -s -P -B -S -c <loader> (this file's child part on stdin),
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
    address spaces: memfd and tmpfs pages, SysV shared memory, pipe buffers - or many processes.
    Without a cgroup the old docstring's "``max_processes * memory_mb`` + ``disk_mb``" was false:
    probes held 2.5 GiB (and 3.3 GiB here, at ``memory_mb=256``) in memfds.  With ``memcg`` the
    whole call - W, every C and O and their children, tmpfs and memfd pages, SysV shm, page cache,
    kernel memory - is charged to one cgroup limited to ``memory_mb + disk_mb + 64`` MiB; past it
    the kernel OOM-kills inside the call (C first: oom_score_adj 1000) and the status is
    ``memory``.  Measured (cgroup v1, defaults: 512 + 64 + 64 = 640 MiB; peak
    ``memory.max_usage_in_bytes``): memfds written by 8 processes, 8 processes each filling their
    RLIMIT_AS, the tmpfs then memfds, SysV segments touched by 4 processes - each stopped at 640
    MiB; pipe buffers of 8 processes reached 75 MiB.  An honest call is charged ~5 MiB.  Nothing
    we tried got past the limit; memory the kernel does not account to a cgroup is not bounded.
    Without a cgroup (not root, or no writable memory controller) memfd and SysV shm are refused
    (``seccomp``), the chroot has no /dev/shm, and the bound is per process only:
    ``max_processes * memory_mb`` of address space plus the ``disk_mb`` tmpfs plus pipe and socket
    buffers (64 descriptors per process) - 8 processes held 3.5 GiB at the default 512 MiB.
    Without a chroot in that mode the host's /dev/shm and /tmp are writable (only the audit hook
    stops it) and unbounded.

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

Cost (``scripts/bench_sandbox.py``, 2 busy cores): ~25 ms for a call with 1 test plus ~3.5 ms per
further test (two forks, C's top level, O's test), ~50-58 calls/s from 4 threads at 3 tests; the
single-interpreter version took ~24 ms whatever the number of tests, ~60-70 calls/s.  Without
namespaces ~60 ms (before: ~110 ms).

This file doubles as the child program: the part before ``_END_OF_CHILD``, compiled once per
caller process (compiling it would cost ~7 ms a call, as much as starting the interpreter), goes
to the interpreter on stdin.  It imports only ``os``, ``sys``, ``marshal``, ``ctypes``, ``_ast``,
``fcntl``, ``gc`` and ``resource``, so that a call starts in ~10 ms rather than ~100 ms.
"""

from __future__ import annotations

import os
import sys

# ---------------------------------------------------------------------------------------
# Child side (compiled by the caller, run by ``python -c <loader>``); keep it import-light.
# ---------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_NS_FLAGS = (
    ("pidns", _CLONE_NEWPID),
    ("chroot", _CLONE_NEWNS),
    ("netns", _CLONE_NEWNET),
    ("ipcns", _CLONE_NEWIPC),
    ("utsns", _CLONE_NEWUTS),
)
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_SIGKILL = 9
_RESULT_FD = 3  # W and O -> caller: token-prefixed records
_TESTS_FD = 4  # caller -> O: marshal'd list of tests (memfd; O preads it)
_EXIT_SETUP = 70  # the launcher failed before any untrusted code ran
_NOBODY = 65534
_UID_BASE = 1_000_000_000  # per-call uids: _UID_BASE + (caller pid % 10**6) * 256 + slot
_DATA_LIMIT = 16 << 20  # largest message between C and O
_DEPTH_LIMIT = 100  # deepest plain-data nesting
_TITLE = b"sandbox"  # what /proc/<pid>/cmdline shows for every process of the call
# Modules W does not import on the candidate's behalf (side effects at import time).
_NO_PREIMPORT = frozenset({"antigravity", "this", "__main__", "__hello__", "__phello__", "webbrowser",
                           "turtle", "turtledemo", "tkinter", "idlelib", "pydoc", "__future__"})

_LIBC = None  # ctypes libc of the launcher, inherited by its forks


def _clean(value: object, limit: int = 300) -> str:
    text = str(value).replace("\r", " ").replace("\n", " ").replace("\x00", " ")
    return text[:limit] if text else "-"


class _Emitter:
    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, kind: str, *fields: object) -> None:
        line = " ".join([self.token, kind, *(_clean(f) for f in fields)]) + "\n"
        data = line.encode("utf-8", "replace")
        while data:
            data = data[os.write(_RESULT_FD, data) :]


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(ret: int, what: str) -> None:
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    return libc, check


def _prctl(option: int, arg: int = 0) -> bool:
    if _LIBC is None:
        return False
    return _LIBC.prctl(option, arg, 0, 0, 0) == 0


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:
        return "?"


# --- plain data between C and O --------------------------------------------------------


def _encode(value: object, unknown) -> str:
    """``value`` as a literal that :func:`_decode` accepts.  Subclasses of the builtin types are
    written as the builtin (a Counter as a dict, a namedtuple as a tuple, an IntEnum as an int);
    anything else becomes ``unknown(obj)`` (a handle, or an error)."""
    parts: list[str] = []
    size = 0

    def put(text: str) -> None:
        nonlocal size
        size += len(text)
        if size > _DATA_LIMIT:
            raise ValueError("data too large")
        parts.append(text)

    def seq(items, depth: int, open_: str, close: str, one: str = "") -> None:
        put(open_)
        count = 0
        for count, item in enumerate(items, 1):
            if count > 1:
                put(", ")
            enc(item, depth + 1)
        put(one if count == 1 else "")
        put(close)

    def enc(v: object, depth: int) -> None:
        if depth > _DEPTH_LIMIT:
            raise ValueError("data nested too deeply")
        if v is None or v is True or v is False:
            put(repr(v))
        elif isinstance(v, int):
            n = int.__index__(v)
            put(int.__repr__(n) if n.bit_length() <= 12_000 else format(n, "#x"))  # no str-digits limit
        elif isinstance(v, float):
            put(float.__repr__(v))
        elif isinstance(v, complex):
            put(f"complex({float.__repr__(v.real)}, {float.__repr__(v.imag)})")
        elif isinstance(v, str):
            put(str.__repr__(v))
        elif isinstance(v, (bytes, bytearray)):
            put(bytes.__repr__(bytes(v)))
        elif isinstance(v, tuple):
            seq(tuple.__iter__(v), depth, "(", ")", one=",")
        elif isinstance(v, list):
            seq(list.__iter__(v), depth, "[", "]")
        elif isinstance(v, dict):
            put("{")
            for i, (key, item) in enumerate(dict.items(v)):
                if i:
                    put(", ")
                enc(key, depth + 1)
                put(": ")
                enc(item, depth + 1)
            put("}")
        elif isinstance(v, frozenset):
            if v:
                seq(frozenset.__iter__(v), depth, "frozenset({", "})")
            else:
                put("frozenset()")
        elif isinstance(v, set):
            if v:
                seq(set.__iter__(v), depth, "{", "}")
            else:
                put("set()")
        elif type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0 and hasattr(v, "item"):
            enc(v.item(), depth + 1)  # a numpy scalar (np.int64 is no int): its Python value
        else:
            put(unknown(v))

    enc(value, 0)
    return "".join(parts)


def _decode(text: str, ref):
    """Parse a literal written by :func:`_encode`, accepting plain data only (see the module
    docstring); ``ref(n)`` nodes become ``ref(n)`` - a handle - or are refused when ``ref`` is
    None.  Raises ValueError (or SyntaxError, MemoryError) on anything else."""
    import _ast

    if len(text) > _DATA_LIMIT:
        raise ValueError("data too large")
    tree = compile(text, "<data>", "eval", _ast.PyCF_ONLY_AST)
    numbers = (int, float, complex)

    def dec(node, depth: int):
        if depth > _DEPTH_LIMIT:
            raise ValueError("data nested too deeply")
        kind = type(node)
        if kind is _ast.Constant:
            value = node.value
            if value is None or type(value) in (int, float, complex, str, bytes, bool):
                return value
        elif kind is _ast.Name and node.id in ("nan", "inf"):
            return float(node.id)
        elif kind is _ast.UnaryOp and type(node.op) in (_ast.USub, _ast.UAdd):
            value = dec(node.operand, depth + 1)
            if type(value) in numbers:
                return -value if type(node.op) is _ast.USub else value
        elif kind is _ast.List:
            return [dec(e, depth + 1) for e in node.elts]
        elif kind is _ast.Tuple:
            return tuple(dec(e, depth + 1) for e in node.elts)
        elif kind is _ast.Set:
            return {dec(e, depth + 1) for e in node.elts}
        elif kind is _ast.Dict:
            if all(k is not None for k in node.keys):  # None: a ``**`` unpacking
                return {dec(k, depth + 1): dec(v, depth + 1) for k, v in zip(node.keys, node.values, strict=True)}
        elif kind is _ast.Call and type(node.func) is _ast.Name and not node.keywords:
            name, args = node.func.id, [dec(a, depth + 1) for a in node.args]
            if name == "set" and not args:
                return set()
            if name == "frozenset" and (not args or (len(args) == 1 and type(args[0]) in (set, list, tuple))):
                return frozenset(*args)
            if name == "complex" and len(args) == 2 and all(type(a) in (int, float) for a in args):
                return complex(*args)
            if name == "ref" and ref is not None and len(args) == 1 and type(args[0]) is int:
                return ref(args[0])
        raise ValueError(f"not plain data: {kind.__name__}")

    return dec(tree.body, 0)


def _send(fd: int, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def _recv(fd: int) -> str | None:
    """One message, or None at end of file (the other side is gone)."""

    def exactly(n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    header = exactly(4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > _DATA_LIMIT:
        raise ValueError("message too large")
    data = exactly(size)
    return None if data is None else data.decode("utf-8", "surrogatepass")


# --- what the candidate binds, found statically in W ------------------------------------


def _top_level_bindings(tree) -> tuple[set[str], dict[str, tuple[str, str | None]], set[str], list[str]]:
    """From the candidate's AST: (names bound other than by import, names bound by import ->
    (module, attribute or None), modules to import, modules imported with ``*``).  Generous:
    a name listed that the code does not end up binding is simply absent in C."""
    import _ast

    defined: set[str] = set()
    imports: dict[str, tuple[str, str | None]] = {}
    modules: set[str] = set()
    star: list[str] = []
    scopes = (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef, _ast.Lambda)

    def bind(target) -> None:
        if isinstance(target, _ast.Name):
            defined.add(target.id)
        elif isinstance(target, (_ast.Tuple, _ast.List)):
            for element in target.elts:
                bind(element)
        elif isinstance(target, _ast.Starred):
            bind(target.value)

    stack = [(tree, True)]
    while stack:
        node, top = stack.pop()
        kind = type(node)
        if kind is _ast.Global:
            defined.update(node.names)
        elif top:
            if kind in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef):
                defined.add(node.name)
            elif kind is _ast.Import:
                for alias in node.names:
                    modules.add(alias.name)
                    if alias.asname:
                        imports[alias.asname] = (alias.name, None)
                    else:
                        top_name = alias.name.partition(".")[0]
                        imports[top_name] = (top_name, None)
            elif kind is _ast.ImportFrom:
                for alias in node.names:
                    if node.level or not node.module:
                        defined.add(alias.asname or alias.name)
                    elif alias.name == "*":
                        star.append(node.module)
                    else:
                        modules.add(node.module)
                        imports[alias.asname or alias.name] = (node.module, alias.name)
            elif kind is _ast.Assign:
                for target in node.targets:
                    bind(target)
            elif kind in (_ast.AugAssign, _ast.AnnAssign, _ast.For, _ast.AsyncFor, _ast.NamedExpr):
                bind(node.target)
            elif kind is _ast.withitem and node.optional_vars is not None:
                bind(node.optional_vars)
            elif kind in (_ast.ExceptHandler, _ast.MatchAs, _ast.MatchStar) and node.name:
                defined.add(node.name)
            elif kind is _ast.MatchMapping and node.rest:
                defined.add(node.rest)
        inner = top and kind not in scopes
        for field in node._fields:
            value = getattr(node, field, None)
            for child in value if isinstance(value, list) else (value,):
                if isinstance(child, _ast.AST):
                    stack.append((child, inner))
    # A name bound both ways is taken as the import (an honest program does not rebind `math`).
    return defined - imports.keys(), imports, modules, star


def _import_for_judge(imports: dict, modules: set[str], star: list[str]) -> tuple[dict, dict]:
    """Import, in W and before any candidate code runs, what the code imports at top level, so
    that the judge binds real modules (never the candidate's objects) to those names, and every
    C and O inherits them already loaded.  Returns (name -> object, star-imported names)."""
    def load(module: str):
        if module.partition(".")[0] in _NO_PREIMPORT:
            raise ImportError(module)
        __import__(module)
        return sys.modules[module]

    for module in sorted(modules):
        try:
            load(module)
        except BaseException:
            pass
    resolved = {}
    for name, (module, attr) in imports.items():
        try:
            obj = load(module)
            if attr is not None:
                try:
                    obj = getattr(obj, attr)
                except AttributeError:
                    obj = load(f"{module}.{attr}")
            resolved[name] = obj
        except BaseException:
            pass  # fetched from C instead, like a name the code defines
    starred = {}
    for module in star:
        try:
            mod = load(module)
            names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
            starred.update({n: getattr(mod, n) for n in names if hasattr(mod, n)})
        except BaseException:
            pass
    return resolved, starred


def _global_names(code) -> set[str]:
    """Every name a compiled test may look up globally (``co_names`` of it and nested code)."""
    names: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if type(c) is type(code))
    return names


# --- building the sandbox ---------------------------------------------------------------


def _hide_cmdline() -> None:
    """Overwrite this process's argv area, which ``/proc/<pid>/cmdline`` shows (and forks
    inherit), with a neutral title: pid 1 of the sandbox must not show the host's paths.  The
    area's last byte is left non-zero: the kernel's setproctitle convention, under which cmdline
    reads as the text up to the first NUL ("sandbox") instead of the whole, NUL-padded area."""
    import ctypes

    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
    if not 0 < start < end or end - start < len(_TITLE) + 2:
        return
    ctypes.memset(start, 0, end - start)
    ctypes.memmove(start, _TITLE, len(_TITLE))
    ctypes.memset(end - 1, 0x20, 1)


def _scrub_interpreter_state() -> None:
    """Host paths the candidate could read from ``sys`` (argv, the venv prefix)."""
    sys.argv[:] = [""]
    sys.orig_argv[:] = ["python3"]
    sys.prefix, sys.exec_prefix = sys.base_prefix, sys.base_exec_prefix
    sys.executable = sys._base_executable = os.path.realpath(sys.executable)


def _build_root(libc, check, job: dict, with_proc: bool) -> None:
    """In a private mount namespace: assemble a minimal read-only root under
    job['newroot'] and chroot into it.  Only the cwd (a tmpfs) is writable, by C's uid; it is
    setgid to O's gid, so a test can read files the code wrote (e.g. ``open('out.txt')``)."""

    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    def mount(src, target, fstype, flags, data=None):
        check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def bind(src: str, target: str, readonly: bool, rec: bool = False) -> None:
        mount(src, target, None, _MS_BIND | (_MS_REC if rec else 0))
        if readonly:
            mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID)

    new = job["newroot"]
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
    bound: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), new + top)
        elif os.path.isdir(top):
            os.mkdir(new + top)
            bind(top, new + top, readonly=True, rec=True)
            bound.append(top)
    for path in job["expose"]:
        path = os.path.realpath(path)
        if not os.path.isdir(path) or any(path == b or path.startswith(b + "/") for b in bound):
            continue
        os.makedirs(new + path, exist_ok=True)
        bind(path, new + path, readonly=True, rec=True)
        bound.append(path)
    os.mkdir(new + "/dev")
    for dev in ("null", "zero", "full", "random", "urandom"):
        if os.path.exists("/dev/" + dev):
            with open(new + "/dev/" + dev, "w"):
                pass
            bind("/dev/" + dev, new + "/dev/" + dev, readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    if with_proc:
        os.mkdir(new + "/proc")
        mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.makedirs(new + "/tmp", exist_ok=True)
    work = new + job["workdir"]
    os.makedirs(work, exist_ok=True)
    mount("tmpfs", work, "tmpfs", _MS_NOSUID | _MS_NODEV,
          f"size={job['disk_mb']}m,nr_inodes=4096,mode=2750,uid={job['uid']},gid={job['judge_uid']}")
    mount(None, new, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chroot(new)
    os.chdir("/")


def _prefix_hidden() -> bool:
    """Whether an unprivileged uid can't reach the stdlib (a directory on the way lacks o+x)."""
    path = os.path.dirname(os.__file__)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return True
        except OSError:
            return True
        if path in ("/", ""):
            return False
        path = os.path.dirname(path)


def _set_rlimits(job: dict) -> None:
    import resource

    mem = job["memory_mb"] * 1024 * 1024
    fsize = job["disk_mb"] * 1024 * 1024
    for res, soft, hard in (
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, job["cpu_s"], job["cpu_s"] + 1),
        (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_NPROC, job["max_processes"], job["max_processes"]),
    ):
        resource.setrlimit(res, (soft, hard))


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _set_oom_score(adj: int) -> None:
    """Who the memory cgroup's OOM killer takes first: C (1000); W never (-1000), where we may
    lower it (that needs CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(adj))
    except OSError:
        pass


def _install_seccomp() -> bool:
    """Refuse memfd_create, memfd_secret and shmget with EPERM (pages no rlimit counts), for this
    process and all it forks.  Needs no_new_privs or CAP_SYS_ADMIN.  Any other syscall ABI (x32,
    i386) is refused outright."""
    import ctypes

    arches = {"x86_64": (0xC000003E, (319, 447, 29)), "aarch64": (0xC00000B7, (279, 447, 194))}
    if _LIBC is None or os.uname().machine not in arches:
        return False
    arch, numbers = arches[os.uname().machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    end = 5 + len(numbers)  # index of the "deny" instruction; jumps are relative to the next one
    program = [(ld, 0, 0, 4), (jeq, 0, end - 2, arch), (ld, 0, 0, 0), (jge, end - 4, 0, 0x40000000)]
    program += [(jeq, end - (5 + i), 0, nr) for i, nr in enumerate(numbers)]
    program += [(ret, 0, 0, allow), (ret, 0, 0, deny)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*(Filter(*p) for p in program))
    fprog = Program(len(program), filters)
    return _LIBC.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) == 0  # SECCOMP_MODE_FILTER


def _install_audit_hook(workdir: str) -> None:
    """Second layer: refuse network, process spawning, ctypes, gc walking, signals to
    others, and filesystem writes outside ``workdir`` at the Python level."""
    realpath, fspath, getpid = os.path.realpath, os.fspath, os.getpid
    prefix = workdir.rstrip("/") + "/"
    allowed_files = {"/dev/null"}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    blocked = frozenset({
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
        "socket.gethostname", "socket.sethostname",
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "os.forkpty", "os.startfile", "pty.spawn",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        # ctypes may be imported (numpy does) but not load libraries, call foreign functions
        # or touch raw memory.
        "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
        "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
        "ctypes.PyObj_FromPtr",
    })
    path_events = {
        "os.remove": 1, "os.rmdir": 1, "os.rename": 2, "os.mkdir": 1, "os.chmod": 1,
        "os.chown": 1, "os.link": 2, "os.symlink": 2, "os.truncate": 1, "os.utime": 1,
        "shutil.rmtree": 1, "os.chflags": 1, "os.lchflags": 1, "os.setxattr": 1,
        "os.removexattr": 1,
    }

    def inside(path) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor
        try:
            full = realpath(os.fsdecode(fspath(path)))
        except Exception:
            return False
        return full == prefix[:-1] or full.startswith(prefix) or full in allowed_files

    def deny(event: str) -> None:
        raise PermissionError(f"sandbox: {event} is not allowed")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if ((isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & write_flags) \
                    and not inside(path):
                deny(f"writing {path!r}")
        elif event in blocked:
            deny(event)
        elif event in path_events:
            for path in args[: path_events[event]]:
                if not inside(path):
                    deny(f"{event} on {path!r}")
        elif event in ("os.kill", "os.killpg"):
            if args[0] not in (0, getpid()):
                deny(event)

    sys.addaudithook(hook)



# --- C, the candidate ---------------------------------------------------------------------


def _module_namespace(name: str) -> dict:
    """The globals of a fresh module registered as ``sys.modules[name]``, so that what looks a
    class's module up (dataclasses with string annotations, pickle, typing) finds it."""
    module = type(sys)(name)
    sys.modules[name] = module
    return module.__dict__


def _candidate(job: dict, requests: int, replies: int) -> None:
    """C: run the code, tell the judge whether its top level raised, then serve the judge's
    requests until it hangs up.  Everything here is at the code's mercy, and nothing here needs
    to be trusted: the judge accepts plain data and nothing else."""
    import builtins

    my_pid = os.getpid()
    handles: list = []

    def unknown(obj) -> str:
        handles.append(obj)
        return f"ref({len(handles) - 1})"

    def raised(exc: BaseException) -> tuple:
        try:
            names = tuple(c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins")
        except BaseException:
            names = ()
        return ("raise", type(exc).__name__, names, _message(exc)[:1000])

    def reply(message: tuple) -> None:
        if os.getpid() != my_pid:  # a fork the code made: it answers nothing
            os._exit(0)
        for stream in (sys.stdout, sys.stderr):  # nothing printed is lost when W kills C
            try:
                stream.flush()
            except BaseException:
                pass
        try:
            text = _encode(message, unknown)
        except BaseException:  # too large, too deep, a broken subclass: hand it over as a handle
            text = f"('ok', {unknown(message[1])})" if message[0] == "ok" else "('raise', '?', (), '?')"
        try:
            _send(replies, text)
        except OSError:  # the judge is gone
            os._exit(0)

    if not hasattr(builtins, "exit"):  # normally added by `site`, which -S skips
        builtins.exit = builtins.quit = sys.exit
    namespace = _module_namespace("__solution__")
    try:
        exec(job["compiled"], namespace)
        status = ("ok", None)
    except BaseException as exc:
        status = raised(exc)
    reply(status)
    if status[0] != "ok":
        os._exit(0)
    while True:
        try:
            text = _recv(requests)
        except BaseException:
            break
        if text is None:
            break
        try:
            op, target, *args = _decode(text, handles.__getitem__)
            if op == "get":
                result = {name: namespace[name] for name in target if name in namespace}
            elif op == "call":
                result = target(*args[0], **args[1])
            elif op == "attr":
                result = getattr(target, args[0])
            elif op == "iter":
                result = iter(target)
            elif op == "next":
                try:
                    result = next(target)
                except StopIteration:
                    reply(("stop",))
                    continue
            else:
                raise ValueError(f"unknown request {op!r}")
            message = ("ok", result)
        except BaseException as exc:
            message = raised(exc)
        reply(message)
    os._exit(0)


# --- O, the judge -------------------------------------------------------------------------


class _Broken(BaseException):
    """The candidate died or broke the protocol.  A BaseException, so a test's ``except
    Exception`` cannot swallow it, and the judge fails the test even if a bare ``except`` did."""


class _Handle:
    """The judge's stand-in for a candidate object that is not plain data (a function, a class,
    an instance, a generator).  Calling it, reading an attribute and iterating it are forwarded
    to C; everything else is ``object``'s, so it is truthy and equal only to itself - whatever
    its ``__eq__`` in C says."""

    __slots__ = ("_ref", "_channel")

    def __init__(self, ref: int, channel: _Channel) -> None:
        self._ref = ref
        self._channel = channel

    def __call__(self, *args, **kwargs):
        return self._channel.ask("call", self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._channel.ask("attr", self, name)

    def __iter__(self):
        iterator = self._channel.ask("iter", self)
        return iterator if type(iterator) is _Handle else iter(iterator)

    def __next__(self):
        return self._channel.ask("next", self)

    def __repr__(self) -> str:
        return f"<candidate object #{self._ref}>"


class _Channel:
    """The judge's end of the pipes to C: requests out, plain data (and handles) back."""

    def __init__(self, requests: int, replies: int) -> None:
        self.requests = requests
        self.replies = replies
        self.broken: _Broken | None = None

    def _fail(self, why: str):
        self.broken = _Broken(why)
        raise self.broken

    def receive(self) -> tuple:
        try:
            text = _recv(self.replies)
        except Exception as exc:
            self._fail(f"unreadable reply ({type(exc).__name__})")
        if text is None:
            self._fail("the candidate exited")
        try:
            message = _decode(text, lambda ref: _Handle(ref, self))
        except Exception as exc:  # SyntaxError, ValueError, MemoryError, RecursionError
            self._fail(f"reply is not plain data ({type(exc).__name__})")
        if type(message) is not tuple or not message or message[0] not in ("ok", "raise", "stop"):
            self._fail("malformed reply")
        if message[0] == "raise" and not (
                len(message) == 4 and type(message[1]) is str and type(message[2]) is tuple
                and all(type(n) is str for n in message[2]) and type(message[3]) is str):
            self._fail("malformed reply")
        return message

    @staticmethod
    def _argument(obj) -> str:
        if type(obj) is _Handle:
            return f"ref({obj._ref})"
        raise TypeError(f"a {type(obj).__name__} cannot be passed to the candidate (plain data only)")

    def ask(self, op: str, *args):
        if self.broken is not None:
            raise self.broken
        text = _encode((op, *args), self._argument)  # TypeError: the test passed a non-plain value
        try:
            _send(self.requests, text)
        except OSError:
            self._fail("the candidate exited")
        message = self.receive()
        if message[0] == "ok" and len(message) == 2:
            return message[1]
        if message == ("stop",) and op == "next":
            raise StopIteration
        if message[0] == "raise":
            _reraise(*message[1:])
        self._fail("malformed reply")


def _reraise(name: str, names: tuple, text: str):
    """Raise, in the judge, the nearest builtin exception class of what C raised (so ``except
    ValueError`` in a test works), else RuntimeError; never a BaseException-only class."""
    import builtins

    for candidate in names:
        cls = getattr(builtins, candidate, None)
        if isinstance(cls, type) and issubclass(cls, Exception) \
                and cls not in (Exception, StopIteration, StopAsyncIteration):
            try:
                exc = cls(text)
            except Exception:
                continue
            raise exc
    raise RuntimeError(f"{name}: {text}")


def _judge(job: dict, emit: _Emitter, index: int | None, bindings: tuple, requests: int, replies: int) -> None:
    """O: read C's import report, then run test ``index`` (None: only the import) with the
    candidate's names bound to what C hands over, and report the verdict on fd 3."""
    import builtins
    import marshal

    defined, resolved, starred = bindings
    channel = _Channel(requests, replies)

    def finish(*record: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        if record:
            emit(*record)
        os._exit(0)

    try:
        status = channel.receive()
        if status == ("ok", None):
            emit("code", "ok")
        elif status[0] == "raise":
            emit("code", "error", status[1], status[3])
            finish(*(() if index is None else ("test", index, 0, status[1], status[3])))
        else:
            channel._fail("malformed import report")
    except _Broken as exc:
        emit("code", "crash", exc)
        finish(*(() if index is None else ("test", index, 0, "crash", exc)))
    if index is None:
        finish()
    tests = marshal.loads(os.pread(_TESTS_FD, os.fstat(_TESTS_FD).st_size, 0))
    namespace = _module_namespace("__test__")
    try:
        compiled = compile(tests[index], f"<test {index}>", "exec", dont_inherit=True)
        wanted = _global_names(compiled)
        namespace.update({n: v for n, v in starred.items() if n in wanted})
        namespace.update({n: v for n, v in resolved.items() if n in wanted})
        remote = sorted(n for n in wanted if n in defined and not hasattr(builtins, n))
        if remote:
            values = channel.ask("get", remote)
            if type(values) is not dict:
                channel._fail("malformed names")
            namespace.update({n: values[n] for n in remote if n in values})  # only what was asked
        exec(compiled, namespace)
        if channel.broken is not None:  # swallowed by a bare except in the test
            raise channel.broken
        record = ("test", index, 1, "-", "-")
    except BaseException as exc:
        record = ("test", index, 0, type(exc).__name__, _message(exc))
    finish(*record)


# --- W, the worker ------------------------------------------------------------------------


def _close_fds_except(keep: tuple[int, ...]) -> None:
    low = 0
    for fd in sorted(set(keep)):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _enter_child(job: dict, emit: _Emitter, role: str, keep: tuple[int, ...]) -> None:
    """Set up a fresh fork of W as C or O before any of its work runs: own process group,
    rlimits, OOM priority, its uid, death signal, (O) non-dumpable, cwd, umask; then close every
    descriptor but stdio and ``keep``."""
    candidate = role == "candidate"
    try:
        os.setpgid(0, 0)
        _set_rlimits(job)
        _set_oom_score(1000 if candidate else 0)
        if job["root"]:
            _drop_privileges(job["uid"] if candidate else job["judge_uid"])
        _prctl(_PR_SET_PDEATHSIG, _SIGKILL)  # (after setuid, which clears it)
        if os.getppid() != job["worker_pid"]:
            os._exit(_EXIT_SETUP)  # W is already gone
        if not candidate:
            _prctl(_PR_SET_DUMPABLE, 0)  # (after setuid, which resets it)
        os.chdir(job["cwd"])
        os.umask(0o027)
    except BaseException as exc:
        emit("setup_error", f"{role}: {type(exc).__name__}: {exc}")
        os._exit(_EXIT_SETUP)
    _close_fds_except((0, 1, 2, *keep))


def _kill_all_of(uid: int) -> None:
    """Kill every process of ``uid`` with kill(-1) from a helper running as that uid.  One pass
    sees every process: it walks the task list under the lock fork() needs to add one (a second
    pass is for good measure).  Its result says nothing - outside a pid namespace it "succeeds"
    whenever any other process exists - so it is not repeated until it fails."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(2):
                os.kill(-1, _SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(helper, 0)


def _reap_available() -> None:
    """Reap the children that have exited, without waiting for the rest."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _reap_for(seconds: float) -> None:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.002)
        except ChildProcessError:
            return


def _sweep(job: dict, pidns: bool, groups: tuple[int, ...]) -> None:
    """After a test: kill whatever C and O left (children, daemons) and reap it."""
    if pidns:  # W is pid 1: kill(-1) reaches every other process of the namespace
        while True:
            try:
                os.kill(-1, _SIGKILL)
            except OSError:
                return
            try:
                while True:
                    os.waitpid(-1, 0)
            except ChildProcessError:
                pass
    for group in groups:  # C, O and whatever stayed in their process groups
        try:
            os.killpg(group, _SIGKILL)
        except OSError:
            pass
    for pid in groups:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if job["root"] and job["uid"] >= _UID_BASE:  # what left the groups (setsid): by uid
        for uid in {job["uid"], job["judge_uid"]}:
            _kill_all_of(uid)
    _reap_available()


def _run_pair(job: dict, emit: _Emitter, index: int | None, bindings: tuple, pidns: bool) -> None:
    """Fork C and O for one test, wait for O's verdict, then clear the namespace."""
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    candidate = os.fork()
    if candidate == 0:
        try:
            _enter_child(job, emit, "candidate", (requests_r, replies_w))
            if job["audit_hook"]:
                _install_audit_hook(job["cwd"])
            _candidate(job, requests_r, replies_w)
        finally:
            os._exit(0)  # never back into W's loop
    judge = os.fork()
    if judge == 0:
        try:
            _enter_child(job, emit, "judge", (_RESULT_FD, _TESTS_FD, requests_w, replies_r))
            _judge(job, emit, index, bindings, requests_w, replies_r)
        finally:
            os._exit(0)
    for fd in (requests_r, requests_w, replies_r, replies_w):
        os.close(fd)
    if not pidns:  # so that the caller can kill them too if the call times out
        emit("group", candidate)
        emit("group", judge)
    status = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == candidate:
            status = wait_status
        elif pid == judge:
            break
    if status is None:
        try:
            pid, wait_status = os.waitpid(candidate, os.WNOHANG)
            status = wait_status if pid else None
        except ChildProcessError:
            pass
    _sweep(job, pidns, (candidate, judge))
    if status is not None:  # how C ended by itself (e.g. SIGXCPU): only for the status text
        emit("exit", -1 if index is None else index, os.waitstatus_to_exitcode(status))


def _worker(job: dict, emit: _Emitter, layers: list[str], pidns: bool) -> None:
    """W, once the sandbox is built: check the syntax, find the code's top-level names, import
    what it imports, then run one candidate/judge pair per test.  Runs no candidate code."""
    import _ast

    emit("ready", ",".join(layers))
    try:
        tree = compile(job["code"], "<solution>", "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
        # (also finds what only the compiler does, e.g. 'return' outside a function; every C runs it)
        job["compiled"] = compile(tree, "<solution>", "exec", dont_inherit=True)
    except BaseException as exc:  # SyntaxError, but also MemoryError/RecursionError/ValueError (NUL)
        emit("code", "syntax", type(exc).__name__, _message(exc))
        emit("done")
        os._exit(0)
    defined, imports, modules, star = _top_level_bindings(tree)
    del tree
    resolved, starred = _import_for_judge(imports, modules, star)
    defined |= imports.keys() - resolved.keys()
    import gc
    import resource  # noqa: F401  (for _set_rlimits in every fork)

    gc.freeze()  # the forks' collections then skip W's objects instead of copying their pages
    for index in range(job["n_tests"]) or [None]:
        _run_pair(job, emit, index, (frozenset(defined), resolved, starred), pidns)
    emit("done")
    os._exit(0)


# --- L, the launcher ----------------------------------------------------------------------


def _exit_like(status: int) -> None:
    """Exit with the status a waited-for child had (signals become 128+n)."""
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _wait_and_exit(pid: int) -> None:
    """Launcher: wait for the namespace's pid 1, then exit like it."""
    while True:
        try:
            got, status = os.waitpid(pid, 0)
        except ChildProcessError:
            os._exit(_EXIT_SETUP)
        if got == pid:
            _exit_like(status)


def _fork_reported(emit: _Emitter, kind: str) -> int:
    """fork(); the parent reports the child's pid to the caller *before* the child goes on, so
    the caller can always kill it."""
    gate_r, gate_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(gate_r)
        emit("pid", pid, kind)
        os.write(gate_w, b"x")
        os.close(gate_w)
    else:
        os.close(gate_w)
        os.read(gate_r, 1)
        os.close(gate_r)
    return pid


def _reaper_loop(worker: int, job: dict) -> None:
    """Launcher without a pid namespace (it is a child subreaper): wait for W, kill what the
    call left behind, reap it all (nothing is left to the host's pid 1), exit like W."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(_EXIT_SETUP)
        if got == worker:
            break
    if job["root"] and job["uid"] >= _UID_BASE:  # never kill(-1) as a shared uid
        for uid in {job["uid"], job["judge_uid"]}:
            _kill_all_of(uid)
    try:
        os.killpg(worker, _SIGKILL)
    except OSError:
        pass
    _reap_for(1.0)
    _exit_like(status)


def _child_main() -> None:
    import fcntl
    import marshal

    global _LIBC
    data = sys.stdin.buffer.read()
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    job = marshal.loads(data)
    moved = [fcntl.fcntl(job[key], fcntl.F_DUPFD, 10) for key in ("result_fd", "tests_fd")]
    for key in ("result_fd", "tests_fd"):
        os.close(job[key])
    for fd, target in zip(moved, (_RESULT_FD, _TESTS_FD), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    emit = _Emitter(job["token"])
    layers = ["judge", "session", "rlimits"]
    try:
        try:
            _LIBC, check = _libc()
        except OSError:
            check = None
        _prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        if os.getppid() != job["parent_pid"]:
            os._exit(_EXIT_SETUP)  # the caller is already gone
        _prctl(_PR_SET_DUMPABLE, 0)  # nobody but root reads our memory or descriptors
        try:
            _hide_cmdline()
        except (OSError, ValueError, IndexError):
            pass
        _scrub_interpreter_state()
        root = job["root"]
        flags = 0
        if root and _LIBC is not None and job["namespaces"]:
            wanted = 0
            for _, flag in _NS_FLAGS:
                wanted |= flag
            if _LIBC.unshare(wanted) == 0:
                flags = wanted
            else:
                for _, flag in _NS_FLAGS:
                    if _LIBC.unshare(flag) == 0:
                        flags |= flag
        layers += [name for name, flag in _NS_FLAGS if flags & flag]
        pidns = bool(flags & _CLONE_NEWPID)
        if pidns:
            # L -> W (pid 1 of the namespace: runs the pairs and reaps everything)
            init = _fork_reported(emit, "init")
            if init:
                _wait_and_exit(init)
            _prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        else:
            # L (child subreaper) -> W in its own process group
            _prctl(_PR_SET_CHILD_SUBREAPER, 1)
            worker = _fork_reported(emit, "worker")
            if worker:
                try:
                    os.setpgid(worker, worker)
                except OSError:
                    pass
                _reaper_loop(worker, job)
            os.setpgid(0, 0)
            _prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        job["cwd"] = job["host_workdir"]
        if flags & _CLONE_NEWNS:
            try:
                _build_root(_LIBC, check, job, with_proc=pidns)
                job["cwd"] = job["workdir"]
            except OSError as exc:  # keep going with the host workdir and the other layers
                emit("note", f"minimal root unavailable: {exc}")
                layers.remove("chroot")
        _set_oom_score(-1000)
        if root and "chroot" not in layers and _prefix_hidden():
            # The interpreter's files are root-only (e.g. under /root): import what code commonly
            # needs while W (root) can, so that C and O inherit it.
            emit("note", "stdlib not readable by the sandbox uids: common modules pre-imported")
            for name in job["preimport"]:
                try:
                    __import__(name)
                except ImportError:
                    pass
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1):  # inherited by C and O
            layers.append("no_new_privs")
        if job["memcg"]:  # the caller moved L into the call's cgroup before sending the job
            layers.append("memcg")
        elif _install_seccomp():
            layers.append("seccomp")
        if root:
            layers += [f"uid:{job['uid']}", f"judge_uid:{job['judge_uid']}"]
        if job["audit_hook"]:
            layers.append("audit_hook")
        os.environ["HOME"] = os.environ["TMPDIR"] = job["cwd"]
        job["worker_pid"] = os.getpid()
    except BaseException as exc:
        emit("setup_error", f"{type(exc).__name__}: {exc}")
        os._exit(_EXIT_SETUP)
    _worker(job, emit, layers, pidns)


if __name__ == "__main__":
    _child_main()
    os._exit(_EXIT_SETUP)

_END_OF_CHILD = True  # everything above is the child program (see _child_program)

# ---------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------

import dataclasses  # noqa: E402
import itertools  # noqa: E402
import logging  # noqa: E402
import marshal  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

log = logging.getLogger(__name__)

STATUSES = ("ok", "syntax_error", "runtime_error", "timeout", "memory", "output_limit", "crash",
            "sandbox_error")
_TAIL_BYTES = 4096
_RESULT_LIMIT = 4 * 1024 * 1024
# The call's memory cgroup holds memory_mb + disk_mb + this (W, and the interpreters of C and O).
_MEMCG_SLACK_MB = 64
# Tests switch this off to exercise the fallback (seccomp) layer on a machine with cgroups.
_USE_MEMCG = True
# Imported by W when the interpreter's files are hidden from the sandbox uids and there is no minimal
# root to expose them (root without namespaces, prefix under /root).
_PREIMPORT = ("math", "cmath", "re", "collections", "collections.abc", "itertools", "functools",
              "heapq", "bisect", "string", "operator", "fractions", "decimal", "statistics", "random",
              "copy", "typing", "array", "json", "datetime", "time", "calendar", "hashlib", "struct",
              "textwrap", "unicodedata", "tempfile", "io", "dataclasses", "enum", "abc", "numbers",
              "contextlib", "queue", "threading", "pprint", "ast", "base64", "binascii", "zlib",
              "difflib", "fnmatch", "glob", "shutil", "pathlib", "csv", "locale", "gettext")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    passed: int
    total: int
    fraction: float  # passed / total (0.0 when there are no tests)
    status: str  # one of STATUSES
    detail: str = ""  # short human-readable reason
    output: str = ""  # the last few KB of the code's (and the tests') stdout+stderr
    per_test: tuple[bool, ...] = ()
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
    """(``-c`` bootstrap, marshal'd code) of the child program: this file up to ``_END_OF_CHILD``,
    compiled once per process (compiling it costs ~7 ms, as much as the interpreter's start-up).
    The bootstrap reads the code from stdin, ahead of the job; neither the repo path nor the venv
    appears in argv or in the code objects' file names."""
    with _child_program_lock:
        if not _child_program_cache:
            with open(os.path.abspath(__file__), encoding="utf-8") as f:
                text = f.read()
            code = compile(text[: text.index("\n_END_OF_CHILD = True")], "sandbox", "exec", dont_inherit=True)
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
    ``max_output_bytes`` the stdout+stderr beyond which the run is killed.  ``namespaces=False`` /
    ``audit_hook=False`` switch a layer off; they exist so that tests can show each remaining
    layer holding on its own.  Safe to call from several threads at once.  Never raises for
    anything the code does.
    """
    tests = list(tests)
    start = time.monotonic()
    try:
        return _run(code, tests, start, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                    max_output_bytes=max_output_bytes, max_processes=max_processes, disk_mb=disk_mb,
                    site_packages=site_packages, namespaces=namespaces, audit_hook=audit_hook)
    except Exception as exc:  # a bug or resource exhaustion in the sandbox itself
        detail = f"{type(exc).__name__}: {exc}"
        _count_error(detail)
        return SandboxResult(0, len(tests), 0.0, "sandbox_error", detail=detail[:500],
                             per_test=(False,) * len(tests), elapsed_s=time.monotonic() - start)


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
        elif kind == "done" and self.ready:
            self.done = True


def _run(code: str, tests: list[str], start: float, *, timeout_s: float, memory_mb: int, cpu_s: int,
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
            "token": collector.token.decode(), "code": code, "n_tests": len(tests),
            "uid": uids[0] if uids else None, "judge_uid": uids[1] if uids else None,
            "root": uids is not None, "parent_pid": os.getpid(), "namespaces": namespaces,
            "audit_hook": audit_hook, "newroot": newroot,
            "workdir": "/tmp/sandbox", "host_workdir": host_workdir,
            "expose": _expose_paths(site_packages), "preimport": list(_PREIMPORT),
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
        detail=detail[:500], output=output, per_test=per_test, isolation=c.layers,
        elapsed_s=time.monotonic() - start, pid=proc.pid, uid=c.uid,
    )
