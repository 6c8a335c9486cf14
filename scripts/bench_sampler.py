"""The project's sampler against transformers' generate: same model, prompts, seed and protocol.

    python scripts/bench_sampler.py --model runs/tiny/stage3/checkpoint [--batch-sizes 16,64,256] [--samples 1024]

For each batch size, interleaved so that all see the same machine: samples/s and generated tokens/s of
transformers' ``generate`` (through ``eval.generate.sample`` with ``use_decode=False``: one process,
torch's threads), of the project's sampler in one process (the KV-cache loop of ``eval/decode.py``,
``processes=1``) and as the pipeline runs it (its batches shared between one single-threaded process
per torch thread); the ratios to ``generate``; and the fraction of this machine's bound that the
project's sampler reaches. The bound: the matmul rate measured here with torch's threads at the
model's own shapes (rows = the batch size), divided by the FLOPs one generated token needs (2 × the
parameters of every matmul it goes through: the layers' projections and the head; attention's own
products are left out, so the bound is generous). A trained checkpoint is needed (``--model``): the
samples' lengths, and so the speed, depend on the weights.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.taskworld import TaskWorld  # noqa: E402
from data.templates import chat_user_message  # noqa: E402
from eval.generate import sample  # noqa: E402
from stages.pipeline.recipe import load_recipe  # noqa: E402


def load(model_path: str | None):
    from stages.pipeline.common import load_model_and_tokenizer

    return load_model_and_tokenizer(model_path, device=torch.device("cpu"), trust_remote_code=False,
                                    dtype=torch.float32)


def matmul_gflops(rows: int, shapes: list[tuple[int, int]], repeat: int = 20) -> float:
    """GFLOP/s of (rows × k) @ (k × n) for the model's own (k, n) shapes, summed as one forward does."""
    xs = [(torch.randn(rows, k), torch.randn(k, n)) for k, n in shapes]
    flops = sum(2 * rows * k * n for k, n in shapes)
    for a, b in xs:
        a @ b
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for a, b in xs:
            a @ b
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint folder, e.g. runs/tiny/stage3/checkpoint")
    parser.add_argument("--batch-sizes", default="64")
    parser.add_argument("--samples", type=int, default=1024, help="completions per measurement")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    model, tok = load(args.model)
    recipe = load_recipe("tiny")
    rows = TaskWorld.from_recipe(recipe).rows("test")
    chat = tok.chat_template is not None
    prompts = [tok.apply_chat_template([{"role": "user", "content": chat_user_message(r["problem"])}], tokenize=False,
                                       add_generation_prompt=True) if chat else r["problem"] for r in rows]
    prompts = (prompts * (args.samples // len(prompts) + 1))[: args.samples]
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", config.num_attention_heads) * head_dim
    per_layer = [(config.hidden_size, config.hidden_size), (config.hidden_size, kv), (config.hidden_size, kv),
                 (config.hidden_size, config.hidden_size), (config.hidden_size, config.intermediate_size),
                 (config.hidden_size, config.intermediate_size), (config.intermediate_size, config.hidden_size)]
    shapes = per_layer * config.num_hidden_layers + [(config.hidden_size, config.vocab_size)]
    flops_per_token = sum(2 * k * n for k, n in shapes)
    print(f"model {args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{flops_per_token / 1e6:.2f} MFLOP per generated token (matmuls), {torch.get_num_threads()} threads")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        results = {}
        settings = (("generate", False, 1), ("project, 1 process", True, 1), ("project", True, None))
        for label, use_decode, processes in settings * 2:
            t = time.perf_counter()
            out = sample(model, tok, prompts, n=1, temperature=0.6, top_p=0.95, max_new_tokens=args.max_new_tokens,
                         batch_size=batch, seed=0, progress=False, use_decode=use_decode, processes=processes)
            seconds = time.perf_counter() - t
            tokens = sum(c[0]["num_tokens"] for c in out)
            results.setdefault(label, []).append((len(out) / seconds, tokens / seconds))
        gen = max(results["generate"])
        bound = matmul_gflops(batch, shapes) * 1e9 / flops_per_token
        print(f"batch {batch}: matmul bound {bound:,.0f} tokens/s")
        for label, _, _ in settings:
            rate = max(results[label])
            print(f"  {label:20s} {rate[0]:7.1f} samples/s {rate[1]:8.0f} tokens/s  {rate[0] / gen[0]:.2f}x generate, "
                  f"{rate[1] / bound:.1%} of the bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
