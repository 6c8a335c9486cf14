"""Checks forced or suppressed at every step: the accuracy effect of checking inside one model.

Comparing a model's checked chains of thought with its plain ones confounds checking with the problems and
draws on which the model chose to check. This intervenes on the prefix instead: the same model samples the
same problems twice, once with a check **forced** after every digit step's fact and once with checks
**suppressed**, and the two arms' pass@1 are paired problem by problem (F0, eval/verdicts.py).

In the task world a step reads ``8+4=12 (check 12-4=8 ok) write 2`` checked and ``8+4=12 write 2`` plain
(``data.taskworld._render_steps``; Chinese ``（验算…）写``). So, as a ``transformers`` logits processor:

- ``suppressed``: every token that opens a check (its text holds ``(`` or ``（``; the world writes them
  only there) is banned at every position;
- ``forced``: where the text generated so far ends with a fact written outside an open check (``8+4=12``),
  the tokens that end the step plainly (`` write``, ``写``) are banned: the step cannot go on unchecked, and
  the model opens the check it learnt (or goes on with the number, or with a borrow's second fact:
  ``7-1=6, 16-7=9 write 9``, whose check the corpus puts after the last fact). A fact inside a check
  (``check 12-4=8``) is left alone.

A first version allowed only an opening or a digit after any fact; it forced checks between a borrow's two
facts, which skipped the second and made the forced arm wrong by construction (docs/experiments.md).
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
