"""Tests for eval.verify: extraction policy, equivalence table, bounds, threads, batches."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from data.benchmarks import load_benchmark
from eval import verify, verify_pool
from eval.answers import normalize, parse_number
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
    (A("12 apples."), "12", False),  # a count of things the question never names (tested with questions below)
    (A("She has 12 apples."), "12", False),  # prose around the number
    (A("She has 13 apples."), "12", False),
    # fractions and decimals
    (BOX("0.5"), "\\frac{1}{2}", True),
    (BOX("1/2"), "\\frac12", True),
    (BOX("\\dfrac{1}{2}"), "0.5", True),
    (BOX("0.33"), "\\frac{1}{3}", False),
    (BOX("0.333333"), "\\frac{1}{3}", False),  # a rounding, and the question does not ask for one
    (A("1/3"), "2/6", True),
    (A("\\frac{2}{3}"), "6/9", True),
    (A("\\frac{1}{29322216}"), "\\dfrac{1}{29,\\!322,\\!216}", True),
    # percentages (cmath): the percent sign is a unit; a percent is never its hundredth
    (A("25\\%"), "25%", True),
    (A("25"), "25%", True),
    (A("25%"), "25", True),
    (A("0.25"), "25%", False),
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
    ("<answer>5</answer> then <answer>7</answer>", "7", False),  # two different answers offered: hedged
    ("<think>maybe \\boxed{5}</think> so the answer is \\boxed{7}", "7", True),
    ("<think>the answer is 5</think>7", "7", True),
    ("first \\boxed{5}, finally \\boxed{7}", "7", False),  # as "It could be 5. The answer is 7": hedged
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


# ------------------------------------------------------------------ the answer policy (issue 16)

# Answers that are not answers: each was graded correct before the policy (the probe).
NOT_ANSWERS = [
    # echo: the question's own arithmetic, or arithmetic that evaluates to the gold
    (A("347 + 589"), "936"),
    (A(" 347 + 589 "), "936"),
    (BOX("23 + 45 - 17"), "51"),
    (A("589 - 347"), "242"),
    (BOX("\\binom{8}{4}"), "70"),
    (BOX("2^{10}"), "1024"),
    (BOX("\\log_2 8"), "3"),
    (BOX("\\sqrt{4}"), "2"),
    (BOX("\\sqrt{16}"), "4"),
    (BOX("5!"), "120"),
    (BOX("3 \\times 4"), "12"),
    (BOX("12 \\cdot 1"), "12"),
    (BOX("10^{3}"), "1000"),
    (BOX("2 \\cdot 2.5"), "5"),
    (BOX("\\frac{1}{2} + \\frac{1}{4}"), "\\frac{3}{4}"),
    (BOX("x = 2 + 3"), "5"),
    (BOX("\\frac{24}{2}"), "12"),  # a fraction that is a whole number: a division left to do
    (BOX("1872/2"), "936"),
    (A("(347 + 589)"), "936"),
    (BOX("\\sqrt{4}, \\sqrt{9}"), "2, 3"),  # a list of numbers needs numbers
    (BOX("(1+1, 3)"), "(2, 3)"),
    # prose and hedges around the right number
    (A("first 5"), "5"),
    (A("4 then 5"), "5"),
    (A("not 6 but 5"), "5"),
    (A("6 otherwise 5"), "5"),
    (A("5/6?"), "5"),
    (A("It could be 6. The answer is 5"), "5"),
    (A("5 or 6. It is 5"), "5"),
    (A("5 is the answer"), "5"),
    (A("So the total is 5"), "5"),
    ("<think> 2 + 3 = 5 so it is 5", "5"),  # never closed: no answer region, prose
    (A("5x"), "5"),
    (A("5i"), "5"),
    (BOX("\\text{maybe } 5"), "5"),
    (A("The answer is either 5 or 6"), "5"),
    # digits split by spaces
    (A("1 2"), "12"),
    (A("9 3 6"), "936"),
    (A("93 6"), "936"),
    (A("1,2"), "12"),
    # a percent is not its hundredth; tolerance is tight
    (A("500\\%"), "5"),
    (A("0.25"), "25\\%"),
    (A("4.9999999"), "5"),
    (A("5.0000004"), "5"),
    (A("11111111101"), "11111111100"),
    (A("0.33"), "\\frac{1}{3}"),
    # found by a red-team pass: fractions, scientific notation, labels, units, bases, lists, tags
    (A("\\frac{1872}{2}"), "936"),
    (A("\\frac{-1872}{-2}"), "936"),
    (A("9360\\times 10^{-1}"), "936"),
    (A("936 \\times 10^0"), "936"),
    (A("936\\frac{0}{7}"), "936"),
    (A("\\not=936"), "936"),
    (A("\\ne=936"), "936"),
    (A("936 thousand"), "936"),
    (A("936 dozen"), "936"),
    (A("936π"), "936"),
    (A("936 squared"), "936"),
    (A("936 factorial"), "936"),
    (A("936\\text{!}"), "936"),
    (A("5 \\text{ (maybe six)}"), "5"),
    (A("936 \\text{ oder fünf}"), "936"),
    (A("936 wrong"), "936"),
    (A("936 不对"), "936"),
    (A("936万"), "936"),
    (A("0,936"), "936"),
    (A("0{,}936"), "936"),
    (A("52_7"), "52_8"),
    (A("52_{10}"), "52_8"),
    (A("1011_3"), "1011_2"),
    (A("31 or 250"), "31,250"),
    (A("58 \\text{ and } 500"), "58,500"),
    (A("x+2 = x+1"), "x+1"),
    (A("5 = 2\\sqrt{2}"), "2\\sqrt{2}"),
    (A("4\\pi squared"), "4\\pi"),
    (A("(-3,3)"), "3, -3"),
    (A("\\boxed{5} oder \\boxed{936}"), "936"),
    (A("\\boxed{5}, \\boxed{936}"), "936"),
    (A("\\boxed{5} \\boxed{936}"), "936"),
    ("<think><answer>936</answer></think> The final answer is \\boxed{5}.", "936"),
    (A("10^{10^{10}}"), "x + 1"),
    # a second red-team pass: hedges around boxes and blocks, unit words, \text{} on symbolic answers
    ("<think>ok</think> $\\boxed{5}$ or $\\boxed{936}$", "936"),
    ("<think>ok</think> \\boxed{936} or 5", "936"),
    ("<think>ok</think> <answer>5 or \\boxed{936}</answer>", "936"),
    ("<think>ok</think> \\boxed{5} or maybe \\boxed{936}", "936"),
    ("<think>ok</think> \\boxed{5} and \\boxed{936}", "936"),
    ("<think>ok</think> \\boxed{5} oppure \\boxed{936}", "936"),
    ("<think>ok</think> <answer>5</answer> or <answer>936</answer>", "936"),
    ("<think>ok</think> <answer>5 or </think> 936</answer>", "936"),
    ("<think>ok</think> $\\boxed{D}$ or $\\boxed{C}$", "\\text{(C)}"),
    (A("936 guess"), "936"),
    (A("936 \\text{ tenths}"), "936"),
    (A("936 тысяч"), "936"),
    (A("936萬"), "936"),
    (A("936多"), "936"),
    (A("5 sechs"), "5"),
    (A("5\u0338"), "5"),
    (A("25 bps"), "25\\%"),
    (A("30 \\text{ radians}"), "30^\\circ"),
    (A("5.4 \\text{ dollars}"), "5.4 \\text{ cents}"),
    (A("2\\sqrt{2} \\text{ not } 3\\sqrt{2}"), "2\\sqrt{2}"),
    (A("\\frac{\\pi}{6} \\text{ oder } \\frac{\\pi}{3}"), "\\frac{\\pi}{6}"),
    (A("y = 2x+3 \\text{ ou } y=x"), "y = 2x + 3"),
    (A("2\\sqrt{2} \\text{ (guess)}"), "2\\sqrt{2}"),
    (A("3,-3 \\text{ etc}"), "3, -3"),
    (A("z = c"), "\\text{(C)}"),
    # empty content
    (BOX(""), "5"),
    (BOX("  "), "5"),
    (A(""), "5"),
    # prose against symbolic golds
    (BOX("it is \\sqrt{8}"), "2\\sqrt{2}"),
    (A("the interval (3, 4]"), "(3,4]"),
]

# The honest ways to write the same answers: still correct.
HONEST = [
    (A("936"), "936"),
    (A(" 936 "), "936"),
    (BOX("51"), "51"),
    (BOX("70"), "\\binom{8}{4}"),  # a symbolic gold keeps symbolic equivalence
    (BOX("1024"), "2^{10}"),
    (BOX("\\frac{3}{4}"), "0.75"),
    (BOX("3/4"), "\\frac34"),
    (BOX("\\frac{2}{4}"), "\\frac12"),
    (BOX("\\frac{25}{2}"), "12.5"),  # a fraction of integers is a number
    (BOX("2\\frac{1}{2}"), "2.5"),
    (BOX("2.5"), "2\\frac{1}{2}"),
    (BOX("1.5 \\times 10^{3}"), "1500"),
    (BOX("1500"), "1.5\\times 10^{3}"),
    (BOX("1.5e3"), "1500"),
    (A("x = 5"), "5"),
    (A("5"), "x=5"),
    (A("5 square inches"), "5"),
    (A("5 \\text{ cm}^2"), "5"),
    (A("5 km/h"), "5"),
    (A("18元"), "18"),
    (A("5^\\circ"), "5"),
    (A("5°"), "5^\\circ"),
    (A("5 degrees"), "5^\\circ"),
    (A("\\$5.00"), "5"),
    (A("-\\$5"), "-5"),
    (A("−5"), "-5"),
    (A("5\\%"), "5"),  # the percent sign is a unit
    (A("1,000"), "1000"),
    (A("1{,}000"), "1,000"),
    (A("(5)"), "5"),
    (A("\\textbf{5}"), "5"),
    (A("The final answer is 5."), "5"),
    (A("**Answer:** 5"), "5"),
    (A("5.0"), "5"),
    (A("5.000000001"), "5"),  # relative tolerance 1e-9 for decimals
    (BOX("\\sqrt{8}"), "2\\sqrt{2}"),
    (BOX("x^2+2x+1"), "(x+1)^2"),
    (BOX("-3, 3"), "3, -3"),
    (BOX("\\pm 3"), "3, -3"),
    (BOX("2 \\le x < 5"), "[2, 5)"),
    (BOX("480 + 480\\sqrt{3} feet"), "480 + 480\\sqrt{3}\\text{ feet}"),
    (BOX("\\text{(C)}"), "C"),
    # found by a red-team pass: honest forms that were graded wrong
    (A("x \\in (3,4]"), "(3,4]"),
    (A("x \\in [2,5)"), "[2, 5)"),
    (A("x \\in (2,\\infty)"), "(2,\\infty)"),
    (A("1 \\text{ and } 2"), "\\{1,2\\}"),
    ("<think>t</think>\nFinal Answer: The final answer is $936$. I hope it is correct.", "936"),
    (A("\\boxed{{936}}"), "936"),
    (A("12 cm²"), "12"),
    (A("12 m³"), "12"),
    (A("30°C"), "30"),
    (A("30℃"), "30"),
    (A("5\\text{ m}/\\text{s}"), "5"),
    (A("12 \\text{km}/\\text{h}"), "12"),
    (A("0.\\overline{3}"), "\\frac{1}{3}"),
    (A("0.1\\overline{6}"), "\\frac{1}{6}"),
    (A("\\left(-\\frac{1}{2}\\right)"), "-\\frac12"),
    (A("\\left(-5\\right)"), "-5"),
    (A("(2,∞)"), "(2,\\infty)"),
    (A("3√13"), "3\\sqrt{13}"),
    (A("90\\textdegree"), "90"),
    (A("\\therefore 936"), "936"),
    (A("\\textdollar 18.90"), "18.90"),
    (A("52_8"), "52_8"),
    (A("52"), "52_8"),
    (A("58500"), "58,500"),
    (A("f(x) = x + 1"), "x+1"),
    # a second red-team pass
    (A("m+n = 204"), "204"),
    (A("f(5) = 18"), "18"),
    (A("AB = 2\\sqrt{2}"), "2\\sqrt{2}"),
    (A("(a,b,c) = (6,31,-1)"), "(6,31,-1)"),
    ("<think>t</think> Final answer: **18**", "18"),
    ("<think>t</think> **Answer: 18**", "18"),
    ("<think>t</think> #### 18", "18"),
    ("<think>t</think> Ответ: 18", "18"),
    ("<think>t</think> La respuesta es 18.", "18"),
    ("<think>t</think> 答え：18", "18"),
    (A("12％"), "12%"),
    (A("39千克"), "39"),
    (A("1392 千米"), "1392"),
    (A("864 \\text{ in}^2"), "864 \\mbox{ inches}^2"),
    (A("18 cm^2"), "18"),
    (A("\\left(\\frac{270}{7}\\right)^\\circ"), "\\frac{270}7\\text{ degrees}"),
    (A("(C) Plane"), "\\text{(C)}"),
    (A("an ellipse"), "\\text{ellipse}"),
    (A("137 1/2"), "137\\frac{1}{2}"),
    (A("4½"), "4.5"),
    (A("5.4¢"), "5.4"),
    (A("18 (dollars)"), "18"),
    (A("18（元）"), "18"),
    (A("\\frac{1}{2} \\text{ or } 0.5"), "\\frac{1}{2}"),
    (A("936_{10}"), "936"),
    (A("x = 1 \\text{ or } x = -2"), "1,-2"),
    ("<think>t</think> \\boxed{3} and \\boxed{-3}", "3, -3"),
]

# The echo rule: an answer copied from the question (graded with the problem given).
ECHOES = [
    # (response, gold, problem, expected)
    (A("\\sqrt{242}"), "11\\sqrt2", "Simplify $\\sqrt{242}$.", False),
    (A("11\\sqrt{2}"), "11\\sqrt2", "Simplify $\\sqrt{242}$.", True),
    (A("ab+5b+2a+10"), "(a+5)(b+2)", "Factor $ab+5b+2a+10$.", False),
    (A("(a+5)(b+2)"), "(a+5)(b+2)", "Factor $ab+5b+2a+10$.", True),
    (A("(-k + 4) + (-2 + 3k)"), "2k+2", "Simplify $(-k + 4) + (-2 + 3k)$.", False),
    (A("x^2 - 5x - 4 \\le 10"), "x \\in [-2,7]", "For what values of $x$ is it true that $x^2 - 5x - 4 \\le 10$?", False),
    (A("\\frac{3}{20}"), "0.15", "Express $\\frac{3}{20}$ as a decimal.", False),
    (A("0.15"), "0.15", "Express $\\frac{3}{20}$ as a decimal.", True),
    (A("\\frac{84}{144}"), "\\frac{7}{12}", "Simplify $\\frac{84}{144}$.", False),
    (A("1.45"), "\\frac{29}{20}", "Express $1.45$ as a common fraction.", False),
    (A("\\frac{2}{3}"), "\\frac23", "Which is largest: $\\frac{1}{2}$, $0.6$ or $\\frac{2}{3}$?", True),
    (A("347 + 589"), "936", "What is 347 + 589?", False),
    (A("936"), "936", "What is 347 + 589?", True),
    (A("589"), "936", "What is 347 + 589?", False),
    (A("12"), "12", "What is 12 + 0?", True),  # an integer may be copied: it is a choice, not an echo
    # a second red-team pass: the same copies, rewritten
    (A("x^{2} - 5x - 4 \\leq 10"), "x \\in [-2,7]", "For what $x$ is $x^2 - 5x - 4 \\le 10$?", False),
    (A("-4<x^4+4x^2<21"), "(-\\sqrt{3}, \\sqrt{3})", "Solve $-4<x^{4}+4x^{2}<21$.", False),
    (A("\\arcsin(-1/2)"), "-\\frac{\\pi}{6}", "Compute $\\arcsin \\left( -\\frac{1}{2} \\right).$", False),
    (A("(1+2i)\\cdot 6-3i"), "6+9i", "Evaluate $(1+2i)6-3i$.", False),
    (A("(ab+5b+2a+10)"), "(a+5)(b+2)", "Factor $ab+5b+2a+10$.", False),
    (A("10+ab+5b+2a"), "(a+5)(b+2)", "Factor $ab+5b+2a+10$.", False),
    (A("(1+x)^2"), "x^2+2x+1", "Expand $(x+1)^2$.", False),
    (A("3/20"), "0.15", "Express $\\frac{3}{20}$ as a decimal.", False),
    (A("(\\frac{57}{160})"), ".35625", "Write $\\frac{57}{160}$ as a terminating decimal.", False),
    (A("84/144"), "\\frac{7}{12}", "Simplify $\\frac{84}{144}$.", False),
    (A("1.450"), "\\frac{29}{20}", "Express $1.45$ as a common fraction.", False),
    (A("0.5"), "\\frac{1}{2}", "[asy] draw((0,0)--(0.5,1)); [/asy] What is the probability?", True),
    (A("\\frac{1}{2}"), "\\frac{1}{2}", "[asy] draw((0,0)--(0.5,1)); [/asy] What is the probability?", True),
    (A("6"), "6", "A toy costs $6.00. How much do two cost, divided by two?", True),
]


# Roundings of exact answers (response, gold, question, expected): wrong unless the question asks for a
# decimal or a rounded value, or the gold is one; math-verify's 6-place comparison accepted the first ones.
RADICAL = "Find the diagonal of a square of side 2. Express your answer in simplest radical form."
ROUNDINGS = [
    (A("2.828427"), "2\\sqrt{2}", RADICAL, False),
    (A("2.8284271247461903"), "2\\sqrt{2}", RADICAL, False),
    (A("2\\sqrt{2} \\approx 2.828427"), "2\\sqrt{2}", RADICAL, False),
    (A("\\frac{2828427}{1000000}"), "2\\sqrt{2}", RADICAL, False),
    (A("2.828427"), "2\\sqrt{2}", None, False),
    (A("6.283185"), "2\\pi", "What is the circumference of a circle of radius 1?", False),
    (A("6.2831853"), "2\\pi", "What is the circumference of a circle of radius 1?", False),
    (A("(1.414214, 2)"), "(\\sqrt{2}, 2)", "Find the point where the curves meet.", False),
    (A("0.693147"), "\\ln 2", "Evaluate the integral of 1/x from 1 to 2.", False),
    (A("0.333333"), "\\frac{1}{3}", "What is 1 divided by 3?", False),
    (A("0.666667"), "\\frac{2}{3}", None, False),
    # exact answers stay right, and decimals where the question asks for one
    (A("2\\sqrt{2}"), "2\\sqrt{2}", RADICAL, True),
    (A("\\sqrt{8}"), "2\\sqrt{2}", RADICAL, True),
    (A("1.5\\sqrt{2}"), "\\frac{3\\sqrt{2}}{2}", "Simplify.", True),
    (A("0.333333"), "\\frac{1}{3}", "Express $\\frac{1}{3}$ as a decimal to six places.", True),
    (A("0.666667"), "\\frac{2}{3}", "Round $\\frac{2}{3}$ to six decimal places.", True),
    (A("0.333333"), "\\frac{1}{3}", "1 除以 3 等于多少？（精确到小数点后六位）", True),
    (A("2.83"), "2.83", "Give the diagonal to the nearest hundredth.", True),
    (A("0.25"), "\\frac{1}{4}", "What is the probability?", True),  # exact: a finite decimal
]


# What may follow a number (response, gold, question, expected): units, and the things the question counts;
# any other word is prose, whatever it says ("nope", "wrongly", a number word of another language).
APPLES = "Tom has 3 apples and buys 2 more. How many apples does he have?"
PINGGUO = "汤姆有3个苹果，又买了2个，一共有几个苹果？"
AFTER_THE_NUMBER = [
    (A("5 nope"), "5", APPLES, False),
    (A("5 doubtful"), "5", APPLES, False),
    (A("5 wrongly"), "5", APPLES, False),
    (A("5 cinco"), "5", APPLES, False),
    (A("5 fünf"), "5", APPLES, False),
    (A("5 пять"), "5", APPLES, False),
    (A("5 \\text{ nope}"), "5", APPLES, False),
    (A("5个香蕉"), "5", PINGGUO, False),  # bananas: not what the question counts
    (A("x=2, y=3"), "(2, 3)", "Solve the system $x+y=5$, $x-y=-1$.", False),  # named values are no ordered pair
    (A("5 apples"), "5", APPLES, True),
    (A("12 apples."), "12", "How many apples are left?", True),
    (A("5 apple"), "5", APPLES, True),
    (A("5 cm"), "5", "How long is the side?", True),
    (A("5 \\text{ (dollars)}"), "5", "How much does the pen cost?", True),
    (A("答：5"), "5", PINGGUO, True),
    (A("共5个"), "5", PINGGUO, True),
    (A("5个苹果"), "5", PINGGUO, True),
    (A("18 ডলার"), "18", "জ্যানেট প্রতিদিন কৃষকদের বাজারে কত ডলার উপার্জন করেন?", True),
]


@pytest.mark.parametrize(("response", "gold", "problem", "expected"), AFTER_THE_NUMBER)
def test_what_may_follow_the_number(response, gold, problem, expected):
    assert grade(response, gold, problem=problem).correct is expected


@pytest.mark.parametrize(("response", "gold", "problem", "expected"), ROUNDINGS)
def test_a_rounding_of_an_exact_answer_is_wrong_unless_asked_for(response, gold, problem, expected):
    assert grade(response, gold, problem=problem).correct is expected


@pytest.mark.parametrize(("response", "gold", "problem", "expected"), ECHOES)
def test_echo_of_the_question(response, gold, problem, expected):
    assert grade(response, gold, problem=problem).correct is expected
    [batched] = grade_batch([response], [gold], problems=[problem])
    assert batched.correct is expected


@pytest.mark.parametrize(("response", "gold"), NOT_ANSWERS)
def test_not_an_answer_is_wrong(response, gold):
    result = grade(response, gold)
    assert result.correct is False, result


@pytest.mark.parametrize(("response", "gold"), HONEST)
def test_the_honest_answer_is_correct(response, gold):
    result = grade(response, gold)
    assert result.correct is True, result


@pytest.mark.parametrize(("text", "expected"), [
    ("12", 12), ("-3", -3), ("1,000", 1000), ("0.5", 0.5), (".5", 0.5), ("\\frac{3}{4}", 0.75),
    ("\\frac34", 0.75), ("\\frac 3 4", 0.75), ("3/4", 0.75), ("-\\frac{1}{2}", -0.5), ("\\frac{-1}{2}", -0.5),
    ("2\\frac{1}{2}", 2.5), ("1.5\\times 10^{3}", 1500), ("2\\cdot 10^{-2}", 0.02), ("25\\%", 25),
    ("\\$18.90", 18.9), ("90^\\circ", 90), ("90^{\\circ}", 90), ("864 \\mbox{ inches}^2", 864),
    ("x = 5", 5), ("x_1 = 5", 5), ("\\theta = 5", 5), ("(5)", 5), ("5 m", 5),
    ("2+3", None), ("2^{10}", None), ("\\sqrt{4}", None), ("\\binom{8}{4}", None), ("5!", None),
    ("1 2", None), ("first 5", None), ("5 or 6", None), ("5/6?", None), ("2\\frac{5}{3}", None),
    ("5 \\pi", None), ("\\frac{1}{0}", None), ("10^3", None), ("5 then 6", None), ("5 a b c d", None),
    ("5 - 0", None), ("-\\$-5", None), ("", None),
])
def test_parse_number(text, expected):
    number = parse_number(normalize(text))
    if expected is None:
        assert number is None, number
    else:
        assert number is not None and float(number.value) == pytest.approx(expected, rel=1e-12)


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
    assert first_same_answer("\\frac{\\sqrt{2}}{2}", ["3", "\\sqrt{3}", "\\frac{1}{\\sqrt{2}}", "\\sqrt{0.5}"]) == 2
    assert first_same_answer("0.5", ["3", "\\frac{\\sqrt{4}}{4}", "1/2"]) == 2  # a number is the same only as a number
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
    assert grade(BOX("\\sqrt{8}"), "2\\sqrt{2}").correct


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_inputs_are_bounded(name, warm_pool):
    timeout_s = 2.0
    text = ADVERSARIAL[name]
    for response, gold in ((A(text), "5"), (BOX(text), "5"), (A(text), "x + 1"), (BOX(text), "2\\sqrt{2}"),
                           (A("5"), text)):
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
    result = grade(A("(10^{10})!"), "x + 1", timeout_s=1.5)  # a symbolic gold: math-verify decides
    assert result.reason == "timeout"
    assert time.monotonic() - start < 1.5 + 3
    assert grade(BOX("\\sqrt{8}"), "2\\sqrt{2}").correct  # the pool still works


def test_batch_with_timeouts_keeps_order(warm_pool):
    responses = [A("(10^{10})!"), BOX("\\frac{2}{4}"), A("7"), BOX("\\sqrt{18}")]
    golds = ["x + 1", "0.5", "7", "3\\sqrt{2}"]
    result = grade_batch(responses, golds, timeout_s=2.0)
    assert [g.correct for g in result] == [False, True, True, True]
    assert result[0].reason == "timeout"


def test_grading_from_other_threads():
    out: list[Grade] = []
    thread = threading.Thread(target=lambda: out.append(grade(BOX("\\sqrt{8}"), "2\\sqrt{2}")))
    thread.start()
    thread.join(60)
    assert out == [Grade(True, "correct", "\\sqrt{8}")]
    pairs = [(BOX(f"\\frac{{{i}}}{{2}}"), str(i / 2)) for i in range(1, 17, 2)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: grade(*p), pairs))
    assert all(r.correct for r in results)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_works_after_fork():
    assert grade(BOX("\\sqrt{8}"), "2\\sqrt{2}").correct  # parent pool is running
    pid = os.fork()
    if pid == 0:  # child: must start its own pool, not use the parent's sockets
        try:
            ok = grade(BOX("\\sqrt{18}"), "3\\sqrt{2}").correct and not grade(BOX("x+1"), "x-1").correct
            verify.shutdown()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert grade(BOX("\\sqrt{32}"), "4\\sqrt{2}").correct  # parent pool unaffected


def test_workers_argument_resizes_pool():
    result = grade_batch([BOX("\\sqrt{8}")] * 3, ["2\\sqrt{2}"] * 3, workers=1)
    assert all(g.correct for g in result)
    assert verify_pool.pool_size() == 1
    grade_batch([BOX("\\sqrt{8}")], ["2\\sqrt{2}"], workers=verify.DEFAULT_WORKERS)
    assert verify_pool.pool_size() == verify.DEFAULT_WORKERS


def test_in_process_number_rules_agree_with_math_verify():
    """Where both decide, the in-process number rules give math-verify's verdicts, except where the
    policy deliberately differs (DELIBERATELY_STRICTER below)."""
    pairs = [
        ("12", "12.0"),
        ("12", "12.5"),
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{3}", "0.33"),
        ("2/6", "1/3"),
        ("25%", "25"),
        ("25%", "2.5"),
        ("-1", "1"),
        ("1000", "1,000"),
        ("\\$18.90", "18.9"),
        ("90^\\circ", "90"),
    ]
    for gold, pred in pairs + DELIBERATELY_STRICTER:
        quick = verify._decide(normalize(pred), normalize(gold), multi=False)
        assert quick is not None, (gold, pred)
        job = ("grade", (verify._parse_forms(gold), verify._parse_forms(pred), 2))
        [(slow, _)] = verify._run_jobs([job], 5.0)
        if (gold, pred) in DELIBERATELY_STRICTER:
            assert slow and quick == "wrong", (gold, pred, quick, slow)
        else:
            assert (quick == "correct") == slow, (gold, pred, quick, slow)


# math-verify calls these equal; the answer policy does not (a percent is not its hundredth,
# arithmetic left to do is no answer, prose is no answer).
DELIBERATELY_STRICTER = [
    ("25%", "0.25"),
    ("5", "500\\%"),
    ("936", "347 + 589"),
    ("1024", "2^{10}"),
    ("70", "\\binom{8}{4}"),
    ("2", "\\sqrt{4}"),
    ("0.0873", "0.08730004"),  # relative tolerance 1e-9, not math-verify's
    ("\\frac{1}{3}", "0.333333"),  # a rounding, where the question does not ask for a decimal
]


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


def test_an_interrupted_wait_never_leaks_an_answer_into_later_jobs(warm_pool):
    """Ctrl-C while a job runs: the caller gets KeyboardInterrupt; the job's late answer (here a
    "correct") must not be read as the answer to the next job (a wrong one)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            verify._run_jobs([("sleep", (1.0, 1))] * verify.DEFAULT_WORKERS, 5.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert grade(BOX("\\sqrt{32}"), "5\\sqrt{2}").correct is False
    assert grade(BOX("\\sqrt{32}"), "4\\sqrt{2}").correct


def test_dead_idle_workers_are_replaced(warm_pool):
    for pid in verify_pool.worker_pids():
        os.kill(pid, 9)
    time.sleep(0.2)
    assert grade(BOX("\\sqrt{50}"), "5\\sqrt{2}") == Grade(True, "correct", "\\sqrt{50}")


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
from eval import verify_pool
assert verify.grade("\\\\boxed{\\\\sqrt{8}}", "2\\\\sqrt{2}").correct
print(" ".join(str(p) for p in verify_pool.worker_pids()), flush=True)
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


# ------------------------------------------------------------------ the pool's queue


@pytest.fixture
def one_worker():
    verify._run_jobs([("sleep", (0, 1))], 5.0, workers=1)
    yield
    verify._run_jobs([("sleep", (0, 1))], 5.0, workers=verify.DEFAULT_WORKERS)


def test_queued_jobs_are_graded_while_workers_restart(monkeypatch, one_worker):
    """Every hang kills the only worker; the jobs queued behind the hangs wait for the new worker and
    are graded, however long the restarts take in all (each start has its own deadline)."""
    monkeypatch.setattr(verify_pool, "STARTUP_TIMEOUT_S", 3.0)
    hang = ("sleep", (30, 1))
    sqrt8 = verify._prepare(BOX("\\sqrt{8}"), "2\\sqrt{2}")[1]
    jobs = [hang] * 4 + [(sqrt8[0], (*sqrt8[1], 1))]
    start = time.monotonic()
    results = verify._run_jobs(jobs, 1.0)
    assert time.monotonic() - start > 3.0  # longer than one start-up deadline in all
    assert results == [(False, "timeout")] * 4 + [(True, "correct")]


def test_a_small_call_does_not_wait_behind_another_threads_batch(one_worker):
    """One worker busy with a batch of 6 half-second jobs from thread A; thread B's single job, sent
    while A's batch is served, gets the worker next (round robin) and is answered long before A."""
    finished: dict[str, float] = {}

    def batch_a():
        verify._run_jobs([("sleep", (0.5, 1))] * 6, 5.0)
        finished["a"] = time.monotonic()

    thread = threading.Thread(target=batch_a)
    thread.start()
    time.sleep(0.3)
    assert grade(BOX("\\sqrt{8}"), "2\\sqrt{2}").correct
    finished["b"] = time.monotonic()
    thread.join(30)
    assert finished["b"] < finished["a"] - 1.0


# Inputs that once ran in the calling process before any time bound applied (a quadratic regex on
# runs of whitespace took 237 s at 100,000 spaces), and other degenerate samples.
HUGE = {
    "spaces": "1" + " " * 100_000 + "x2",
    "newlines": "1" + "\n" * 100_000 + "2",
    "digits": "9" * 100_000,
    "spaced digits": "1 " * 50_000,
    "commas": "1," * 50_000,
    "braces": "\\boxed{" * 20_000 + "1" + "}" * 20_000,
    "unclosed boxes": "\\boxed{" * 50_000,
    "answer tags": "<answer>" * 20_000 + "1" + "</answer>" * 20_000,
    "text commands": "\\text{a}" * 20_000,
    "percent": "1" + "\\%" * 50_000,
    "or": "1 or " * 30_000,
    "words": "the answer is " * 20_000 + "12",
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_degenerate_answers_are_graded_within_the_bound(name, warm_pool):
    """A correctness bound, not a speed target: no grading call may outlive its 5 s budget, whatever
    the input (scripts/bench_verify.py prints the measured worst case)."""
    text = HUGE[name]
    for response in (text, A(text), BOX(text), "<think>" + text + "</think> 12"):
        for gold in ("12", "x + 1", "(3,4]"):
            start = time.monotonic()
            result = grade(response, gold)
            assert time.monotonic() - start < 5.0, (name, gold)
            assert result.reason in REASONS
