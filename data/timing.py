"""Where a stage's minutes go: wall-clock seconds by kind of work, measured in the process.

    with timed("sampling"):
        ...

Each second is counted once, for the innermost kind of work running (an evaluation's sampling counts as
``sampling``, the rest of the evaluation as ``evaluation``). The stage runner resets the totals when a
stage starts and writes them into its manifest (``metrics.time_by_kind``) when it ends, together with
``startup`` (the process's start to the stage body: interpreter, imports, recipe); the report shows them.
Kinds: ``startup``, ``loading`` (models and tokenizers), ``sampling`` (every generation outside GRPO),
``grading``, ``evaluation`` (what an evaluation does besides sampling and grading), ``training`` (GRPO's
rollouts included: TRL generates inside its training step), ``pretraining``, ``saving``, ``waiting`` (for
side work that ran beside the stage: ``stages.pipeline.threads.SideJob``), and ``other`` (the rest of the stage body).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter
from contextlib import contextmanager

__all__ = ["KINDS", "process_age", "reset", "snapshot", "timed", "timed_as"]

KINDS = ("startup", "loading", "sampling", "grading", "evaluation", "training", "pretraining", "saving", "waiting",
         "other")

_totals: Counter = Counter()
_stack: list[list] = []  # [kind, start, seconds spent in inner kinds]
_lock = threading.Lock()
_main = threading.main_thread()


@contextmanager
def timed(kind: str):
    """Count the wall time of the block as ``kind``, less what inner ``timed`` blocks count. Only the
    main thread counts (grading from helper threads would count twice)."""
    if threading.current_thread() is not _main:
        yield
        return
    _stack.append([kind, time.perf_counter(), 0.0])
    try:
        yield
    finally:
        name, start, inner = _stack.pop()
        spent = time.perf_counter() - start
        with _lock:
            _totals[name] += spent - inner
        if _stack:
            _stack[-1][2] += spent


def timed_as(kind: str):
    """Decorator: every call of the function is ``timed(kind)``."""
    def wrap(func):
        @functools.wraps(func)
        def inner(*args, **kwargs):
            with timed(kind):
                return func(*args, **kwargs)

        return inner

    return wrap


def reset() -> None:
    with _lock:
        _totals.clear()


def snapshot() -> dict[str, float]:
    """Seconds by kind so far (rounded to 0.1 s), kinds with none left out."""
    with _lock:
        return {k: round(v, 1) for k, v in _totals.items() if v >= 0.05}


def process_age() -> float:
    """Seconds since this process started (from /proc; 0.0 where there is none)."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
