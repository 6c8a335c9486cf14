"""The re-check detector (eval/recheck.py) and the worked solutions that re-check and correct
themselves (data/taskworld.py ``trace(check=…, slip=…)``)."""

from __future__ import annotations

import random

import pytest

from data.taskworld import FAMILIES, TRACE_LANGS, Problem, sample_problem, solution, trace
from eval.recheck import label, read_checks

CASES = [
    # (chain of thought, label, checked values, verdicts)
    ("4+4=8 write 8, 7+0=7 write 7, 8+4=12 write 2 carry 1, write 1; answer 1278", "plain", (), ()),
    ("4+4=8写8，7+0=7写7，8+4=12写2进1，写1；答案1278", "plain", (), ()),
    ("... write 1; check 1278-404: 8-4=4 write 4, ..., get 874, ok; answer 1278", "rechecked", (1278,), (True,)),
    ("…写1；验算 1278-404：8-4=4写4，…，得874，对；答案1278", "rechecked", (1278,), (True,)),
    ("... write 1; check 1279-404: ..., get 875, not 874; wait, recompute: ... write 1; "
     "check 1278-404: ..., get 874, ok; answer 1278", "corrected", (1279, 1278), (False, True)),
    ("…写1；验算 1279-404：…，得875，不是874；等等，重算：…写1；验算 1278-404：…，得874，对；答案1278",
     "corrected", (1279, 1278), (False, True)),
    ("... get 60; check 60+37: ..., get 97; 97-20: ..., get 77, not 67；等等，重算：...; 验算 50+37：…，得67，对; answer 50",
     "corrected", (60, 50), (False, True)),  # switching language midway
    ("... write 1; check 1279-404: ..., get 875, not 874; answer 1279", "rechecked", (1279,), (False,)),  # no recompute
    ("... write 1; check 1278-404: 8-4=4 write", "rechecked", (1278,), (False,)),  # cut off before the verdict
    ("I will check the answer: it looks fine; answer 12", "plain", (), ()),  # no value checked
    ("recompute: 4+4=8 write 8; answer 8", "plain", (), ()),  # a recomputation without a check
    ("", "plain", (), ()),
    (None, "plain", (), ()),
]


@pytest.mark.parametrize("think,kind,checked,passed", CASES)
def test_labels_and_checks(think, kind, checked, passed):
    got = read_checks(think)
    assert (got.label, got.checked, got.passed) == (kind, checked, passed)
    assert label(think) == kind


@pytest.mark.parametrize("lang", TRACE_LANGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_generated_solutions_are_labelled_as_built(family, lang):
    """Every worked solution the corpus can write is labelled as it was built: plain, re-checked, or
    corrected after a slip; the first check starts from the first pass's (wrong) result, the last
    from the right one; the answer is always right."""
    rng = random.Random(0)
    for _ in range(60):
        p = sample_problem(rng, family, 2, 4)
        plain, checked, slipped = (trace(p, lang, random.Random(1)), trace(p, lang, random.Random(1), check=True),
                                   trace(p, lang, random.Random(1), check=True, slip=True))
        assert label(plain) == "plain" and plain.endswith(str(p.answer))
        assert read_checks(checked) == read_checks(checked) and label(checked) == "rechecked"
        assert read_checks(checked).checked == (p.answer,) and read_checks(checked).passed == (True,)
        assert checked.endswith(str(p.answer))
        got = read_checks(slipped)
        if got.label == "corrected":  # a slip had a place
            assert got.checked[0] != p.answer and got.passed == (False,)
            assert slipped.endswith(str(p.answer))
        else:
            assert slipped == checked


def test_a_slip_is_one_digit_step_written_one_off():
    p = Problem("add", (874, 404), ("+",))
    got = read_checks(trace(p, "en", random.Random(3), check=True, slip=True))
    diff = abs(got.checked[0] - p.answer)
    assert got.label == "corrected" and diff in (1, 10, 100, 1000)


def test_plain_solutions_are_unchanged_by_the_new_options():
    """``check=False`` writes the solutions the corpus always had, drawing the same random numbers."""
    p = Problem("expr3", (67, 20, 37), ("+", "-"))
    assert trace(p, "en", random.Random(0)) == ("first 67+20: 7+0=7 write 7, 6+2=8 write 8, get 87; then 87-37: "
                                                 "7-7=0 write 0, 8-3=5 write 5, get 50; answer 50")



def test_an_unchecked_slip_ends_in_its_wrong_answer():
    p = Problem("add", (874, 404), ("+",))
    text, answer = solution(p, "en", random.Random(3), slip=True)
    assert answer != p.answer and abs(answer - p.answer) in (1, 10, 100, 1000)
    assert text.endswith(f"answer {answer}") and label(text) == "plain"
    assert solution(p, "en", random.Random(3)) == (trace(p, "en", random.Random(3)), p.answer)
