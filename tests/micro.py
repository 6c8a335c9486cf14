"""The micro recipes the tests build on: the tiny recipe shrunk so that every stage runs in seconds.

Plain data and helpers (fixtures are in conftest.py): ``SMALL`` for a session-wide micro base,
``MICRO`` (base + stage 1), ``MICRO23`` (stages 2-3, with ``USER_ROWS``, a user cold-start set) and
``MICRO4`` (stage 4 and distillation); :func:`recipe` loads the tiny recipe with them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from stages.pipeline.recipe import load_recipe

# A base model small enough to build in seconds (in the run folder: base.release=null), shared by the tests
# of every stage.
SMALL = [
    "base.release=null", "base.architecture.hidden_size=32", "base.architecture.num_hidden_layers=2",
    "base.architecture.num_attention_heads=2", "base.architecture.num_key_value_heads=2",
    "base.architecture.intermediate_size=64", "base.pretrain.steps=60", "base.pretrain.batch_size=32",
    "base.pretrain.warmup_steps=5", "base.pretrain.log_every=10", "base.pretrain.learning_rate=1e-2",
    "data.test.limit=6", "eval.k=2", "eval.max_new_tokens=24", "task_world.n_train=50",
]

MICRO = [
    "base.release=null", "base.pretrain.steps=30", "base.pretrain.batch_size=32", "base.pretrain.warmup_steps=5", "base.architecture.hidden_size=32",
    "base.architecture.num_hidden_layers=1", "base.architecture.num_attention_heads=2",
    "base.architecture.num_key_value_heads=2", "base.architecture.intermediate_size=64",
    "task_world.n_train=200", "task_world.n_test=20",
    "data.test.limit=8", "eval.k=2", "eval.max_new_tokens=32", "eval.benchmarks=[]",
    "stage1.steps=4", "stage1.prompts_per_step=2", "stage1.num_generations=4", "stage1.max_completion_length=24",
    "stage1.trl.warmup_steps=0", "stage1.trl.learning_rate=1e-3", "stage1.trl.save_steps=2", "stage1.sample_every=2",
    "stage1.rewards={format: 1.0, accuracy: 1.0, overlong: 1.0}", "stage1.overlong_max_length=24",
    "stage1.overlong_buffer=20",
]

# A user cold-start set: stage 1 of a micro model rarely produces correct answers, and the user set
# is a documented input anyway. Every reason to drop is exercised by tests/test_cold_start.py.
USER_ROWS = [{"id": f"u{a}{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b),
              "reasoning": f"{a % 10}+{b % 10}={a % 10 + b % 10} write {(a % 10 + b % 10) % 10}; answer {a + b}"}
             for a, b in [(12, 34), (21, 45), (33, 41), (52, 17), (60, 29), (44, 44), (15, 72), (81, 13)]]
MICRO23 = [
    "stage2.sft.epochs=2", "stage2.sft.batch_size=4", "stage2.sft.trl.learning_rate=3e-3", "stage2.sft.trl.logging_steps=1",
    "stage2.sft.trl.save_steps=2", "stage2.sft.max_length=128", "stage2.cold_start.max_samples=6",
    "stage2.cold_start.sample={prompts: {source: task_world, split: train, limit: 8}, samples_per_prompt: 2, "
    "max_new_tokens: 24, shard_size: 4, batch_size: 16}",
    "stage3.steps=2", "stage3.prompts_per_step=2", "stage3.num_generations=4", "stage3.max_completion_length=24",
    "stage3.trl.save_steps=2", "stage3.sample_every=1", "stage1.eval_steps=[2]",
]

MICRO4 = [
    "stage4.rejection.prompts={source: task_world, split: train, limit: 12}", "stage4.rejection.samples_per_prompt=2",
    "stage4.rejection.shard_size=4", "stage4.rejection.max_new_tokens=24",
    "stage4.general.procedural_rows=200", "stage4.general.eval_prompts=10", "stage4.general.reasoning_per_general=3.0",
    "stage4.sft.epochs=1", "stage4.sft.batch_size=8", "stage4.sft.max_length=128", "stage4.sft.trl.logging_steps=1",
    "stage4.sft.trl.save_steps=100",
    "stage4.helpfulness.pairs=40", "stage4.helpfulness.batch_size=8", "stage4.helpfulness.max_length=64",
    "stage4.harmlessness.pairs=40", "stage4.harmlessness.batch_size=8", "stage4.harmlessness.max_length=64",
    "stage4.helpfulness.on_policy_prompts=20", "stage4.harmlessness.on_policy_prompts=20",
    "stage4.rl.steps=2", "stage4.rl.prompts_per_step=2", "stage4.rl.num_generations=4",
    "stage4.rl.max_completion_length=24", "stage4.rl.trl.save_steps=1", "stage4.rl.sample_every=1",
    "stage4.rl.general_share=0.5",
    "distill.students=[{name: s1, architecture: {hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, "
    "num_key_value_heads: 2, intermediate_size: 32, max_position_embeddings: 512, tokenizer_vocab_size: 640}, "
    "pretrain_steps: 10}]",
    "distill.budget_steps=2", "distill.sft.epochs=null",
    "distill.sft.batch_size=8", "distill.sft.max_length=128", "distill.sft.trl.save_steps=100",
    "distill.control.steps=2", "distill.control.prompts_per_step=2", "distill.control.num_generations=4",
    "distill.control.max_completion_length=24", "distill.control.trl.save_steps=1",
]


def recipe(run_root: Path, name: str = "tiny", extra: list[str] = ()):
    """The tiny recipe with ``MICRO`` (and ``extra``) under ``run_root/name``."""
    return load_recipe("tiny", [f"run_root={run_root}", f"name={name}", *MICRO, *extra])


def with_base(base_root: Path, root: Path, name: str) -> Path:
    """A run folder ``root/name`` whose base is a copy of ``base_root``'s base stage."""
    shutil.copytree(base_root / "tiny" / "base", root / name / "base")
    return root


def chain_recipe(chain, tmp_path, name, extra=()):
    """A run folder ``tmp_path/name`` holding copies of the ``chain`` fixture's base and stage 1, and its
    recipe (``MICRO23`` and the user cold-start set)."""
    root, user = chain
    for stage in ("base", "stage1"):
        shutil.copytree(root / "tiny" / stage, tmp_path / name / stage)  # manifests keep naming the originals
    return recipe(tmp_path, name, [*MICRO23, f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}",
                                   *extra])

# A micro base that vLLM's CPU attention takes (head_dim 32: it refuses 16), for tests/test_vllm.py.
VLLM_BASE = [
    "base.release=null", "base.architecture.hidden_size=64", "base.architecture.num_hidden_layers=2",
    "base.architecture.num_attention_heads=2", "base.architecture.num_key_value_heads=2",
    "base.architecture.intermediate_size=128", "base.pretrain.steps=80", "base.pretrain.batch_size=32",
    "base.pretrain.warmup_steps=10", "base.pretrain.log_every=50", "base.pretrain.learning_rate=1e-2",
    "base.pretrain.bf16_autocast=false",  # fp32 on every CPU: under bf16 autocast an EPYC drew a base whose greedy answers end at once
    "task_world.n_train=200", "data.test.limit=20", "eval.k=2", "eval.max_new_tokens=32", "eval.benchmarks=[]",
]
