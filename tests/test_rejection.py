"""Rejection sampling (eval/rejection.py): every filter on hand-made samples, and a run interrupted
mid-way then resumed keeps exactly what an uninterrupted run keeps."""

import random
from types import SimpleNamespace

import pytest

from data.jsonl import read_jsonl
from eval.rejection import DROP_REASONS, judge_prompt, rejection_sample, shard_path

CFG = SimpleNamespace(max_kept_per_prompt=2, max_paragraph_chars=120, max_repeat_share=0.3, language_target="en",
                      samples_per_prompt=3, shard_size=2, temperature=0.6, top_p=0.95, max_new_tokens=32)
ROW = {"id": "p1", "problem": "What is 12 + 34?", "answer": "46"}


def good(reasoning: str = "2+4=6 write 6, 1+3=4 write 4; answer 46") -> str:
    return f"<think> {reasoning} </think> The final answer is \\boxed{{46}}."


def test_each_filter_names_its_reason():
    samples = {
        "no_answer": "<think> 2+4=6 write 6 </think> I am not sure.",
        "incorrect": "<think> 2+4=6 write 6 </think> The final answer is \\boxed{47}.",
        "mixed_language": good("2+4=6 write 6，1+3=4写4进1; answer 46"),
        "long_paragraph": good("2+4=6 write 6, " + "and then we check the sum once more, " * 3 + "answer 46"),
        "code_block": good("```python\nprint(12 + 34)\n``` answer 46"),
        "repetition": good("then 6 " + "6 " * 20 + "; answer 46"),
    }
    for reason, text in samples.items():
        assert judge_prompt(ROW, [text], CFG) == [reason], reason
    # duplicates (whitespace-insensitive) and the per-prompt cap act on samples that passed the filters
    a, b = good(), good("4+2=6 write 6, 3+1=4 write 4; answer 46")
    c = good("6+40=46; answer 46")
    assert judge_prompt(ROW, [a, a.replace(" ", "  "), b, c], CFG) == [None, "duplicate", None, "per_prompt_cap"]
    assert {"duplicate", "per_prompt_cap", *samples} == set(DROP_REASONS)


class FakeSampler:
    """Deterministic under the seed it is given, like the real samplers; can fail on its k-th call."""

    def __init__(self, fail_on_call: int | None = None):
        self.calls, self.fail_on_call = 0, fail_on_call

    def __call__(self, prompts, *, n, seed, **_):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt("killed mid-shard")
        rng = random.Random(seed)
        out = []
        for p in prompts:
            a, b = (int(x) for x in p.split("What is ")[1].rstrip("?").split(" + "))
            answers = [a + b if rng.random() < 0.6 else a + b + 1 for _ in range(n)]
            out.append([{"text": f"<think> {a}+{b} try {rng.randint(0, 3)} </think> The final answer is \\boxed{{{x}}}.",
                         "num_tokens": 10, "truncated": False} for x in answers])
        return out


ROWS = [{"id": f"p{i}", "problem": f"What is {10 + i} + {20 + 2 * i}?", "answer": str(30 + 3 * i)} for i in range(7)]


def test_interrupted_and_resumed_run_keeps_the_same_set(tmp_path):
    full, _, _ = rejection_sample(FakeSampler(), ROWS, lambda p: p, tmp_path / "full", CFG, seed=5, log=lambda s: None)
    with pytest.raises(KeyboardInterrupt):
        rejection_sample(FakeSampler(fail_on_call=3), ROWS, lambda p: p, tmp_path / "cut", CFG, seed=5,
                         log=lambda s: None)
    assert shard_path(tmp_path / "cut", 1).exists() and not shard_path(tmp_path / "cut", 2).exists()
    sampler = FakeSampler()
    resumed, drops, stats = rejection_sample(sampler, ROWS, lambda p: p, tmp_path / "cut", CFG, seed=5,
                                             log=lambda s: None)
    assert sampler.calls == 2  # shards 0 and 1 were on disk: only shards 2 and 3 were sampled
    assert resumed == full and len(full) > 0
    assert stats["samples"] == len(ROWS) * CFG.samples_per_prompt and sum(drops.values()) + len(full) == stats["samples"]
    assert all(len([r for r in full if r["id"] == row["id"]]) <= CFG.max_kept_per_prompt for row in ROWS)


def test_real_sampler_resume_matches(small_base, tmp_path):
    """The transformers sampler is deterministic under a shard's seed, so resuming reproduces it."""
    import torch

    from data.templates import r1_zero_prompt
    from eval.generate import make_sampler
    from stages.pipeline.common import load_model_and_tokenizer

    _, manifest = small_base
    model, tok = load_model_and_tokenizer(manifest.checkpoint, device=torch.device("cpu"), trust_remote_code=False)
    sampler = make_sampler("transformers", model=model, tokenizer=tok, batch_size=8)
    cfg = SimpleNamespace(**{**vars(CFG), "max_new_tokens": 12})
    rejection_sample(sampler, ROWS[:4], r1_zero_prompt, tmp_path / "a", cfg, seed=1, log=lambda s: None)
    rejection_sample(sampler, ROWS[:2], r1_zero_prompt, tmp_path / "b", cfg, seed=1, log=lambda s: None)  # "killed"
    rejection_sample(sampler, ROWS[:4], r1_zero_prompt, tmp_path / "b", cfg, seed=1, log=lambda s: None)
    for i in range(2):
        assert read_jsonl(shard_path(tmp_path / "a", i)) == read_jsonl(shard_path(tmp_path / "b", i))


def test_each_distinct_sample_is_graded_once(monkeypatch):
    import eval.rejection as rejection

    graded = []

    def counting(texts, golds, **kw):
        graded.extend(texts)
        return real(texts, golds, **kw)

    real = rejection.grade_batch
    monkeypatch.setattr(rejection, "grade_batch", counting)
    a, b = good(), good("4+2=6 write 6, 3+1=4 write 4; answer 46")
    wrong = "<think> 2+4=6 write 6 </think> The final answer is \\boxed{47}."
    verdicts = judge_prompt(ROW, [a, wrong, a, b, wrong, a], CFG)
    assert verdicts == [None, "incorrect", "duplicate", None, "incorrect", "duplicate"]  # as if graded one by one
    assert sorted(graded) == sorted([a, wrong, b])
