"""What counts as an answer: where it is read from, and the written forms the grader accepts.

Pure functions, no math-verify, linear in the length of their input (every pattern is matched on a
string whose whitespace runs were collapsed first, and nothing longer than :data:`MAX_ANSWER_CHARS`
is parsed), so they run in the calling process without a time bound. :mod:`eval.verify` combines them
with math-verify into the grading policy; read its docstring for the policy as a whole.

- :func:`extract_answer`: the answer of a response (region, last box, trimming).
- :func:`normalize`: separators, ``\\dfrac``, spacing commands, collapsed whitespace.
- :func:`parse_number`: a number *written out* (integer, decimal, fraction of integers, mixed number,
  scientific notation, percent; with sign, thousands separators, currency, units, degrees or an
  ``x =`` label), as an exact :class:`Number`; anything with arithmetic still to do is not one.
- :func:`numbers_equal`: the numeric tolerance.
- :func:`as_text`, :func:`number_atoms`, :func:`has_prose`, :func:`is_hedged`, :func:`is_multi_valued`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from data.templates import boxes

__all__ = [
    "MAX_ANSWER_CHARS",
    "Number",
    "as_text",
    "extract",
    "extract_answer",
    "has_prose",
    "is_hedged",
    "is_multi_valued",
    "list_words_to_commas",
    "normalize",
    "number_atoms",
    "numbers_equal",
    "parse_number",
    "strip_unit_words",
]

# No real final answer is this long; longer ones are graded wrong without being parsed (a degenerate
# sample can put 100k characters in its answer region).
MAX_ANSWER_CHARS = 1000

# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

_PREFIX_RE = re.compile(
    r"^(?:\*\*)?\s*(?:(?:the\s+)?(?:final\s+)?answer\b(?:\s+is)?\s*[:：]?|(?:最终)?答案\s*[是为]?\s*[:：]?)\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"), ("**", "**"))
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_HEDGE_RE = re.compile(r"\bor\b|and\s?/\s?or|\\lor\b|\\vee\b|或|还是", re.IGNORECASE)


def _answer_region(response: str) -> str:
    end = response.rfind("</answer>")
    if end != -1:
        start = response.rfind("<answer>", 0, end)
        if start != -1:
            return response[start + len("<answer>") : end]
    think = response.rfind("</think>")
    region = response[think + len("</think>") :] if think != -1 else response
    return region.replace("<answer>", " ").replace("</answer>", " ")


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


def extract(response: str) -> tuple[str | None, bool]:
    """The answer (see :func:`extract_answer`) and whether the last two boxes were joined by "or"."""
    if not isinstance(response, str):
        return None, False
    region = _answer_region(response)
    found = boxes(region)
    boxed_hedge = False
    if found:
        start, content_start, content_end = found[-1]
        answer = region[content_start:content_end]
        if len(found) > 1:
            between = region[found[-2][2] + 1 : start]
            boxed_hedge = len(between) < 40 and bool(_HEDGE_RE.search(between))
    else:
        answer = region
    answer = _trim(answer)
    return (answer or None), boxed_hedge


def extract_answer(response: str) -> str | None:
    """The final answer of a response, or None.

    1. Answer region: the content of the last complete ``<answer>…</answer>`` block; otherwise the text
       after the last ``</think>``; otherwise the whole response. Stray ``<answer>``/``</answer>`` tags
       left in the region (a truncated ``<answer>12``) are removed.
    2. In the region: the content of the last *balanced* ``\\boxed{…}`` (``\\fbox``, ``\\framebox``
       too; an unclosed box is skipped). Without one, the region itself.
    3. Trimming: surrounding whitespace; a leading "The final answer is" / "The answer is" / "Answer:"
       / "Final answer:" / "答案是"; trailing ``.``/``。``; one pair of surrounding ``$…$``,
       ``$$…$$``, ``\\(…\\)``, ``\\[…\\]`` or ``**…**``.
    4. Empty after trimming (an empty box included) → None.
    """
    return extract(response)[0]


# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------

_THOUSANDS_RES = (
    re.compile(r"(?<=\d),\\! ?(?=\d{3}(?!\d))"),  # 11,\! 111
    re.compile(r"(?<=\d)\{,\}(?=\d{3}(?!\d))"),  # 1{,}000
    re.compile(r"(?<=\d)\\[,;: ] ?(?=\d{3}(?!\d))"),  # 1\,000
)
_SPACING_RE = re.compile(r"(?<!\\)\\[,;: ]|~|\\quad\b|\\qquad\b")
_WS_RE = re.compile(r"\s+")


def normalize(answer: str) -> str:
    """Whitespace runs → one space; thin-space/brace thousands separators (``11,\\! 111``,
    ``1{,}000``, ``1\\,000``) removed; other spacing commands → a space; ``\\!`` dropped;
    ``\\dfrac``/``\\tfrac`` → ``\\frac``; ``−`` → ``-``; trailing ``.,;`` stripped."""
    s = _WS_RE.sub(" ", answer).strip()
    for pattern in _THOUSANDS_RES:
        s = pattern.sub("", s)
    s = s.replace("\\!", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("−", "-")
    s = _WS_RE.sub(" ", _SPACING_RE.sub(" ", s))
    return s.rstrip(" .,;。").strip()


# --------------------------------------------------------------------------------------------
# Numbers written out
# --------------------------------------------------------------------------------------------

_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"


def _frac_args(num: str, den: str) -> str:
    """The two arguments of ``\\frac``: ``{12}{5}``, ``12`` as ``\\frac12``, or ``\\frac 1 2``."""
    return (rf"(?:\{{ ?(?P<{num}>[+-]?\d+) ?\}}|(?P<{num}1>\d)) ?"
            rf"(?:\{{ ?(?P<{den}>[+-]?\d+) ?\}}|(?P<{den}1>\d))")


# The number itself, matched at the start of what is left once label, sign and currency are read.
# Alternatives in order (Python takes the first that matches): a mixed number, \frac, a/b, then a
# decimal or integer with an optional scientific exponent.
_CORE_RE = re.compile(
    rf"(?P<whole>{_INT}) ?\\frac ?{_frac_args('mnum', 'mden')}"
    rf"|\\frac ?{_frac_args('fnum', 'fden')}"
    r"|(?P<snum>\d+) ?/ ?(?P<sden>\d+)"
    rf"|(?P<mant>{_INT}(?:\.\d+)?|\.\d+)"
    r"(?: ?(?:\\times|\\cdot|×) ?10 ?\^ ?(?:\{ ?(?P<exp>[+-]?\d+) ?\}|(?P<exp1>\d))|[eE](?P<eexp>[+-]?\d+))?"
)
# A label before the number: "x =", "x_1 =", "\theta =".
_LABEL_RE = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)? ?= ?")
_CURRENCY = r"\\\$|\$|€|£|¥|₹"
_SIGN_CURRENCY_RE = re.compile(rf"(?P<s1>[+-]?) ?(?:{_CURRENCY})? ?(?P<s2>[+-]?) ?")
_POWER = r"(?:\^ ?\{?[23]\}?)?"  # cm^2, \text{ m}^3
# One unit symbol after the number, with the space before it: percent, currency, degrees, or a
# \text{...} label (its argument may not hold digits: "\text{ or }5" is no unit).
_UNIT_RE = re.compile(
    rf" ?(?:\\%|%|{_CURRENCY}|\^ ?\{{? ?\\circ ?\}}?|°|\\degree\b"
    rf"|\\(?:text|mbox|mathrm|textrm|textbf|textit|operatorname) ?\{{[^{{}}\d]*\}}{_POWER})"
)
# Or a plain unit word: letters (and combining marks) of any script, "km/h", "sq.", "cm^2".
_WORD_RE = re.compile(r"( ?)(\S+)")
_WORD_POWER_RE = re.compile(r"\^ ?\{?[23]\}?$")
# Words that make a trailing "unit" prose instead ("5 is the answer", "5 or so", "5 then 6").
_NOT_UNITS = frozenset(
    "a an the is are was were be it its this that which or and nor not but then than otherwise else "
    "maybe perhaps probably possibly approximately about around roughly nearly almost exactly only "
    "answer answers final result so thus hence therefore because if of for to from in on at by with "
    "as plus minus times over divided equals equal mod modulo".split()
)
_MAX_UNIT_WORDS = 3
_MAX_DIGITS = 1000  # integers longer than this are compared by their digits, not as Fractions


@dataclass(frozen=True)
class Number:
    """A number as written: its exact value (None for an integer too long for arithmetic, then
    compared by ``digits``) and the fractional digits written (0 for integers and fractions)."""

    value: Fraction | None
    digits: str  # canonical integer text ("" if not an integer)
    decimals: int


def _unwrap(s: str) -> str:
    """Remove wrappers that add nothing: one ``\\text{…}``/``\\textbf{…}``/``\\mathbf{…}`` around the
    whole answer, and one pair of parentheses."""
    m = re.fullmatch(r"\\(?:text|textbf|mathbf|mathrm|mbox) ?\{([^{}]*)\}", s)
    if m:
        s = m.group(1).strip()
    if s.startswith("(") and s.endswith(")") and "(" not in s[1:-1] and ")" not in s[1:-1]:
        s = s[1:-1].strip()
    return s


def _is_word(token: str) -> bool:
    """Letters and combining marks only (any script), parts joined by ``/``, ``.`` or ``'``."""
    parts = [p for p in re.split(r"[./']", token) if p]
    return bool(parts) and all(unicodedata.category(ch)[0] in "LM" for part in parts for ch in part)


def _only_units(rest: str) -> bool:
    """Whether ``rest`` (what follows the number) is a run of units: ``\\%``, currency, degrees,
    ``\\text{…}`` labels, and at most three plain words, none of them prose (:data:`_NOT_UNITS`).
    A lone Latin letter is a unit only for m, g, s, h, L after a space ("5x", "5i", "5n" are
    math); a lone letter of another script is one (元, 个). Left to right, one token at a time."""
    words, pos = 0, 0
    while pos < len(rest):
        m = _UNIT_RE.match(rest, pos)
        if m is not None and m.end() > pos:
            pos = m.end()
            continue
        m = _WORD_RE.match(rest, pos)
        if m is None:
            return rest[pos:].strip() == ""
        space, token = m.group(1), _WORD_POWER_RE.sub("", m.group(2))
        word = token.rstrip(".")
        if not _is_word(word) or word.lower() in _NOT_UNITS:
            return False
        if len(word) == 1 and word.isascii() and not (space and word in "mgshL"):
            return False
        words += 1
        if words > _MAX_UNIT_WORDS:
            return False
        pos = m.end()
    return True


def parse_number(answer: str) -> Number | None:
    """The number ``answer`` writes out, or None if it is not one.

    ``answer`` should be :func:`normalize`\\ d. Accepted: ``12``, ``-3``, ``1,000``, ``0.5``, ``.5``,
    ``\\frac{3}{4}``, ``\\frac34``, ``3/4``, ``-\\frac{1}{2}``, ``2\\frac{1}{2}`` (a mixed number),
    ``1.5\\times 10^{3}``, ``1.5e3``, ``25\\%``, ``\\$18.90``, ``90^\\circ``, ``864 \\text{ inches}^2``,
    ``12 apples``, ``x = 5``, ``(5)``. Not numbers: ``2+3``, ``2^{10}``, ``\\sqrt{4}``, ``\\binom{8}{4}``,
    ``5!``, ``1 2`` (digits split by a space), ``first 5``, ``5 or 6``, ``5/6?``, ``5 is the answer``.
    """
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    s = _unwrap(answer.strip())
    label = _LABEL_RE.match(s)
    if label and label.end() < len(s):
        s = s[label.end() :]
    prefix = _SIGN_CURRENCY_RE.match(s)
    signs = (prefix.group("s1"), prefix.group("s2"))
    if all(signs):  # "-\$-5"
        return None
    s = _unwrap(s[prefix.end() :])
    core = _CORE_RE.match(s)
    if core is None or not _only_units(s[core.end() :]):
        return None
    return _value(core, -1 if "-" in signs else 1)


def _value(m: re.Match, sign: int) -> Number | None:
    def pair(num: str, den: str) -> tuple[int, int]:
        return int(m.group(num) or m.group(num + "1")), int(m.group(den) or m.group(den + "1"))

    if m.group("whole") is not None:
        num, den = pair("mnum", "mden")
        if not 0 <= num < den:  # "2\frac{5}{3}" is not a mixed number
            return None
        return Number(sign * (int(m.group("whole").replace(",", "")) + Fraction(num, den)), "", 0)
    if m.group("fnum") is not None or m.group("fnum1") is not None:
        num, den = pair("fnum", "fden")
        return None if den == 0 else Number(sign * Fraction(num, den), "", 0)
    if m.group("snum") is not None:
        den = int(m.group("sden"))
        return None if den == 0 else Number(sign * Fraction(int(m.group("snum")), den), "", 0)
    mant = m.group("mant").replace(",", "")
    exp_text = m.group("exp") or m.group("exp1") or m.group("eexp")
    if exp_text is None and "." not in mant:
        digits = mant.lstrip("0") or "0"
        if sign < 0 and digits != "0":
            digits = "-" + digits
        if len(mant) > _MAX_DIGITS:
            return Number(None, digits, 0)
        return Number(Fraction(int(digits)), digits, 0)
    if len(mant) > _MAX_DIGITS or (exp_text is not None and abs(int(exp_text)) > _MAX_DIGITS):
        return None
    value = Fraction(mant)
    if exp_text is not None:  # scientific notation: exact as written
        return Number(sign * value * Fraction(10) ** int(exp_text), "", 0)
    return Number(sign * value, "", len(mant.partition(".")[2]))


# Tolerance (the numeric part of the answer policy, stated once):
REL_TOL = Fraction(1, 10**9)
MIN_ROUNDED_DECIMALS = 6


def numbers_equal(gold: Number, pred: Number) -> bool:
    """Whether ``pred`` is the number ``gold``.

    - Exactly equal (as rationals: ``0.5`` = ``\\frac{1}{2}`` = ``2/4``; ``12.0`` = ``12``); or
    - relatively close, when either is written as a decimal: ``|pred − gold| ≤ 1e-9·|gold|`` (so
      ``4.9999999`` ≠ ``5``; integers and fractions must be exact: ``11111111101`` ≠ ``11111111100``); or
    - a rounded decimal of a fraction that has no finite decimal expansion: ``pred`` written with at
      least 6 fractional digits and within one unit of its last digit (``0.333333`` and ``0.666667``
      answer ``\\frac13`` and ``\\frac23``; ``0.33`` does not).

    A percent is compared as the number written before its sign (``25\\%`` = ``25``): it is never
    taken as its hundredth (``0.25`` ≠ ``25\\%``, ``500\\%`` ≠ ``5``).
    """
    if gold.value is None or pred.value is None:  # huge integers: exact digits only
        return gold.digits != "" and gold.digits == pred.digits
    g, p = gold.value, pred.value
    if g == p:
        return True
    if (gold.decimals or pred.decimals) and abs(p - g) <= REL_TOL * abs(g):
        return True
    if pred.decimals >= MIN_ROUNDED_DECIMALS and not _terminates(g):
        return abs(p - g) < Fraction(1, 10**pred.decimals)
    return False


def _terminates(x: Fraction) -> bool:
    den = x.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    return den == 1


# --------------------------------------------------------------------------------------------
# Lists, text, prose, hedges
# --------------------------------------------------------------------------------------------

_LIST_WORDS_RE = re.compile(r"\\text\{ ?,? ?(?:and|or) ?\}|,? ?\b(?:and|or)\b|或", re.IGNORECASE)
_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname) ?\{([^{}]*)\}")
_PROSE_RE = re.compile(
    r"[A-Za-z\u00c0-\u024f]{3,}|[\u0400-\u04ff\u0980-\u09ff\u0c00-\u0c7f\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
)
_COMMAND_RE = re.compile(r"\\[A-Za-z]+(?: ?\{[A-Za-z*]*\})?")  # \begin{pmatrix}, \mathbb{R}, \sqrt
_RELATION_RE = re.compile(r"[<>≤≥]|\\(?:le|ge|lt|gt|leq|geq|neq)\b")
_INFINITY_RE = re.compile(r"[+-]? ?\\infty|[+-]? ?∞")


def is_multi_valued(gold: str) -> bool:
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


def list_words_to_commas(s: str) -> str:
    s = _LIST_WORDS_RE.sub(",", s)
    return re.sub(r" ?,(?: ?,)+", ",", s).strip(" ,")


def is_hedged(pred: str) -> bool:
    """Whether the answer offers alternatives ("12 or 13"); "x < 2 or x > 3" is one condition."""
    return bool(_HEDGE_RE.search(pred)) and not _RELATION_RE.search(pred)


def has_prose(s: str) -> bool:
    """Words outside LaTeX commands and ``\\text{}`` labels: a run of three Latin letters, or any
    Cyrillic, Indic, Thai or CJK character."""
    return bool(_PROSE_RE.search(_COMMAND_RE.sub(" ", _TEXT_CMD_RE.sub(" ", s))))


def strip_unit_words(s: str) -> str:
    """``s`` without up to three trailing plain unit words ("480 + 480\\sqrt{3} feet" → the
    expression), when something is left and none of them is prose; else ``s`` unchanged."""
    tokens = s.split(" ")
    kept = len(tokens)
    while kept > 1 and len(tokens) - kept < _MAX_UNIT_WORDS:
        word = tokens[kept - 1].rstrip(".")
        if len(word) < 2 or not _is_word(word) or word.lower() in _NOT_UNITS:
            break
        kept -= 1
    return " ".join(tokens[:kept]) if kept < len(tokens) else s


def as_text(s: str) -> str | None:
    """Lower-cased words if the answer is plain text (``\\text{(C)}`` → "c"), else None."""
    t = _TEXT_CMD_RE.sub(r"\1", s).strip()
    if t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    if not re.fullmatch(r"[A-Za-z]+(?: [A-Za-z]+)*", t):
        return None
    if len(t) == 1 and t.lower() not in "abcde":  # a lone x or i is more likely math than a choice
        return None
    return t.lower()


def _top_level_split(s: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def number_atoms(s: str) -> list[str] | None:
    """The atoms of a list, tuple, set or interval whose every atom is a number written out or ±∞
    (``3, -3``; ``(6,31,-1)``; ``\\{1, 2\\}``; ``(-\\infty, 2]``), else None."""
    t = s.strip()
    for left, right in (("\\{", "\\}"), ("\\left(", "\\right)"), ("\\left[", "\\right]"), ("(", ")"),
                        ("[", ")"), ("(", "]"), ("[", "]")):
        if t.startswith(left) and t.endswith(right):
            t = t[len(left) : len(t) - len(right)]
            break
    atoms = _top_level_split(t)
    if len(atoms) < 2:
        return None
    for atom in atoms:
        if not (_INFINITY_RE.fullmatch(atom) or parse_number(atom) is not None):
            return None
    return atoms
