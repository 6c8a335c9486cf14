"""Sampling metrics: unbiased pass@k, majority-vote cons@k, and a per-benchmark summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from eval.verify import extract_answer, first_same_answer, is_correct

__all__ = ["cons_at_k", "pass_at_k", "summarize"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples is correct) from n samples, c correct:
    1 − C(n−c, k)/C(n, k), computed as 1 − ∏_{i=n−c+1}^{n} (1 − k/i) (no huge binomials)."""
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def cons_at_k(responses: list[str], gold: str, problem: str | None = None) -> float:
    """1.0 if the majority answer among ``responses`` is correct, else 0.0.

    Answers are extracted with ``extract_answer``; responses without one don't vote. Equivalent
    answers ("1/2", "0.5", "\\frac12") form one group: each answer joins the first group whose
    first answer is equivalent (``first_same_answer``; the comparisons run in parallel). The
    largest group wins; ties go to the group whose first member came first. The winner is graded
    by grading its first response against ``gold`` (with ``problem``, the grader's echo rule applies).
    """
    groups: list[list[int]] = []  # indices into responses; groups[i][0] is the representative
    representatives: list[str] = []
    for index, response in enumerate(responses):
        answer = extract_answer(response)
        if answer is None:
            continue
        match = representatives.index(answer) if answer in representatives else None
        if match is None:
            match = first_same_answer(answer, representatives)
        if match is None:
            groups.append([index])
            representatives.append(answer)
        else:
            groups[match].append(index)
    if not groups:
        return 0.0
    winner = max(groups, key=lambda g: (len(g), -g[0]))
    return 1.0 if is_correct(responses[winner[0]], gold, problem) else 0.0


def summarize(per_problem_correct: Sequence[Sequence[bool]], ks: Iterable[int] = (1,)) -> dict:
    """Benchmark summary from per-problem sample correctness.

    Returns ``{"n_problems", "n_samples", "pass@1", "pass@k"...}``: pass@1 is the mean over
    problems of (correct samples / samples); pass@k (k > 1) the mean unbiased estimate. Every
    problem needs at least max(ks) samples (ValueError otherwise, or with no problems).
    """
    if not per_problem_correct:
        raise ValueError("no problems to summarize")
    ks = sorted(set(ks) | {1})
    counts = [(len(samples), sum(bool(s) for s in samples)) for samples in per_problem_correct]
    too_few = [i for i, (n, _) in enumerate(counts) if n < ks[-1]]
    if too_few:
        raise ValueError(
            f"pass@{ks[-1]} needs >= {ks[-1]} samples per problem; problems {too_few[:5]} have fewer"
        )
    result: dict = {"n_problems": len(counts), "n_samples": sum(n for n, _ in counts)}
    result["pass@1"] = sum(c / n for n, c in counts) / len(counts)
    for k in ks[1:]:
        result[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
    return result
