"""The model's own chat template: kept, trained through TRL's training twin, ChatML only as a fallback;
templates that open the think block in the prompt (DeepSeek-R1-Distill) read as whole responses
everywhere: samplers, GRPO's rewards, SFT targets."""

import shutil
from pathlib import Path

import pytest
import torch
import trl

from data.jsonl import read_jsonl_tolerant
from data.templates import (
    TRANSCRIPT_CHAT_TEMPLATE,
    align_to_prefill,
    assistant_prefill,
    end_of_turn_token,
    prefilled_think,
    r1_response,
    training_chat_template,
    with_prefill,
)
from stages.pipeline.common import load_tokenizer

TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"
QWEN = (TRL_TEMPLATES / "qwen2_5.jinja").read_text()
R1_DISTILL = (TRL_TEMPLATES / "deepseek_r1_distill.jinja").read_text()
UNKNOWN = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
CONVERSATION = [{"role": "user", "content": "What is 2 + 3?"},
                {"role": "assistant", "content": r1_response("2+3=5", "5")}]


@pytest.fixture(scope="module")
def tokenizer(small_base):
    recipe, manifest = small_base
    return load_tokenizer(manifest.checkpoint)


def with_template(tokenizer, template):
    tok = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("own, install, source", [
    (QWEN, False, "TRL's training twin"),
    (R1_DISTILL, False, "TRL's training twin"),
    (TRANSCRIPT_CHAT_TEMPLATE, False, "the model's own"),
    (None, True, "project ChatML (the tokenizer has no chat template)"),
    (UNKNOWN, True, "project ChatML (TRL has no training version"),
])
def test_the_model_keeps_its_template_and_trains_through_trls_twin(tokenizer, own, install, source):
    choice = training_chat_template(with_template(tokenizer, own))
    assert choice.install is install and choice.source.startswith(source)
    assert "{% generation %}" in choice.template or "{%- generation %}" in choice.template
    if own is not None and not install:
        tok = with_template(tokenizer, own)  # the training text is the model's own text
        ours = tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
        assert tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True,
                                       chat_template=choice.template) == ours


def test_r1_distills_training_twin_keeps_the_reasoning(tokenizer):
    """DeepSeek-R1-Distill's own template drops everything before ``</think>`` of an assistant turn:
    trained through it, an SFT target would lose its reasoning. The twin keeps it."""
    tok = with_template(tokenizer, R1_DISTILL)
    assert "2+3=5" not in tok.apply_chat_template(CONVERSATION, tokenize=False)
    assert "2+3=5" in tok.apply_chat_template(CONVERSATION, tokenize=False,
                                              chat_template=training_chat_template(tok).template)


def test_the_prefilled_think_block_is_found_and_put_back(tokenizer):
    assert assistant_prefill(with_template(tokenizer, R1_DISTILL)) == "<think>\n"
    for template in (QWEN, TRANSCRIPT_CHAT_TEMPLATE, None):
        assert assistant_prefill(with_template(tokenizer, template)) == ""
    assert prefilled_think("... Assistant:") == "" and prefilled_think("x<think>\n") == "<think>\n"
    assert with_prefill("a </think> b", "<think>\n") == "<think>\na </think> b"
    assert with_prefill([{"role": "assistant", "content": "a"}], "<think>\n") == [{"role": "assistant",
                                                                                   "content": "<think>\na"}]
    assert with_prefill("a", "") == "a"
    assert align_to_prefill("<think> 2+3=5 </think> s", "<think>\n") == "<think>\n2+3=5 </think> s"
    assert align_to_prefill("<think> 2+3=5 </think> s", "") == "<think> 2+3=5 </think> s"
    assert align_to_prefill("no block", "<think>\n") == "no block"


def test_an_aligned_target_continues_the_generation_prompt(tokenizer):
    """Under R1-Distill's prefill, the SFT text of a response is the generation prompt followed by the
    model's output: what the model learns is what it is later asked to continue."""
    tok = with_template(tokenizer, R1_DISTILL)
    twin = training_chat_template(tok).template
    prompt = tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    aligned = [CONVERSATION[0], {"role": "assistant", "content": align_to_prefill(CONVERSATION[1]["content"],
                                                                                   assistant_prefill(tok))}]
    assert tok.apply_chat_template(aligned, tokenize=False, chat_template=twin).startswith(prompt)
    assert not tok.apply_chat_template(CONVERSATION, tokenize=False, chat_template=twin).startswith(prompt)


def test_end_of_turn_token_is_the_templates(tokenizer):
    assert end_of_turn_token(tokenizer) == tokenizer.eos_token  # the tiny transcripts end with end-of-text
    assert end_of_turn_token(with_template(tokenizer, QWEN)) == "<|im_end|>"
    assert end_of_turn_token(with_template(tokenizer, UNKNOWN)) is None  # a newline, no token
    tok = with_template(tokenizer, R1_DISTILL)
    assert end_of_turn_token(tok) is None  # <｜end▁of▁sentence｜> is no token of the tiny vocabulary
    tok.add_tokens(["<｜end▁of▁sentence｜>"], special_tokens=True)
    assert end_of_turn_token(tok) == "<｜end▁of▁sentence｜>"


def test_samplers_put_the_prefill_back_in_front(small_base):
    from eval.generate import make_sampler
    from stages.pipeline.common import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(small_base[1].checkpoint, device=torch.device("cpu"), trust_remote_code=False)
    sampler = make_sampler("transformers", model=model, tokenizer=tok, batch_size=4)
    out = sampler(["User: 1+1 Assistant: <think>\n", "User: 1+1 Assistant:"], n=2, temperature=1.0, top_p=1.0,
                  max_new_tokens=4, seed=0, progress=False)
    assert all(c["text"].startswith("<think>\n") for c in out[0])
    assert not any(c["text"].startswith("<think>\n") for c in out[1])
    assert all(c["num_tokens"] <= 4 for group in out for c in group)  # generated tokens only


def test_grpo_rewards_read_the_response_with_its_prefill(tmp_path):
    """TRL hands the rewards only the generated text; under a prefilling template the format reward
    would pay nothing for a perfect response. The recorder puts the opening back."""
    from stages.training.records import RolloutRecorder
    from stages.training.rewards import summary_format_reward

    completion = [[{"role": "assistant", "content": "2+3=5 </think> The final answer is \\boxed{5}."}]]
    paid = {}
    for prefill in ("", "<think>\n"):
        recorder = RolloutRecorder(tmp_path / repr(prefill), ["summary_format"], sample_every=1, samples_per_step=1)
        recorder.prefill = prefill
        paid[prefill] = recorder.wrap("summary_format", summary_format_reward)(completion, answer=["5"])
    assert paid == {"": [0.0], "<think>\n": [1.0]}


@pytest.mark.train
@pytest.mark.parametrize("template", ["qwen2_5", "deepseek_r1_distill"])
def test_sft_keeps_the_models_template(chain, tmp_path, template):
    """SFT through TRL's training twin: the checkpoint keeps the model's own template (byte for byte),
    the manifest says which template trained, and under R1-Distill's prefill the targets open their
    think block as the prompt does."""
    from stages.pipeline.runner import run_stage
    from stages.training.sft import run_sft
    from tests.micro import chain_recipe

    own = (TRL_TEMPLATES / f"{template}.jinja").read_text()
    model = tmp_path / "model"
    shutil.copytree(chain[0] / "tiny" / "base" / "checkpoint", model)
    tok = load_tokenizer(str(model))
    tok.chat_template = own
    tok.save_pretrained(model)
    r = chain_recipe(chain, tmp_path, template, ["stage2.sft.eval_every=2", "stage2.sft.eval_problems=3",
                                                 "stage2.sft.trl.logging_steps=3"])  # (evaluated steps log anyway)
    rows = [{"messages": CONVERSATION}] * 8
    m = run_stage(r, "stage2", lambda ctx: run_sft(ctx, r.stage2.sft, rows=rows, model_ref=str(model)))
    recorded = m.data["metrics"]["sft_checkpoint"]["chat_template"]
    assert m.status == "complete" and load_tokenizer(m.checkpoint).chat_template == own
    assert recorded["source"] == "TRL's training twin of the model's own" and not recorded["installed"]
    assert recorded["think_prefill"] == ("<think>\n" if template == "deepseek_r1_distill" else None)
    # eval_every: held-out pass@1 in the SFT's log at steps 2 and 4 (8 rows, batch 4, 2 epochs)
    logged = {row["step"]: row["eval_pass@1"] for row in read_jsonl_tolerant(r.stage_dir("stage2") /
              "checkpoint_metrics.jsonl") if "eval_pass@1" in row}
    assert set(logged) == {2, 4} and all(0.0 <= v <= 1.0 for v in logged.values())


@pytest.mark.train
def test_grpo_under_a_prefilling_template_sees_whole_responses(chain, tmp_path):
    """GRPO in the chat template of DeepSeek-R1-Distill: every rollout starts inside the think block the
    prompt opened, so every response the rewards and the metrics read has one (think_rate 1)."""
    from data.datasets import load_rows
    from stages.pipeline.runner import run_stage
    from stages.training.grpo import run_rl
    from tests.micro import chain_recipe

    model = tmp_path / "model"
    shutil.copytree(chain[0] / "tiny" / "base" / "checkpoint", model)
    tok = load_tokenizer(str(model))
    tok.chat_template = R1_DISTILL
    tok.save_pretrained(model)
    r = chain_recipe(chain, tmp_path, "distill-template")
    train, test = load_rows(r.data.train, r)[0][:8], load_rows(r.data.test, r)[0][:4]

    def chat(row):
        return [{"role": "user", "content": row["problem"]}]

    m = run_stage(r, "stage1", lambda ctx: run_rl(ctx, r.stage1, train_rows=train, eval_rows=test, build_prompt=chat,
                                                  model_ref=str(model), eval_template="chat"), restart=True)
    rows = read_jsonl_tolerant(r.stage_dir("stage1") / "metrics.jsonl")
    assert m.status == "complete" and rows and all(row["think_rate"] == 1.0 for row in rows)
    assert m.data["metrics"]["eval_after"]["think_rate"] == 1.0  # the evaluation's samples too
