"""An oracle for the rejection sampler of stage 4, for tests on micro models (which almost never answer
correctly): arithmetic prompts are answered correctly, twice the same (to exercise the duplicate
filter); every other prompt goes to the real model.

In-process tests install it with the ``oracle_sampler`` fixture (test_stage4.py); the fault tests,
which must SIGKILL a real process, run the CLI through it: ``python -m tests.oracle stage4 …``."""

import re
import sys

import stages.stage4_final

# The task world's questions, in English and in Chinese ("What is 84 - 21?", "84 - 21 等于多少？").
ARITHMETIC = re.compile(r"What is (\d+(?: [+-] \d+)+)\?|(\d+(?: [+-] \d+)+) 等于多少？")


def oracle_load_sampler(real, calls: list):
    """A ``load_sampler`` that wraps ``real``'s samplers; ``calls`` gets the size of each oracle batch."""

    def load_sampler(recipe, model_path, **kw):
        inner, tokenizer = real(recipe, model_path, **kw)

        def sampler(prompts, *, n, **rest):
            if not all(ARITHMETIC.search(p) for p in prompts):
                return inner(prompts, n=n, **rest)
            calls.append(len(prompts))
            out = []
            for p in prompts:
                m = ARITHMETIC.search(p)
                expr = m.group(1) or m.group(2)
                value = sum(int(x) for x in expr.replace("- ", "-").replace("+ ", "").split())
                thought = f"{expr} = {value}; answer {value}" if m.group(1) else f"{expr} = {value}；答案{value}"
                text = f"<think> {thought} </think> The final answer is \\boxed{{{value}}}."
                out.append([{"text": text, "num_tokens": 20, "truncated": False}] * n)
            return out

        return sampler, tokenizer

    return load_sampler


if __name__ == "__main__":
    from stages.commands.cli import main

    stages.stage4_final.load_sampler = oracle_load_sampler(stages.stage4_final.load_sampler, [])
    sys.exit(main(sys.argv[1:]))
