"""The dry run: ``r1 <stage> --recipe R --dry-run`` prints what a stage would do, loading no weights.

For each trainer of the stage: steps, the effective batch (completions per step for GRPO, sequences
for SFT, preference pairs for a reward model), the micro-batch per process, generations per step, an
upper bound on tokens per step, and the memory per accelerator of weights + gradients + optimizer state
(+ the KL reference model) under the recipe's sharding (``launch``). The batch arithmetic TRL imposes is checked, and a recipe that
violates it fails with the numbers to change (:class:`PlanError`).

The memory model is the usual mixed-precision AdamW accounting: bf16 weights (2 bytes per parameter)
and gradients (2), fp32 master weights and two moments (12); ZeRO-2 shards gradients and optimizer
state over the processes, ZeRO-3 and FSDP shard all three. Activations and vLLM's KV cache are not
estimated (vLLM colocated reserves ``trl.vllm_gpu_memory_utilization`` of each accelerator, printed).
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1024**3


class PlanError(ValueError):
    """A recipe's batch sizes cannot run as configured; the message says which numbers to change."""


def parameters(recipe, stage: str = "base") -> float | None:
    """The parameter count of the model a stage trains: the base's, or for distillation the first
    (control: the control) student's; None when the recipe cannot tell without loading it."""
    if stage in ("distill", "distill_rl") and recipe.distill.students:
        names = [s.name for s in recipe.distill.students]
        wanted = recipe.distill.control_student if stage == "distill_rl" and recipe.distill.control_student else names[0]
        student = recipe.distill.students[names.index(wanted)]
        if student.pretrained:
            return student.parameters_b * 1e9 if student.parameters_b else None
        return _tiny_parameters(student.architecture or recipe.base.architecture)
    if recipe.base.pretrained is None:
        return _tiny_parameters(recipe.base.architecture)
    return recipe.base.parameters_b * 1e9 if recipe.base.parameters_b else None


def _tiny_parameters(a) -> float:
    """A tiny Qwen2's parameters (tied embeddings)."""
    head = a.hidden_size // a.num_attention_heads
    attn = a.hidden_size * head * (2 * a.num_attention_heads + 2 * a.num_key_value_heads)
    attn += head * (a.num_attention_heads + 2 * a.num_key_value_heads)  # q, k, v biases
    mlp = 3 * a.hidden_size * a.intermediate_size
    return a.tokenizer_vocab_size * a.hidden_size + a.num_hidden_layers * (attn + mlp + 2 * a.hidden_size)


@dataclass
class Memory:
    weights: float
    grads: float
    optimizer: float
    reference: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.reference


def memory_per_device(n_params: float, sharding: str | None, processes: int, reference: bool) -> Memory:
    """Bytes per accelerator (see the module docstring for the accounting)."""
    n = processes
    w, g, o = 2 * n_params, 2 * n_params, 12 * n_params
    ref = 2 * n_params if reference else 0.0
    if sharding == "zero2":
        g, o = g / n, o / n
    elif sharding in ("zero3", "fsdp"):
        w, g, o, ref = w / n, g / n, o / n, ref / n
    return Memory(w, g, o, ref)


def _divisors_hint(total: int, by: int) -> str:
    lower = total - total % by
    upper = lower + by
    return f"{lower} or {upper}" if lower > 0 else f"{upper}"


def rl_micro_batch(name: str, cfg, processes: int) -> int:
    """Completions per process and micro-step of a GRPO section run on ``processes`` processes; raises
    PlanError when TRL could not split the step's completions that way. The dry run and the stage
    itself (``stages.rl.grpo_config``) both check here."""
    completions = cfg.prompts_per_step * cfg.num_generations
    split = cfg.gradient_accumulation_steps * processes
    if completions % split:
        raise PlanError(
            f"{name}: prompts_per_step × num_generations = {cfg.prompts_per_step} × {cfg.num_generations} = "
            f"{completions} completions per step must be divisible by gradient_accumulation_steps × processes = "
            f"{cfg.gradient_accumulation_steps} × {processes} = {split}: make the completions per step "
            f"{_divisors_hint(completions, split)} (e.g. change prompts_per_step), or change "
            f"gradient_accumulation_steps or the process count (launch.processes_per_node × launch.nodes)")
    return completions // split


def rl_lines(name: str, cfg, launch) -> list[str]:
    """The plan of one GRPO section; raises PlanError when TRL could not split its batch."""
    procs = launch.processes
    micro = rl_micro_batch(name, cfg, procs)
    completions = cfg.prompts_per_step * cfg.num_generations
    generation = f"vLLM {cfg.setting('vllm_mode')}" if cfg.setting("use_vllm") else "transformers"
    return [
        f"{name}: GRPO, {cfg.steps} steps × {cfg.prompts_per_step} prompts × {cfg.num_generations} samples "
        f"= {completions} completions per step ({cfg.steps * completions:,} in all), loss {cfg.setting('loss_type')}, "
        f"beta {cfg.setting('beta')}, num_iterations {cfg.setting('num_iterations')}",
        f"  micro-batch {micro} completions per process × {cfg.gradient_accumulation_steps} accumulation × "
        f"{procs} processes; generation {generation}",
        f"  ≤ {completions * cfg.max_completion_length:,} completion tokens per step "
        f"(max_completion_length {cfg.max_completion_length})",
    ]


def sft_lines(name: str, cfg, launch) -> list[str]:
    effective = cfg.batch_size * cfg.gradient_accumulation_steps * launch.processes
    length = f"{cfg.epochs:g} epochs" if cfg.epochs is not None else "distill.budget_steps optimizer steps"
    return [f"{name}: SFT, {length}, {effective} sequences per step ({cfg.batch_size} per process × "
            f"{cfg.gradient_accumulation_steps} accumulation × {launch.processes} processes), "
            f"≤ {effective * cfg.max_length:,} tokens per step (max_length {cfg.max_length})"
            + (f", LoRA r={cfg.lora.r}" if cfg.lora else "")]


def rm_lines(name: str, cfg, launch) -> list[str]:
    if cfg.pretrained:
        return [f"{name}: reward model loaded from {cfg.pretrained} (not trained)"]
    effective = cfg.batch_size * cfg.gradient_accumulation_steps * launch.processes
    return [f"{name}: reward model, {cfg.epochs:g} epochs, {effective} preference pairs per step "
            f"({cfg.batch_size} per process × {cfg.gradient_accumulation_steps} accumulation × {launch.processes} "
            f"processes), max_length {cfg.max_length}" + (f", LoRA r={cfg.lora.r}" if cfg.lora else "")]


def trainers(recipe, stage: str) -> list[tuple[str, str, object]]:
    """(kind, name, section) of every trainer a stage runs."""
    s4 = recipe.stage4
    return {
        "base": [],
        "stage1": [("rl", "stage1", recipe.stage1)],
        "stage2": [("sft", "stage2.sft", recipe.stage2.sft)],
        "stage3": [("rl", "stage3", recipe.stage3)],
        "stage4": [("sft", "stage4.sft", s4.sft), ("rm", "stage4.helpfulness", s4.helpfulness),
                   ("rm", "stage4.harmlessness", s4.harmlessness), ("rl", "stage4.rl", s4.rl)],
        "distill": [("sft", "distill.sft", recipe.distill.sft)],
        "distill_rl": [("rl", "distill.control", recipe.distill.control)],
    }[stage]


def plan(recipe, stage: str) -> list[str]:
    """The dry run's lines for ``stage``; raises PlanError on an impossible batch split."""
    launch = recipe.launch
    n_params = parameters(recipe, stage)
    lines = [f"recipe {recipe.name}, stage {stage}: {launch.nodes} node(s) × {launch.processes_per_node} "
             f"process(es), sharding {launch.accelerate_config or 'none (one process)'}, "
             f"device {recipe.device}",
             f"model: {recipe.base.pretrained or 'the tiny Qwen2 (built by the base stage)'}, "
             + (f"{n_params / 1e9:.3g}B parameters" if n_params else "size unknown (set base.parameters_b)")]
    for kind, name, cfg in trainers(recipe, stage):
        lines += {"rl": rl_lines, "sft": sft_lines, "rm": rm_lines}[kind](name, cfg, launch)
        if n_params and not (kind == "rm" and cfg.pretrained):
            mem = memory_per_device(n_params, launch.accelerate_config, launch.processes,
                                    reference=kind == "rl" and cfg.setting("beta") > 0)
            fits = "fits" if mem.total <= launch.gpu_memory_gb * GB else "DOES NOT FIT: shard more (zero3/fsdp) or add GPUs"
            lines.append(f"  memory per process: weights {mem.weights / GB:.1f} GB + grads {mem.grads / GB:.1f} + "
                         f"optimizer {mem.optimizer / GB:.1f} + reference {mem.reference / GB:.1f} = "
                         f"{mem.total / GB:.1f} GB of {launch.gpu_memory_gb:g} GB ({fits}; activations not counted)")
            if kind == "rl" and cfg.setting("use_vllm") and cfg.setting("vllm_mode") == "colocate":
                lines.append(f"  + vLLM colocated: {cfg.setting('vllm_gpu_memory_utilization'):.0%} of each "
                             "accelerator reserved")
    sampling = {"stage2": ("stage2.cold_start.sample", recipe.stage2.cold_start.sample),
                "stage4": ("stage4.rejection", recipe.stage4.rejection)}.get(stage)
    if sampling and sampling[1] is not None:
        name, rej = sampling
        lines.append(f"{name}: {rej.samples_per_prompt} samples per prompt (≤ {rej.max_new_tokens} tokens), "
                     f"shards of {rej.shard_size} prompts, {rej.backend}")
    return lines
