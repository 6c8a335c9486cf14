"""Tests for eval.verify: extraction policy, equivalence table, bounds, threads, batches."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eval import verify
from eval.benchmarks import load_benchmark
from eval.verify import (
    REASON_COUNTS,
    REASONS,
    Grade,
    extract_answer,
    first_same_answer,
    gold_is_parseable,
    grade,
    grade_batch,
    is_correct,
    same_answer,
)

A = "<answer>{}</answer>".format
BOX = "The final answer is \\boxed{{{}}}.".format

# (response, gold, expected correct)
CASES = [
    # integers, decimals, separators
    (A("12"), "12", True),
    (A("12.0"), "12", True),
    (A("12.5"), "12", False),
    (A("12"), "12.5", False),
    (A("025"), "25", True),
    (A("-1"), "-1", True),
    (A("1"), "-1", False),
    (A("1,000"), "1000", True),
    (A("1000"), "1,000", True),
    (A("11111111100"), "11,\\! 111,\\! 111,\\! 100", True),
    (A("11111111101"), "11,\\! 111,\\! 111,\\! 100", False),
    (A("\\$32,348"), "\\$32,\\!348", True),
    (A("32348"), "\\$32,\\!348", True),
    (A("\\$18.90"), "\\$18.90", True),
    (A("18.9"), "\\$18.90", True),
    (A("18.19"), "\\$18.90", False),
    (A("She has 12 apples."), "12", True),
    (A("She has 13 apples."), "12", False),
    # fractions and decimals
    (BOX("0.5"), "\\frac{1}{2}", True),
    (BOX("1/2"), "\\frac12", True),
    (BOX("\\dfrac{1}{2}"), "0.5", True),
    (BOX("0.33"), "\\frac{1}{3}", False),
    (BOX("0.333333"), "\\frac{1}{3}", True),
    (A("1/3"), "2/6", True),
    (A("\\frac{2}{3}"), "6/9", True),
    (A("\\frac{1}{29322216}"), "\\dfrac{1}{29,\\!322,\\!216}", True),
    # percentages (cmath); a bare number matches the percentage, as in math-verify
    (A("25\\%"), "25%", True),
    (A("25"), "25%", True),
    (A("0.25"), "25%", True),
    (A("2.5"), "25%", False),
    # roots, pi, expressions
    (BOX("\\sqrt{51}"), "\\sqrt{51}", True),
    (BOX("51^{1/2}"), "\\sqrt{51}", True),
    (BOX("\\sqrt{50}"), "\\sqrt{51}", False),
    (BOX("3\\sqrt{13}"), "\\sqrt{117}", True),
    (BOX("\\pi"), "\\pi", True),
    (BOX("3.14"), "\\pi", False),
    (BOX("-\\pi/6"), "-\\frac{\\pi}{6}", True),
    (BOX("3x - 6 + x^3"), "x^3+3x-6", True),
    (BOX("x^3+3x+6"), "x^3+3x-6", False),
    (BOX("ab+2a+5b+10"), "(a+5)(b+2)", True),
    (BOX("a+b+c"), "a + b + c", True),
    (BOX("p-q"), "p - q", True),
    (BOX("q-p"), "p - q", False),
    # equations
    (A("x = 3"), "3", True),
    (A("x = -3"), "3", False),
    (A("x=3"), "x=-3", False),
    (A("2x+3"), "y = 2x + 3", True),
    (A("y = 2x + 3"), "y = 2x + 3", True),
    (A("y = 2x - 3"), "y = 2x + 3", False),
    # intervals, sets, tuples, matrices
    (BOX("(3, 4]"), "(3,4]", True),
    (BOX("[3,4]"), "(3,4]", False),
    (BOX("(3,4]"), "[3,4]", False),
    (BOX("(-\\infty,2)\\cup(3,\\infty)"), "(-\\infty, 2) \\cup (3, \\infty)", True),
    (BOX("(-\\infty,2]\\cup(3,\\infty)"), "(-\\infty, 2) \\cup (3, \\infty)", False),
    (BOX("[-2,7]"), "x \\in [-2,7]", True),
    (BOX("\\{1, 2\\}"), "1,2", True),
    (BOX("2, 1"), "1,2", True),
    (BOX("1, 3"), "1,2", False),
    (BOX("-2, 1+\\sqrt{5}, 1-\\sqrt{5}"), "\\{1\\pm\\sqrt{5},-2\\}", True),
    (BOX("(6, 31, -1)"), "(6,31,-1)", True),
    (BOX("(31,6,-1)"), "(6,31,-1)", False),
    (BOX("(3, \\pi/2)"), "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    (BOX("\\begin{pmatrix}1\\\\2\\end{pmatrix}"), "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
    (BOX("\\begin{pmatrix}2\\\\1\\end{pmatrix}"), "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", False),
    # degrees and units
    (A("90"), "90^\\circ", True),
    (A("90^{\\circ}"), "90^\\circ", True),
    (A("45"), "90^\\circ", False),
    (A("864"), "864 \\mbox{ inches}^2", True),
    (A("864 \\text{ square inches}"), "864 \\mbox{ inches}^2", True),
    (A("\\frac{270}{7}"), "\\frac{270}7\\text{ degrees}", True),
    # multiple choice and text
    (A("C"), "\\text{(C)}", True),
    (A("(C)"), "\\text{(C)}", True),
    (A("\\textbf{(C)}"), "\\text{(C)}", True),
    (A("The answer is (C)."), "\\text{(C)}", True),
    (A("D"), "\\text{(C)}", False),
    (A("Evelyn"), "\\text{Evelyn}", True),
    (A("\\text{East}"), "\\text{east}", True),
    (A("west"), "\\text{east}", False),
    (A("12"), "\\text{(C)}", False),
    # hedged answers are wrong; "or" is a list separator when the gold lists values
    (A("12 or 13"), "12", False),
    (A("12 and/or 13"), "12", False),
    (A("either 12 or 13"), "13", False),
    (A("x=3 or x=-3"), "3", False),
    ("\\boxed{12} or \\boxed{13}", "13", False),
    (A("3 or -3"), "3, -3", True),
    (A("-2 or -12"), "-2 \\text{ or } -12", True),
    (A("6, 8, and 10"), "6, 8\\text{, and }10", True),
    # missing answers
    ("", "5", False),
    (A(""), "5", False),
    (A("   "), "5", False),
    (BOX(""), "5", False),
    ("<think>it is 5</think>", "5", False),
    # region rules: <answer> beats </think> beats the whole response; last box wins
    ("<think>\\boxed{5}</think><answer>7</answer>", "7", True),
    ("<think>\\boxed{5}</think><answer>7</answer>", "5", False),
    ("<answer>5</answer> then <answer>7</answer>", "7", True),
    ("<think>maybe \\boxed{5}</think> so the answer is \\boxed{7}", "7", True),
    ("<think>the answer is 5</think>7", "7", True),
    ("first \\boxed{5}, finally \\boxed{7}", "7", True),
    ("first \\boxed{5}, finally \\boxed{7}", "5", False),
    (A("The answer is \\boxed{7}."), "7", True),
    ("\\boxed{\\frac{1}{2}} and then \\boxed{3", "\\frac{1}{2}", True),
    ("\\fbox{7}", "7", True),
    ("<think>x</think><answer>12", "12", True),
]


@pytest.mark.parametrize(("response", "gold", "expected"), CASES)
def test_equivalence_table(response, gold, expected):
    result = grade(response, gold)
    assert result.correct is expected, result
    assert result.reason in REASONS


def test_table_size():
    assert len(CASES) >= 60


def test_grade_batch_equals_grade():
    responses = [r for r, _, _ in CASES]
    golds = [g for _, g, _ in CASES]
    assert grade_batch(responses, golds) == [grade(r, g) for r, g in zip(responses, golds, strict=True)]
    assert grade_batch([], []) == []
    with pytest.raises(ValueError):
        grade_batch(["a"], [])


def test_is_correct():
    assert is_correct("\\boxed{2}", "2") is True
    assert is_correct("\\boxed{3}", "2") is False


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (A("12"), "correct"),
        (A("11"), "wrong"),
        (A("12 or 13"), "hedged"),
        ("\\boxed{12} or \\boxed{13}", "hedged"),
        (A(""), "no_answer"),
        ("<think>12</think>", "no_answer"),
        (A("x < 2 or x > 3"), "wrong"),  # a condition, not a hedge
    ],
)
def test_reasons(response, reason):
    assert grade(response, "12").reason == reason


def test_gold_unparseable():
    assert grade(A("5"), "").reason == "gold_unparseable"
    assert grade(A("5"), None).reason == "gold_unparseable"  # type: ignore[arg-type]
    assert grade(A("\\sin^2(t)"), "\\sin^2 t").reason == "gold_unparseable"
    assert grade(A("\\sin^2 t"), "\\sin^2 t").correct  # identical text still matches


def test_bad_inputs_never_raise():
    assert grade(None, "5").reason == "no_answer"  # type: ignore[arg-type]
    assert grade(A("\\frac{1}{0}"), "5").correct is False
    assert grade(A("}{}{"), "5").correct is False


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("<think>a</think><answer> 12 </answer>", "12"),
        ("<answer>1</answer><answer>2</answer>", "2"),
        ("<think>\\boxed{1}</think> The answer is $2$.", "2"),
        ("<think>1</think>", None),
        ("no tags, \\boxed{3} and \\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
        ("\\boxed{1} then \\boxed{2", "1"),  # the last *balanced* box
        ("\\boxed{ \\{1,2\\} }", "\\{1,2\\}"),  # escaped braces don't count
        ("Final answer: $\\sqrt{2}$.", "\\sqrt{2}"),
        ("**42**", "42"),
        ("The answer is \\(x+1\\)", "x+1"),
        ("答案是 12。", "12"),
        ("\\boxed{}", None),
        ("   ", None),
        ("<answer>5", "5"),
    ],
)
def test_extract_answer(response, answer):
    assert extract_answer(response) == answer


def test_reason_counts_updated():
    before = REASON_COUNTS.copy()
    grade_batch([A("1"), A("2"), A("")], ["1", "1", "1"])
    assert REASON_COUNTS["correct"] - before["correct"] == 1
    assert REASON_COUNTS["wrong"] - before["wrong"] == 1
    assert REASON_COUNTS["no_answer"] - before["no_answer"] == 1


def test_grade_is_frozen_dataclass():
    g = Grade(True, "correct", "1")
    with pytest.raises(AttributeError):
        g.correct = False  # type: ignore[misc]


def test_gold_is_parseable():
    assert gold_is_parseable("12")
    assert gold_is_parseable("\\frac{\\pi}{2}")
    assert gold_is_parseable("\\text{(C)}")
    assert gold_is_parseable("a + b + c")
    assert not gold_is_parseable("")
    assert not gold_is_parseable(None)  # type: ignore[arg-type]
    assert not gold_is_parseable("\\sin^2 t")


def test_same_answer():
    assert same_answer("1/2", "0.5")
    assert same_answer("\\frac{1}{2}", "0.5")
    assert same_answer("x^2+1", "1+x^2")
    assert same_answer("\\text{(C)}", "C")
    assert not same_answer("\\sqrt{2}", "\\sqrt{3}")
    assert not same_answer("", "1")
    assert same_answer("x = 2", "2")


def test_first_same_answer():
    assert first_same_answer("0.5", ["3", "\\sqrt{2}", "\\frac{\\sqrt{4}}{4}", "1/2"]) == 2
    assert first_same_answer("0.5", ["3", "1/2"]) == 1
    assert first_same_answer("x+1", ["x-1", "1-x"]) is None
    assert first_same_answer("1", []) is None


# ------------------------------------------------------------------ bounds, threads, processes

ADVERSARIAL = {
    "tower": "10^{10^{10^{10}}}",
    "tower2": "2^{2^{2^{2^{2^{2}}}}}",
    "digits": "9" * 5000,
    "digits_frac": "\\frac{" + "7" * 5000 + "}{3}",
    "parentheses": "(" * 300 + "1" + ")" * 300,
    "unbalanced": "\\frac{1}{2" + "{" * 50,
    "unbalanced_box": "\\boxed{\\frac{1}{2" + "}" * 100,
}


@pytest.fixture
def warm_pool():
    """Start the workers first, so that timings measure grading, not interpreter start-up."""
    assert grade(BOX("\\sqrt{4}"), "2").correct


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_inputs_are_bounded(name, warm_pool):
    timeout_s = 2.0
    text = ADVERSARIAL[name]
    for response, gold in ((A(text), "5"), (BOX(text), "5"), (A("5"), text)):
        start = time.monotonic()
        result = grade(response, gold, timeout_s=timeout_s)
        assert time.monotonic() - start < timeout_s + 3
        assert result.correct is False
        assert result.reason in REASONS and result.reason != "correct"
    start = time.monotonic()
    assert same_answer(text, "5", timeout_s=timeout_s) is False
    assert time.monotonic() - start < timeout_s + 3


def test_hung_worker_is_killed_and_replaced(monkeypatch, warm_pool):
    # Disable math-verify's own alarms so only the wall-clock kill can stop the tower.
    monkeypatch.setattr(verify, "_inner_timeout", lambda timeout_s: 1000)
    start = time.monotonic()
    result = grade(A("10^{10^{10^{10}}}"), "5", timeout_s=1.5)
    assert result.reason == "timeout"
    assert time.monotonic() - start < 1.5 + 3
    assert grade(BOX("\\sqrt{4}"), "2").correct  # the pool still works


def test_batch_with_timeouts_keeps_order(warm_pool):
    responses = [A("10^{10^{10^{10}}}"), BOX("\\frac{2}{4}"), A("7"), BOX("\\sqrt{9}")]
    golds = ["5", "0.5", "7", "3"]
    result = grade_batch(responses, golds, timeout_s=2.0)
    assert [g.correct for g in result] == [False, True, True, True]
    assert result[0].reason == "timeout"


def test_grading_from_other_threads():
    out: list[Grade] = []
    thread = threading.Thread(target=lambda: out.append(grade(BOX("\\sqrt{4}"), "2")))
    thread.start()
    thread.join(60)
    assert out == [Grade(True, "correct", "\\sqrt{4}")]
    pairs = [(BOX(f"\\frac{{{i}}}{{2}}"), str(i / 2)) for i in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: grade(*p), pairs))
    assert all(r.correct for r in results)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_works_after_fork():
    assert grade(BOX("\\sqrt{4}"), "2").correct  # parent pool is running
    pid = os.fork()
    if pid == 0:  # child: must start its own pool, not use the parent's sockets
        try:
            ok = grade(BOX("\\sqrt{9}"), "3").correct and not grade(BOX("x+1"), "x-1").correct
            verify.shutdown()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert grade(BOX("\\sqrt{16}"), "4").correct  # parent pool unaffected


def test_workers_argument_resizes_pool():
    result = grade_batch([BOX("\\sqrt{4}")] * 3, ["2"] * 3, workers=1)
    assert all(g.correct for g in result)
    assert len(verify._POOL.workers) == 1
    grade_batch([BOX("\\sqrt{4}")], ["2"], workers=verify.DEFAULT_WORKERS)
    assert len(verify._POOL.workers) == verify.DEFAULT_WORKERS


def test_fast_path_agrees_with_math_verify():
    """The in-process number rules give math-verify's verdicts (documented exception: none here)."""
    pairs = [
        ("12", "12.0"),
        ("12", "12.5"),
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{3}", "0.33"),
        ("\\frac{1}{3}", "0.333333"),
        ("2/6", "1/3"),
        ("25%", "25"),
        ("25%", "0.25"),
        ("25%", "2.5"),
        ("-1", "1"),
        ("1000", "1,000"),
        ("\\$18.90", "18.9"),
        ("90^\\circ", "90"),
        ("0.0873", "0.08730004"),
    ]
    for gold, pred in pairs:
        quick = verify._quick_verdict(verify._normalize(pred), verify._normalize(gold))
        assert quick is not None, (gold, pred)
        job = ("grade", (verify._parse_forms(gold), verify._parse_forms(pred), 2))
        [(slow, _)] = verify._run_jobs([job], 5.0, None)
        assert (quick == "correct") == slow, (gold, pred, quick, slow)


# ------------------------------------------------------------------ gold self-check (small files)

SMALL_FILES = [
    "math500/test",
    "aime24/test",
    "aime25/test",
    "amc23/test",
    "cmath/test",
    "gsm8k/test",
    "mgsm/test",
]


def _benchmarks_dir() -> Path:
    env = os.environ.get("R1_BENCHMARKS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


@pytest.mark.parametrize("name", SMALL_FILES)
def test_every_gold_grades_against_itself(name):
    data_dir = _benchmarks_dir()
    if not (data_dir / f"{name}.jsonl").exists():
        pytest.skip(f"{data_dir / name}.jsonl not found (set R1_BENCHMARKS_DIR)")
    golds = [row["answer"] for row in load_benchmark(*name.split("/"), data_dir=data_dir)]
    for template in (A, BOX):
        results = grade_batch([template(g) for g in golds], golds)
        misses = [(g, r.reason) for g, r in zip(golds, results, strict=True) if not r.correct]
        assert not misses, misses[:10]
    if name in ("math500/test", "cmath/test"):  # the varied ones: also through math-verify alone
        jobs = []
        for gold in golds:
            forms = verify._parse_forms(verify._normalize_gold(gold))
            jobs.append(("grade", (forms, forms, 2)))
        results = verify._run_jobs(jobs, 5.0, None)
        assert all(ok for ok, _ in results), [g for g, (ok, _) in zip(golds, results, strict=True) if not ok]


def test_interrupted_batch_discards_pool(monkeypatch, warm_pool):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        grade(BOX("\\sqrt{9}"), "3")
    assert verify._POOL is None  # the busy worker's late answer can't leak into later jobs
    monkeypatch.undo()
    assert grade(BOX("\\sqrt{16}"), "5").correct is False
    assert grade(BOX("\\sqrt{16}"), "4").correct


def test_dead_idle_workers_are_replaced(warm_pool):
    for worker in verify._POOL.workers:
        worker.proc.kill()
        worker.proc.wait()
    assert grade(BOX("\\sqrt{25}"), "5") == Grade(True, "correct", "\\sqrt{25}")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


_CHILD = """
import sys, time
from eval import verify
assert verify.grade("\\\\boxed{\\\\sqrt{4}}", "2").correct
print(" ".join(str(w.proc.pid) for w in verify._POOL.workers), flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("ending", ["exit", "killed"])
def test_workers_do_not_outlive_the_parent(ending):
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "hang" if ending == "killed" else "exit"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    pids = [int(p) for p in child.stdout.readline().split()]
    assert pids
    if ending == "killed":
        child.send_signal(signal.SIGKILL)  # no atexit: workers must notice EOF and exit
    child.wait(30)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
