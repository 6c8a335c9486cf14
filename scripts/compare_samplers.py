"""vLLM's engine against the project's decode loop on one checkpoint: the same held-out problems, template
and sampling (the recipe's eval protocol), paired problem by problem. Prints each one's pass@1 and mean
length and the paired differences with their 95% intervals (eval.runner.compare_samplers). Needs vLLM
(`make setup-vllm` for its CPU build, `make setup-gpu` on a GPU machine):

    .venv-vllm/bin/python scripts/compare_samplers.py runs/tiny/stage3/checkpoint --template chat
    .venv-vllm/bin/python scripts/compare_samplers.py runs/tiny/base/checkpoint --limit 50 --split val
"""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--recipe", default="tiny")
    ap.add_argument("--split", default="test", choices=["val", "test"])
    ap.add_argument("--limit", type=int, default=None, help="problems (default: the recipe's split limit)")
    ap.add_argument("--template", choices=["r1_zero", "chat"], default=None, help="default: the recipe's")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    from data.datasets import load_rows
    from eval.generate import make_sampler
    from eval.runner import compare_samplers
    from stages.pipeline.common import load_model_and_tokenizer, load_sampler, pick_device, release
    from stages.pipeline.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.set)
    split = dataclasses.replace(getattr(recipe.data, args.split), limit=args.limit or getattr(recipe.data, args.split).limit)
    rows, _, source = load_rows(split, recipe)
    cfg = dataclasses.replace(recipe.eval, prompt_template=args.template or recipe.eval.prompt_template,
                              k=args.k or recipe.eval.k)
    model, tokenizer = load_model_and_tokenizer(args.checkpoint, device=pick_device(recipe.device),
                                                trust_remote_code=recipe.trust_remote_code)
    ours = make_sampler("transformers", model=model, tokenizer=tokenizer, batch_size=cfg.batch_size)
    engine = []

    def vllm(prompts, **kw):  # the engine starts once the decode loop is done: its processes fork, and a
        if not engine:        # fork beside the engine's threads can deadlock
            engine.append(load_sampler(recipe, args.checkpoint, backend="vllm", batch_size=cfg.batch_size)[0])
        return engine[0](prompts, **kw)

    t0 = time.time()
    try:
        result = compare_samplers(ours, vllm, tokenizer, rows, cfg=cfg, seed=recipe.seed)
    finally:
        for e in engine:
            release(e)
    print(f"{args.checkpoint}: {len(rows)} problems of {source} × {cfg.k} samples, T {cfg.temperature}, "
          f"top-p {cfg.top_p}, ≤ {cfg.max_new_tokens} tokens, template {cfg.prompt_template} ({time.time() - t0:.0f} s)")
    for name, key in (("project's decode loop", "first"), ("vLLM", "second")):
        s = result[key]
        print(f"  {name:22s} pass@1 {s['pass@1']:.3f}  mean length {s['mean_length_tokens']:.1f} tokens")
    for key in ("pass@1", "mean_length_tokens"):
        print(f"  vLLM − project, {key:18s} {result[key].fmt()} (paired, {result[key].n} problems)")
    print(json.dumps({"pass@1": result["pass@1"].to_dict(), "mean_length_tokens": result["mean_length_tokens"].to_dict()}))


if __name__ == "__main__":
    main()
