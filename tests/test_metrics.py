"""Tests for eval.metrics."""

from __future__ import annotations

import itertools
import math

import pytest

from eval.metrics import cons_at_k, pass_at_k, summarize


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_closed_form_and_edges():
    assert pass_at_k(200, 13, 10) == pytest.approx(1 - math.comb(187, 10) / math.comb(200, 10))
    assert pass_at_k(10_000, 1, 1) == pytest.approx(1e-4)
    assert 0.0 <= pass_at_k(100_000, 5, 50_000) <= 1.0
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 5, 1) == 1.0 and pass_at_k(5, 3, 3) == 1.0
    for bad in [(3, 1, 4), (3, 1, 0), (3, 4, 1), (3, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_cons_at_k_groups_equivalent_answers():
    # "1/2", "0.5" and "\frac12" form one group of 3 and beat three separate wrong answers.
    responses = [
        "<answer>1/2</answer>",
        "<answer>3</answer>",
        "\\boxed{0.5}",
        "<answer>4</answer>",
        "\\boxed{\\frac12}",
        "<answer>5</answer>",
    ]
    assert cons_at_k(responses, "\\frac{1}{2}") == 1.0
    assert cons_at_k(responses, "3") == 0.0


def test_cons_at_k_ties_and_missing_answers():
    assert cons_at_k(["\\boxed{3}", "\\boxed{4}"], "3") == 1.0  # tie: first occurrence wins
    assert cons_at_k(["\\boxed{4}", "\\boxed{3}"], "3") == 0.0
    # Responses without an answer don't vote: 2 votes for x^2+1 (written two ways) beat 1 for 7.
    responses = [
        "<think>7</think>",
        "",
        "\\boxed{7}",
        "\\boxed{x^2+1}",
        "<answer>1+x^2</answer>",
        "<answer></answer>",
    ]
    assert cons_at_k(responses, "x^2+1") == 1.0
    assert cons_at_k(["", "<think>1</think>"], "1") == 0.0
    assert cons_at_k([], "1") == 0.0


def test_summarize():
    per_problem = [[True, False, False, False], [True, True, True, True], [False] * 4]
    result = summarize(per_problem, ks=(1, 2, 4))
    assert result["n_problems"] == 3 and result["n_samples"] == 12
    assert result["pass@1"] == pytest.approx((0.25 + 1.0 + 0.0) / 3)
    assert result["pass@2"] == pytest.approx((pass_at_k(4, 1, 2) + 1.0 + 0.0) / 3)
    assert result["pass@4"] == pytest.approx(2 / 3)
    assert summarize([[True, False]])["pass@1"] == 0.5  # pass@1 always reported
    with pytest.raises(ValueError):
        summarize(per_problem, ks=(8,))
    with pytest.raises(ValueError):
        summarize([])
