"""Ranges declared as data: one small notation for the values a number may take, and one check.

A range is a string: ``">= 1"``, ``"> 0"``, ``"[0, 1]"``, ``"(0, 1]"``, ``"[0, 2**32)"``, optionally followed by a
note in parentheses that the message repeats (``">= 2 (GRPO compares a group)"``). :func:`range_problem` says
why a value lies outside one (None: inside), always in one format: ``must be >= 0 and < 2**32, got -1``.
NaN lies outside every range. The recipe's sections declare theirs in ``RANGES``
(``stages.pipeline.recipe.Section``); TRL's settings in ``stages.pipeline.trl_policy.TRL_RANGES``.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

_NUMBER = r"-?(?:\d+\*\*\d+|\d+(?:\.\d*)?(?:e-?\d+)?)"
_ONE_SIDED = re.compile(rf"^(>=|>)\s*({_NUMBER})$")
_INTERVAL = re.compile(rf"^([\[(])\s*({_NUMBER}),\s*({_NUMBER})\s*([\])])$")
_NOTE = re.compile(r"^(.*?)\s+\((.+)\)$")


@dataclass(frozen=True)
class Range:
    low: float
    low_text: str
    low_ok: bool  # the lowest value is allowed
    high: float
    high_text: str
    high_ok: bool
    note: str

    def describe(self) -> str:
        """``>= 0 and < 2**32``: the bounds as the message states them."""
        low = f"{'>=' if self.low_ok else '>'} {self.low_text}"
        return low if self.high == math.inf else f"{low} and {'<=' if self.high_ok else '<'} {self.high_text}"

    def holds(self, value: float) -> bool:
        above = value >= self.low if self.low_ok else value > self.low
        below = value <= self.high if self.high_ok else value < self.high
        return above and below  # NaN: neither


def _number(text: str) -> float:
    if "**" in text:
        base, exponent = text.split("**")
        return int(base) ** int(exponent)
    return int(text) if text.lstrip("-").isdigit() else float(text)


@functools.cache
def parse_range(spec: str) -> Range:
    """The :class:`Range` a spec string declares; a spec outside the notation is a programming error."""
    note = ""
    if m := _NOTE.match(spec.strip()):
        spec, note = m.group(1), m.group(2)
    spec = spec.strip()
    if m := _ONE_SIDED.match(spec):
        return Range(_number(m.group(2)), m.group(2), m.group(1) == ">=", math.inf, "inf", True, note)
    if m := _INTERVAL.match(spec):
        return Range(_number(m.group(2)), m.group(2), m.group(1) == "[", _number(m.group(3)), m.group(3),
                     m.group(4) == "]", note)
    raise ValueError(f"range {spec!r}: not '>= a', '> a' or an interval such as '[a, b)'")


def range_problem(spec: str, value, nullable: bool = False) -> str | None:
    """Why ``value`` lies outside range ``spec`` (None: inside). ``nullable``: null is allowed."""
    if value is None:
        return None if nullable else "must be a number, got null"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, got {value!r}"
    r = parse_range(spec)
    if r.holds(value):
        return None
    return f"must be {r.describe()}{' or null' if nullable else ''}, got {value}" + (f" ({r.note})" if r.note else "")
