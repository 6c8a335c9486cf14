"""Checks forced or suppressed at every step: the accuracy effect of checking inside one model (F0).

A model's checked chains of thought against its plain ones confound checking with the problems it chose to
check. Here the same model samples the same problems twice, with a check **forced** after every step and
with checks **suppressed**, and the arms' pass@1 are paired by problem (eval/verdicts.py, docs/experiments.md).
A step reads ``8+4=12 (check 12-4=8 ok) write 2`` checked, ``8+4=12 write 2`` plain (``data.taskworld``;
Chinese ``（验算…）写``). As a ``transformers`` logits processor:

- ``suppressed``: every token that opens a check (``(`` or ``（``, written only there) is banned everywhere;
- ``forced``: where the text so far ends with a fact written outside an open check, the tokens that end the
  step plainly (`` write``, ``写``) are banned: the model opens the check it learnt, or goes on with the
  number or a borrow's second fact (``7-1=6, 16-7=9 write 9``: the corpus checks the last fact). Banning
  all but an opening or a digit, a first version, forced checks inside borrows and skipped their second fact.
"""

from __future__ import annotations

import re

import torch

ARMS = ("forced", "suppressed")
_FACT_END = re.compile(r"\d+(?:[+\-]\d+)+=\d+$")  # a digit step's fact, just written
_OPENS = ("(", "（")
_CLOSES = (")", "）")
_PLAIN_ENDS = ("write", "写")  # what follows a step's fact when it is not checked


def _token_texts(tokenizer) -> list[str]:
    return [tokenizer.decode([i]) for i in range(len(tokenizer))]


class CheckIntervention:
    """A logits processor (``generate(logits_processor=[…])``): ``mode`` is ``forced`` or ``suppressed``.

    ``__call__(input_ids (rows, length), scores (rows, vocab)) -> scores``, the banned tokens at -inf."""

    def __init__(self, tokenizer, mode: str, tail_tokens: int = 40):
        if mode not in ARMS:
            raise ValueError(f"check intervention: mode must be one of {ARMS}, got {mode!r}")
        self.tokenizer, self.mode, self.tail_tokens = tokenizer, mode, tail_tokens
        texts = _token_texts(tokenizer)
        self.opens = torch.tensor([i for i, t in enumerate(texts) if any(o in t for o in _OPENS)], dtype=torch.long)
        self.plain_ends = torch.tensor([i for i, t in enumerate(texts) if t.lstrip(" ,，").startswith(_PLAIN_ENDS)],
                                       dtype=torch.long)
        if not len(self.opens) or not len(self.plain_ends):
            raise ValueError("check intervention: the tokenizer has no token that opens a check or ends a step")

    def _after_fact(self, input_ids: torch.Tensor) -> list[int]:
        """The rows whose text so far ends with a fact written outside an open check."""
        rows = []
        for r, text in enumerate(self.tokenizer.batch_decode(input_ids[:, -self.tail_tokens:], skip_special_tokens=True)):
            open_at = max(text.rfind(o) for o in _OPENS)
            inside = open_at > max(text.rfind(c) for c in _CLOSES)
            if not inside and _FACT_END.search(text):
                rows.append(r)
        return rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.mode == "suppressed":
            scores[:, self.opens.to(scores.device)] = -float("inf")
            return scores
        for row in self._after_fact(input_ids):
            scores[row, self.plain_ends.to(scores.device)] = -float("inf")
        return scores
