"""The prepared GPU check script runs end to end here with NumPy standing in for CuPy (`--dry-run`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.vlm
def test_gpu_check_dry_run_writes_its_report(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["array_module"] == "numpy" and r["equality"]["passed"]
    assert [o["dtype"] for o in r["ours"]] == ["float16", "float32"]
    assert all(o["decode_tokens_per_s"] > 0 and o["prefill_tokens_per_s"] > 0 for o in r["ours"])
    assert r["roofline"]["copy_bandwidth_gbs"] > 0
