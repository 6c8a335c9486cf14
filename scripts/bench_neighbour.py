"""How a busy neighbour slows the project: the same work with and without one busy process beside it.

    python scripts/bench_neighbour.py --model runs/tiny/stage3/checkpoint [--threads 1,2,recipe] [--policies default,passive]

The work (in a fresh process per setting, since OpenMP reads its settings once): sampling 256
completions with the project's sampler (batch 64, T 0.6, top-p 0.95), then 20 training steps
(forward, backward, AdamW) on batches of 16 chat rows. Settings: torch's intra-op threads, and
OpenMP's wait policy (``default``: threads spin at barriers before they sleep; ``passive``: they sleep at
once, ``OMP_WAIT_POLICY=PASSIVE``). With a number of threads, one process samples; ``recipe`` is the
tiny recipe's fixed layout (``stages/pipeline/threads.py``): one training thread, and the sampler shares its
batches between ``sample_processes`` (2) single-threaded processes. The neighbour is one process spinning
on one core. The table gives
seconds for each part and the slowdown the neighbour causes; "in proportion" is about 1.5-2× on a
2-core machine (the neighbour takes one core of two).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORK = r"""
import json, sys, time, torch
sys.path.insert(0, {root!r})
from data.taskworld import TaskWorld
from data.templates import chat_user_message
from eval.generate import sample
from stages.pipeline.common import load_model_and_tokenizer
from stages.pipeline.recipe import load_recipe
from stages.pipeline.threads import fix_threads
{choose}
model, tok = load_model_and_tokenizer({model!r}, device=torch.device("cpu"), trust_remote_code=False,
                                      dtype=torch.float32)
rows = TaskWorld.from_recipe(load_recipe("tiny")).rows("test")
msgs = [[{{"role": "user", "content": chat_user_message(r["problem"])}}] for r in rows]
prompts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in msgs]
prompts = (prompts * 2)[:256]
sample(model, tok, prompts[:64], n=1, temperature=0.6, top_p=0.95, max_new_tokens=128, batch_size=64,
       seed=1, progress=False, processes={processes})  # warm up
t = time.perf_counter()
out = sample(model, tok, prompts, n=1, temperature=0.6, top_p=0.95, max_new_tokens=128, batch_size=64,
             seed=0, progress=False, processes={processes})
sampling = time.perf_counter() - t
texts = [p + c[0]["text"] for p, c in zip(prompts, out)]
batch = tok(texts[:16], return_tensors="pt", padding=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
model.train()
t = time.perf_counter()
for _ in range(20):
    loss = model(**batch, labels=batch["input_ids"], use_cache=False).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
training = time.perf_counter() - t
print(json.dumps({{"sampling_s": sampling, "training_s": training, "threads": torch.get_num_threads()}}))
"""


def run(model: str, threads: str, policy: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "R1_THREADS")}
    if threads != "auto":
        env["OMP_NUM_THREADS"] = threads
    if policy == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    layout = threads == "recipe"
    work = WORK.format(root=str(ROOT), model=model, choose="fix_threads(1)" if layout else "",
                       processes="2" if layout else "1")
    out = subprocess.run([sys.executable, "-c", work], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a chat-template checkpoint, e.g. runs/tiny/stage3/checkpoint")
    parser.add_argument("--threads", default="1,2,recipe")
    parser.add_argument("--policies", default="default,passive")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; neighbour: one process spinning on one core")
    print("| threads | wait policy | sampling s (alone → with neighbour) | training s (alone → with neighbour) |")
    print("|---|---|---|---|")
    for threads in args.threads.split(","):
        for policy in args.policies.split(","):
            alone = run(args.model, threads, policy)
            neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                time.sleep(0.5)
                busy = run(args.model, threads, policy)
            finally:
                neighbour.kill()
                neighbour.wait()
            label = "recipe (1 thread, 2 sampling processes)" if threads == "recipe" else threads
            print(f"| {label} | {policy} | {alone['sampling_s']:.1f} → {busy['sampling_s']:.1f} "
                  f"({busy['sampling_s'] / alone['sampling_s']:.1f}×) | {alone['training_s']:.1f} → "
                  f"{busy['training_s']:.1f} ({busy['training_s'] / alone['training_s']:.1f}×) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
