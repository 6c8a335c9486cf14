"""Grade every gold answer against itself, as a model would write it.

For every ``<name>/<split>.jsonl`` in the benchmarks folder, each gold answer G is graded (with
``eval.verify.grade_batch``) as the response ``<answer>G</answer>`` and as
``The final answer is \\boxed{G}.``; the script prints the correct rate per file and lists misses.
Since identical answers are equal by rule 1 of eval.verify, that alone tests extraction only, so
the script also (unless ``--quick``) sends every pair through math-verify, skipping the identity
and number fast paths ("strict"), and lists the golds math-verify cannot parse into an expression
(``gold_is_parseable`` False: the accuracy reward returns None for them).

Results (math-verify 0.9.0, 2 shared CPUs; ~1.5 min, --quick ~2 s):

    file               rows  <answer>  \\boxed   strict  unparseable golds
    aime24/test          30   100%     100%     100%    0
    aime25/test          30   100%     100%     100%    0
    amc23/test           40   100%     100%     100%    0
    cmath/test          600   100%     100%     100%    0
    gsm8k/test         1319   100%     100%     100%    0
    gsm8k/train        7473   100%     100%     100%    0
    math/train        11998   100%     100%     100%    1
    math500/test        500   100%     100%     100%    0
    mgsm/test          2750   100%     100%     100%    0

Misses found on the way, and what was done about them:

* ``6, 8\\text{, and }10`` (math/train): math-verify parsed it as {6, 8*,*10}. Fixed: for golds with
  several values, ``\\text{ and }``/``\\text{ or }``/"and"/"or" become commas on both sides.
* ``\\dfrac{1}{29,\\!322,\\!216}``, ``\\frac{12}{5,\\!525}`` (math/train): thin-space thousands
  separators inside a fraction were left to math-verify, which only has its raw-string fallback
  for them. Fixed: ``,\\!``, ``{,}`` and ``\\,`` separators before 3 digits are removed first.
* ``-\\frac{5}{3}.``, ``\\text{(E)},``, ``30^\\circ.`` (math/train): trailing punctuation copied
  from the solution's box. Fixed: trailing ``.,;`` are stripped from both answers.
* ``a + b + c`` (math/train): math-verify's unit stripper treats a trailing " c" (also " t",
  " s", " m", ...) as a unit and parses "a +". Fixed: a lone letter after an operator is braced
  (``a + b + {c}``) before parsing.
* ``\\sin^2 t`` (math/train, intermediate_algebra): still unparseable. The unit stripper removes
  the trailing " t" after the digit 2, leaving ``\\sin^2``; bracing a letter after a digit would
  break real units ("5 m"). It still grades correct against itself (identical text) and against
  ``\\sin^2 t``-shaped answers, but ``\\sin^2(t)`` is graded ``gold_unparseable`` (wrong).

All listed cases now pass; the README's other quirks (``\\text{(C)}``, ``90^\\circ``,
``864 \\mbox{ inches}^2``, ``\\$32,\\!348``, ``11,\\! 111,\\! 111,\\! 100``, cmath's ``2/6`` and
``12%``) needed no special handling beyond the documented rules.

Usage: ``python scripts/check_golds.py [--data-dir DIR] [--quick] [--only math500/test ...]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.benchmarks import load_benchmark  # noqa: E402
from eval import verify  # noqa: E402


def default_data_dir() -> Path:
    env = os.environ.get("R1_BENCHMARKS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


TEMPLATES = {
    "<answer>": "<answer>{}</answer>".format,
    "\\boxed": "The final answer is \\boxed{{{}}}.".format,
}


def strict_misses(golds: list[str]) -> list[tuple[str, str]]:
    """Grade gold against gold through math-verify only (no identity or number fast path)."""
    jobs = []
    for gold in golds:
        forms = verify._parse_forms(verify._normalize_gold(gold))
        jobs.append(("grade", (forms, forms, verify._inner_timeout(5.0))))
    results = verify._run_jobs(jobs, 5.0, None)
    return [(g, reason) for g, (ok, reason) in zip(golds, results, strict=True) if not ok]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--quick", action="store_true", help="skip the math-verify-only (strict) pass")
    parser.add_argument("--only", nargs="*", help="files to check, e.g. math500/test")
    args = parser.parse_args()

    files = sorted(args.data_dir.glob("*/*.jsonl"))
    if args.only:
        files = [f for f in files if f"{f.parent.name}/{f.stem}" in args.only]
    if not files:
        print(f"no benchmark files under {args.data_dir} (set R1_BENCHMARKS_DIR or --data-dir)")
        return 1
    all_ok = True
    for path in files:
        name = f"{path.parent.name}/{path.stem}"
        golds = [row["answer"] for row in load_benchmark(path.parent.name, path.stem, data_dir=args.data_dir)]
        start = time.monotonic()
        line = f"{name:16s} {len(golds):6d} rows"
        misses: list[str] = []
        for label, template in TEMPLATES.items():
            grades = verify.grade_batch([template(g) for g in golds], golds)
            correct = sum(g.correct for g in grades)
            line += f"  {label} {100 * correct / len(golds):6.2f}%"
            misses += [
                f"  miss [{label}] {g!r}: {r.reason}"
                for g, r in zip(golds, grades, strict=True)
                if not r.correct
            ]
        if not args.quick:
            strict = strict_misses(golds)
            line += f"  strict {100 * (1 - len(strict) / len(golds)):6.2f}%"
            misses += [f"  miss [strict] {g!r}: {reason}" for g, reason in strict]
            unparseable = [g for g in dict.fromkeys(golds) if not verify.gold_is_parseable(g)]
            line += f"  unparseable {len(unparseable)}"
            misses += [f"  gold not parseable by math-verify: {g!r}" for g in unparseable]
        print(f"{line}  ({time.monotonic() - start:.1f}s)", flush=True)
        for miss in misses:
            print(miss)
        all_ok &= not any(m.startswith("  miss") for m in misses)
    print("reasons:", dict(verify.REASON_COUNTS))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
