"""The tiny base stage at reduced size: it trains (loss falls), saves a loadable checkpoint whose
tokenizer round-trips, probes itself, and writes a complete manifest; the CLI reports status."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from data.templates import r1_zero_prompt
from stages.base import run
from stages.pipeline.common import load_tokenizer
from stages.pipeline.manifest import Manifest
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import run_stage
from stages.training.pretrain import _batch, _packed_batch, build_tiny_model, pretrain_tiny, use_bf16_autocast
from tests import zygote
from tests.micro import SMALL

pytestmark = pytest.mark.train  # every test here trains a model


def test_pretraining_loss_falls(small_base):
    """The session's small base (tests/conftest.py) pretrained from scratch: its manifest's loss curve fell."""
    _, manifest = small_base
    stats = manifest.data["metrics"]["pretrain"]
    assert stats["loss_last_avg"] < 0.6 * stats["loss_first"], stats


def test_pretraining_is_deterministic_under_seed():
    recipe = load_recipe("tiny", SMALL + ["base.pretrain.steps=5"])
    a = pretrain_tiny(recipe, log=lambda *_: None)
    b = pretrain_tiny(recipe, log=lambda *_: None)
    assert a[2]["loss_curve"] == b[2]["loss_curve"]
    for pa, pb in zip(a[0].parameters(), b[0].parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_packed_rows_give_each_document_the_logits_it_has_alone():
    """Packing must not let documents see each other: every document's logits in a packed row equal
    its logits in a padded row of its own (positions restart, the mask is block-diagonal)."""
    torch.manual_seed(0)
    recipe = load_recipe("tiny", SMALL)
    model = build_tiny_model(recipe.base.architecture, vocab_size=60, eos_id=0).eval()
    model.set_attn_implementation(recipe.base.pretrain.attn_implementation)
    gen = torch.Generator().manual_seed(1)
    docs = [(torch.randint(1, 60, (int(n),), generator=gen).tolist(), torch.randint(1, 60, (int(m),), generator=gen).tolist())
            for n, m in torch.randint(2, 20, (9, 2), generator=gen)]
    packed = _packed_batch(docs, pad_id=0, length=48)
    assert packed["input_ids"].shape[0] < len(docs)  # documents do share rows
    with torch.no_grad():
        logits = model(**{k: v for k, v in packed.items() if k != "labels"}).logits      # (R, W, V)
    starts = (packed["position_ids"] == 0).nonzero().tolist()                          # (row, col) per segment
    seen = 0
    for row, col in starts:
        n = 0
        while col + n < packed["input_ids"].shape[1] and (n == 0 or packed["position_ids"][row, col + n] == n):
            n += 1
        ids = packed["input_ids"][row, col : col + n]
        match = [d for d in docs if torch.equal(torch.tensor(d[0] + d[1]), ids)]
        if not match:
            continue  # the padding at a row's end
        seen += 1
        alone = _batch([match[0]], pad_id=0)
        with torch.no_grad():
            ref = model(input_ids=alone["input_ids"], attention_mask=alone["attention_mask"]).logits[0, :n]
        torch.testing.assert_close(logits[row, col : col + n], ref, atol=1e-5, rtol=1e-4)
    assert seen == len(docs)
    # and the loss sees the same completion tokens
    assert (packed["labels"] != -100).sum() == _batch(docs, pad_id=0)["labels"].ne(-100).sum()


def test_base_stage_writes_a_complete_manifest_with_probe(small_base):
    recipe, m = small_base
    assert m.status == "complete"
    probe = m.data["metrics"]["probe"]
    for key in ("pass@1", "think_rate", "language_mix_rate", "mean_length_tokens", "cons@2", "pass@2"):
        assert key in probe
    assert probe["problems"] == 6 and probe["samples"] == 12
    assert m.data["metrics"]["pretrain"]["loss_last_avg"] < m.data["metrics"]["pretrain"]["loss_first"]
    assert m.data["metrics"]["pretrain"]["bf16_autocast"] is use_bf16_autocast(recipe.base.pretrain.bf16_autocast)
    assert m.verify_checkpoint() == []
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(m.data["output"]["files"])
    lines = (recipe.stage_dir("base") / "probe" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 12 and "correct" in json.loads(lines[0])


def test_checkpoint_loads_through_auto_classes(small_base):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    _, m = small_base
    tok = load_tokenizer(m.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(m.checkpoint)
    text = r1_zero_prompt("What is 12 + 34?") + " <think> 2+4=6 write 6，写3 </think> <answer> 46 </answer>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    # the pre-tokenizer trained with the model, not one rebuilt by a transformers class
    assert ids == Tokenizer.from_file(str(Path(m.checkpoint) / "tokenizer.json")).encode(text).ids
    for tag in ("<think>", "</think>", "<answer>", "</answer>"):  # ordinary tokens: survive skip_special
        assert tag in tok.decode(ids, skip_special_tokens=True)
    assert tok.chat_template and "generation" in tok.chat_template
    assert model(torch.tensor([ids])).logits.shape[-1] == len(tok)


def test_status_command_prints_the_chain(small_base):
    recipe, _ = small_base
    done = zygote.run([sys.executable, "-m", "stages.commands.cli", "status", str(recipe.stage_dir("base").parent)],
                      env={**os.environ, "OMP_NUM_THREADS": zygote.THREADS}, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "base" in out and "complete" in out and "stage1" in out


def test_registering_a_pretrained_model_records_it(tmp_path, small_base):
    _, base = small_base
    recipe = load_recipe("tiny", [f"run_root={tmp_path}", f"base.pretrained={base.checkpoint}"])
    m = run_stage(recipe, "base", run)
    assert m.status == "complete" and m.data["inputs"]["model"]["local"]
    assert Manifest.load(m.path).checkpoint == base.checkpoint


def test_summary_tokens_are_added_after_pretraining_without_touching_the_rest():
    """The readable summary's words become single tokens; the pretrained rows stay as they were and
    each new row starts as the mean of the rows of the pieces it replaces."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from data.templates import r1_response
    from data.tokenizer import SUMMARY_TOKENS, add_summary_tokens, build_tokenizer

    tok = build_tokenizer(["What is 12 + 34? <think> 2+4=6 write 6 </think> <answer> 46 </answer>"] * 50, 300)
    pieces = [tok(t, add_special_tokens=False)["input_ids"] for t in SUMMARY_TOKENS]
    assert all(len(p) > 2 for p in pieces)  # spelled in many tokens before
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=32,
                                         tie_word_embeddings=True))
    old = model.get_input_embeddings().weight.detach().clone()
    ids = add_summary_tokens(tok, model)
    new = model.get_input_embeddings().weight.detach()
    assert torch.equal(new[: len(old)], old) and model.lm_head.weight.shape[0] == len(tok)
    for i, p in zip(ids, pieces, strict=True):
        assert torch.allclose(new[i], old[p].mean(dim=0))
    tokens = tok.convert_ids_to_tokens(tok(r1_response("2+4=6", "46"), add_special_tokens=False)["input_ids"])
    assert all(t in tokens for t in SUMMARY_TOKENS)
