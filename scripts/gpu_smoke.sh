#!/usr/bin/env bash
# GPU smoke test: one GPU, no hub, at most 8 minutes (SMOKE_LIMIT seconds in all; each step has its own
# limit too, and its time is printed). A small random-weight model of the real Qwen2 architecture (Qwen2.5's
# grouped-query heads and 151,936-row vocabulary, a tokenizer trained locally on the task world) runs through
# the project's own stage code, and the script checks what each stage wrote:
#   1. base: the model, pretrained for 3 small steps on the CPU (the tiny base's pretraining loop never runs
#      on a GPU; a real base is registered, not pretrained), probed through vLLM's offline engine;
#   2. stage 1: 2 GRPO steps with vLLM colocated (bf16 autocast), evaluated before and after through vLLM.
#      An untrained model of the real vocabulary never ends a completion (every one is cut at the same
#      length) and earns nothing, so every group's rewards are equal and GRPO's advantages zero: the smoke
#      adds a reward that differs between random texts (its share of distinct characters, a custom reward
#      by import path) and checks that some groups had different rewards, so that "the weights moved" means
#      a gradient step moved them;
#   3. eval: 8 held-out problems × 2 samples through `r1 eval --backend vllm`;
#   4. stage 2: 2 SFT steps of the base on a cold-start file;
#   5. the checkpoints of stages 1 and 2 reloaded in a fresh process: whole, and trained.
# Each check prints "gpu_smoke: ok …"; the first failure prints "gpu_smoke: FAILED …" and ends the script
# with a non-zero status.
#   scripts/gpu_smoke.sh               # after `make setup-gpu` (CUDA, vLLM)
#   scripts/gpu_smoke.sh --cpu         # the same sequence on the CPU, transformers generation, a smaller
#                                      # model and vocabulary (a rehearsal where no GPU is lent)
#   scripts/gpu_smoke.sh --cpu --vllm  # the rehearsal with vLLM's CPU build (`make setup-vllm`): every vLLM
#                                      # path of the GPU run (engine, colocated GRPO), on the CPU
#   scripts/gpu_smoke.sh --no-vllm     # a GPU with transformers generation (an image where vLLM cannot be
#                                      # installed: scripts/device_setup.sh)
# SMOKE_SETS="--set k=v --set 'k2={a: 1}' …" (shell words) adds settings (the GPU-only paths: stage1.gradient_checkpointing=true…);
# SMOKE_LAUNCH=fsdp (ddp, zero2, zero3) runs the two training stages through scripts/launch, one process.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${SMOKE_LIMIT:-480}
START=$(date +%s)
ROOT=$(mktemp -d)
DEVICE=cuda VLLM=true VENV=.venv
for arg in "$@"; do
  case $arg in
    --cpu) DEVICE=cpu; [[ " $* " == *" --vllm "* ]] || VLLM=false ;;
    --vllm) VENV=.venv-vllm ;;
    --no-vllm) VLLM=false ;;
    *) echo "gpu_smoke: unknown argument $arg (--cpu, --cpu --vllm, --no-vllm)"; exit 2 ;;
  esac
done
[[ $DEVICE == cuda && $VENV == .venv-vllm ]] && { echo "gpu_smoke: --vllm goes with --cpu (a GPU uses .venv)"; exit 2; }
[[ " $* " == *" --vllm "* && " $* " == *" --no-vllm "* ]] && { echo "gpu_smoke: --vllm and --no-vllm contradict"; exit 2; }
PY=$VENV/bin/python
R1=$VENV/bin/r1
if [[ $VLLM == true ]]; then
  BACKEND=vllm
  $PY -c "import vllm" 2>/dev/null || { echo "gpu_smoke: FAILED vLLM is not installed in $VENV (make setup-gpu; make setup-vllm for the CPU build)"; exit 1; }
else
  BACKEND=transformers
fi
if [[ $DEVICE == cpu ]]; then  # the real vocabulary's logits would take many minutes on two cores
  ROWS=1024
  SHAPE=(hidden_size=64 num_hidden_layers=2 num_attention_heads=2 num_key_value_heads=2 intermediate_size=128)
  MEMORY=0.05  # on vLLM's CPU backend, the share of host memory for the KV cache
else
  ROWS=151936
  # Qwen2.5-0.5B's layer shape (14 query heads, 2 key/value heads), 4 layers instead of 24
  SHAPE=(hidden_size=896 num_hidden_layers=4 num_attention_heads=14 num_key_value_heads=2 intermediate_size=4864)
  MEMORY=0.25
fi
SETS=(--set "run_root=$ROOT" --set "device=$DEVICE" --set base.release=null --set "base.architecture.embedding_rows=$ROWS"
      --set base.architecture.max_position_embeddings=1024 --set base.pretrain.steps=3
      --set base.pretrain.batch_size=8 --set base.pretrain.warmup_steps=1 --set base.pretrain.log_every=1
      --set data.test.limit=8 --set eval.k=2 --set eval.max_new_tokens=64 --set "eval.benchmarks=[]"
      --set "eval.backend=$BACKEND" --set launch.vllm_memory_fraction=$MEMORY --set launch.vllm_max_model_len=512
      --set launch.vllm_enforce_eager=true
      --set stage1.steps=2 --set stage1.prompts_per_step=8 --set stage1.num_generations=4
      --set stage1.gradient_accumulation_steps=1 --set "stage1.eval_steps=[]" --set stage1.precision=autocast
      --set stage1.max_completion_length=64 --set stage1.trl.learning_rate=1e-3
      --set "stage1.rewards={format: 1.0, accuracy: 1.0, smoke_rewards.distinct_chars: 1.0}"
      --set stage1.trl.save_steps=1 --set "stage1.trl.use_vllm=$VLLM" --set stage1.trl.vllm_mode=colocate
      --set stage1.trl.vllm_gpu_memory_utilization=$MEMORY
      --set stage2.cold_start.sample=null --set stage2.sft.epochs=1 --set stage2.sft.batch_size=4
      --set stage2.sft.gradient_accumulation_steps=1 --set stage2.sft.precision=autocast)
for s in "${SHAPE[@]}"; do SETS+=(--set "base.architecture.$s"); done
eval "EXTRA=(${SMOKE_SETS:-})"  # shell words: quote a value with spaces
SETS+=("${EXTRA[@]}")
TRAIN=($R1)  # how stages 1 and 2 start
[[ -n ${SMOKE_LAUNCH:-} ]] && TRAIN=($PY scripts/launch --config "$SMOKE_LAUNCH" --processes 1)
cat > "$ROOT/smoke_rewards.py" <<'PYEOF'
def distinct_chars(completions, **kwargs):
    """The share of distinct characters in each completion: it differs between an untrained model's samples."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [len(set(t)) / max(len(t), 1) for t in texts]
PYEOF
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
$PY - "$ROOT/user_cot.jsonl" <<'PYEOF'
import json, sys
rows = [{"id": f"u{a}{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b),
         "reasoning": f"{a % 10}+{b % 10}={a % 10 + b % 10}, then the tens; answer {a + b}"}
        for a, b in [(12, 34), (21, 45), (33, 41), (52, 17), (60, 29), (44, 44), (15, 72), (81, 13)]]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PYEOF
SETS+=(--set "stage2.cold_start.user_dataset={source: jsonl, name: $ROOT/user_cot.jsonl}")
echo "gpu_smoke: $($PY -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')")," \
     "device $DEVICE, vLLM $VLLM ($VENV), runs in $ROOT, limit $LIMIT s${SMOKE_LAUNCH:+, launch $SMOKE_LAUNCH}${SMOKE_SETS:+, $SMOKE_SETS}"

fail() { echo "gpu_smoke: FAILED $*"; exit 1; }
step() {  # step NAME SECONDS COMMAND…: runs the command within its limit (and the smoke's), prints its time
  local name=$1 limit=$2 t0 rc left; shift 2
  t0=$(date +%s); left=$(( LIMIT - (t0 - START) ))
  (( left > 0 )) || fail "$name: the smoke's $LIMIT s are spent"
  (( limit < left )) || limit=$left
  rc=0; timeout --kill-after=10 "$limit" "$@" || rc=$?
  (( rc == 0 )) || fail "$name: exit status $rc after $(( $(date +%s) - t0 )) s$( ((rc == 124 || rc == 137)) && echo " (over its $limit s)")"
  echo "gpu_smoke: step $name took $(( $(date +%s) - t0 )) s"
}
check() {  # check <stage> <python expression over m (manifest), d (stage dir)>: prints ok or fails
  $PY - "$ROOT/tiny/$1" "$2" "$1" <<'PYEOF' || fail "$1: $2"
import json, sys
from pathlib import Path
d = Path(sys.argv[1]); m = json.loads((d / "manifest.json").read_text())
ok = m["status"] == "complete" and eval(sys.argv[2])
print(f"gpu_smoke: {'ok' if ok else 'FAILED'} {sys.argv[3]}: {sys.argv[2]}")
sys.exit(0 if ok else 1)
PYEOF
}
reloads() {  # reloads <other checkpoint> <checkpoint>…: each loads (one fresh process), its weights differ from the other's
  local t0; t0=$(date +%s)
  timeout --kill-after=10 60 $PY - "$ROWS" "$@" <<'PYEOF' || fail "a checkpoint does not reload as a trained model of $ROWS rows"
import sys
from transformers import AutoModelForCausalLM
from stages.pipeline.common import weights_digest
rows, other, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
before = weights_digest(AutoModelForCausalLM.from_pretrained(other))
ok = True
for path in paths:
    m = AutoModelForCausalLM.from_pretrained(path)
    good = m.config.vocab_size == rows and weights_digest(m) != before
    ok &= good
    print(f"gpu_smoke: {'ok' if good else 'FAILED'} {path} reloads ({sum(p.numel() for p in m.parameters()) / 1e6:.1f}M "
          f"parameters, vocabulary {m.config.vocab_size}) and differs from {other}")
sys.exit(0 if ok else 1)
PYEOF
  echo "gpu_smoke: step reload took $(( $(date +%s) - t0 )) s"
}

step base 120 $R1 base --recipe tiny "${SETS[@]}"
check base "len(m['metrics']['pretrain']['loss_curve']) == 3 and m['metrics']['probe']['samples'] == 16"
step stage1 240 "${TRAIN[@]}" stage1 --recipe tiny "${SETS[@]}"
check stage1 "m['metrics']['train']['steps'] == 2 and m['metrics']['train']['mean_frac_reward_zero_std'] < 1 and m['metrics']['train']['trl']['use_vllm'] == ('$VLLM' == 'true') and m['metrics']['eval_after']['samples'] == 16"
step eval 120 $R1 eval --recipe tiny --model "$ROOT/tiny/stage1/checkpoint" --bench task --k 2 --limit 8 \
  --backend $BACKEND --out "$ROOT/eval" "${SETS[@]}"
$PY -c "import json, sys; t = json.load(open(sys.argv[1]))['benchmarks']['task']; sys.exit(not (t['samples'] == 16 and 'pass@1' in t))" \
  "$ROOT/eval/results.json" || fail "eval: $ROOT/eval/results.json has no pass@1 over 8 problems × 2 samples"
echo "gpu_smoke: ok eval: 8 problems × 2 samples through $BACKEND"
step stage2 120 "${TRAIN[@]}" stage2 --recipe tiny "${SETS[@]}"
check stage2 "m['metrics']['sft_checkpoint']['steps'] == 2"
reloads "$ROOT/tiny/base/checkpoint" "$ROOT/tiny/stage1/checkpoint" "$ROOT/tiny/stage2/checkpoint"
echo "gpu_smoke: all checks passed in $(( $(date +%s) - START )) s"
