"""The trainer skeleton (stages/training/skeleton.py) and TRL's settings passed through a recipe's ``trl:`` mapping:
any GRPOConfig / SFTConfig / RewardConfig field reaches TRL with no code for it; unknown fields, fields
the project sets itself and the old recipe shape are refused naming the file and the dotted key; the
project's defaults are TRL fields, each with its reason; where a trainer starts (fresh, resumed,
finished)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from stages.pipeline.recipe import RecipeError, load_recipe, resolve_recipe_path
from stages.pipeline.trl_policy import PROJECT_DEFAULTS, SET_BY_PROJECT, trl_fields
from stages.training.skeleton import begin, device_and_precision

CPU = torch.device("cpu")
TINY = str(resolve_recipe_path("tiny"))


def grpo(recipe, section="stage1"):
    from stages.training.grpo import grpo_config

    cfg = recipe.stage1 if section == "stage1" else recipe.stage4.rl
    args, _ = grpo_config(cfg, output_dir="/tmp/unused", seed=0, device=CPU, bf16=False,
                          reward_weights=[1.0] * len(cfg.rewards), section=section)
    return args


# -- TRL's settings pass through -----------------------------------------------------------------


def test_a_trl_setting_needs_no_code_change():
    """Loss types and settings the project has no code for reach the GRPOConfig built for the stage."""
    r = load_recipe("tiny", ["stage1.trl.loss_type=cispo", "stage1.trl.importance_sampling_level=sequence",
                             "stage1.trl.epsilon_high=5e0", "stage1.trl.top_entropy_quantile=0.2"])
    args = grpo(r)
    assert (args.loss_type, args.importance_sampling_level, args.top_entropy_quantile) == ("cispo", "sequence", 0.2)
    assert args.epsilon_high == 5.0 and isinstance(args.epsilon_high, float)  # "5e0" from YAML: a float
    assert grpo(load_recipe("tiny", ["stage1.trl.loss_type=luspo"])).loss_type == "luspo"
    assert grpo(load_recipe("tiny")).loss_type == "grpo"  # the recipe's own


def test_sft_and_reward_settings_pass_through_too():
    from stages.training.reward_model import reward_config
    from stages.training.sft import sft_config

    r = load_recipe("tiny", ["stage2.sft.trl.loss_type=dft", "stage2.sft.trl.neftune_noise_alpha=5",
                             "stage4.helpfulness.trl.center_rewards_coefficient=0.5",
                             "stage4.helpfulness.trl.lr_scheduler_type=linear"])
    sft, _ = sft_config(r.stage2.sft, output_dir="/tmp/unused", seed=0, device=CPU, bf16=False, steps=3)
    assert (sft.loss_type, sft.neftune_noise_alpha, sft.assistant_only_loss) == ("dft", 5, True)
    rm, _ = reward_config(r.stage4.helpfulness, output_dir="/tmp/unused", seed=0, device=CPU, bf16=False, steps=3)
    assert (rm.center_rewards_coefficient, rm.lr_scheduler_type.value) == (0.5, "linear")


def test_the_tiny_configs_keep_their_settings():
    """The settings the tiny recipe's trainers had before TRL's settings moved under trl:."""
    from stages.training.reward_model import reward_config
    from stages.training.sft import sft_config

    r = load_recipe("tiny")
    a = grpo(r)
    assert (a.max_steps, a.per_device_train_batch_size, a.num_generations, a.max_completion_length) == (120, 64, 8, 256)
    assert (a.learning_rate, a.warmup_steps, a.lr_scheduler_type.value) == (1e-4, 10, "constant_with_warmup")
    assert (a.loss_type, a.beta, a.epsilon, a.epsilon_high, a.scale_rewards) == ("grpo", 0.0, 0.2, 0.28, "group")
    assert (a.logging_steps, a.save_steps, a.save_total_limit, a.save_only_model) == (1, 20, 2, False)
    assert (a.bf16, a.use_cpu, a.seed, a.data_seed, a.sync_ref_model) == (False, True, 0, 0, False)
    assert not (a.gradient_checkpointing or getattr(a, "activation_checkpointing", False))
    s4 = grpo(r, "stage4.rl")
    assert (s4.beta, s4.sync_ref_model, s4.ref_model_mixup_alpha, s4.save_steps) == (0.02, False, 1.0, 10)
    sft, _ = sft_config(r.stage2.sft, output_dir="/tmp/unused", seed=0, device=CPU, bf16=False, steps=7)
    assert (sft.learning_rate, sft.lr_scheduler_type.value, sft.warmup_steps, sft.assistant_only_loss) == (
        1e-3, "cosine", 0.1, True)
    assert (sft.per_device_train_batch_size, sft.logging_steps, sft.save_steps) == (16, 5, 50)
    # padded batches (TRL's default); padding-free ones, asked for, leave TRL nothing to truncate
    # (stages.training.sft.fit_rows drops rows over 256 tokens instead)
    assert (sft.padding_free, sft.packing, sft.max_length) == (False, False, 256)
    assert r.stage2.sft.batching == r.stage4.sft.batching == r.distill.sft.batching == "packed"  # data/packing.py
    free, _ = sft_config(load_recipe("tiny", ["stage2.sft.trl.padding_free=true", "stage2.sft.batching=padded"]).stage2.sft,
                         output_dir="/tmp/unused", seed=0, device=CPU, bf16=False, steps=7)
    assert (free.padding_free, free.max_length) == (True, None)
    with pytest.raises(RecipeError, match=r"stage2\.sft.*batching: packed"):  # two packings: refused
        load_recipe("tiny", ["stage2.sft.trl.padding_free=true"])
    rm, _ = reward_config(r.stage4.harmlessness, output_dir="/tmp/unused", seed=0, device=CPU, bf16=False, steps=7)
    assert (rm.learning_rate, rm.lr_scheduler_type.value, rm.warmup_steps, rm.center_rewards_coefficient) == (
        1e-3, "cosine", 0.1, 0.01)
    assert (rm.save_strategy.value, rm.per_device_train_batch_size, rm.max_length) == ("no", 16, 128)


def test_the_paper_defaults_reach_trl():
    """A section the recipe leaves out gets the project's defaults (the paper's), not TRL's."""
    from trl import GRPOConfig

    r = load_recipe("tiny", ["stage1.trl={}"])
    a = grpo(r)
    for key, (value, _) in PROJECT_DEFAULTS["GRPOConfig"].items():
        got = getattr(a, key)
        assert getattr(got, "value", got) == value, key
    assert a.max_grad_norm == GRPOConfig.max_grad_norm  # and TRL's own where the project has none
    # beta 0.001 > 0: the policy replaces the reference every ref_model_sync_steps (R1), not a mixup
    assert (a.beta, a.sync_ref_model, a.ref_model_sync_steps, a.ref_model_mixup_alpha) == (0.001, True, 400, 1.0)
    a = grpo(load_recipe("tiny", ["stage1.trl={}", "stage1.ref_model_sync_steps=null"]))
    assert (a.beta, a.sync_ref_model) == (0.001, False)


def test_project_defaults_are_trl_fields_with_reasons():
    from trl import GRPOConfig, RewardConfig, SFTConfig

    classes = {"GRPOConfig": GRPOConfig, "SFTConfig": SFTConfig, "RewardConfig": RewardConfig}
    assert set(PROJECT_DEFAULTS) == set(classes)
    for config, defaults in PROJECT_DEFAULTS.items():
        for key, (value, reason) in defaults.items():
            assert key in trl_fields(config) and key not in SET_BY_PROJECT, (config, key)
            trl_default = getattr(classes[config], key)
            assert getattr(trl_default, "value", trl_default) != value, f"{config}.{key}: the same as TRL's"
            assert reason and "\n" not in reason, (config, key)
    for key in SET_BY_PROJECT:
        assert any(key in trl_fields(c) for c in classes), key


# -- what a recipe may not write -----------------------------------------------------------------


def test_an_unknown_trl_key_names_the_file_and_the_dotted_key(tmp_path):
    with pytest.raises(RecipeError) as e:
        load_recipe("tiny", ["stage1.trl.loss_typ=dapo"])
    assert f"{TINY}: stage1.trl.loss_typ: unknown GRPOConfig field (did you mean loss_type?)" in str(e.value)
    p = tmp_path / "r.yaml"
    p.write_text("name: x\nstage4:\n  helpfulness:\n    trl:\n      num_generations: 4\n")
    with pytest.raises(RecipeError, match=rf"^{p}: stage4\.helpfulness\.trl\.num_generations: unknown RewardConfig field"):
        load_recipe(str(p))
    with pytest.raises(RecipeError, match=r"stage2\.sft\.trl\.learning_rate: expected float, got str 'fast'"):
        load_recipe("tiny", ["stage2.sft.trl.learning_rate=fast"])


def test_a_setting_the_project_owns_says_where_to_set_it():
    with pytest.raises(RecipeError, match=r"stage1\.trl\.max_steps: set by the project from steps"):
        load_recipe("tiny", ["stage1.trl.max_steps=3"])
    with pytest.raises(RecipeError, match=r"stage3\.trl\.bf16: set by the project from precision"):
        load_recipe("tiny", ["stage3.trl.bf16=true"])
    with pytest.raises(RecipeError, match=r"stage4\.rl\.trl\.sync_ref_model: set by the project from ref_model_sync_steps"):
        load_recipe("tiny", ["stage4.rl.trl.sync_ref_model=true"])


@pytest.mark.parametrize("key, moved", [
    ("stage1.loss_type=dapo", "stage1.loss_type moved to stage1.trl.loss_type"),
    ("stage3.learning_rate=1e-4", "stage3.learning_rate moved to stage3.trl.learning_rate"),
    ("stage4.rl.use_vllm=true", "stage4.rl.use_vllm moved to stage4.rl.trl.use_vllm"),
    ("stage2.sft.save_steps=3", "stage2.sft.save_steps moved to stage2.sft.trl.save_steps"),
    ("stage4.helpfulness.learning_rate=1e-4", "stage4.helpfulness.learning_rate moved to stage4.helpfulness.trl.learning_rate"),
    ("distill.control.beta=0.1", "distill.control.beta moved to distill.control.trl.beta"),
])
def test_the_old_shape_says_where_the_key_moved(key, moved):
    with pytest.raises(RecipeError) as e:
        load_recipe("tiny", [key])
    assert str(e.value).startswith(f"{TINY}: {moved}: TRL's")


# -- the skeleton --------------------------------------------------------------------------------


def checkpoint(trainer_dir: Path, step: int, complete: bool = True) -> Path:
    d = trainer_dir / f"checkpoint-{step}"
    d.mkdir(parents=True)
    for f in ("model.safetensors", "optimizer.pt", "scheduler.pt"):
        (d / f).write_bytes(b"x")
    if complete:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return d


def ctx_at(out: Path, resumed: bool, metrics: dict | None = None):
    manifest = SimpleNamespace(data={"metrics": dict(metrics or {})}, save=lambda: None)
    return SimpleNamespace(dir=out, manifest=manifest, resumed=resumed)


def layout(tmp_path: Path) -> dict:
    out = tmp_path / "stage"
    paths = {"trainer": out / "trainer", "final": out / "checkpoint", "log": out / "metrics.jsonl",
             "stale": out / "samples"}
    paths["final"].mkdir(parents=True)
    paths["stale"].mkdir()
    checkpoint(paths["trainer"], 2)
    checkpoint(paths["trainer"], 4)
    checkpoint(paths["trainer"], 6, complete=False)  # cut short by a kill
    paths["log"].write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 7)))
    return paths


def start(ctx, p, **kw):
    return begin(ctx, key="train", final=p["final"], trainer_dir=p["trainer"], logs=[p["log"]], stale=[p["stale"]], **kw)


def test_a_resumed_trainer_starts_from_its_last_complete_checkpoint(tmp_path):
    p = layout(tmp_path)
    forgotten = []
    s = start(ctx_at(tmp_path, resumed=True), p, forget_after=forgotten.append)
    assert (s.done, s.resume_from, s.from_step) == (False, p["trainer"] / "checkpoint-4", 4)
    assert not (p["trainer"] / "checkpoint-6").exists()  # the partial one is deleted, never loaded
    assert [json.loads(line)["step"] for line in p["log"].read_text().splitlines()] == [1, 2, 3, 4]
    assert forgotten == [4] and p["stale"].exists() and p["final"].exists()


def test_a_fresh_trainer_deletes_what_an_earlier_run_left(tmp_path):
    p = layout(tmp_path)
    s = start(ctx_at(tmp_path, resumed=False), p, forget_after=lambda step: pytest.fail("nothing to forget"))
    assert (s.done, s.resume_from, s.from_step) == (False, None, 0)
    assert not any(p[k].exists() for k in ("trainer", "final", "log", "stale"))


def test_a_finished_trainer_is_not_started_again(tmp_path):
    p = layout(tmp_path)
    s = start(ctx_at(tmp_path, resumed=True, metrics={"train": {}}), p)
    assert s.done and all(p[k].exists() for k in ("trainer", "final", "log", "stale"))
    assert (p["trainer"] / "checkpoint-6").exists()  # untouched: nothing runs
    # the same folder with the manifest's record missing (killed before it was written): resumed
    assert not start(ctx_at(tmp_path, resumed=True), p).done


def test_a_trainer_that_cannot_resume_starts_over(tmp_path):
    p = layout(tmp_path)
    s = start(ctx_at(tmp_path, resumed=True), p, resumable=False)
    assert (s.done, s.resume_from) == (False, None) and not p["trainer"].exists() and not p["log"].exists()


def test_precision():
    recipe = SimpleNamespace(device="cpu")
    fp32 = (CPU, torch.float32, False, "fp32")
    assert device_and_precision(recipe, SimpleNamespace(precision="auto")) == fp32
    assert device_and_precision(recipe, SimpleNamespace(precision="fp32")) == fp32
    # bf16 weights: allowed on the CPU, with a warning
    assert device_and_precision(recipe, SimpleNamespace(precision="bf16")) == (CPU, torch.bfloat16, True, "bf16")
    # autocast: fp32 weights, bf16 compute only where the CPU has bf16 kernels
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert device_and_precision(recipe, SimpleNamespace(precision="autocast")) == (
        (CPU, torch.float32, True, "bf16 autocast") if native else fp32)


def test_precision_on_cuda_keeps_fp32_master_weights(monkeypatch):
    """On a GPU, bf16 weights only where DeepSpeed or FSDP keeps fp32 master weights; elsewhere auto is bf16
    autocast over fp32 weights and an explicit bf16 (a pure-bf16 AdamW) is refused, naming the section."""
    import stages.training.skeleton as T

    cuda = torch.device("cuda")
    monkeypatch.setattr(T, "pick_device", lambda _: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    for var in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(var, raising=False)
    recipe = SimpleNamespace(device="cuda")
    assert device_and_precision(recipe, SimpleNamespace(precision="auto")) == (cuda, torch.float32, True, "bf16 autocast")
    with pytest.raises(ValueError, match=r"stage1\.precision: bf16 trains bf16 weights with a bf16 AdamW"):
        device_and_precision(recipe, SimpleNamespace(precision="bf16"), "stage1")
    for var in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.setenv(var, "true")
        assert device_and_precision(recipe, SimpleNamespace(precision="auto")) == (cuda, torch.bfloat16, True, "bf16")
        assert device_and_precision(recipe, SimpleNamespace(precision="bf16")) == (cuda, torch.bfloat16, True, "bf16")
        monkeypatch.delenv(var)


def test_the_process_group_gets_the_recipe_timeout(monkeypatch):
    from datetime import timedelta

    import accelerate

    from stages.pipeline.common import init_distributed

    seen = []
    monkeypatch.setattr(accelerate, "PartialState", lambda **kw: seen.append(kw))
    monkeypatch.setenv("WORLD_SIZE", "2")
    init_distributed(120)
    assert seen == [{"timeout": timedelta(minutes=120)}]
    monkeypatch.setenv("WORLD_SIZE", "1")
    init_distributed(120)
    assert len(seen) == 1  # one process: no process group


def test_epochs_count_every_process(monkeypatch):
    """8 processes each take their own batches: an epoch is an eighth of the steps (reward models, SFT)."""
    from stages.training.skeleton import steps_for_epochs

    cfg = SimpleNamespace(batch_size=8, gradient_accumulation_steps=1)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert steps_for_epochs(1.0, 20000, cfg) == 2500
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert steps_for_epochs(1.0, 20000, cfg) == 313


def test_autocast_trains_fp32_weights_under_bf16_matmuls(chain, tmp_path, monkeypatch):
    """precision: autocast through a real SFT stage: the weights stay fp32, the matmuls run in bf16 (where
    the CPU has bf16 kernels; elsewhere the section falls back to fp32), and the section's attention
    implementation reaches the model."""
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen2 import modeling_qwen2

    import stages.training.skeleton as T
    from stages.pipeline.runner import run_stage
    from stages.training.sft import run_sft
    from tests.micro import chain_recipe

    seen, eager = [], []
    real_linear, real_eager = torch.nn.functional.linear, modeling_qwen2.eager_attention_forward
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, *a, **k: seen.append(x.dtype) or real_linear(x, *a, **k))
    monkeypatch.setattr(modeling_qwen2, "eager_attention_forward", lambda *a, **k: eager.append(1) or real_eager(*a, **k))
    base = str(chain[0] / "tiny" / "base" / "checkpoint")
    for native in (True, False):
        monkeypatch.setattr(T, "native_bf16", lambda device, native=native: native)
        seen.clear(), eager.clear()
        r = chain_recipe(chain, tmp_path, f"native-{native}", ["stage2.sft.precision=autocast",
                                                               "stage2.sft.attn_implementation=eager"])
        m = run_stage(r, "stage2", lambda ctx, r=r: run_sft(ctx, r.stage2.sft, rows=SFT_ROWS, model_ref=base))
        assert m.data["metrics"]["sft_checkpoint"]["precision"] == ("bf16 autocast" if native else "fp32")
        assert AutoModelForCausalLM.from_pretrained(m.checkpoint).dtype == torch.float32
        assert (torch.bfloat16 in seen) is native and torch.float32 in seen  # bf16 matmuls only under autocast
        assert eager  # the section's attention implementation, not the checkpoint's sdpa


SFT_ROWS = [{"messages": [{"role": "user", "content": f"What is {a} + {b}?"},
                          {"role": "assistant", "content": f"<think> {a}+{b} </think> " * (1 + a % 4)
                                                           + f"The final answer is \\boxed{{{a + b}}}."}]}
            for a, b in [(12, 34), (5, 71), (40, 2), (33, 9), (7, 7), (61, 20), (18, 18), (90, 1)]]


def two_sft_steps(small_base, out_dir, overrides: list[str]):
    """(losses, flat weights, first batch) of 2 SFT steps of the small base on SFT_ROWS, batch 4, through
    stage 2's SFT section with ``overrides``, with the collator run_sft would install."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from data.packing import PackedCollator
    from data.templates import CHAT_TEMPLATE
    from stages.training.sft import sft_config

    _, base = small_base
    spec = load_recipe("tiny", ["stage2.sft.batch_size=4", "stage2.sft.trl.logging_steps=1",
                                "stage2.sft.trl.warmup_steps=0", "stage2.sft.trl.learning_rate=1e-2",
                                *overrides]).stage2.sft
    model = AutoModelForCausalLM.from_pretrained(Path(base.path).parent / "checkpoint")
    tok = AutoTokenizer.from_pretrained(Path(base.path).parent / "checkpoint")
    tok.chat_template = CHAT_TEMPLATE
    args, _ = sft_config(spec, output_dir=out_dir, seed=0, device=CPU, bf16=False, steps=2)
    args.save_strategy = "no"
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(SFT_ROWS), processing_class=tok)
    if spec.batching == "packed":
        trainer.data_collator = PackedCollator(tok.pad_token_id, spec.max_length)
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.train()
    return ([h["loss"] for h in trainer.state.log_history if "loss" in h],
            torch.cat([p.detach().flatten() for p in model.parameters()]), batch)


def test_padding_free_sft_trains_exactly_as_padded(small_base, tmp_path):
    """The same rows, seed and steps, with and without padding: the same losses and the same weights (the
    block-diagonal mask from the position ids keeps each example to itself), on fewer tokens."""
    padded_loss, padded_w, padded_batch = two_sft_steps(small_base, tmp_path / "padded", ["stage2.sft.batching=padded"])
    free_loss, free_w, free_batch = two_sft_steps(small_base, tmp_path / "free", [
        "stage2.sft.batching=padded", "stage2.sft.trl.padding_free=true"])
    assert len(padded_loss) == 2 and padded_loss == pytest.approx(free_loss, rel=1e-4)
    assert torch.allclose(padded_w, free_w, atol=1e-5)
    assert free_batch["input_ids"].shape[0] == 1 and "attention_mask" not in free_batch  # one row, no padding
    assert free_batch["input_ids"].numel() == padded_batch["attention_mask"].sum() < padded_batch["input_ids"].numel()


def test_packed_sft_trains_exactly_as_padded(small_base, tmp_path):
    """The same rows, seed and steps, padded (TRL's collator) and packed into rows of at most max_length
    tokens (data/packing.py): the same losses and the same weights, on fewer rows and tokens."""
    padded_loss, padded_w, padded_batch = two_sft_steps(small_base, tmp_path / "padded", ["stage2.sft.batching=padded"])
    packed_loss, packed_w, packed_batch = two_sft_steps(small_base, tmp_path / "packed", [
        "stage2.sft.batching=packed", "stage2.sft.max_length=128"])
    assert len(padded_loss) == 2 and padded_loss == pytest.approx(packed_loss, rel=1e-4)
    assert torch.allclose(padded_w, packed_w, atol=1e-5)
    assert "attention_mask" not in packed_batch and packed_batch["input_ids"].shape[1] <= 128
    assert packed_batch["input_ids"].shape[0] < padded_batch["input_ids"].shape[0]  # examples share rows
    assert packed_batch["input_ids"].numel() < padded_batch["input_ids"].numel()
    # every label the padded batch trains on, the packed one trains on too, and no other
    assert (packed_batch["labels"] != -100).sum() == (padded_batch["labels"][:, 1:] != -100).sum()


def test_packed_collator_keeps_each_example_whole_and_to_itself():
    from data.packing import PackedCollator, first_fit_rows

    assert first_fit_rows([3, 5, 2, 4], 8) == [[1, 0], [3, 2]]  # first fit by decreasing size
    assert first_fit_rows([9, 1], 8) == [[0], [1]]              # too long: a row of its own
    examples = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"input_ids": [4, 5, 6, 7], "labels": [4, 5, 6, 7]},
                {"input_ids": [8], "labels": [8]}]
    out = PackedCollator(pad_token_id=0, length=5)(examples)
    assert out["input_ids"].tolist() == [[4, 5, 6, 7, 8], [1, 2, 3, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
    # first label of each example masked (it would be predicted from the example before); padding masked
    assert out["labels"].tolist() == [[-100, 5, 6, 7, -100], [-100, 2, 3, -100, -100]]


def test_sft_rows_longer_than_max_length_are_dropped_not_truncated():
    from data.templates import CHAT_TEMPLATE
    from data.tokenizer import build_tokenizer
    from stages.training.sft import fit_rows

    tok = build_tokenizer(["What is 1 + 2? <think> 1+2=3 </think> The final answer is \\boxed{3}."] * 4, 300)
    tok.chat_template = CHAT_TEMPLATE
    rows = [{"messages": [{"role": "user", "content": "What is 1 + 2?"},
                          {"role": "assistant", "content": "<think> 1+2=3 </think> " * n + "\\boxed{3}"}]}
            for n in (1, 3, 6)]
    lengths = [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]) for r in rows]
    assert lengths == sorted(lengths) and lengths[0] < lengths[1] < lengths[2]
    kept, dropped = fit_rows(rows, tok, lengths[1])  # exactly the middle row's length: it fits
    assert kept == rows[:2] and dropped == 1
    kept, dropped = fit_rows(rows, tok, lengths[1] - 1)
    assert kept == rows[:1] and dropped == 2


# -- GRPO's training pass in length buckets --------------------------------------------------------


def micro_grpo(tmp_path, reward, prompts, **config):
    """(model, tokenizer, trainer kwargs) for a micro GRPO run of TRL's trainer (fp32, one process)."""
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig

    from data.tokenizer import build_tokenizer

    tok = build_tokenizer([f"What is {a} + {b}? {a + b}" for a in range(30) for b in range(30)], vocab_size=300)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                         max_position_embeddings=128, pad_token_id=tok.pad_token_id))
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, use_cpu=True, bf16=False, report_to="none",
                      **{"per_device_train_batch_size": 8, "max_steps": 1, "max_completion_length": 16, **config})
    return model, tok, dict(model=model, reward_funcs=[reward], args=args, processing_class=tok,
                            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]))


def test_length_buckets_give_the_log_probabilities_and_gradients_of_one_padded_pass(tmp_path):
    """Rows of very different lengths (left-padded prompts, right-padded completions, one completion
    masked whole): the bucketed pass returns TRL's per-token log-probabilities and entropies on every
    completion token, in the rows' order, and the same gradient of a loss over them."""
    from stages.training.grpo import grpo_trainer_class

    model, tok, kw = micro_grpo(tmp_path, lambda completions, **_: [0.0] * len(completions), ["What is 1 + 2?"] * 8)
    plain, bucketed = grpo_trainer_class(1)(**kw), grpo_trainer_class(4)(**kw)
    widths = []
    model.register_forward_pre_hook(lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape),
                                    with_kwargs=True)

    rows, prompt, completion = 8, 6, 12
    ids = torch.randint(3, len(tok), (rows, prompt + completion))
    prompt_real = [6, 3, 5, 2, 6, 4, 1, 6]
    completion_real = [12, 2, 7, 0, 5, 12, 3, 9]  # row 3: every completion token masked
    mask = torch.zeros_like(ids)
    for r in range(rows):
        mask[r, prompt - prompt_real[r]: prompt] = 1
        mask[r, prompt: prompt + completion_real[r]] = 1
    weights = torch.randn(rows, completion)

    def run(trainer):
        model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, completion,
                                                                          compute_entropy=True)
        keep = mask[:, prompt:].bool()
        (logps * weights * keep).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        return logps.detach() * keep, entropies.detach() * keep, grads

    want = run(plain)
    assert widths == [(8, 18)]  # TRL: one pass, every row padded to the longest
    widths.clear()
    got = run(bucketed)
    assert len(widths) == 4 and sum(w[0] for w in widths) == 8 and max(w[1] for w in widths) == 18
    assert min(w[1] for w in widths) < 10  # the short rows' group is padded to its own longest only
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
    for g, w in zip(got[2], want[2], strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)


def test_dynamic_sampling_trains_on_groups_whose_rewards_differ(tmp_path):
    """Prompts of one kind get the same reward on every completion (no gradient); with dynamic sampling
    their groups are replaced by groups of other prompts, the batch keeps its size and trains; without
    it, TRL trains on them."""
    import random

    from stages.training.grpo import _zero_variance_groups, grpo_trainer_class

    rng = random.Random(0)

    def reward(completions, prompts, **_):  # "easy" prompts: every completion 1.0; others: random
        return [1.0 if "1 + 1" in p else rng.random() for p in prompts]

    prompts = ["What is 1 + 1?"] * 6 + [f"What is {a} + 2?" for a in (2, 13, 4, 25, 6, 17)]  # widths differ
    batches = {}
    for rounds in (0, 3):
        model, tok, kw = micro_grpo(tmp_path / str(rounds), reward, prompts, per_device_train_batch_size=16,
                                    max_steps=2, logging_steps=1, seed=rounds)
        trainer = grpo_trainer_class(1, rounds)(**kw)
        inputs = [{"prompt": "What is 1 + 1?"}] * 8 + [{"prompt": "What is 5 + 2?"}] * 8  # 2 of 4 groups all-equal
        trainer.model.train()
        batches[rounds] = trainer._generate_and_score_completions(inputs)
        trainer.train()  # two optimizer steps on such batches run
    plain, dynamic = batches[0], batches[3]
    assert _zero_variance_groups(plain["advantages"], 4).tolist() == [True, True, False, False]
    assert not _zero_variance_groups(dynamic["advantages"], 4).any()
    assert dynamic["completion_ids"].shape[0] == plain["completion_ids"].shape[0] == 16
    assert int(dynamic["num_items_in_batch"]) == int(dynamic["completion_mask"].sum())
    mask = dynamic["prompt_mask"]
    assert (mask[:, 1:] >= mask[:, :-1]).all() and mask[:, -1].all()  # prompts left-padded, as TRL pads them
    assert (dynamic["completion_mask"][:, 1:] <= dynamic["completion_mask"][:, :-1]).all()  # completions right-padded
    prompts_text = tok.batch_decode(dynamic["prompt_ids"], skip_special_tokens=True)
    assert sum("1 + 1" in p for p in prompts_text) == 0  # the all-equal groups were replaced
    assert prompts_text[8:12] == [prompts_text[8]] * 4  # rows stay in whole groups
    logged = [h for h in trainer.state.log_history if "dynamic_sampling/zero_std_after" in h]
    assert len(logged) == 2 and all(h["dynamic_sampling/zero_std_after"] <= h["dynamic_sampling/zero_std_before"]
                                    for h in logged)


def test_dynamic_sampling_needs_group_normalised_advantages():
    assert load_recipe("tiny", ["stage3.dynamic_sampling=2"]).stage3.dynamic_sampling == 2
    for bad in (["stage3.dynamic_sampling=2", "stage3.trl.scale_rewards=batch"],
                ["stage3.dynamic_sampling=2", "stage3.trl.multi_objective_aggregation=normalize_then_sum"],
                ["stage3.dynamic_sampling=-1"]):
        with pytest.raises(RecipeError, match="dynamic_sampling"):
            load_recipe("tiny", bad)


# -- the pass-rate filter of the RL prompt pool ---------------------------------------------------


def test_the_pass_rate_filter_keeps_the_prompts_the_policy_solves_sometimes(tmp_path, monkeypatch):
    """Each pool prompt is sampled ``samples`` times at the section's rollout settings and graded; those
    whose pass rate lies in [min, max] are kept in order, prompts past the pool are dropped, rows
    without an answer (stage 4's general prompts) are kept unscored, and a second call (a resumed run)
    reads the samples on disk instead of sampling again."""
    import eval.generate
    from stages.training.grpo import filter_by_pass_rate

    right = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 4}  # row i: this many of its 4 samples right (pass rates 0 … 1)
    rows = [{"id": f"q{i}", "problem": f"What is {i} + 10?", "answer": str(i + 10)} for i in right]
    rows.insert(3, {"id": "g0", "task": "general", "problem": "Say hello.", "answer": None})
    calls = []

    def fake_make_sampler(backend, **_):
        def sampler(prompts, *, n, temperature, top_p, max_new_tokens, **__):
            calls.append((len(prompts), n, temperature, top_p, max_new_tokens))
            out = []
            for p in prompts:
                i = next(i for i in right if f"What is {i} + 10?" in p)
                out.append([{"text": f"<think> {i} + 10 </think> <answer> {i + 10 if s < right[i] else i + 11} </answer>",
                             "num_tokens": 9, "truncated": False} for s in range(n)])
            return out
        return sampler

    monkeypatch.setattr(eval.generate, "make_sampler", fake_make_sampler)
    r = load_recipe("tiny", ["stage1.pass_rate_filter={pool: 5, samples: 4, min_pass_rate: 0.25, max_pass_rate: 0.75}",
                             "stage1.trl.temperature=0.8", "stage1.max_completion_length=40"])
    kept, summary = filter_by_pass_rate(r, r.stage1, None, None, rows, tmp_path / "pool", "r1_zero", seed=0)
    assert [row["id"] for row in kept] == ["q2", "q3", "g0", "q4"]
    assert {k: summary[k] for k in ("scored", "kept", "too_easy", "too_hard", "not_in_pool", "unscored_kept")} == {
        "scored": 5, "kept": 3, "too_easy": 1, "too_hard": 1, "not_in_pool": 1, "unscored_kept": 1}
    assert summary["pool_pass@1"] == pytest.approx((0 + 1 + 2 + 3 + 4) / 20)
    assert calls == [(5, 4, 0.8, r.stage1.setting("top_p"), 40)]  # the rollouts' settings, the pool only

    monkeypatch.setattr(eval.generate, "make_sampler", lambda *a, **k: lambda *a, **k: pytest.fail("sampled again"))
    again, _ = filter_by_pass_rate(r, r.stage1, None, None, rows, tmp_path / "pool", "r1_zero", seed=0)
    assert again == kept

    r = load_recipe("tiny", ["stage1.pass_rate_filter={samples: 4, min_pass_rate: 1.0, max_pass_rate: 1.0}"])
    monkeypatch.setattr(eval.generate, "make_sampler", fake_make_sampler)
    only_solved, summary = filter_by_pass_rate(r, r.stage1, None, None, rows, tmp_path / "all", "r1_zero", seed=0)
    assert [row["id"] for row in only_solved] == ["g0", "q5", "q6"] and summary["not_in_pool"] == 0

    r = load_recipe("tiny", ["stage1.pass_rate_filter={samples: 4, min_pass_rate: 0.6, max_pass_rate: 0.7}"])
    with pytest.raises(ValueError, match="kept no prompt of 6"):  # the general row alone is no training set
        filter_by_pass_rate(r, r.stage1, None, None, rows, tmp_path / "none", "r1_zero", seed=0)


@pytest.mark.parametrize("bad", ["{samples: 0}", "{pool: 0}", "{min_pass_rate: 0.8, max_pass_rate: 0.5}",
                                 "{max_pass_rate: 1.5}", "{min_pass_rate: -0.1}", "{sample: 4}"])
def test_a_bad_pass_rate_filter_is_refused(bad):
    with pytest.raises((RecipeError, ValueError), match="pass_rate_filter"):
        load_recipe("tiny", [f"stage3.pass_rate_filter={bad}"])


# -- What the terminal shows ---------------------------------------------------------------------


def test_a_trainers_step_rows_go_to_the_stage_log_not_the_terminal(tmp_path, capsys):
    """``StepProgress`` replaces transformers' bar and printed ``{'loss': …}`` rows: the rows reach the stage's
    log file (logger ``r1.steps``), the terminal shows a bar with the latest loss and reward only."""
    import logging

    from transformers import Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from stages.pipeline.runner import setup_logging
    from stages.training.skeleton import StepProgress

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                                         num_key_value_heads=1, intermediate_size=8))
    for disable in (False, True):  # transformers' bar, or its printer when tqdm is off
        trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path / "t"), report_to="none",
                                                              disable_tqdm=disable, use_cpu=True))
        StepProgress.install(trainer)
        kinds = [type(c) for c in trainer.callback_handler.callbacks]
        assert ProgressCallback not in kinds and PrinterCallback not in kinds and StepProgress in kinds
    setup_logging(tmp_path / "stage.log")
    try:
        progress = StepProgress()
        state = SimpleNamespace(is_world_process_zero=True, global_step=3, max_steps=10)
        progress.on_train_begin(None, state, None)
        progress.on_log(None, state, None, logs={"loss": 0.25, "reward": 0.5, "grad_norm": 1.0})
        assert progress.bar.postfix == "loss=0.25, reward=0.5"
        progress.on_train_end(None, state, None)
        logging.getLogger("r1").info("a line of the project's")
        for handler in logging.getLogger().handlers:
            handler.flush()
        out = capsys.readouterr().out
        assert "a line of the project's" in out and "grad_norm" not in out
        assert 'step 3 {"loss": 0.25, "reward": 0.5, "grad_norm": 1.0}' in (tmp_path / "stage.log").read_text()
    finally:
        setup_logging()


def test_the_grpo_step_grpo_py_names_is_trls():
    """grpo.py's header walks one GRPO step through TRL 1.16's methods and overrides two private ones: if a
    TRL upgrade renames or reshapes them, the overrides would silently stop running (the length-bucket and
    dynamic-sampling tests would then compare TRL with itself), so the names, parameters and the loss line
    the header quotes are checked here."""
    import inspect
    import re

    from trl import GRPOTrainer

    from stages.training import grpo

    extended = grpo.grpo_trainer_class(length_buckets=2, dynamic_sampling=1)
    for name in ("_get_per_token_logps_and_entropies", "_generate_and_score_completions"):
        assert name in vars(extended) and name in vars(GRPOTrainer), name  # ours overrides TRL's own
    params = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert params[:8] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                          "compute_entropy", "compute_aux_loss"]
    assert list(inspect.signature(GRPOTrainer._generate_and_score_completions).parameters) == ["self", "inputs"]
    for name in ("training_step", "_prepare_inputs", "_generate", "_calculate_rewards", "compute_loss", "_compute_loss"):
        assert re.search(rf"[`.]{name}``", grpo.__doc__) and callable(getattr(GRPOTrainer, name)), name
    loss_line = "per_token_loss = -torch.min(per_token_loss1, per_token_loss2)"
    assert loss_line in grpo.__doc__ and loss_line in inspect.getsource(GRPOTrainer._compute_loss)


def test_train_section_runs_a_job_in_the_one_order_and_refuses_before_deleting(tmp_path, monkeypatch):
    """stages.training.skeleton.train_section is where the order of every training job is written: a job's
    hooks are called check → begin → started → seed → load → prepare → config → trainer → trained → save →
    metrics → after; a refused tracker (or a job's own check) stops it before ``begin`` deletes anything; a
    finished job only runs ``when_done``."""
    from stages.training import skeleton

    calls = []

    class Job(skeleton.TrainingJob):
        key, part, what, steps = "sft_x", "sft_x", "test SFT", 3
        final, trainer_dir = tmp_path / "x", tmp_path / "x_trainer"

        def __getattribute__(self, name):
            if name in ("check", "started", "load", "prepare", "config", "callbacks", "trainer", "trained",
                        "metrics", "after", "when_done", "forget_after"):
                calls.append(name)
            return object.__getattribute__(self, name)

        def load(self, precision):
            return torch.nn.Linear(1, 1), "tokenizer"

        def config(self, **common):
            return "args", {"output_dir": str(common["output_dir"])}

        def trainer(self, model, tokenizer, args, callbacks):
            return "trainer"

    monkeypatch.setattr(skeleton, "set_seed", lambda seed: calls.append("seed"))
    monkeypatch.setattr(skeleton, "set_attention", lambda model, cfg: calls.append("attention"))
    monkeypatch.setattr(skeleton, "fit", lambda make, start, steps, model: (calls.append(f"fit {make()}"), (model, steps, None))[1])
    monkeypatch.setattr(skeleton, "save_final", lambda model, tok, final: (calls.append("save"), final.mkdir())[0])
    section = SimpleNamespace(seed=None, precision="fp32", attn_implementation="model")
    recipe = SimpleNamespace(seed=0, device="cpu", name="tiny", stage="s", hash=lambda: "h",
                             tracking=SimpleNamespace(report_to="none", integrations=[], project="p"))
    ctx = ctx_at(tmp_path, resumed=False)
    ctx.recipe, ctx.stage = recipe, "stage2"
    ctx.manifest.update_metrics = lambda **kw: (calls.append("manifest"), ctx.manifest.data["metrics"].update(kw))
    ctx.manifest.path = tmp_path / "manifest.json"

    assert skeleton.train_section(ctx, section, Job()) == tmp_path / "x"
    assert [c for c in calls if c != "forget_after"] == [
        "check", "started", "seed", "load", "attention", "prepare", "config", "trainer", "callbacks", "fit trainer",
        "trained", "save", "metrics", "manifest", "after"]
    assert ctx.manifest.data["metrics"]["sft_x"]["precision"] == "fp32"

    (tmp_path / "x_trainer").mkdir()  # an earlier run's outputs: a refused tracker must not delete them
    recipe.tracking = SimpleNamespace(report_to="nope", integrations=["nope"], project="p")
    with pytest.raises(ValueError, match="tracking.report_to: nope is not installed"):
        skeleton.train_section(ctx, section, Job())
    assert (tmp_path / "x").is_dir() and (tmp_path / "x_trainer").is_dir()

    calls.clear()  # finished: the manifest has its record and the folder exists
    recipe.tracking = SimpleNamespace(report_to="none", integrations=[], project="p")
    ctx.resumed = True
    assert skeleton.train_section(ctx, section, Job()) == tmp_path / "x"
    assert [c for c in calls if c != "forget_after"] == ["check", "started", "when_done"]
