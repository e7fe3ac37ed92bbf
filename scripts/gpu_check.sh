#!/usr/bin/env bash
# The one prepared GPU check (see scripts/gpu_check.py). On the lent machine (no network, so no
# installs: the script needs only NumPy and CuPy; PyTorch + transformers for the baseline if present):
#   bash scripts/gpu_check.sh        -> $OUT/gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
timeout 480 python3 scripts/gpu_check.py --out "${OUT:-out}"
