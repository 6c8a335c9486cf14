"""Packing short examples into rows, so that a batch is mostly real tokens rather than padding.

A padded batch is as wide as its longest example; on the tiny world's SFT mix (reasoning traces of
~140 tokens beside general answers of ~40) about half of a padded batch is padding, and on the CPU
every padding token costs as much as a real one. Packing puts several examples in one row, each with
``position_ids`` that restart at 0; with no attention mask passed, transformers reads the packing
from the position ids and builds a block-diagonal causal mask (``masking_utils``'s
``find_packed_sequence_indices``, eager and sdpa alike), so each example sees only itself, at the
positions it has alone: the same logits, the same loss.

TRL's own padding-free collation (``padding_free: true``) flattens the whole batch into *one* row,
which a varlen attention kernel (flash attention, CUDA only) computes per example, but which the CPU's
kernels compute as one long row under a mask: attention over 16 × ~100 tokens instead of 16 rows of
~100. Here the rows are at most ``length`` tokens, so attention stays per row.

- :func:`first_fit_rows`: which examples share a row (first fit by decreasing size); tiny
  pretraining (``stages/training/pretrain.py``) and :class:`PackedCollator` both use it;
- :class:`PackedCollator`: a data collator for TRL's SFTTrainer (examples with ``input_ids`` and
  ``labels``), for SFT sections with ``batching: packed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["PackedCollator", "first_fit_rows"]


def first_fit_rows(sizes: Sequence[int], width: int) -> list[list[int]]:
    """Indices of the items in each row: first fit by decreasing size into rows of ``width`` tokens
    (ties in input order). An item longer than ``width`` gets a row of its own."""
    rows: list[list[int]] = []
    free: list[int] = []  # tokens left per row
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        row = next((r for r, room in enumerate(free) if room >= sizes[i]), None)
        if row is None:
            rows.append([])
            free.append(width)
            row = len(rows) - 1
        rows[row].append(i)
        free[row] -= sizes[i]
    return rows


class PackedCollator:
    """Collates tokenized examples (``input_ids``, and ``labels`` with -100 where there is no loss) into
    rows of at most ``length`` tokens: the same examples per optimizer step as a padded batch, and the
    same loss and gradients (``tests/test_trainer.py``), on fewer tokens.

    The batch is (rows, width), width the fullest row's tokens: ``input_ids``, ``labels`` and
    ``position_ids``, and no ``attention_mask``. Each example's first label is -100: in a row, the
    model's shifted loss would otherwise predict it from the example before (in a padded row it is
    never a target). The padding at a row's end is one more "example", with labels -100.
    """

    def __init__(self, pad_token_id: int, length: int):
        if length < 1:
            raise ValueError(f"PackedCollator: length must be at least 1, got {length}")
        self.pad_token_id, self.length = pad_token_id, length

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        ids = [list(ex["input_ids"]) for ex in examples]
        labels = [list(ex.get("labels", ex["input_ids"])) for ex in examples]
        rows = first_fit_rows([len(x) for x in ids], self.length)
        width = max(sum(len(ids[i]) for i in members) for members in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)   # (R, W)
        out_labels = torch.full((len(rows), width), -100, dtype=torch.long)              # (R, W)
        position_ids = torch.zeros((len(rows), width), dtype=torch.long)                 # (R, W)
        for r, members in enumerate(rows):
            at = 0
            for i in members:
                n = len(ids[i])
                input_ids[r, at : at + n] = torch.tensor(ids[i])
                out_labels[r, at + 1 : at + n] = torch.tensor(labels[i][1:], dtype=torch.long)
                position_ids[r, at : at + n] = torch.arange(n)
                at += n
            position_ids[r, at:] = torch.arange(width - at)
        return {"input_ids": input_ids, "labels": out_labels, "position_ids": position_ids}
