"""Stages 2 and 3 on a micro chain: base → stage 1 → cold-start SFT (full and LoRA) → reasoning RL."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import stages.base
import stages.stage1_zero
import stages.stage2_cold_start
import stages.stage3_reasoning_rl
from data.jsonl import read_jsonl_tolerant
from data.templates import end_of_turn_token, is_readable_response
from eval.stats import per_problem
from stages.pipeline.common import load_tokenizer
from stages.pipeline.manifest import ManifestError
from stages.pipeline.runner import run_stage
from stages.training.sft import run_sft
from tests.micro import chain_recipe

pytestmark = pytest.mark.train  # every test here trains a model


def turn_nll(model_path: str, template_from: str, rows: list[dict]) -> dict[str, float]:
    """Mean negative log-likelihood per token of the rows' assistant turns, and of the rest, under a model,
    the conversations written in the chat template of ``template_from`` (the stage-2 checkpoint's)."""
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(template_from)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    sums, counts = {"user": 0.0, "assistant": 0.0}, {"user": 0, "assistant": 0}
    for row in rows:
        out = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids = torch.tensor([out["input_ids"]])
        mask = torch.tensor(out["assistant_masks"][1:], dtype=torch.bool)  # the token predicted at each position
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
        sums["assistant"] -= logp[mask].sum().item()
        counts["assistant"] += int(mask.sum())
        sums["user"] -= logp[~mask].sum().item()
        counts["user"] += int((~mask).sum())
    return {k: sums[k] / counts[k] for k in sums}


def test_stage2_then_stage3(chain, tmp_path):
    r = chain_recipe(chain, tmp_path, "full")
    m2 = run_stage(r, "stage2", stages.stage2_cold_start.run)
    d2 = r.stage_dir("stage2")
    assert m2.status == "complete" and m2.data["parent"]["stage"] == "stage1"
    cs = m2.data["metrics"]["cold_start"]
    assert cs["candidates_user"] == 8 and cs["kept"] == 6 and cs["dropped"]["over_cap"] >= 2  # max_samples 6
    assert sum(cs["dropped"].values()) + cs["kept"] == cs["candidates_user"] + cs["candidates_stage1"] + cs["candidates_sampled"]
    sampling = m2.data["metrics"]["cold_start_sampling"]  # the stage-1 model sampled afresh: 8 prompts × 2
    assert sampling["samples"] == 16 and sampling["kept"] == cs["candidates_sampled"]
    assert len(list((d2 / "stage1_samples").glob("shard-*.jsonl"))) == 2
    rows = read_jsonl_tolerant(d2 / "cold_start.jsonl")
    assert len(rows) == 6 and all(is_readable_response(x["messages"][1]["content"]) for x in rows)
    # the *base* model was fine-tuned, not the stage-1 model
    assert m2.data["inputs"]["model"]["ref"] == "../base/checkpoint"  # (recorded relative to the stage folder)
    sft = m2.data["metrics"]["sft_checkpoint"]
    assert sft["steps"] == 4 and sft["loss_last"] < sft["loss_first"]  # 6 rows / batch 4 → 2 steps × 2 epochs
    # what the SFT learnt, measured apart from the trainer's log (a falling logged loss can be a change of
    # batch): the responses it trained on became likelier under the saved stage-2 model than under the base,
    # per response token (about 5.7 → 4.4 nats here)
    base_ckpt = str(chain[0] / "tiny" / "base" / "checkpoint")
    before, after = (turn_nll(ckpt, str(d2 / "checkpoint"), rows) for ckpt in (base_ckpt, str(d2 / "checkpoint")))
    assert before["assistant"] - after["assistant"] >= 0.5, (before, after)
    assert "readable_rate" in m2.data["metrics"]["eval_after"] and m2.verify_checkpoint() == []
    config = json.loads((d2 / "checkpoint" / "generation_config.json").read_text())
    tok = load_tokenizer(str(d2 / "checkpoint"))
    eos = config["eos_token_id"] if isinstance(config["eos_token_id"], list) else [config["eos_token_id"]]
    assert tok.convert_tokens_to_ids(end_of_turn_token(tok)) in eos  # a chat model stops at the end of its turn

    m3 = run_stage(r, "stage3", stages.stage3_reasoning_rl.run)
    d3 = r.stage_dir("stage3")
    assert m3.status == "complete" and m3.data["metrics"]["train"]["steps"] == 2
    metrics = read_jsonl_tolerant(d3 / "metrics.jsonl")
    assert set(metrics[0]["rewards"]) == {"accuracy", "summary_format", "language"}
    assert m3.resolve(m3.data["inputs"]["model"]["ref"]).resolve() == Path(m2.checkpoint).resolve()
    assert {"readable_rate", "language_mix_rate"} <= set(m3.data["metrics"]["eval_before"])
    sample = read_jsonl_tolerant(d3 / "samples" / "step_00001.jsonl")[0]
    assert isinstance(sample["completion"], str)  # chat completions are recorded as their text
    # the cold start's benefit is measured on held-out problems at the RL steps both stages evaluated
    # (stage 1 at its eval_steps, stage 3 after its 2 steps), never on a training batch
    curve = m3.data["metrics"]["cold_start_curve"]
    assert curve["common_steps"] == [0, 2]
    stage1_dir = chain[0] / "tiny" / "stage1"
    for label, samples in (("stage 3 (from the cold start)", d3 / "eval_after" / "samples.jsonl"),
                           ("stage 1 (R1-Zero, from the base)", stage1_dir / "eval_step_00002" / "samples.jsonl")):
        held_out = per_problem(read_jsonl_tolerant(samples))
        assert curve[label]["2"]["mean"] == pytest.approx(sum(held_out.values()) / len(held_out))
    assert (d3 / "stage1_vs_stage3.png").stat().st_size > 1000


def test_stage2_with_lora_merges_into_plain_weights(chain, tmp_path):
    r = chain_recipe(chain, tmp_path, "lora", ["stage2.sft.lora={r: 4, alpha: 8, dropout: 0.0, "
                                               "target_modules: [q_proj, v_proj]}"])
    m = run_stage(r, "stage2", stages.stage2_cold_start.run)
    ckpt = Path(m.checkpoint)
    assert m.status == "complete" and m.data["metrics"]["sft_checkpoint"]["lora"] is True
    assert not (ckpt / "adapter_config.json").exists() and (ckpt / "model.safetensors").is_file()
    before = load_file(str(chain[0] / "tiny" / "base" / "checkpoint" / "model.safetensors"))
    after = load_file(str(ckpt / "model.safetensors"))
    assert set(before) == set(after)  # no lora_A/lora_B left: merged
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)


def test_stages_refuse_a_parent_of_the_wrong_stage(chain, tmp_path):
    """The stage table names each stage's parent; run_stage refuses any other, before the body runs."""
    r = chain_recipe(chain, tmp_path, "wrong")
    with pytest.raises(ManifestError, match="expected a 'stage1' manifest, found stage 'base'"):
        run_stage(r, "stage2", stages.stage2_cold_start.run, parent_dir=r.stage_dir("base"))
    assert not (r.stage_dir("stage2") / "manifest.json").exists()  # refused before anything was written
    with pytest.raises(ManifestError, match="stage2"):  # stage 3 without a stage-2 manifest
        run_stage(r, "stage3", stages.stage3_reasoning_rl.run)
    with pytest.raises(ValueError, match="unknown stage 'stage9'"):
        run_stage(r, "stage9", stages.stage3_reasoning_rl.run)


def test_a_tokenizer_without_a_chat_template_gets_chatml(chain, tmp_path):
    """A base model whose tokenizer has no chat template: the SFT runner installs ChatML with
    generation markers (assistant-only loss needs them) and saves it with the checkpoint."""
    plain = tmp_path / "plain-base"
    shutil.copytree(chain[0] / "tiny" / "base" / "checkpoint", plain)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    assert load_tokenizer(str(plain)).chat_template is None
    r = chain_recipe(chain, tmp_path, "plain")
    rows = [{"messages": [{"role": "user", "content": "What is 2 + 3?"},
                          {"role": "assistant", "content": "<think> 2+3=5 </think> The final answer is \\boxed{5}."}]}] * 8
    m = run_stage(r, "stage2", lambda ctx: run_sft(ctx, r.stage2.sft, rows=rows, model_ref=str(plain)))
    tok = load_tokenizer(m.checkpoint)
    assert m.status == "complete" and "<|im_start|>" in tok.chat_template and "{% generation %}" in tok.chat_template
    assert m.data["metrics"]["sft_checkpoint"]["chat_template"]["installed"] is True
    config = json.loads((Path(m.checkpoint) / "generation_config.json").read_text())
    assert tok.convert_tokens_to_ids("<|im_end|>") in config["eos_token_id"]  # ChatML's turn ends there: stop


def test_a_moved_run_folder_still_chains_and_resumes(chain, tmp_path, capsys):
    """Manifests record the paths inside the run folder relative to themselves: a run folder moved and
    renamed (its old path gone) passes `r1 status`, and an interrupted stage in it resumes against its
    parent there."""
    from stages.commands.cli import main
    from stages.pipeline.manifest import Manifest
    from tests.micro import MICRO23, recipe

    chain_recipe(chain, tmp_path / "cluster", "run")  # a copy of the chain's base and stage 1
    m1 = Manifest.load(tmp_path / "cluster" / "run" / "stage1")
    assert m1.data["parent"]["path"] == "../base/manifest.json" and m1.data["output"]["checkpoint"] == "checkpoint"
    assert m1.data["inputs"]["model"]["ref"] == "../base/checkpoint"
    m1.fail("killed")  # interrupted after its last trainer checkpoint, before the final save
    shutil.rmtree(tmp_path / "cluster" / "run" / "stage1" / "checkpoint")
    moved = tmp_path / "laptop" / "renamed"
    moved.parent.mkdir()
    (tmp_path / "cluster" / "run").rename(moved)

    assert main(["status", str(moved)]) == 0
    out = capsys.readouterr().out
    assert "base     complete" in out and "stage1   failed" in out and "CHANGED" not in out
    m = run_stage(recipe(tmp_path / "laptop", "renamed", MICRO23), "stage1", stages.stage1_zero.run)
    assert m.status == "complete" and m.data["resumes"] and m.data["metrics"]["train"]["resumed_from_step"] == 4
    assert Path(m.checkpoint).resolve() == (moved / "stage1" / "checkpoint").resolve() and m.verify_checkpoint() == []
    assert m.parent_path.resolve() == (moved / "base" / "manifest.json").resolve()
    assert main(["status", str(moved)]) == 0 and "stage1   complete" in capsys.readouterr().out


def test_findings_force_and_suppress_checks_in_the_base_and_stage1(chain, tmp_path):
    """`make findings`' intervention (F0): the base and stage 1 each sample the held-out problems with checks
    forced and suppressed, through transformers' generate with the project's logits processor; a suppressed
    arm never opens a check, every arm covers every problem, and a finished arm is not sampled again."""
    from stages.commands.findings import (
        intervened,
        intervention_current,
        intervention_dir,
        run_check_intervention,
    )

    r = chain_recipe(chain, tmp_path, "intervention")
    folders = run_check_intervention(r)
    assert len(folders) == 4  # the base and stage 1: no other training seed has a stage 1 here
    run_dir = r.stage_dir("stage1").parent
    models = intervened(run_dir, r.findings.seeds)
    n_problems = json.loads((r.stage_dir("stage1") / "eval_after" / "results.json").read_text())["problems"]
    for model in ("base", 0):
        for arm in ("forced", "suppressed"):
            samples = read_jsonl_tolerant(intervention_dir(run_dir, model, arm) / "samples.jsonl")
            assert len({s["id"] for s in samples}) == n_problems and len(samples) == n_problems * r.eval.k
            if arm == "suppressed":
                assert not any("(" in s["completion"] or "（" in s["completion"] for s in samples)
    stamp = (intervention_dir(run_dir, 0, "forced") / "samples.jsonl").stat().st_mtime_ns
    assert run_check_intervention(r) == folders and intervention_current(run_dir, 0, models[0])
    assert (intervention_dir(run_dir, 0, "forced") / "samples.jsonl").stat().st_mtime_ns == stamp
    # sampled from other weights (stage 1 trained again since): stale, not read by the report, sampled again
    record = run_dir / "findings" / "intervention" / "stage1" / "model.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "weights": "earlier weights"}))
    assert not intervention_current(run_dir, 0, models[0])
    assert intervention_current(run_dir, "base", models["base"])
    run_check_intervention(r)
    assert intervention_current(run_dir, 0, models[0])
    assert (intervention_dir(run_dir, 0, "forced") / "samples.jsonl").stat().st_mtime_ns != stamp
