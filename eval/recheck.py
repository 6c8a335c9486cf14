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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LABELS", "Checks", "label", "read_checks"]

LABELS = ("plain", "rechecked", "corrected")

# a check: "check 12-4=8" / "验算12-4=8"
_CHECK = re.compile(r"(?:\bcheck\b|验算)\s*\d+\s*[-+]\s*\d+", re.IGNORECASE)
# a failed check: ", not 8" / "，不是8"
_FAILED = re.compile(r"\bnot\b\s*\d+|不是\s*\d+", re.IGNORECASE)
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
