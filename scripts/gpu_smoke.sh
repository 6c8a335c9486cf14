#!/usr/bin/env bash
# GPU smoke test (one GPU, a few minutes): a randomly initialised ~25M-parameter Qwen2 (the tiny base's
# code with a wider, deeper architecture, pretrained for a handful of steps), then a few GRPO steps of the
# project's stage-1 code in bf16 on CUDA, with vLLM colocated when it is installed. Prints the GRPO
# throughput in completion tokens per second.
#   scripts/gpu_smoke.sh            # after `make setup-gpu` (or `make setup`: then without vLLM)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
ROOT=$(mktemp -d)
VLLM=$($PY -c "import vllm" >/dev/null 2>&1 && echo true || echo false)
SETS=(--set "run_root=$ROOT" --set device=cuda
      --set base.architecture.hidden_size=512 --set base.architecture.num_hidden_layers=8
      --set base.architecture.num_attention_heads=8 --set base.architecture.num_key_value_heads=8
      --set base.architecture.intermediate_size=2048 --set base.pretrain.steps=10
      --set data.test.limit=64 --set eval.k=2
      --set stage1.steps=6 --set stage1.prompts_per_step=32 --set stage1.num_generations=8
      --set stage1.precision=bf16 --set stage1.gradient_checkpointing=false --set stage1.trl.save_steps=100
      --set "stage1.trl.use_vllm=$VLLM" --set stage1.trl.vllm_gpu_memory_utilization=0.2)
echo "gpu_smoke: $($PY -c 'import torch; print(torch.cuda.get_device_name(0))'), vLLM colocated: $VLLM, runs in $ROOT"
.venv/bin/r1 base --recipe tiny "${SETS[@]}"
.venv/bin/r1 stage1 --recipe tiny "${SETS[@]}"
$PY - "$ROOT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/tiny/stage1/metrics.jsonl")][1:]  # step 1 includes warm-up
per_step = 32 * 8
tps = [r["mean_length"] * per_step / r["seconds_per_step"] for r in rows if r.get("seconds_per_step")]
print(f"gpu_smoke: GRPO {len(rows) + 1} steps, {per_step} completions per step, "
      f"median {statistics.median(tps):,.0f} completion tokens/s (generation + scoring + update)")
PYEOF
