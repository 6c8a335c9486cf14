"""Checks in a chain of thought: did the model re-evaluate its steps, and did a failed check make it
correct itself? (finding F0, the "aha" moment at toy scale)

The tiny task world's worked solutions can check each digit step's fact right after it, undone by the
inverse operation ("8+4=12 (check 12-4=8 ok) write 2"); a wrong fact fails its check and the step is
done again ("8+4=13 (check 13-4=9, not 8; wait, 8+4=12) write 2"). The corpus holds such solutions rarely
under the R1-Zero template (``base.corpus``), and no reward mentions them: RL can only find them
through correctness. This module labels a chain of thought:

- ``plain``: no check;
- ``rechecked``: checks, none failed (or a failed one not acted on);
- ``corrected``: a check that failed, then the step done again ("wait, …").

Markers in English and Chinese, the tiny world's two languages; a trace that mixes them is read the
same way. :func:`read_checks` also counts the checks and the failed ones.

A check that is there need not verify anything: a model can copy the routine's words without its
arithmetic ("18-6=9 (check 9+6=15 ok)": a wrong step passed), or copy the failure it saw in the corpus
onto a right step ("3+2=5 (check 5-2=3, not 2; wait, 2+2=4)"). :func:`read_verifications` reads, for
each check, the step it looks at, whether that step's fact is right (its arithmetic, not the check's),
and what the check said ("ok", or "not …" and a redo after "wait"); a wrong step is *planted* when it is
written the way the corpus writes one of its misconceptions (``data/taskworld.py``
``misconceived_facts``: that fact, :func:`data.taskworld.one_off` of its value: "1-0=2 (check 2+0=2,
not 1; wait, 1-0=1)"), else the model's *own* slip. :func:`verification_counts` tallies them per
problem for the report's verification rates (finding F0).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from data.taskworld import one_off
from data.templates import think_text

__all__ = ["LABELS", "OUTCOMES", "Checks", "Verification", "label", "read_checks", "read_verifications",
           "verification_counts"]

LABELS = ("plain", "rechecked", "corrected")

# a check: "check 12-4=8" / "验算12-4=8" (or "check 8 vs 12-4=8" / "验算8比12-4=8": data/taskworld.py CHECK_FORMS)
_CHECK = re.compile(r"(?:\bcheck\b|验算)\s*(?:\d+\s*(?:vs|比)\s*)?\d+\s*[-+]\s*\d+", re.IGNORECASE)
# a failed check: ", not 8" / "，不是8" (or "vs 8 not" / "比8，不是": data/taskworld.py CHECK_FORMS)
_FAILED = re.compile(r"\bnot\b|不是", re.IGNORECASE)
# acting on it: "; wait, 8+4=12" / "；等等，8+4=12"
_REDO = re.compile(r"(?:\bwait\b|等等)\W{0,3}\d+\s*[-+]\s*\d+", re.IGNORECASE)


@dataclass(frozen=True)
class Checks:
    """What the checks of one chain of thought say."""

    label: str  # one of LABELS
    checks: int  # how many checks
    failed: int  # how many said "not"
    redone: int  # how many steps were done again after a failed check


def read_checks(think: str | None) -> Checks:
    """The checks of a chain of thought (its text inside ``<think>``; None: no chain of thought)."""
    text = think or ""
    checks = len(_CHECK.findall(text))
    failed = len(_FAILED.findall(text)) if checks else 0
    redone = len(_REDO.findall(text)) if failed else 0
    kind = "plain" if not checks else "corrected" if redone else "rechecked"
    return Checks(kind, checks, failed, redone)


def label(think: str | None) -> str:
    """``plain``, ``rechecked`` or ``corrected`` (see the module docstring)."""
    return read_checks(think).label


# -- what each check says about the step it looks at ------------------------------------------------

# a step and its check: "18-6=9 (check 9+6=15 ok" / "16-7=8（验算8+7=15，不是16；等等，16-7=9"; the
# check's body runs to its closing bracket, the next opening one or the end of the text (a trace cut off
# inside a check)
_STEP_CHECK = re.compile(r"(?<![\d.])(?P<fact>\d+(?:\s*[-+]\s*\d+)+)\s*=\s*(?P<value>\d+)\s*[(（]\s*"
                         r"(?:\bcheck\b|验算)(?P<body>[^()（）]*)", re.IGNORECASE)
_OK = re.compile(r"\bok\b|对", re.IGNORECASE)
_REDONE = re.compile(r"(?:\bwait\b|等等)\W{0,3}(?P<fact>\d+(?:\s*[-+]\s*\d+)+)\s*=\s*(?P<value>\d+)",
                     re.IGNORECASE)
_TERM = re.compile(r"([-+]?)\s*(\d+)")

# a check's outcome, by whether its step was right and what it said
OUTCOMES = {("right", "ok"): "passed", ("right", "not"): "false alarm",
            ("wrong", "ok"): "rubber stamp", ("wrong", "not"): "caught"}


def _squeeze(fact: str) -> str:
    return re.sub(r"\s+", "", fact)


def _value(fact: str) -> int:
    """A fact's arithmetic, left to right ("13-1-8" → 4)."""
    return sum(int(n) if sign != "-" else -int(n) for sign, n in _TERM.findall(fact))


@dataclass(frozen=True)
class Verification:
    """One check and the step it looks at."""

    fact: str  # the step's fact without its value, spaces dropped: "18-6"
    stated: int  # the value the step wrote: 9
    right: bool  # the fact's arithmetic gives the value written
    planted: bool  # wrong as the corpus writes a misconception: a misconceived fact, one_off of its value
    verdict: str | None  # "ok", "not", or None (cut off before the check said either)
    redo: str | None = None  # the step done again after "wait": "18-6=12"
    redo_right: bool | None = None

    @property
    def kind(self) -> str:
        """``right``, ``planted`` (a misconception of the corpus) or ``own`` (the model's own slip)."""
        return "right" if self.right else "planted" if self.planted else "own"

    @property
    def outcome(self) -> str | None:
        """``passed``, ``false alarm`` (a right step called wrong), ``rubber stamp`` (a wrong step passed)
        or ``caught``; None when the check said nothing."""
        return OUTCOMES.get(("right" if self.right else "wrong", self.verdict))


def read_verifications(think: str | None, misconceptions: frozenset[str] = frozenset()) -> list[Verification]:
    """Every check of a chain of thought that follows a step's fact ("A±B[±C]=V (check …"), in order.
    ``misconceptions``: the corpus's misconceived facts (``data.taskworld.misconceived_facts`` of the
    base's ``base.corpus.misconceptions``), to tell planted facts from the model's own slips. A check
    after no fact (a lone digit, the prose) is not read: it looks at no step."""
    out, text, pos = [], think or "", 0
    # a garbled body can hold the next step and its check ("1-7=5 (check 5+7=112-7=5 (check …"): each
    # search starts where the last check's body did
    while m := _STEP_CHECK.search(text, pos):
        pos = m.start("body")
        fact, stated, body = _squeeze(m["fact"]), int(m["value"]), m["body"]
        truth = _value(fact)
        verdict = "not" if _FAILED.search(body) else "ok" if _OK.search(body) else None
        redo = _REDONE.search(body) if verdict == "not" else None
        out.append(Verification(
            fact=fact, stated=stated, right=truth == stated,
            planted=truth != stated and fact in misconceptions and stated == one_off(truth) and truth >= 0,
            verdict=verdict,
            redo=_squeeze(redo["fact"]) + "=" + redo["value"] if redo else None,
            redo_right=(_value(redo["fact"]) == int(redo["value"])) if redo else None))
    return out


def verification_counts(records: Iterable[Mapping], misconceptions: frozenset[str] = frozenset()
                        ) -> dict[str, Counter]:
    """Per problem (``id``), how many checks of each (kind, outcome) its sampled chains of thought hold:
    ``Counter({("own", "rubber stamp"): 2, ("right", "passed"): 5, ("planted", None): 1, …})`` (an
    outcome None: the check was cut off before its verdict). Records are graded samples
    (``completion``, ``id``); one without a chain of thought adds nothing."""
    out: dict[str, Counter] = {}
    for r in records:
        think = think_text(r.get("completion") or "")
        tally = out.setdefault(str(r["id"]), Counter())
        for v in read_verifications(think, misconceptions):
            tally[(v.kind, v.outcome)] += 1
    return out
