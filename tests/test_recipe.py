"""Recipes: unknown keys and wrong types are refused with the file and key named; overrides apply."""

import math
import re
import types
from pathlib import Path

import pytest

from stages.pipeline.ranges import parse_range
from stages.pipeline.recipe import RECIPES_DIR, Recipe, RecipeError, load_recipe
from stages.pipeline.trl_policy import TRL_RANGES


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return p


def test_tiny_recipe_loads_and_hashes_stably():
    a, b = load_recipe("tiny"), load_recipe("tiny")
    assert isinstance(a, Recipe) and a.name == "tiny"
    assert a.hash() == b.hash()
    assert a.base.pretrain.steps > 0


def test_every_recipe_file_validates():
    files = sorted(RECIPES_DIR.rglob("recipe.yaml"))
    assert files, "no recipes found"
    for f in files:
        load_recipe(str(f))


def test_unknown_key_names_file_and_key(tmp_path):
    p = write(tmp_path, "name: x\nbase:\n  pretrain:\n    stepz: 3\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(str(p))
    assert str(p) in str(e.value) and "base.pretrain.stepz" in str(e.value)


def test_unknown_top_level_section(tmp_path):
    p = write(tmp_path, "name: x\nstage9: {}\n")
    with pytest.raises(RecipeError, match="stage9"):
        load_recipe(str(p))


@pytest.mark.parametrize("text, key", [
    ("name: x\nseed: ten\n", "seed"),
    ("name: x\nbase:\n  pretrain:\n    steps: 1.5\n", "base.pretrain.steps"),
    ("name: x\neval:\n  temperature: hot\n", "eval.temperature"),
    ("name: x\neval:\n  backend: tpu\n", "eval.backend"),
    ("name: x\ntask_world:\n  families: add\n", "task_world.families"),
    ("name: x\nseed: true\n", "seed"),
])
def test_wrong_types_are_refused(tmp_path, text, key):
    p = write(tmp_path, text)
    with pytest.raises(RecipeError, match=key.replace(".", r"\.")):
        load_recipe(str(p))


def test_overrides_are_typed_and_recorded():
    r = load_recipe("tiny", ["base.pretrain.steps=7", "eval.temperature=1", "eval.benchmarks=[gsm8k, aime24]"])
    assert r.base.pretrain.steps == 7
    assert r.eval.temperature == 1.0 and isinstance(r.eval.temperature, float)
    assert r.eval.benchmarks == ["gsm8k", "aime24"]
    assert r.hash() != load_recipe("tiny").hash()
    with pytest.raises(RecipeError, match="base.pretrain.nope"):
        load_recipe("tiny", ["base.pretrain.nope=1"])
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe("tiny", ["base.pretrain.steps"])


def test_yaml_is_loaded_safely(tmp_path):
    p = write(tmp_path, "name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(str(p))


def test_missing_recipe_lists_known():
    with pytest.raises(RecipeError, match="tiny"):
        load_recipe("no-such-recipe")


def test_real_recipes_configure_stages_1_to_3():
    import yaml

    for f in sorted(RECIPES_DIR.rglob("recipe.yaml")):
        raw = yaml.safe_load(f.read_text())
        r = load_recipe(str(f))
        assert {"stage1", "stage2", "stage3"} <= set(raw), f"{f}: stages 1-3 must be configured explicitly"
        assert set(r.stage1.rewards) <= {"format", "accuracy", "overlong"}, f"{f}: stage 1 is rule rewards only"
        assert {"accuracy", "language"} <= set(r.stage3.rewards), f"{f}: stage 3 needs language consistency"
        assert "format" not in r.stage3.rewards  # stage 3 answers in the readable (summary) format
        if r.base.pretrained:  # real models: vLLM generation on CUDA, completions within the context
            assert r.device == "cuda" and r.stage1.setting("use_vllm") and r.stage3.setting("use_vllm"), f
            assert r.stage1.max_completion_length <= 4096 - 512 and r.stage2.sft.max_length <= 4096, f


def test_bf16_autocast_is_auto_true_or_false_and_auto_follows_the_cpu():
    """On a CPU without native bf16 (AVX2 only), autocast emulates bf16 and pretraining ran ~16× slower
    than fp32 (scripts/bench_pretrain_step.py): ``auto`` must resolve to fp32 there."""
    import torch

    from stages.training.pretrain import use_bf16_autocast

    assert load_recipe("tiny").base.pretrain.bf16_autocast == "auto"
    assert load_recipe("tiny", ["base.pretrain.bf16_autocast=false"]).base.pretrain.bf16_autocast is False
    with pytest.raises(RecipeError, match="bf16_autocast"):
        load_recipe("tiny", ["base.pretrain.bf16_autocast=fast"])
    assert use_bf16_autocast("auto") is bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert use_bf16_autocast(True) is True and use_bf16_autocast(False) is False


@pytest.mark.parametrize("override, message", [
    ("stage1.trl.beta=-1", "stage1.trl.beta: must be >= 0, got -1"),
    ("stage1.trl.epsilon=-0.2", "stage1.trl.epsilon: must be > 0, got -0.2"),
    ("stage1.trl.epsilon_high=null", "stage1.trl.epsilon_high: must be a number, got null"),
    ("stage3.trl.learning_rate=-1", "stage3.trl.learning_rate: must be > 0, got -1"),
    ("stage1.trl.top_p=1.5", "stage1.trl.top_p: must be > 0 and <= 1, got 1.5"),
    ("stage3.trl.temperature=0", "stage3.trl.temperature: must be > 0, got 0"),
    ("stage1.rewards.accuracy=-5", "reward weights must be finite numbers > 0 (remove a reward rather than weigh it 0), got {'accuracy': -5.0}"),
    # values the dry run accepted, that failed or diverged only once training ran
    ("stage1.trl.learning_rate=.inf", "stage1.trl.learning_rate: must be a finite number, got inf"),
    ("stage1.trl.beta=.inf", "stage1.trl.beta: must be a finite number, got inf"),
    ("stage3.trl.temperature=.inf", "stage3.trl.temperature: must be a finite number, got inf"),
    ("stage1.trl.max_grad_norm=.nan", "stage1.trl.max_grad_norm: must be a finite number, got nan"),
    ("stage1.rewards.accuracy=.nan", "reward weights must be finite numbers > 0"),
    ("stage1.rewards.accuracy=.inf", "reward weights must be finite numbers > 0"),
    ("stage1.rewards.accuracy=0", "reward weights must be finite numbers > 0"),
    ("stage1.trl.adam_beta1=5", "stage1.trl.adam_beta1: must be >= 0 and <= 0.999999, got 5"),
    ("stage1.trl.adam_epsilon=-1", "stage1.trl.adam_epsilon: must be > 0, got -1"),
    ("stage1.trl.top_k=-3", "stage1.trl.top_k: must be >= 0, got -3"),
    ("stage1.trl.repetition_penalty=-1", "stage1.trl.repetition_penalty: must be > 0, got -1"),
    ("stage1.trl.lr_scheduler_type=bogus", "stage1.trl.lr_scheduler_type: must be one of linear, cosine"),
    ("stage1.trl.loss_type=bogus", "stage1.trl.loss_type: must be one of grpo, dr_grpo, dapo"),
    ("stage2.sft.trl.loss_type=bogus", "trl.loss_type: must be one of nll, dft"),
    ("stage1.trl.vllm_mode=local", "stage1.trl.vllm_mode: must be one of server, colocate"),
    ("seed=-1", "seed: must be >= 0 and < 2**32, got -1 (torch, numpy and TRL take it)"),
    ("stage1.seed=-1", "stage1.seed: must be >= 0 and < 2**32 or null, got -1"),
    ("stage4.sft.trl.save_total_limit=-1", "trl.save_total_limit: must be >= 1, got -1"),
    ("eval.k=0", "eval.k: must be >= 1, got 0"),
    ("base.pretrain.batch_size=0", "base.pretrain.batch_size: must be >= 1, got 0"),
    ("base.pretrain.steps=0", "base.pretrain.steps: must be >= 1, got 0"),
    ("base.pretrain.pack_length=0", "base.pretrain.pack_length: must be >= 1, got 0"),
    ("base.pretrain.learning_rate=-1", "base.pretrain.learning_rate: must be > 0, got -1"),
])
def test_values_out_of_range_are_refused_by_the_whole_recipes_dry_run(override, message, capsys):
    """Every numeric setting has its range, and any stage's dry run checks the whole recipe."""
    from stages.commands.cli import main

    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe("tiny", [override])
    assert main(["stage2", "--recipe", "tiny", "--set", override, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_eval_counts_must_be_positive(capsys):
    from stages.commands.cli import main

    for flag in (["--k", "0"], ["--limit", "0"], ["--limit", "-1"]):
        with pytest.raises(SystemExit):
            main(["eval", *flag])
        assert "must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, refused", [
    (["stage4.general.procedural_rows=1499"], True),  # rejection may keep 1500 × 1 rows: one general row each
    (["stage4.general.procedural_rows=1500"], False),
    (["stage4.general.procedural_rows=750", "stage4.general.reasoning_per_general=2"], False),
    (["stage4.rejection.prompts.limit=1000", "stage4.rejection.max_kept_per_prompt=2"], True),
    (["stage4.rejection.prompts.limit=750", "stage4.rejection.max_kept_per_prompt=2"], False),
])
def test_general_data_too_small_for_the_sft_mix_is_refused_before_rejection_sampling(overrides, refused):
    """The SFT mix takes one general row per ``reasoning_per_general`` kept rows; a recipe whose
    procedural general data could run short is refused when it is loaded, not after the sampling."""
    if refused:
        with pytest.raises(RecipeError, match=r"general\.procedural_rows \(\d+\) is fewer than the SFT mix may need"):
            load_recipe("tiny", overrides)
    else:
        load_recipe("tiny", overrides)


def test_trls_string_domains_come_from_trl():
    """Where TRL names the values of a string setting (an enum, choices, or the values its help lists), those
    are its domain, TRL's default among them; a setting whose help names none takes any string."""
    from stages.pipeline.trl_policy import trl_choices, trl_default

    for config, name, value in [("GRPOConfig", "loss_type", "cispo"), ("GRPOConfig", "scale_rewards", "batch"),
                                ("GRPOConfig", "importance_sampling_level", "sequence"),
                                ("GRPOConfig", "vllm_importance_sampling_mode", "token_truncate"),
                                ("GRPOConfig", "lr_scheduler_type", "cosine"), ("SFTConfig", "loss_type", "dft")]:
        choices = trl_choices(config, name)
        assert value in choices and str(trl_default(config, name).value if hasattr(trl_default(config, name), "value")
                                        else trl_default(config, name)) in choices, (name, choices)
        load_recipe("tiny", [f"{'stage1' if config == 'GRPOConfig' else 'stage2.sft'}.trl.{name}={value}"])
    assert trl_choices("GRPOConfig", "length_column_name") is None  # its help lists others' values: any string


# -- ranges declared as data, rules, one error type ------------------------------------------------


def _declared_ranges() -> list[tuple[str, str, type]]:
    """(override path, range, field type) for every range a recipe section declares, found by walking
    the Recipe's sections (a section the tiny recipe leaves null is built from its defaults by the override)."""
    import dataclasses
    import typing

    from stages.pipeline.recipe import section_ranges

    cases = []

    def walk(cls, path):
        hints = typing.get_type_hints(cls)
        cases.extend((f"{path}{name}", spec, hints[name]) for name, spec in section_ranges(cls).items())
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if typing.get_origin(tp) in (None, typing.Union, types.UnionType):  # not into lists of sections
                for sub in (a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)):
                    walk(sub, f"{path}{f.name}.")

    walk(Recipe, "")
    return cases


def _number_type(tp) -> type:
    import typing

    args = [a for a in (typing.get_args(tp) or (tp,)) if a is not type(None)]
    return int if int in args and float not in args else float


def _just_outside_and_inside(spec: str, tp, side: str):
    """Values just outside and just inside ``spec`` at its ``low`` or ``high`` end, of the field's type."""
    r, step = parse_range(spec), (1 if _number_type(tp) is int else 0.01)
    if side == "low":
        return (r.low - step, r.low) if r.low_ok else (r.low, r.low + step)
    return (r.high + step, r.high) if r.high_ok else (r.high, r.high - step)


def _override(path: str, tp, value) -> tuple[str, str]:
    """The ``--set`` item giving ``value`` to field ``path`` (one item of a list, one value of a mapping), and
    the dotted key the error must name."""
    import typing

    origin = typing.get_origin(tp)
    if origin is list:
        return f"{path}=[{value!r}]", f"{path}[0]"
    if origin is dict:
        return f"{path}={{stage1: {value!r}}}", f"{path}.stage1"
    return f"{path}={value!r}", path


SECTION_RANGES = [(path, spec, tp, side) for path, spec, tp in _declared_ranges()
                  for side in ("low", "high") if side == "low" or parse_range(spec).high != math.inf]


def test_ranges_are_declared_for_the_sections_that_check_numbers():
    paths = {path for path, *_ in SECTION_RANGES}
    assert {"seed", "threads", "base.pretrain.steps", "base.corpus.slip", "eval.top_p", "stage1.num_generations",
            "stage1.seed", "stage4.rl.general_share", "stage4.helpfulness.epochs", "distill.sft.epochs",
            "distill.control.steps", "stage3.pass_rate_filter.samples", "launch.vllm_memory_fraction"} <= paths
    assert len(SECTION_RANGES) > 100


# The ranges each section class declares (its own RANGES, without its bases'): the rules the sections' checks
# held before ranges were data, pinned, so that a range cannot be widened or dropped unnoticed.
DECLARED = {
    "Recipe": {"seed": "[0, 2**32) (torch, numpy and TRL take it)", "threads": ">= 1",
               "sample_processes": ">= 1 (null: one per torch thread)"},
    "CorpusConfig": dict.fromkeys(("direct", "chat_direct", "worked", "template_reason", "template_direct",
                                   "context_share", "recheck", "template_recheck", "slip", "misconceptions"), "[0, 1]"),
    "PretrainConfig": {"steps": ">= 1", "batch_size": ">= 1", "pack_length": ">= 1", "log_every": ">= 1",
                       "learning_rate": "> 0", "warmup_steps": ">= 0", "weight_decay": ">= 0", "min_lr_ratio": "[0, 1]"},
    "EvalConfig": {"k": ">= 1", "max_new_tokens": ">= 1", "batch_size": ">= 1", "temperature": ">= 0",
                   "top_p": "(0, 1]", "benchmark_limit": ">= 1"},
    "TrainerSection": {"seed": "[0, 2**32) (null: the recipe's)", "eval_every": ">= 0 (0: off)", "eval_problems": ">= 1"},
    "PassRateFilter": {"pool": ">= 1 (null: all)", "samples": ">= 1", "min_pass_rate": "[0, 1]", "max_pass_rate": "[0, 1]"},
    "RLConfig": {"steps": ">= 1", "prompts_per_step": ">= 1", "num_generations": ">= 2 (GRPO compares a group)",
                 "gradient_accumulation_steps": ">= 1", "max_completion_length": ">= 1", "sample_every": ">= 1",
                 "length_buckets": ">= 1", "dynamic_sampling": ">= 0 (0: off)",
                 "eval_steps": ">= 1 (step 0 is the before-training evaluation)"},
    "SFTSpec": {"epochs": "> 0", "batch_size": ">= 1", "gradient_accumulation_steps": ">= 1", "max_length": ">= 16"},
    "RejectionConfig": {"samples_per_prompt": ">= 1", "max_kept_per_prompt": ">= 1", "shard_size": ">= 1"},
    "GeneralDataConfig": {"reasoning_per_general": "> 0", "harmful_share": "[0, 1)", "sft_unsafe_share": "[0, 1]"},
    "RewardModelSpec": {"epochs": "> 0", "batch_size": ">= 1", "gradient_accumulation_steps": ">= 1"},
    "FinalRLConfig": {"general_share": "[0, 1)"},
    "DistillConfig": {"budget_steps": ">= 1 (null: each arm its own length)"},
    "FindingsConfig": {"clip_iterations": ">= 2 (with 1, clipping never acts)"},
    "PassKConfig": {"samples": ">= 1", "problems": ">= 1"},
    "LaunchConfig": {"processes_per_node": ">= 1", "nodes": ">= 1", "timeout_minutes": "> 0",
                     "vllm_server_tensor_parallel": ">= 1", "vllm_server_data_parallel": ">= 1",
                     "vllm_memory_fraction": "(0, 1)", "vllm_tensor_parallel": ">= 1", "vllm_max_model_len": ">= 1"},
}


def test_the_declared_ranges_are_the_sections_rules():
    import dataclasses

    import stages.pipeline.recipe as recipe

    sections = [c for c in vars(recipe).values() if isinstance(c, type) and issubclass(c, recipe.Section)]
    declared = {c.__name__: dict(vars(c)["RANGES"]) for c in sections if vars(c).get("RANGES")}
    assert declared == DECLARED
    for cls in sections:
        for name in recipe.section_ranges(cls):
            assert name in {f.name for f in dataclasses.fields(cls)}, (cls.__name__, name)


@pytest.mark.parametrize("path, spec, tp, side", SECTION_RANGES, ids=[f"{p}-{s}" for p, _, _, s in SECTION_RANGES])
def test_every_declared_range_refuses_a_value_just_outside_it(path, spec, tp, side):
    """Each range a section declares, at each of its ends: a value just outside is refused naming the file and
    the dotted key, in the one format; the value just inside is not refused for that key."""
    outside, inside = _just_outside_and_inside(spec, tp, side)
    item, key = _override(path, tp, outside)
    with pytest.raises(RecipeError) as e:
        load_recipe("tiny", [item])
    assert str(e.value).startswith(f"{RECIPES_DIR / 'tiny' / 'recipe.yaml'}: ")
    assert f"{key}: must be {parse_range(spec).describe()}" in str(e.value), str(e.value)
    item, key = _override(path, tp, inside)
    try:
        load_recipe("tiny", [item])
    except RecipeError as e:  # another rule may refuse the value (e.g. distill.control.steps = budget_steps)
        assert f"{key}: must be {parse_range(spec).describe()}" not in str(e), str(e)


@pytest.mark.parametrize("key", sorted(TRL_RANGES))
def test_every_trl_range_refuses_a_value_just_outside_it(key):
    from stages.pipeline.trl_policy import trl_fields

    sections = [(s, c) for s, c in (("stage1", "GRPOConfig"), ("stage2.sft", "SFTConfig"),
                                    ("stage4.helpfulness", "RewardConfig")) if key in trl_fields(c)]
    if not sections:
        pytest.skip(f"{key}: not a field of this TRL's configs")
    section, config = sections[0]
    spec, tp = TRL_RANGES[key], trl_fields(config)[key]
    for side in ("low", "high") if parse_range(spec).high != math.inf else ("low",):
        outside, inside = _just_outside_and_inside(spec, tp, side)
        with pytest.raises(RecipeError, match=re.escape(f"{section}.trl.{key}: must be {parse_range(spec).describe()}, "
                                                        f"got {outside}")):
            load_recipe("tiny", [f"{section}.trl.{key}={outside!r}"])
        try:
            load_recipe("tiny", [f"{section}.trl.{key}={inside!r}"])
        except RecipeError as e:
            assert f"trl.{key}: must be {parse_range(spec).describe()}" not in str(e), str(e)


@pytest.mark.parametrize("overrides, message", [
    (["stage1.trl.epsilon=0.2", "stage1.trl.epsilon_high=0.1"], "stage1.trl.epsilon_high: must be >= epsilon (0.2), got 0.1"),
    (["stage1.gradient_accumulation_steps=3"], "stage1.gradient_accumulation_steps: prompts_per_step × num_generations"),
    (["stage1.rewards={}"], "stage1.rewards: rewards is empty"),
    (["stage1.rewards={overlong: 1.0}", "stage1.overlong_buffer=0"], "stage1.overlong_buffer: reward 'overlong' needs"),
    (["stage3.pass_rate_filter={min_pass_rate: 0.8, max_pass_rate: 0.5}"],
     "stage3.pass_rate_filter.max_pass_rate: must be >= min_pass_rate (0.8), got 0.5"),
    (["stage2.sft.trl.packing=true"], "stage2.sft.batching: packed is the project's packing"),
    (["stage4.helpfulness.eval_every=5"], "stage4.helpfulness.eval_every: eval_every applies to RL and SFT"),
    (["data.train.source=jsonl"], "data.train.name: source 'jsonl' needs a name"),
    (["stage4.general.source=hub"], "stage4.general.name: general data source 'hub' needs a name"),
    (["distill.students=[{name: a}, {name: a}]"], "distill.students: student names must be unique"),
    (["distill.control_student=nobody"], "distill.control_student: 'nobody' is not a student"),
    (["findings.seeds=[1, 2]"], "findings.seeds: must hold 0"),
    (["findings.clip_seeds=[0, 0]"], "findings.clip_seeds: must hold no repeats"),
    (["tracking.report_to=[]"], "tracking.report_to: [] must name integrations"),
    (["tracking.project=' '"], "tracking.project: must not be empty"),
    (["hub.push_to_hub=true"], "hub.push_to_hub: needs hub.repo_prefix"),
    (["name=a/b"], "name: 'a/b' must be a plain folder name"),
])
def test_rules_between_fields_name_the_file_and_the_dotted_key(overrides, message):
    with pytest.raises(RecipeError) as e:
        load_recipe("tiny", overrides)
    assert str(e.value).startswith(f"{RECIPES_DIR / 'tiny' / 'recipe.yaml'}: ") and message in str(e.value), str(e.value)


def test_every_problem_of_a_section_is_reported_and_one_error_type_is_raised():
    from stages.pipeline.recipe import EvalConfig

    with pytest.raises(RecipeError) as e:
        load_recipe("tiny", ["stage1.steps=0", "stage1.sample_every=0"])
    assert str(e.value).endswith("stage1.steps: must be >= 1, got 0; stage1.sample_every: must be >= 1, got 0")
    assert e.value.problems == (("stage1.steps", "must be >= 1, got 0"), ("stage1.sample_every", "must be >= 1, got 0"))
    with pytest.raises(RecipeError, match=r"^k: must be >= 1, got 0$"):  # built outside a recipe: the section's key
        EvalConfig(k=0)
    assert issubclass(RecipeError, ValueError)  # `except ValueError` still catches it


def test_loading_a_recipe_imports_no_grader():
    """Reward names are data in the recipe: loading it imports neither the grader nor math_verify."""
    import subprocess
    import sys

    code = ("import sys, stages.pipeline.recipe as r; r.load_recipe('tiny', []); "
            "assert 'eval.verify' not in sys.modules and 'math_verify' not in sys.modules, 'grader imported'; "
            "assert r.__file__.startswith(sys.argv[1]), r.__file__")
    root = str(RECIPES_DIR.parent)
    done = subprocess.run([sys.executable, "-c", code, root], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name, custom", [
    ("my_pkg.rewards:brevity", True), ("my_pkg.rewards.brevity", True), ("a.b.c:d", True),
    ("brevity", False), ("rewards:brevity", False), ("my_pkg..brevity", False), ("my_pkg.rewards:", False),
    ("my-pkg.rewards:brevity", False), ("my_pkg.class:f", False), ("a.b:c:d", False), ("my_pkg.rewards.", False),
])
def test_a_custom_reward_is_named_by_its_dotted_import_path(name, custom):
    """Besides the known names, a reward may be named by its dotted import path (``package.module:function``
    or ``package.module.function``); the recipe does not import it. A plain unknown name is refused, listing
    the known names and saying how a custom reward is named."""
    from stages.pipeline.recipe import is_custom_reward

    assert is_custom_reward(name) is custom
    item = f"stage3.rewards={{accuracy: 1.0, '{name}': 0.5}}"
    if custom:
        assert load_recipe("tiny", [item]).stage3.rewards[name] == 0.5
    else:
        with pytest.raises(RecipeError, match=re.escape(f"stage3.rewards: unknown reward {name!r} (known: format, "
                                                        "summary_format, accuracy, language, overlong, helpfulness, "
                                                        "harmlessness; a custom reward is named by its dotted import path")):
            load_recipe("tiny", [item])
