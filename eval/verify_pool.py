"""math-verify in a pool of worker processes, each job bounded in wall-clock time.

math-verify bounds its work with ``signal.alarm``, which only works on the main thread and does not
interrupt C code (``10^{10^{10^{10}}}`` runs for more than 30 s). So every math-verify call runs here,
in persistent worker processes (default ``min(4, os.cpu_count())``), started with ``subprocess``
(fork+exec: a fresh interpreter, without re-importing the caller's ``__main__``) and talking over a
socket pair. Workers import math_verify once, at start.

One dispatcher thread serves every caller. :func:`run_jobs` hands it a batch and waits; the
dispatcher gives each free worker the next job of the batches in turn (round robin), so a one-job
call from another thread waits for at most one job in progress, never behind a whole batch.

Bounds and failures:

- A job not answered within ``timeout_s`` of being handed to a worker comes back ``(False,
  "timeout")``; its worker is killed and replaced. Inside the worker math-verify's own alarms are
  also set (``timeout_s // 2`` whole seconds, at least 1, per parse or compare), so most slow cases
  end without a kill.
- A worker that dies while holding a job: that job is ``(False, "error")``.
- Restarting workers delays queued jobs, it never fails them. Only when workers keep failing to start
  (more than ``2 × size`` starts in a row, e.g. math-verify cannot be imported; each start has
  :data:`STARTUP_TIMEOUT_S`) are the queued jobs answered ``(False, "error")``.
- A caller interrupted while waiting (Ctrl-C) cancels its batch's queued jobs; answers to its jobs
  already running are dropped when they arrive, so they can never be read as answers to later jobs.

Workers are killed at interpreter exit, exit on their own when the parent dies (EOF on the socket),
and a forked child of the parent forgets the pool and starts its own on first use.
"""

from __future__ import annotations

import atexit
import collections
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, Pipe, wait

__all__ = ["DEFAULT_WORKERS", "STARTUP_TIMEOUT_S", "pool_size", "run_jobs", "shutdown", "worker_pids"]

DEFAULT_WORKERS = min(4, os.cpu_count() or 1)
STARTUP_TIMEOUT_S = 60.0  # a worker that has not imported math_verify by then is broken

# --------------------------------------------------------------------------------------------
# Worker side (runs in the worker process, main thread)
# --------------------------------------------------------------------------------------------

_READY = "ready"


def _worker_main(fd: int) -> None:  # pragma: no cover - runs in the worker processes
    import logging

    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)

    def parse_first(forms: tuple[str, ...], t: int) -> list:
        first = None
        for form in forms:
            parsed = parse(form, parsing_timeout=t, raise_on_error=True)
            if any(not isinstance(x, str) for x in parsed):
                return parsed
            first = parsed if first is None else first
        return first or []

    def equivalent(gold: list, pred: list, t: int) -> bool:
        # allow_set_relation_comp: "2 \\le x < 5" may answer "[2, 5)".
        options = {"timeout_seconds": t, "allow_set_relation_comp": True}
        try:
            return verify(gold, pred, raise_on_error=True, **options)
        except TimeoutException:
            raise
        except Exception:  # one comparison failed: let math-verify skip it and try the others
            return verify(gold, pred, **options)

    def op_grade(gold_forms, pred_forms, t):
        gold = parse_first(gold_forms, t)
        pred = parse_first(pred_forms, t)
        if not pred:
            return False, "no_answer"
        if equivalent(gold, pred, t):
            return True, "correct"
        gold_ok = any(not isinstance(x, str) for x in gold)
        return False, "wrong" if gold_ok else "gold_unparseable"

    def op_gold_ok(gold_forms, t):
        ok = any(not isinstance(x, str) for x in parse_first(gold_forms, t))
        return ok, "correct" if ok else "gold_unparseable"

    def op_same(a_forms, b_forms, t):
        a, b = parse_first(a_forms, t), parse_first(b_forms, t)
        same = bool(a and b) and (equivalent(a, b, t) or equivalent(b, a, t))
        return same, "correct" if same else "wrong"

    def op_sleep(seconds, t):  # for tests of the pool itself
        time.sleep(seconds)
        return True, "correct"

    ops = {"grade": op_grade, "gold_ok": op_gold_ok, "same": op_same, "sleep": op_sleep}
    conn = Connection(fd)
    op_same(("$1$",), ("$1$",), 1)  # warm up regex and sympy caches
    conn.send(_READY)
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            result = ops[op](*args)
        except TimeoutException:
            result = (False, "timeout")
        except Exception:
            result = (False, "error")
        try:
            conn.send(result)
        except (OSError, KeyboardInterrupt):
            return


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------

_WORKER_BOOTSTRAP = (
    "import runpy, sys; "
    "runpy.run_path(sys.argv[1], run_name='_r1_verify_worker')['_worker_main'](int(sys.argv[2]))"
)


class _Worker:
    def __init__(self) -> None:
        self.conn, child = Pipe(duplex=True)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_BOOTSTRAP, os.path.abspath(__file__), str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C goes to the parent only
            )
        finally:
            child.close()
        self.ready = False
        self.started = time.monotonic()
        self.job: tuple[_Batch, int] | None = None  # (batch, index) while busy
        self.deadline = 0.0

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:
            pass
        self.conn.close()


class _Batch:
    """One caller's jobs, their answers, and the event the caller waits on."""

    def __init__(self, jobs: list[tuple], timeout_s: float) -> None:
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.results: list[tuple[bool, str] | None] = [None] * len(jobs)
        self.todo = collections.deque(range(len(jobs)))
        self.left = len(jobs)
        self.done = threading.Event()
        self.cancelled = False

    def answer(self, index: int, result: tuple[bool, str]) -> None:
        if self.results[index] is None:
            self.results[index] = result
            self.left -= 1
            if self.left == 0:
                self.done.set()


class _Pool:
    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self.size = size
        self.lock = threading.Lock()
        self.batches: collections.deque[_Batch] = collections.deque()  # with queued jobs, in turn
        self.workers = [_Worker() for _ in range(size)]
        self.failed_starts = 0
        self.closed = False
        self.wake_r, self.wake_w = Pipe(duplex=False)
        self.thread = threading.Thread(target=self._serve, name="r1-verify-dispatcher", daemon=True)
        self.thread.start()

    # -- called from any thread ---------------------------------------------------------------

    def submit(self, batch: _Batch) -> None:
        with self.lock:
            if self.closed:
                raise RuntimeError("the math-verify pool is closed")
            self.batches.append(batch)
        self._wake()

    def resize(self, size: int) -> None:
        with self.lock:
            self.size = max(1, size)
        self._wake()

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self._wake()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)

    def _wake(self) -> None:
        try:
            self.wake_w.send_bytes(b"x")
        except OSError:
            pass

    # -- the dispatcher thread ----------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while self._step():
                pass
        finally:
            for worker in self.workers:
                worker.kill()
                if worker.job is not None:
                    batch, index = worker.job
                    batch.answer(index, (False, "error"))
            with self.lock:
                for batch in self.batches:
                    while batch.todo:
                        batch.answer(batch.todo.popleft(), (False, "error"))
                self.batches.clear()

    def _next_job(self) -> tuple[_Batch, int] | None:
        """The next queued job, taking the batches in turn (round robin)."""
        with self.lock:
            while self.batches:
                batch = self.batches.popleft()
                if batch.cancelled or not batch.todo:
                    continue
                index = batch.todo.popleft()
                if batch.todo:
                    self.batches.append(batch)
                return batch, index
        return None

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.workers[self.workers.index(worker)] = _Worker()

    def _step(self) -> bool:
        with self.lock:
            if self.closed:
                return False
            size = self.size
        while len(self.workers) < size:
            self.workers.append(_Worker())
        for worker in [w for w in self.workers if w.job is None][: max(0, len(self.workers) - size)]:
            self.workers.remove(worker)
            worker.kill()

        now = time.monotonic()
        for worker in list(self.workers):
            if worker.ready and worker.job is None:
                job = self._next_job()
                if job is None:
                    break
                batch, index = job
                try:
                    worker.conn.send(batch.jobs[index])
                except OSError:  # died while idle: the job never reached it
                    with self.lock:
                        batch.todo.appendleft(index)
                        if batch not in self.batches:
                            self.batches.appendleft(batch)
                    self._replace(worker)
                    continue
                worker.job, worker.deadline = job, now + batch.timeout_s

        deadlines = [w.deadline if w.job else w.started + STARTUP_TIMEOUT_S
                     for w in self.workers if w.job or not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        by_conn = {w.conn: w for w in self.workers if w.job or not w.ready}
        for conn in wait([*by_conn, self.wake_r], timeout=timeout):
            if conn is self.wake_r:
                while self.wake_r.poll():
                    self.wake_r.recv_bytes()
                continue
            worker = by_conn[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died
                if worker.job is not None:
                    batch, index = worker.job
                    batch.answer(index, (False, "error"))
                elif not worker.ready:
                    self.failed_starts += 1
                self._replace(worker)
                continue
            if not worker.ready:
                worker.ready = message == _READY
                self.failed_starts = 0
            elif worker.job is not None:
                batch, index = worker.job
                worker.job = None
                batch.answer(index, message)

        now = time.monotonic()
        for worker in list(self.workers):
            if worker.job is not None and now >= worker.deadline:
                batch, index = worker.job
                worker.job = None
                batch.answer(index, (False, "timeout"))
                self._replace(worker)
            elif not worker.ready and now >= worker.started + STARTUP_TIMEOUT_S:
                self.failed_starts += 1
                self._replace(worker)
        if self.failed_starts > 2 * max(1, size):  # workers cannot start: fail what is queued
            while (job := self._next_job()) is not None:
                job[0].answer(job[1], (False, "error"))
        return True


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int | None) -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or not _POOL.thread.is_alive():
            _POOL = _Pool(max(1, workers or DEFAULT_WORKERS))
        elif workers:
            _POOL.resize(workers)
        return _POOL


def run_jobs(jobs: list[tuple], timeout_s: float, workers: int | None = None) -> list[tuple[bool, str]]:
    """Run jobs ``(op, args)`` on the workers; each is bounded by ``timeout_s`` once a worker has it.
    ``workers`` resizes the shared pool. Returns one ``(correct, reason)`` per job, in order."""
    if not jobs:
        return []
    batch = _Batch(list(jobs), timeout_s)
    pool = _pool(workers)
    pool.submit(batch)
    try:
        while not batch.done.wait(timeout=1.0):
            if not pool.thread.is_alive():  # the dispatcher died (a bug): never hang the caller
                break
    except BaseException:
        batch.cancelled = True
        raise
    return [r if r is not None else (False, "error") for r in batch.results]


def pool_size() -> int:
    """How many workers the shared pool has now (0 when none was started)."""
    return 0 if _POOL is None else len(_POOL.workers)


def worker_pids() -> list[int]:
    """The pids of the pool's workers (for tests)."""
    return [] if _POOL is None else [w.proc.pid for w in _POOL.workers]


def shutdown() -> None:
    """Stop the dispatcher and kill the workers (they are restarted on the next call). Runs at exit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None


def _forget_pool_after_fork() -> None:
    # The child must neither use nor kill the parent's workers; it starts its own when needed.
    global _POOL, _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    if _POOL is not None:
        for worker in _POOL.workers:
            worker.conn.close()
    _POOL = None


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)
