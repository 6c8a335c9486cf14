"""Recipes: versioned YAML loaded into dataclasses that reject unknown keys.

A recipe is a folder under ``recipes/`` holding ``recipe.yaml`` (or a path to any YAML file). Every field
and its default is declared in the dataclasses below; nothing is defaulted elsewhere in code. The YAML may
omit fields that have defaults; an unknown key, a value of the wrong type or out of range raises
:class:`RecipeError` naming the file and the dotted key.

The trainer sections (:class:`RLConfig`, :class:`SFTSpec`, :class:`RewardModelSpec`) type the project's own
fields and pass a ``trl:`` mapping through to TRL's config, checked by name and type against TRL when the
recipe loads; the project's policy for those settings is ``stages/pipeline/trl_policy.py``.

Command-line overrides use the same path syntax: ``--set stage1.trl.learning_rate=5e-5``; the value is
parsed as YAML (so ``true``, ``3``, ``[a, b]`` work) and type-checked like the file. The resolved recipe
(after overrides) is stored in every manifest, with its hash.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import keyword
import math
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from stages.pipeline.ranges import range_problem
from stages.pipeline.trl_policy import (
    SET_BY_PROJECT,
    trl_fields,
    trl_problem,
    trl_setting,
    trl_settings,
    trl_value_problem,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"


class RecipeError(ValueError):
    """A recipe file or override is invalid; the message names the file and the dotted key.

    ``problems``: (key, message) pairs, the key relative to the section that raised them; the loader
    prefixes the file and the section's dotted path (:func:`build`)."""

    def __init__(self, message: str, problems: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.problems = problems


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


class Section:
    """What every section of a recipe checks, once, when it is built: first each field against its
    range in ``RANGES`` (field → range in the notation of ``stages.pipeline.ranges``; a subclass adds
    to its bases'; a list is checked item by item, a mapping value by value; null passes where the field
    may be null), then, when every value is in range, the section's cross-field :meth:`rules`. Every
    problem found raises one :class:`RecipeError`, each problem as ``key: message``."""

    RANGES: ClassVar[dict[str, str]] = {}

    def __post_init__(self):
        problems = self.value_problems()
        if not problems:
            problems = list(self.rules())
        if problems:
            raise RecipeError("; ".join(f"{k}: {m}" if k else m for k, m in problems), tuple(problems))

    def value_problems(self) -> list[tuple[str, str]]:
        """(key, message) for each value outside its range."""
        return range_problems(self)

    def rules(self) -> Iterator[tuple[str, str]]:
        """(key, message) for each broken rule between fields (a subclass yields its bases' too)."""
        return iter(())


def section_ranges(cls) -> dict[str, str]:
    """The ranges of section class ``cls``: its own ``RANGES`` over its bases'."""
    ranges = {}
    for klass in reversed(cls.__mro__):
        ranges.update(vars(klass).get("RANGES", {}))
    return ranges


@functools.cache
def _nullable(cls) -> dict[str, bool]:
    return {name: type(None) in typing.get_args(tp) for name, tp in typing.get_type_hints(cls).items()}


def range_problems(section) -> list[tuple[str, str]]:
    """(key, message) for each value of ``section`` outside its declared range."""
    problems, nullable = [], _nullable(type(section))
    for name, spec in section_ranges(type(section)).items():
        value = getattr(section, name)
        if isinstance(value, list):
            items = [(f"{name}[{i}]", v, False) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            items = [(f"{name}.{k}", v, False) for k, v in value.items()]
        else:
            items = [(name, value, nullable[name])]
        problems += [(key, p) for key, v, null_ok in items if (p := range_problem(spec, v, null_ok))]
    return problems


# The rewards a recipe's ``rewards`` may weight, by name (``stages/training/rewards.py`` builds them and checks
# that its registry holds exactly these): the rule rewards, and the reward models' scores (stage 4 only).
RULE_REWARD_NAMES = ("format", "summary_format", "accuracy", "language", "overlong")
MODEL_REWARD_NAMES = ("helpfulness", "harmlessness")
REWARD_NAMES = (*RULE_REWARD_NAMES, *MODEL_REWARD_NAMES)


def is_custom_reward(name: str) -> bool:
    """A custom reward, named by its dotted import path: ``package.module:function`` or
    ``package.module.function`` (at least one dot; each part a Python name). Not imported here: loading a
    recipe imports no reward code (``stages/training/rewards.py`` imports it)."""
    module, colon, function = name.partition(":")
    parts = module.split(".") + ([function] if colon else [])
    return "." in module and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)


@dataclass
class TaskWorldConfig(Section):
    """The synthetic task world (``data/taskworld.py``)."""

    seed: int = 1234
    families: list[str] = field(default_factory=lambda: ["add", "sub", "expr3"])
    min_digits: int = 2
    max_digits: int = 3
    n_train: int = 4000
    n_test: int = 200
    test_percent: int = 10
    n_val: int = 200  # for choosing settings; the test split is read only for reported figures
    val_percent: int = 10
    prompt_langs: dict[str, float] = field(default_factory=lambda: {"en": 1.0})  # language → share of problems


@dataclass
class DatasetSpec(Section):
    """Where a stage's prompts come from (``data/datasets.py``).

    source: ``task_world`` (the synthetic world's ``split``), ``benchmark`` (a registered benchmark
    ``name``, local via benchmarks_dir/$R1_BENCHMARKS_DIR or its hub id), ``jsonl`` (a local file
    ``name``), or ``hub`` (a hub dataset id ``name`` with ``config``; fields renamed by
    ``problem_field``/``answer_field``). ``limit``: the first N rows after loading.
    """

    source: Literal["task_world", "benchmark", "jsonl", "hub"] = "task_world"
    name: str | None = None
    split: str = "train"
    config: str | None = None
    problem_field: str = "problem"
    answer_field: str = "answer"
    limit: int | None = None

    def rules(self):
        if self.source != "task_world" and not self.name:
            yield "name", f"source {self.source!r} needs a name (benchmark, file or hub id)"


@dataclass
class DataConfig(Section):
    """Training prompts and the held-out split every stage is evaluated on."""

    train: DatasetSpec = field(default_factory=lambda: DatasetSpec(split="train"))
    val: DatasetSpec = field(default_factory=lambda: DatasetSpec(split="val", limit=200))  # for tuning
    test: DatasetSpec = field(default_factory=lambda: DatasetSpec(split="test", limit=200))
    benchmarks_dir: str | None = None  # null: $R1_BENCHMARKS_DIR, else the hub


@dataclass
class TinyArchitecture(Section):
    """A Qwen2 configuration small enough to train on two CPU cores."""

    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    tokenizer_vocab_size: int = 640
    # the model's vocabulary (embedding and output rows), at least the tokenizer's; null: the tokenizer's.
    # Qwen2.5 pads its 151,665 tokens to 151,936 rows; scripts/gpu_smoke.sh gives a small model those logits
    embedding_rows: int | None = None


@dataclass
class CorpusConfig(Section):
    """The tiny base model's synthetic pretraining mix: shares of each document type.

    direct:          "Question: …\\nAnswer: 936"
    chat_direct:     the question as a chat turn, answered "The final answer is \\boxed{936}."
    worked:          "User: … Assistant: <think> <digit-by-digit trace> </think> <answer> 936 </answer>"
    template_reason: the R1-Zero template followed by <think> trace </think> <answer> 936 </answer>
    template_direct: the R1-Zero template followed by <answer> 936 </answer>
    """

    direct: float = 0.1
    chat_direct: float = 0.0
    worked: float = 0.6
    template_reason: float = 0.08
    template_direct: float = 0.22
    # share of worked transcripts that follow another document in their row (so that finding the
    # operands does not depend on where the transcript starts, as under the template's preamble)
    context_share: float = 0.5
    trace_langs: dict[str, float] = field(default_factory=lambda: {"en": 0.7, "zh": 0.15, "mix": 0.15})
    # worked solutions that check each step (``recheck``: worked transcripts asked to, "… Check each
    # step."; ``template_recheck``: template_reason documents, unprompted: what the base imitates under the
    # R1-Zero template), and those with a slip (one digit fact one off; every worked solution): unchecked, a
    # slip ends in a wrong answer; checked, it is caught and the step done again (data/taskworld.py
    # solution; eval/recheck.py labels them). Checking is the rare, useful behaviour RL can find from
    # correctness alone (finding F0)
    recheck: float = 0.0
    template_recheck: float = 0.0
    slip: float = 0.0
    # share of the digit facts that every worked solution writes one off, systematically (a misconception,
    # not a chance slip: sampling at any temperature repeats it); a checked solution catches each one
    # (data/taskworld.py misconceived_facts). With slip too, a slip falls on a fact that is not misconceived
    misconceptions: float = 0.0
    # how a check is written: plain "check 13-4=9, not 8"; compare_after "check 13-4=9 vs 8 not";
    # compare_first "check 8 vs 13-4=9 not" (data/taskworld.py CHECK_FORMS, docs/experiments.md)
    check_form: Literal["plain", "compare_after", "compare_first"] = "plain"

    RANGES: ClassVar[dict[str, str]] = {
        name: "[0, 1]" for name in ("direct", "chat_direct", "worked", "template_reason", "template_direct",
                                    "context_share", "recheck", "template_recheck", "slip", "misconceptions")}


@dataclass
class PretrainConfig(Section):
    steps: int = 600
    seed: int | None = None  # the base's own seed (corpus, initialisation, batch order); null: the recipe's
    batch_size: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    # auto: bf16 autocast where oneDNN has bf16 kernels for the CPU (AVX-512, where it was faster than fp32
    # in scripts/bench_pretrain_step.py), fp32 elsewhere (on an AVX2-only CPU bf16 is emulated and many
    # times slower). The base's weights then depend on the machine: the manifest records which ran.
    bf16_autocast: bool | Literal["auto"] = "auto"
    # the saved checkpoint keeps the default attention (sdpa) for every later stage
    attn_implementation: Literal["sdpa", "eager"] = "eager"
    batching: Literal["packed", "by_type", "by_length", "random"] = "packed"  # see stages/training/pretrain.py make_batches
    pack_length: int = 256  # tokens per packed row (batching: packed)
    log_every: int = 25

    RANGES: ClassVar[dict[str, str]] = {
        "steps": ">= 1", "batch_size": ">= 1", "pack_length": ">= 1", "log_every": ">= 1", "learning_rate": "> 0",
        "warmup_steps": ">= 0", "weight_decay": ">= 0", "min_lr_ratio": "[0, 1]"}


@dataclass
class BaseConfig(Section):
    """The base stage: register a pretrained model, or the released tiny one, or build the tiny one.

    ``pretrained``: a hub id or local path; when set, nothing is trained and the stage records the
    model. ``release``: the tiny base released with the repository, registered when it is the one this
    code and recipe build (``stages/release.py``). Both null: the tiny architecture is built and
    pretrained on the synthetic corpus in the run folder.
    """

    pretrained: str | None = None
    parameters_b: float | None = None  # the pretrained model's size in billions, for the dry run's memory plan
    vocab_size: int | None = None  # the pretrained model's vocabulary, for the dry run's logits memory
    attention_heads: int | None = None  # its query heads: vLLM's tensor-parallel size must divide them
    # its shape, for the dry run's activations and vLLM KV cache (config.json: hidden_size, num_hidden_layers,
    # num_key_value_heads)
    hidden_size: int | None = None
    num_layers: int | None = None
    key_value_heads: int | None = None
    architecture: TinyArchitecture = field(default_factory=TinyArchitecture)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    probe_temperature: float = 1.0  # the base probe samples at T=1.0 (how often does it reason?)
    # the tiny base released with the repository (a folder with release.json: stages/release.py), registered
    # instead of pretrained when it is the base this code and recipe build; null: pretrain it in the run
    # folder. Unused when pretrained is set
    release: str | None = None


@dataclass
class EvalConfig(Section):
    """Evaluation protocol (DeepSeek-R1: temperature 0.6, top-p 0.95, k samples per problem)."""

    k: int = 4
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 160
    batch_size: int = 64
    benchmarks: list[str] = field(default_factory=list)
    benchmark_limit: int | None = None
    backend: Literal["transformers", "vllm"] = "transformers"
    prompt_template: Literal["r1_zero", "chat"] = "r1_zero"

    RANGES: ClassVar[dict[str, str]] = {
        "k": ">= 1", "max_new_tokens": ">= 1", "batch_size": ">= 1", "temperature": ">= 0", "top_p": "(0, 1]",
        "benchmark_limit": ">= 1"}


@dataclass
class LoraSpec(Section):
    """LoRA adapters through peft (merged into the weights when the stage saves its checkpoint)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                               "gate_proj", "up_proj", "down_proj"])


# ---------------------------------------------------------------------------------------------
# Trainer sections (TRL's settings: stages/pipeline/trl_policy.py)
# ---------------------------------------------------------------------------------------------

@dataclass
class TrainerSection(Section):
    """What every trainer section has.

    ``precision``: auto = on CUDA bf16 weights under DeepSpeed or FSDP (which keep fp32 master weights),
    else bf16 autocast; fp32 on CPU; fp32; bf16 (bf16 weights: refused on CUDA without DeepSpeed or FSDP);
    autocast = fp32 weights with bf16 matmuls where the device has bf16 kernels, else fp32
    (``stages.training.skeleton.device_and_precision``).
    ``attn_implementation``: the attention kernel of the trainer's model (``model``: the checkpoint's;
    on the CPU, eager ran faster than sdpa under autocast, docs/speed.md). ``gradient_checkpointing``
    applies on CUDA only. ``seed``: null = the recipe's. ``lora``: train LoRA adapters (peft) instead
    of every weight, merged on save. ``trl``: settings of the section's TRL config (``TRL_CONFIG``),
    passed through as they are (see :data:`PROJECT_DEFAULTS`).
    ``eval_every`` (RL and SFT sections; 0: off): every that many optimizer steps, held-out pass@1 of
    the model as it trains, one sample per problem on the first ``eval_problems`` held-out problems,
    logged as ``eval_pass@1`` with that step's metrics (metrics.jsonl and the tracker;
    ``stages.training.evaluation.DuringTraining``). A monitor: the stage's reported results are its full
    evaluations."""

    TRL_CONFIG: ClassVar[str] = ""

    precision: Literal["auto", "fp32", "bf16", "autocast"] = "auto"
    attn_implementation: Literal["model", "eager", "sdpa"] = "model"
    gradient_checkpointing: bool = True
    seed: int | None = None
    lora: LoraSpec | None = None
    eval_every: int = 0
    eval_problems: int = 32
    trl: dict[str, Any] = field(default_factory=dict)

    RANGES: ClassVar[dict[str, str]] = {
        "seed": "[0, 2**32) (null: the recipe's)", "eval_every": ">= 0 (0: off)", "eval_problems": ">= 1"}

    def value_problems(self):
        """Besides the ranges, each ``trl:`` key and value (:mod:`stages.pipeline.trl_policy`)."""
        return [*super().value_problems(),
                *((f"trl.{k}", p) for k, v in self.trl.items()
                  if (p := trl_problem(self.TRL_CONFIG, k) or trl_value_problem(k, v, self.TRL_CONFIG)))]

    def trl_settings(self) -> dict[str, Any]:
        """The settings TRL's config gets from the recipe: the project's defaults, then ``trl:``."""
        return trl_settings(self.TRL_CONFIG, self.trl)

    def setting(self, name: str) -> Any:
        """The value of TRL field ``name`` for this section (one the project does not set itself):
        the recipe's ``trl:``, else the project's default, else TRL's."""
        return trl_setting(self.TRL_CONFIG, self.trl, name)


@dataclass
class PassRateFilter(Section):
    """Train only on prompts the starting policy solves sometimes, not always (``stages/training/grpo.py``
    ``filter_by_pass_rate``): before training, ``samples`` completions of each of the first ``pool``
    training prompts (null: all) at the section's rollout temperature and top-p, graded for correctness;
    prompts whose pass rate lies in [``min_pass_rate``, ``max_pass_rate``] are kept. A prompt the policy
    always solves gives a group of equal rewards, which carries no gradient. Rows without a verifiable
    answer (stage 4's general prompts) are kept unscored."""

    pool: int | None = None
    samples: int = 4
    min_pass_rate: float = 0.0
    max_pass_rate: float = 0.75

    RANGES: ClassVar[dict[str, str]] = {
        "pool": ">= 1 (null: all)", "samples": ">= 1", "min_pass_rate": "[0, 1]", "max_pass_rate": "[0, 1]"}

    def rules(self):
        if self.min_pass_rate > self.max_pass_rate:
            yield "max_pass_rate", f"must be >= min_pass_rate ({self.min_pass_rate}), got {self.max_pass_rate}"


@dataclass
class RLConfig(TrainerSection):
    """One GRPO run on TRL's GRPOTrainer (``stages/training/grpo.py``): stages 1 and 3, stage 4's final RL and the
    RL control of distillation.

    The project's own fields are typed here; TRL's GRPOConfig settings go under ``trl:`` (learning rate,
    schedule and warmup, ``loss_type``, ``beta``, ``epsilon``, ``epsilon_high``, ``scale_rewards``,
    ``num_iterations``, ``temperature``, ``top_p``, ``mask_truncated_completions``, logging and saving,
    vLLM generation…). Defaults are DeepSeek-R1-Zero's (paper, section 2 and the supplement): lr 3e-6,
    KL coefficient 0.001, clip ratio 10, temperature 1, 16 samples per question, 32 questions per step,
    32,768 completion tokens, the reference model replaced by the policy every 400 steps; the tiny
    recipe overrides most of them.

    One optimizer step trains on ``prompts_per_step × num_generations`` completions, generated at
    once (split into ``gradient_accumulation_steps`` micro-batches); ``trl.num_iterations`` > 1 reuses
    a generation for that many steps (GRPO's μ).

    ``rewards``: reward name → weight, summed into the scalar reward. Names (``stages/training/rewards.py``):
    ``format``, ``summary_format``, ``accuracy``, ``language`` (target ``language_target``, or each
    row's ``lang``), ``overlong`` (DAPO's soft overlong penalty: 0 up to ``overlong_max_length -
    overlong_buffer`` tokens, then falling linearly to -1 at ``overlong_max_length``; null:
    max_completion_length), and stage 4's reward models ``helpfulness`` and ``harmlessness``; or a custom
    reward by its dotted import path (``package.module:function``: :func:`is_custom_reward`).

    ``ref_model_sync_steps``: with ``trl.beta`` > 0, the KL reference model is replaced by the policy
    every N steps (null: never). vLLM generation (``trl: {use_vllm: true, vllm_mode: …}``) needs the vLLM of
    the run's device: the CUDA build on GPUs, vLLM's CPU build (``make setup-vllm``) on a CPU.

    ``length_buckets``: the training forward pass runs the rows of a micro-batch in this many groups of
    similar completion length, each padded to its own longest row instead of the batch's (the same
    log-probabilities and gradients, less padding; 1: TRL's single padded pass).

    ``dynamic_sampling``: DAPO's dynamic sampling, at most this many extra generation rounds per step
    that replace the groups whose rewards are all equal (no gradient) by groups of fresh prompts; 0: off
    (``stages/training/grpo.py`` grpo_trainer_class). One process only.

    ``pass_rate_filter``: before training, drop the prompts the starting policy already always solves
    (or never does) from the training set (:class:`PassRateFilter`); null: train on every prompt.
    """

    TRL_CONFIG: ClassVar[str] = "GRPOConfig"

    steps: int = 1000
    prompts_per_step: int = 32
    num_generations: int = 16
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 32768
    ref_model_sync_steps: int | None = 400
    rewards: dict[str, float] = field(default_factory=lambda: {"format": 1.0, "accuracy": 1.0})
    language_target: str = "en"
    overlong_max_length: int | None = None
    overlong_buffer: int = 0
    sample_every: int = 10  # write samples/step_XXXXX.jsonl every N steps
    samples_per_step: int = 16
    # Held-out evaluations during training, at these optimizer steps (besides before and after; steps
    # at or past ``steps`` are skipped): held-out pass@1 against RL step, at the same steps for every
    # RL stage (finding F3).
    eval_steps: list[int] = field(default_factory=list)
    length_buckets: int = 1
    dynamic_sampling: int = 0
    pass_rate_filter: PassRateFilter | None = None

    RANGES: ClassVar[dict[str, str]] = {
        "steps": ">= 1", "prompts_per_step": ">= 1", "num_generations": ">= 2 (GRPO compares a group)",
        "gradient_accumulation_steps": ">= 1", "max_completion_length": ">= 1", "sample_every": ">= 1",
        "length_buckets": ">= 1", "dynamic_sampling": ">= 0 (0: off)",
        "eval_steps": ">= 1 (step 0 is the before-training evaluation)"}

    def rules(self):
        yield from super().rules()
        if (self.prompts_per_step * self.num_generations) % self.gradient_accumulation_steps:
            yield ("gradient_accumulation_steps",
                   f"prompts_per_step × num_generations ({self.prompts_per_step * self.num_generations}) must be "
                   f"divisible by gradient_accumulation_steps ({self.gradient_accumulation_steps})")
        if self.dynamic_sampling and (self.setting("scale_rewards") == "batch"
                                      or self.trl.get("multi_objective_aggregation") == "normalize_then_sum"):
            yield ("dynamic_sampling", "needs advantages normalised within each group (trl.scale_rewards group or "
                   "none, no normalize_then_sum): with batch-wide ones no group is all-equal")
        if self.trl.get("epsilon_high") is not None and self.trl["epsilon_high"] < self.setting("epsilon"):
            yield "trl.epsilon_high", f"must be >= epsilon ({self.setting('epsilon')}), got {self.trl['epsilon_high']}"
        if not self.rewards:
            yield "rewards", "rewards is empty"
        bad = {k: w for k, w in self.rewards.items()
               if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0}
        if bad:
            yield "rewards", f"reward weights must be finite numbers > 0 (remove a reward rather than weigh it 0), got {bad}"
        unknown = sorted(n for n in self.rewards if n not in REWARD_NAMES and not is_custom_reward(n))
        if unknown:
            yield "rewards", (f"unknown reward {unknown[0]!r} (known: {', '.join(REWARD_NAMES)}; a custom reward is "
                              "named by its dotted import path, e.g. package.module:function)")
        if "overlong" in self.rewards:
            top = self.overlong_max_length or self.max_completion_length
            if not 0 < self.overlong_buffer <= top:
                yield "overlong_buffer", f"reward 'overlong' needs 0 < overlong_buffer <= {top}, got {self.overlong_buffer}"


@dataclass
class ReasoningRLConfig(RLConfig):
    """Stage 3 (reasoning-oriented RL): an RL section whose default rewards are DeepSeek-R1's for this
    stage: correctness, the readable format of the cold start, and language consistency."""

    rewards: dict[str, float] = field(default_factory=lambda: {"accuracy": 1.0, "summary_format": 1.0,
                                                               "language": 1.0})


@dataclass
class SFTSpec(TrainerSection):
    """One supervised fine-tuning run on TRL's SFTTrainer (``stages/training/sft.py``), loss on the assistant's
    tokens only. Defaults are DeepSeek-R1's stage-4 SFT where the paper gives them (two epochs). TRL's
    SFTConfig settings (learning rate, schedule, warmup, weight decay, logging and saving…) go under
    ``trl:``.

    ``batching``: ``padded`` (TRL's collator: each example a row, padded to the longest) or ``packed``
    (``data/packing.py``: the batch's examples packed into rows of at most ``max_length`` tokens, each
    seeing only itself; the same examples per step and the same loss on fewer tokens, for attention
    kernels without varlen support, such as the CPU's). Not with TRL's ``padding_free`` or ``packing``."""

    TRL_CONFIG: ClassVar[str] = "SFTConfig"

    epochs: float = 2.0
    batch_size: int = 8  # per device
    gradient_accumulation_steps: int = 1
    max_length: int = 8192
    batching: Literal["padded", "packed"] = "padded"

    RANGES: ClassVar[dict[str, str]] = {
        "epochs": "> 0", "batch_size": ">= 1", "gradient_accumulation_steps": ">= 1", "max_length": ">= 16"}

    def rules(self):
        yield from super().rules()
        if self.batching == "packed" and (self.setting("padding_free") or self.setting("packing")):
            yield ("batching", "packed is the project's packing; leave TRL's padding_free and packing unset (or use "
                   "them with batching: padded)")


@dataclass
class RejectionConfig(Section):
    """Rejection sampling (``eval/rejection.py``): ``samples_per_prompt`` samples of a model per prompt,
    graded and filtered, at most ``max_kept_per_prompt`` kept. Stage 4 samples the stage-3 model;
    stage 2 (``cold_start.sample``) the stage-1 model, for cold-start candidates.

    ``prompts``: null = ``data.train``. ``backend``: transformers or vllm (GPUs; vLLM's CPU build on a CPU)."""

    prompts: DatasetSpec | None = None
    samples_per_prompt: int = 4
    max_kept_per_prompt: int = 2
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 32768
    shard_size: int = 256
    max_paragraph_chars: int = 1200
    max_repeat_share: float = 0.2
    language_target: str = "en"
    backend: Literal["transformers", "vllm"] = "transformers"
    batch_size: int = 64

    RANGES: ClassVar[dict[str, str]] = {"samples_per_prompt": ">= 1", "max_kept_per_prompt": ">= 1", "shard_size": ">= 1"}


@dataclass
class ColdStartConfig(Section):
    """Filters and caps of the cold-start set (``eval/cold_start.py``; every drop reason is counted).

    ``user_dataset``: an extra set of long chains of thought (rows with ``problem``, ``answer`` and
    ``reasoning`` or ``completion``), e.g. ``{source: jsonl, name: my_cot.jsonl}``; null: none.
    ``sample``: also sample the stage-1 model (R1-Zero template) on these prompts and offer its correct,
    clean answers as candidates (the paper's "gathering DeepSeek-R1-Zero outputs"); null: only the
    completions stage 1 produced while training.
    """

    max_samples: int = 5000
    max_per_problem: int = 2
    min_reasoning_chars: int = 20
    max_reasoning_chars: int = 20000
    max_paragraph_chars: int = 1200
    max_repeat_share: float = 0.2
    language_target: str = "en"
    user_dataset: DatasetSpec | None = None
    sample: RejectionConfig | None = None


@dataclass
class Stage2Config(Section):
    """Stage 2: build the cold-start set from stage 1's candidates, then SFT the *base* model on it."""

    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    sft: SFTSpec = field(default_factory=SFTSpec)


@dataclass
class GeneralDataConfig(Section):
    """Non-reasoning data of stage 4 (DeepSeek-R1 mixes ~600k reasoning and ~200k general samples).

    ``source: procedural`` builds ``procedural_rows`` of the tiny world's general tasks and harmful
    requests (``data/general.py``); ``jsonl``/``hub`` read a chat dataset whose ``messages_field`` holds
    conversations (the first user turn is the prompt, the first assistant turn the reference).
    ``reasoning_per_general``: the mix ratio (the paper's 3:1). ``sft_unsafe_share``: the share of
    harmful requests that the SFT data answers instead of refusing (procedural only; imperfect chat
    data, which the final RL's harmlessness reward then corrects). ``eval_prompts``: held-out general
    prompts on which the helpfulness and harmfulness of the SFT and final models are measured."""

    source: Literal["procedural", "jsonl", "hub"] = "procedural"
    name: str | None = None
    split: str = "train"
    config: str | None = None
    messages_field: str = "messages"
    procedural_rows: int = 4000
    reasoning_per_general: float = 3.0
    harmful_share: float = 0.2
    sft_unsafe_share: float = 0.0
    eval_prompts: int = 100

    RANGES: ClassVar[dict[str, str]] = {"reasoning_per_general": "> 0", "harmful_share": "[0, 1)",
                                        "sft_unsafe_share": "[0, 1]"}

    def rules(self):
        if self.source != "procedural" and not self.name:
            yield "name", f"general data source {self.source!r} needs a name (file or hub id)"

    def rows_for(self, reasoning_rows: int) -> int:
        """How many general rows the SFT mix takes beside ``reasoning_rows`` reasoning rows."""
        return round(reasoning_rows / self.reasoning_per_general)


@dataclass
class RewardModelSpec(TrainerSection):
    """A reward model of stage 4: loaded (``pretrained``: a hub id or path of a sequence-classification
    reward model), or trained with TRL's RewardTrainer from preference pairs (``stages/training/reward_model.py``):
    a ``dataset`` with ``chosen``/``rejected`` conversations, or (null) the tiny world's procedural pairs.
    Training starts from the stage-4 SFT model with a fresh scalar head; TRL's RewardConfig settings
    (learning rate, schedule, warmup, ``center_rewards_coefficient``…) go under ``trl:``. ``lora``: LoRA
    adapters + the trainable score head, merged on save."""

    TRL_CONFIG: ClassVar[str] = "RewardConfig"

    pretrained: str | None = None
    dataset: DatasetSpec | None = None
    pairs: int = 2000  # procedural pairs to build (tiny); a dataset's ``limit`` caps a real one
    on_policy_prompts: int = 0  # tiny: also pair the SFT model's own answers on this many prompts (judged by rule)
    epochs: float = 1.0
    batch_size: int = 8  # per device
    gradient_accumulation_steps: int = 1
    max_length: int = 2048
    gradient_checkpointing: bool = False  # CUDA only

    RANGES: ClassVar[dict[str, str]] = {"epochs": "> 0", "batch_size": ">= 1", "gradient_accumulation_steps": ">= 1"}

    def rules(self):
        yield from super().rules()
        if self.eval_every:
            yield ("eval_every", "eval_every applies to RL and SFT sections (a reward model reports its held-out "
                   "pairwise accuracy)")


@dataclass
class FinalRLConfig(ReasoningRLConfig):
    """Stage 4's final RL: rule rewards on reasoning prompts, reward models on general prompts
    (each row is routed to its rewards by its ``task`` column). ``general_share``: the share of general
    prompts among the RL prompts."""

    rewards: dict[str, float] = field(default_factory=lambda: {"accuracy": 1.0, "summary_format": 1.0,
                                                               "language": 1.0, "helpfulness": 1.0,
                                                               "harmlessness": 1.0})
    general_share: float = 0.25

    RANGES: ClassVar[dict[str, str]] = {"general_share": "[0, 1)"}


@dataclass
class Stage4Config(Section):
    """Stage 4: rejection sampling → SFT of the *base* on reasoning + general data → reward models →
    final RL over all scenarios (``stages/stage4_final.py``)."""

    rejection: RejectionConfig = field(default_factory=RejectionConfig)
    general: GeneralDataConfig = field(default_factory=GeneralDataConfig)
    sft: SFTSpec = field(default_factory=SFTSpec)
    helpfulness: RewardModelSpec = field(default_factory=RewardModelSpec)
    harmlessness: RewardModelSpec = field(default_factory=RewardModelSpec)
    rl: FinalRLConfig = field(default_factory=FinalRLConfig)

    def rules(self):
        # The SFT mix takes one general row per reasoning_per_general kept rows; fail here, not after an
        # hour of rejection sampling, when the procedural general data could run short.
        prompts, general = self.rejection.prompts, self.general
        if general.source == "procedural" and prompts is not None and prompts.limit is not None:
            most_kept = prompts.limit * self.rejection.max_kept_per_prompt
            if general.rows_for(most_kept) > general.procedural_rows:
                yield ("general.procedural_rows",
                       f"general.procedural_rows ({general.procedural_rows}) is fewer than the SFT mix may need: "
                       f"rejection may keep {most_kept} rows (prompts.limit {prompts.limit} × max_kept_per_prompt "
                       f"{self.rejection.max_kept_per_prompt}), one general row per {general.reasoning_per_general}; "
                       f"raise procedural_rows or reasoning_per_general, or lower the rejection's prompts")


def plain_folder_name(name: str) -> bool:
    """A name that can only name one folder inside its parent: no path separator, not ``.`` or ``..``."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


@dataclass
class StudentSpec(Section):
    """A distillation student: a small pretrained model (``pretrained``: hub id or path), or (null) a
    tiny base built like ``base`` but with its own ``architecture`` and ``pretrain_steps`` (null: the
    base's)."""

    name: str
    pretrained: str | None = None
    parameters_b: float | None = None  # the pretrained student's size in billions (dry run)
    vocab_size: int | None = None  # its vocabulary (dry run: logits memory)
    attention_heads: int | None = None  # its shape (dry run: activations, vLLM's KV cache), as base's
    hidden_size: int | None = None
    num_layers: int | None = None
    key_value_heads: int | None = None
    architecture: TinyArchitecture | None = None
    pretrain_steps: int | None = None
    # its released base (stages/release.py), as base.release; null: built in distill. Unused with pretrained
    release: str | None = None

    def rules(self):
        if not plain_folder_name(self.name):
            yield "name", f"student name {self.name!r} must be a plain folder name: it names distill/<name>/"


@dataclass
class DistillSFTSpec(SFTSpec):
    """The distillation SFT: ``epochs`` null when ``distill.budget_steps`` sets its length instead."""

    epochs: float | None = 2.0


@dataclass
class DistillConfig(Section):
    """Distillation (``stages/distill.py``): SFT of each student on stage 4's curated set
    (``data``: ``reasoning`` = the rejection-sampled reasoning samples only, ``all`` = with the
    general data too, as the paper's 800k). ``control``: the RL-only control (``r1 distill_rl``),
    GRPO in the chat template from the base of student ``control_student``.

    ``budget_steps``: the optimizer steps each arm gets (the paper's Table 6 comparison at an equal
    budget): the distillation SFT runs exactly this many steps (``sft.epochs`` must then be null; the
    epochs they make are recorded) and the control's ``steps`` must equal it. Null: each arm runs its own
    length (``sft.epochs``, ``control.steps``), and the two are not comparable at equal budget."""

    students: list[StudentSpec] = field(default_factory=list)
    data: Literal["reasoning", "all"] = "all"
    budget_steps: int | None = None
    sft: DistillSFTSpec = field(default_factory=DistillSFTSpec)
    control_student: str | None = None  # null: the first student
    control: RLConfig = field(default_factory=RLConfig)

    RANGES: ClassVar[dict[str, str]] = {"budget_steps": ">= 1 (null: each arm its own length)"}

    def rules(self):
        names = [s.name for s in self.students]
        if len(set(names)) != len(names):
            yield "students", f"student names must be unique, got {names}"
        if self.control_student is not None and self.control_student not in names:
            yield "control_student", f"{self.control_student!r} is not a student ({names})"
        if self.budget_steps is None:
            if self.sft.epochs is None:
                yield "sft.epochs", "sft.epochs is null but no budget_steps is set: set one of them"
            return
        if self.sft.epochs is not None:
            yield ("sft.epochs", f"budget_steps ({self.budget_steps}) sets the SFT's length; set sft.epochs to null "
                   f"(got {self.sft.epochs})")
        if self.control.steps != self.budget_steps:
            yield ("control.steps", f"control.steps ({self.control.steps}) must equal budget_steps "
                   f"({self.budget_steps}): both arms get the same optimizer steps")


@dataclass
class FindingsConfig(Section):
    """``r1 findings`` (``stages/commands/findings.py``): the training seeds every verdict is measured over;
    0 is the pipeline's own run."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    # F7 (clip-higher and entropy): the seeds of its two stage-1 arms, and their optimizer steps per
    # generation (trl.num_iterations: with 1, the importance ratio is 1 and clipping never acts)
    clip_seeds: list[int] = field(default_factory=lambda: [0])
    clip_iterations: int = 2

    RANGES: ClassVar[dict[str, str]] = {"clip_iterations": ">= 2 (with 1, clipping never acts)"}

    def rules(self):
        if 0 not in self.seeds or len(set(self.seeds)) != len(self.seeds):
            yield "seeds", f"must hold 0 (the pipeline's run) and no repeats, got {self.seeds}"
        if len(set(self.clip_seeds)) != len(self.clip_seeds):
            yield "clip_seeds", f"must hold no repeats, got {self.clip_seeds}"


@dataclass
class PassKConfig(Section):
    """``r1 passk`` (``stages/commands/passk.py``): pass@k for k = 1 … ``samples`` on ``problems`` held-out problems,
    for the base and every stage (the reasoning boundary)."""

    samples: int = 64
    problems: int = 200

    RANGES: ClassVar[dict[str, str]] = {"samples": ">= 1", "problems": ">= 1"}


@dataclass
class LaunchConfig(Section):
    """Where a recipe runs (``scripts/launch``, ``r1 <stage> --dry-run``): processes (GPUs) per node,
    nodes, the accelerate config under ``recipes/accelerate/`` (``ddp``, ``zero2``, ``zero3``, ``fsdp``;
    null: a single process), the memory of one accelerator for the dry run's estimate, and how long a
    collective may wait (``timeout_minutes``: the other processes wait at a barrier while the main one
    evaluates alone; ``stages.pipeline.common.init_distributed``)."""

    processes_per_node: int = 1
    nodes: int = 1
    accelerate_config: Literal["ddp", "zero2", "zero3", "fsdp"] | None = None
    gpu_memory_gb: float = 80.0
    timeout_minutes: float = 30.0
    vllm_server_tensor_parallel: int = 1  # GPUs per model copy of ``trl vllm-serve`` (scripts/slurm.sbatch)
    vllm_server_data_parallel: int | None = None  # model copies on the server node (null: as many as its GPUs hold)
    # vLLM's offline engine for evaluation and rejection sampling (on the main process): its share of the
    # GPU (a policy may already be on it), GPUs per engine, and its context (null: the model's)
    vllm_memory_fraction: float = 0.5
    vllm_tensor_parallel: int = 1
    vllm_max_model_len: int | None = None
    vllm_enforce_eager: bool = False  # no CUDA graphs or compilation: a quicker start, slower decoding

    RANGES: ClassVar[dict[str, str]] = {
        "processes_per_node": ">= 1", "nodes": ">= 1", "timeout_minutes": "> 0", "vllm_server_tensor_parallel": ">= 1",
        "vllm_server_data_parallel": ">= 1", "vllm_memory_fraction": "(0, 1)", "vllm_tensor_parallel": ">= 1",
        "vllm_max_model_len": ">= 1"}

    @property
    def processes(self) -> int:
        return self.processes_per_node * self.nodes


@dataclass
class TrackingConfig(Section):
    """Experiment tracking, through transformers' integrations (TRL's ``report_to``): ``report_to`` names
    them (``none``, ``trackio``, ``wandb``, ``tensorboard``…, or a list). Every trainer of a stage is one
    run in ``project``, named ``<recipe>/<stage>/<part>/seed<seed>``, whose config also holds the recipe's
    name and hash, the stage and its manifest (``stages.training.skeleton.TrackedRun``). trackio (the ``track``
    extra) keeps everything on this machine, under ``$TRACKIO_DIR``: ``trackio show --project
    <project>`` opens its dashboard."""

    report_to: str | list[str] = "none"
    project: str = "r1-pipeline"

    def rules(self):
        names = self.names
        if not names or any(not isinstance(n, str) or not n for n in names):
            yield "report_to", f"{self.report_to!r} must name integrations (or be 'none')"
        elif len(names) > 1 and ("none" in names or "all" in names):
            yield "report_to", f"{self.report_to!r}: 'none' and 'all' stand alone"
        if not self.project.strip():
            yield "project", "must not be empty"

    @property
    def names(self) -> list[str]:
        """``report_to`` as a list."""
        return [self.report_to] if isinstance(self.report_to, str) else list(self.report_to)

    @property
    def integrations(self) -> list[str]:
        """The trackers to report to ([] for ``none``)."""
        return [] if self.names == ["none"] else self.names


@dataclass
class HubConfig(Section):
    """Publishing to the Hugging Face hub (``stages/pipeline/cards.py``). Every stage writes a model card into its
    checkpoint and its curated sets as loadable datasets whatever this says; ``push_to_hub`` (off by
    default) also uploads each completed stage to the model repo ``<repo_prefix>-<stage>`` and its sets
    to ``<repo_prefix>-<stage>-<set>`` (``r1 push`` does it by hand, for one stage)."""

    push_to_hub: bool = False
    repo_prefix: str | None = None
    private: bool = True

    def rules(self):
        if self.push_to_hub and not self.repo_prefix:
            yield "push_to_hub", "needs hub.repo_prefix (e.g. your-name/tiny-r1): the repos are <repo_prefix>-<stage>"


@dataclass
class Recipe(Section):
    name: str
    seed: int = 0
    run_root: str = "runs"
    trust_remote_code: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # the parallel layout on the CPU, fixed (stages/pipeline/threads.py): torch threads per stage or part of a stage
    # (``default``, ``stage4`` or ``stage4.sft`` → count; the parts are stages.pipeline.runner.STAGE_PARTS; none given:
    # torch's default), and the single-threaded processes the CPU sampler shares its batches out between
    # (null: one per torch thread)
    threads: dict[str, int] = field(default_factory=dict)
    sample_processes: int | dict[str, int] | None = None
    task_world: TaskWorldConfig | None = field(default_factory=TaskWorldConfig)
    data: DataConfig = field(default_factory=DataConfig)
    base: BaseConfig = field(default_factory=BaseConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    stage1: RLConfig = field(default_factory=RLConfig)
    stage2: Stage2Config = field(default_factory=Stage2Config)
    stage3: ReasoningRLConfig = field(default_factory=ReasoningRLConfig)
    stage4: Stage4Config = field(default_factory=Stage4Config)
    distill: DistillConfig = field(default_factory=DistillConfig)
    findings: FindingsConfig = field(default_factory=FindingsConfig)
    passk: PassKConfig = field(default_factory=PassKConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    hub: HubConfig = field(default_factory=HubConfig)

    RANGES: ClassVar[dict[str, str]] = {
        "seed": "[0, 2**32) (torch, numpy and TRL take it)", "threads": ">= 1",
        "sample_processes": ">= 1 (null: one per torch thread)"}

    def rules(self):
        if not plain_folder_name(self.name):
            yield "name", (f"{self.name!r} must be a plain folder name (no path separators, not . or ..): it names "
                           "the run folder <run_root>/<name>")

    def stage_dir(self, stage: str) -> Path:
        root = Path(self.run_root)
        if not root.is_absolute():
            root = REPO_ROOT / root
        return root / self.name / stage

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def resolve_recipe_path(name_or_path: str) -> Path:
    """``tiny`` → ``recipes/tiny/recipe.yaml``; a folder → its recipe.yaml; a file → itself."""
    p = Path(name_or_path)
    candidates = [p, RECIPES_DIR / name_or_path]
    for c in candidates:
        if c.is_dir() and (c / "recipe.yaml").is_file():
            return c / "recipe.yaml"
        if c.is_file():
            return c
    known = sorted(d.name for d in RECIPES_DIR.iterdir() if (d / "recipe.yaml").is_file())
    raise RecipeError(f"no recipe {name_or_path!r}: not a file or folder, and not one of {known}")


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> Recipe:
    path = resolve_recipe_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # safe: never constructs objects
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    raw.setdefault("name", path.parent.name if path.name == "recipe.yaml" else path.stem)
    for item in overrides or []:
        apply_override(raw, item)
    return build(Recipe, raw, str(path), "")


def apply_override(raw: dict, item: str) -> None:
    if "=" not in item:
        raise RecipeError(f"--set {item!r}: expected key=value, e.g. stage1.trl.learning_rate=5e-5")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise RecipeError(f"--set {key}: {p} is not a section")
    node[parts[-1]] = yaml.safe_load(value)


def build(cls, data: Any, source: str, where: str):
    """Construct dataclass ``cls`` from ``data``, checking keys and types recursively."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: {where or 'top level'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    config = getattr(cls, "TRL_CONFIG", "")
    for key in unknown if config else ():
        if key in SET_BY_PROJECT:
            raise RecipeError(f"{source}: {_join(where, key)}: unknown key; TRL's {key} is set by the project "
                              f"from {SET_BY_PROJECT[key]}")
        if key in trl_fields(config):  # the recipe shape before TRL's settings moved under trl:
            raise RecipeError(f"{source}: {_join(where, key)} moved to {_join(where, 'trl.' + key)}: TRL's "
                              f"{config} settings go under trl: (as in recipes/tiny/recipe.yaml)")
    if unknown:
        raise RecipeError(
            f"{source}: unknown key {_join(where, unknown[0])!r} (known in {where or 'top level'}: "
            f"{', '.join(sorted(fields))})"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name == "trl" and config and name in data:
            kwargs[name] = _trl_mapping(config, data[name], source, _join(where, name))
        elif name in data:
            kwargs[name] = _coerce(hints[name], data[name], source, _join(where, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecipeError(f"{source}: missing required key {_join(where, name)!r}")
    try:
        return cls(**kwargs)  # a section's __post_init__ checks its ranges and rules (Section)
    except RecipeError as e:
        if not e.problems:
            raise RecipeError(f"{source}: {where or 'top level'}: {e}") from None
        problems = tuple((_join(where, key), message) for key, message in e.problems)
        raise RecipeError(f"{source}: " + "; ".join(f"{key}: {message}" for key, message in problems), problems) from None


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _trl_mapping(config: str, data: Any, source: str, where: str) -> dict[str, Any]:
    """A section's ``trl:`` mapping, each key checked against the fields of TRL's ``config`` and each value
    against its type (a YAML string such as ``5e-5`` becomes the float TRL expects)."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: {where}: expected a mapping of {config} settings, got {data!r}")
    fields, out = trl_fields(config), {}
    for key, value in data.items():
        problem = trl_problem(config, str(key))
        if problem:
            raise RecipeError(f"{source}: {where}.{key}: {problem}")
        try:
            coerced = _coerce(fields[key], value, source, f"{where}.{key}")
        except (AttributeError, TypeError):  # a type this checker does not know: TRL checks the value
            coerced = value
        # an int where TRL declares a float stays an int, as TRL would get it from Python
        out[key] = value if isinstance(coerced, float) and type(value) is int else coerced
    return out


def _coerce(tp, value, source: str, where: str):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in (a for a in args if a is not type(None)):
            try:
                return _coerce(a, value, source, where)
            except RecipeError as e:
                errors.append(str(e))
        raise RecipeError(errors[0] if len(errors) == 1 else f"{source}: {where}: {value!r} fits none of {tp}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, source, where)
    if origin is Literal:
        if value not in args:
            raise RecipeError(f"{source}: {where}: {value!r} is not one of {list(args)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(f"{source}: {where}: expected a list, got {value!r}")
        return [_coerce(args[0], v, source, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{source}: {where}: expected a mapping, got {value!r}")
        return {_coerce(args[0], k, source, where): _coerce(args[1], v, source, f"{where}.{k}")
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads 5e-5 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, float) and isinstance(value, bool) or not isinstance(value, tp):
        raise RecipeError(f"{source}: {where}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value
