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

import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from data.templates import boxes

__all__ = [
    "MAX_ANSWER_CHARS",
    "LABEL",
    "Extracted",
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
    "Units",
    "strip_unit_words",
    "unit_conflict",
]

# No real final answer is this long; longer ones are graded wrong without being parsed (a degenerate
# sample can put 100k characters in its answer region).
MAX_ANSWER_CHARS = 1000

# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

# A leading "The final answer is", "Answer:", "####", in the benchmarks' languages.
_PREFIX_RE = re.compile(
    r"^(?:\*\*)?\s*(?:#{2,4}|(?:the\s+)?(?:final\s+)?answer\b(?:\s+is)?\s*[:：]?|(?:最终)?答案\s*[是为]?\s*[:：]?|答\s*[:：]"
    r"|(?:一共|总共|合计|共)(?=\s*\d)"
    r"|答え\s*[:：]|ответ\s*[:：]|antwort\s*[:：]|(?:die\s+)?antwort\s+ist|réponse\s*[:：]|la\s+réponse\s+est"
    r"|(?:la\s+)?respuesta(?:\s+es)?\s*[:：]?|jibu\s*[:：]|คำตอบ\s*[:：]|উত্তর\s*[:：]|సమాధానం\s*[:：])\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)
_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"), ("**", "**"))
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
# Words that offer an alternative ("5 or 6", "\boxed{5} oder \boxed{6}"), in the benchmarks' languages.
_OR_WORDS = (r"\bor\b|and\s?/\s?or|\\lor\b|\\vee\b|\beither\b|\bmaybe\b|\bperhaps\b|\balternatively\b|\bversus\b"
             r"|\bvs\b|\boder\b|\bou\b|\boppure\b|\bveya\b|\bhoặc\b|\bили\b|या|または|或者?|还是|또는|หรือ")
_HEDGE_RE = re.compile(_OR_WORDS, re.IGNORECASE)
# Another number offered right next to the last box: "5 or \boxed{936}", "\boxed{936} or 5" (only
# spaces, dollars, brackets or punctuation between), searched in a window of _HEDGE_WINDOW characters.
# Worked solutions write "…, or \boxed{58}" for "that is": a word or the same number there is fine.
_OR_BEFORE_BOX_RE = re.compile(rf"(?P<alt>[^\s$]*)[\s$,]*(?:{_OR_WORDS})[\s$(]*$", re.IGNORECASE)
_OR_AFTER_BOX_RE = re.compile(rf"^[\s$).,]*(?:{_OR_WORDS})[\s$(]*(?P<alt>[^\s$,;]*)", re.IGNORECASE)
_HEDGE_WINDOW = 40
_MAX_BOXES = 20
# A sign-off some prompt templates teach ("… is $5$. I hope it is correct.").
_SIGN_OFF = "i hope it is correct"


@dataclass(frozen=True)
class Extracted:
    """What a response answers: ``answer`` (see :func:`extract_answer`), every box of its answer
    region (``boxed``, in order) and whether it offers alternatives (``hedged``)."""

    answer: str | None
    boxed: tuple[str, ...] = ()
    hedged: bool = False


def _answer_region(response: str) -> tuple[str | None, bool]:
    """(the answer region, whether it holds two different ``<answer>`` blocks); None for a region
    that closes an answer block it never opened (a ``</think>`` inside ``<answer>…</answer>``)."""
    think = response.rfind("</think>")
    after = think + len("</think>") if think != -1 else 0  # an <answer> inside the thinking is no answer
    blocks, pos = [], after
    while (start := response.find("<answer>", pos)) != -1:  # str.find, not a regex: linear
        end = response.find("</answer>", start)
        if end == -1:
            break
        blocks.append(response[start + len("<answer>") : end])
        pos = end + len("</answer>")
    first_close = response.find("</answer>", after)
    if first_close != -1 and response.find("<answer>", after, first_close) == -1:
        return None, False
    if blocks:
        return blocks[-1], len({" ".join(b.split()) for b in blocks}) > 1
    return response[after:].replace("<answer>", " ").replace("</answer>", " "), False


def _trim(text: str) -> str:
    s = text.strip()
    if s.rstrip(".").lower().endswith(_SIGN_OFF):
        s = s.rstrip(".")[: -len(_SIGN_OFF)].strip()
    for _ in range(2):  # "Final answer: The final answer is 12"
        s = _PREFIX_RE.sub("", s, count=1).strip()
    s = s.rstrip(" \t\n.。").strip()
    if s.endswith("**") and not s.startswith("**"):  # "**Answer: 18**" lost its opening ** above
        s = s[:-2].rstrip(" .。").strip()
    for left, right in _DELIMITERS:
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            inner = s[len(left) : len(s) - len(right)]
            if "$" in left and _UNESCAPED_DOLLAR.search(inner):
                continue
            s = inner.strip().rstrip(".。").strip()
            break
    return s


def extract(response: str) -> Extracted:
    """The answer of a response (see :func:`extract_answer`), with every box of its region, and
    whether it offers alternatives: two different boxes or ``<answer>`` blocks, or an "or" (in
    any of the benchmarks' languages) next to the last box."""
    if not isinstance(response, str):
        return Extracted(None)
    region, two_blocks = _answer_region(response)
    if region is None:
        return Extracted(None)
    found = boxes(region)
    hedged = two_blocks
    contents: tuple[str, ...] = ()
    if found:
        start, content_start, content_end = found[-1]
        if len(found) > _MAX_BOXES:  # a degenerate region: no answer worth reading
            return Extracted(None, (), True)
        contents = tuple(_trim(region[a:b]) for _, a, b in found)
        answer = region[content_start:content_end]
        nearby = (_OR_BEFORE_BOX_RE.search(region[max(0, start - _HEDGE_WINDOW) : start]),
                  _OR_AFTER_BOX_RE.search(region[content_end + 1 : content_end + 1 + _HEDGE_WINDOW]))
        other_number = any(m is not None and _other_number(m.group("alt"), contents[-1]) for m in nearby)
        hedged = hedged or other_number or len({" ".join(c.split()) for c in contents}) > 1
    else:
        answer = region
    answer = _trim(answer)
    return Extracted(answer or None, contents, hedged)


def _other_number(alt: str, boxed: str) -> bool:
    """Whether ``alt`` is a number, and not the boxed one ("1\\frac{1}{4}$, or $\\boxed{1.25}$" is
    one number written twice)."""
    x, y = parse_number(normalize(alt)), parse_number(normalize(boxed))
    return x is not None and (y is None or x.value is None or x.value != y.value)


def extract_answer(response: str) -> str | None:
    """The final answer of a response, or None.

    1. Answer region: the text after the last ``</think>`` (the whole response if there is none); in
       it, the content of the last complete ``<answer>…</answer>`` block if there is one. Stray
       ``<answer>``/``</answer>`` tags left in the region (a truncated ``<answer>12``) are removed; a
       region that closes a block it never opened has no answer.
    2. In the region: the content of the last *balanced* ``\\boxed{…}`` (``\\fbox``, ``\\framebox``
       too; an unclosed box is skipped). Without one, the region itself.
    3. Trimming: surrounding whitespace; a trailing "I hope it is correct."; a leading "The final
       answer is" / "The answer is" / "Answer:" / "Final answer:" / "答案是"; trailing ``.``/``。``;
       one pair of surrounding ``$…$``,
       ``$$…$$``, ``\\(…\\)``, ``\\[…\\]`` or ``**…**``.
    4. Empty after trimming (an empty box included) → None.
    """
    return extract(response).answer


# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------

# A thousands-separated integer written with LaTeX separators ("11,\! 111", "1{,}000", "1\,000"): a
# first group of 1-3 digits that does not start with 0 ("0{,}936" is no thousands number), then
# groups of three.
_SEP = r"(?:,\\!|\{,\}|\\[,;: ]) ?"
_THOUSANDS_RE = re.compile(rf"(?<![\d.])[1-9]\d{{0,2}}(?:{_SEP}\d{{3}})+(?!\d)")
_SPACING_RE = re.compile(r"(?<!\\)\\[,;: ]|~|\\quad\b|\\qquad\b")
_WS_RE = re.compile(r"\s+")
_DELIMITER_SIZE_RE = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr)(?:\.|\b)")
_SQRT_RE = re.compile(r"√ ?(\d+)")
_REPLACEMENTS = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\!", ""), ("−", "-"), ("∞", "\\infty"),
                 ("\\textdegree", "^\\circ"), ("℃", "°C"), ("℉", "°F"), ("\\textdollar", "\\$"), ("％", "%"),
                 ("½", "\\frac{1}{2}"), ("⅓", "\\frac{1}{3}"), ("⅔", "\\frac{2}{3}"), ("¼", "\\frac{1}{4}"),
                 ("¾", "\\frac{3}{4}"))


def _outer_braces_removed(s: str) -> str:
    """``{936}`` → ``936`` (one pair of braces around the whole answer adds nothing)."""
    if s.startswith("{") and s.endswith("}"):
        depth = 0
        for i, ch in enumerate(s):
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0 and i < len(s) - 1:
                return s
        return s[1:-1].strip()
    return s


def normalize(answer: str) -> str:
    """Whitespace runs → one space; LaTeX thousands separators (``11,\\! 111``, ``1{,}000``,
    ``1\\,000``) removed; other spacing commands → a space; ``\\left``/``\\right`` dropped;
    ``\\dfrac``/``\\tfrac`` → ``\\frac``; ``−`` → ``-``; ``∞`` → ``\\infty``; ``√2`` → ``\\sqrt{2}``;
    a leading ``\\therefore`` and one pair of braces around everything dropped; trailing ``.,;``
    stripped. Linear."""
    s = _WS_RE.sub(" ", answer).strip()
    s = _THOUSANDS_RE.sub(lambda m: re.sub(_SEP, "", m.group(0)), s)
    for old, new in _REPLACEMENTS:
        s = s.replace(old, new)
    s = _SQRT_RE.sub(r"\\sqrt{\1}", _DELIMITER_SIZE_RE.sub("", s))
    s = _WS_RE.sub(" ", _SPACING_RE.sub(" ", s)).strip()
    s = s.removeprefix("\\therefore").strip()
    return _outer_braces_removed(s.rstrip(" .,;。").strip())


# --------------------------------------------------------------------------------------------
# Numbers written out
# --------------------------------------------------------------------------------------------

_INT = r"(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)"  # "1,000" but not "0,936" (a European decimal)


def _frac_args(num: str, den: str) -> str:
    """The two arguments of ``\\frac``: ``{12}{5}``, ``12`` as ``\\frac12``, or ``\\frac 1 2``."""
    return (rf"(?:\{{ ?(?P<{num}>[+-]?\d+) ?\}}|(?P<{num}1>\d)) ?"
            rf"(?:\{{ ?(?P<{den}>[+-]?\d+) ?\}}|(?P<{den}1>\d))")


# The number itself, matched at the start of what is left once label, sign and currency are read.
# Alternatives in order (Python takes the first that matches): a mixed number, \frac, a/b, a repeating
# decimal, then a decimal or integer with an optional scientific exponent.
_CORE_RE = re.compile(
    rf"(?P<whole>{_INT}) ?\\frac ?{_frac_args('mnum', 'mden')}"
    r"|(?P<pwhole>\d+) (?P<pnum>\d+)/(?P<pden>\d+)"  # 137 1/2
    rf"|\\frac ?{_frac_args('fnum', 'fden')}"
    r"|(?P<snum>\d+) ?/ ?(?P<sden>\d+)"
    r"|(?P<rint>\d*)\.(?P<rfix>\d*) ?\\overline ?\{ ?(?P<rrep>\d+) ?\}"
    rf"|(?P<mant>{_INT}(?:\.\d+)?|\.\d+)"
    r"(?: ?(?:\\times|\\cdot|×) ?10 ?\^ ?(?:\{ ?(?P<exp>[+-]?\d+) ?\}|(?P<exp1>\d))|[eE](?P<eexp>[+-]?\d+))?"
)
# A label before the number, naming what it is: "x =", "x_1 =", "\theta =", "m+n =", "f(5) =", "AB =",
# "|z| =", "\angle A =", "(a,b,c) =" (but not any command: "\ne =", and no arithmetic: "2+3 =").
_GREEK = ("alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|"
          "pi|rho|sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Phi|Psi|Omega")
_NAME = rf"(?:(?:\\angle ?)?[A-Za-z]{{1,3}}|\\(?:{_GREEK})\b)(?:_\{{?\w+\}}?)?(?:\([^()=]{{0,20}}\))?"
_LABEL = rf"(?:{_NAME}|\|{_NAME}\|)(?: ?[+-] ?(?:{_NAME}|\|{_NAME}\|))*|\((?:{_NAME})(?: ?, ?{_NAME})+\)"
LABEL = _LABEL  # for eval.verify's symbolic labels
_LABEL_RE = re.compile(rf"(?:{_LABEL}) ?= ?")
_CURRENCY = r"\\\$|\$|€|£|¥|₹|¢"
_SIGN_CURRENCY_RE = re.compile(rf"(?P<s1>[+-]?) ?(?:{_CURRENCY})? ?(?P<s2>[+-]?) ?")
_POWER = r"(?:\^ ?\{?[23]\}?|[²³])?"  # cm^2, \text{ m}^3, m²
# One unit symbol after the number, with the space before it: percent, currency, degrees (°C too),
# or "/" between two units (km/h, \text{m}/\text{s}).
_UNIT_SYMBOL_RE = re.compile(
    rf" ?(?:\\%|%|{_CURRENCY}|(?:\^ ?\{{? ?\\circ ?\}}?|°|\\degree\b) ?[CF]?(?![A-Za-z])|/|_ ?\{{? ?10 ?\}}?)"
)
# A \text{...} label (its words are checked like plain words), or a plain word.
_TEXT_UNIT_RE = re.compile(rf"( ?)\\(?:text|mbox|mathrm|textrm|textbf|textit|operatorname) ?\{{([^{{}}]*)\}}({_POWER})")
_WORD_RE = re.compile(r"( ?)[(（]?([^\s\\/^{}$%()（）]+)[)）]?(?P<power>\^ ?\{?[23]\}?)?")
_WORD_POWER_RE = re.compile(r"(?:\^ ?\{?[23]\}?|[²³])$")
# Words after a number that make it prose, a hedge or another value, not a unit: function words,
# hedges and judgements ("5 or so", "5 is wrong", "5 guess"), number words and multipliers ("5
# thousand", "5 dozen", "5 squared", "5 tenths"), in English and the commonest other languages.
_NOT_UNITS = frozenset(
    "a an the is are was were be it its this that which or and nor not no yes but then than otherwise else "
    "maybe perhaps probably possibly likely unlikely approximately approx about around roughly nearly almost "
    "exactly only guess guessed unsure est estimate estimated ish sorry typo never etc "
    "answer answers final result so thus hence therefore because if of for to from in on at by with as "
    "plus minus times over divided equals equal mod modulo squared cubed factorial power root th st nd rd "
    "wrong right correct incorrect true false none nothing unknown undefined infinity reciprocal inverse "
    "negative positive more less bc bce bps permille basis percentile percentiles "
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred hundreds "
    "thousand thousands million millions billion billions trillion trillions dozen dozens score gross half "
    "halves third thirds quarter quarters tenth tenths hundredth hundredths thousandth thousandths lakh "
    "crore bn "
    "oder und nicht ou et pas non o y e ni au na ó oppure veya hoặc "
    "eins zwei drei vier fünf sechs sieben acht neun zehn un une deux trois quatre cinq six sept huit neuf dix "
    "uno una dos tres cuatro cinco seis siete ocho nueve diez mil mille tausend millionen million "
    "или и не тысяч тысячи тысяча миллион миллиона один два три четыре пять шесть семь восемь девять десять "
    "या और नहीं हजार हज़ार लाख करोड़ หรือ พัน หมื่น แสน ล้าน または 또는 천 만 억".split()
)
# Units and measure words of scripts written without spaces (a number followed by anything else in
# them, such as 万 or 不对, is no number): Chinese, Japanese, Korean.
_CJK_UNITS = frozenset(
    "个 元 角 分 块 米 厘米 毫米 分米 千米 公里 平方米 平方厘米 平方分米 平方千米 立方米 立方厘米 立方分米 克 千克 公斤 斤 "
    "吨 升 毫升 秒 分钟 小时 时 天 日 周 星期 月 年 岁 人 名 位 只 头 条 本 张 支 枝 辆 棵 朵 件 次 页 道 题 盒 箱 "
    "袋 瓶 杯 碗 双 套 台 把 根 粒 颗 间 层 场 份 组 节 排 行 号 度 倍 元钱 块钱 公顷 亩 "
    "個 円 枚 匹 冊 回 歳 杯 台 冊 人 本 개 명 원 살 마리 권 번 시간 분 초".split()
)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_MAX_UNIT_WORDS = 3
_MAX_DIGITS = 1000  # integers longer than this are compared by their digits, not as Fractions


@dataclass(frozen=True)
class Number:
    """A number as written: its exact value (None for an integer too long for arithmetic, then
    compared by ``digits``) and the fractional digits written (0 for integers and fractions)."""

    value: Fraction | None
    digits: str  # canonical integer text ("" if not an integer)
    decimals: int
    form: str = "integer"  # integer, decimal, fraction, mixed, repeating, scientific
    lowest_terms: bool = True  # False for a fraction written unreduced (\frac{2}{4})


def _unwrap(s: str) -> str:
    """Remove wrappers that add nothing: one ``\\text{…}``/``\\textbf{…}``/``\\mathbf{…}`` around the
    whole answer, and one pair of parentheses."""
    m = re.fullmatch(r"\\(?:text|textbf|mathbf|mathrm|mbox) ?\{([^{}]*)\}", s)
    if m:
        s = m.group(1).strip()
    if s.startswith("(") and s.endswith(")") and "(" not in s[1:-1] and ")" not in s[1:-1]:
        s = s[1:-1].strip()
    return s


_UNIT_KINDS = (
    ("degree", re.compile(r"\\circ|°|\\degree|\bdeg(?:ree)?s?\b", re.I)),
    ("radian", re.compile(r"\brad(?:ian)?s?\b", re.I)),
    ("dollar", re.compile(r"\\\$|\$|\bdollars?\b", re.I)),
    ("cent", re.compile(r"¢|\bcents?\b", re.I)),
)
_CONFLICTS = {("degree", "radian"), ("radian", "degree"), ("dollar", "cent"), ("cent", "dollar")}


def unit_conflict(gold: str, pred: str) -> bool:
    """Whether ``pred`` states a unit that contradicts the gold's: radians for degrees, dollars for
    cents (``30 \\text{ radians}`` is no answer to ``30^\\circ``)."""
    g = {kind for kind, pattern in _UNIT_KINDS if pattern.search(gold)}
    p = {kind for kind, pattern in _UNIT_KINDS if pattern.search(pred)}
    return any((a, b) in _CONFLICTS and b not in g for a in g for b in p)


def _is_word(token: str) -> bool:
    """Letters and combining marks only, not Greek (π is math), parts joined by ``.`` or ``'``."""
    parts = [p for p in re.split(r"[.']", token) if p]
    return bool(parts) and all(unicodedata.category(part[0])[0] == "L" for part in parts) and all(
        unicodedata.category(ch)[0] in "LM" and not "\u0370" <= ch <= "\u03ff" for part in parts for ch in part)


# Units of measure a number may carry whatever the question says (lowercase; plurals by rule below).
UNIT_VOCABULARY = frozenset(
    "m cm mm km nm um dm in inch inches ft foot feet yd yard mi mile meter metre centimeter centimetre millimeter "
    "millimetre kilometer kilometre sq square cubic cu units unit l liter litre ml milliliter millilitre gallon gal "
    "quart qt pint pt cup oz ounce fl lb lbs pound g gram kg kilogram mg milligram ton tonne t s sec second min "
    "minute h hr hrs hour day week month year yr decade century mph kph kmh km/h m/s fps rpm degree deg radian rad "
    "dollar cent euro yuan rmb usd percent pct point pts hz khz mhz ghz w kw watt v volt a amp j joule n newton "
    "pa kpa cal kcal b kb mb gb tb byte bit".split()
)


@dataclass(frozen=True)
class Units:
    """What may follow a number in an answer (:func:`parse_number` with ``units``): the units of
    :data:`UNIT_VOCABULARY`, and the words of the question (``words``, lowercase) and, for scripts
    without spaces, its text (``text``): a count of the question's own things (``5 apples`` for "How
    many apples…", ``5个苹果`` for "…几个苹果"). Anything else after the number is prose."""

    words: frozenset = frozenset()
    text: str = ""

    def allows(self, word: str) -> bool:
        w = word.lower()
        forms = {w, w[:-1] if w.endswith("s") else w, w[:-2] if w.endswith("es") else w,
                 w[:-3] + "y" if w.endswith("ies") else w}
        return bool(forms & UNIT_VOCABULARY) or bool(forms & self.words) or (w + "s") in self.words


def _unit_word(word: str, spaced: bool, powered: bool = False, units: Units | None = None) -> bool:
    """Whether ``word`` (one token after the number) may be a unit: a word, not one of
    :data:`_NOT_UNITS` ("in" only as a power: ``in^2``); in Chinese, Japanese or Korean one of
    :data:`_CJK_UNITS`; a lone Latin letter only for m, g, s, h, L after a space ("5x", "5i", "5n"
    are math). With ``units`` (an answer graded against its question), a Latin word only where
    ``units`` allows it, and a CJK one only as a measure word, a thing the question names, or a measure
    word followed by one (``个苹果``)."""
    word = word.rstrip(".")
    if not _is_word(word):
        return False
    if _CJK_RE.search(word):
        if word in _CJK_UNITS:
            return True
        if units is None:
            return False
        return word in units.text or any(word.startswith(u) and word[len(u):] in units.text for u in _CJK_UNITS)
    if word.lower() in _NOT_UNITS and not (powered and word.lower() == "in"):
        return False
    if len(word) == 1 and word.isascii():
        return spaced and word in "mgshL"
    return units is None or units.allows(word)


def _only_units(rest: str, units: Units | None = None) -> bool:
    """Whether ``rest`` (what follows the number) is a run of units: ``\\%``, currency, degrees,
    ``\\text{…}`` labels and plain words that :func:`_unit_word` accepts, at most three words in all.
    Left to right, one token at a time: linear."""
    words, pos = 0, 0
    while pos < len(rest):
        m = _UNIT_SYMBOL_RE.match(rest, pos)
        if m is not None and m.end() > pos:
            pos = m.end()
            continue
        m = _TEXT_UNIT_RE.match(rest, pos)
        if m is not None:
            tokens = re.sub(r"[/()（）]", " ", m.group(2)).split()  # "\text{ (dollars)}", "\text{km/h}"
            if not tokens or not all(_unit_word(t, True, powered=bool(m.group(3)), units=units) for t in tokens):
                return False
            words += len(tokens)
        else:
            m = _WORD_RE.match(rest, pos)
            if m is None:
                return rest[pos:].strip() == ""
            spaced = bool(m.group(1)) or rest[pos - 1 : pos] == "/"  # "5 m", "5 km/h"
            word = _WORD_POWER_RE.sub("", m.group(2))
            if not _unit_word(word, spaced=spaced, powered=bool(m.group("power")) or word != m.group(2), units=units):
                return False
            words += 1
        if words > _MAX_UNIT_WORDS:
            return False
        pos = m.end()
    return True


def parse_number(answer: str, units: Units | None = None) -> Number | None:
    """The number ``answer`` writes out, or None if it is not one.

    ``answer`` should be :func:`normalize`\\ d. Accepted: ``12``, ``-3``, ``1,000``, ``0.5``, ``.5``,
    ``0.\\overline{3}``, ``\\frac{3}{4}``, ``\\frac34``, ``3/4``, ``-\\frac{1}{2}``, ``2\\frac{1}{2}``
    (a mixed number), ``1.5\\times 10^{3}`` and ``1.5e3`` (mantissa in [1, 10), exponent not 0),
    ``25\\%``, ``\\$18.90``, ``90^\\circ``, ``864 \\text{ inches}^2``, ``12 apples``, ``5 km/h``,
    ``x = 5``, ``(5)``. Not numbers: ``2+3``, ``2^{10}``, ``\\sqrt{4}``, ``\\binom{8}{4}``, ``5!``,
    ``\\frac{1872}{2}`` (a fraction whose value is a whole number: a division left to do),
    ``9360\\times 10^{-1}``, ``1 2`` (digits split by a space), ``0,936``, ``first 5``, ``5 or 6``,
    ``5/6?``, ``5 is the answer``, ``5 thousand``, ``5 \\text{ (maybe six)}``. ``units``: what may follow
    the number (:class:`Units`; None, for golds: any word but :data:`_NOT_UNITS`).
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
    inner = re.match(r"\( ?([^()]*?) ?\)", s)  # "(\frac{270}{7})^\circ": a number in parentheses, then units
    core = _CORE_RE.fullmatch(inner.group(1)) if inner else _CORE_RE.match(s)
    end = inner.end() if inner else (core.end() if core else 0)
    if core is None or not _only_units(s[end:], units):
        return None
    return _value(core, -1 if "-" in signs else 1)


def _value(m: re.Match, sign: int) -> Number | None:
    def pair(num: str, den: str) -> tuple[int, int]:
        return int(m.group(num) or m.group(num + "1")), int(m.group(den) or m.group(den + "1"))

    def fraction(num: int, den: int) -> Number | None:
        # A fraction must be one: not a whole number in disguise (\frac{1872}{2}, \frac{5}{1}), no
        # double minus (\frac{-3}{-4}), no zero denominator.
        if den == 0 or num % den == 0 or (num < 0 and den < 0):
            return None
        return Number(sign * Fraction(num, den), "", 0, "fraction", math.gcd(num, den) == 1)

    if m.group("pwhole") is not None:
        num, den = int(m.group("pnum")), int(m.group("pden"))
        if not 0 < num < den:
            return None
        return Number(sign * (int(m.group("pwhole")) + Fraction(num, den)), "", 0, "mixed")
    if m.group("whole") is not None:
        num, den = pair("mnum", "mden")
        if not 0 < num < den:  # "2\frac{5}{3}" and "2\frac{0}{3}" are not mixed numbers
            return None
        return Number(sign * (int(m.group("whole").replace(",", "")) + Fraction(num, den)), "", 0, "mixed")
    if m.group("fnum") is not None or m.group("fnum1") is not None:
        return fraction(*pair("fnum", "fden"))
    if m.group("snum") is not None:
        return fraction(int(m.group("snum")), int(m.group("sden")))
    if m.group("rrep") is not None:  # 0.1\overline{6} = 1/6
        whole, fixed, rep = m.group("rint") or "0", m.group("rfix"), m.group("rrep")
        value = int(whole) + Fraction(int(fixed or "0"), 10 ** len(fixed)) + Fraction(
            int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return Number(sign * value, "", 0, "repeating")
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
    if exp_text is not None:  # scientific notation: exact as written, mantissa in [1, 10)
        if not 1 <= value < 10 or int(exp_text) == 0:
            return None
        return Number(sign * value * Fraction(10) ** int(exp_text), "", 0, "scientific")
    return Number(sign * value, "", len(mant.partition(".")[2]), "decimal")


# Tolerance (the numeric part of the answer policy, stated once):
REL_TOL = Fraction(1, 10**9)
MIN_ROUNDED_DECIMALS = 6


def numbers_equal(gold: Number, pred: Number, rounded: bool = False) -> bool:
    """Whether ``pred`` is the number ``gold``.

    - Exactly equal (as rationals: ``0.5`` = ``\\frac{1}{2}`` = ``2/4``; ``12.0`` = ``12``); or
    - relatively close, when either is written as a decimal: ``|pred − gold| ≤ 1e-9·|gold|`` (so
      ``4.9999999`` ≠ ``5``; integers and fractions must be exact: ``11111111101`` ≠ ``11111111100``); or,
      with ``rounded`` (the question asks for a decimal or a rounded value),
    - a rounded decimal of a fraction that has no finite decimal expansion: ``pred`` written with at
      least 6 fractional digits and within one unit of its last digit (``0.333333`` and ``0.666667``
      answer ``\\frac13`` and ``\\frac23``; ``0.33`` does not). Without ``rounded`` an exact gold needs
      its exact value.

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
    if rounded and pred.decimals >= MIN_ROUNDED_DECIMALS and not _terminates(g):
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
    """A top-level comma (in a set ``\\{…\\}`` too), an "or"/"and" between values, or ±: the gold lists
    several values."""
    if "\\pm" in gold or "\\mp" in gold or _LIST_WORDS_RE.search(gold):
        return True
    if gold.startswith("\\{") and gold.endswith("\\}"):  # a set: \{1, 2\}
        gold = gold[2:-2]
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
    """Words outside LaTeX commands (inside ``\\text{…}`` too: ``2\\sqrt{2} \\text{ not } 3\\sqrt{2}``):
    a run of three Latin letters, or any Cyrillic, Indic, Thai or CJK character. Strip a trailing
    unit first (:func:`strip_unit_words`)."""
    return bool(_PROSE_RE.search(_COMMAND_RE.sub(" ", _TEXT_CMD_RE.sub(r" \1 ", s))))


def strip_unit_words(s: str) -> str:
    """``s`` without a trailing unit: up to three plain unit words, or one ``\\text{…}`` label of unit
    words ("480 + 480\\sqrt{3} feet", "480 + 480\\sqrt{3}\\text{ feet}" → the expression), when
    something is left; else ``s`` unchanged."""
    label = _TRAILING_TEXT_RE.search(s[-200:])
    if label and all(_unit_word(t, True, bool(label.group(2))) for t in label.group(1).replace("/", " ").split()):
        rest = s[: len(s) - len(label.group(0))].strip()
        return rest or s
    tokens = s.split(" ")
    kept = len(tokens)
    while kept > 1 and len(tokens) - kept < _MAX_UNIT_WORDS:
        word = tokens[kept - 1]
        if len(word.rstrip(".")) < 2 or not _unit_word(word, spaced=True):
            break
        kept -= 1
    return " ".join(tokens[:kept]) if kept < len(tokens) else s


_TRAILING_TEXT_RE = re.compile(r"\\(?:text|mbox|mathrm) ?\{([^{}\d]*)\}(\^ ?\{?[23]\}?)?$")


def as_text(s: str) -> str | None:
    """Lower-cased words if the answer is plain text (``\\text{(C)}`` → "c"; a leading article
    dropped: "an ellipse" → "ellipse"), else None."""
    t = _TEXT_CMD_RE.sub(r"\1", s).strip()
    if t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    t = re.sub(r"^(?:a|an|the) (?=[A-Za-z]{2})", "", t, flags=re.IGNORECASE)
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
