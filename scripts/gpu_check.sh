#!/usr/bin/env bash
# The one prepared GPU check (scripts/gpu_check.py, scripts/gpu_check_vision.py). On the lent machine
# (no network, so no installs: it needs NumPy, OpenCV, CuPy, PyTorch, onnx and ONNX Runtime, all in the
# machine's image; scikit-image's photographs if present, else a synthetic scene; TensorRT if present):
#   bash scripts/gpu_check.sh        -> $OUT/gpu_check.json, rewritten after each section
# Vision first (the CUDA preprocessing kernel, GPU encoders, 1080p stage latency), then the VLM decoder.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
timeout 480 python3 scripts/gpu_check.py --out "${OUT:-out}" --vision-budget 240
