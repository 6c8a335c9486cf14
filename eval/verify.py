"""Grading of model responses against gold final answers.

Public API
----------
``extract_answer(response) -> str | None``
    The answer policy (one rule, used everywhere):

    1. Answer region: if the response contains a complete ``<answer>…</answer>`` block, the
       content of the *last* such block; otherwise the text after the last ``</think>``;
       otherwise the whole response. Stray ``<answer>``/``</answer>`` tags left in the region
       (e.g. a truncated ``<answer>12``) are removed.
    2. In the region: the content of the last *balanced* ``\\boxed{…}`` (``\\fbox{…}`` and
       ``\\framebox{…}`` count too; an unclosed box is skipped). Without one, the region itself.
    3. Trimming: surrounding whitespace; a leading "The final answer is" / "The answer is" /
       "Answer:" / "Final answer:" / "答案是" prefix; trailing ``.``/``。``; one pair of
       surrounding ``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]`` or ``**…**``.
    4. Empty after trimming → ``None`` (no answer).

``grade(response, gold, timeout_s=5.0) -> Grade`` and ``grade_batch(...)``
    ``Grade.reason`` is one of ``REASONS``:

    * ``correct``          – equivalent to the gold answer.
    * ``no_answer``        – nothing to grade: empty region/box, or math-verify found no
      expression in it.
    * ``hedged``           – several alternatives offered for a single-valued gold
      ("12 or 13", "12 and/or 13", ``\\boxed{12} or \\boxed{13}``, "12或13"). Always wrong.
      When the gold itself has several values ("3, 5", ``-2 \\text{ or } -12``, ``\\pm``), "or"
      and "and" in the prediction are read as list separators instead. Only the last sentence
      of a prose answer is checked, and "or" between relations ("x < 2 or x > 3") is no hedge.
    * ``wrong``            – not equivalent.
    * ``timeout``          – the comparison did not finish within ``timeout_s`` (wall time).
    * ``gold_unparseable`` – not equal as text, and math-verify cannot parse the gold into an
      expression, so no symbolic comparison was possible.
    * ``error``            – anything else went wrong (a crashed worker, a bug). Never raised.

    Every call updates ``REASON_COUNTS`` (a ``collections.Counter``).

``gold_is_parseable(gold)``, ``same_answer(a, b)``, ``first_same_answer(a, candidates)`` – see
their docstrings.

Equivalence (in this order; the first that decides wins)
--------------------------------------------------------
Both answers are first normalised: thin-space/brace thousands separators (``11,\\! 111``,
``1{,}000``, ``1\\,000``) are removed, ``\\!`` dropped, ``\\dfrac``/``\\tfrac`` → ``\\frac``,
trailing ``.,;`` stripped; for a multi-valued gold ``\\text{ and }``/``or`` become commas; and a
prediction ``x = …`` (one variable) is reduced to its right side when the gold has no ``=``.

1. Same text after removing whitespace and ``\\left``/``\\right`` → correct.
2. Fast path, in this process, never touching math-verify: both sides are plain numbers
   (integers, decimals, ``a/b``, ``\\frac{a}{b}``, optional sign, leading ``\\$``, unambiguous
   ``1,000,000`` separators, a trailing ``\\%``, ``^\\circ`` or ``\\text{unit}`` — units are
   ignored, as in math-verify). Equal when
   the values are equal exactly; or when one side is a decimal written with ≥ 6 fractional
   digits and both agree after rounding to 6 decimals (``1/3`` = ``0.333333`` but
   ``1/3`` ≠ ``0.33``); or when exactly one side carries ``%`` and the bare numbers match
   (``12%`` = ``12`` = ``0.12``, as math-verify does).
3. Text answers: both sides reduce to plain words once ``\\text{}``-like wrappers and one pair
   of parentheses are removed → case-insensitive comparison (``\\text{(C)}`` = ``C``,
   ``\\text{East}`` = ``east``; a lone letter counts only if it is a–e). A word against a
   number is wrong.
4. Otherwise math-verify 0.9 (``verify(parse(gold), parse(pred))``, gold first) in a worker
   process. Math-like answers are parsed wrapped in ``$…$``; prose answers (a run of ≥3 Latin
   letters outside LaTeX commands, or CJK/Cyrillic/Indic/Thai script) are parsed raw so that
   math-verify's own answer anchors and number extraction apply; if the first form yields no
   expression, the other is tried. A lone trailing letter after an operator is braced
   (``a + b + {c}``) because math-verify strips " c", " t", " s"... as units. ``verify`` runs with
   ``allow_set_relation_comp=True`` (``2 \\le x < 5`` answers ``[2, 5)``).

Never hang, never crash
-----------------------
math-verify bounds its work with ``signal.alarm``, which only works on the main thread and does
not interrupt C code (``10^{10^{10^{10}}}`` runs for more than 30 s). Here every math-verify call runs in
a small pool of persistent worker processes (default ``min(4, os.cpu_count())``), started with
``subprocess`` (fork+exec: a fresh interpreter, like the "spawn" start method, without
re-importing the caller's ``__main__``) and talking over a socket pair. A job that is not answered
within ``timeout_s`` of being handed to a worker gets a ``timeout`` Grade and the worker is killed
and replaced. Inside the worker, math-verify's own (alarm based) timeouts are also set, to
``timeout_s // 2`` whole seconds (at least 1) per parse/compare step, so most slow cases end
without a kill. Workers import math_verify once, at start. They are killed at
interpreter exit, exit on their own when the parent dies (EOF on the socket), and a forked child
of the parent forgets the pool and starts its own on first use. The pool is guarded by a lock, so
grading works from any thread; concurrent callers are served one batch at a time.
"""

from __future__ import annotations

import atexit
import collections
import functools
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import Connection, wait

__all__ = [
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
]

REASONS = ("correct", "no_answer", "hedged", "wrong", "timeout", "gold_unparseable", "error")
REASON_COUNTS: collections.Counter[str] = collections.Counter()

DEFAULT_WORKERS = min(4, os.cpu_count() or 1)
_STARTUP_TIMEOUT_S = 60.0  # a worker that has not imported math_verify by then is broken


@dataclass(frozen=True)
class Grade:
    correct: bool
    reason: str  # one of REASONS
    pred: str | None  # the extracted answer (see extract_answer)


# --------------------------------------------------------------------------------------------
# Answer extraction
# --------------------------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")
_PREFIX_RE = re.compile(
    r"^(?:\*\*)?\s*(?:(?:the\s+)?(?:final\s+)?answer\b(?:\s+is)?\s*[:：]?|(?:最终)?答案\s*[是为]?\s*[:：]?)\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"), ("**", "**"))
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def _answer_region(response: str) -> str:
    end = response.rfind("</answer>")
    if end != -1:
        start = response.rfind("<answer>", 0, end)
        if start != -1:
            return response[start + len("<answer>") : end]
    think = response.rfind("</think>")
    region = response[think + len("</think>") :] if think != -1 else response
    return region.replace("<answer>", " ").replace("</answer>", " ")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of every balanced ``{`` to its ``}`` (escaped ``\\{``/``\\}`` ignored). O(n)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for m in _BRACE_RE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif m.group() == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _boxes(region: str) -> list[tuple[int, int, int]]:
    """(start of ``\\boxed``, start of content, end of content) for every balanced box."""
    starts = list(_BOX_RE.finditer(region))
    if not starts:
        return []
    pairs = _matching_braces(region)
    return [(m.start(), m.end(), pairs[m.end() - 1]) for m in starts if m.end() - 1 in pairs]


def _trim(text: str) -> str:
    s = text.strip()
    for _ in range(2):  # "Final answer: The final answer is 12"
        s = _PREFIX_RE.sub("", s, count=1).strip()
    s = s.rstrip(" \t\n.。").strip()
    for left, right in _DELIMITERS:
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            inner = s[len(left) : len(s) - len(right)]
            if "$" in left and _UNESCAPED_DOLLAR.search(inner):
                continue
            s = inner.strip().rstrip(".。").strip()
            break
    return s


def _extract(response: str) -> tuple[str | None, bool]:
    """The answer (policy in the module docstring) and whether two boxes were joined by "or"."""
    if not isinstance(response, str):
        return None, False
    region = _answer_region(response)
    boxes = _boxes(region)
    boxed_hedge = False
    if boxes:
        start, content_start, content_end = boxes[-1]
        answer = region[content_start:content_end]
        if len(boxes) > 1:
            between = region[boxes[-2][2] + 1 : start]
            boxed_hedge = len(between) < 40 and bool(_HEDGE_RE.search(between))
    else:
        answer = region
    answer = _trim(answer)
    return (answer or None), boxed_hedge


def extract_answer(response: str) -> str | None:
    """The final answer of a response, or None. See the module docstring for the policy."""
    return _extract(response)[0]


# --------------------------------------------------------------------------------------------
# Normalisation, fast path, hedging
# --------------------------------------------------------------------------------------------

_THOUSANDS_RES = (
    re.compile(r"(?<=\d),\\!\s*(?=\d{3}(?!\d))"),  # 11,\! 111
    re.compile(r"(?<=\d)\{,\}(?=\d{3}(?!\d))"),  # 1{,}000
    re.compile(r"(?<=\d)\\[,;: ]\s*(?=\d{3}(?!\d))"),  # 1\,000
)
_LIST_WORDS_RE = re.compile(r"\\text\{\s*,?\s*(?:and|or)\s*\}|,?\s*\b(?:and|or)\b|或", re.IGNORECASE)
_HEDGE_RE = re.compile(r"\bor\b|and\s*/\s*or|\\lor\b|\\vee\b|或|还是", re.IGNORECASE)
_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_PROSE_RE = re.compile(
    r"[A-Za-z\u00c0-\u024f]{3,}|[\u0400-\u04ff\u0980-\u09ff\u0c00-\u0c7f\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
)
_CANON_RE = re.compile(r"\s+|\\left\b|\\right\b|(?<!\\)\\[,;:! ]")
_COMMAND_RE = re.compile(r"\\[A-Za-z]+(?:\s*\{[A-Za-z*]*\})?")  # \begin{pmatrix}, \mathbb{R}, \sqrt


def _normalize(answer: str) -> str:
    s = answer.strip()
    for pattern in _THOUSANDS_RES:
        s = pattern.sub("", s)
    s = s.replace("\\!", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return s.rstrip(" \t\n.,;。").strip()


def _is_multi_valued(gold: str) -> bool:
    """A top-level comma, an "or"/"and" between values, or ±: the gold lists several values."""
    if "\\pm" in gold or "\\mp" in gold or _LIST_WORDS_RE.search(gold):
        return True
    depth = 0
    for ch in gold:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            return True
    return False


def _list_words_to_commas(s: str) -> str:
    s = _LIST_WORDS_RE.sub(",", s)
    return re.sub(r"\s*,(?:\s*,)+", ",", s).strip(" ,")


def _last_sentence(s: str) -> str:
    parts = re.split(r"\n|(?<!\d)\.\s+|\.\s+(?=[A-Z])|。", s)
    return next((p for p in reversed(parts) if p.strip()), s)


_RELATION_RE = re.compile(r"[<>≤≥]|\\(?:le|ge|lt|gt|leq|geq|neq)\b")


def _is_hedged(pred: str) -> bool:
    """Whether the answer offers alternatives ("12 or 13"); "x < 2 or x > 3" is one condition."""
    last = _last_sentence(pred)
    return bool(_HEDGE_RE.search(last)) and not _RELATION_RE.search(last)


def _canon(s: str) -> str:
    return _CANON_RE.sub("", s)


_UNIT_SUFFIX_RE = re.compile(
    r"(?:\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(?:\^\{?[23]\}?)?"
    r"|\s*\^\s*\{?\\circ\}?|\s*°|\s*\\degree)$"
)
_PCT_SUFFIX_RE = re.compile(r"\s*\\?%$")
_INT_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)")
_DEC_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?\.(\d+)")
_FRAC_RE = re.compile(r"([+-]?)\\frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_SLASH_RE = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_MAX_DIGITS = 1000


@dataclass(frozen=True)
class _Num:
    value: Fraction | None  # None: an integer too long for Fraction, compared by digits
    digits: str  # canonical integer text ("" if not an integer)
    decimals: int  # fractional digits as written (0 for integers and fractions)
    percent: bool


def _as_number(s: str) -> _Num | None:
    """A plain number (see fast path in the module docstring), or None."""
    t = s.strip()
    for _ in range(2):
        t = _UNIT_SUFFIX_RE.sub("", t)
    percent = bool(_PCT_SUFFIX_RE.search(t))
    t = _PCT_SUFFIX_RE.sub("", t)
    t = re.sub(r"^([+-]?)\s*\\?\$\s*", r"\1", t).strip()  # currency
    if _INT_RE.fullmatch(t):
        digits = t.replace(",", "").lstrip("+")
        sign = "-" if digits.startswith("-") else ""
        digits = sign + (digits.lstrip("-").lstrip("0") or "0")
        if digits == "-0":
            digits = "0"
        value = Fraction(int(digits)) if len(digits) <= _MAX_DIGITS else None
        return _Num(value, digits, 0, percent)
    if len(t) > _MAX_DIGITS:
        return None
    if m := _DEC_RE.fullmatch(t):
        return _Num(Fraction(t.replace(",", "")), "", len(m.group(1)), percent)
    if m := _FRAC_RE.fullmatch(t):
        den = int(m.group(4) or m.group(5))
        if den == 0:
            return None
        value = Fraction(int(m.group(2) or m.group(3)), den)
        return _Num(-value if m.group(1) == "-" else value, "", 0, percent)
    if m := _SLASH_RE.fullmatch(t):
        if int(m.group(2)) == 0:
            return None
        return _Num(Fraction(int(m.group(1)), int(m.group(2))), "", 0, percent)
    return None


def _numbers_equal(a: _Num, b: _Num) -> bool:
    if a.value is None or b.value is None:  # huge integers: exact digit comparison only
        return a.digits == b.digits and a.percent == b.percent
    candidates = [(a.value / 100 if a.percent else a.value, b.value / 100 if b.percent else b.value)]
    if a.percent != b.percent:
        candidates.append((a.value, b.value))  # "12%" vs "12"
    for x, y in candidates:
        if x == y:
            return True
        if max(a.decimals, b.decimals) >= 6 and round(x, 6) == round(y, 6):
            return True
    return False


def _as_text(s: str) -> str | None:
    """Lower-cased words if the answer is plain text (``\\text{(C)}`` → "c"), else None."""
    t = _TEXT_CMD_RE.sub(r"\1", s).strip()
    if t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    if not re.fullmatch(r"[A-Za-z]+(?:\s+[A-Za-z]+)*", t):
        return None
    if len(t) == 1 and t.lower() not in "abcde":  # a lone x or i is more likely math than a choice
        return None
    return " ".join(t.lower().split())


_TRAILING_VARIABLE_RE = re.compile(r"([-+*/=^(]\s*)([A-Za-z])$")


def _parse_forms(s: str) -> tuple[str, ...]:
    """The strings to hand to math_verify.parse, in order of preference."""
    if _UNESCAPED_DOLLAR.search(s) or "\\(" in s or "\\[" in s:
        return (s,)
    one_line = s.replace("\n", " ")
    # math-verify strips a trailing " c", " t", " s", ... as a unit, so "a + b + c" parses as
    # "a +": brace a lone trailing letter that follows an operator.
    wrapped = "$" + _TRAILING_VARIABLE_RE.sub(r"\1{\2}", one_line) + "$"
    if _PROSE_RE.search(_COMMAND_RE.sub(" ", _TEXT_CMD_RE.sub(" ", s))):
        return (s, wrapped)
    return (wrapped, s)


_ASSIGNMENT_RE = re.compile(r"\s*[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*(?P<rhs>[^=]+)")


def _drop_assignment(pred: str, gold: str) -> str:
    """Reduce "x = 12" to "12" when the gold has no "=" (math-verify does the same, after a
    ~15 ms equation parse; doing it here lets the fast path decide)."""
    if "=" in gold:
        return pred
    m = _ASSIGNMENT_RE.fullmatch(pred)
    return m.group("rhs").strip() if m else pred


def _quick_verdict(pred: str, gold: str) -> str | None:
    """'correct'/'wrong' when decidable without math-verify (rules 1–3), else None."""
    if _canon(pred) == _canon(gold):
        return "correct"
    gold_num, pred_num = _as_number(gold), _as_number(pred)
    if gold_num is not None and pred_num is not None:
        return "correct" if _numbers_equal(gold_num, pred_num) else "wrong"
    gold_text, pred_text = _as_text(gold), _as_text(pred)
    if gold_text is not None and pred_text is not None:
        return "correct" if gold_text == pred_text else "wrong"
    if (gold_text is not None and pred_num is not None) or (gold_num is not None and pred_text is not None):
        return "wrong"
    return None


# --------------------------------------------------------------------------------------------
# Worker side (runs in the worker process, main thread)
# --------------------------------------------------------------------------------------------

_READY = "ready"


def _worker_main(fd: int) -> None:  # pragma: no cover - runs in the worker processes
    import logging

    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)

    def parse_first(forms: tuple[str, ...], t: int) -> list:
        first = None
        for form in forms:
            parsed = parse(form, parsing_timeout=t, raise_on_error=True)
            if any(not isinstance(x, str) for x in parsed):
                return parsed
            first = parsed if first is None else first
        return first or []

    def equivalent(gold: list, pred: list, t: int) -> bool:
        # allow_set_relation_comp: "2 \\le x < 5" may answer "[2, 5)".
        options = {"timeout_seconds": t, "allow_set_relation_comp": True}
        try:
            return verify(gold, pred, raise_on_error=True, **options)
        except TimeoutException:
            raise
        except Exception:  # one comparison failed: let math-verify skip it and try the others
            return verify(gold, pred, **options)

    def op_grade(gold_forms, pred_forms, t):
        gold = parse_first(gold_forms, t)
        pred = parse_first(pred_forms, t)
        if not pred:
            return False, "no_answer"
        if equivalent(gold, pred, t):
            return True, "correct"
        gold_ok = any(not isinstance(x, str) for x in gold)
        return False, "wrong" if gold_ok else "gold_unparseable"

    def op_gold_ok(gold_forms, t):
        ok = any(not isinstance(x, str) for x in parse_first(gold_forms, t))
        return ok, "correct" if ok else "gold_unparseable"

    def op_same(a_forms, b_forms, t):
        a, b = parse_first(a_forms, t), parse_first(b_forms, t)
        same = bool(a and b) and (equivalent(a, b, t) or equivalent(b, a, t))
        return same, "correct" if same else "wrong"

    ops = {"grade": op_grade, "gold_ok": op_gold_ok, "same": op_same}
    conn = Connection(fd)
    op_same(("$1$",), ("$1$",), 1)  # warm up regex and sympy caches
    conn.send(_READY)
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            result = ops[op](*args)
        except TimeoutException:
            result = (False, "timeout")
        except Exception:
            result = (False, "error")
        try:
            conn.send(result)
        except (OSError, KeyboardInterrupt):
            return


# --------------------------------------------------------------------------------------------
# Parent side: the worker pool
# --------------------------------------------------------------------------------------------

_WORKER_BOOTSTRAP = (
    "import runpy, sys; "
    "runpy.run_path(sys.argv[1], run_name='_r1_verify_worker')['_worker_main'](int(sys.argv[2]))"
)


class _Worker:
    def __init__(self) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_BOOTSTRAP, os.path.abspath(__file__), str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C goes to the parent only
            )
        finally:
            child.close()
        self.ready = False

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:
            pass
        self.conn.close()


class _Pool:
    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self.workers = [_Worker() for _ in range(size)]

    def resize(self, size: int) -> None:
        while len(self.workers) < size:
            self.workers.append(_Worker())
        while len(self.workers) > size:
            self.workers.pop().kill()

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.workers[self.workers.index(worker)] = _Worker()

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.workers = []

    def run(self, jobs: list[tuple], timeout_s: float) -> list[tuple[bool, str]]:
        """Run jobs ``(op, args)`` across the workers; each is bounded by ``timeout_s`` once sent."""
        results: list[tuple[bool, str] | None] = [None] * len(jobs)
        todo = collections.deque(range(len(jobs)))
        busy: dict[_Worker, tuple[int, float]] = {}
        startup_deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        failed_starts = 0
        while todo or busy:
            now = time.monotonic()
            for worker in list(self.workers):
                if todo and worker.ready and worker not in busy:
                    index = todo.popleft()
                    try:
                        worker.conn.send(jobs[index])
                    except OSError:  # died while idle: the job never reached it
                        todo.appendleft(index)
                        self._replace(worker)
                        continue
                    busy[worker] = (index, now + timeout_s)
            waiting = [w for w in self.workers if w in busy or not w.ready]
            deadline = min((d for _, d in busy.values()), default=startup_deadline)
            by_conn = {w.conn: w for w in waiting}
            for conn in wait(list(by_conn), timeout=max(0.0, deadline - now)):
                worker = by_conn[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the worker died
                    if worker in busy:
                        results[busy.pop(worker)[0]] = (False, "error")
                    elif not worker.ready:
                        failed_starts += 1
                    self._replace(worker)
                    continue
                if not worker.ready:
                    worker.ready = message == _READY
                    failed_starts = 0
                elif worker in busy:
                    results[busy.pop(worker)[0]] = message
            now = time.monotonic()
            for worker, (index, job_deadline) in list(busy.items()):
                if now >= job_deadline:
                    del busy[worker]
                    results[index] = (False, "timeout")
                    self._replace(worker)
            no_worker = not busy and not any(w.ready for w in self.workers)
            if todo and no_worker and (now >= startup_deadline or failed_starts > 2 * len(self.workers)):
                while todo:
                    results[todo.popleft()] = (False, "error")
        return [r if r is not None else (False, "error") for r in results]


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()
_COUNT_LOCK = threading.Lock()


def _run_jobs(jobs: list[tuple], timeout_s: float, workers: int | None) -> list[tuple[bool, str]]:
    global _POOL
    if not jobs:
        return []
    with _POOL_LOCK:
        try:
            if _POOL is None:
                _POOL = _Pool(max(1, workers or DEFAULT_WORKERS))
            elif workers:
                _POOL.resize(max(1, workers))
            return _POOL.run(jobs, timeout_s)
        except BaseException as e:
            # Workers may still be busy with jobs of this batch (e.g. after Ctrl-C); their late
            # answers must never be read as answers to later jobs, so start afresh next time.
            if _POOL is not None:
                _POOL.close()
                _POOL = None
            if not isinstance(e, Exception):
                raise
            return [(False, "error")] * len(jobs)


def shutdown() -> None:
    """Kill the worker processes (they are restarted on the next call). Runs at exit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None


def _forget_pool_after_fork() -> None:
    # The child must neither use nor kill the parent's workers; it starts its own when needed.
    global _POOL, _POOL_LOCK, _COUNT_LOCK
    _POOL_LOCK, _COUNT_LOCK = threading.Lock(), threading.Lock()
    if _POOL is not None:
        for worker in _POOL.workers:
            worker.conn.close()
    _POOL = None


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _inner_timeout(timeout_s: float) -> int:
    """math-verify's own per-step alarm (whole seconds); the outer wall-clock bound is timeout_s."""
    return max(1, int(timeout_s // 2))


def _prepare(response: str, gold: str) -> Grade | tuple[str | None, tuple]:
    """A final Grade, or (pred, worker job) when math-verify has to decide."""
    pred, boxed_hedge = _extract(response)
    gold_n = _normalize(gold) if isinstance(gold, str) else ""
    if not gold_n:
        return Grade(False, "gold_unparseable", pred)
    if pred is None:
        return Grade(False, "no_answer", None)
    pred_n = _normalize(pred)
    if not pred_n:
        return Grade(False, "no_answer", pred)
    if _is_multi_valued(gold_n):
        gold_n, pred_n = _list_words_to_commas(gold_n), _list_words_to_commas(pred_n)
    elif boxed_hedge or _is_hedged(pred_n):
        return Grade(False, "hedged", pred)
    pred_n = _drop_assignment(pred_n, gold_n)
    verdict = _quick_verdict(pred_n, gold_n)
    if verdict is not None:
        return Grade(verdict == "correct", verdict, pred)
    return pred, ("grade", (_parse_forms(gold_n), _parse_forms(pred_n)))


def _count(grades: list[Grade]) -> None:
    with _COUNT_LOCK:
        REASON_COUNTS.update(g.reason for g in grades)


def grade_batch(
    responses: list[str], golds: list[str], timeout_s: float = 5.0, workers: int | None = None
) -> list[Grade]:
    """Grade ``responses[i]`` against ``golds[i]``; math-verify work runs in parallel workers.

    Identical (gold, answer) pairs are graded once. ``workers`` resizes the shared pool
    (default ``min(4, os.cpu_count())``). Never raises for bad inputs; see ``REASONS``.
    """
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses but {len(golds)} golds")
    grades: list[Grade | None] = [None] * len(responses)
    pending: dict[tuple, list[tuple[int, str | None]]] = {}
    for i, (response, gold) in enumerate(zip(responses, golds, strict=True)):
        try:
            prepared = _prepare(response, gold)
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


def grade(response: str, gold: str, timeout_s: float = 5.0) -> Grade:
    """Grade one whole model response against a gold final answer (see module docstring)."""
    return grade_batch([response], [gold], timeout_s=timeout_s)[0]


def is_correct(response: str, gold: str) -> bool:
    return grade(response, gold).correct


def gold_is_parseable(gold: str, timeout_s: float = 5.0) -> bool:
    """Whether a gold answer can be graded symbolically: a plain number, a text answer, or an
    expression math-verify parses (not just its raw-string fallback). Bounded like grade();
    results are cached per gold string."""
    return isinstance(gold, str) and _gold_is_parseable(gold, timeout_s)


@functools.lru_cache(maxsize=4096)
def _normalize_gold(gold: str) -> str:
    gold_n = _normalize(gold)
    return _list_words_to_commas(gold_n) if _is_multi_valued(gold_n) else gold_n


def _gold_is_parseable(gold: str, timeout_s: float) -> bool:
    gold_n = _normalize_gold(gold)
    if not gold_n:
        return False
    if _as_number(gold_n) is not None or _as_text(gold_n) is not None:
        return True
    [(ok, _)] = _run_jobs([("gold_ok", (_parse_forms(gold_n), _inner_timeout(timeout_s)))], timeout_s, None)
    return bool(ok)


def _same_prepare(a: str, b: str, timeout_s: float) -> bool | tuple:
    """True/False when decidable here, else the worker job that decides."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    a_n, b_n = _normalize(a), _normalize(b)
    if not a_n or not b_n:
        return False
    a_n, b_n = _drop_assignment(a_n, b_n), _drop_assignment(b_n, a_n)
    verdict = _quick_verdict(a_n, b_n)
    if verdict is not None:
        return verdict == "correct"
    return ("same", (_parse_forms(a_n), _parse_forms(b_n), _inner_timeout(timeout_s)))


def first_same_answer(answer: str, candidates: list[str], timeout_s: float = 5.0) -> int | None:
    """Index of the first candidate equivalent to ``answer`` (see same_answer), or None.
    The candidates that need math-verify are compared in parallel, in one batch."""
    prepared = [_same_prepare(answer, c, timeout_s) for c in candidates]
    jobs = [p for p in prepared if isinstance(p, tuple)]
    results = iter(_run_jobs(jobs, timeout_s, None))
    for index, p in enumerate(prepared):
        if (next(results)[0] if isinstance(p, tuple) else p) is True:
            return index
    return None


def same_answer(a: str, b: str, timeout_s: float = 5.0) -> bool:
    """Whether two *extracted* answers are equivalent (either may serve as the gold); used to group
    answers for cons@k. Same rules and bounds as grade(); a timeout counts as "different"."""
    return first_same_answer(a, [b], timeout_s) is not None
