"""Prints the training throughput (tokens/s) of the tiny base architecture per attention
implementation and precision, with and without a padding mask: one fwd+bwd+AdamW step on a batch of
64 × 80 tokens, median of 5. Run: .venv/bin/python scripts/bench_pretrain_step.py"""

import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

B, T = 64, 80
for impl in ("sdpa", "eager"):
    for bf16 in (False, True):
        model = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=450, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=512, max_position_embeddings=512, tie_word_embeddings=True, attn_implementation=impl))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, 450, (B, T))
        padded = torch.ones_like(x)
        padded[:, -10:] = 0
        for mask in (None, padded):
            times = []
            for _ in range(5):
                t = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = model(input_ids=x, attention_mask=mask, labels=x).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                times.append(time.perf_counter() - t)
            step = sorted(times)[2]
            print(f"{impl:5s} {'bf16' if bf16 else 'fp32'} {'mask' if mask is not None else 'no mask':7s} "
                  f"{step:.3f} s/step  {B * T / step:,.0f} tokens/s", flush=True)
