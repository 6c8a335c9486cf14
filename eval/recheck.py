"""Re-checks in a chain of thought: did the model verify its result, and did a failed check make it
correct itself? (finding F0, the "aha" moment at toy scale)

The tiny task world's worked solutions can end with a re-check by the inverse operations ("check
1278-404: …, get 874, ok"); when the check fails ("get 884, not 874") the solution computes again
("wait, recompute: …"). The corpus holds such traces rarely (``base.corpus.recheck``), and no reward
mentions them: RL can only find them through correctness. This module labels a chain of thought:

- ``plain``: no re-check;
- ``rechecked``: a re-check, passed at once;
- ``corrected``: a re-check that failed, then a recomputation.

and reads what was checked (:func:`read_checks`): the value each check started from, and whether it
passed, so that a report can show a trace where the model's check caught its own slip (the first
checked value wrong, the final answer right). Markers in English and Chinese, the tiny world's two
languages; a trace that mixes them is read the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LABELS", "Checks", "label", "read_checks"]

LABELS = ("plain", "rechecked", "corrected")

# "check 1278-404" / "验算 1278-404": the value a check starts from
_CHECK = re.compile(r"(?:\bcheck\b|验算)\s*[:：]?\s*(\d+)", re.IGNORECASE)
# a check's verdict: ", ok" / "，对" (passed), "not 874" / "不是874" (failed)
_VERDICT = re.compile(r"(?P<ok>\bok\b|对)|(?P<failed>\bnot\b\s*\d+|不是\s*\d+)", re.IGNORECASE)
_RECOMPUTE = re.compile(r"\brecompute\b|重算", re.IGNORECASE)


@dataclass(frozen=True)
class Checks:
    """What the re-checks of one chain of thought say."""

    label: str  # one of LABELS
    checked: tuple[int, ...]  # the value each check started from, in order
    passed: tuple[bool, ...]  # each check's verdict, in order (a check with no verdict: failed)

    @property
    def first_checked(self) -> int | None:
        return self.checked[0] if self.checked else None


def read_checks(think: str | None) -> Checks:
    """The re-checks of a chain of thought (its text inside ``<think>``; None: no chain of thought)."""
    text = think or ""
    starts = list(_CHECK.finditer(text))
    checked, passed = [], []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        verdict = _VERDICT.search(text, m.end(), end)
        checked.append(int(m.group(1)))
        passed.append(bool(verdict and verdict.group("ok")))
    if not checked:
        kind = "plain"
    elif any(not ok for ok in passed) and _RECOMPUTE.search(text, starts[0].end()):
        kind = "corrected"
    else:
        kind = "rechecked"
    return Checks(kind, tuple(checked), tuple(passed))


def label(think: str | None) -> str:
    """``plain``, ``rechecked`` or ``corrected`` (see the module docstring)."""
    return read_checks(think).label
