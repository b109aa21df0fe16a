#!/usr/bin/env bash
# GPU check (README: GPU). On the GPU machine, from the repository root, with the
# bundle from tools/gpu_check/prepare.py at results/gpu_check: validates and times every bundled
# cuda library against PyTorch on the GPU, speaks end to end, probes every op kind; writes
# the figures to ${OUT:-.}/gpu_check.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python=$(command -v python3 || command -v python)
"$python" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)' \
    || { echo "this check needs python3 with numpy"; exit 2; }
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' \
    || { echo "this check needs PyTorch (with CUDA) for the reference"; exit 2; }
exec "$python" tools/gpu_check/check.py --bundle "${BUNDLE:-results/gpu_check}" \
    --out "${OUT:-.}/gpu_check.json" "$@"
