"""How many threads torch uses on the CPU: the cores that no other process is using when a stage starts.

torch's OpenMP threads meet at a barrier after every operator, and the tiny model's operators take
microseconds. With as many threads as cores and one other busy process on the machine, one of the
threads is often descheduled and the other waits for it at every barrier, so the run slows far beyond
the share of the machine the neighbour takes (measured on 2 cores with scripts/bench_neighbour.py:
docs/speed.md). One thread fewer than the cores in use loses only that share. So, before a stage
starts, :func:`choose_threads` measures for a moment how much of the machine other processes use
(``/proc/stat``'s time in processes, less this process's own; the least of three short windows, so that
a passing command is not taken for a neighbour) and leaves them those cores.

The count is fixed for the whole stage, not adjusted as neighbours come and go: torch splits a reduction
between its threads, so another count gives other (equally valid) floating-point sums, and a stage is
reproducible bit for bit only at one count. The manifest records the count (``metrics.threads``). A
neighbour that starts in the middle of a stage still slows that stage beyond its share.

Who decides, first match wins: ``R1_THREADS=N`` (fixed; e.g. for bit-for-bit comparisons between runs
on a busy machine), then ``OMP_NUM_THREADS`` when it is set (a launcher's choice, e.g. torchrun's one
thread per process), then the measurement, capped by the recipe's ``threads`` for the stage; on a
machine with a CUDA device, torch's own default.
"""

from __future__ import annotations

import os
import time

import torch

__all__ = ["busy_elsewhere", "choose_threads"]


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


def choose_threads(*, measure_seconds: float = 0.6, at_most: int | None = None) -> dict:
    """Set torch's intra-op threads for this stage; returns what was decided and why (for the manifest).
    ``at_most``: the recipe's cap for this stage (``threads``), applied to the measured count: a model so
    small that its operators take microseconds can run faster on one thread than on two."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fixed = os.environ.get("R1_THREADS", "").strip()
    if fixed:
        if not fixed.isdigit() or int(fixed) < 1:
            raise ValueError(f"R1_THREADS={fixed!r}: give a whole number of threads, at least 1")
        torch.set_num_threads(int(fixed))
        return {"threads": int(fixed), "cores": cores, "chosen_by": "R1_THREADS"}
    if os.environ.get("OMP_NUM_THREADS") or torch.cuda.is_available():
        return {"threads": torch.get_num_threads(), "cores": cores,
                "chosen_by": "OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "torch (CUDA machine)"}
    elsewhere = busy_elsewhere(measure_seconds)
    if elsewhere is None:
        return {"threads": torch.get_num_threads(), "cores": cores, "chosen_by": "torch (no /proc/stat)"}
    threads = max(1, cores - int(elsewhere + 0.5))  # a neighbour using half a core or more gets a core
    capped = at_most is not None and at_most < threads
    threads = at_most if capped else threads
    torch.set_num_threads(threads)
    return {"threads": threads, "cores": cores, "busy_elsewhere": round(elsewhere, 2),
            "chosen_by": "measured, capped by the recipe's threads" if capped else "measured"}
