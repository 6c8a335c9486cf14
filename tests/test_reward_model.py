"""The reward-model trainer (stages/training/reward_model.py) on the shared small base: it trains, saves a model
whose scorer ranks a chosen response above a rejected one after training on a trivially separable set
(the untrained model ranked them the other way), records its metrics, and a resumed stage does not train
a finished model again; one interrupted before its metrics were recorded is trained again."""

import json
from pathlib import Path

import pytest
import torch

from stages.pipeline.common import set_seed
from stages.pipeline.manifest import Manifest
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import StageContext
from stages.training.reward_model import RewardScorer, train_reward_model
from tests.micro import SMALL

pytestmark = pytest.mark.train  # every test here trains a model

GOOD, BAD = "The final answer is 12.", "no no no"
RM = ["stage4.helpfulness.epochs=4", "stage4.helpfulness.batch_size=8", "stage4.helpfulness.max_length=64",
      "stage4.helpfulness.trl.learning_rate=3e-3", "stage4.helpfulness.trl.logging_steps=1"]


def pair(user: str, chosen: str, rejected: str) -> dict:
    return {"chosen": [{"role": "user", "content": user}, {"role": "assistant", "content": chosen}],
            "rejected": [{"role": "user", "content": user}, {"role": "assistant", "content": rejected}]}


def context(recipe, stage_dir: Path, resumed: bool) -> StageContext:
    return StageContext(recipe, "stage4", stage_dir, Manifest.start(stage_dir, "stage4", recipe, resumed=resumed),
                        None, resumed)


def untrained_margin(base: str, seed: int) -> float:
    """score(GOOD) - score(BAD) of the base with the scalar head the trainer starts from (same seed)."""
    from transformers import AutoModelForSequenceClassification

    from stages.pipeline.common import load_tokenizer

    tok = load_tokenizer(base)
    set_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1).eval()
    model.config.pad_token_id = tok.pad_token_id
    texts = [tok.apply_chat_template([{"role": "user", "content": "What is 5 + 7?"}, {"role": "assistant", "content": r}],
                                     tokenize=False) for r in (GOOD, BAD)]
    with torch.inference_mode():
        scores = [model(**tok(t, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item() for t in texts]
    return scores[0] - scores[1]


@pytest.fixture(scope="module")
def trained(small_base, tmp_path_factory):
    """A reward model trained from the small base, in a stage folder of its own; the pairs prefer the
    response the untrained model scores lower, so only training can rank them right."""
    recipe0, base_manifest = small_base
    base = base_manifest.checkpoint
    root = tmp_path_factory.mktemp("rm")
    recipe = load_recipe("tiny", SMALL + RM + [f"run_root={root}"])
    chosen, rejected = (GOOD, BAD) if untrained_margin(base, recipe.seed) < 0 else (BAD, GOOD)
    pairs = [pair(f"What is {a} + {b}?", chosen, rejected) for a in range(2, 9) for b in range(3, 9)]  # 42 pairs
    calls = []

    def build():
        calls.append(1)
        return pairs

    stage_dir = recipe.stage_dir("stage4")
    ctx = context(recipe, stage_dir, resumed=False)
    final = train_reward_model(ctx, recipe.stage4.helpfulness, pairs=build, init_ref=base, name="rm_helpfulness")
    return recipe, ctx, final, base, (chosen, rejected), calls


def test_it_trains_saves_and_ranks_the_chosen_response_first(trained):
    recipe, ctx, final, _, (chosen, rejected), calls = trained
    assert calls == [1]
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    assert not (final.parent / "rm_helpfulness_trainer").exists() or not any(
        (final.parent / "rm_helpfulness_trainer").glob("checkpoint-*"))  # reward models save no checkpoints
    record = ctx.manifest.data["metrics"]["rm_helpfulness"]
    assert record["pairs_train"] + record["pairs_held_out"] == 42 and record["held_out_pair_accuracy"] == 1.0
    assert record["loss_last"] < record["loss_first"]
    assert record["trl"]["learning_rate"] == 3e-3 and record["trl"]["save_strategy"] == "no"
    on_disk = json.loads((ctx.dir / "manifest.json").read_text())["metrics"]["rm_helpfulness"]
    assert on_disk["steps"] == record["steps"] > 0
    scorer = RewardScorer(str(final), device=torch.device("cpu"), max_length=64)
    users = [f"What is {a} + {b}?" for a, b in [(11, 2), (4, 13), (20, 20)]]  # prompts it never saw
    good, bad = scorer(users, [chosen] * 3), scorer(users, [rejected] * 3)
    assert all(g > b for g, b in zip(good, bad, strict=True)), (good, bad)


def test_a_finished_reward_model_is_not_trained_again(trained):
    recipe, ctx, final, base, _, _ = trained
    files = {p.name: p.stat().st_mtime_ns for p in final.iterdir()}

    def must_not_build():
        raise AssertionError("pairs were built again: the finished reward model is being retrained")

    resumed = context(recipe, ctx.dir, resumed=True)
    assert "rm_helpfulness" in resumed.manifest.data["metrics"]
    again = train_reward_model(resumed, recipe.stage4.helpfulness, pairs=must_not_build, init_ref=base,
                               name="rm_helpfulness")
    assert again == final and {p.name: p.stat().st_mtime_ns for p in final.iterdir()} == files


def test_one_interrupted_before_its_metrics_is_trained_again(trained, tmp_path):
    """Killed after its save but before its metrics were recorded: the model on disk is not trusted."""
    import shutil

    recipe, ctx, final, base, (chosen, rejected), _ = trained
    stage_dir = tmp_path / "stage4"
    shutil.copytree(ctx.dir, stage_dir)
    m = Manifest.load(stage_dir)
    del m.data["metrics"]["rm_helpfulness"]
    m.save()
    (stage_dir / "rm_helpfulness_metrics.jsonl").write_text('{"step": 99, "loss": 5.0}\n{"ste')  # torn by the kill
    calls = []

    def build():
        calls.append(1)
        return [pair(f"What is {a} + {b}?", chosen, rejected) for a in range(2, 9) for b in range(3, 9)]

    resumed = context(recipe, stage_dir, resumed=True)
    out = train_reward_model(resumed, recipe.stage4.helpfulness, pairs=build, init_ref=base, name="rm_helpfulness")
    assert calls == [1] and out == stage_dir / "rm_helpfulness"
    record = resumed.manifest.data["metrics"]["rm_helpfulness"]
    assert record["loss_first"] != 5.0 and record["held_out_pair_accuracy"] == 1.0
    first = ctx.manifest.data["metrics"]["rm_helpfulness"]
    same = ("pairs_train", "pairs_held_out", "steps", "loss_first", "loss_last")
    assert {k: record[k] for k in same} == {k: first[k] for k in same}  # the same training, from the start
