"""Recipes: unknown keys and wrong types are refused with the file and key named; overrides apply."""

import re
from pathlib import Path

import pytest

from stages.pipeline.recipe import RECIPES_DIR, Recipe, RecipeError, load_recipe


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
