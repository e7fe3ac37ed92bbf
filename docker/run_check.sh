#!/usr/bin/env bash
# The interop check on ROS 2 Humble, from the repository root: `bash docker/run_check.sh`.
# Needs Docker and this checkout's .venv (`make setup`): the tiny model and the sample bag are
# written here, then copied into the image, so the image needs no PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docker/check
rm -rf "$out" && mkdir -p "$out"
cp docker/check.yaml "$out/encoder.yaml"
OPENCLAW_VISION_HOME="$out/home" .venv/bin/openclaw-vision export --model tiny --out "$out/tiny.fp32.onnx" --force
# sqlite3: the storage Humble reads without extra plugins; version 8 (what runtime/bags.py always writes)
.venv/bin/openclaw-vision bag sample "$out/sample_bag" --frames 30 --fps 10 --width 640 --height 480 --storage sqlite3
docker build -f docker/Dockerfile -t openclaw_vision:humble-check .
docker run --rm openclaw_vision:humble-check
