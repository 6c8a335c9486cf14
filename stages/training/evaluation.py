"""Held-out evaluation around and during training, in one place: the recipe's protocol (``eval``: k samples
at its temperature and top-p, graded by ``eval.verify``) through :func:`held_out`, and :class:`DuringTraining`,
the callback that evaluates the model as it trains, gathered whole first when it is sharded (ZeRO-3, FSDP).

Callers: the RL runner before and after training, at ``eval_steps`` and every ``eval_every`` steps, and its
pass-rate filter; SFT's ``eval_every``; stages 2 and distill after SFT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from transformers import TrainerCallback

from data.jsonl import atomic_write_json
from stages.pipeline.common import load_sampler, release
from stages.training.skeleton import whole_model


def held_out(recipe, rows: list[dict], *, model=None, tokenizer=None, model_path: str | None = None,
             out_dir: Path | None = None, template: str | None = None, name: str = "task_test",
             progress: bool = False, temperature: float | None = None, seed: int | None = None,
             logits_processor: list | None = None, **protocol) -> dict:
    """The evaluation runner's protocol (``recipe.eval``, with ``template`` as its prompt template and
    ``protocol``'s fields replaced: ``k``, ``top_p``, ``max_new_tokens``) on ``rows``; returns the summary
    (pass@1, rates, lengths), and with ``out_dir`` writes the samples and ``results.json`` there.

    The model sampled: ``model`` as it is in memory (a model mid-training has no path: transformers
    sampling), else the checkpoint ``model_path`` loaded by the recipe's backend (vLLM's engine where
    ``eval.backend`` is vllm, also when ``model`` is given but saved at ``model_path``). ``logits_processor``:
    transformers processors for ``model``'s sampling (``eval.intervene``)."""
    from eval.generate import make_sampler
    from eval.runner import evaluate_rows

    cfg = dataclasses.replace(recipe.eval, **({"prompt_template": template} if template else {}), **protocol)
    if logits_processor and model is None:
        raise ValueError("held_out: logits processors need the model in memory (transformers sampling)")
    if model_path is not None and (model is None or cfg.backend == "vllm") and not logits_processor:
        sampler, tokenizer = load_sampler(recipe, model_path, backend=cfg.backend, batch_size=cfg.batch_size)
    else:
        sampler = make_sampler("transformers", model=model, tokenizer=tokenizer, batch_size=cfg.batch_size,
                               logits_processor=logits_processor)
    try:
        summary = evaluate_rows(sampler, tokenizer, rows, cfg=cfg, seed=recipe.seed if seed is None else seed,
                                out_dir=out_dir, name=name, progress=progress, temperature=temperature)
    finally:
        release(sampler)
    if out_dir is not None:
        atomic_write_json(Path(out_dir) / "results.json", summary)
    return summary


def rng_untouched():
    """A block after which torch's random state (the CPU's and every CUDA device's) is as it was before:
    an evaluation during training samples inside it, and training draws the same random numbers as it
    would without the evaluation."""
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=cuda)


class DuringTraining(TrainerCallback):
    """Evaluates the model as it is after an optimizer step: at each step of ``steps`` and every ``every``
    steps (0: never), ``evaluate(model, step) -> dict | None`` on the main process. A returned dict is
    added to that step's log row (``every``: the held-out pass@1 monitor), so the metrics file and the
    tracker get it with the step's other metrics; :meth:`install` puts the callback first, since
    ``on_log`` hands one dict to every callback in turn.

    Sharded models: every process takes part in gathering the whole model (``whole_model``: a collective
    under ZeRO-3 or FSDP, a sharded model cannot generate on one process while the others train), and
    at ``every`` steps every process asks for the log (logging gathers the loss: a collective too). The
    evaluation samples under :func:`rng_untouched`: training draws the same random numbers as without it."""

    def __init__(self, evaluate: Callable[[torch.nn.Module, int], dict | None], *, steps: Iterable[int] = (),
                 every: int = 0):
        self.evaluate, self.steps, self.every = evaluate, set(steps), every
        self.pending: dict | None = None
        self.trainer = None

    def install(self, trainer) -> None:
        trainer.callback_handler.callbacks.insert(0, self)
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        periodic = bool(self.every) and step % self.every == 0
        if model is None or not (periodic or step in self.steps):
            return
        if periodic:
            control.should_log = True
        whole = whole_model(self.trainer, model)
        if state.is_world_process_zero:
            was_training = whole.training
            with rng_untouched():
                whole.eval()
                result = self.evaluate(whole, step)
            whole.train(was_training)
            if periodic and result:
                self.pending = {**(self.pending or {}), **result}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending is not None and logs is not None:
            logs.update(self.pending)
            self.pending = None


def pass_at_1_monitor(recipe, tokenizer, rows: list[dict], template: str) -> Callable[[torch.nn.Module, int], dict]:
    """The ``eval_every`` monitor's evaluation: one sample per problem of ``rows`` under the recipe's
    protocol, on the live model, as ``{"eval_pass@1": …}``."""

    def evaluate(model, step: int) -> dict:
        summary = held_out(recipe, rows, model=model, tokenizer=tokenizer, template=template, name="progress", k=1)
        return {"eval_pass@1": round(summary["pass@1"], 4)}

    return evaluate
