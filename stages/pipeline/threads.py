"""The parallel layout of a stage on the CPU: how many torch threads it sums on, and how many processes
sample. Both are fixed by the recipe, never measured, so that a run computes the same numbers whatever
else the machine runs.

Another thread count gives other floating-point sums, so a stage is reproducible bit for bit only at one
count: the recipe's ``threads`` (a ``default``, and per-stage or per-part counts), recorded in every
manifest (``metrics.threads``). The tiny recipe trains on one thread and uses the other cores for
processes: the CPU sampler's (``sample_processes``) and side work (:class:`SideJob`). Who decides the
thread count, first match wins: ``R1_THREADS``, then ``OMP_NUM_THREADS``, then the recipe's ``threads``,
else torch's default. Why one thread, and the rest: docs/architecture.md, stages/pipeline/threads.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from data import timing
from eval.decode import die_with_parent

__all__ = ["SideJob", "busy_elsewhere", "core_speed", "cores", "fix_threads", "fixed_threads", "part_threads"]

log = logging.getLogger("r1")


def _busy_and_own() -> tuple[float, float]:
    """(seconds of CPU time the whole machine has spent running processes, seconds this process has).

    Processes' time only: user and nice, and steal (another guest had our core). Kernel time is left
    out: right after an install the kernel writes the new files back for seconds, which is no neighbour
    whose threads would contend with torch's."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    busy = ticks[0] + ticks[1] + ticks[7]
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user


def busy_elsewhere(seconds: float = 0.3, windows: int = 3) -> float | None:
    """How many cores other processes kept busy over the next ``seconds`` (None without /proc): the least
    of ``windows`` equal parts, so that a process that runs for a moment (a shell command, a compiler) is
    not taken for a neighbour that stays."""
    try:
        least = None
        for _ in range(windows):
            busy0, own0 = _busy_and_own()
            t0 = time.monotonic()
            time.sleep(seconds / windows)
            busy1, own1 = _busy_and_own()
            share = max(0.0, ((busy1 - busy0) - (own1 - own0)) / (time.monotonic() - t0))
            least = share if least is None else min(least, share)
    except (OSError, ValueError):
        return None
    return least


def core_speed(seconds: float = 0.06, windows: int = 3) -> float:
    """The speed of one core now, in GFLOP/s of a one-thread fp32 matmul of the tiny model's shapes
    ((2048 × 128) @ (128 × 512)); the median of ``windows`` equal parts.

    For comparing the minutes of runs: a shared or virtual machine's speed drifts, idle, by as much as
    the changes one wants to time (docs/speed.md), and a stage's wall time means little without the
    speed it ran at. The runner records it when each stage starts and ends (``metrics.core_gflops``)
    and the report shows both."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(2048, 128), torch.randn(128, 512)
        flop = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        rates = []
        for _ in range(windows):
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds / windows:
                torch.mm(a, b)
                n += 1
            rates.append(n * flop / (time.perf_counter() - t0) / 1e9)
    finally:
        torch.set_num_threads(before)
    return round(sorted(rates)[len(rates) // 2], 1)


def fixed_threads() -> tuple[int, str] | None:
    """The thread count fixed outside the recipe, and by what: ``R1_THREADS``, then ``OMP_NUM_THREADS`` (a
    launcher's); None when the recipe decides."""
    fixed = os.environ.get("R1_THREADS", "").strip()
    if fixed:
        if not fixed.isdigit() or int(fixed) < 1:
            raise ValueError(f"R1_THREADS={fixed!r}: give a whole number of threads, at least 1")
        return int(fixed), "R1_THREADS"
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    return None


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fix_threads(count: int | None, *, measure_seconds: float = 0.3) -> dict:
    """Set torch's intra-op threads for this stage to ``count`` (the recipe's; None: torch's default),
    unless fixed outside the recipe (:func:`fixed_threads`); returns what was decided and by what, and how
    busy other processes were (for the manifest)."""
    fixed = fixed_threads()
    if fixed is not None:
        threads, by = fixed
    elif torch.cuda.is_available() or count is None:
        threads, by = torch.get_num_threads(), "torch (CUDA machine)" if torch.cuda.is_available() else \
            "torch (the recipe fixes no count)"
    else:
        threads, by = count, "recipe"
    torch.set_num_threads(threads)
    out = {"threads": threads, "cores": cores(), "chosen_by": by}
    elsewhere = busy_elsewhere(measure_seconds)
    if elsewhere is not None:
        out["busy_elsewhere"] = round(elsewhere, 2)
    return out


@contextmanager
def part_threads(count: int | None):
    """Run the block on ``count`` torch threads (None: the stage's count); the stage's count is restored
    afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(count or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SideJob:
    """Another process (``python -m <module> <args>``) on ``threads`` torch threads (``R1_THREADS``),
    doing optional work while the stage leaves it cores: its output, written atomically, is only ever a
    head start for the stage that needs it, which does the work itself when the output is missing.
    stdout and stderr go to ``log_path``; the process is killed if this one dies."""

    def __init__(self, what: str, module: str, args: list[str], *, log_path: Path, threads: int):
        self.what, self.log_path, self.t0 = what, Path(log_path), time.time()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "R1_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        env.pop("OMP_NUM_THREADS", None)
        env.pop("R1_FAULT", None)  # an injected fault (data/faults.py) kills the stage's process, not its side work
        with open(self.log_path, "w", encoding="utf-8") as out:
            self.process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out,
                                            stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
        log.info("side work: %s (process %d, %d thread(s), log %s)", what, self.process.pid, threads, self.log_path)

    def finish(self) -> dict:
        """Wait for the process (the wait counts as ``waiting``); what it did, for the manifest."""
        t_wait = time.time()
        with timing.timed("waiting"):
            rc = self.process.wait()
        record = {"what": self.what, "seconds": round(time.time() - self.t0, 1),
                  "waited_seconds": round(time.time() - t_wait, 1), "exit_code": rc}
        if rc:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
            log.warning("side work failed (%s, exit code %d; %s); the stage that needs it will do it itself:\n%s",
                        self.what, rc, self.log_path, "\n".join(tail))
        else:
            log.info("side work done: %s in %.0f s (waited %.0f s for it)", self.what, record["seconds"],
                     record["waited_seconds"])
        return record

    def stop(self) -> None:
        """The stage failed: the side work is abandoned (its output is written atomically or not at all)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
