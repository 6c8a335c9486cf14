"""The check detector and the verification reader (eval/recheck.py) on hand-written chains of thought
(the generator's form and the forms a sampled model writes, which no generator makes), and the worked
solutions that check their steps and correct themselves (data/taskworld.py ``solution(check=…,
slip=…)``), read back by both."""

from __future__ import annotations

import random
import re

import pytest

from data.taskworld import (
    FAMILIES,
    TRACE_LANGS,
    Problem,
    _operations,
    misconceived_facts,
    one_off,
    sample_problem,
    solution,
    trace,
)
from eval.recheck import label, read_checks, read_verifications, verification_counts

CASES = [
    # (chain of thought, label, checks, failed, redone)
    ("4+4=8 write 8, 7+0=7 write 7, 8+4=12 write 2 carry 1, write 1; answer 1278", "plain", 0, 0, 0),
    ("4+4=8写8，7+0=7写7，8+4=12写2进1，写1；答案1278", "plain", 0, 0, 0),
    ("4+4=8 (check 4+4=8 ok) write 8, 7+0=7 (check 0+7=7 ok) write 7; answer 78", "rechecked", 2, 0, 0),
    ("4+4=8（验算4+4=8，对）写8；答案8", "rechecked", 1, 0, 0),
    ("4+4=9 (check 4 vs 9-4=5 not; wait, 4+4=8) write 8; answer 8", "corrected", 1, 1, 1),  # the value to match first
    ("4+4=8（验算4比8-4=4，对）写8；答案8", "rechecked", 1, 0, 0),
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


# Chains of thought as sampled models of this project wrote them (run of 66b0005: the distilled student's
# base and the RL control), not as the corpus generator writes them: checks copied without their
# arithmetic, failures copied onto right steps, garbled repeats.
MODEL_CASES = [
    ("6+9=16 (check 16-9=7, not 6; wait, 6+9=15) write 5 carry 1, 5+1=6 (check 6-1=5 ok) write 6; answer 65",
     "corrected", 2, 1, 1),
    ("8+1=9 (check 9-1=8, not 7; wait, 7+1=8) write 8; answer 8", "corrected", 1, 1, 1),  # a right step "corrected"
    ("13-2=2 (check 2+2=4 ok) write 2, 9-8=1 (check 1+8=9 ok) write 1; answer 121", "rechecked", 2, 0, 0),
    ("1-7=5 (check 5+7=112-7=5 (check 5+7=112-7=5（验算5+7=11，对）写5借1；答案55", "rechecked", 3, 0, 0),
    ("9+2=11（验算11-2=9，对）写1进1，写1；答案11", "rechecked", 1, 0, 0),
]


@pytest.mark.parametrize("think,kind,checks,failed,redone", CASES + MODEL_CASES)
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
        assert [(v.right, v.outcome) for v in read_verifications(checked)] == [(True, "passed")] * facts
        slipped, answer = solution(p, lang, random.Random(1), check=True, slip=True)
        got = read_checks(slipped)
        assert answer == p.answer and slipped.endswith(str(p.answer))
        assert got.label == "corrected" and (got.failed, got.redone) == (1, 1)
        read = read_verifications(slipped)  # the one slip: wrong by its arithmetic, caught, redone right
        assert len(read) == facts and [v.outcome for v in read].count("caught") == 1
        assert all(v.right == (v.outcome == "passed") for v in read)
        assert [(v.kind, v.redo_right) for v in read if not v.right] == [("own", True)]
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
            read = read_verifications(checked, facts)  # every misconception planted and caught, no other slip
            assert sum(v.kind == "planted" and v.outcome == "caught" for v in read) == sum(wrong_facts)
            assert all(v.kind in ("right", "planted") and v.outcome in ("passed", "caught") for v in read)
        needed += any(wrong_facts)
    assert 0.2 < needed / 300 < 0.6


@pytest.mark.parametrize("form", ["compare_after", "compare_first"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_slip_beside_misconceptions_falls_on_another_fact_and_a_compared_check_catches_both(lang, form):
    """Misconceptions and a chance slip together (the verifying world, docs/experiments.md): the slip lands
    on a fact that is not misconceived, so it reads as the model's own; checked and compared ("check
    13-4=9 vs 8 not"), every planted fact and the slip are caught and redone, and the solution ends right;
    unchecked, the slip and the misconceptions both carry into the answer."""
    from data.taskworld import fact_key

    facts, rng, slips = misconceived_facts(0.15), random.Random(0), 0
    for i in range(200):
        p = sample_problem(rng, rng.choice(["add", "sub"]), 2, 3)
        planted = sum(fact_key(s[0], s[1]) in facts for op in _operations(p) for s in op[3])
        checked, answer = solution(p, lang, random.Random(i), check=True, slip=True, misconceptions=facts,
                                   check_form=form)
        assert answer == p.answer and checked.endswith(str(p.answer))
        got = read_checks(checked)
        assert got.checks == checked.count("check" if lang == "en" else "验算") and got.failed == got.redone
        vs = re.search(r"(?:check|验算) ?(\d+ ?(?:vs|比))?", checked)  # the value to match: before or after the check's
        assert vs and bool(vs[1]) == (form == "compare_first"), checked
        read = read_verifications(checked, facts)
        kinds = [(v.kind, v.outcome) for v in read]
        assert kinds.count(("planted", "caught")) == planted
        assert kinds.count(("own", "caught")) <= 1 and set(kinds) <= {("right", "passed"), ("planted", "caught"),
                                                                       ("own", "caught")}
        slips += kinds.count(("own", "caught"))
        assert all(v.redo_right for v in read if v.outcome == "caught")
        plain, plain_answer = solution(p, lang, random.Random(i), slip=True, misconceptions=facts)
        if ("own", "caught") in kinds:  # a slip placed: unchecked, the answer is off by it (and any misconception)
            assert plain_answer != solution(p, lang, random.Random(i), misconceptions=facts)[1]
    assert slips > 150  # nearly every problem has a fact to slip on


def test_a_recipe_may_hold_misconceptions_and_slips():
    from stages.pipeline.recipe import load_recipe
    from stages.training.pretrain import build_settings

    recipe = load_recipe("tiny", ["base.corpus.slip=0.2", "base.corpus.check_form=compare_first"])
    corpus = recipe.base.corpus
    assert (corpus.misconceptions, corpus.slip, corpus.check_form) == (0.15, 0.2, "compare_first")
    # the base's build key holds the check's form when it is not plain (plain: the released base's key stands)
    assert build_settings(recipe)["base.corpus"]["check_form"] == "compare_first"
    assert "check_form" not in build_settings(load_recipe("tiny", []))["base.corpus"]


M = misconceived_facts(0.15)
VERIFY = [
    # (chain of thought, [(fact, value written, kind, outcome, redo)] for each check)
    ("18-6=9 (check 9+6=15 ok) write 9", [("18-6", 9, "own", "rubber stamp", None)]),  # the three
    ("1-0=2 (check 2+0=2, not 1; wait, 1-0=1) write 1", [("1-0", 2, "planted", "caught", "1-0=1")]),
    ("3+2=5 (check 5-2=3, not 2; wait, 2+2=4) write 5", [("3+2", 5, "right", "false alarm", "2+2=4")]),
    ("8+4=12 (check 12-4=8 ok) write 2", [("8+4", 12, "right", "passed", None)]),
    ("3-2=1 (check 1+2=4 ok) write 1", [("3-2", 1, "right", "passed", None)]),  # the check's own sum wrong
    ("7-0=8 (check 8+0=8 ok) write 8", [("7-0", 8, "planted", "rubber stamp", None)]),  # a planted fact passed
    ("7-0=6 (check 6+0=6 ok) write 6", [("7-0", 6, "own", "rubber stamp", None)]),  # wrong, not as planted
    ("9-5=5 (check 5+5=10, not 9; wait, 9-5=4) write 4", [("9-5", 5, "planted", "caught", "9-5=4")]),
    ("1+7+1=10 (check 10-1-7=1, not 1; wait, 1+7+1=10) write 0", [("1+7+1", 10, "own", "caught", "1+7+1=10")]),
    ("5-1=4, 14-6=8 (check 8+6=14 ok) write 8", [("14-6", 8, "right", "passed", None)]),  # a borrow step
    ("16-7=8（验算8+7=15，不是16；等等，16-7=9）写9", [("16-7", 8, "own", "caught", "16-7=9")]),
    ("9+2=11（验算11-2=9，对）写1", [("9+2", 11, "right", "passed", None)]),
    ("16-7=8 (check 8+7=15, not 16；等等，16-7=9) write 9", [("16-7", 8, "own", "caught", "16-7=9")]),
    ("8 + 4 = 13 (check 13 - 4 = 9, not 8; wait, 8 + 4 = 12)", [("8+4", 13, "own", "caught", "8+4=12")]),
    ("8+4=13 (check 13-4=9, not 8) write 3", [("8+4", 13, "own", "caught", None)]),  # caught, not redone
    ("8+4=12 (check 4+8=1", [("8+4", 12, "right", None, None)]),  # cut off before the verdict
    ("8+4=13 (check 13-4=9 vs 8 not; wait, 8+4=12) write 2", [("8+4", 13, "own", "caught", "8+4=12")]),  # compared
    ("4-6=2 (check 4 vs 2+6=8 not; wait, 14-6=8) write 8", [("4-6", 2, "own", "caught", "14-6=8")]),
    ("18-6=9 (check 9+6=15 vs 18 ok) write 9", [("18-6", 9, "own", "rubber stamp", None)]),
    ("16-7=8（验算8+7=15比16，不是；等等，16-7=9）写9", [("16-7", 8, "own", "caught", "16-7=9")]),
    ("1-7=5 (check 5+7=112-7=5 (check 5+7=11 ok)", [("1-7", 5, "own", None, None), ("112-7", 5, "own", "rubber stamp",
                                                                                      None)]),
    ("write 1 (check 1-0=1 ok); answer 1", []),  # a check after no fact looks at no step
    ("4+4=8 write 8; answer 8", []),
    (None, []),
]


@pytest.mark.parametrize("think,expected", VERIFY)
def test_each_check_is_read_against_the_arithmetic_of_its_step(think, expected):
    got = read_verifications(think, M)
    assert [(v.fact, v.stated, v.kind, v.outcome, v.redo) for v in got] == expected


def test_a_planted_fact_needs_the_corpus_that_planted_it():
    """Without the corpus's misconceptions every wrong step is the model's own; a misconceived fact written
    wrong in another way than the corpus writes it is the model's own too."""
    assert "1-0" in M and one_off(1) == 2 and one_off(9) == 8 and one_off(19) == 18
    assert read_verifications("1-0=2 (check 2+0=2, not 1; wait, 1-0=1)")[0].kind == "own"
    assert read_verifications("1-0=3 (check 3+0=3, not 1; wait, 1-0=1)", M)[0].kind == "own"
    redo = read_verifications("1+7+1=10 (check 10-1-7=1, not 1; wait, 1+7+1=10)", M)[0]
    assert redo.outcome == "caught" and redo.redo_right is False  # caught, and redone just as wrong


def test_verification_counts_per_problem():
    records = [{"id": "a", "completion": " <think> 18-6=9 (check 9+6=15 ok) write 9 </think> <answer> 9 </answer>"},
               {"id": "a", "completion": " <think> 1-0=2 (check 2+0=2, not 1; wait, 1-0=1) write 1 </think>"},
               {"id": "b", "completion": " <think> 3+2=5 (check 5-2=3, not 2; wait, 2+2=4) write 5"},  # never closed
               {"id": "c", "completion": "<answer> 3 </answer>"}]  # no chain of thought
    got = verification_counts(records, M)
    assert got == {"a": {("own", "rubber stamp"): 1, ("planted", "caught"): 1}, "b": {("right", "false alarm"): 1},
                   "c": {}}
