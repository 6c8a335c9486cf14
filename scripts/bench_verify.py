"""Grading throughput of eval.verify against math-verify called directly, plus worst-case latency.

Builds 2,000 MATH-500-style (response, gold) pairs from the math500 golds: for every gold G, two
correct restatements (``<think>…</think> The final answer is $\\boxed{G}$.`` and
``<answer>x = G</answer>``-style variants) and two wrong ones (another problem's gold, and G
perturbed: n → n+1, else ``G + 1``). Then, in one run:

* ``grade_batch`` over all pairs (worker pool, default size), and ``is_correct`` one pair at a time;
* math-verify in-process on the same extracted answers: ``verify(parse("$G$"), parse("$answer$"))`` on the
  main thread with its default (signal based) timeouts — what a plain reward function would do;

both warmed up before any timing, and prints answers/s, the ratio, and agreement with the intended
labels; then the same for the pairs the in-process rules decide and for those that need math-verify,
apart (the first are where the speed comes from; the second pay for the worker round trip). Finally it times single
``grade`` calls on adversarial inputs (exponent towers, 5,000-digit numbers, 300-deep parentheses,
unbalanced braces, runs of 100k spaces, digits or boxes) as the response, against a number gold and
a symbolic one, and as the gold, and reports the worst wall time.

Usage: ``python scripts/bench_verify.py [--data-dir DIR] [--pairs 2000] [--timeout 4]``
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.benchmarks import load_benchmark  # noqa: E402
from eval import verify  # noqa: E402

ADVERSARIAL = {
    "tower 10^10^10^10": "10^{10^{10^{10}}}",
    "tower 2^2^2^2^2^2": "2^{2^{2^{2^{2^{2}}}}}",
    "tower 9^9^9^9": "9^{9^{9^{9}}}",
    "(10^10)!": "(10^{10})!",
    "5000-digit integer": "9" * 5000,
    "5000-digit fraction": "\\frac{" + "7" * 5000 + "}{3}",
    "300-deep parentheses": "(" * 300 + "1" + ")" * 300,
    "300-deep braces": "{" * 300 + "1" + "}" * 300,
    "unbalanced braces": "\\frac{1}{2" + "{" * 50,
    "unbalanced box": "\\boxed{\\frac{1}{2" + "}" * 100,
    # degenerate samples: long runs that once met quadratic patterns before any time bound
    "1 + 100k spaces + x2": "1" + " " * 100_000 + "x2",
    "100k newlines": "1" + "\n" * 100_000 + "2",
    "100k digits": "9" * 100_000,
    "50k spaced digits": "1 " * 50_000,
    "20k nested boxes": "\\boxed{" * 20_000 + "1" + "}" * 20_000,
    "50k unclosed boxes": "\\boxed{" * 50_000,
    "20k \\text{a}": "\\text{a}" * 20_000,
    "30k 'or'": "1 or " * 30_000,
}


def default_data_dir() -> Path:
    env = os.environ.get("R1_BENCHMARKS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


def build_pairs(golds: list[str], n_pairs: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    rng = random.Random(seed)
    pairs = []
    for i, gold in enumerate(golds):
        restated = gold if "=" in gold else f"x = {gold}"
        pairs.append(
            (f"<think>Let me work through it.</think> The final answer is $\\boxed{{{gold}}}$.", gold, True)
        )
        pairs.append((f"<think>Checking again.</think><answer>{restated}</answer>", gold, True))
        other = golds[(i + 1 + rng.randrange(len(golds) - 1)) % len(golds)]
        if other != gold:
            pairs.append((f"<answer>{other}</answer>", gold, False))
        perturbed = str(int(gold) + 1) if re.fullmatch(r"-?\d+", gold) else f"{gold} + 1"
        pairs.append((f"So the answer is \\boxed{{{perturbed}}}.", gold, False))
    rng.shuffle(pairs)
    while len(pairs) < n_pairs:
        pairs += pairs[: n_pairs - len(pairs)]
    return pairs[:n_pairs]


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:8.0f} answers/s ({seconds:.2f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=verify.DEFAULT_TIMEOUT_S)
    args = parser.parse_args()

    golds = [row["answer"] for row in load_benchmark("math500", data_dir=args.data_dir)]
    pairs = build_pairs(golds, args.pairs)
    responses, pair_golds, labels = (list(x) for x in zip(*pairs, strict=True))
    n = len(pairs)
    print(
        f"{n} pairs from {len(golds)} math500 golds ({sum(labels)} correct, {n - sum(labels)} wrong); "
        f"workers={verify.DEFAULT_WORKERS}, cpus={os.cpu_count()}"
    )

    # Warm both sides outside the timings: the worker pool (every worker started and math-verify
    # imported in each), and math-verify in this process.
    from math_verify import parse
    from math_verify import verify as mv_verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    verify.grade_batch(["\\boxed{\\sqrt{8}}"] * verify.DEFAULT_WORKERS * 2, ["2\\sqrt{2}"] * verify.DEFAULT_WORKERS * 2)
    mv_verify(parse("$2\\sqrt{2}$"), parse("$\\sqrt{8}$"))

    start = time.perf_counter()
    batch = verify.grade_batch(responses, pair_golds, timeout_s=args.timeout)
    t_batch = time.perf_counter() - start

    start = time.perf_counter()
    single = [verify.is_correct(r, g) for r, g in zip(responses, pair_golds, strict=True)]
    t_single = time.perf_counter() - start

    # Like with like: math-verify on the same extracted answers the grader compares (not the whole response)
    answers = [verify.extract_answer(r) or "" for r in responses]
    start = time.perf_counter()
    direct = [mv_verify(parse(f"${g}$"), parse(f"${a}$")) for a, g in zip(answers, pair_golds, strict=True)]
    t_direct = time.perf_counter() - start

    def agreement(results: list[bool]) -> str:
        return (
            f"{100 * sum(a == b for a, b in zip(results, labels, strict=True)) / n:5.1f}% agree with labels"
        )

    print(f"grade_batch          {rate(n, t_batch)}  {agreement([g.correct for g in batch])}")
    print(f"is_correct (1 by 1)  {rate(n, t_single)}  {agreement(single)}")
    print(f"math-verify direct   {rate(n, t_direct)}  {agreement(direct)}  (on the extracted answers)")

    # The two paths apart: pairs the policy decides in this process, and pairs that need math-verify.
    in_process = [i for i, (r, g) in enumerate(zip(responses, pair_golds, strict=True))
                  if isinstance(verify._prepare(r, g), verify.Grade)]
    worker = [i for i in range(n) if i not in set(in_process)]
    for label, idx in (("in-process rules", in_process), ("math-verify workers", worker)):
        if not idx:
            continue
        start = time.perf_counter()
        verify.grade_batch([responses[i] for i in idx], [pair_golds[i] for i in idx], timeout_s=args.timeout)
        t_path = time.perf_counter() - start
        start = time.perf_counter()
        for i in idx:
            mv_verify(parse(f"${pair_golds[i]}$"), parse(f"${answers[i]}$"))
        t_mv = time.perf_counter() - start
        print(f"  {label:20s} {len(idx):5d} pairs: grade_batch {rate(len(idx), t_path)}; math-verify direct "
              f"{rate(len(idx), t_mv)}; ratio {t_mv / t_path:.2f}x")
    reasons: dict[str, int] = {}
    for g in batch:
        reasons[g.reason] = reasons.get(g.reason, 0) + 1
    print("grade_batch reasons:", reasons)

    print(f"\nworst case, one grade() call, timeout_s={args.timeout}:")
    worst = 0.0
    for name, text in ADVERSARIAL.items():
        times = []
        for response, gold in (
            (f"<answer>{text}</answer>", "5"),
            (f"\\boxed{{{text}}}", "5"),
            (f"<answer>{text}</answer>", "x + 1"),
            (f"\\boxed{{{text}}}", "2\\sqrt{2}"),
            ("<answer>5</answer>", text),
        ):
            start = time.perf_counter()
            result = verify.grade(response, gold, timeout_s=args.timeout)
            times.append(time.perf_counter() - start)
            assert not result.correct
        worst = max(worst, *times)
        print(f"  {name:22s} max {max(times):5.2f} s  ({result.reason} as gold)", flush=True)
    print(f"worst wall time of one call: {worst:.2f} s (bound: timeout {args.timeout} s + worker restart)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
