"""Language consistency of a chain of thought, as DeepSeek-R1 defines its reward:
"the proportion of target-language words in the CoT".

Words and their language:

* **Script decides where scripts differ.**  Each CJK ideograph is one word (``zh``; there are no
  spaces to split on), each kana is one word (``ja``), and ideographs in a sentence that also has
  kana are ``ja`` too (Japanese mixes both; a kana-less Japanese sentence reads as ``zh``).  A run
  of Hangul is one word (``ko``).  A run of Cyrillic letters is ``ru``; Greek ``el``, Arabic
  ``ar``, Hebrew ``he``, Devanagari ``hi``, Thai ``th`` (one word per run, Thai has no spaces)
  and a few more scripts likewise map to their main language.
* **Latin script** (and Cyrillic/Arabic/Devanagari, which lingua's set shares between several
  languages) is ``en`` (resp. the main language) unless the languages in play - the target plus
  ``candidates`` - include another language of that script.  Then ``en`` (resp. the main
  language) and those languages are told apart by lingua, once per *segment*: a run of words of
  that script not broken by sentence punctuation, a line break or another script.  Single words
  are too short for any detector; a segment is usually a clause.  The detector is built lazily
  once per language set and cached; texts decided by script never import lingua.
* **Neutral (not words):** only what carries no language: digits, punctuation, math symbols,
  whitespace, emoji, the reasoning tags (``<think>``, ``<answer>``), LaTeX commands (``\\frac``,
  ``\\text``; the text in its braces counts), single Latin letters (math variables like ``x``; this
  also drops English "a"/"I"), Latin letters glued to digits (``2x``, ``10cm``), and in math spans
  (``$...$``, ``\\(...\\)``, ``\\[...\\]``) runs of two letters (``ab``, ``dx``). Words inside
  code, math, backticks and other tags count: marking words up does not hide them.

Example: ``"7+9=16, write 6 carry 1；4+8+1=13，写3进1；答案936"`` has the words write, carry (en)
and 写, 进, 答, 案 (zh): English fraction 2/6.

Speed: texts decided by script take one regex pass built for just the scripts present; Japanese
(kana + ideographs) one pass per sentence; lingua, when a shared script needs it, once per segment
after a one-time model load (measured throughputs: docs/experiments.md).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "SUPPORTED_LANGUAGES",
    "dominant_language",
    "is_mixed",
    "language_counts",
    "language_fraction",
    "words_by_language",
]

# Languages whose script is shared with others in lingua's set (ISO 639-1).
_SHARED_SCRIPTS = {
    "latin": ("en", frozenset({
        "af", "az", "bs", "ca", "cs", "cy", "da", "de", "en", "eo", "es", "et", "eu", "fi", "fr", "ga",
        "hr", "hu", "id", "is", "it", "la", "lg", "lt", "lv", "mi", "ms", "nb", "nl", "nn", "pl", "pt",
        "ro", "sk", "sl", "sn", "so", "sq", "st", "sv", "sw", "tl", "tn", "tr", "ts", "vi", "xh", "yo",
        "zu"})),
    "cyrillic": ("ru", frozenset({"be", "bg", "kk", "mk", "mn", "ru", "sr", "uk"})),
    "arabic": ("ar", frozenset({"ar", "fa", "ur"})),
    "devanagari": ("hi", frozenset({"hi", "mr"})),
}
# Scripts that belong to one language of lingua's set.
_SINGLE_SCRIPTS = {
    "greek": "el", "hebrew": "he", "thai": "th", "georgian": "ka", "armenian": "hy", "bengali": "bn",
    "gurmukhi": "pa", "gujarati": "gu", "tamil": "ta", "telugu": "te", "hangul": "ko",
}
SUPPORTED_LANGUAGES = frozenset(
    {"zh", "ja"} | set(_SINGLE_SCRIPTS.values()) | set().union(*(s for _, s in _SHARED_SCRIPTS.values()))
)

_LATIN = "A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u024F\u1E00-\u1EFF"
_MARKS = "\u0300-\u036F"  # combining accents (decomposed text)
_APOS = "'\u2019\\-"  # apostrophes and hyphens inside a word: don't, l'eau, well-known
_CYRILLIC = "\u0400-\u052F"
# Character class of each script, and the regex branch that matches one of its words.
_CLASSES = {
    "han": "\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\U00020000-\U0003134F",
    "kana": "\u3040-\u309F\u30A0-\u30FA\u30FC-\u30FF\u31F0-\u31FF\uFF66-\uFF9F",
    "latin": _LATIN,
    "cyrillic": _CYRILLIC,
    "greek": "\u0370-\u03FF\u1F00-\u1FFF",
    "armenian": "\u0530-\u058F",
    "hebrew": "\u0590-\u05FF",
    "arabic": "\u0600-\u06FF\u0750-\u077F\u08A0-\u08FF\uFB50-\uFDFF\uFE70-\uFEFF",
    "devanagari": "\u0900-\u097F",
    "bengali": "\u0980-\u09FF",
    "gurmukhi": "\u0A00-\u0A7F",
    "gujarati": "\u0A80-\u0AFF",
    "tamil": "\u0B80-\u0BFF",
    "telugu": "\u0C00-\u0C7F",
    "thai": "\u0E00-\u0E7F",
    "georgian": "\u10A0-\u10FF",
    "hangul": "\u1100-\u11FF\u3130-\u318F\uAC00-\uD7AF",
}
_BRANCHES = {
    "han": f"[{_CLASSES['han']}]",  # one word per ideograph
    "kana": f"[{_CLASSES['kana']}]",  # one word per kana
    # 2+ letters, not glued to a digit: the char before the first letter is no letter/digit, the
    # word is matched atomically (so no shorter prefix of it can match) and no digit follows.
    "latin": (f"[{_LATIN}](?<![{_LATIN}{_MARKS}0-9].)(?=[{_LATIN}{_MARKS}]|[{_APOS}][{_LATIN}])"
              f"(?>[{_LATIN}{_MARKS}]*(?:[{_APOS}][{_LATIN}][{_LATIN}{_MARKS}]*)*)(?![0-9])"),
    "cyrillic": f"[{_CYRILLIC}]+(?:[{_APOS}][{_CYRILLIC}]+)*",
}
for _name, _chars in _CLASSES.items():
    _BRANCHES.setdefault(_name, f"[{_chars}]+")
_CLASS_RE = {name: re.compile(f"[{chars}]") for name, chars in _CLASSES.items()}
_LABEL = {"han": "zh", "kana": "ja", "latin": "en", "cyrillic": "ru", "arabic": "ar", "devanagari": "hi",
          **_SINGLE_SCRIPTS}

# What carries no language, replaced by same-length runs of U+2029 (a break) before counting: the reasoning
# tags and LaTeX commands (\frac, \text; what \text{…} holds is text and counts). Everything else counts,
# inside code, math and other tags too: a chain of thought cannot hide words from the reward by marking
# them up. In math spans ($…$, \(…\), \[…\]) runs of one or two Latin letters are variables (ab, dx),
# not words (single letters are never words anywhere).
_NEUTRAL = re.compile(r"</?(?:think|answer)>|\\[A-Za-z]+")
_MAYBE_NEUTRAL = re.compile(r"[$<\\]")
_MATH_OPENERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SHORT_LATIN = re.compile(f"(?<![{_LATIN}])[{_LATIN}]{{1,2}}(?![{_LATIN}])")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NON_ASCII = re.compile(r"[^\x00-\x7F]")
# Between two words, these end a segment (the unit lingua classifies) or a sentence (the unit in
# which kana turn ideographs into Japanese).  U+2029 stands for a neutral span.
_BREAK = re.compile(r"[.!?;:\n\u2029\u3002\uFF01\uFF1F\uFF1B\uFF1A\u2026]")


def _strip(text: str) -> str:
    """``text`` with what carries no language blanked (``_NEUTRAL``; short letter runs in math spans).
    Linear in the text's length, whatever it holds (an unclosed ``\\(`` is searched once)."""
    if not _MAYBE_NEUTRAL.search(text):
        return text
    return _NEUTRAL.sub(lambda m: "\u2029" * len(m.group()), _variables_in_math(text))


def _variables_in_math(text: str) -> str:
    """Runs of one or two Latin letters inside math spans blanked. Linear: each kind of opener's next
    position is searched again only once the scan has passed it, and an opener without a closer ends
    the search for its kind (no later one has a closer either)."""
    out, pos = [], 0
    following = {o: text.find(o) for o, _ in _MATH_OPENERS}  # next position of each opener, -1: none left
    while True:
        for o in following:
            if -1 < following[o] < pos:
                following[o] = text.find(o, pos)
        live = [(following[o], -len(o), o, c) for o, c in _MATH_OPENERS if following[o] != -1]
        if not live:
            break
        start, _, opener, closer = min(live)
        end = text.find(closer, start + len(opener))
        if end == -1:
            following[opener] = -1
            continue
        inner = text[start + len(opener):end]
        out += [text[pos:start + len(opener)], _SHORT_LATIN.sub(lambda m: "\u2029" * len(m.group()), inner)]
        pos = end + len(closer)
        out.append(closer)
    out.append(text[pos:])
    return "".join(out)


@lru_cache(maxsize=65536)
def _script_of(char: str) -> str | None:
    for name, regex in _CLASS_RE.items():
        if regex.match(char):
            return name
    return None


def _scripts(text: str) -> frozenset[str]:
    """The scripts with letters in ``text`` (one C-speed pass for non-ASCII characters)."""
    found = {_script_of(c) for c in set(_NON_ASCII.findall(text))} if not text.isascii() else set()
    if _ASCII_LETTER.search(text):
        found.add("latin")
    found.discard(None)
    return frozenset(found)  # type: ignore[arg-type]


@lru_cache(maxsize=1024)
def _word_regex(scripts: frozenset[str]) -> re.Pattern[str]:
    """One regex with a named branch per script present (a 17-way alternation is ~10x slower)."""
    names = [name for name in _BRANCHES if name in scripts]
    return re.compile("|".join(f"(?P<{name}>{_BRANCHES[name]})" for name in names) or "(?!)")


def _check(language: str) -> str:
    code = language.lower()
    if code not in SUPPORTED_LANGUAGES:
        raise ValueError(f"unknown language {language!r}; supported: {', '.join(sorted(SUPPORTED_LANGUAGES))}")
    return code


_detector_lock = threading.Lock()


@lru_cache(maxsize=64)
def _detector(codes: frozenset[str]):
    """A lingua detector for exactly these ISO 639-1 codes, built once and cached."""
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    with _detector_lock:
        isos = [getattr(IsoCode639_1, code.upper()) for code in sorted(codes)]
        return LanguageDetectorBuilder.from_iso_codes_639_1(*isos).build()


def _detect(codes: frozenset[str], text: str) -> str | None:
    language = _detector(codes).detect_language_of(text)
    return None if language is None else language.iso_code_639_1.name.lower()


@lru_cache(maxsize=256)
def _ambiguous(in_play: frozenset[str]) -> dict[str, frozenset[str]]:
    """Shared scripts for which more than one language is in play -> those languages."""
    ambiguous = {}
    for script, (default, members) in _SHARED_SCRIPTS.items():
        chosen = (in_play & members) | {default}
        if len(chosen) > 1:
            ambiguous[script] = frozenset(chosen)
    return ambiguous


def _in_play(languages: Iterable[str]) -> frozenset[str]:
    if isinstance(languages, str):
        languages = (languages,)
    return frozenset(_check(code) for code in languages)


def words_by_language(text: str, languages: Iterable[str] = ("en",)) -> list[tuple[str, str]]:
    """The words of ``text`` in order, each with its ISO 639-1 language code.

    ``languages`` are the languages in play (the target and any candidates); they matter only
    for scripts shared by several languages (Latin, Cyrillic, Arabic, Devanagari), where lingua
    decides between them per segment.  Raises ValueError for an unknown code.
    """
    ambiguous = _ambiguous(_in_play(languages))
    text = _strip(text)
    return _words(text, _scripts(text), ambiguous)


def _words(text: str, scripts: frozenset[str], ambiguous: dict[str, frozenset[str]]) -> list[tuple[str, str]]:
    words: list[tuple[str, int, int]] = []  # (word, start, end)
    labels: list[str | None] = []
    segments: dict[tuple[str, int], list[int]] = {}  # (script, segment no.) -> word indices
    segment = sentence_start = last_end = 0
    has_kana = False

    def end_sentence() -> None:  # ideographs of a sentence with kana are Japanese
        for i in range(sentence_start, len(words)):
            if labels[i] == "zh":
                labels[i] = "ja"

    for match in _word_regex(scripts).finditer(text):
        kind = match.lastgroup
        start, end = match.span()
        if _BREAK.search(text, last_end, start):
            segment += 1
            if has_kana:
                end_sentence()
                has_kana = False
            sentence_start = len(words)
        last_end = end
        if kind in ambiguous:
            segments.setdefault((kind, segment), []).append(len(words))
            label = None
        else:
            label = _LABEL[kind]
            has_kana = has_kana or kind == "kana"
            segment += 1  # a word of another script ends a segment
        words.append((match.group(), start, end))
        labels.append(label)
    if has_kana:
        end_sentence()

    undecided = []
    for (script, _), indices in segments.items():
        found = _detect(ambiguous[script], text[words[indices[0]][1]:words[indices[-1]][2]])
        if found is None:
            undecided.append((script, indices))
        for i in indices:
            labels[i] = found
    for script, indices in undecided:  # too short to tell: the script's majority, else default
        counts = Counter(label for label in labels if label in ambiguous[script])
        guess = counts.most_common(1)[0][0] if counts else _SHARED_SCRIPTS[script][0]
        for i in indices:
            labels[i] = guess
    return [(word, label) for (word, _, _), label in zip(words, labels, strict=True)]  # type: ignore[misc]


def language_counts(text: str, languages: Iterable[str] = ("en",)) -> Counter[str]:
    """How many words of each language ``text`` has (see :func:`words_by_language`).

    Fast path: when no kana and no script needing lingua occur, one regex pass counts them."""
    ambiguous = _ambiguous(_in_play(languages))
    text = _strip(text)
    scripts = _scripts(text)
    if {"kana", "han"} <= scripts or not scripts.isdisjoint(ambiguous):
        return Counter(label for _, label in _words(text, scripts, ambiguous))
    return Counter(_LABEL[m.lastgroup] for m in _word_regex(scripts).finditer(text))  # type: ignore[index]


def language_fraction(text: str, target: str = "en", candidates: Iterable[str] = ()) -> float | None:
    """DeepSeek-R1's language-consistency reward: the fraction of words in ``target``.

    None when the text has no words (only numbers, symbols, tags, math...).  Latin-script words
    count as English unless ``target`` or ``candidates`` name another Latin-script language (then
    lingua decides, see the module docstring); e.g. ``language_fraction(fr_text, "en")`` is 1.0 but
    ``language_fraction(fr_text, "en", candidates=["fr"])`` is about 0.
    """
    target = _check(target)
    counts = language_counts(text, (target, *candidates))
    total = sum(counts.values())
    return counts[target] / total if total else None


DEFAULT_MIXED_FRACTION = 0.05
DEFAULT_MIXED_MIN_WORDS = 2


def is_mixed(
    text: str,
    target: str = "en",
    threshold: float = DEFAULT_MIXED_FRACTION,
    *,
    min_foreign_words: int = DEFAULT_MIXED_MIN_WORDS,
    candidates: Iterable[str] = (),
) -> bool:
    """True when more than ``threshold`` (5%) of the words are not in ``target`` *and* there are
    at least ``min_foreign_words`` (2) of them.

    Both conditions, because one stray token (a name, a loanword like "OK", a symbol we did not
    neutralise) should not flag a long trace, while in the short traces of the arithmetic world
    (5-10 words) any fraction threshold alone would flag that single token (1/6 = 17%); two
    foreign words in any text are real mixing.  Texts without words are not mixed.
    """
    target = _check(target)
    counts = language_counts(text, (target, *candidates))
    total = sum(counts.values())
    foreign = total - counts[target]
    return total > 0 and foreign >= min_foreign_words and foreign / total > threshold


DEFAULT_CANDIDATES = ("en", "zh", "ja", "ko", "ru", "fr", "de", "es")


def dominant_language(text: str, candidates: Iterable[str] = DEFAULT_CANDIDATES) -> str | None:
    """The language with the most words (ties: the one whose first word comes first); None
    when there are no words.  ``candidates`` matter only for shared scripts (see above)."""
    words = words_by_language(text, candidates)
    if not words:
        return None
    counts = Counter(label for _, label in words)
    best = max(counts.values())
    return next(label for _, label in words if counts[label] == best)
