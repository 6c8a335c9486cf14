"""The check detector (eval/recheck.py) and the worked solutions that check their steps and correct
themselves (data/taskworld.py ``solution(check=…, slip=…)``)."""

from __future__ import annotations

import random

import pytest

from data.taskworld import FAMILIES, TRACE_LANGS, Problem, _operations, sample_problem, solution, trace
from eval.recheck import label, read_checks

CASES = [
    # (chain of thought, label, checks, failed, redone)
    ("4+4=8 write 8, 7+0=7 write 7, 8+4=12 write 2 carry 1, write 1; answer 1278", "plain", 0, 0, 0),
    ("4+4=8写8，7+0=7写7，8+4=12写2进1，写1；答案1278", "plain", 0, 0, 0),
    ("4+4=8 (check 4+4=8 ok) write 8, 7+0=7 (check 0+7=7 ok) write 7; answer 78", "rechecked", 2, 0, 0),
    ("4+4=8（验算4+4=8，对）写8；答案8", "rechecked", 1, 0, 0),
    ("4+4=9 (check 4+4=8, not 9; wait, 4+4=8) write 8, 7+0=7 (check 0+7=7 ok) write 7; answer 78",
     "corrected", 2, 1, 1),
    ("16-7=8（验算8+7=15，不是16；等等，16-7=9）写9借1；答案99", "corrected", 1, 1, 1),
    ("16-7=8 (check 8+7=15, not 16；等等，16-7=9) write 9; answer 9", "corrected", 1, 1, 1),  # switching language
    ("4+4=9 (check 4+4=8, not 9) write 9; answer 9", "rechecked", 1, 1, 0),  # a failed check not acted on
    ("8+4=12 (check 4+8=1", "rechecked", 1, 0, 0),  # cut off inside the check
    ("8+4=12 (check 4+8=12", "rechecked", 1, 0, 0),  # cut off before the verdict
    ("I will check the answer: it looks fine; answer 12", "plain", 0, 0, 0),  # no fact checked
    ("wait, 4+4=8 write 8; answer 8", "plain", 0, 0, 0),  # a redo without a check
    ("", "plain", 0, 0, 0),
    (None, "plain", 0, 0, 0),
]


@pytest.mark.parametrize("think,kind,checks,failed,redone", CASES)
def test_labels_and_counts(think, kind, checks, failed, redone):
    got = read_checks(think)
    assert (got.label, got.checks, got.failed, got.redone) == (kind, checks, failed, redone)
    assert label(think) == kind


@pytest.mark.parametrize("lang", TRACE_LANGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_generated_solutions_are_labelled_as_built(family, lang):
    """Every worked solution the corpus can write is labelled as it was built: plain, checked, or
    corrected after a slip, with one check per digit fact; a checked solution always ends right, an
    unchecked slip ends wrong."""
    rng = random.Random(0)
    for _ in range(60):
        p = sample_problem(rng, family, 2, 4)
        plain, answer = solution(p, lang, random.Random(1))
        assert label(plain) == "plain" and answer == p.answer and plain.endswith(str(p.answer))
        checked, answer = solution(p, lang, random.Random(1), check=True)
        facts = sum("+" in step[1] or "-" in step[1] for op in _operations(p) for step in op[3])  # one per fact
        got = read_checks(checked)
        assert (got.label, got.checks, got.failed, answer) == ("rechecked", facts, 0, p.answer)
        slipped, answer = solution(p, lang, random.Random(1), check=True, slip=True)
        got = read_checks(slipped)
        assert answer == p.answer and slipped.endswith(str(p.answer))
        assert got.label == "corrected" and (got.failed, got.redone) == (1, 1)
        wrong, answer = solution(p, lang, random.Random(1), slip=True)
        assert label(wrong) == "plain" and answer != p.answer and wrong.endswith(str(answer))


def test_a_slip_is_one_fact_written_one_off():
    p = Problem("add", (874, 404), ("+",))
    text, answer = solution(p, "en", random.Random(3), slip=True)
    assert abs(answer - p.answer) in (1, 10, 100, 1000)
    assert solution(p, "en", random.Random(3)) == (trace(p, "en", random.Random(3)), p.answer)
    checked = trace(p, "en", random.Random(3), check=True, slip=True)
    assert "not" in checked and "wait" in checked and checked.endswith("answer 1278")


def test_plain_solutions_are_unchanged_by_the_new_options():
    """``check=False, slip=False`` writes the solutions the corpus always had, drawing the same random
    numbers (a mixed-language trace draws where to switch)."""
    p = Problem("expr3", (67, 20, 37), ("+", "-"))
    assert trace(p, "en", random.Random(0)) == ("first 67+20: 7+0=7 write 7, 6+2=8 write 8, get 87; then 87-37: "
                                                 "7-7=0 write 0, 8-3=5 write 5, get 50; answer 50")
    rng = random.Random(0)
    assert trace(p, "mix", rng) == "先算 67+20：7+0=7写7，6+2=8写8，得87; 再算 87-37：7-7=0写0，8-3=5写5, get 50; answer 50"
    assert rng.random() == 0.04048437818077755  # and nothing more (both as at commit 1044133)


def test_a_slip_drawn_from_its_own_generator_moves_no_other_draw():
    p = Problem("add", (874, 404), ("+",))
    main, own = random.Random(5), random.Random(6)
    solution(p, "en", main, check=True, slip=True, slip_rng=own)
    assert main.random() == random.Random(5).random()


def test_misconceptions_are_the_same_facts_written_wrong_every_time_and_checks_catch_each():
    """A corpus with misconceptions writes a fixed share of the digit facts one off in every solution that
    needs them (no chance: two draws agree); unchecked, such a solution ends wrong; checked, each of them
    fails its check and is redone, and the solution ends right. Problems that need none are unchanged."""
    from data.taskworld import fact_key, misconceived_facts

    facts = misconceived_facts(0.15)
    assert misconceived_facts(0.15) == facts and misconceived_facts(0.0) == frozenset()
    assert 0.1 < len(facts) / 300 < 0.2 and facts < misconceived_facts(0.3)  # a share; a larger share holds it
    rng, needed = random.Random(0), 0
    for _ in range(300):
        p = sample_problem(rng, rng.choice(FAMILIES), 2, 3)
        wrong_facts = [fact_key(s[0], s[1]) in facts for op in _operations(p) for s in op[3]]
        plain, answer = solution(p, "en", random.Random(1), misconceptions=facts)
        assert solution(p, "en", random.Random(2), misconceptions=facts)[1] == answer  # not by chance
        checked, checked_answer = solution(p, "en", random.Random(1), check=True, misconceptions=facts)
        got = read_checks(checked)
        assert checked_answer == p.answer and label(plain) == "plain"
        if p.family != "expr3":  # (an expression's second operation starts from the first's wrong result)
            assert (answer != p.answer) == any(wrong_facts)
            assert (got.failed, got.redone) == (sum(wrong_facts), sum(wrong_facts))
            assert got.label == ("corrected" if any(wrong_facts) else "rechecked")
        needed += any(wrong_facts)
    assert 0.2 < needed / 300 < 0.6
    with pytest.raises(ValueError, match="not both"):
        solution(Problem("add", (874, 404), ("+",)), "en", random.Random(0), slip=True, misconceptions=facts)


def test_a_recipe_with_misconceptions_and_slips_is_refused():
    from stages.pipeline.recipe import RecipeError, load_recipe

    assert load_recipe("tiny", ["base.corpus.misconceptions=0.15"]).base.corpus.misconceptions == 0.15
    with pytest.raises(RecipeError, match="misconceptions and slip"):
        load_recipe("tiny", ["base.corpus.misconceptions=0.15", "base.corpus.slip=0.2"])
