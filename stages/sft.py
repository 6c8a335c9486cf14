"""The shared supervised fine-tuning runner: TRL's ``SFTTrainer``, configured from a recipe's SFT
section (``stages.recipe.SFTSpec``). Stage 2 (cold start), stage 4 (SFT on the curated mix) and
distillation use it.

Rows are conversations (``messages``: the user's turn, then the assistant's response); the loss is on
the assistant's tokens only (``assistant_only_loss``, through the ``{% generation %}`` markers of the
chat template, ``data/templates.py``). The tokenizer must carry a chat template with those markers:
the tiny base's does; for a real base model without one the project's ChatML template is installed
(and saved with the checkpoint, so every later stage speaks the same format).

LoRA (``lora:`` in the section) trains peft adapters and merges them into the weights before saving:
the checkpoint is always a plain model that the next stage loads like any other.

Outputs in the stage folder: ``<name>/`` (the final model + tokenizer, written atomically),
``<name>_trainer/checkpoint-N`` (resumable: model, optimizer, scheduler, RNG), and
``<name>_metrics.jsonl`` (loss, learning rate, grad norm per logging step).
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from data.faults import trainer_faults
from data.jsonl import append_jsonl, read_jsonl_tolerant
from data.templates import CHAT_END, CHAT_TEMPLATE
from stages.common import (
    barrier,
    checkpointing,
    is_main,
    load_model_and_tokenizer,
    lora_config,
    merged,
    pick_device,
    processes_summary,
    save_model_atomically,
    set_seed,
    world_size,
)
from stages.rl import checkpoint_step, last_complete_checkpoint, truncate_jsonl

log = logging.getLogger("r1")


class LossLog(TrainerCallback):
    """Appends every ``on_log`` row (loss, learning_rate, grad_norm, epoch) to a JSON Lines file."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_jsonl(self.path, [{"step": state.global_step, **logs}])


def sft_config(cfg, *, output_dir: Path, seed: int, device: torch.device, bf16: bool, steps: int):
    """TRL's SFTConfig for an SFTSpec section."""
    from trl import SFTConfig

    cuda = device.type == "cuda"
    return SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_length=cfg.max_length,
        assistant_only_loss=True,
        packing=False,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        save_only_model=False,
        report_to="none",
        seed=seed,
        data_seed=seed,
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        **checkpointing(cfg.gradient_checkpointing and cuda),
        dataloader_num_workers=0,
    )


def run_sft(ctx, cfg, *, rows: list[dict], model_ref: str, name: str = "checkpoint", callbacks=None) -> Path:
    """Fine-tune ``model_ref`` on ``rows`` (each with ``messages``) inside a stage; returns the saved
    model's folder ``<stage dir>/<name>``. Resumes from ``<name>_trainer/checkpoint-N`` when the
    stage resumes; a finished run (the folder exists and the manifest has its metrics) is not redone."""
    from datasets import Dataset
    from trl import SFTTrainer

    recipe, m, out = ctx.recipe, ctx.manifest, Path(ctx.dir)
    final, trainer_dir, metrics_path = out / name, out / f"{name}_trainer", out / f"{name}_metrics.jsonl"
    key = f"sft_{name}"
    if ctx.resumed and key in m.data["metrics"] and final.is_dir():
        log.info("SFT %s already finished: %s", name, final)
        return final
    resume_from = last_complete_checkpoint(trainer_dir, remove_partial=is_main()) if ctx.resumed else None
    if resume_from is None and is_main():  # fresh: nothing in the folder belongs to this run
        shutil.rmtree(trainer_dir, ignore_errors=True)
        metrics_path.unlink(missing_ok=True)
    elif resume_from is not None and is_main():
        truncate_jsonl(metrics_path, checkpoint_step(resume_from))
        log.info("SFT %s: resuming from %s", name, resume_from)
    barrier()
    if not rows:
        raise ValueError(f"SFT {name}: no training rows")

    seed = recipe.seed if cfg.seed is None else cfg.seed
    device = pick_device(recipe.device)
    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda"
                                       and torch.cuda.is_bf16_supported())
    set_seed(seed)
    if m.data["inputs"]["model"] is None:
        m.set_input_model(model_ref)
    model, tokenizer = load_model_and_tokenizer(model_ref, device=device, trust_remote_code=recipe.trust_remote_code,
                                                dtype=torch.bfloat16 if bf16 else torch.float32)
    if not tokenizer.chat_template or "{% generation %}" not in tokenizer.chat_template:
        log.info("SFT %s: the tokenizer has no chat template with generation markers; installing ChatML", name)
        tokenizer.chat_template = CHAT_TEMPLATE
    # optimizer steps per epoch, rounded up; max_steps (not epochs) so that resume and logs agree exactly
    steps_per_epoch = math.ceil(len(rows) / (cfg.batch_size * cfg.gradient_accumulation_steps * world_size()))
    steps = max(1, math.ceil(cfg.epochs * steps_per_epoch))

    peft_config = lora_config(cfg.lora)
    trainer = SFTTrainer(
        model=model,
        args=sft_config(cfg, output_dir=trainer_dir, seed=seed, device=device, bf16=bf16, steps=steps),
        train_dataset=Dataset.from_list([{"messages": r["messages"]} for r in rows]),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[LossLog(metrics_path), *(callbacks or []), *trainer_faults()],
    )
    audit = RowAudit(trainer.data_collator)  # which rows this process trained on
    trainer.data_collator = audit
    log.info("SFT %s: %d rows, %d steps (%.1f epochs × batch %d), lr %.1e%s", name, len(rows), steps, cfg.epochs,
             cfg.batch_size * cfg.gradient_accumulation_steps * world_size(), cfg.learning_rate,
             f", LoRA r={cfg.lora.r}" if cfg.lora else "")
    t0 = time.time()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.time() - t0
    model = merged(trainer.accelerator.unwrap_model(trainer.model))
    end_of_turn = tokenizer.convert_tokens_to_ids(CHAT_END)
    if end_of_turn is not None and end_of_turn != tokenizer.unk_token_id:
        # the model now ends its turn with <|im_end|>: generation (ours, TRL's, vLLM's) must stop there
        model.generation_config.eos_token_id = list(dict.fromkeys([tokenizer.eos_token_id, end_of_turn]))
    processes = processes_summary(model, audit.seen, "rows_seen")
    if is_main():
        save_model_atomically(model, tokenizer, final)
        losses = [r["loss"] for r in read_jsonl_tolerant(metrics_path) if "loss" in r]
        m.update_metrics(**{key: {
            "rows": len(rows), "steps": trainer.state.global_step, "epochs": cfg.epochs,
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            "train_seconds_this_run": round(seconds, 1),
            "resumed_from_step": checkpoint_step(resume_from) if resume_from else 0, "lora": cfg.lora is not None,
            "processes": processes,
        }})
    barrier()
    return final


class RowAudit:
    """Wraps a data collator and remembers a digest of every example this process trained on."""

    def __init__(self, collator):
        self.collator, self.seen = collator, set()

    def __call__(self, examples):
        for ex in examples:
            self.seen.add(hashlib.sha256(str(ex.get("input_ids")).encode()).hexdigest()[:16])
        return self.collator(examples)

