"""Per-call overhead of eval.sandbox.run_tests on a trivial correct solution.

Times ``run_tests`` sequentially with 1, 3 and 10 tests (median and p90 wall ms over ``--calls``
calls each, after two warm-up calls), then the throughput of ``--threads`` threads calling it at
once with 3 tests (calls/s).  ``--sandbox FILE`` benchmarks another copy of the module, e.g. the
previous version: ``mkdir /tmp/old && git show HEAD:eval/sandbox.py > /tmp/old/sandbox.py && git show
HEAD:eval/sandbox_child.py > /tmp/old/sandbox_child.py`` then ``python scripts/bench_sandbox.py
--sandbox /tmp/old/sandbox.py``.  The module reads its child program from ``sandbox_child.py``
beside it (before that file existed, the module was its own child program: copy it alone).

Usage: ``python scripts/bench_sandbox.py [--calls 30] [--threads 4] [--seconds 10] [--sandbox FILE]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CODE = "def square(x):\n    return x * x\n"


def load(path: str | None):
    if path is None:
        from eval import sandbox

        return sandbox
    spec = importlib.util.spec_from_file_location("bench_sandbox_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up
    spec.loader.exec_module(module)
    return module


def tests(n: int) -> list[str]:
    return [f"assert square({i}) == {i * i}" for i in range(n)]


def sequential(sandbox, n: int, calls: int) -> tuple[float, float]:
    for _ in range(2):
        sandbox.run_tests(CODE, tests(n))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = sandbox.run_tests(CODE, tests(n))
        times.append((time.perf_counter() - start) * 1000)
        if result.fraction != 1.0:
            raise SystemExit(f"unexpected result: {result}")
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]


def threaded(sandbox, threads: int, seconds: float) -> float:
    done = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work() -> None:
        while time.monotonic() < stop:
            if sandbox.run_tests(CODE, tests(3)).fraction != 1.0:
                raise SystemExit("unexpected result")
            with lock:
                done[0] += 1

    start = time.monotonic()
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return done[0] / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sandbox", help="a copy of eval/sandbox.py to benchmark instead")
    args = parser.parse_args()
    sandbox = load(args.sandbox)
    layers = sandbox.run_tests(CODE, tests(1)).isolation
    print(f"sandbox: {sandbox.__file__}")
    print(f"layers:  {','.join(layers)}")
    for n in (1, 3, 10):
        median, p90 = sequential(sandbox, n, args.calls)
        print(f"{n:2d} test(s), sequential: median {median:6.1f} ms   p90 {p90:6.1f} ms")
    rate = threaded(sandbox, args.threads, args.seconds)
    print(f"{args.threads} threads, 3 tests:     {rate:6.1f} calls/s")


if __name__ == "__main__":
    main()
