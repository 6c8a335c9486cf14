"""SFT for stage 2 (cold start), stage 4 (the curated mix) and distillation: TRL's ``SFTTrainer``, configured by
:class:`SFTJob` from an SFTSpec section and run by ``skeleton.train_section``.

Rows are conversations; the loss is on the assistant's tokens only (``assistant_only_loss``, through the
``{% generation %}`` markers of TRL's training twin of the model's chat template; ChatML installed, with a
warning, only for a tokenizer TRL does not know). Deviation from TRL: rows longer than ``max_length`` are
dropped (and counted), not truncated. Outputs and the chat-template rules: docs/training.md "sft.py".
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from data.datasets import load_rows
from data.packing import PackedCollator
from data.templates import (
    CHAT_END,
    align_to_prefill,
    assistant_prefill,
    end_of_turn_token,
    training_chat_template,
)
from stages.pipeline.common import load_model_and_tokenizer, processes_summary, world_size
from stages.training.evaluation import DuringTraining, pass_at_1_monitor
from stages.training.skeleton import (
    LossLog,
    TrainingJob,
    lora_config,
    losses,
    steps_for_epochs,
    train_section,
    trl_args,
)

log = logging.getLogger("r1")


def sft_config(cfg, *, output_dir: Path, seed: int, device: torch.device, bf16: bool, steps: int,
               tracked: dict | None = None):
    """(TRL's SFTConfig, the settings given to it) for an SFTSpec section.

    Batches are padded (TRL's default). ``trl: {padding_free: true}`` concatenates a batch's examples
    into one row whose ``position_ids`` restart at 0 for each, and transformers builds a block-diagonal
    causal mask from them: the same loss on fewer tokens, but without a varlen attention kernel (flash
    attention, CUDA) the attention runs over the whole concatenated row, and on the CPU that made the
    tiny SFT 1.8× slower than padded batches (docs/speed.md). TRL then cannot truncate (it refuses a
    ``max_length`` without packing); :func:`fit_rows` has already dropped the rows longer than
    ``max_length``, so TRL gets none. ``tracked``: the tracking settings (``stages.training.skeleton.tracking``)."""
    padding_free = cfg.setting("padding_free") and not cfg.setting("packing")
    return trl_args(cfg, output_dir=output_dir, seed=seed, device=device, bf16=bf16, max_steps=steps,
                    per_device_train_batch_size=cfg.batch_size,
                    gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                    max_length=None if padding_free else cfg.max_length, **(tracked or {}))


def fit_rows(rows: list[dict], tokenizer, max_length: int, chat_template: str | None = None) -> tuple[list[dict], int]:
    """(the rows whose whole conversation, rendered with ``chat_template`` (the tokenizer's when None),
    is at most ``max_length`` tokens, how many were longer).

    Deviation from TRL, which truncates: a truncated row teaches the model to stop mid-thought, without
    its answer or end of turn, so it is dropped (and counted in the manifest) instead."""
    texts = tokenizer.apply_chat_template([r["messages"] for r in rows], tokenize=False, chat_template=chat_template)
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    kept = [r for r, n in zip(rows, lengths, strict=True) if n <= max_length]
    return kept, len(rows) - len(kept)


class SFTJob(TrainingJob):
    """SFT of ``model_ref`` on ``rows`` (conversations) under an SFTSpec section: :func:`run_sft`."""

    def __init__(self, ctx, cfg, *, rows: list[dict], model_ref: str, name: str, callbacks):
        out = Path(ctx.dir)
        self.ctx, self.cfg, self.rows, self.model_ref, self.name, self.extra = ctx, cfg, rows, model_ref, name, callbacks
        self.key, self.part, self.what = f"sft_{name}", f"sft_{name}", f"{ctx.stage} SFT {name}"
        self.final, self.trainer_dir, self.metrics_path = out / name, out / f"{name}_trainer", out / f"{name}_metrics.jsonl"
        self.logs = [self.metrics_path]
        self.too_long, self.audit, self.processes = 0, None, None

    def when_done(self) -> Path:
        log.info("SFT %s already finished: %s", self.name, self.final)
        return self.final

    def load(self, precision):
        if not self.rows:
            raise ValueError(f"SFT {self.name}: no training rows")
        recipe, m = self.ctx.recipe, self.ctx.manifest
        if m.data["inputs"]["model"] is None:
            m.set_input_model(self.model_ref)
        return load_model_and_tokenizer(self.model_ref, device=precision.device,
                                        trust_remote_code=recipe.trust_remote_code, dtype=precision.dtype)

    def prepare(self, model, tokenizer) -> None:
        cfg, name = self.cfg, self.name
        self.chat = chat = training_chat_template(tokenizer)
        (log.warning if chat.install else log.info)("SFT %s: chat template: %s", name, chat.source)
        if chat.install:
            tokenizer.chat_template = chat.template
        self.prefill = prefill = assistant_prefill(tokenizer)
        rows = self.rows
        if prefill:  # the template opens the think block itself: the targets open it the same way
            rows = [{**r, "messages": [{**msg, "content": align_to_prefill(msg["content"], prefill)}
                                       if msg["role"] == "assistant" else msg for msg in r["messages"]]} for r in rows]
        self.rows, self.too_long = fit_rows(rows, tokenizer, cfg.max_length, chat.template)
        if self.too_long:
            log.warning("SFT %s: %d rows longer than max_length %d tokens left out", name, self.too_long, cfg.max_length)
        if not self.rows:
            raise ValueError(f"SFT {name}: every row is longer than max_length ({cfg.max_length} tokens): raise it")
        self.steps = steps_for_epochs(cfg.epochs, len(self.rows), cfg)
        self.progress = None
        if cfg.eval_every:  # held-out pass@1 while training (a monitor), in the chat template SFT teaches
            recipe = self.ctx.recipe
            eval_rows = load_rows(recipe.data.test, recipe)[0][: cfg.eval_problems]
            self.progress = DuringTraining(pass_at_1_monitor(recipe, tokenizer, eval_rows, "chat"), every=cfg.eval_every)

    def config(self, *, tracked, **common):
        return sft_config(self.cfg, steps=self.steps, tracked=tracked, **common)

    def callbacks(self) -> list:
        return [LossLog(self.metrics_path), *(self.extra or [])]

    def trainer(self, model, tokenizer, args, callbacks):
        from datasets import Dataset
        from trl import SFTTrainer

        cfg = self.cfg
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list([{"messages": r["messages"]} for r in self.rows]),
                             processing_class=tokenizer, peft_config=lora_config(cfg.lora), callbacks=callbacks)
        if self.progress is not None:
            self.progress.install(trainer)
        if cfg.batching == "packed":  # the batch's examples in rows of at most max_length tokens (data/packing.py)
            trainer.data_collator = PackedCollator(tokenizer.pad_token_id, cfg.max_length)
        self.audit = trainer.data_collator = RowAudit(trainer.data_collator)  # which rows this process trained on
        log.info("SFT %s: %d rows, %d steps (%.1f epochs × batch %d, %s), lr %.1e%s", self.name, len(self.rows),
                 self.steps, cfg.epochs, cfg.batch_size * cfg.gradient_accumulation_steps * world_size(), cfg.batching,
                 args.learning_rate, f", LoRA r={cfg.lora.r}" if cfg.lora else "")
        return trainer

    def trained(self, model, tokenizer, trainer) -> None:
        end_token = end_of_turn_token(tokenizer) or (CHAT_END if self.chat.install else None)
        end_of_turn = tokenizer.convert_tokens_to_ids(end_token) if end_token else None
        if model is not None and end_of_turn is not None and end_of_turn != tokenizer.unk_token_id:
            # the model now ends its turn with the template's end-of-turn token (<|im_end|> for ChatML):
            # generation (ours, TRL's, vLLM's) must stop there
            model.generation_config.eos_token_id = list(dict.fromkeys([tokenizer.eos_token_id, end_of_turn]))
        self.processes = processes_summary(model, self.audit.seen if self.audit else set(), "rows_seen")

    def metrics(self, model, tokenizer, global_step, start, seconds) -> dict:
        cfg, chat = self.cfg, self.chat
        return {"rows": len(self.rows), "rows_over_max_length": self.too_long, "steps": global_step,
                "epochs": cfg.epochs, "batching": cfg.batching, **losses(self.metrics_path),
                "train_seconds_this_run": round(seconds, 1), "resumed_from_step": start.from_step,
                "lora": cfg.lora is not None, "processes": self.processes,
                "chat_template": {"source": chat.source, "installed": chat.install,
                                  "sha256": hashlib.sha256(chat.template.encode()).hexdigest()[:16],
                                  "think_prefill": self.prefill or None}}


def run_sft(ctx, cfg, *, rows: list[dict], model_ref: str, name: str = "checkpoint", callbacks=None) -> Path:
    """Fine-tune ``model_ref`` on ``rows`` (each with ``messages``) inside a stage; returns the saved
    model's folder ``<stage dir>/<name>``. Resumes from ``<name>_trainer/checkpoint-N`` when the
    stage resumes; a finished run (the folder exists and the manifest has its metrics) is not redone."""
    return train_section(ctx, cfg, SFTJob(ctx, cfg, rows=rows, model_ref=model_ref, name=name, callbacks=callbacks))


class RowAudit:
    """Wraps a data collator and remembers a digest of every example this process trained on."""

    def __init__(self, collator):
        self.collator, self.seen = collator, set()

    def __call__(self, examples):
        for ex in examples:
            self.seen.add(hashlib.sha256(str(ex.get("input_ids")).encode()).hexdigest()[:16])
        return self.collator(examples)
