"""The KV-cache decoder (eval/decode.py) samples as transformers' generate does: the same greedy
tokens, the same distribution, finished rows leaving the batch without changing the others."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from eval.decode import decode, supports

STOP = 3


def model_with(kv_heads: int = 2, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=kv_heads, intermediate_size=64, max_position_embeddings=128,
                         eos_token_id=STOP, pad_token_id=0, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # sharper logits than the random init's, so that greedy choices are clear
        model.lm_head.weight.mul_(8.0)
    return model


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16], [17], [18, 19, 20, 21, 22, 23, 24, 25], [26, 27, 28]]


def generate_greedy(model, ids, mask, n):
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=n, eos_token_id=STOP,
                         pad_token_id=0)[:, ids.shape[1]:]
    rows = []
    for row in out.tolist():
        tokens = []
        for t in row:
            tokens.append(t)
            if t == STOP:
                break
        rows.append(tokens)
    return rows


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_greedy_tokens_equal_generate(kv_heads):
    model = model_with(kv_heads)
    ids, mask = left_padded(PROMPTS)
    ours = decode(model, ids, mask, max_new_tokens=20, temperature=0.0, top_p=1.0, stop_ids=[STOP])
    assert [tokens for tokens, _ in ours] == generate_greedy(model, ids, mask, 20)
    assert [stopped for _, stopped in ours] == [bool(t) and t[-1] == STOP for t, _ in ours]


def test_rows_that_finish_early_do_not_change_the_others():
    """One prompt alone and in a batch whose other rows stop at once: the same tokens (the cache
    compaction that drops finished rows keeps every live row's keys and values)."""
    model = model_with()
    ids, mask = left_padded(PROMPTS)
    together = decode(model, ids, mask, max_new_tokens=24, temperature=0.0, top_p=1.0, stop_ids=[STOP])
    for i, prompt in enumerate(PROMPTS):
        alone_ids, alone_mask = left_padded([prompt])
        alone = decode(model, alone_ids, alone_mask, max_new_tokens=24, temperature=0.0, top_p=1.0, stop_ids=[STOP])
        assert alone[0] == together[i]


def test_sampling_follows_the_models_distribution_and_the_seed():
    model = model_with()
    with torch.no_grad():
        model.lm_head.weight.mul_(1 / 8.0)  # back to a spread-out distribution
    ids, mask = left_padded([[5, 6, 7]] * 4000)
    with torch.no_grad():
        probs = model(ids[:1], attention_mask=mask[:1]).logits[0, -1].softmax(-1)
    first = decode(model, ids, mask, max_new_tokens=1, temperature=1.0, top_p=1.0, stop_ids=[STOP],
                   generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(torch.tensor([t[0] for t, _ in first]), minlength=probs.numel()).float()
    assert 0.5 * (counts / counts.sum() - probs).abs().sum() < 0.05  # total variation distance
    again = decode(model, ids, mask, max_new_tokens=1, temperature=1.0, top_p=1.0, stop_ids=[STOP],
                   generator=torch.Generator().manual_seed(0))
    assert again == first


def test_top_p_keeps_the_smallest_set_reaching_p():
    model = model_with()
    ids, mask = left_padded([[5, 6, 7]] * 500)
    with torch.no_grad():
        probs = model(ids[:1], attention_mask=mask[:1]).logits[0, -1].softmax(-1)
    top = torch.sort(probs, descending=True)
    keep = int((top.values.cumsum(0) < 0.5).sum()) + 1
    allowed = set(top.indices[:keep].tolist())
    sampled = decode(model, ids, mask, max_new_tokens=1, temperature=1.0, top_p=0.5, stop_ids=[STOP],
                     generator=torch.Generator().manual_seed(1))
    assert {t[0] for t, _ in sampled} <= allowed


def test_other_architectures_are_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=32, n_layer=1, n_head=2))
    assert supports(model_with()) and not supports(gpt2)
    with pytest.raises(NotImplementedError):
        ids, mask = left_padded([[5, 6]])
        decode(gpt2, ids, mask, max_new_tokens=2, temperature=0.0, top_p=1.0, stop_ids=[STOP])


def test_fast_generate_returns_what_generate_returns():
    """As the model's generate (how GRPO's rollouts reach it): the same ids, prompt included, padded the
    same way; options the loop does not implement go to the model's own generate."""
    from transformers import GenerationConfig

    from eval.decode import fast_generate

    model = model_with()
    ids, mask = left_padded(PROMPTS)
    config = GenerationConfig(do_sample=False, max_new_tokens=12, eos_token_id=[STOP], pad_token_id=0)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    ours = fast_generate(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(ours, expected)
    calls = []
    model_generate = model.generate
    model.generate = lambda **kw: calls.append(kw) or model_generate(**kw)
    top_k = GenerationConfig(do_sample=True, top_k=5, max_new_tokens=4, eos_token_id=[STOP], pad_token_id=0)
    fast_generate(model)(input_ids=ids, attention_mask=mask, generation_config=top_k)
    assert len(calls) == 1  # top-k: not the loop's


def tiny_model_and_tokenizer():
    from data.tokenizer import build_tokenizer

    tok = build_tokenizer([f"What is {a} + {b}? {a + b}" for a in range(30) for b in range(30)], vocab_size=300)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).eval(), tok


def test_batches_shared_between_processes_give_the_samples_of_one_process():
    """``processes=2`` forks a single-threaded copy that samples every other batch; each batch draws from
    its own (seed, batch) generator, so the samples equal those of one single-threaded process."""
    from eval.generate import sample

    model, tok = tiny_model_and_tokenizer()
    prompts = [f"What is {a} + {a + 3}?" for a in range(10)]
    kw = dict(n=3, temperature=0.8, top_p=0.95, max_new_tokens=12, batch_size=4, seed=5, progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = sample(model, tok, prompts, processes=1, **kw)
    finally:
        torch.set_num_threads(threads)
    shared = sample(model, tok, prompts, processes=2, **kw)
    assert shared == alone
    assert torch.get_num_threads() == threads  # restored
    assert len({c["text"] for cs in alone for c in cs}) > 10  # samples, not one repeated string
    assert sample(model, tok, prompts, processes=2, **{**kw, "seed": 6}) != shared


def test_a_sampling_process_that_dies_is_an_error(monkeypatch):
    import os

    from eval import decode as D
    from eval.generate import sample

    model, tok = tiny_model_and_tokenizer()
    parent, real = os.getpid(), D.decode

    def dies_in_the_child(*a, **k):
        if os.getpid() != parent:
            os._exit(3)
        return real(*a, **k)

    monkeypatch.setattr(D, "decode", dies_in_the_child)
    with pytest.raises(RuntimeError, match="died"):
        sample(model, tok, ["What is 1 + 2?"] * 8, n=1, temperature=0.6, top_p=0.95, max_new_tokens=8,
               batch_size=2, seed=0, progress=False, processes=2)


def test_fast_generate_shares_rows_between_processes_reproducibly_under_the_global_seed():
    """On the CPU with 2 threads, the rollouts' rows are split between this process and a forked one,
    each share drawing from a generator seeded from the global one: the same global seed gives the same
    ids whatever the split, so a GRPO run stays reproducible; greedy rows equal generate's."""
    from transformers import GenerationConfig

    from eval.decode import fast_generate

    model = model_with()
    ids, mask = left_padded(PROMPTS * 4)
    sampled = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=10,
                               eos_token_id=[STOP], pad_token_id=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = []
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            runs.append(fast_generate(model)(input_ids=ids, attention_mask=mask, generation_config=sampled))
        greedy = GenerationConfig(do_sample=False, max_new_tokens=10, eos_token_id=[STOP], pad_token_id=0)
        split = fast_generate(model)(input_ids=ids, attention_mask=mask, generation_config=greedy)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    assert torch.equal(split, model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy))


def test_loop_samples_for_configs_with_unset_fields():
    """transformers 5 leaves unset generation fields None (GRPOTrainer's config has num_beams None):
    neutral values, so the loop runs; an option it lacks sends the call to generate."""
    from transformers import GenerationConfig

    from eval.decode import loop_can_sample

    assert loop_can_sample(GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
                                            repetition_penalty=1.0, max_new_tokens=8))
    for option in ({"top_k": 5}, {"min_p": 0.1}, {"repetition_penalty": 1.2}, {"num_beams": 2}):
        assert not loop_can_sample(GenerationConfig(do_sample=True, max_new_tokens=8, **option)), option


@pytest.mark.parametrize("spread", [1.0, 0.05], ids=["peaked", "flat: the nucleus is wider than the candidates"])
def test_nucleus_is_the_set_transformers_keeps(spread):
    """The tokens the loop can draw at temperature T and top-p are exactly those transformers' warpers
    leave finite, whether the nucleus lies among the first candidates or needs the whole sort."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    from eval import decode as D

    torch.manual_seed(0)
    logits = torch.randn(6, 640) * 8 * spread
    warped = TopPLogitsWarper(0.95)(None, TemperatureLogitsWarper(0.6)(None, logits.clone()))
    allowed = [set(torch.isfinite(row).nonzero().squeeze(1).tolist()) for row in warped]
    if spread < 1:
        assert min(len(a) for a in allowed) > D.NUCLEUS_CANDIDATES  # the fallback is exercised
    generator = torch.Generator().manual_seed(0)
    drawn = [set() for _ in allowed]
    for _ in range(400):
        for row, token in enumerate(D._next_tokens(logits, 0.6, 0.95, generator).tolist()):
            drawn[row].add(token)
    candidates = [set(row.topk(D.NUCLEUS_CANDIDATES).indices.tolist()) for row in logits]
    for row, tokens in enumerate(drawn):
        assert tokens <= allowed[row]
        if len(allowed[row]) <= 8:  # a small nucleus is drawn whole in 400 draws
            assert tokens == allowed[row]
        if spread < 1:  # and a wide one beyond the first candidates
            assert tokens - candidates[row]


def test_draws_follow_the_probabilities_with_and_without_top_p():
    from eval import decode as D

    torch.manual_seed(1)
    logits = torch.randn(1, 12) * 2
    generator = torch.Generator().manual_seed(0)
    for top_p in (1.0, 0.9):
        probs = logits.softmax(-1)[0]
        order = probs.argsort(descending=True)
        keep = (probs[order].cumsum(0) - probs[order]) < top_p
        target = torch.zeros_like(probs)
        target[order[keep]] = probs[order[keep]] / probs[order[keep]].sum()
        draws = torch.cat([D._next_tokens(logits.expand(4000, -1), 1.0, top_p, generator) for _ in range(5)])
        freq = torch.bincount(draws, minlength=12).float() / len(draws)
        assert 0.5 * (freq - target).abs().sum() < 0.02, top_p


def test_a_shared_prefix_is_computed_once_with_the_same_result():
    """Prompts that share a long prefix (the R1-Zero template's instructions): the prefix's keys and
    values are computed once for all rows, with the same greedy tokens as generate's on the padded
    batch, and the same samples as the padded prefill under the same generator."""
    from eval import decode as D

    model = model_with(kv_heads=2)
    torch.manual_seed(3)
    prefix = torch.randint(4, 40, (40,)).tolist()
    prompts = [prefix + rest for rest in ([5], [6, 7, 8], [9, 10], [11, 12, 13, 14, 15])]
    ids, mask = left_padded(prompts)
    assert D._shared_prefix(ids, mask) == 40
    assert D._shared_prefix(*left_padded([prefix, prefix])) == 39  # each row keeps a token of its own
    assert D._shared_prefix(*left_padded(PROMPTS)) == 0  # nothing shared
    calls = []
    hook = model.register_forward_hook(
        lambda module, args, kwargs, out: calls.append((kwargs["input_ids"].shape, out.logits[:, -1])), with_kwargs=True)
    greedy = decode(model, ids, mask, max_new_tokens=16, temperature=0.0, top_p=1.0, stop_ids=[STOP])
    hook.remove()
    assert [shape for shape, _ in calls[:2]] == [(1, 40), (4, 5)]  # the prefix once, then each row's rest
    with torch.no_grad():
        whole = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
    torch.testing.assert_close(calls[1][1], whole, atol=1e-5, rtol=1e-5)  # the logits the sampling starts from
    assert [tokens for tokens, _ in greedy] == generate_greedy(model, ids, mask, 16)
    kw = dict(max_new_tokens=16, temperature=1.0, top_p=0.9, stop_ids=[STOP])
    shared = decode(model, ids, mask, **kw, generator=torch.Generator().manual_seed(7))
    D.MIN_SHARED_PREFIX, before = 10**6, D.MIN_SHARED_PREFIX
    try:
        padded = decode(model, ids, mask, **kw, generator=torch.Generator().manual_seed(7))
    finally:
        D.MIN_SHARED_PREFIX = before
    assert shared == padded


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_diverged_weights_give_a_clear_error(temperature):
    """A model whose weights went NaN (an infinite learning rate) gave `index -1 is out of bounds` from deep in
    sampling; it now says what happened."""
    model = model_with()
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.fill_(float("nan"))
    ids, mask = left_padded(PROMPTS)
    with pytest.raises(FloatingPointError, match="logits are NaN or infinite: its weights diverged"):
        decode(model, ids, mask, max_new_tokens=4, temperature=temperature, top_p=0.95, stop_ids=[STOP],
               generator=torch.Generator().manual_seed(0))
