#!/usr/bin/env bash
# GPU smoke test: one GPU, no hub, a few minutes. Builds a small random-weight model of the real Qwen2
# architecture (Qwen2.5's grouped-query heads, its 151,936-row vocabulary, a tokenizer trained locally on
# the task world), then runs the project's own stage code and checks what it wrote:
#   1. base: the model, pretrained for a handful of steps (loss falls);
#   2. stage 1: 2 GRPO steps with vLLM colocated (bf16 autocast; the overlong penalty gives an untrained
#      model's groups different rewards, so the weights move), the checkpoint saved and reloaded;
#   3. eval: 8 held-out problems × 2 samples through vLLM's offline engine;
#   4. stage 2: 2 SFT steps of the base on a cold-start file, saved and reloaded.
# Each check prints "gpu_smoke: ok …" or stops the script with "gpu_smoke: FAILED …".
#   scripts/gpu_smoke.sh          # after `make setup-gpu` (CUDA, vLLM)
#   scripts/gpu_smoke.sh --cpu    # the same sequence on the CPU: transformers generation, a smaller model and
#                                 # vocabulary (a rehearsal of this script where no GPU is lent)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
R1=.venv/bin/r1
ROOT=$(mktemp -d)
START=$(date +%s)
if [[ "${1:-}" == "--cpu" ]]; then  # the real vocabulary's logits would take an hour on two cores
  DEVICE=cpu; VLLM=false; BACKEND=transformers; ROWS=1024
  SHAPE=(hidden_size=64 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 intermediate_size=128)
else
  DEVICE=cuda
  $PY -c "import vllm" 2>/dev/null || { echo "gpu_smoke: FAILED vLLM is not installed (make setup-gpu)"; exit 1; }
  VLLM=true; BACKEND=vllm; ROWS=151936
  # Qwen2.5-0.5B's layer shape (14 query heads, 2 key/value heads), 4 layers instead of 24
  SHAPE=(hidden_size=896 num_hidden_layers=4 num_attention_heads=14 num_key_value_heads=2 intermediate_size=4864)
fi
SETS=(--set "run_root=$ROOT" --set "device=$DEVICE" --set "base.architecture.embedding_rows=$ROWS"
      --set base.architecture.max_position_embeddings=1024 --set base.pretrain.steps=30
      --set base.pretrain.warmup_steps=3 --set base.pretrain.learning_rate=5e-3
      --set base.pretrain.log_every=5 --set data.test.limit=8 --set eval.k=2 --set eval.max_new_tokens=64
      --set "eval.backend=$BACKEND"
      --set stage1.steps=2 --set stage1.prompts_per_step=8 --set stage1.num_generations=4
      --set stage1.gradient_accumulation_steps=1 --set "stage1.eval_steps=[]" --set stage1.precision=autocast
      --set stage1.max_completion_length=64 --set "stage1.rewards={format: 1.0, accuracy: 1.0, overlong: 1.0}"
      --set stage1.overlong_max_length=64 --set stage1.overlong_buffer=48 --set stage1.trl.learning_rate=1e-3
      --set stage1.trl.save_steps=1 --set "stage1.trl.use_vllm=$VLLM" --set stage1.trl.vllm_mode=colocate
      --set stage1.trl.vllm_gpu_memory_utilization=0.25 --set launch.vllm_memory_fraction=0.25
      --set stage2.cold_start.sample=null --set stage2.sft.epochs=1 --set stage2.sft.batch_size=4
      --set stage2.sft.gradient_accumulation_steps=1 --set stage2.sft.precision=autocast)
for s in "${SHAPE[@]}"; do SETS+=(--set "base.architecture.$s"); done
$PY - "$ROOT/user_cot.jsonl" <<'PYEOF'
import json, sys
rows = [{"id": f"u{a}{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b),
         "reasoning": f"{a % 10}+{b % 10}={a % 10 + b % 10}, then the tens; answer {a + b}"}
        for a, b in [(12, 34), (21, 45), (33, 41), (52, 17), (60, 29), (44, 44), (15, 72), (81, 13)]]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PYEOF
SETS+=(--set "stage2.cold_start.user_dataset={source: jsonl, name: $ROOT/user_cot.jsonl}")
echo "gpu_smoke: $($PY -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')")," \
     "device $DEVICE, vLLM $VLLM, runs in $ROOT"

check() {  # check <stage> <python expression over m (manifest), d (stage dir)>: prints ok or fails
  $PY - "$ROOT/tiny/$1" "$2" "$1" <<'PYEOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1]); m = json.loads((d / "manifest.json").read_text())
ok = m["status"] == "complete" and eval(sys.argv[2])
print(f"gpu_smoke: {'ok' if ok else 'FAILED'} {sys.argv[3]}: {sys.argv[2]}")
sys.exit(0 if ok else 1)
PYEOF
}
reloads() {  # reloads <checkpoint> <other checkpoint>: loads in a fresh process, its weights differ from the other's
  $PY - "$1" "$2" "$ROWS" <<'PYEOF'
import sys
from transformers import AutoModelForCausalLM
from stages.common import weights_digest
a, b = (AutoModelForCausalLM.from_pretrained(p) for p in sys.argv[1:3])
ok = a.config.vocab_size == int(sys.argv[3]) and weights_digest(a) != weights_digest(b)
print(f"gpu_smoke: {'ok' if ok else 'FAILED'} {sys.argv[1]} reloads ({sum(p.numel() for p in a.parameters()) / 1e6:.0f}M "
      f"parameters, vocabulary {a.config.vocab_size}) and differs from {sys.argv[2]}")
sys.exit(0 if ok else 1)
PYEOF
}

$R1 base --recipe tiny "${SETS[@]}"
check base "sum(m['metrics']['pretrain']['loss_curve'][-5:]) < sum(m['metrics']['pretrain']['loss_curve'][:5])"
$R1 stage1 --recipe tiny "${SETS[@]}"
check stage1 "m['metrics']['train']['steps'] == 2 and m['metrics']['train']['trl']['use_vllm'] == ('$VLLM' == 'true')"
reloads "$ROOT/tiny/stage1/checkpoint" "$ROOT/tiny/base/checkpoint"
$R1 eval --recipe tiny --model "$ROOT/tiny/stage1/checkpoint" --bench task --k 2 --limit 8 "${SETS[@]}" \
  | tee "$ROOT/eval.txt"
grep -q "pass@1" "$ROOT/eval.txt" && echo "gpu_smoke: ok eval: 8 problems × 2 samples through $BACKEND"
$R1 stage2 --recipe tiny "${SETS[@]}"
check stage2 "m['metrics']['sft_checkpoint']['steps'] == 2"
reloads "$ROOT/tiny/stage2/checkpoint" "$ROOT/tiny/base/checkpoint"
echo "gpu_smoke: all checks passed in $(( $(date +%s) - START )) s"
