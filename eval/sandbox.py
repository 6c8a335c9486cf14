"""Run model-written Python against assert-style tests, isolated from the machine.

``run_tests(code, tests)`` runs ``code`` once and then each test (an MBPP/HumanEval-style
``assert`` statement) in one fresh child interpreter and returns a :class:`SandboxResult`
whose ``fraction`` (tests passed / tests given) is the code reward.  It never raises for
anything the code does; a failure of the sandbox itself is status ``"sandbox_error"``
(counted by :func:`sandbox_error_count`), never a silent "wrong answer".

Process layout (as root, where the kernel allows namespaces)::

    caller ── L  launcher: python -s -P -B -S eval/sandbox.py, own session/process group
               │  unshare(NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS)
               └─ H  pid 1 of the new pid namespace (root, runs no untrusted code):
                  │  builds a minimal read-only root (bind mounts of /usr, /etc, the
                  │  interpreter prefix, a few /dev nodes, a fresh /proc, a tmpfs cwd)
                  │  and chroots into it; then only reaps children
                  └─ W  worker: setrlimit, drop to a per-call unprivileged uid/gid,
                        no_new_privs, audit hook, then exec(code) and each test

When W exits, H exits and the kernel kills everything left in the pid namespace, so
nothing the code started (fork bombs, daemons, ``setsid`` escapes) outlives the call.  On
the wall-clock deadline the caller SIGKILLs H (via a pidfd) and then the whole process
group.  Without a pid namespace the layout is L -> W: L is a child subreaper, W gets its
own process group, and after W ends L kills every process of W's uid (``kill(-1)`` from a
helper running as that uid) or W's group, reaps them and exits; nothing is orphaned to the
host's pid 1 (which may never reap).  Isolation layers, each listed in
``SandboxResult.isolation`` when active:

* ``session``      own session and process group, killed as a whole (always).
* ``pidns``        new pid namespace; code cannot see or signal anything outside it.
* ``netns``        new network namespace with only a down loopback: no network at all,
                   not even 127.0.0.1.
* ``ipcns``/``utsns`` private SysV IPC / hostname.
* ``chroot``       private mount namespace and a minimal root: the host's files (the repo,
                   /root, /home, /tmp, datasets) are not visible; everything but the cwd
                   (``/tmp/sandbox``, a ``disk_mb`` tmpfs) and a few /dev nodes is read-only.
* ``uid:N``        privileges dropped to uid/gid N, unique per concurrent call (so
                   RLIMIT_NPROC is per call and calls cannot signal each other); root-owned
                   0600 files are unreadable and root-owned paths unwritable.
* ``no_new_privs`` setuid binaries cannot regain privileges.
* ``rlimits``      RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE,
                   RLIMIT_CORE=0 (always).  There is no cgroup: the memory of a whole call is
                   bounded by ``max_processes * memory_mb`` (+ the ``disk_mb`` tmpfs).
* ``audit_hook``   second, in-process layer (default on): blocks socket connect/bind/sendto
                   and name lookups, subprocess/exec/spawn/os.system, ctypes library loading
                   and raw-memory access, gc object walking, signals to other processes, and
                   opening for writing, removing, renaming, chmod ... of paths outside the
                   cwd.  It is Python-level and bypassable by determined code (e.g.
                   ``ctypes.memmove`` is not audited), hence only a second layer.

Without root (or without CAP_SYS_ADMIN, e.g. a default Docker container) the namespaces
and/or the uid drop are unavailable; the call still works with ``session``, ``rlimits``
and ``audit_hook`` (plus ``uid:N`` where setuid works), and the missing layers are simply
absent from ``isolation``.  Then the host filesystem is visible (reads of world-readable
files succeed; writes to world-writable places like /tmp are stopped only by the hook);
without root, RLIMIT_NPROC counts all the caller's processes, and a process that escapes
W's process group (``setsid``) and gets past the hook can outlive the call until its
RLIMIT_CPU runs out.  As root without namespaces, modules the interpreter prefix may
hide from the dropped uid (here it lives under /root, mode 0700) are imported before
the drop (a list of common stdlib modules).

Cost: ~55 ms per call here (2 slow cores; ~20 ms of it interpreter start-up), ~40 calls/s
from 4 threads; ~110 ms without namespaces (the pre-imports).

Protocol: the job (code, tests, limits, a random token) goes to L on stdin (marshal;
only the trusted parent writes it).  W reports on a separate pipe (fd 3), one line per
record, each starting with the token; the caller accepts only lines with the token,
the first record per test, and only records that arrive before ``done``.  The code runs
in W's own process, so a determined program could still dig the token out of memory;
the token, the blocked gc/ctypes hooks and the pid check after each test make forging
results "not easy", not impossible.

Statuses: ``ok`` (all tests ran; ``passed`` may be < ``total``), ``syntax_error``,
``runtime_error`` (the code itself raised), ``timeout`` (wall clock or CPU), ``memory``
(MemoryError), ``output_limit``, ``crash`` (the worker died, e.g. ``os._exit`` or a
segfault), ``sandbox_error`` (the sandbox failed before running the code).

Semantics: the code is executed once with ``__name__ == "__solution__"`` (so a
``if __name__ == "__main__":`` demo block does not run); a top-level exception means no
test passes (status ``runtime_error``, as in the official MBPP/HumanEval harnesses,
which run code and tests as one program).  Tests then run one by one in the same
namespace; each counts as passed when it raises nothing.  On a timeout or output/CPU
limit, tests reported before the kill keep their result and the rest count as failed.
Known non-defence: code can return an object whose ``__eq__`` is always True and pass
``assert f(x) == y``; guard against that in the tests or the reward if it matters.

Interpreter flags: ``-s -P -B -S`` with an environment built from scratch (this is ``-I``
except ``-E``, which would also ignore ``PYTHONHASHSEED=0``); ``site_packages=True``
drops ``-S`` and exposes the interpreter's site-packages inside the sandbox.

This file doubles as the child program; the child part comes first and imports only
``os``, ``sys``, ``marshal``, ``resource`` and ``ctypes`` so that each call pays ~20 ms
of interpreter start-up rather than ~100 ms of imports.
"""

from __future__ import annotations

import os
import sys

# ---------------------------------------------------------------------------------------
# Child side (runs as ``python eval/sandbox.py``); keep it import-light.
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
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_SIGKILL = 9
_RESULT_FD = 3
_EXIT_SETUP = 70  # the launcher failed before any untrusted code ran
_NOBODY = 65534
_UID_BASE = 1_000_000_000  # per-call uids: _UID_BASE + (caller pid % 10**6) * 256 + slot


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


def _exit_like(status: int) -> None:
    """Exit with the status a waited-for child had (signals become 128+n)."""
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _wait_and_exit(pid: int) -> None:
    """Launcher: wait for the namespace init, then exit like it."""
    while True:
        try:
            got, status = os.waitpid(pid, 0)
        except ChildProcessError:
            os._exit(_EXIT_SETUP)
        if got == pid:
            _exit_like(status)


def _init_loop(worker: int) -> None:
    """pid 1 of the sandbox: reap every orphan until the worker exits, then exit like it
    (the kernel then kills whatever is left in the namespace)."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(_EXIT_SETUP)
        if got == worker:
            _exit_like(status)


def _build_root(libc, check, job: dict, with_proc: bool) -> None:
    """In a private mount namespace: assemble a minimal read-only root under
    job['newroot'] and chroot into it.  Only the cwd (a tmpfs) is writable."""

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
          f"size={job['disk_mb']}m,nr_inodes=4096,mode=0700,uid={job['uid']},gid={job['uid']}")
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


def _drop_privileges(uid: int) -> int:
    os.setgroups([])
    try:
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError:  # uid not mapped in this user namespace: fall back to nobody
        uid = _NOBODY
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    return uid


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


def _run_user_code(job: dict, emit: _Emitter) -> None:
    my_pid = os.getpid()

    def describe(exc: BaseException) -> tuple[str, str]:
        try:
            msg = str(exc)
        except BaseException:
            msg = "?"
        return type(exc).__name__, msg

    def finish(code: int = 0) -> None:
        if os.getpid() != my_pid:  # a fork of the code finished: it reports nothing
            os._exit(0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        emit("done")
        os._exit(code)

    try:
        compiled = compile(job["code"], "<solution>", "exec")
    except BaseException as exc:  # SyntaxError, but also MemoryError/RecursionError
        emit("code", "syntax", *describe(exc))
        finish()
    import builtins

    if not hasattr(builtins, "exit"):  # normally added by `site`, which -S skips
        builtins.exit = builtins.quit = sys.exit
    namespace = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        exec(compiled, namespace)
    except BaseException as exc:
        if os.getpid() != my_pid:
            os._exit(0)
        emit("code", "error", *describe(exc))
        finish()
    if os.getpid() != my_pid:
        os._exit(0)
    emit("code", "ok")
    for index, test in enumerate(job["tests"]):
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
            ok, name, msg = 1, "-", "-"
        except BaseException as exc:
            ok, (name, msg) = 0, describe(exc)
        if os.getpid() != my_pid:
            os._exit(0)
        emit("test", index, ok, name, msg)
    finish()


def _fork_reported(emit: _Emitter, kind: str) -> int:
    """fork(); the parent reports the child's pid to the caller *before* the child goes on
    (so a record from the untrusted worker can never come first)."""
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


def _kill_all_of(uid: int) -> None:
    """Kill every process of ``uid`` with kill(-1) from a helper running as that uid."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(10_000):  # repeat until a kill(-1) finds nothing (fork races)
                os.kill(-1, _SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(helper, 0)


def _reaper_loop(worker: int, uid: int | None) -> None:
    """Launcher without a pid namespace (it is a child subreaper): wait for the worker, kill
    what it left behind, reap it all (nothing is left to the host's pid 1), exit like it."""
    import time

    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(_EXIT_SETUP)
        if got == worker:
            break
    if uid is not None:
        _kill_all_of(uid)
    try:
        os.killpg(worker, _SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.002)
        except ChildProcessError:
            break
    _exit_like(status)


def _child_main() -> None:
    import marshal

    data = sys.stdin.buffer.read()
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    job = marshal.loads(data)
    if job["result_fd"] != _RESULT_FD:
        os.dup2(job["result_fd"], _RESULT_FD)
        os.close(job["result_fd"])
    emit = _Emitter(job["token"])
    layers = ["session", "rlimits", "audit_hook"]
    try:
        libc = check = None
        try:
            libc, check = _libc()
            libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        except OSError:
            pass
        if os.getppid() != job["parent_pid"]:
            os._exit(_EXIT_SETUP)  # the caller is already gone
        root = os.geteuid() == 0 and job["uid"] is not None
        flags = 0
        if root and libc is not None and job["namespaces"]:
            wanted = 0
            for _, flag in _NS_FLAGS:
                wanted |= flag
            if libc.unshare(wanted) == 0:
                flags = wanted
            else:
                for _, flag in _NS_FLAGS:
                    if libc.unshare(flag) == 0:
                        flags |= flag
        layers += [name for name, flag in _NS_FLAGS if flags & flag]
        if flags & _CLONE_NEWPID:
            # L -> H (pid 1 of the namespace, reaps) -> W (runs the code)
            init = _fork_reported(emit, "init")
            if init:
                _wait_and_exit(init)
            libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        workdir = job["host_workdir"]
        if flags & _CLONE_NEWNS:
            try:
                _build_root(libc, check, job, with_proc=bool(flags & _CLONE_NEWPID))
                workdir = job["workdir"]
            except OSError as exc:  # keep going with the host workdir and other layers
                emit("note", f"minimal root unavailable: {exc}")
                layers.remove("chroot")
        if flags & _CLONE_NEWPID:
            worker = os.fork()
            if worker:
                _init_loop(worker)
        else:
            # L (child subreaper) -> W in its own process group
            if libc is not None:
                libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            worker = _fork_reported(emit, "worker")
            if worker:
                try:
                    os.setpgid(worker, worker)
                except OSError:
                    pass
                unique = root and job["uid"] >= _UID_BASE  # never kill(-1) as a shared uid
                _reaper_loop(worker, job["uid"] if unique else None)
            os.setpgid(0, 0)
        _set_rlimits(job)
        if root:
            if "chroot" not in layers and _prefix_hidden():
                # The interpreter's files are root-only (e.g. under /root): import what code
                # commonly needs while they are still readable.
                emit("note", "stdlib not readable by the sandbox uid: common modules pre-imported")
                for name in job["preimport"]:
                    try:
                        __import__(name)
                    except ImportError:
                        pass
            uid = _drop_privileges(job["uid"])
            layers.append(f"uid:{uid}")
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)  # (setuid clears it)
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
                layers.append("no_new_privs")
        os.chdir(workdir)
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        os.umask(0o077)
        libc = check = None
        if job["audit_hook"]:
            _install_audit_hook(workdir)
        else:
            layers.remove("audit_hook")
    except BaseException as exc:
        emit("setup_error", f"{type(exc).__name__}: {exc}")
        os._exit(_EXIT_SETUP)
    emit("ready", ",".join(layers))
    _run_user_code(job, emit)


if __name__ == "__main__":
    _child_main()
    os._exit(_EXIT_SETUP)

# ---------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------

import dataclasses  # noqa: E402
import logging  # noqa: E402
import marshal  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

log = logging.getLogger(__name__)

STATUSES = ("ok", "syntax_error", "runtime_error", "timeout", "memory", "output_limit", "crash",
            "sandbox_error")
_TAIL_BYTES = 4096
_RESULT_LIMIT = 4 * 1024 * 1024
# Imported before the uid drop when the interpreter's files are hidden from the dropped uid and
# there is no minimal root to expose them (root without namespaces, prefix under /root).
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
    output: str = ""  # the last few KB of the code's stdout+stderr
    per_test: tuple[bool, ...] = ()
    isolation: tuple[str, ...] = ()  # layers that were active (see module docstring)
    elapsed_s: float = 0.0
    pid: int | None = None  # launcher pid == process group id
    uid: int | None = None  # the unprivileged uid the code ran as (None: not dropped)

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
    """Hands out a distinct unprivileged uid to each concurrent call of this process."""

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

    def acquire(self) -> int:
        base = _UID_BASE + (os.getpid() % 1_000_000) * 256
        with self._lock:
            if self._mapped is None:
                self._mapped = self._is_mapped(base) and self._is_mapped(base + 255)
            if not self._mapped:
                return _NOBODY
            for slot in range(256):
                if base + slot not in self._used:
                    self._used.add(base + slot)
                    return base + slot
            return base + secrets.randbelow(256)  # >256 concurrent calls: share a uid

    def release(self, uid: int) -> None:
        with self._lock:
            self._used.discard(uid)


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


def _expose_paths(site_packages: bool) -> list[str]:
    paths = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    if site_packages:
        paths |= {sys.prefix, sys.exec_prefix}
        paths |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    return sorted(p for p in paths if p)


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
    """Run ``code`` and then each assert-statement in ``tests`` in an isolated child.

    ``timeout_s`` is wall clock for the whole call, ``cpu_s`` CPU seconds per process,
    ``memory_mb`` the address-space limit per process, ``max_processes`` the process (and
    thread) limit of the call's uid, ``disk_mb`` the size of the writable cwd and the largest
    file, ``max_output_bytes`` the stdout+stderr beyond which the run is killed.
    ``namespaces=False`` / ``audit_hook=False`` switch a layer off; they exist so that tests can
    show each remaining layer holding on its own.
    Safe to call from several threads at once.  Never raises for anything the code does.
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


class _Collector:
    """Parses the worker's result lines (only those carrying the token)."""

    def __init__(self, token: str, total: int) -> None:
        self.token = token.encode()
        self.results: list[bool | None] = [None] * total
        self.buffer = b""
        self.size = 0
        self.layers: tuple[str, ...] = ()
        self.ready = self.done = False
        self.code_state: str | None = None  # ok / syntax / error
        self.code_error = ""
        self.setup_error = ""
        self.notes: list[str] = []
        self.memory_error = False
        self.child_pid: int | None = None  # the namespace init ("init") or the worker ("worker")
        self.child_kind = ""
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
        if kind == "pid" and not self.ready and self.child_pid is None:
            pid, _, self.child_kind = rest.partition(" ")
            self.child_pid = int(pid)
        elif kind == "ready" and not self.ready:
            self.ready = True
            self.layers = tuple(rest.split(","))
            for layer in self.layers:
                if layer.startswith("uid:"):
                    self.uid = int(layer[4:])
        elif kind == "setup_error" and not self.ready:
            self.setup_error = rest
        elif kind == "note" and not self.ready:
            self.notes.append(rest)
        elif kind == "code" and self.ready and self.code_state is None:
            state, _, err = rest.partition(" ")
            self.code_state = state
            self.code_error = err
            self.memory_error |= err.startswith("MemoryError")
        elif kind == "test" and self.code_state == "ok":
            fields = rest.split(" ", 3)
            try:
                index, ok = int(fields[0]), fields[1] == "1"
            except (ValueError, IndexError):
                return
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
    uid = _uids.acquire() if is_root else None
    base = tempfile.mkdtemp(prefix="r1-sandbox-")
    proc: subprocess.Popen | None = None
    pidfd: int | None = None
    collector = _Collector(secrets.token_hex(16), len(tests))
    try:
        os.chmod(base, 0o711)
        host_workdir = os.path.join(base, "work")
        newroot = os.path.join(base, "root")
        os.mkdir(host_workdir, 0o700)
        os.mkdir(newroot, 0o700)
        if uid is not None:
            os.chown(host_workdir, uid, uid)
        job = {
            "token": collector.token.decode(), "code": code, "tests": tests, "uid": uid,
            "parent_pid": os.getpid(), "namespaces": namespaces, "audit_hook": audit_hook,
            "newroot": newroot,
            "workdir": "/tmp/sandbox", "host_workdir": host_workdir,
            "expose": _expose_paths(site_packages), "preimport": list(_PREIMPORT),
            "memory_mb": int(memory_mb), "cpu_s": max(1, int(cpu_s)), "disk_mb": int(disk_mb),
            "max_processes": int(max_processes), "result_fd": -1,
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8", "HOME": host_workdir,
               "TMPDIR": host_workdir}
        flags = ["-s", "-P", "-B"] + ([] if site_packages else ["-S"])
        read_fd, write_fd = os.pipe()
        job["result_fd"] = write_fd
        try:
            proc = subprocess.Popen(
                [sys.executable, *flags, os.path.abspath(__file__)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(write_fd,), start_new_session=True, env=env, cwd=base,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(marshal.dumps(job))
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
        worker_group = collector.child_pid if collector.child_kind == "worker" else None
        returncode = _stop(proc, pidfd, worker_group,
                           killed=timed_out or over_output or over_results or not collector.done)
        if uid is not None and uid >= _UID_BASE and "pidns" not in collector.layers:
            _kill_uid(uid)  # without a pid namespace, sweep what the call's unique uid left
        return _result(collector, tests, start, proc, returncode, uid, timed_out=timed_out,
                       over_output=over_output, over_results=over_results, tail=bytes(tail),
                       out_total=out_total, timeout_s=timeout_s, max_output_bytes=max_output_bytes)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        if proc is not None and proc.returncode is None:  # only after an exception above
            _stop(proc, None, None, killed=True)
        shutil.rmtree(base, ignore_errors=True)
        if os.path.exists(base):
            log.warning("sandbox: could not remove %s", base)
        if uid is not None:
            _uids.release(uid)


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


def _stop(proc: subprocess.Popen, pidfd: int | None, worker_group: int | None, *, killed: bool) -> int:
    """End everything the call started and reap the launcher.

    With a pid namespace, killing its init (via a pidfd, so a recycled pid can't be hit)
    makes the kernel kill the whole namespace while the launcher reaps the init.  Without
    one, the worker's own process group is killed and the launcher, a child subreaper,
    reaps and sweeps what is left.  Either way nothing is orphaned to the host's pid 1.
    The launcher's process group is SIGKILLed last in any case."""
    if killed:
        if pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
        if worker_group is not None:
            try:
                os.killpg(worker_group, signal.SIGKILL)
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


def _result(c: _Collector, tests: list[str], start: float, proc: subprocess.Popen, returncode: int,
            uid: int | None, *, timed_out: bool, over_output: bool, over_results: bool, tail: bytes,
            out_total: int, timeout_s: float, max_output_bytes: int) -> SandboxResult:
    per_test = tuple(bool(r) for r in c.results)
    passed = sum(per_test) if c.code_state == "ok" else 0
    total = len(tests)
    output = tail.decode("utf-8", "replace")
    signum = returncode - 128 if returncode > 128 else (-returncode if returncode < 0 else 0)
    if not c.ready:
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
    elif c.done:
        status = "memory" if c.memory_error else "ok"
        detail = "MemoryError in a test" if c.memory_error else ""
    elif signum == signal.SIGXCPU:
        status, detail = "timeout", "CPU time limit"
    elif c.memory_error:
        status, detail = "memory", "MemoryError, then the process died"
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
