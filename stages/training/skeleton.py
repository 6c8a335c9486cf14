"""The order of every training job, written once: :func:`train_section` runs a :class:`TrainingJob` (GRPO,
SFT, a reward model: ``grpo.py``, ``sft.py``, ``reward_model.py``), which carries only what is its own.

    check → begin (fresh, resumed from checkpoint-N, or done) → seed → load → attention → prepare
    → TRL config → fit → sharded/atomic save (LoRA merged) → metrics → manifest → after

And what that order is made of: precision (:func:`device_and_precision`), TRL's config (:func:`trl_args`: TRL's
defaults < ``stages.pipeline.trl_policy``'s < the recipe's ``trl:``), resume (:func:`begin`,
:func:`last_complete_checkpoint`), :func:`fit`, the gather of sharded models
(:func:`whole_model`), :func:`save_final`, tracking, and the callbacks every trainer carries
(:class:`TrackedRun`, :class:`StepProgress`, :class:`LossLog`). Resume and several processes:
docs/training.md "skeleton.py".
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import TrainerCallback

from data.jsonl import append_jsonl, read_jsonl_tolerant
from data.timing import timed
from stages.pipeline.common import barrier, is_main, pick_device, save_model_atomically, set_seed, world_size
from stages.pipeline.runner import STEP_LOG

log = logging.getLogger("r1")

# TRL 1.16 still uses transformers' pre-5 names for activation checkpointing (GRPOConfig's
# ``gradient_checkpointing`` field; ``is_gradient_checkpointing`` and ``gradient_checkpointing_disable/enable``
# around every generation); transformers 5 keeps them as aliases that warn at each use. The calls are TRL's,
# not the project's (stages/training/skeleton.py passes the new name where transformers has it): filtered, this one only.
warnings.filterwarnings("ignore", category=FutureWarning,
                        message=r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated")

CHECKPOINT_PREFIX = "checkpoint-"
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")
# What a Trainer checkpoint holds besides trainer_state.json: weights (the files above; FSDP's full or sharded
# state dict; DeepSpeed's model states), the optimizer state (optimizer.pt; FSDP's optimizer.bin or optimizer_0/;
# DeepSpeed's global_stepN/*optim_states.pt) and scheduler.pt


# ---------------------------------------------------------------------------------------------
# Device and precision
# ---------------------------------------------------------------------------------------------


class Precision(NamedTuple):
    """How a trainer section computes: on ``device``, weights of ``dtype``, and TRL's ``bf16`` flag
    (bf16 compute: autocast for fp32 weights); ``name`` for logs and the manifest."""

    device: torch.device
    dtype: torch.dtype
    bf16: bool
    name: str


def device_and_precision(recipe, cfg, section: str = "") -> Precision:
    """A trainer section's :class:`Precision` on this machine, from its ``precision``:

    - ``fp32``: fp32 weights and arithmetic;
    - ``bf16``: bf16 weights, only where something keeps fp32 master weights for the optimizer: a
      DeepSpeed launch (its bf16 optimizer holds an fp32 copy) or FSDP with mixed precision (accelerate
      upcasts the sharded parameters to fp32). Anywhere else AdamW would update bf16 weights in bf16,
      and at a learning rate of 1e-6 most updates fall below bf16's resolution and round away, so it is
      refused (on a CPU it is allowed, with a warning: the tiny recipe's experiments);
    - ``autocast``: fp32 weights, matmuls in bf16 under autocast, where the device has bf16 kernels (a
      CUDA device that supports bf16; a CPU where oneDNN has them: AVX-512 or Arm bf16), else fp32: on an
      AVX2-only CPU autocast emulates bf16, many times slower (docs/speed.md). The numbers of a run then
      depend on the machine, as the tiny base's do (``base.pretrain.bf16_autocast: auto``);
    - ``auto``: on a CUDA device with bf16, bf16 weights under DeepSpeed or FSDP and bf16 autocast over
      fp32 weights otherwise (DDP, one process); fp32 elsewhere."""
    device = pick_device(recipe.device)
    cuda = device.type == "cuda"
    masters = fp32_master_weights()
    if cfg.precision == "bf16" and not cuda:
        log.warning("precision bf16 requested on CPU: allowed, but bf16 weights learnt worse than fp32 on the "
                    "tiny recipe (precision: autocast keeps fp32 weights)")
    elif cfg.precision == "bf16" and not masters:
        raise ValueError(
            f"{section or 'a trainer section'}.precision: bf16 trains bf16 weights with a bf16 AdamW when neither "
            "DeepSpeed nor FSDP keeps fp32 master weights (this launch has neither): updates below bf16's "
            "resolution round away. Use precision: autocast (fp32 weights, bf16 matmuls) or auto, or launch with "
            "launch.accelerate_config zero2, zero3 or fsdp")
    if cfg.precision == "bf16" or (cfg.precision == "auto" and cuda and masters and torch.cuda.is_bf16_supported()):
        return Precision(device, torch.bfloat16, True, "bf16")
    if cfg.precision == "autocast" and native_bf16(device) or cfg.precision == "auto" and cuda and native_bf16(device):
        return Precision(device, torch.float32, True, "bf16 autocast")
    return Precision(device, torch.float32, False, "fp32")


def fp32_master_weights() -> bool:
    """Whether this process runs under a launch that keeps fp32 master weights for bf16 parameters:
    DeepSpeed, or FSDP (accelerate's launcher says so in the environment, ``ACCELERATE_USE_*``)."""
    return any(os.environ.get(f"ACCELERATE_USE_{k}", "false").lower() in ("true", "1") for k in ("DEEPSPEED", "FSDP"))


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (on the CPU: oneDNN's check, AVX-512 or Arm bf16)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def set_attention(model, cfg) -> None:
    """The section's ``attn_implementation`` (``model``: what the checkpoint's config says)."""
    if cfg.attn_implementation != "model":
        model.set_attn_implementation(cfg.attn_implementation)


def seed_of(recipe, cfg) -> int:
    """A section's training seed: its own ``seed``, else the recipe's."""
    return recipe.seed if cfg.seed is None else cfg.seed


# ---------------------------------------------------------------------------------------------
# TRL's config
# ---------------------------------------------------------------------------------------------


def checkpointing(enabled: bool) -> dict:
    """The TrainingArguments keyword for activation (gradient) checkpointing: transformers 5.2x calls it
    ``activation_checkpointing`` (the old name a deprecated alias), the GPU set's 5.17 only
    ``gradient_checkpointing``."""
    from transformers import TrainingArguments

    new = "activation_checkpointing" in TrainingArguments.__dataclass_fields__
    return {"activation_checkpointing" if new else "gradient_checkpointing": enabled}


def trl_args(cfg, *, output_dir: Path, seed: int, device: torch.device, bf16: bool, **owned):
    """TRL's config (``cfg.TRL_CONFIG``: GRPOConfig, SFTConfig or RewardConfig) for a recipe section, and
    the settings given to it (for the manifest). ``owned``: what the trainer sets from its own fields
    (steps, batch, lengths…); it wins over the recipe's ``trl:``, which may not name it
    (``stages.pipeline.trl_policy.SET_BY_PROJECT``)."""
    import trl

    cuda = device.type == "cuda"
    settings = {
        **cfg.trl_settings(),  # the project's defaults, then the recipe's trl: mapping
        "output_dir": str(output_dir),
        "seed": seed,
        "data_seed": seed,
        "bf16": bf16,
        "fp16": False,
        "use_cpu": not cuda,
        **checkpointing(cfg.gradient_checkpointing and cuda),  # on CPU it only costs time
        "save_strategy": "steps",  # checkpoint-N every save_steps, with optimizer state: resumable
        "save_only_model": False,
        **owned,
    }
    return getattr(trl, cfg.TRL_CONFIG)(**settings), settings


def steps_for_epochs(epochs: float, rows: int, cfg) -> int:
    """Optimizer steps for ``epochs`` over ``rows`` examples at ``cfg.batch_size ×
    cfg.gradient_accumulation_steps`` per process and step: per epoch rounded up, then the total; at
    least 1. ``max_steps`` (not epochs) is what TRL gets, so that resume and logs agree exactly."""
    per_epoch = math.ceil(rows / (cfg.batch_size * cfg.gradient_accumulation_steps * world_size()))
    return max(1, math.ceil(epochs * per_epoch))


# ---------------------------------------------------------------------------------------------
# LoRA
# ---------------------------------------------------------------------------------------------


def lora_config(spec, task_type: str = "CAUSAL_LM", modules_to_save: list[str] | None = None):
    """peft's LoraConfig for a recipe's ``lora`` section (None: train every weight)."""
    if spec is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=spec.target_modules,
                      task_type=task_type, modules_to_save=modules_to_save)


def merged(model):
    """A peft model with its adapters merged into the weights (any other model as it is): every
    checkpoint the stages save is a plain model that the next stage loads like any other."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


# ---------------------------------------------------------------------------------------------
# Checkpoints, and where a run starts
# ---------------------------------------------------------------------------------------------


def checkpoint_step(path: Path) -> int | None:
    name = Path(path).name
    if not name.startswith(CHECKPOINT_PREFIX) or not name[len(CHECKPOINT_PREFIX):].isdigit():
        return None
    return int(name[len(CHECKPOINT_PREFIX):])


def checkpoint_problem(path: Path) -> str | None:
    """Why a ``checkpoint-N`` folder cannot be resumed from (None: it is complete)."""
    path = Path(path)
    state_file = path / "trainer_state.json"
    if not state_file.is_file():
        return "no trainer_state.json"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json is not valid JSON"
    if state.get("global_step") != checkpoint_step(path):
        return f"trainer_state.json says step {state.get('global_step')}"
    deepspeed = path / f"global_step{checkpoint_step(path)}"  # DeepSpeed's engine checkpoint (ZeRO, any stage)
    weights = [*_WEIGHT_FILES, "pytorch_model_fsdp.bin", "pytorch_model_fsdp_0/", f"{deepspeed.name}/*model_states.pt"]
    if not _any_written(path, weights):
        return "no model weights"
    if not _any_written(path, ["optimizer.pt", "optimizer.bin", "optimizer_0/", f"{deepspeed.name}/*optim_states.pt"]):
        return "no optimizer state (optimizer.pt; FSDP's optimizer.bin or optimizer_0/; DeepSpeed's global_stepN/)"
    if not (path / "scheduler.pt").is_file():
        return "no scheduler.pt"
    return None


def _any_written(folder: Path, names: Sequence[str]) -> bool:
    """Whether one of ``names`` is in ``folder`` and not empty: a file, a folder (``name/``) with a file in it,
    or a glob pattern (``sub/*.pt``)."""
    for name in names:
        if name.endswith("/"):
            sub = folder / name.rstrip("/")
            if sub.is_dir() and any(f.is_file() and f.stat().st_size > 0 for f in sub.rglob("*")):
                return True
        elif any(f.is_file() and f.stat().st_size > 0 for f in folder.glob(name)):
            return True
    return False


def last_complete_checkpoint(trainer_dir: Path, remove_partial: bool = False) -> Path | None:
    """The complete ``checkpoint-N`` with the largest N, or None. Incomplete ones are logged, and
    deleted with ``remove_partial``."""
    trainer_dir = Path(trainer_dir)
    if not trainer_dir.is_dir():
        return None
    found = sorted((p for p in trainer_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None),
                   key=checkpoint_step)
    best = None
    for p in found:
        problem = checkpoint_problem(p)
        if problem is None:
            best = p
            continue
        log.warning("ignoring incomplete checkpoint %s (%s)%s", p, problem, "; deleting it" if remove_partial else "")
        if remove_partial:
            shutil.rmtree(p, ignore_errors=True)
    return best


def trained_weights(model, checkpoint: Path):
    """The model a complete Trainer ``checkpoint-N`` holds: its saved weights, or ``model`` with the
    checkpoint's LoRA adapter merged in."""
    if (checkpoint / "adapter_config.json").exists():
        from peft import PeftModel

        return merged(PeftModel.from_pretrained(model, str(checkpoint)))
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=model.dtype).to(model.device)


def truncate_jsonl(path: Path, max_step: int) -> int:
    """Keep the rows of a JSONL file whose ``step`` is <= ``max_step`` (torn lines go too); returns
    how many rows were dropped. Rewritten atomically."""
    path = Path(path)
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if row.get("step", 0) <= max_step:
            kept.append(line)
        else:
            dropped += 1
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)
    return dropped


@dataclass
class Start:
    """Where a trainer starts: ``done`` (its model is saved and recorded), else from ``resume_from``
    (a complete ``checkpoint-N``, step ``from_step``) or from the beginning (None, 0)."""

    done: bool = False
    resume_from: Path | None = None
    from_step: int = 0


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def begin(ctx, *, key: str, final: Path, trainer_dir: Path, logs: Sequence[Path] = (), stale: Sequence[Path] = (),
          resumable: bool = True, forget_after: Callable[[int], None] | None = None) -> Start:
    """Decide where a trainer of stage ``ctx`` starts.

    Finished: the stage resumes (or adopted this training, done beside an earlier stage:
    ``StageContext.adopted``), its manifest has metrics ``key`` and ``final`` exists. Fresh (the stage
    did not resume, or the trainer cannot resume): ``trainer_dir``, ``final``, the ``logs`` and the
    ``stale`` outputs are deleted, since nothing in them belongs to this run. Resumed: from the last
    complete ``checkpoint-N`` of ``trainer_dir`` (partial ones deleted), or from step 0 when there is
    none; rows of ``logs`` past N are dropped and ``forget_after(N)`` forgets the trainer's other
    records of those steps.

    TRL/transformers checkpoints (``<trainer dir>/checkpoint-N``, every ``save_steps``) hold model, optimizer,
    scheduler, RNG states and trainer state; ``trainer.train(resume_from_checkpoint=…)`` restores all of them.
    Transformers writes ``trainer_state.json`` last, so a folder without it (or without weights, optimizer or
    scheduler, or with a torn state file) is a checkpoint cut short by a crash: it is deleted, never loaded
    (left in place, checkpoint rotation could delete a good one instead). A trainer that does not resume
    (the reward models) starts over."""
    m = ctx.manifest
    if (ctx.resumed or getattr(ctx, "adopted", False)) and key in m.data["metrics"] and Path(final).is_dir():
        return Start(done=True)
    fresh = not ctx.resumed or not resumable
    resume_from = None if fresh else last_complete_checkpoint(trainer_dir, remove_partial=is_main())
    start = Start(resume_from=resume_from, from_step=checkpoint_step(resume_from) if resume_from else 0)
    if is_main():
        if fresh:
            for path in (Path(trainer_dir), Path(final), *map(Path, logs), *map(Path, stale)):
                _remove(path)
        else:
            dropped = sum(truncate_jsonl(p, start.from_step) for p in logs)
            if forget_after is not None:
                forget_after(start.from_step)
            log.info("%s: resuming from %s (step %d); dropped %d logged rows past it", key,
                     resume_from or "the start (no complete checkpoint)", start.from_step, dropped)
    barrier()
    return start


# ---------------------------------------------------------------------------------------------
# Training, saving, logs
# ---------------------------------------------------------------------------------------------


def fit(make_trainer: Callable[[], object], start: Start, steps: int, model):
    """(model, global step, trainer): ``make_trainer()`` trained from ``start``, its model unwrapped and
    LoRA adapters merged. A run killed after the checkpoint of its last step but before its final save is
    not trained again: resumed from that checkpoint, transformers' Trainer would train one step more (it
    checks ``max_steps`` after a step), so the checkpoint's weights are taken as they are (``trainer``
    None)."""
    if start.resume_from is not None and start.from_step >= steps:
        log.info("training had finished (%s); taking its weights", start.resume_from)
        return trained_weights(model, start.resume_from), start.from_step, None
    trainer = make_trainer()
    StepProgress.install(trainer)
    with timed("training"):
        trainer.train(resume_from_checkpoint=str(start.resume_from) if start.resume_from else None)
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    if not is_sharded(unwrapped):  # every process holds the whole model (one process, DDP, ZeRO-1/2)
        return merged(unwrapped), trainer.state.global_step, trainer
    # ZeRO-3 or FSDP: each process holds a shard; the whole model exists only once gathered (a collective)
    state = full_state_dict(trainer)
    if getattr(trainer, "is_deepspeed_enabled", False):
        # transformers loads every later model into ZeRO-3 partitions (zero.Init, a collective) while the
        # trainer's DeepSpeed config is registered: the evaluations that follow load on one process
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    model = plain_model(unwrapped, state).to(trainer.args.device) if is_main() else None
    return model, trainer.state.global_step, trainer


# ---------------------------------------------------------------------------------------------
# Sharded models (ZeRO-3, FSDP): gathered before they are saved
# ---------------------------------------------------------------------------------------------


def is_sharded(model) -> bool:
    """Whether ``model``'s parameters are partitioned over the processes: DeepSpeed ZeRO-3 placeholders
    (``ds_id``) or FSDP2 DTensors. Read from the parameters, not from the launch, so no path can save a
    shard as if it were the model."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in model.parameters())


def full_state_dict(trainer) -> dict:
    """The whole model's weights, gathered on the main process (CPU tensors; other processes get what the
    backend gives them, possibly nothing). Every process must call it: it is a collective.

    ZeRO-3: accelerate's 16-bit gather from the DeepSpeed engine (``zero3_save_16bit_model``, set in
    ``recipes/accelerate/zero3.yaml``); FSDP2: torch's full state dict (``get_model_state_dict``, what
    accelerate calls), offloaded to the CPU."""
    if getattr(trainer, "is_deepspeed_enabled", False):
        return trainer.accelerator.get_state_dict(trainer.deepspeed)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def plain_model(unwrapped, state: dict):
    """A fresh, unsharded copy of ``unwrapped``'s transformers model holding ``state`` (its full state
    dict), with LoRA adapters merged by peft: what every stage saves and the next one loads. Built
    without initialising weights (they are all overwritten), in the state's dtype."""
    import contextlib
    import copy

    from transformers.initialization import no_init_weights

    peft = hasattr(unwrapped, "peft_config")
    base = unwrapped.get_base_model() if peft else unwrapped
    cls = next(c for c in type(base).__mro__ if c.__module__.startswith("transformers"))  # not FSDP's subclass
    dtype = next(iter(state.values())).dtype

    @contextlib.contextmanager
    def default_dtype(d):
        old = torch.get_default_dtype()
        torch.set_default_dtype(d)
        try:
            yield
        finally:
            torch.set_default_dtype(old)

    with no_init_weights(), default_dtype(dtype):
        fresh = cls(copy.deepcopy(base.config))
    fresh.generation_config = copy.deepcopy(base.generation_config)
    if peft:
        from peft import get_peft_model

        fresh = get_peft_model(fresh, unwrapped.peft_config[unwrapped.active_adapter])
    fresh.load_state_dict(state, strict=True)
    return merged(fresh)


def whole_model(trainer, model):
    """The model a callback of ``trainer`` sees, whole, on the main process: itself (unwrapped) where every
    process holds all of it (one process, DDP, ZeRO-1/2); under ZeRO-3 or FSDP its weights gathered (a
    collective: every process must call this at the same step) into a plain copy on the main process, and
    None on the others. An evaluation during training samples from it: the sharded model cannot generate
    on one process while the others train (its forward pass gathers weights from every process)."""
    unwrapped = trainer.accelerator.unwrap_model(model)
    if not is_sharded(unwrapped):
        return unwrapped
    state = full_state_dict(trainer)
    return plain_model(unwrapped, state).to(trainer.args.device) if is_main() else None


def save_final(model, tokenizer, final: Path) -> Path:
    """The final model (adapters merged) and tokenizer, written atomically by the main process; every
    process waits until it is in place. ``model`` is what :func:`fit` returned: whole on the main
    process (gathered there when training was sharded; None on the others then)."""
    if is_main():
        save_model_atomically(merged(model), tokenizer, final)
    barrier()
    return Path(final)


# ---------------------------------------------------------------------------------------------
# Tracking, and evaluation while training
# ---------------------------------------------------------------------------------------------


def tracking(ctx, part: str, seed: int) -> dict:
    """TRL's tracking settings for one trainer of a stage: the recipe's ``tracking.report_to`` and
    ``project``, and the run's name ``<recipe>/<stage>/<part>/seed<seed>`` (a resumed stage continues
    the run of that name). An integration that is not installed is refused here, before any work."""
    from transformers.integrations import get_available_reporting_integrations

    t = ctx.recipe.tracking
    missing = [n for n in t.integrations if n != "all" and n not in get_available_reporting_integrations()]
    if missing:
        hint = " (pip install -e '.[track]')" if "trackio" in missing else ""
        raise ValueError(f"tracking.report_to: {', '.join(missing)} is not installed{hint}; or set "
                         "tracking.report_to=none")
    return {"report_to": t.integrations or "none", "project": t.project,
            "run_name": f"{ctx.recipe.name}/{ctx.stage}/{part}/seed{seed}"}


class TrackedRun(TrainerCallback):
    """Adds where a tracked run comes from to its tracker's config, once the tracker has started (its own
    callback, earlier in the list, starts it at ``on_train_begin``): the recipe's name and hash, the
    stage, and the stage's manifest. trackio and wandb keep a run config; other trackers get the run
    name only."""

    def __init__(self, ctx):
        self.info = {"r1/recipe": ctx.recipe.name, "r1/recipe_hash": ctx.recipe.hash(), "r1/stage": ctx.stage,
                     "r1/manifest": str(ctx.manifest.path)}

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        names = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to or [])
        if "trackio" in names:
            import trackio

            trackio.config.update(self.info, allow_val_change=True)
        if "wandb" in names:
            import wandb

            if wandb.run is not None:
                wandb.run.config.update(self.info, allow_val_change=True)


class StepProgress(TrainerCallback):
    """The terminal's view of a trainer: one progress bar (steps, elapsed, the latest loss, reward and
    held-out pass@1), in place of transformers' bar and its printed ``{'loss': …}`` dictionaries. The
    full rows go to the stage's log file (logger :data:`STEP_LOG`, kept off the terminal by
    ``stages.pipeline.runner.setup_logging``) and to the stage's metrics file (its other callbacks)."""

    SHOWN = {"loss": "loss", "reward": "reward", "eval_pass@1": "pass@1"}

    def __init__(self):
        self.bar = None

    @classmethod
    def install(cls, trainer) -> None:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(cls())

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="training", unit="step",
                            dynamic_ncols=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        logging.getLogger(STEP_LOG).info("step %d %s", state.global_step, json.dumps(logs, default=str))
        if self.bar is not None:
            shown = {label: f"{logs[k]:.3g}" for k, label in self.SHOWN.items() if isinstance(logs.get(k), int | float)}
            if shown:
                self.bar.set_postfix(shown, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class LossLog(TrainerCallback):
    """Appends every ``on_log`` row (loss, learning_rate, grad_norm, epoch) to a JSON Lines file."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_jsonl(self.path, [{"step": state.global_step, **logs}])


def losses(path: Path) -> dict:
    """``loss_first`` and ``loss_last`` of a :class:`LossLog` file (None when it has none)."""
    values = [r["loss"] for r in read_jsonl_tolerant(path) if "loss" in r]
    return {"loss_first": values[0] if values else None, "loss_last": values[-1] if values else None}


def jsonable(settings: dict) -> dict:
    """TRL settings as the manifest records them (paths and other objects as strings)."""
    return {k: v if isinstance(v, bool | int | float | str | list | dict | type(None)) else str(v)
            for k, v in settings.items()}


# ---------------------------------------------------------------------------------------------
# The job protocol, and the order every training job runs in
# ---------------------------------------------------------------------------------------------


class TrainingJob:
    """What one trainer of a stage carries beside the shared order (:func:`train_section`): its names and
    outputs, how it loads, prepares and configures, which TRL trainer it makes, and what it records.
    The defaults are an SFT-like job's; a job overrides what is its own."""

    key: str  # its entry in the manifest's metrics (also what "done" is judged by)
    part: str  # the tracker's run name: <recipe>/<stage>/<part>/seed<seed>
    what: str  # for logs and errors: "SFT checkpoint", "reward model rm_helpfulness", the stage…
    final: Path  # the saved model's folder
    trainer_dir: Path  # the trainer's checkpoint-N folders
    logs: Sequence[Path] = ()  # files whose rows past a resumed step are dropped
    stale: Sequence[Path] = ()  # other outputs a fresh start deletes
    resumable: bool = True
    steps: int = 0  # optimizer steps; set by ``prepare`` at the latest

    def check(self, precision: Precision) -> None:
        """Refuse what cannot run, before anything is deleted or loaded."""

    def forget_after(self, step: int) -> None:
        """On resume from step ``step``: forget what the steps after it recorded (they run again)."""

    def started(self, start: Start) -> None:
        """Told where training starts (before anything is loaded)."""

    def when_done(self) -> Path:
        """Training had finished in an earlier run: what is left to do; returns the final folder."""
        log.info("%s already trained: %s", self.what, self.final)
        return self.final

    def load(self, precision: Precision):
        """(model, tokenizer), on ``precision``'s device in its dtype."""
        raise NotImplementedError

    def prepare(self, model, tokenizer) -> None:
        """Everything between loading and TRL's config (data that needs the tokenizer, ``steps``…)."""

    def config(self, **common):
        """(TRL's config, the settings given to it); ``common``: output_dir, seed, device, bf16 and the
        tracking settings (:func:`trl_args` takes them)."""
        raise NotImplementedError

    def callbacks(self) -> list:
        """The job's own callbacks (after :class:`TrackedRun`, before the fault-injection ones)."""
        return []

    def trainer(self, model, tokenizer, args, callbacks: list):
        """TRL's trainer for ``model``."""
        raise NotImplementedError

    def trained(self, model, tokenizer, trainer) -> None:
        """After :func:`fit`, before the save (``trainer`` is None when training had already ended)."""

    def metrics(self, model, tokenizer, global_step: int, start: Start, seconds: float) -> dict:
        """The manifest's record of this trainer, on the main process after the save (``precision`` and the
        ``trl`` settings are added)."""
        return {}

    def after(self, model, tokenizer) -> None:
        """After the manifest has the record (the RL runner's evaluation after training)."""


def train_section(ctx, section, job: TrainingJob) -> Path:
    """Train ``job`` under the recipe section ``section`` (its seed, precision, attention, LoRA and ``trl:``
    settings) inside the stage ``ctx``; returns the final model's folder. The one place the order of a
    training job is written: every trainer of every stage goes through here."""
    recipe, m = ctx.recipe, ctx.manifest
    seed = seed_of(recipe, section)
    precision = device_and_precision(recipe, section, job.what)
    tracked = tracking(ctx, job.part, seed)  # (an integration that is not installed is refused here)
    job.check(precision)
    start = begin(ctx, key=job.key, final=job.final, trainer_dir=job.trainer_dir, logs=job.logs,
                  stale=job.stale, resumable=job.resumable, forget_after=job.forget_after)
    job.started(start)
    if start.done:
        return job.when_done()

    set_seed(seed)
    model, tokenizer = job.load(precision)
    set_attention(model, section)
    job.prepare(model, tokenizer)
    args, settings = job.config(output_dir=job.trainer_dir, seed=seed, device=precision.device,
                                bf16=precision.bf16, tracked=tracked)

    def make_trainer():
        from data.faults import trainer_faults

        return job.trainer(model, tokenizer, args, [TrackedRun(ctx), *job.callbacks(), *trainer_faults()])

    t0 = time.time()
    model, global_step, trainer = fit(make_trainer, start, job.steps, model)
    seconds = time.time() - t0
    job.trained(model, tokenizer, trainer)
    del trainer
    save_final(model, tokenizer, job.final)
    if is_main():
        record = job.metrics(model, tokenizer, global_step, start, seconds)
        m.update_metrics(**{job.key: {**record, "precision": precision.name, "trl": jsonable(settings)}})
    job.after(model, tokenizer)
    return job.final
