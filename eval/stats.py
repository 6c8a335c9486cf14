"""Uncertainty for every reported number, and verdicts that can come out either way.

The unit of resampling is the *problem*: a held-out set of n problems is one draw from the world of
problems, and the k samples of a problem are not independent draws from it. So every interval here is
a **percentile bootstrap over problems** (:data:`N_BOOT` resamples, seeded, 95%):

- :func:`estimate`: a mean over problems of per-problem values (pass@1 of a problem = the share of its
  k samples that are correct; mean length; a 0/1 flag) with its interval.
- :func:`paired_difference`: the mean over problems of ``after[i] - before[i]`` on the *same* problems
  (same template and sampling are the caller's job), resampling problems jointly, so that what both
  arms share (hard problems are hard for both) cancels out.
- :func:`verdict`: the rule every finding uses, printed beside it (:data:`RULE`): **reproduced** when
  the interval of the difference lies entirely on the paper's side of zero; **not reproduced** when it
  lies entirely below the smallest effect that would count (:data:`MARGIN`, in the paper's direction),
  i.e. any effect is too small or of the opposite sign; **inconclusive** otherwise.
- :func:`across_seeds`: mean, standard deviation and range of a statistic over seeds, shown next to the
  single-run intervals (which cover problem sampling only, not training randomness).
- :func:`wilson` and :func:`proportion`: a share of counted events (checks that caught a wrong step,
  reward-model pairs ranked right) with an interval that stays honest for few events, where a bootstrap
  over problems collapses (1 of 1 would be [100%, 100%]).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["MARGIN", "METHOD", "N_BOOT", "PROPORTION_METHOD", "RULE", "Estimate", "across_seeds", "combine",
           "estimate", "paired_difference", "per_problem", "proportion", "verdict", "wilson"]

N_BOOT = 2000
LEVEL = 0.95
MARGIN = 0.02  # the smallest difference (in the paper's direction) that counts as an effect
METHOD = f"percentile bootstrap over problems, {N_BOOT} resamples, {LEVEL:.0%}"
RULE = (f"reproduced if the {LEVEL:.0%} interval of the paired difference lies above 0 in the paper's direction; "
        f"not reproduced if it lies below +{MARGIN} (no effect of that size, or the opposite); inconclusive otherwise")
VERDICTS = ("reproduced", "not reproduced", "inconclusive")
PROPORTION_METHOD = (f"Wilson score interval on the counts, {LEVEL:.0%}, widened to the percentile bootstrap over "
                     f"problems ({N_BOOT} resamples) where that is wider: events of one problem are not independent")


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` problems and its interval (``lo``, ``hi``); NaN bounds when n < 2."""

    mean: float
    lo: float
    hi: float
    n: int

    def fmt(self, digits: int = 3, percent: bool = False) -> str:
        if percent:
            return f"{self.mean:.1%} [{self.lo:.1%}, {self.hi:.1%}]"
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"

    def to_dict(self) -> dict:
        return asdict(self)


def _bootstrap(values: np.ndarray, seed: int) -> Estimate:
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return Estimate(mean, math.nan, math.nan, n)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, n, size=(N_BOOT, n))].mean(axis=1)  # (N_BOOT,)
    lo, hi = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Estimate(mean, float(lo), float(hi), n)


def estimate(values: Sequence[float], seed: int = 0) -> Estimate:
    """The mean of per-problem ``values`` and its 95% percentile-bootstrap interval."""
    return _bootstrap(np.asarray(values, dtype=float), seed)


def paired_difference(before: Mapping[str, float], after: Mapping[str, float], seed: int = 0,
                      clusters: Mapping[str, str] | None = None) -> Estimate:
    """Mean over the problems both arms have of ``after[id] - before[id]``, with its interval.
    Problems only one arm has are left out (a paired comparison needs both). ``clusters`` (id → group):
    resample whole groups instead of problems, when problems of a group are not independent draws
    (stage 4's held-out harmful prompts: several templates of each of a few acts)."""
    ids = sorted(set(before) & set(after))
    diffs = np.asarray([after[i] - before[i] for i in ids], dtype=float)
    if clusters is None:
        return _bootstrap(diffs, seed)
    groups: dict[str, list[int]] = {}
    for index, i in enumerate(ids):
        groups.setdefault(str(clusters.get(i, i)), []).append(index)
    members = list(groups.values())
    mean = float(diffs.mean()) if len(diffs) else math.nan
    if len(members) < 2:
        return Estimate(mean, math.nan, math.nan, len(diffs))
    rng = np.random.default_rng(seed)
    sums = np.asarray([diffs[m].sum() for m in members])  # (groups,)
    sizes = np.asarray([len(m) for m in members])
    draws = rng.integers(0, len(members), size=(N_BOOT, len(members)))
    means = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)  # (N_BOOT,)
    lo, hi = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Estimate(mean, float(lo), float(hi), len(diffs))


def per_problem(records: Sequence[Mapping], key: str = "correct") -> dict[str, float]:
    """Per-problem means of ``key`` over sample records (``{"id", key}``): pass@1 per problem for
    ``correct``, the mean length for ``num_tokens``. Records without the key are skipped."""
    sums: dict[str, list[float]] = {}
    for r in records:
        value = r.get(key)
        if value is None:
            continue
        sums.setdefault(str(r["id"]), []).append(float(value))
    return {i: sum(v) / len(v) for i, v in sums.items()}


def verdict(diff: Estimate, direction: int = +1, margin: float = MARGIN) -> str:
    """:data:`RULE` applied to a paired difference; ``direction`` -1 when the paper's effect is a
    decrease (e.g. less language mixing)."""
    if math.isnan(diff.lo) or math.isnan(diff.hi):
        return "inconclusive"
    lo, hi = (diff.lo, diff.hi) if direction > 0 else (-diff.hi, -diff.lo)
    if lo > 0:
        return "reproduced"
    if hi < margin:
        return "not reproduced"
    return "inconclusive"


def combine(verdicts: Sequence[str]) -> str:
    """A finding made of several effects that must all hold ("accuracy *and* length rise"):
    reproduced if all are, not reproduced if any is not, else inconclusive."""
    if verdicts and all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if any(v == "not reproduced" for v in verdicts):
        return "not reproduced"
    return "inconclusive"


def across_seeds(values: Sequence[float]) -> dict:
    """Mean, sample standard deviation and range of one statistic over seeds."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return {"n": 0}
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else math.nan
    return {"n": len(xs), "mean": mean, "sd": sd, "min": min(xs), "max": max(xs)}


def wilson(hits: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of ``hits`` out of ``n`` independent events (NaN bounds when n is 0)."""
    if n <= 0:
        return math.nan, math.nan
    z = float(_normal_quantile((1 + level) / 2))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (0.0 if hits == 0 else max(0.0, centre - half)), (1.0 if hits == n else min(1.0, centre + half))


def _normal_quantile(q: float) -> float:
    """The standard normal quantile, by bisection on erf (no scipy here)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def proportion(counts: Mapping[str, tuple[int, int]], seed: int = 0) -> Estimate:
    """A share of events pooled over problems: ``counts`` is problem id → (hits, events). The mean is
    sum(hits) / sum(events) (``n``: the events); the interval (:data:`PROPORTION_METHOD`) is the Wilson
    score interval on the pooled counts, widened to the percentile bootstrap over problems of the same
    ratio where that is wider (several events of one problem, several checks of one chain of thought,
    are not independent draws)."""
    ids = [i for i, (_, n) in counts.items() if n > 0]
    hits = np.asarray([counts[i][0] for i in ids], dtype=float)
    events = np.asarray([counts[i][1] for i in ids], dtype=float)
    total = int(events.sum())
    if total == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(hits.sum() / total)
    lo, hi = wilson(int(hits.sum()), total)
    if len(ids) >= 2:
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(ids), size=(N_BOOT, len(ids)))
        ratios = hits[draws].sum(axis=1) / events[draws].sum(axis=1)  # (N_BOOT,); every problem has events
        b_lo, b_hi = np.quantile(ratios, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
        lo, hi = min(lo, float(b_lo)), max(hi, float(b_hi))
    return Estimate(mean, lo, hi, total)
