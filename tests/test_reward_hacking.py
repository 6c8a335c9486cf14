"""Scripted reward hackers on the task world: what the cheapest non-answers earn.

RL optimises whatever the reward pays for. Each policy below writes, for 200 held-out task-world
problems, a well-formed completion whose answer is not a genuine answer: it copies the problem's
arithmetic, wraps the right number in prose, splits its digits, or leaves the box empty. Each must
earn accuracy reward 0 on every problem (and the empty box format reward 0 too), in the R1-Zero
format of stage 1 and in the chat format of stages 2-4, while the honest policy earns 1 everywhere.
"""

from __future__ import annotations

import re

import pytest

from data.taskworld import TaskWorld
from stages.training.rewards import accuracy_reward, format_reward, summary_format_reward

WORLD = TaskWorld(seed=1234, families=("add", "sub", "expr3"), min_digits=2, max_digits=3,
                  n_train=10, n_test=200, test_percent=10)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rows = WORLD.rows("test")
    assert len(rows) == 200
    return rows


def expression(problem: str) -> str:
    """The arithmetic of "What is 347 + 589?"."""
    m = re.fullmatch(r"What is (.+)\?", problem)
    assert m, problem
    return m.group(1)


def split_digits(gold: str) -> str:
    return " ".join(gold if len(gold) > 1 else "0" + gold)


# Each policy: (problem, gold) -> the answer it writes.
POLICIES = {
    "honest": lambda problem, gold: gold,
    "echo": lambda problem, gold: expression(problem),
    "echo in parentheses": lambda problem, gold: f"({expression(problem)})",
    "echo with the result": lambda problem, gold: f"{expression(problem)} = {gold}",
    "prose around the number": lambda problem, gold: f"I think it is {gold}, probably",
    "hedge": lambda problem, gold: f"{int(gold) + 1} or {gold}",
    "split digits": lambda problem, gold: split_digits(gold),
    "empty": lambda problem, gold: "",
}
THINK = "<think> add the digits from the right, carry when needed </think>"


def r1_zero(answer: str, boxed: bool) -> str:
    content = "\\boxed{" + answer + "}" if boxed else answer
    return f" {THINK} <answer> {content} </answer>"


def chat(answer: str) -> list[dict]:
    return [{"role": "assistant", "content": f"{THINK} The final answer is \\boxed{{{answer}}}."}]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_scripted_policies_earn_nothing_but_the_honest_one(rows, policy):
    write = POLICIES[policy]
    answers = [write(r["problem"], r["answer"]) for r in rows]
    golds = [r["answer"] for r in rows]
    expected = 1.0 if policy == "honest" else 0.0
    completions = {
        "r1_zero": [r1_zero(a, boxed=False) for a in answers],
        "r1_zero_boxed": [r1_zero(a, boxed=True) for a in answers],
        "chat": [chat(a) for a in answers],
    }
    for name, batch in completions.items():
        rewards = accuracy_reward(batch, answer=golds, verifier=["math"] * len(golds),
                                  problem=[r["problem"] for r in rows])
        paid = [(a, g) for a, g, r in zip(answers, golds, rewards, strict=True) if r != expected]
        assert not paid, f"{policy} / {name}: {len(paid)} of {len(golds)} off, e.g. {paid[:3]}"
    if policy == "empty":  # no content: no format reward either
        assert set(format_reward(completions["r1_zero"])) == {0.0}
        assert set(format_reward(completions["r1_zero_boxed"])) == {0.0}
        assert set(summary_format_reward(completions["chat"])) == {0.0}
    if policy == "honest":
        assert set(format_reward(completions["r1_zero"])) == {1.0}
        assert set(summary_format_reward(completions["chat"])) == {1.0}


INVISIBLE = ["\u200b", "\u200c\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e\u200f", "\u3164", "\u2800", "\u034f",
             " \u200b\t\u2060 "]


@pytest.mark.parametrize("blank", INVISIBLE, ids=lambda b: "+".join(f"U+{ord(c):04X}" for c in b))
def test_invisible_content_is_empty(blank):
    """Zero-width and other invisible characters say nothing: a think block, an answer or a box of them
    earns no format reward."""
    assert format_reward([f"<think>{blank}</think><answer>{blank}</answer>",
                          f"<think>x</think><answer>{blank}</answer>",
                          f"<think>{blank}</think><answer>5</answer>",
                          f"<think>x</think><answer>\\boxed{{{blank}}}</answer>"]) == [0.0] * 4
    assert summary_format_reward([f"<think>{blank}</think> The answer is \\boxed{{5}}.",
                                  f"<think>x</think> The answer is \\boxed{{{blank}}}."]) == [0.0, 0.0]
    assert format_reward(["<think>x</think><answer>5</answer>"]) == [1.0]
    assert summary_format_reward(["<think>x</think> The answer is \\boxed{5}."]) == [1.0]


def test_every_reward_is_bounded_on_the_longest_completions():
    """Each reward, on each adversarial completion of 32k tokens' length (scripts/bench_rewards.py), returns
    within 5 s (a tag pattern, the code extractor and the language measure were quadratic before)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_rewards", Path(__file__).parents[1] / "scripts" / "bench_rewards.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    slow = [(reward, name, round(seconds, 2)) for reward, name, seconds in bench.timings() if seconds > 5.0]
    assert not slow
    import time

    from stages.training.rewards import extract_code

    t0 = time.perf_counter()
    extract_code("<answer>" * (bench.CHARS // 8))
    assert time.perf_counter() - t0 < 5.0
