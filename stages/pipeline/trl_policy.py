"""TRL's settings as the project uses them: the policy, as data, and the functions that apply it.

A trainer section of a recipe (``stages.pipeline.recipe.TrainerSection``) passes its ``trl:`` mapping through
to TRL's config (GRPOConfig, SFTConfig, RewardConfig). This module holds what the project decides about
those settings: :data:`PROJECT_DEFAULTS`, the defaults it changes from TRL's, each with its reason;
:data:`SET_BY_PROJECT`, the fields it sets itself (a ``trl:`` mapping may not name them); and
:data:`TRL_RANGES`, the ranges of TRL's numbers that TRL does not check (the notation of
``stages.pipeline.ranges``). :func:`trl_problem` and :func:`trl_value_problem` say why a key or a value is
refused; :func:`trl_settings` and :func:`trl_setting` give what TRL's config gets. TRL is imported on first
use only: it is slow to import.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from typing import Any

from stages.pipeline.ranges import range_problem

# The defaults the project changes from TRL's, per TRL config: field → (value, why). A recipe's ``trl:``
# overrides them; the fields the project sets itself (below) it may not name.
PROJECT_DEFAULTS: dict[str, dict[str, tuple[Any, str]]] = {
    "GRPOConfig": {
        "learning_rate": (3e-6, "DeepSeek-R1-Zero's learning rate (TRL: 1e-6)"),
        "lr_scheduler_type": ("constant_with_warmup", "RL at a constant rate after warmup (TRL: linear decay to 0)"),
        "loss_type": ("grpo", "the paper's GRPO objective (TRL: dapo)"),
        "beta": (0.001, "the paper's KL coefficient (TRL: 0.0, no reference model)"),
        "epsilon": (10.0, "the paper's clip ratio (TRL: 0.2)"),
        "logging_steps": (1, "one metrics.jsonl row per optimizer step (TRL: every 10)"),
        "save_steps": (50, "a resumable checkpoint every 50 steps (TRL: 500)"),
        "save_total_limit": (2, "the last two checkpoints are all resume needs (TRL: keeps all)"),
    },
    "SFTConfig": {
        "learning_rate": (1e-5, "a conservative full fine-tuning rate (TRL: 2e-5)"),
        "lr_scheduler_type": ("cosine", "cosine decay (TRL: linear)"),
        "warmup_steps": (0.03, "warm up over 3% of the steps (a value below 1 is a fraction; TRL: 0)"),
        "save_steps": (200, "a resumable checkpoint every 200 steps (TRL: 500)"),
        "save_total_limit": (2, "the last two checkpoints are all resume needs (TRL: keeps all)"),
        "assistant_only_loss": (True, "loss on the assistant's tokens only, not the prompt's (TRL: every token)"),
    },
    "RewardConfig": {
        "learning_rate": (1e-5, "a fine-tuning rate: the model starts from the SFT model (TRL: 1e-4)"),
        "lr_scheduler_type": ("cosine", "cosine decay (TRL: linear)"),
        "warmup_steps": (0.1, "warm up over 10% of the steps (a value below 1 is a fraction; TRL: 0)"),
        "center_rewards_coefficient": (0.01, "TRL's recommended value: keeps scores centred on 0 (TRL: off)"),
    },
}

# TRL config fields the project sets itself, and from what: a recipe's ``trl:`` naming one is an error
# that says what to set instead (stages/training/skeleton.py trl_args, and each trainer, set them).
SET_BY_PROJECT: dict[str, str] = {
    "output_dir": "the stage folder",
    "max_steps": "steps (SFT and reward models: epochs)",
    "num_train_epochs": "steps (SFT and reward models: epochs)",
    "per_device_train_batch_size": "prompts_per_step × num_generations (GRPO), batch_size (SFT, reward models)",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "generation_batch_size": "prompts_per_step × num_generations",
    "steps_per_generation": "gradient_accumulation_steps (one generation per optimizer step)",
    "num_generations": "num_generations",
    "max_completion_length": "max_completion_length",
    "max_length": "max_length",
    "seed": "seed (null: the recipe's)",
    "data_seed": "seed (null: the recipe's)",
    "bf16": "precision (auto: on CUDA bf16 under DeepSpeed/FSDP, else bf16 autocast; fp32 on CPU)",
    "fp16": "precision",
    "use_cpu": "the recipe's device",
    "gradient_checkpointing": "gradient_checkpointing (CUDA only: TRL's default, on, only slows a CPU run)",
    "activation_checkpointing": "gradient_checkpointing (CUDA only: TRL's default, on, only slows a CPU run)",
    "reward_weights": "rewards",
    "sync_ref_model": "ref_model_sync_steps (with beta > 0 the policy replaces the reference every N steps)",
    "ref_model_sync_steps": "ref_model_sync_steps (with beta > 0 the policy replaces the reference every N steps)",
    "ref_model_mixup_alpha": "ref_model_sync_steps (the reference is replaced, alpha 1)",
    "save_strategy": "the trainer (checkpoints every save_steps, to resume from; reward models: none)",
    "save_only_model": "the trainer (checkpoints keep optimizer, scheduler and RNG states, to resume from)",
    "resume_from_checkpoint": "the stage's resume (--resume, --restart)",
    "report_to": "tracking.report_to (one setting for every trainer of the recipe)",
    "run_name": "the recipe, stage, part and seed (tracking)",
    "project": "tracking.project",
}


@functools.cache
def trl_fields(config: str) -> dict[str, Any]:
    """The init fields of TRL's ``config`` class (``GRPOConfig``…) and their types. TRL is imported on
    first use only: it is slow to import."""
    import trl

    cls = getattr(trl, config)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation this Python cannot resolve: check names only
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def trl_default(config: str, name: str) -> Any:
    """TRL's own default for field ``name`` of ``config``."""
    import trl

    f = {f.name: f for f in dataclasses.fields(getattr(trl, config))}[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


# The ranges of TRL's numeric settings that TRL itself does not check, or checks only deep in a run (the
# notation of stages.pipeline.ranges); null is refused where TRL's default is a number. Every
# number is finite besides (no NaN, no inf: trl_value_problem), and a string field takes only the values
# TRL names for it (its enum, its choices, or the values its help lists: trl_choices).
TRL_RANGES: dict[str, str] = {
    "adam_beta1": "[0, 0.999999]",
    "adam_beta2": "[0, 0.999999]",
    "adam_epsilon": "> 0",
    "top_k": ">= 0",
    "repetition_penalty": "> 0",
    "min_p": "[0, 1]",
    "learning_rate": "> 0",
    "beta": ">= 0",
    "epsilon": "> 0",
    "epsilon_high": "> 0",
    "delta": "> 0",
    "max_grad_norm": "> 0",
    "weight_decay": ">= 0",
    "warmup_ratio": "[0, 1]",
    "warmup_steps": ">= 0",
    "num_iterations": ">= 1",
    "save_steps": "> 0",
    "save_total_limit": ">= 1",
    "logging_steps": "> 0",
    "temperature": "> 0",
    "top_p": "(0, 1]",
    "vllm_gpu_memory_utilization": "(0, 1]",
    "vllm_tensor_parallel_size": ">= 1",
    "center_rewards_coefficient": ">= 0",
}
NULLABLE_TRL = {"save_total_limit", "top_p", "center_rewards_coefficient", "delta", "min_p"}  # (epsilon_high: omit it for TRL's default)


def trl_problem(config: str, key: str) -> str | None:
    """Why a ``trl:`` mapping of a ``config`` section may not hold ``key`` (None: it may)."""
    fields = trl_fields(config)
    if key not in fields:
        close = difflib.get_close_matches(key, list(fields), n=1)
        return f"unknown {config} field" + (f" (did you mean {close[0]}?)" if close else "")
    if key in SET_BY_PROJECT:
        return f"set by the project from {SET_BY_PROJECT[key]}; set that instead"
    return None


@functools.cache
def trl_choices(config: str, name: str) -> tuple[str, ...] | None:
    """The values TRL allows for string field ``name`` of ``config``, from TRL itself: the enum of its type
    (``lr_scheduler_type``: ``SchedulerType``; ``optim``: ``OptimizerNames``), its ``choices``, or the
    quoted values its help names (``loss_type``: 'grpo', 'dr_grpo', …; ``vllm_mode``; ``scale_rewards``),
    taken as the domain only when TRL's own default is among them; None where TRL names none (any string)."""
    import enum
    import re

    import trl

    f = {f.name: f for f in dataclasses.fields(getattr(trl, config))}[name]
    for member in typing.get_args(trl_fields(config)[name]) or (trl_fields(config)[name],):
        if isinstance(member, type) and issubclass(member, enum.Enum):
            return tuple(str(m.value) for m in member)
    if f.metadata.get("choices"):
        return tuple(str(c) for c in f.metadata["choices"])
    values = tuple(dict.fromkeys(re.findall(r"[`']([A-Za-z_][\w-]*)'", f.metadata.get("help", ""))))
    return values if isinstance(f.default, str) and f.default in values else None


def trl_value_problem(key: str, value: Any, config: str | None = None) -> str | None:
    """Why ``value`` is outside the domain of TRL setting ``key`` of ``config`` (None: inside): a number
    that is not finite, outside :data:`TRL_RANGES`, or a string TRL does not name (:func:`trl_choices`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if config is not None and isinstance(value, str) and key in trl_fields(config):
        choices = trl_choices(config, key)
        if choices is not None and value not in choices:
            return f"must be one of {', '.join(choices)}; got {value!r}"
    if key in TRL_RANGES:
        if value is None:
            return None if key in NULLABLE_TRL else "must be a number, got null"
        return range_problem(TRL_RANGES[key], value)
    return None


def trl_settings(config: str, trl: dict[str, Any]) -> dict[str, Any]:
    """The settings TRL's ``config`` gets from a section: the project's defaults, then its ``trl:``."""
    return {**{k: v for k, (v, _) in PROJECT_DEFAULTS[config].items()}, **trl}


def trl_setting(config: str, trl: dict[str, Any], name: str) -> Any:
    """The value of TRL field ``name`` (one the project does not set itself) for a section with this ``trl:``:
    the recipe's, else the project's default, else TRL's."""
    settings = trl_settings(config, trl)
    return settings[name] if name in settings else trl_default(config, name)
