"""Checks forced or suppressed at every step: the accuracy effect of checking inside one model.

Comparing a model's checked chains of thought with its plain ones confounds checking with the problems and
draws on which the model chose to check. This intervenes on the prefix instead: the same model samples the
same problems twice, once with a check **forced** after every digit step's fact and once with checks
**suppressed**, and the two arms' pass@1 are paired problem by problem (F0, eval/verdicts.py).

In the task world a step reads ``8+4=12 (check 12-4=8 ok) write 2`` checked and ``8+4=12 write 2`` plain
(``data.taskworld._render_steps``; Chinese ``（验算…）写``). So, as a ``transformers`` logits processor:

- ``suppressed``: every token that opens a check (its text holds ``(`` or ``（``; the world writes them
  only there) is banned at every position;
- ``forced``: where the text generated so far ends with a fact (``8+4=12``, ``13-1-4=8``), only tokens that
  open a check or go on with the number (a digit) are allowed: the step cannot go on plain. A fact inside a
  check (``check 12-4=8``) is a fact too; there the check's own next words (`` ok``, ``, not``) are not
  digits or openings, so ``forced`` would stop them: it applies only outside an open check.
"""

from __future__ import annotations

import re

import torch

ARMS = ("forced", "suppressed")
_FACT_END = re.compile(r"\d+(?:[+\-]\d+)+=\d+$")  # a digit step's fact, just written
_OPENS = ("(", "（")
_CLOSES = (")", "）")


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
        digits = [i for i, t in enumerate(texts) if t.strip().isdigit() and t == t.strip()]
        if not len(self.opens) or not digits:
            raise ValueError("check intervention: the tokenizer has no token that opens a check or no digit token")
        self.allowed_after_fact = torch.tensor(sorted(set(self.opens.tolist()) | set(digits)), dtype=torch.long)

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
        rows = self._after_fact(input_ids)
        if rows:
            keep = torch.full_like(scores[rows], -float("inf"))
            allowed = self.allowed_after_fact.to(scores.device)
            keep[:, allowed] = scores[rows][:, allowed]
            scores[rows] = keep
        return scores
