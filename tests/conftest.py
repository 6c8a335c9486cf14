"""Test-wide settings: one intra-op thread per test process. The models under test are tiny, so
threads buy little, and on a 2-core machine shared with grading workers and subprocesses,
oversubscribed OpenMP threads made steps 10× slower."""

import os

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the subprocesses tests start

# A base model small enough to build in seconds: shared by the tests of every stage.
SMALL = [
    "base.architecture.hidden_size=32", "base.architecture.num_hidden_layers=2",
    "base.architecture.num_attention_heads=2", "base.architecture.num_key_value_heads=2",
    "base.architecture.intermediate_size=64", "base.pretrain.steps=60", "base.pretrain.batch_size=32",
    "base.pretrain.warmup_steps=5", "base.pretrain.log_every=10", "base.pretrain.learning_rate=1e-2",
    "data.test.limit=6", "eval.k=2", "eval.max_new_tokens=24", "task_world.n_train=50",
]


@pytest.fixture(scope="session")
def small_base(tmp_path_factory):
    from stages.base import run
    from stages.recipe import load_recipe
    from stages.runner import run_stage

    root = tmp_path_factory.mktemp("runs")
    recipe = load_recipe("tiny", SMALL + [f"run_root={root}"])
    manifest = run_stage(recipe, "base", run)
    return recipe, manifest


