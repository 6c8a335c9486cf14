"""The sandbox's child program: launcher L, worker W, candidate C and judge O.

The design - why C and O are separate processes, the process layout, the isolation layers, the
verdict protocol and the statuses - is explained once, in the docstring of :mod:`eval.sandbox`
(the host side, which starts this program and reads its verdicts).  This file is what runs inside
the isolation.  The host compiles it once per caller process and sends the code to
``python -s -P -B -S -c <loader>`` on stdin, ahead of the job; so it uses the standard library
only, imports nothing from the project, and imports only ``os`` and ``sys`` at the top (``marshal``,
``ctypes``, ``_ast``, ``fcntl``, ``gc`` and ``resource`` where they are needed), to start fast.

Step by step (:func:`_child_main`):

1. L reads the job (marshal) from stdin, moves the result socket and the tests' descriptor to
   fds 3 and 4, asks for SIGKILL when the caller dies (and exits if it already has), becomes
   non-dumpable, overwrites its argv area and clears the host paths from ``sys``.
2. As root, L unshares the pid, mount, network, IPC and UTS namespaces (as many as the kernel
   allows).  With a pid namespace it forks W, pid 1 of the namespace, and waits for it; without
   one it becomes a child subreaper, forks W into its own process group, and when W is done kills
   what the call's uids left and reaps everything.
3. W builds the minimal read-only root and chroots into it (mount namespace), makes itself the
   OOM killer's last choice, pre-imports common modules if the sandbox uids cannot read the
   stdlib, sets ``no_new_privs``, installs the seccomp filter if the call has no memory cgroup,
   and reports the active layers (``ready``).
4. W compiles the code (a syntax error ends the call), finds its top-level names statically and
   imports what it imports; it never runs the code.
5. Per test, W forks C (uid B: runs the code, reports whether its top level raised, then serves
   the judge's requests as plain data) and O (uid A: runs the test with the candidate's names as
   stand-ins and writes ``test i pass|fail`` to fd 3), waits for O, then kills and reaps whatever
   is left before the next test.  Last it reports ``done``.
"""

from __future__ import annotations

import os
import sys

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
_DATA_LIMIT = 16 << 20  # largest message between C and O
_DEPTH_LIMIT = 100  # deepest plain-data nesting
_TITLE = b"sandbox"  # what /proc/<pid>/cmdline shows for every process of the call
# Modules W does not import on the candidate's behalf (side effects at import time).
_NO_PREIMPORT = frozenset({"antigravity", "this", "__main__", "__hello__", "__phello__", "webbrowser",
                           "turtle", "turtledemo", "tkinter", "idlelib", "pydoc", "__future__"})
# Imported by W when the interpreter's files are hidden from the sandbox uids and there is no minimal
# root to expose them (root without namespaces, prefix under /root).
_PREIMPORT = ("math", "cmath", "re", "collections", "collections.abc", "itertools", "functools",
              "heapq", "bisect", "string", "operator", "fractions", "decimal", "statistics", "random",
              "copy", "typing", "array", "json", "datetime", "time", "calendar", "hashlib", "struct",
              "textwrap", "unicodedata", "tempfile", "io", "dataclasses", "enum", "abc", "numbers",
              "contextlib", "queue", "threading", "pprint", "ast", "base64", "binascii", "zlib",
              "difflib", "fnmatch", "glob", "shutil", "pathlib", "csv", "locale", "gettext")

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


def _flush_stdio() -> None:
    """Flush what the code (or a test) printed: nothing is lost when W kills the process."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


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
    # A name the code defines is the code under test even where it also imports that name (the test's own
    # environment, declared imports and the standard library by name, comes first: _test_environment).
    return defined, imports, modules, star


def _test_environment(job: dict) -> dict:
    """What the tests' names resolve to besides their own statements and builtins, built in W (which
    runs no candidate code), so that no binding of the candidate's can stand in for it: the
    benchmark's declared imports (``test_imports``: import statements only, e.g. MBPP's), then every
    standard-library module a test names, by its own name (``math`` in ``math.isclose(...)`` is the
    real module even where the test forgot to import it and the candidate defines a ``math``)."""
    import _ast

    env: dict = {}
    for source in job.get("test_imports") or ():  # import statements only (checked by the caller)
        tree = compile(source, "<test_imports>", "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
        if all(type(node) in (_ast.Import, _ast.ImportFrom) for node in tree.body):
            try:
                exec(compile(tree, "<test_imports>", "exec", dont_inherit=True), env)
            except BaseException:
                pass  # a name it should have bound is then a test error
    env.pop("__builtins__", None)
    tests = marshal_tests()
    wanted: set[str] = set()
    for source in tests:
        try:
            wanted |= _global_names(compile(source, "<test>", "exec", dont_inherit=True))
        except BaseException:
            pass  # its judge reports the syntax error
    for name in sorted(wanted & sys.stdlib_module_names - env.keys() - _NO_PREIMPORT):
        try:
            __import__(name)
            env[name] = sys.modules[name]
        except BaseException:
            pass
    return env


def marshal_tests() -> list[str]:
    import marshal

    return marshal.loads(os.pread(_TESTS_FD, os.fstat(_TESTS_FD).st_size, 0))


def _import_for_judge(imports: dict, modules: set[str], star: list[str]) -> None:
    """Import, in W and before any candidate code runs, what the code imports at top level, so that every
    C and O inherits it already loaded (the judge never binds it to a test's names: :func:`_test_environment`)."""
    def load(module: str) -> None:
        if module.partition(".")[0] not in _NO_PREIMPORT:
            try:
                __import__(module)
            except BaseException:
                pass

    for module in sorted(modules | set(star)):
        load(module)
    for module, attr in imports.values():  # ``from a import b`` where b is a submodule
        if attr is not None and not hasattr(sys.modules.get(module), attr):
            load(f"{module}.{attr}")


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
        _flush_stdio()
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

    defined, test_globals = bindings
    channel = _Channel(requests, replies)

    def finish(*record: object) -> None:
        _flush_stdio()
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
    tests = marshal_tests()
    namespace = _module_namespace("__test__")
    try:
        compiled = compile(tests[index], f"<test {index}>", "exec", dont_inherit=True)
        wanted = _global_names(compiled)
        # the test's environment first (its declared imports, the standard library's modules by name):
        # nothing the candidate binds can stand in for it; then the code under test, from C
        namespace.update({n: v for n, v in test_globals.items() if n in wanted})
        remote = sorted(n for n in wanted if n in defined and n not in test_globals and not hasattr(builtins, n))
        if remote:
            values = channel.ask("get", remote)
            if type(values) is not dict:
                channel._fail("malformed names")
            namespace.update({n: values[n] for n in remote if n in values})  # only what was asked
        exec(compiled, namespace)
        if channel.broken is not None:  # swallowed by a bare except in the test
            raise channel.broken
        record = ("test", index, 1, "-", "-")
    except NameError as exc:
        name = getattr(exc, "name", None)
        undeclared = name in wanted and name not in defined and name not in test_globals and not hasattr(builtins, name)
        record = ("test", index, 0, "TestError" if undeclared else "NameError",
                  f"the test needs {name!r}, which neither it, its declared imports nor the code under test "
                  "defines" if undeclared else _message(exc))
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


def _kill_call_uids(job: dict) -> None:
    """Kill every process of the call's two uids (C's and O's), if they are the call's own: never
    kill(-1) as a uid shared with anything else."""
    if job["unique_uids"]:
        for uid in {job["uid"], job["judge_uid"]}:
            _kill_all_of(uid)


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
    _kill_call_uids(job)  # what left the groups (setsid): by uid
    _reap_available()


def _empty(folder: str) -> None:
    """Remove everything in ``folder`` (W, between tests, once the last test's processes are gone):
    its folders are opened up first, top down, where the candidate took the permissions away."""
    for root, dirs, _ in os.walk(folder):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
            except OSError:
                pass
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            path = os.path.join(root, name)
            try:
                os.unlink(path) if os.path.islink(path) else os.rmdir(path)
            except OSError:
                pass


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
    _import_for_judge(imports, modules, star)  # loaded once here, for every C
    test_globals = _test_environment(job)
    import gc
    import resource  # noqa: F401  (for _set_rlimits in every fork)

    gc.freeze()  # the forks' collections then skip W's objects instead of copying their pages
    for index in range(job["n_tests"]) or [None]:
        _empty(job["cwd"])  # each test starts in an empty working folder: nothing an earlier one wrote
        _run_pair(job, emit, index, (frozenset(defined), test_globals), pidns)
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
    _kill_call_uids(job)
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
            for name in _PREIMPORT:
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
