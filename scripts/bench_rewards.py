"""Every reward on adversarial completions as long as a real recipe allows (32k tokens; 8 characters a token,
as a tag such as ``</answer>`` is one token): prints each call's seconds and the worst. The bound the rewards must keep is 5 s a call
(tests/test_reward_hacking.py checks it on the same inputs).

    .venv/bin/python scripts/bench_rewards.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHARS = 32_768 * 8


def adversarial() -> dict[str, str]:
    """Inputs that made a pattern or a parser slower than linear somewhere, each about CHARS long."""
    def fill(unit: str, head: str = "", tail: str = "") -> str:
        return head + unit * ((CHARS - len(head) - len(tail)) // len(unit)) + tail

    return {
        "closing tags after one opener": fill("</think><answer>x</answer>", "<think>", "!"),
        "answer openers": fill("<answer>"), "think openers": fill("<think>"), "think closers": fill("</think>"),
        "unclosed \\(": fill("\\("), "dollars": fill("$"), "alternating a$b": fill("a$b"),
        "nested boxes": fill("\\boxed{", "<think>t</think>"), "open braces": fill("{", "<think>t</think><answer>"),
        "nested fractions": fill("\\frac{1}{", "<think>t</think><answer>", "</answer>"),
        "exponent tower": fill("2^{", "<think>t</think><answer>", "</answer>"),
        "long sum": fill("1+", "<think>t</think><answer>", "1</answer>"),
        "open parentheses": fill("(", "<think>t</think><answer>", "</answer>"),
        "digits": fill("9", "<think>t</think><answer>", "</answer>"),
        "code fences": fill("```python\n", "<think>t</think><answer>"),
        "Chinese and letters": fill("好a ", "<think>", "</think><answer>5</answer>"),
        "markup and words": fill("`first` $add$ <x>", "<think>", "</think><answer>5</answer>"),
        "zero-width spaces": fill("\u200b", "<think>", "</think><answer>5</answer>"),
        "boxed answers": fill("\\boxed{5} ", "<think>t</think>"),
    }


def rewards():
    from stages.training import rewards as R

    return {
        "format": R.format_reward, "summary_format": R.summary_format_reward,
        "accuracy (gold 5)": lambda c: R.accuracy_reward(c, answer=["5"] * len(c)),
        "accuracy (gold 2\\sqrt{2})": lambda c: R.accuracy_reward(c, answer=["2\\sqrt{2}"] * len(c)),
        "language (en)": lambda c: R.language_consistency_reward(c, target="en"),
        "language (zh)": lambda c: R.language_consistency_reward(c, target="zh"),
        "overlong": lambda c: R.make_overlong_penalty(32_768, 4_096)(c, completion_ids=[[0] * 32_768] * len(c)),
    }


def timings() -> list[tuple[str, str, float]]:
    out = []
    for input_name, text in adversarial().items():
        for reward_name, reward in rewards().items():
            t0 = time.perf_counter()
            reward([text])
            out.append((reward_name, input_name, time.perf_counter() - t0))
    return out


def main() -> None:
    rows = timings()
    for reward_name, input_name, seconds in rows:
        print(f"{seconds:7.3f} s  {reward_name:28s} {input_name}")
    worst = max(rows, key=lambda r: r[2])
    print(f"worst: {worst[2]:.3f} s ({worst[0]} on {worst[1]}); {len(rows)} calls on {CHARS:,}-character inputs")


if __name__ == "__main__":
    main()
