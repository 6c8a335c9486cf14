"""The reward-model trainer (stages/training/reward_model.py) on the shared small base: trained on the
tiny world's own helpfulness pairs (the reference answer over a wrong answer of the right shape, an
off-topic one, a truncated one or a needless refusal, data/general.py), it ranks the chosen response first
on pairs of prompts it never saw far more often than the untrained model with the same scalar head; it
records its metrics, and a resumed stage does not train a finished model again; one interrupted before
its metrics were recorded is trained again."""

import json
from pathlib import Path

import pytest
import torch

from data.general import OFF_TOPIC, REFUSAL, general_rows, helpfulness_pairs
from stages.pipeline.common import set_seed
from stages.pipeline.manifest import Manifest
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import StageContext
from stages.training.reward_model import RewardScorer, train_reward_model
from tests.micro import SMALL

pytestmark = pytest.mark.train  # every test here trains a model

RM = ["stage4.helpfulness.epochs=4", "stage4.helpfulness.batch_size=8", "stage4.helpfulness.max_length=64",
      "stage4.helpfulness.trl.learning_rate=3e-3", "stage4.helpfulness.trl.logging_steps=1"]


def train_pairs(seed: int) -> list[dict]:
    return helpfulness_pairs(general_rows(TRAIN_PROMPTS, "train", seed, harmful_share=0.0), seed)


TRAIN_PROMPTS = 96
def context(recipe, stage_dir: Path, resumed: bool) -> StageContext:
    return StageContext(recipe, "stage4", stage_dir, Manifest.start(stage_dir, "stage4", recipe, resumed=resumed),
                        None, resumed)


def pair_accuracy(scorer, pairs: list[dict]) -> float:
    """The share of pairs whose chosen response the scorer puts above the rejected one."""
    users = [p["chosen"][0]["content"] for p in pairs]
    chosen = scorer(users, [p["chosen"][1]["content"] for p in pairs])
    rejected = scorer(users, [p["rejected"][1]["content"] for p in pairs])
    return sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(pairs)


def kind_of(p: dict) -> str:
    """Which unhelpful answer a helpfulness pair rejects (data.general.unhelpful_responses)."""
    chosen, rejected = p["chosen"][1]["content"], p["rejected"][1]["content"]
    if rejected == REFUSAL:
        return "refusal"
    if rejected in OFF_TOPIC:
        return "off-topic"
    return "truncated" if chosen.startswith(rejected) else "wrong"


def untrained_scorer(base: str, seed: int):
    """The base with the scalar head the trainer starts from (same seed), as a RewardScorer-like callable."""
    from transformers import AutoModelForSequenceClassification

    from stages.pipeline.common import load_tokenizer

    tok = load_tokenizer(base)
    set_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1).eval()
    model.config.pad_token_id = tok.pad_token_id

    def score(users: list[str], responses: list[str]) -> list[float]:
        texts = [tok.apply_chat_template([{"role": "user", "content": u}, {"role": "assistant", "content": r}],
                                         tokenize=False) for u, r in zip(users, responses, strict=True)]
        with torch.inference_mode():
            return [model(**tok(t, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item() for t in texts]
    return score


@pytest.fixture(scope="module")
def trained(small_base, tmp_path_factory):
    """A reward model trained from the small base on the tiny world's helpfulness pairs, in a stage folder
    of its own."""
    recipe0, base_manifest = small_base
    base = base_manifest.checkpoint
    root = tmp_path_factory.mktemp("rm")
    recipe = load_recipe("tiny", SMALL + RM + [f"run_root={root}"])
    calls = []

    def build():
        calls.append(1)
        return train_pairs(recipe.seed)

    stage_dir = recipe.stage_dir("stage4")
    ctx = context(recipe, stage_dir, resumed=False)
    final = train_reward_model(ctx, recipe.stage4.helpfulness, pairs=build, init_ref=base, name="rm_helpfulness")
    return recipe, ctx, final, base, calls


def test_it_trains_saves_and_ranks_the_chosen_response_first(trained):
    recipe, ctx, final, base, calls = trained
    assert calls == [1]
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    assert not (final.parent / "rm_helpfulness_trainer").exists() or not any(
        (final.parent / "rm_helpfulness_trainer").glob("checkpoint-*"))  # reward models save no checkpoints
    record = ctx.manifest.data["metrics"]["rm_helpfulness"]
    assert record["pairs_train"] + record["pairs_held_out"] == TRAIN_PROMPTS
    assert record["loss_last"] < record["loss_first"]
    assert record["trl"]["learning_rate"] == 3e-3 and record["trl"]["save_strategy"] == "no"
    on_disk = json.loads((ctx.dir / "manifest.json").read_text())["metrics"]["rm_helpfulness"]
    assert on_disk["steps"] == record["steps"] > 0
    # pairs of the test split's prompts (none in training) by the kind of unhelpful answer rejected: the
    # untrained model prefers refusals and off-topic answers to the reference, the trained one ranks them
    # right, and it ranks more of all pairs right by far. (A wrong answer of the right shape it ranks at about
    # chance: it learnt the answers' form, not their arithmetic; docs/experiments.md, "The reward models".)
    test = helpfulness_pairs(general_rows(60, "test", recipe.seed, harmful_share=0.0), recipe.seed)
    scorers = {"trained": RewardScorer(str(final), device=torch.device("cpu"), max_length=64),
               "untrained": untrained_scorer(base, recipe.seed)}
    acc = {(name, kind): pair_accuracy(scorer, [p for p in test if kind_of(p) == kind])
           for name, scorer in scorers.items() for kind in ("refusal", "off-topic", "truncated", "wrong")
           if any(kind_of(p) == kind for p in test)}
    for kind in ("refusal", "off-topic"):
        assert acc["trained", kind] >= 0.9 and acc["untrained", kind] <= 0.5, acc
    overall = {name: pair_accuracy(scorer, test) for name, scorer in scorers.items()}
    assert overall["trained"] - overall["untrained"] >= 0.3, overall


def test_a_finished_reward_model_is_not_trained_again(trained):
    recipe, ctx, final, base, _ = trained
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

    recipe, ctx, final, base, _ = trained
    stage_dir = tmp_path / "stage4"
    shutil.copytree(ctx.dir, stage_dir)
    m = Manifest.load(stage_dir)
    del m.data["metrics"]["rm_helpfulness"]
    m.save()
    (stage_dir / "rm_helpfulness_metrics.jsonl").write_text('{"step": 99, "loss": 5.0}\n{"ste')  # torn by the kill
    calls = []

    def build():
        calls.append(1)
        return train_pairs(recipe.seed)

    resumed = context(recipe, stage_dir, resumed=True)
    out = train_reward_model(resumed, recipe.stage4.helpfulness, pairs=build, init_ref=base, name="rm_helpfulness")
    assert calls == [1] and out == stage_dir / "rm_helpfulness"
    record = resumed.manifest.data["metrics"]["rm_helpfulness"]
    assert record["loss_first"] != 5.0
    first = ctx.manifest.data["metrics"]["rm_helpfulness"]
    same = ("pairs_train", "pairs_held_out", "steps", "loss_first", "loss_last")
    assert {k: record[k] for k in same} == {k: first[k] for k in same}  # the same training, from the start
