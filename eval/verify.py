"""Grading of model responses against gold final answers: the project's one answer policy.

Rewards (``stages.training.rewards.accuracy_reward``), the cold-start and rejection filters and every
evaluation grade with this module, so what RL is paid for is what the reports count.

Public API
----------
``extract_answer(response) -> str | None``
    Where the answer is read from (last ``<answer>`` block, else after ``</think>``, else the whole
    response; in it the last balanced ``\\boxed{}``; a leading "The final answer is" trimmed). See
    :func:`eval.answers.extract_answer`.

``grade(response, gold, timeout_s=4.0) -> Grade`` and ``grade_batch(...)``
    ``Grade.reason`` is one of ``REASONS``:

    * ``correct``          – the answer is the gold answer (policy below).
    * ``no_answer``        – nothing to grade: empty region or box, or math-verify found no
      expression in it.
    * ``hedged``           – several alternatives for a single-valued gold ("12 or 13", "12 and/or
      13", ``\\boxed{12} or \\boxed{13}``, "12或13"). Always wrong. When the gold itself lists several
      values ("3, 5", ``-2 \\text{ or } -12``, ``\\pm``), "or"/"and" are read as list separators.
    * ``wrong``            – not the gold answer.
    * ``timeout``          – math-verify did not finish within ``timeout_s`` (wall time).
    * ``gold_unparseable`` – not equal as text, and math-verify cannot parse the gold.
    * ``error``            – anything else went wrong (a crashed worker, a bug). Never raised.

    Every call updates ``REASON_COUNTS`` (a ``collections.Counter``).

``gold_is_parseable(gold)``, ``same_answer(a, b)``, ``first_same_answer(a, candidates)``.

The answer policy
-----------------
Both answers are normalised first (:func:`eval.answers.normalize`: whitespace, thousands
separators, ``\\dfrac``, ``\\left``); for a multi-valued gold ``\\text{ and }``/``or`` become commas;
a prediction ``x = …``, ``f(x) = …`` or ``x \\in …`` is reduced to its right side when the gold has
no such label. An extracted answer longer than ``MAX_ANSWER_CHARS`` (1000) is wrong, and a gold that
long unparseable, without further parsing. Then, in this order:

1. **Same text** (whitespace, except between digits, and ``\\left``/``\\right`` aside) → correct.
2. **Echo** (when the question is given: ``problem``; rewards, filters and evaluation pass it). An
   answer that is written, as it is, in the question is wrong for a symbolic gold (``\\sqrt{242}``
   for "Simplify $\\sqrt{242}$"; ``ab+5b+2a+10`` for "Factor …"), and for a number gold when it is
   another form of number than the gold (``\\frac{3}{20}`` for "Express $\\frac{3}{20}$ as a
   decimal", gold ``0.15``; ``\\frac{84}{144}`` for "Simplify …"). A number in the gold's own form
   (a fraction in lowest terms) may be copied: a choice among the numbers the question lists.
3. **A number gold needs a number.** When the gold is a number written out (integer, decimal,
   fraction of integers, mixed number, repeating decimal, percent, scientific notation; with sign,
   thousands separators, currency, units, degrees or an ``x =`` label:
   :func:`eval.answers.parse_number`), the answer must itself be a number written out, and equal to
   it (:func:`eval.answers.numbers_equal`: exact, or within a relative 1e-9 for decimals; a rounded
   decimal of ≥ 6 places of a gold fraction that has no finite decimal only where the question asks
   for a decimal or a rounded value: "as a decimal", "to the nearest…", "round", "approximately",
   "significant figures", "精确到", "保留"… (``_ASKS_DECIMAL_RE``). Anything with
   arithmetic left to do is wrong even when it evaluates to the gold: ``347 + 589``, ``2^{10}``,
   ``\\binom{8}{4}``, ``\\log_2 8``, ``\\sqrt{4}``, ``5!``, ``\\frac{1872}{2}``. So are prose around
   the number (``first 5``, ``It could be 6. The answer is 5``; unit words and ``\\text{}`` labels
   after it are allowed, but not words that change or doubt the value: ``5 thousand``, ``5 (maybe
   six)``), digits split by spaces (``9 3 6``), and a percent read as its hundredth (``0.25`` ≠
   ``25\\%``, ``500\\%`` ≠ ``5``; ``25`` = ``25\\%``). A gold in another base (``1011_2``) needs the
   same digits in the same base (or no base written). Decided here, without math-verify.
4. **Text golds** (``\\text{(C)}``, ``\\text{east}``): the answer must be the same words
   (case-insensitive; ``\\text{}``-like wrappers and one pair of parentheses aside; a lone letter
   counts only if it is a–e).
5. **Lists of numbers** (``3, -3``; ``(6,31,-1)``; ``[2, 5)``): every atom of the answer must be a
   number written out (or ±∞, or ``\\pm`` a number; an interval may be answered by a relation
   ``2 \\le x < 5``), and a bare list is no interval (``(-3, 3)`` ≠ ``3, -3``); then math-verify
   decides, as in 6.
6. **Symbolic golds** (``2\\sqrt{2}``, ``(x+1)^2``, intervals, sets, matrices, equations) need an
   exact answer unless the question asks for a decimal (as in 3) or the gold itself has one: a
   decimal of 4 or more places is a rounding (``2.828427`` for ``2\\sqrt{2}``, ``6.283185`` for
   ``2\\pi``, ``(1.414214, 2)``: wrong, whatever math-verify's 6-place comparison says; it already
   refuses a fraction such as ``\\frac{2828427}{1000000}``). Then they keep symbolic equivalence: math-verify 0.9 (``verify(parse(gold), parse(pred))``, gold first,
   ``allow_set_relation_comp=True``) in a worker process. Wrong before that: an answer with prose
   (a run of ≥ 3 Latin letters outside LaTeX commands and ``\\text{}``, or CJK/Cyrillic/Indic/Thai
   script, once up to three trailing unit words are dropped); an equation for a gold that is none
   (``x+2 = x+1`` for ``x+1``); exponents nested three deep (``10^{10^{10}}``: no answer, and a
   stall). A lone trailing letter after an operator is braced (``a + b + {c}``) because math-verify
   strips " c", " t", " s"... as units.

Bounds: everything before math-verify is linear in the response's length and runs in the calling
process; every math-verify call runs in :mod:`eval.verify_pool`, killed after ``timeout_s`` of wall
time. The default ``timeout_s`` is 4 s, so that one grading call stays under 5 s on any input.
"""

from __future__ import annotations

import collections
import functools
import re
import threading
from dataclasses import dataclass

from data.timing import timed_as
from eval import verify_pool
from eval.answers import (
    LABEL,
    MAX_ANSWER_CHARS,
    Number,
    Units,
    as_text,
    extract,
    extract_answer,
    has_prose,
    is_hedged,
    is_multi_valued,
    list_words_to_commas,
    normalize,
    number_atoms,
    numbers_equal,
    parse_number,
    strip_unit_words,
    unit_conflict,
)
from eval.verify_pool import DEFAULT_WORKERS, shutdown

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_WORKERS",
    "REASONS",
    "REASON_COUNTS",
    "Grade",
    "extract_answer",
    "first_same_answer",
    "gold_is_parseable",
    "grade",
    "grade_batch",
    "is_correct",
    "same_answer",
    "shutdown",
]

REASONS = ("correct", "no_answer", "hedged", "wrong", "timeout", "gold_unparseable", "error")
REASON_COUNTS: collections.Counter[str] = collections.Counter()
DEFAULT_TIMEOUT_S = 4.0
_COUNT_LOCK = threading.Lock()


@dataclass(frozen=True)
class Grade:
    correct: bool
    reason: str  # one of REASONS
    pred: str | None  # the extracted answer (see extract_answer)


# --------------------------------------------------------------------------------------------
# The policy, in-process part
# --------------------------------------------------------------------------------------------

# Spacing is dropped, except between two digits ("1 2" is not "12").
_CANON_RE = re.compile(r"(?<!\d)\s+|\s+(?!\d)|\\left\b|\\right\b|(?<!\\)\\[,;:! ]")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_TRAILING_VARIABLE_RE = re.compile(r"([-+*/=^(] ?)([A-Za-z])$")
# "x = …", "x_1 = …", "f(x) = …", and "x \in …" (a set or an interval).
_ASSIGNMENT_RE = re.compile(rf" ?(?:{LABEL}) ?= ?(?P<rhs>[^=]+)")
_MEMBERSHIP_RE = re.compile(r" ?[A-Za-z] ?\\in\b ?(?P<rhs>.+)")
_IN_RE = re.compile(r"\\in\b")
_BASE_RE = re.compile(r"(?P<digits>[0-9A-Za-z]+) ?_ ?\{? ?(?P<base>\d+) ?\}?")  # 1011_2, 25_{6}
_FRAC_SHORT_RE = re.compile(r"\\frac ?(\d) ?(\d)")
_RELATION_SPLIT_RE = re.compile(r"\\(?:le|ge|lt|gt|leq|geq)\b|[<>≤≥]|\\cup|\\cap|\bor\b|\band\b|,")
_PM_RE = re.compile(r"\\(?:pm|mp) ?")
_CHOICE_RE = re.compile(r"(?:\\text(?:bf)? ?\{ ?)?\(([A-Ea-e])\)")
_ALTERNATIVES_RE = re.compile(r"\\text ?\{ ?or ?\}| or |,", re.IGNORECASE)
_VARIABLE_RE = re.compile(r"[A-Za-z]")


def _canon(s: str) -> str:
    return _CANON_RE.sub("", _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s))


def _parse_forms(s: str) -> tuple[str, ...]:
    """The strings to hand to math_verify.parse, in order of preference."""
    if _UNESCAPED_DOLLAR.search(s) or "\\(" in s or "\\[" in s:
        return (s,)
    # math-verify strips a trailing " c", " t", " s", ... as a unit, so "a + b + c" parses as
    # "a +": brace a lone trailing letter that follows an operator.
    return ("$" + _TRAILING_VARIABLE_RE.sub(r"\1{\2}", s) + "$", s)


def _drop_assignment(pred: str, gold: str) -> str:
    """Reduce "x = 12" (or "f(x) = …") to "12" when the gold has no "=", and "x \\in [2, 5)" to
    "[2, 5)" when the gold has no "\\in" (math-verify does the first too, after a ~15 ms equation
    parse; doing it here lets the in-process rules decide)."""
    if "=" not in gold and (m := _ASSIGNMENT_RE.fullmatch(pred)):
        return m.group("rhs").strip()
    if not _IN_RE.search(gold) and (m := _MEMBERSHIP_RE.fullmatch(pred)):
        return m.group("rhs").strip()
    return pred


def _tower_depth(s: str) -> int:
    """How deeply exponents nest (``2^{3^{4}}``: 3). Linear."""
    depth = best = 0
    stack: list[bool] = []  # per open brace: is it an exponent's?
    previous = ""
    for ch in s:
        if ch == "{":
            stack.append(previous == "^")
            depth += previous == "^"
            best = max(best, depth + 1 if previous == "^" else depth)
        elif ch == "}" and stack:
            depth -= stack.pop()
        elif previous == "^" and ch not in " {":
            best = max(best, depth + 1)
        previous = ch if ch != " " else previous
    return best


@dataclass(frozen=True)
class _Question:
    """What the echo rule needs to know of a problem: its canonical text, the token multisets of its
    math (``$…$``, ``\\(…\\)``, ``\\[…\\]`` spans; the whole text if it has none) and the values of the
    numbers it writes. ``[asy]`` drawings are left out (their coordinates are no expressions)."""

    canon: str
    spans: tuple[tuple[str, ...], ...]
    values: frozenset
    asks_decimal: bool = False  # the question asks for a decimal or a rounded value (see _ASKS_DECIMAL_RE)
    units: Units = Units()  # what may follow a number in an answer to it


_ASY_RE = re.compile(r"\[asy\].*?\[/asy\]", re.S)
_MATH_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\d+(?:\.\d+)?|[A-Za-z]|[-+*/^=<>≤≥|]")
_SILENT_TOKENS = frozenset({"\\left", "\\right", "\\cdot", "\\displaystyle", "\\mathrm", "\\text"})
_TOKEN_ALIASES = {"\\frac": "/", "\\over": "/", "\\leq": "\\le", "\\geq": "\\ge", "≤": "\\le", "≥": "\\ge",
                  "\\times": "*", "\\dfrac": "/", "\\tfrac": "/"}
_PROBLEM_NUMBER_RE = re.compile(r"\\frac ?\{ ?\d+ ?\} ?\{ ?\d+ ?\}|\d+ ?/ ?\d+|\d*\.\d+|\d+")


def _tokens(s: str) -> tuple[str, ...]:
    """The tokens of an expression in order, spacing, braces, ``\\left``/``\\right`` and ``\\cdot``
    aside (``\\frac`` and ``/`` are one token, ``\\leq`` is ``\\le``)."""
    return tuple(_TOKEN_ALIASES.get(t, t) for t in _TOKEN_RE.findall(s) if t not in _SILENT_TOKENS)


@functools.lru_cache(maxsize=4096)
def _question(problem: str) -> _Question:
    text = normalize(_ASY_RE.sub(" ", problem[: 20 * MAX_ANSWER_CHARS]))
    spans = [next(g for g in m.groups() if g is not None) for m in _MATH_SPAN_RE.finditer(text)] or [text]
    values = set()
    for m in _PROBLEM_NUMBER_RE.finditer(text):
        number = parse_number(m.group(0))
        if number is not None and number.value is not None:
            values.add(number.value)
    raw = problem[: 20 * MAX_ANSWER_CHARS]
    words = frozenset(w.lower() for w in _QUESTION_WORD_RE.findall(raw))
    return _Question(_canon(text), tuple(tuple(sorted(_tokens(span))) for span in spans), frozenset(values),
                     bool(_ASKS_DECIMAL_RE.search(raw)), Units(words, raw))


# the question's words: runs of anything but spaces, digits and punctuation (Bengali's vowel signs included)
_QUESTION_WORD_RE = re.compile(r"[^\s0-9!-/:-@\[-`{-~，。？！：；、（）“”‘’《》]{2,}")


# A question that asks for a decimal or a rounded value: "as a decimal", "to the nearest tenth", "round
# your answer", "approximately how many", "three significant figures", "精确到", "保留两位小数".
_ASKS_DECIMAL_RE = re.compile(
    r"\b(?:decimals?|nearest|round(?:ed|ing)?|approximat\w*|estimat\w*|significant\s+(?:figures?|digits?)"
    r"|tenths?|hundredths?|thousandths?|places)\b|精确到|保留|小数|约", re.IGNORECASE)
_DECIMAL_RE = re.compile(r"\d*\.\d+")  # a decimal written out: 2.83, .5
_ROUNDED_RE = re.compile(r"\d*\.\d{4,}")  # one with 4 or more places (1.5, 0.125 are exact writings)


def _echoes(pred: str, question: _Question | None) -> bool:
    """Whether ``pred`` copies an expression of the question: written there as it is (no letter or
    digit glued to it on either side), or with the same tokens as one of its math spans in another
    order or spacing (``10+ab+5b+2a`` for ``$ab+5b+2a+10$``, ``x^{2}-5x-4\\leq 10``)."""
    if question is None:
        return False
    canon = _canon(pred)
    start = question.canon.find(canon) if len(canon) >= 2 else -1
    while start != -1:
        before = question.canon[start - 1 : start]
        after = question.canon[start + len(canon) : start + len(canon) + 1]
        if not (before.isalnum() or after.isalnum() or after in ("^", "_", "{")):
            return True
        start = question.canon.find(canon, start + 1)
    tokens = sorted(_tokens(pred))
    return len(tokens) >= 3 and tuple(tokens) in question.spans


def _number_echo(pred: Number, gold: Number, question: _Question | None) -> bool:
    """A number the question writes, given back in another form than the gold's (``\\frac{3}{20}``
    for "Express $\\frac{3}{20}$ as a decimal"), or as an unreduced fraction (``84/144`` for "Simplify
    $\\frac{84}{144}$"). A whole number counts as an integer whatever its form (``6.00``)."""
    if question is None or pred.value not in question.values:
        return False

    def form(n: Number) -> str:
        return "integer" if n.value is not None and n.value.denominator == 1 else n.form

    return form(pred) != form(gold) or not pred.lowest_terms


def _base_number(pred: str, gold: str) -> str | None:
    """Rule 3, a number in another base (``1011_2``): the same digits, in the gold's base or with no
    base written; else wrong. None when the gold is no such number."""
    g = _BASE_RE.fullmatch(gold)
    if g is None:
        return None
    p = _BASE_RE.fullmatch(pred)
    digits, base = (p.group("digits"), p.group("base")) if p else (pred, g.group("base"))
    same = digits.lstrip("0").lower() == g.group("digits").lstrip("0").lower() and int(base) == int(g.group("base"))
    return "correct" if same else "wrong"


def _atoms_written_out(pred: str) -> bool:
    """Rule 5: the answer to a list of numbers lists numbers (or ±∞, ``\\pm`` a number), or states an
    interval as a relation whose bounds are numbers and whose other terms are single variables."""
    if number_atoms(pred) is not None or parse_number(pred) is not None:
        return True
    if _PM_RE.match(pred) and parse_number(_PM_RE.sub("", pred, count=1)) is not None:
        return True
    parts = [p.strip() for p in _RELATION_SPLIT_RE.split(pred)]
    if len(parts) < 2:
        return False
    for part in parts:
        if not part or _VARIABLE_RE.fullmatch(part) or part.lstrip("+-").strip() in ("\\infty", "∞"):
            continue
        if parse_number(part) is None:
            return False
    return True


def _decide(pred: str, gold: str, multi: bool, question: _Question | None = None) -> str | None:
    """'correct'/'wrong' when the rules decide in-process, else None (math-verify decides).
    ``question``: for the echo rule (see the module docstring)."""
    if _canon(pred) == _canon(gold):
        return "correct"
    gold_num = None if multi else parse_number(gold)
    if gold_num is not None:
        # after the number, units and the question's own things only: other words are prose ("5 nope")
        pred_num = parse_number(pred, units=question.units if question is not None else Units())
        if pred_num is None or _number_echo(pred_num, gold_num, question) or unit_conflict(gold, pred):
            return "wrong"
        # a rounded decimal of a gold with no finite decimal only where the question asks for one
        return "correct" if numbers_equal(gold_num, pred_num, rounded=question is not None and question.asks_decimal) \
            else "wrong"
    base = _base_number(pred, gold)
    if base is not None:
        return base
    gold_text = as_text(gold)
    if gold_text is not None:
        pred_text = as_text(pred)
        choice = _CHOICE_RE.match(pred)
        if len(gold_text) == 1 and choice and not _CHOICE_RE.search(pred, choice.end()):
            pred_text = choice.group(1).lower()  # "(C) Plane" answers (C)
        return "correct" if pred_text == gold_text else "wrong"
    if _echoes(pred, question):
        return "wrong"
    if not (question is not None and question.asks_decimal) and not _DECIMAL_RE.search(gold):
        # an exact gold needs an exact answer: no rounding (2.828427 for 2\sqrt{2}, 6.283185 for 2\pi,
        # (1.414214, 2) for (\sqrt{2}, 2)); math-verify compares to 6 places and would accept them
        if _ROUNDED_RE.search(pred):
            return "wrong"
    if number_atoms(gold) is not None:
        if not _atoms_written_out(pred):
            return "wrong"
        if multi and gold[:1] not in "([\\" and pred[:1] in "([":  # "3, -3" is no interval (-3, 3)
            return "wrong"
    if has_prose(strip_unit_words(pred)) or ("=" in pred and "=" not in gold) or _tower_depth(pred) >= 3:
        return "wrong"
    return None


def _one_number_written_twice(pred: str, boxed: tuple[str, ...]) -> str | None:
    """``\\frac{1}{2} \\text{ or } 0.5``: alternatives that are all the same number are no hedge; that
    number, else None."""
    parts = [normalize(p) for p in (boxed if len(boxed) > 1 else _ALTERNATIVES_RE.split(pred))]
    numbers = [parse_number(p) for p in parts if p]
    if len(numbers) < 2 or any(n is None or n.value is None for n in numbers):
        return None
    return parts[0] if all(n.value == numbers[0].value for n in numbers) else None


def _prepare(response: str, gold: str, problem: str | None = None) -> Grade | tuple[str | None, tuple]:
    """A final Grade, or (pred, worker job) when math-verify has to decide."""
    extracted = extract(response)
    pred = extracted.answer
    gold_n = normalize(gold) if isinstance(gold, str) else ""
    if not gold_n or len(gold_n) > MAX_ANSWER_CHARS:
        return Grade(False, "gold_unparseable", pred)
    if pred is None:
        return Grade(False, "no_answer", None)
    if len(pred) > MAX_ANSWER_CHARS:
        return Grade(False, "wrong", pred)
    pred_n = normalize(pred)
    if not pred_n:
        return Grade(False, "no_answer", pred)
    multi = parse_number(gold_n) is None and is_multi_valued(gold_n)  # "31,250" is one number
    if multi:
        if len(extracted.boxed) > 1:  # "\boxed{3} and \boxed{-3}" answers "3, -3"
            pred_n = normalize(", ".join(extracted.boxed))
        gold_n, pred_n = list_words_to_commas(gold_n), list_words_to_commas(pred_n)
        pred_n = ",".join(_drop_assignment(atom, gold_n) for atom in pred_n.split(","))  # "x = 1, x = -2"
    elif extracted.hedged or is_hedged(pred_n):
        same = _one_number_written_twice(pred_n, extracted.boxed)
        if same is None:
            return Grade(False, "hedged", pred)
        pred_n = same
    if as_text(gold_n) is None:  # "z = c" is no answer (C)
        pred_n = _drop_assignment(pred_n, gold_n)
    question = _question(problem) if isinstance(problem, str) and problem else None
    verdict = _decide(pred_n, gold_n, multi, question)
    if verdict is not None:
        return Grade(verdict == "correct", verdict, pred)
    return pred, ("grade", (_parse_forms(gold_n), _parse_forms(strip_unit_words(pred_n))))


def _inner_timeout(timeout_s: float) -> int:
    """math-verify's own per-step alarm (whole seconds); the outer wall-clock bound is timeout_s."""
    return max(1, int(timeout_s // 2))


def _run_jobs(jobs: list[tuple], timeout_s: float, workers: int | None = None) -> list[tuple[bool, str]]:
    return verify_pool.run_jobs(jobs, timeout_s, workers)


def _count(grades: list[Grade]) -> None:
    with _COUNT_LOCK:
        REASON_COUNTS.update(g.reason for g in grades)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


@timed_as("grading")
def grade_batch(responses: list[str], golds: list[str], timeout_s: float = DEFAULT_TIMEOUT_S,
                workers: int | None = None, problems: list[str | None] | None = None) -> list[Grade]:
    """Grade ``responses[i]`` against ``golds[i]``; math-verify work runs in parallel workers.

    ``problems[i]``, when given, is the question: an answer that copies an expression of it is
    wrong (the echo rule). Identical (gold, answer) pairs are graded once. ``workers`` resizes the
    shared pool (default ``min(4, os.cpu_count())``). Never raises for bad inputs; see ``REASONS``.
    """
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses but {len(golds)} golds")
    if problems is not None and len(problems) != len(golds):
        raise ValueError(f"{len(problems)} problems but {len(golds)} golds")
    problems = [None] * len(golds) if problems is None else problems
    grades: list[Grade | None] = [None] * len(responses)
    pending: dict[tuple, list[tuple[int, str | None]]] = {}
    for i, (response, gold) in enumerate(zip(responses, golds, strict=True)):
        try:
            prepared = _prepare(response, gold, problems[i])
        except Exception:
            prepared = Grade(False, "error", None)
        if isinstance(prepared, Grade):
            grades[i] = prepared
        else:
            pred, job = prepared
            pending.setdefault(job, []).append((i, pred))
    jobs = list(pending)
    inner = _inner_timeout(timeout_s)
    outcomes = _run_jobs([(op, (*args, inner)) for op, args in jobs], timeout_s, workers)
    for job, (correct, reason) in zip(jobs, outcomes, strict=True):
        for i, pred in pending[job]:
            grades[i] = Grade(bool(correct), reason, pred)
    final = [g if g is not None else Grade(False, "error", None) for g in grades]
    _count(final)
    return final


def grade(response: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, problem: str | None = None) -> Grade:
    """Grade one whole model response against a gold final answer (see module docstring); with
    ``problem``, the echo rule applies too."""
    return grade_batch([response], [gold], timeout_s=timeout_s, problems=[problem])[0]


def is_correct(response: str, gold: str, problem: str | None = None) -> bool:
    return grade(response, gold, problem=problem).correct


def gold_is_parseable(gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether a gold answer can be graded: a number written out, a text answer, or an expression
    math-verify parses (not just its raw-string fallback). Bounded like grade(); cached per gold."""
    return isinstance(gold, str) and _gold_is_parseable(gold, timeout_s)


@functools.lru_cache(maxsize=4096)
def _normalize_gold(gold: str) -> str:
    gold_n = normalize(gold)
    return list_words_to_commas(gold_n) if is_multi_valued(gold_n) else gold_n


@functools.lru_cache(maxsize=4096)
def _gold_is_parseable(gold: str, timeout_s: float) -> bool:
    gold_n = _normalize_gold(gold)
    if not gold_n or len(gold_n) > MAX_ANSWER_CHARS:
        return False
    if parse_number(gold_n) is not None or as_text(gold_n) is not None:
        return True
    [(ok, _)] = _run_jobs([("gold_ok", (_parse_forms(gold_n), _inner_timeout(timeout_s)))], timeout_s)
    return bool(ok)


def _same_prepare(a: str, b: str, timeout_s: float) -> bool | tuple:
    """True/False when decidable here, else the worker job that decides. The same rules as grading,
    in both directions: a number is the same only as a number written out, words only as words."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    a_n, b_n = normalize(a), normalize(b)
    if not a_n or not b_n or max(len(a_n), len(b_n)) > MAX_ANSWER_CHARS:
        return False
    a_n, b_n = _drop_assignment(a_n, b_n), _drop_assignment(b_n, a_n)
    if _canon(a_n) == _canon(b_n):
        return True
    a_num, b_num = parse_number(a_n), parse_number(b_n)
    if a_num is not None or b_num is not None:
        return a_num is not None and b_num is not None and (numbers_equal(a_num, b_num) or numbers_equal(b_num, a_num))
    a_text, b_text = as_text(a_n), as_text(b_n)
    if a_text is not None or b_text is not None:
        return a_text == b_text
    if has_prose(strip_unit_words(a_n)) or has_prose(strip_unit_words(b_n)):
        return False
    return ("same", (_parse_forms(a_n), _parse_forms(b_n), _inner_timeout(timeout_s)))


def first_same_answer(answer: str, candidates: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> int | None:
    """Index of the first candidate equivalent to ``answer`` (see same_answer), or None.
    The candidates that need math-verify are compared in parallel, in one batch."""
    prepared = [_same_prepare(answer, c, timeout_s) for c in candidates]
    jobs = [p for p in prepared if isinstance(p, tuple)]
    results = iter(_run_jobs(jobs, timeout_s))
    for index, p in enumerate(prepared):
        if (next(results)[0] if isinstance(p, tuple) else p) is True:
            return index
    return None


def same_answer(a: str, b: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether two *extracted* answers are equivalent (either may serve as the gold); used to group
    answers for cons@k. Same rules and bounds as grade(); a timeout counts as "different"."""
    return first_same_answer(a, [b], timeout_s) is not None
