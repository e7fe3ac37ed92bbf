#!/usr/bin/env bash
# The one prepared GPU check (see scripts/gpu_check.py). On the lent machine:
#   bash scripts/gpu_check.sh        -> $OUT/gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e . tokenizers transformers >/dev/null 2>&1 || true
timeout 480 python3 scripts/gpu_check.py --out "${OUT:-out}"
