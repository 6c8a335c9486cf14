"""Stage 4 on a micro chain (base → 1 → 2 → 3 → 4): every sub-step writes its output and manifest entry,
and a stage interrupted in its last sub-step resumes there without redoing the others.

A micro stage-3 model almost never answers correctly, so the rejection sampler's model is replaced by
one that answers arithmetic prompts correctly (general prompts still go to the real model): this
tests the stage's wiring; learning is measured by ``make stage4`` on the tiny default."""


import pytest
from transformers import TrainerCallback

import stages.distill
import stages.stage2_cold_start
import stages.stage3_reasoning_rl
import stages.stage4_final
from data.jsonl import read_jsonl
from eval.report import build_report
from stages.manifest import Manifest
from stages.runner import run_stage
from tests.oracle import oracle_load_sampler
from tests.test_stage23 import chain, chain_recipe  # noqa: F401 (the module fixture)

MICRO4 = [
    "stage4.rejection.prompts={source: task_world, split: train, limit: 12}", "stage4.rejection.samples_per_prompt=2",
    "stage4.rejection.shard_size=4", "stage4.rejection.max_new_tokens=24",
    "stage4.general.procedural_rows=200", "stage4.general.eval_prompts=10", "stage4.general.reasoning_per_general=3.0",
    "stage4.sft.epochs=1", "stage4.sft.batch_size=8", "stage4.sft.max_length=128", "stage4.sft.logging_steps=1",
    "stage4.sft.save_steps=100",
    "stage4.helpfulness.pairs=40", "stage4.helpfulness.batch_size=8", "stage4.helpfulness.max_length=64",
    "stage4.harmlessness.pairs=40", "stage4.harmlessness.batch_size=8", "stage4.harmlessness.max_length=64",
    "stage4.rl.steps=2", "stage4.rl.prompts_per_step=2", "stage4.rl.num_generations=4",
    "stage4.rl.max_completion_length=24", "stage4.rl.save_steps=1", "stage4.rl.sample_every=1",
    "stage4.rl.general_share=0.5",
    "distill.students=[{name: s1, architecture: {hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, "
    "num_key_value_heads: 2, intermediate_size: 32, max_position_embeddings: 512, tokenizer_vocab_size: 640}, "
    "pretrain_steps: 10}]",
    "distill.sft.epochs=1", "distill.sft.batch_size=8", "distill.sft.max_length=128", "distill.sft.save_steps=100",
    "distill.control.steps=2", "distill.control.prompts_per_step=2", "distill.control.num_generations=4",
    "distill.control.max_completion_length=24", "distill.control.save_steps=1",
]


class Interrupt(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        raise KeyboardInterrupt("interrupted in the final RL")


@pytest.fixture
def oracle_sampler(monkeypatch):
    calls = []
    monkeypatch.setattr(stages.stage4_final, "load_sampler", oracle_load_sampler(stages.stage4_final.load_sampler, calls))
    return calls


def test_stage4_then_distillation(chain, tmp_path, oracle_sampler):  # noqa: F811
    r = chain_recipe(chain, tmp_path, "s4", MICRO4)
    assert run_stage(r, "stage2", stages.stage2_cold_start.run, parent_stage="stage1").status == "complete"
    assert run_stage(r, "stage3", stages.stage3_reasoning_rl.run, parent_stage="stage2").status == "complete"

    with pytest.raises(KeyboardInterrupt):
        run_stage(r, "stage4", lambda ctx: stages.stage4_final.run(ctx, callbacks=[Interrupt()]),
                  parent_stage="stage3")
    d4 = r.stage_dir("stage4")
    m = Manifest.load(d4)
    assert m.status == "failed"
    assert {k: v["status"] for k, v in m.data["metrics"]["substeps"].items()} == {
        "rejection": "complete", "sft": "complete", "reward_models": "complete", "final_rl": "running"}
    rej = m.data["metrics"]["rejection"]
    assert rej["prompts"] == 12 and rej["kept"] == 12 and rej["dropped"]["duplicate"] == 12  # 2 identical samples
    assert len(list((d4 / "rejection").glob("shard-*.jsonl"))) == 3
    mix = read_jsonl(d4 / "sft_mix.jsonl")
    assert m.data["metrics"]["sft_mix"] == {**m.data["metrics"]["sft_mix"], "reasoning": 12, "general": 4}
    assert all("<think>" not in x["messages"][1]["content"] for x in mix if x["task"] == "general")
    for name in ("rm_helpfulness", "rm_harmlessness"):
        assert (d4 / name / "config.json").exists() and m.data["metrics"][name]["held_out_pair_accuracy"] is not None
    assert m.data["inputs"]["model"]["ref"] == str(chain[0] / "tiny" / "base" / "checkpoint")  # SFT of the base
    sampled = len(oracle_sampler)

    m = run_stage(r, "stage4", stages.stage4_final.run, parent_stage="stage3")
    assert m.status == "complete" and m.data["resumes"]
    assert len(oracle_sampler) == sampled  # the rejection sub-step was not redone
    assert m.data["metrics"]["train"]["steps"] == 2
    assert all(v["status"] == "complete" for v in m.data["metrics"]["substeps"].values())
    for key in ("general_sft", "general_final"):
        g = m.data["metrics"][key]
        assert g["samples"] == 10 * r.eval.k and 0 <= g["harmful_rate"] <= 1 and g["helpfulness_score"] is not None
    rewards = {k for row in read_jsonl(d4 / "metrics.jsonl") for k in row.get("rewards", {})}
    assert {"accuracy", "helpfulness", "harmlessness"} <= rewards
    assert m.verify_checkpoint() == []

    # distillation: the student is built, fine-tuned on the curated set, evaluated; then the RL control
    md = run_stage(r, "distill", stages.distill.run, parent_stage="stage4")
    student = md.data["metrics"]["students"]["s1"]
    assert md.status == "complete" and student["sft"]["rows"] == 16 and "pass@1" in student["eval"]
    base_params = Manifest.load(chain[0] / "tiny" / "base").data["metrics"]["pretrain"]["parameters"]
    assert student["pretrain"]["parameters"] < 0.5 * base_params  # a smaller model than the teacher's base
    assert md.checkpoint == str(r.stage_dir("distill") / "s1" / "sft")
    mc = run_stage(r, "distill_rl", stages.distill.run_control, parent_stage="distill")
    assert mc.status == "complete" and mc.data["metrics"]["train"]["steps"] == 2
    assert mc.data["inputs"]["model"]["ref"] == str(r.stage_dir("distill") / "s1" / "base")

    text = build_report(r.stage_dir("base").parent).read_text()  # every stage of the chain, one page
    assert "student s1 (distilled)" in text and "RL from its base (2 steps)" in text
    assert "| missing |" not in text.split("## Findings")[0]


def test_preference_datasets_in_every_trl_form(tmp_path):
    """Real recipes name preference datasets: conversational, with an explicit prompt, or plain text."""
    import json
    from types import SimpleNamespace

    from stages.stage4_final import _preference_rows

    user = [{"role": "user", "content": "hi"}]
    rows = [
        {"chosen": user + [{"role": "assistant", "content": "hello"}], "rejected": user + [{"role": "assistant", "content": "go"}]},
        {"prompt": user, "chosen": [{"role": "assistant", "content": "hey"}], "rejected": [{"role": "assistant", "content": "no"}]},
        {"prompt": "hi", "chosen": "hello there", "rejected": "bye"},
        {"prompt": "hi", "chosen": "", "rejected": "bye"},  # no chosen response: skipped
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = _preference_rows(SimpleNamespace(source="jsonl", name=str(path), limit=None), None)
    assert len(pairs) == 3
    for p in pairs:
        assert p["chosen"][0] == user[0] and p["rejected"][0] == user[0]
        assert p["chosen"][-1]["role"] == "assistant" and p["chosen"][-1]["content"] != p["rejected"][-1]["content"]
    assert len(_preference_rows(SimpleNamespace(source="jsonl", name=str(path), limit=2), None)) == 2
