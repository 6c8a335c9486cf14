"""Budget forcing (eval/budget.py): thinking cut at the budget and answered, or extended with 'Wait'."""

import pytest

from eval.budget import budget_sampler


class WordTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class Script:
    """A sampler that answers from a script keyed by how the prompt ends; records every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, *, n, max_new_tokens, seed, **_):
        self.calls.append((list(prompts), n, max_new_tokens))
        out = []
        for p in prompts:
            if p.endswith("<answer>"):
                text = " 42 </answer>"
            elif p.endswith("Wait"):
                text = " check again 1 2 3 </think> <answer> 7 </answer>"
            elif "quick" in p:
                text = " <think> ok </think> <answer> 7 </answer>"
            else:  # thinks past any budget
                text = " <think> " + "step " * max_new_tokens
            words = text.split()[:max_new_tokens]
            out.append([{"text": text, "num_tokens": len(words), "truncated": "</answer>" not in text}] * n)
        return out


def test_thinking_is_cut_at_the_budget_and_answered():
    inner = Script()
    s = budget_sampler(inner, WordTokenizer(), think_budget=5, template="r1_zero")
    (a, b), = s(["long problem"], n=2, temperature=1.0, top_p=1.0, max_new_tokens=999, seed=0)
    assert inner.calls[0][2] == 5  # the first generation stops at the budget
    assert a["text"].endswith("</think> <answer> 42 </answer>") and not a["truncated"]
    assert a["num_tokens"] == 5 + 2 + 2  # budget + forced "</think> <answer>" + the answer


def test_short_thinking_is_extended_with_wait():
    inner = Script()
    s = budget_sampler(inner, WordTokenizer(), think_budget=20, min_think=4, template="r1_zero", max_waits=1)
    ((c,),) = s(["quick problem"], n=1, temperature=1.0, top_p=1.0, max_new_tokens=999, seed=0)
    assert c["text"] == " <think> ok Wait check again 1 2 3 </think> <answer> 7 </answer>"
    assert len(inner.calls) == 2 and inner.calls[1][0][0].endswith("ok Wait")


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="min_think"):
        budget_sampler(Script(), WordTokenizer(), think_budget=4, min_think=8, template="chat")
