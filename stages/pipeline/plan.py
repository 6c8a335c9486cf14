"""The dry run: ``r1 <stage> --recipe R --dry-run`` prints what a stage would do, loading no weights.

For each trainer of the stage: steps, the effective batch, the micro-batch per process, generations per
step, an upper bound on tokens per step, and the memory per accelerator under the recipe's sharding
(``launch``). The batch arithmetic TRL imposes is checked (:class:`PlanError` names the numbers to change).
Memory is checked in the steady state and at three moments (the start of a trainer, the colocated engine's
KV cache against one generation's rollouts, the evaluations before and after training); each says
``fits``, ``TIGHT`` or ``DOES NOT FIT``, and a stage that would fail before training is flagged
``WILL FAIL``. :func:`launch_problems` checks an accelerate config against the recipe. The memory model,
term by term: docs/architecture.md, stages/pipeline/plan.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GB = 1024**3
CONTEXT_GB = 1.0  # per process: CUDA context, cuBLAS and NCCL workspaces
PROMPT_TOKENS = 512  # a GRPO prompt, for activations and the KV cache (the dry run reads no data)
TIGHT_SHARE = 0.9  # above this share of the accelerator a plan is TIGHT: fragmentation alone can end it
ZERO3_LIVE_PARAMETERS = 1e9  # DeepSpeed's stage3_max_live_parameters default: gathered at once
VLLM_OVERHEAD_GB = 1.0  # vLLM's own activations and graphs inside its share, besides weights and KV cache


class PlanError(ValueError):
    """A recipe's batch sizes cannot run as configured; the message says which numbers to change."""


@dataclass
class Model:
    """The model a stage trains, as far as the recipe tells without loading it (None: unknown)."""

    name: str
    parameters: float | None
    vocab: int | None
    heads: int | None = None  # query heads
    hidden: int | None = None
    layers: int | None = None
    kv_heads: int | None = None

    @property
    def shaped(self) -> bool:
        return None not in (self.hidden, self.layers, self.heads, self.kv_heads)


def model_of(recipe, stage: str) -> Model:
    """The base, or for distillation the first (``distill_rl``: the control) student."""
    if stage in ("distill", "distill_rl") and recipe.distill.students:
        names = [s.name for s in recipe.distill.students]
        wanted = recipe.distill.control_student if stage == "distill_rl" and recipe.distill.control_student else names[0]
        student = recipe.distill.students[names.index(wanted)]
        if student.pretrained:
            return Model(f"student {student.name} ({student.pretrained})",
                         student.parameters_b * 1e9 if student.parameters_b else None, student.vocab_size,
                         student.attention_heads, student.hidden_size, student.num_layers, student.key_value_heads)
        return _tiny_model(f"student {student.name} (a tiny Qwen2)", student.architecture or recipe.base.architecture)
    if recipe.base.pretrained is None:
        return _tiny_model("the tiny Qwen2 (built by the base stage)", recipe.base.architecture)
    b = recipe.base
    return Model(b.pretrained, b.parameters_b * 1e9 if b.parameters_b else None, b.vocab_size, b.attention_heads,
                 b.hidden_size, b.num_layers, b.key_value_heads)


def _tiny_model(name: str, a) -> Model:
    return Model(name, _tiny_parameters(a), _tiny_vocab(a), a.num_attention_heads, a.hidden_size, a.num_hidden_layers,
                 a.num_key_value_heads)


def parameters(recipe, stage: str = "base") -> float | None:
    """The parameter count of the model a stage trains (:func:`model_of`); None when unknown."""
    return model_of(recipe, stage).parameters


def _tiny_parameters(a) -> float:
    """A tiny Qwen2's parameters (tied embeddings)."""
    head = a.hidden_size // a.num_attention_heads
    attn = a.hidden_size * head * (2 * a.num_attention_heads + 2 * a.num_key_value_heads)
    attn += head * (a.num_attention_heads + 2 * a.num_key_value_heads)  # q, k, v biases
    mlp = 3 * a.hidden_size * a.intermediate_size
    return _tiny_vocab(a) * a.hidden_size + a.num_hidden_layers * (attn + mlp + 2 * a.hidden_size)


def _tiny_vocab(a) -> int:
    return a.embedding_rows or a.tokenizer_vocab_size


def verdict(total: float, capacity_gb: float) -> str:
    if total > capacity_gb * GB:
        return "DOES NOT FIT"
    return "TIGHT" if total > TIGHT_SHARE * capacity_gb * GB else "fits"


@dataclass
class Memory:
    """Bytes per accelerator, by what holds them, while a trainer trains."""

    weights: float
    grads: float
    optimizer: float
    reference: float
    logits: float = 0.0
    activations: float = 0.0
    buffers: float = 0.0  # ZeRO-3's or FSDP's gathered parameters
    vllm: float = 0.0
    reward_models: float = 0.0
    context: float = CONTEXT_GB * GB
    unknown: list[str] = field(default_factory=list)  # what could not be counted, and why

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.reference + self.logits + self.activations
                + self.buffers + self.vllm + self.reward_models + self.context)

    def describe(self, capacity_gb: float) -> str:
        parts = [("weights", self.weights), ("grads", self.grads), ("optimizer", self.optimizer),
                 ("reference", self.reference), ("logits", self.logits), ("activations", self.activations),
                 ("sharding buffers", self.buffers), ("vLLM", self.vllm), ("reward models", self.reward_models),
                 ("CUDA context", self.context)]
        fits = verdict(self.total, capacity_gb)
        if fits != "fits":
            fits += ": shard more (zero3/fsdp), add GPUs, or shrink the micro-batch (more gradient_accumulation_steps)"
        return (" + ".join(f"{name} {b / GB:.1f}" for name, b in parts if b or name in ("weights", "optimizer"))
                + f" = {self.total / GB:.1f} GB of {capacity_gb:g} GB ({fits}"
                + "".join(f"; {u}" for u in self.unknown) + ")")


def memory_per_device(n_params: float, sharding: str | None, processes: int, reference: bool, *,
                      logits: float = 0.0, vllm: float = 0.0, reward_models: float = 0.0) -> Memory:
    """Bytes per accelerator of the weights, gradients, optimizer state and reference model under
    ``sharding`` (see the module docstring); ``logits``, ``vllm`` and ``reward_models`` are bytes that no
    sharding divides. Activations, buffers and context are :func:`trainer_memory`'s."""
    n = processes
    w, g, o = 2 * n_params, 2 * n_params, 12 * n_params
    ref = 2 * n_params if reference else 0.0
    if sharding == "zero2":
        g, o = g / n, o / n
    elif sharding in ("zero3", "fsdp"):
        w, g, o, ref = w / n, g / n, o / n, ref / n
    return Memory(w, g, o, ref, logits, vllm=vllm, reward_models=reward_models)


def activations(model: Model, micro_batch: int, length: int, checkpointed: bool) -> float:
    """Bytes of one micro-batch's activations (bf16, fused attention): with activation checkpointing each
    layer's input (2 bytes per token and hidden unit) and one layer's working set (34), else every
    layer's working set (Korthikanti et al. 2022, "Reducing Activation Recomputation")."""
    tokens_h = micro_batch * length * model.hidden
    return model.layers * 2 * tokens_h + 34 * tokens_h if checkpointed else model.layers * 34 * tokens_h


def sharding_buffers(model: Model, sharding: str | None) -> float:
    """Bytes of the parameters gathered at once: ZeRO-3 up to DeepSpeed's live-parameter cap (bf16);
    FSDP two decoder layers (the current and the prefetched one) and their gradients before they are
    reduced."""
    if sharding == "zero3":
        return 2 * min(ZERO3_LIVE_PARAMETERS, model.parameters)
    if sharding == "fsdp":
        layer = (model.parameters - 2 * (model.vocab or 0) * (model.hidden or 0)) / max(1, model.layers or 1)
        return 2 * 2 * 2 * layer
    return 0.0


def rl_length(cfg) -> int:
    """Tokens of one GRPO sequence: a prompt of :data:`PROMPT_TOKENS` and the longest completion, within
    vLLM's context when the recipe sets one."""
    length = PROMPT_TOKENS + cfg.max_completion_length
    cap = cfg.setting("vllm_max_model_length") if cfg.setting("use_vllm") else None
    return min(length, cap) if cap else length


def trainer_memory(recipe, stage: str, kind: str, name: str, cfg, model: Model) -> Memory:
    """The memory of one trainer of ``stage`` per accelerator while it trains (:class:`Memory`)."""
    launch = recipe.launch
    unknown, logits, vllm, rms, acts = [], 0.0, 0.0, 0.0, 0.0
    micro = {"rl": lambda: rl_micro_batch(name, cfg, launch.processes), "sft": lambda: cfg.batch_size,
             "rm": lambda: 2 * cfg.batch_size}[kind]()  # a preference pair is two sequences
    length = rl_length(cfg) if kind == "rl" else cfg.max_length
    if model.vocab is None:
        unknown.append("logits unknown: set the student's vocab_size" if model.name.startswith("student")
                       else "logits unknown: set base.vocab_size")
    elif kind == "rl":
        logits = 2 * micro * cfg.max_completion_length * model.vocab
    elif kind == "sft":
        logits = 2 * micro * cfg.max_length * model.vocab
    if model.shaped:
        acts = activations(model, micro, length, cfg.gradient_checkpointing)
    else:
        unknown.append("activations unknown: set base.hidden_size, num_layers, attention_heads, key_value_heads")
    if kind == "rl" and colocated(cfg):
        vllm = cfg.setting("vllm_gpu_memory_utilization") * launch.gpu_memory_gb * GB
    if name == "stage4.rl":
        rms = _reward_models(recipe, model, unknown)
    mem = memory_per_device(model.parameters, launch.accelerate_config, launch.processes,
                            reference=kind == "rl" and cfg.setting("beta") > 0, logits=logits, vllm=vllm,
                            reward_models=rms)
    mem.activations, mem.buffers = acts, sharding_buffers(model, launch.accelerate_config)
    mem.context = 0.0 if recipe.device == "cpu" else mem.context
    mem.unknown = unknown
    return mem


def _reward_models(recipe, model: Model, unknown: list[str]) -> float:
    """Bytes of stage 4's two reward models, each whole on every process (bf16)."""
    total = 0.0
    for rm_name in ("helpfulness", "harmlessness"):
        spec = getattr(recipe.stage4, rm_name)
        if spec.pretrained:
            unknown.append(f"the {rm_name} reward model {spec.pretrained}: size unknown")
        else:  # trained from the stage-4 SFT model: the base's size, a scalar head for the vocabulary
            total += 2 * model.parameters
    return total


def colocated(cfg) -> bool:
    return bool(cfg.setting("use_vllm")) and cfg.setting("vllm_mode") == "colocate"


def moments(recipe, kind: str, name: str, cfg, model: Model) -> list[str]:
    """The plan's lines for the moments around a trainer's steady state (module docstring): its start,
    the colocated engine's KV cache, and the evaluations before and after it."""
    launch, cap = recipe.launch, recipe.launch.gpu_memory_gb
    n, ctx = model.parameters, CONTEXT_GB * GB
    lines = []
    if kind == "rl":  # every process: the whole policy (before sharding), reference, reward models, the engine
        unknown: list[str] = []
        parts = [("policy, whole", 2 * n), ("reference, whole", 2 * n if cfg.setting("beta") > 0 else 0.0),
                 ("reward models", _reward_models(recipe, model, unknown) if name == "stage4.rl" else 0.0),
                 ("vLLM", cfg.setting("vllm_gpu_memory_utilization") * cap * GB if colocated(cfg) else 0.0),
                 ("CUDA context", ctx)]
        total = sum(b for _, b in parts)
        lines.append("  at the trainer's start: " + " + ".join(f"{k} {b / GB:.1f}" for k, b in parts if b)
                     + f" = {total / GB:.1f} GB ({verdict(total, cap)})")
    if kind == "rl" and colocated(cfg):
        lines.append("  " + kv_cache_line(cfg, model, launch))
    if recipe.eval.backend == "vllm" and kind in ("rl", "sft"):
        engine = launch.vllm_memory_fraction * cap * GB
        total = 2 * n + engine + ctx
        lines.append(f"  evaluations (main process): policy, whole {2 * n / GB:.1f} + vLLM engine {engine / GB:.1f} "
                     f"(launch.vllm_memory_fraction) + CUDA context {ctx / GB:.1f} = {total / GB:.1f} GB "
                     f"({verdict(total, cap)})")
    return lines


def kv_cache_line(cfg, model: Model, launch) -> str:
    """The colocated engine's KV cache (its share of the accelerator less its weights and
    :data:`VLLM_OVERHEAD_GB`) against the tokens of one generation's rollouts on one engine: TRL has each
    engine generate ``per_device_train_batch_size × steps_per_generation`` completions (× the
    tensor-parallel group's processes)."""
    if not model.shaped:
        return "vLLM KV cache: unknown (set base.hidden_size, num_layers, attention_heads, key_value_heads)"
    tp = cfg.setting("vllm_tensor_parallel_size")
    share = cfg.setting("vllm_gpu_memory_utilization") * launch.gpu_memory_gb * GB
    kv = share - 2 * model.parameters / tp - VLLM_OVERHEAD_GB * GB
    per_token = 2 * model.layers * model.kv_heads * (model.hidden // model.heads) * 2 / tp  # K and V, bf16
    steps_per_generation = cfg.setting("steps_per_generation") or cfg.gradient_accumulation_steps
    rollouts = rl_micro_batch("", cfg, launch.processes) * steps_per_generation * tp
    need = rollouts * rl_length(cfg)
    head = (f"vLLM KV cache: {share / GB:.1f} GB share − {2 * model.parameters / tp / GB:.1f} weights − "
            f"{VLLM_OVERHEAD_GB:g} overhead = {max(kv, 0) / GB:.1f} GB, {max(kv, 0) / per_token:,.0f} tokens; one "
            f"generation's {rollouts} rollouts × {rl_length(cfg):,} tokens = {need:,} tokens")
    if kv <= 0:
        return head + " (DOES NOT FIT: the weights fill the engine's share; raise trl.vllm_gpu_memory_utilization)"
    if kv / per_token < need:
        return head + (" (TIGHT: vLLM preempts and recomputes rollouts, slower; raise trl.vllm_gpu_memory_utilization "
                       "or lower steps_per_generation)")
    return head + " (fits)"


def stage_failures(recipe, stage: str) -> list[str]:
    """What would make ``stage`` fail, or run what nobody configured, before it trains."""
    problems = []
    if stage in ("distill", "distill_rl") and not recipe.distill.students:
        problems.append("distill.students is empty: distillation has no student to train (add one: name, "
                        "pretrained, parameters_b)")
    if stage == "distill_rl" and recipe.base.pretrained is not None:
        from stages.pipeline.recipe import RLConfig

        if recipe.distill.control == RLConfig():
            problems.append("distill.control is not in the recipe: the RL control would run RLConfig's defaults "
                            "(tiny-model settings); give it a section like stage1's")
    return problems


def _divisors_hint(total: int, by: int) -> str:
    lower = total - total % by
    upper = lower + by
    return f"{lower} or {upper}" if lower > 0 else f"{upper}"


def rl_micro_batch(name: str, cfg, processes: int) -> int:
    """Completions per process and micro-step of a GRPO section run on ``processes`` processes; raises
    PlanError when TRL could not split the step's completions that way. The dry run and the stage
    itself (``stages.training.grpo.grpo_config``) both check here."""
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
    model = model_of(recipe, stage)
    lines = [f"recipe {recipe.name}, stage {stage}: {launch.nodes} node(s) × {launch.processes_per_node} "
             f"process(es), sharding {launch.accelerate_config or 'none (one process)'}, "
             f"device {recipe.device}",
             f"model: {model.name}, "
             + (f"{model.parameters / 1e9:.3g}B parameters" if model.parameters else "size unknown (set parameters_b)")
             + (f", vocabulary {model.vocab:,}" if model.vocab else "")]
    lines += [f"WILL FAIL: {p}" for p in stage_failures(recipe, stage)]
    for kind, name, cfg in trainers(recipe, stage):
        lines += {"rl": rl_lines, "sft": sft_lines, "rm": rm_lines}[kind](name, cfg, launch)
        if model.parameters and not (kind == "rm" and cfg.pretrained):
            mem = trainer_memory(recipe, stage, kind, name, cfg, model)
            lines.append(f"  memory per process: {mem.describe(launch.gpu_memory_gb)}")
            if recipe.device != "cpu":
                lines += moments(recipe, kind, name, cfg, model)
    sampling = {"stage2": ("stage2.cold_start.sample", recipe.stage2.cold_start.sample),
                "stage4": ("stage4.rejection", recipe.stage4.rejection)}.get(stage)
    if sampling and sampling[1] is not None:
        name, rej = sampling
        lines.append(f"{name}: {rej.samples_per_prompt} samples per prompt (≤ {rej.max_new_tokens} tokens), "
                     f"shards of {rej.shard_size} prompts, {rej.backend}")
    return lines


# ---------------------------------------------------------------------------------------------
# The launch's own configuration, checked against the recipe (scripts/launch, before it starts)
# ---------------------------------------------------------------------------------------------


def launch_problems(recipe, stage: str, config: dict | None, config_name: str = "the accelerate config") -> list[str]:
    """What in an accelerate config (``recipes/accelerate/<name>.yaml``, parsed) or in the recipe's vLLM
    settings would make ``stage`` fail or train other than the recipe says; [] when nothing."""
    problems, config = [], config or {}
    ds = config.get("deepspeed_config") or {}
    launch, model = recipe.launch, model_of(recipe, stage)
    for kind, name, cfg in trainers(recipe, stage):
        clip = ds.get("gradient_clipping")
        if clip is not None and str(clip) != "auto" and float(clip) != float(cfg.setting("max_grad_norm")):
            problems.append(
                f"{config_name}: deepspeed_config.gradient_clipping {clip} but {name}.trl.max_grad_norm is "
                f"{cfg.setting('max_grad_norm')}: transformers refuses the mismatch (or DeepSpeed clips at its own "
                "value); remove gradient_clipping from the accelerate config (DeepSpeed then takes max_grad_norm)")
        if kind == "rl" and cfg.setting("use_vllm"):
            tp = cfg.setting("vllm_tensor_parallel_size")
            problems += _tensor_parallel_problems(f"{name}.trl.vllm_tensor_parallel_size", tp, model,
                                                  launch.processes if cfg.setting("vllm_mode") == "colocate" else None)
    problems += _tensor_parallel_problems("launch.vllm_tensor_parallel", launch.vllm_tensor_parallel, model, None)
    if config.get("distributed_type") == "FSDP" and (config.get("fsdp_config") or {}).get("fsdp_version") != 2:
        problems.append(f"{config_name}: FSDP version 1 (flat parameters): the project gathers and saves FSDP2's "
                        "DTensors and ZeRO-3's partitions only; set fsdp_config.fsdp_version: 2")
    if launch.nodes > 1 and config.get("distributed_type") == "DEEPSPEED" and \
            ds.get("deepspeed_multinode_launcher") != "standard":
        problems.append(f"{config_name}: {launch.nodes} nodes under DeepSpeed need deepspeed_config."
                        "deepspeed_multinode_launcher: standard (accelerate launches each node's processes itself; "
                        "the default, pdsh, needs passwordless ssh between nodes)")
    return problems


def _tensor_parallel_problems(what: str, tp: int, model: Model, processes: int | None) -> list[str]:
    problems = []
    if model.heads and model.heads % tp:
        problems.append(f"{what} {tp} does not divide the model's {model.heads} attention heads "
                        f"(vLLM refuses): use one of {[d for d in range(1, model.heads + 1) if model.heads % d == 0]}")
    if processes is not None and processes % tp:
        problems.append(f"{what} {tp} does not divide the {processes} training processes (TRL's colocated "
                        "vLLM groups them by it)")
    return problems


def vllm_server_layout(recipe, stage: str, gpus: int) -> tuple[int, int]:
    """(tensor parallel, data parallel) of ``trl vllm-serve`` on a node of ``gpus`` GPUs (``scripts/slurm.sbatch``):
    ``launch.vllm_server_tensor_parallel`` GPUs per copy of the model, and ``launch.vllm_server_data_parallel``
    copies (null: as many as the node holds, so that none of its GPUs sits idle; vLLM's server balances
    the requests over them). PlanError when the tensor-parallel size does not divide the model's heads,
    or the copies need more GPUs than the node has."""
    tp = recipe.launch.vllm_server_tensor_parallel
    dp = recipe.launch.vllm_server_data_parallel or max(1, gpus // tp)
    problems = _tensor_parallel_problems("launch.vllm_server_tensor_parallel", tp, model_of(recipe, stage), None)
    if tp * dp > gpus:
        problems.append(f"launch.vllm_server_tensor_parallel {tp} × launch.vllm_server_data_parallel {dp} is more "
                        f"than the server node's {gpus} GPUs")
    if problems:
        raise PlanError("; ".join(problems))
    return tp, dp
