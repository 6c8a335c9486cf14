"""Fault injection for the reliability suite (``tests/test_faults.py``, ``make faults``).

``R1_FAULT=<point>[@<n>]`` in the environment makes the process SIGKILL itself the n-th time (default:
the first) it reaches ``<point>``: no handler runs, nothing is flushed, as with a power loss or the
out-of-memory killer. Unset, which is always the case outside the tests, a point costs one
environment lookup. The points, each placed where a kill does the most harm:

  write:<file name>   inside an atomic file write (data/jsonl.py): the temporary file is complete,
                      the rename has not happened (shard-00001.jsonl, cold_start.jsonl, sft_mix.jsonl …);
                      a manifest's point names the status being written: write:manifest.json:complete
  save:<folder name>  inside a final model save (save_model_atomically): the weights are written,
                      the tokenizer is not, the folder is not renamed into place
  trainer_save        inside a Trainer's ``checkpoint-N`` save: weights, optimizer, scheduler and RNG
                      are written, ``trainer_state.json`` is not (a checkpoint interrupted half-way)
  optimizer_step      after a step's backward pass, before the optimizer updates the weights
  generate            before a batch of sampling (evaluation, rejection sampling, GRPO's rollouts are
                      reached through ``reward``)
  reward              in GRPO's reward computation, between generation and the loss
  pretrain_step       in the tiny base's pretraining loop, before a step

Counting is per process and per point, so ``optimizer_step@3`` dies at the third optimizer step of
this process, whatever the stage resumed from.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

ENV = "R1_FAULT"
TRAINER_POINTS = ("optimizer_step", "trainer_save")
_reached: Counter = Counter()


def fault_point(name: str) -> None:
    """SIGKILL this process if ``$R1_FAULT`` names ``name`` and this is the chosen arrival."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, nth = spec.partition("@")
    if point != name:
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        print(f"[r1] fault injected: SIGKILL at {name} (arrival {_reached[name]})", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def trainer_faults() -> list:
    """``[callback]`` when ``$R1_FAULT`` names a Trainer-side point, else ``[]``: outside the tests the
    trainers carry nothing extra.

    The callback is an ``ExportableState`` because the Trainer asks those for their state in the middle
    of ``_save_checkpoint``: after the weights, optimizer, scheduler and RNG files, before
    ``trainer_state.json``. Its state is empty. The Trainer also asks when it builds its state, so
    only the asks between a step that decided to save (``control.should_save``) and ``on_save`` count."""
    if os.environ.get(ENV, "").partition("@")[0] not in TRAINER_POINTS:
        return []
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState

    class FaultCallback(TrainerCallback, ExportableState):
        saving = False

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            fault_point("optimizer_step")

        def on_step_end(self, args, state, control, **kwargs):
            self.saving = control.should_save  # set by the flow callback, which runs first

        on_epoch_end = on_step_end

        def on_save(self, args, state, control, **kwargs):
            self.saving = False

        def state(self) -> dict:
            if self.saving:
                fault_point("trainer_save")
            return {"args": {}, "attributes": {}}

    return [FaultCallback()]
