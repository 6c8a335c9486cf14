#!/usr/bin/env bash
# .venv on a GPU machine that cannot reach a package registry but has CUDA PyTorch in its own Python (an image
# like the borrowed H200 machine's): the image's packages stay visible (torch, transformers, accelerate…), the
# project's missing ones come from wheels carried in WHEELS, and the project is installed editable on top.
# vLLM and DeepSpeed are not among them (vLLM 0.31.0 needs torch 2.13.0's CUDA build, gigabytes): run
# `scripts/gpu_smoke.sh --no-vllm` afterwards. On a machine with a registry, `make setup-gpu` is the way.
#   WHEELS=.whl scripts/device_setup.sh   # wheels fetched beforehand with `pip download` (docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.whl}
PY=${PYTHON:-python3}
IMAGE_SITE=$($PY -c "import site; print(site.getsitepackages()[0])")
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || { echo "device_setup: $PY has no CUDA torch"; exit 1; }
# a plain venv whose site-packages come first, then the image's (a .pth line): --system-site-packages would
# reach the base interpreter's site-packages, not the image's own venv where torch lives
rm -rf .venv && $PY -m venv --without-pip .venv
VENV_SITE=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
echo "$IMAGE_SITE" > "$VENV_SITE/zz-image.pth"
.venv/bin/python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$VENV_SITE" "$WHEELS"/*.whl
.venv/bin/python -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --ignore-requires-python -e .
.venv/bin/python - <<'EOF'
import importlib.metadata as md, torch
names = ["torch", "transformers", "trl", "peft", "accelerate", "datasets", "math-verify", "pyarrow"]
print("device_setup:", torch.cuda.get_device_name(0), "·", ", ".join(f"{n} {md.version(n)}" for n in names))
EOF
