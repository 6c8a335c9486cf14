"""The dry run: every real recipe plans every stage without loading weights; impossible batch splits
fail with the numbers to change; the memory accounting follows the sharding."""

import pytest
import torch

from stages.cli import STAGES, main
from stages.plan import GB, PlanError, memory_per_device, parameters, plan
from stages.recipe import RECIPES_DIR, load_recipe
from stages.rl import grpo_config

REAL = sorted(p.parent.name for p in RECIPES_DIR.glob("*/recipe.yaml") if p.parent.name != "tiny")


@pytest.mark.parametrize("name", REAL)
def test_every_real_recipe_plans_every_stage(name):
    r = load_recipe(name)
    for stage in STAGES:
        lines = plan(r, stage)
        assert lines[0].startswith(f"recipe {name}, stage {stage}")
        if stage not in ("base",):
            assert any("memory per process" in line for line in lines), (stage, lines)
            assert not any("DOES NOT FIT" in line for line in lines), (stage, lines)
    samples = r.stage2.cold_start.sample is not None  # the stages that sample say how
    assert any(line.startswith("stage2.cold_start.sample:") for line in plan(r, "stage2")) == samples
    assert any(line.startswith("stage4.rejection:") for line in plan(r, "stage4"))
    assert [line.split(":")[0] for line in plan(r, "stage4") if not line.startswith(" ")][2:] == [
        "stage4.sft", "stage4.helpfulness", "stage4.harmlessness", "stage4.rl", "stage4.rejection"]  # every trainer


def test_a_batch_that_cannot_be_split_names_the_numbers():
    r = load_recipe("qwen2.5-math-7b", ["launch.processes_per_node=6"])
    with pytest.raises(PlanError, match=r"64 × 8 = 512 completions .* 8 × 6 = 48: make the completions per step 480 or 528"):
        plan(r, "stage1")
    assert main(["stage1", "--recipe", "qwen2.5-math-7b", "--set", "launch.processes_per_node=6", "--dry-run"]) == 2


def test_the_stage_checks_its_batch_like_the_dry_run(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "6")  # six processes launched, whatever the recipe's launch says
    r = load_recipe("qwen2.5-math-7b", [])
    with pytest.raises(PlanError, match=r"stage1: .* 8 × 6 = 48: make the completions per step 480 or 528"):
        grpo_config(r.stage1, output_dir=tmp_path, seed=0, device=torch.device("cpu"), bf16=False,
                    reward_weights=[1.0, 1.0], section="stage1")


def test_memory_follows_the_sharding():
    n = 7.6e9
    ddp = memory_per_device(n, "ddp", 8, reference=False)
    z2 = memory_per_device(n, "zero2", 8, reference=False)
    z3 = memory_per_device(n, "zero3", 8, reference=True)
    assert ddp.total == pytest.approx(16 * n)  # 2 + 2 + 12 bytes per parameter, nothing sharded
    assert z2.weights == ddp.weights and z2.optimizer == pytest.approx(ddp.optimizer / 8)
    assert z3.total == pytest.approx((16 + 2) * n / 8)  # everything sharded, the reference model too
    assert ddp.total / GB > 80  # a 7B model does not fit one 80 GB GPU under DDP: the plan says so
    r = load_recipe("qwen2.5-math-7b", ["launch.accelerate_config=ddp"])
    assert any("DOES NOT FIT" in line for line in plan(r, "stage1"))


def test_tiny_parameter_count_matches_the_built_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    r = load_recipe("tiny")
    a = r.base.architecture
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=a.tokenizer_vocab_size, hidden_size=a.hidden_size, num_hidden_layers=a.num_hidden_layers,
        num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
        intermediate_size=a.intermediate_size, tie_word_embeddings=True))
    assert parameters(r) == pytest.approx(sum(p.numel() for p in model.parameters()), rel=1e-3)
