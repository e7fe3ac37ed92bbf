"""The prepared GPU check script runs end to end here with NumPy standing in for CuPy (`--dry-run`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "gpu_check.py")


@pytest.mark.vlm
def test_gpu_check_dry_run_writes_its_report(tmp_path):
    res = subprocess.run(
        [sys.executable, SCRIPT, "--dry-run", "--sections", "vlm", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["array_module"] == "numpy" and r["equality"]["passed"]
    assert [o["dtype"] for o in r["ours"]] == ["float16", "float32"]
    assert all(o["decode_tokens_per_s"] > 0 and o["prefill_tokens_per_s"] > 0 for o in r["ours"])
    assert r["roofline"]["copy_bandwidth_gbs"] > 0


@pytest.mark.gpu_static
def test_gpu_check_dry_run_compares_the_kernel_and_encoder_and_times_the_stages(tmp_path):
    """The vision section end to end with the kernel built for the CPU and the torch encoder on the CPU."""
    res = subprocess.run(
        [sys.executable, SCRIPT, "--dry-run", "--sections", "vision", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    v = json.loads((tmp_path / "gpu_check.json").read_text())["vision"]
    k = v["kernel_vs_cpu_path"]
    assert k["passed"] and k["max_levels"] <= 3 and k["min_cosine"] >= 0.9999
    from openclaw_vision.preprocess.sample_frames import every_encoding

    assert set(k["per_encoding"]) == set(every_encoding())
    assert v["gpu_encoder_vs_ort_fp32"]["backend"] == "torch" and v["gpu_encoder_vs_ort_fp32"]["min_cosine"] >= 0.9999
    stages = v["latency_1080p"]["ms"]
    gpu_stages = ("h2d", "kernel", "encode", "d2h", "gpu_wall")
    cpu_stages = ("cpu_preprocess", "cpu_encode", "cpu_wall")
    assert all(stages[s]["p50"] > 0 for s in gpu_stages + cpu_stages)
    b = v["batches"]  # the multi-camera path: kernel into row k of the input, one encode per batch
    assert set(b["per_batch"]) == {"1", "2", "4"} and b["min_cosine_batch_vs_alone"] >= 0.99999
    assert v["tensorrt"] == {"available": False, "reason": "TensorRT is not importable here (no `tensorrt` module)",
                             "seconds": v["tensorrt"]["seconds"]}  # fmt: skip
    assert v["passed"] is True
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check  # the docs' tables of this report: every check's row, its numbers as measured

    md = gpu_check.markdown(json.loads((tmp_path / "gpu_check.json").read_text()))
    assert f"max {k['max_levels']} levels apart" in md and f">= {k['min_cosine']} |" in md
    assert "| TensorRT | | TensorRT is not importable here (no `tensorrt` module) |" in md
    assert f"| GPU | encode | {stages['encode']['p50']} | {stages['encode']['p99']} |" in md
    assert f"| CPU | cpu_encode | {stages['cpu_encode']['p50']} |" in md


def test_a_report_made_on_another_machine_is_published_under_that_machine(tmp_path):
    """The lent GPU machine has no checkout: its report comes back and is published here, and the figures' line
    names the machine that measured (its CPU, GPU and date), not this one; the tables are the report's numbers."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    res = subprocess.run(
        [sys.executable, SCRIPT, "--dry-run", "--sections", "vlm", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    path = tmp_path / "gpu_check.json"
    report = json.loads(path.read_text())
    report["measured_on"]["host"].update(cpu="Lent Xeon", cores=16, gpu="NVIDIA H200 (140 GiB)")
    report["measured_on"]["date"] = "2026-01-02"
    path.write_text(json.dumps(report))
    js, md = gpu_check.publish(path, "gpu-check", tmp_path / "figures")
    text = md.read_text()
    first = text.splitlines()[0]
    assert first.startswith("Measured 2026-01-02 on Lent Xeon (16 cores;") and "with NVIDIA H200 (140 GiB)" in first
    from openclaw_vision.core import cpu

    assert cpu.model_name() not in first
    fp16 = report["ours"][0]
    assert f"| ours | tiny | float16 | {fp16['prefill_tokens_per_s']} | {fp16['decode_tokens_per_s']} |" in text
    assert json.loads(js.read_text())["host"]["gpu"] == "NVIDIA H200 (140 GiB)"
