"""`openclaw-vision bench`: the report a user gets has the stable keys, ratios and plots.

No timing is asserted here: speed is measured by running the command, never by a test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.dds


def test_quick_bench_writes_json_markdown_and_plots(tiny_model, tmp_path, dds_domain):
    out = tmp_path / "bench"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "openclaw_vision.cli",
            "bench",
            "--quick",
            "--model",
            "tiny",
            "--model-path",
            str(tiny_model),
            "--out",
            str(out),
            "--json",
            str(tmp_path / "b.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["mode"] == "all" and result["host"]["cores"] and result["versions"]["onnxruntime"]
    names = {(v["name"], v["batch"]) for v in result["variants"]}
    assert {
        ("preprocess/pil-reference", 1),
        ("preprocess/ours-cpu", 1),
        ("encode/torch-eager-fp32", 1),
        ("encode/ort-fp32", 1),
        ("encode/torch-eager-fp32", 8),
        ("encode/ort-fp32", 8),
        ("encode/ort-int8", 1),
        ("encode/ort-int8", 8),
        ("node/e2e-30fps", 1),
        ("node/e2e-max", 1),
    } <= names
    for v in result["variants"]:
        assert {"name", "p50_ms", "p95_ms", "p99_ms", "throughput", "n"} <= set(v)
        assert v["n"] > 0 and v["p50_ms"] <= v["p95_ms"] <= v["p99_ms"]
    ours = next(v for v in result["variants"] if v["name"] == "preprocess/ours-cpu")
    assert ours["baseline"] == "preprocess/pil-reference" and ours["speedup_vs_baseline"] > 0
    assert result["node"]["accounted_at_30fps"] is True
    assert result["roofline"]["fraction_of_peak"] > 0
    goals = {g["goal"] for g in result["goals"]}
    assert "INT8 encode >= 2.5x ORT FP32 at batch 1 (gated model)" in goals
    assert {g.split()[0] for g in goals} >= {"preprocess", "INT8", "node"}
    # the INT8 model was quantised from the given FP32 file, beside it, and passed its gate
    assert result["stages"]["int8_model"] == str(tiny_model.with_name("tiny.int8.onnx"))
    assert set(result["stages"]["int8_vs_ort_fp32"]) == {"batch1", "batch8"}
    for f in ("bench.md", "latency_cdf.png", "node_stages.png"):
        assert (out / f).stat().st_size > 0
    assert "| preprocess/ours-cpu | 1 |" in (out / "bench.md").read_text()


@pytest.mark.vlm
def test_vlm_bench_writes_the_variants_and_top_level_metrics(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "bench", "--mode", "vlm", "--quick", "--llm-shape", "tiny",
         "--out", str(tmp_path / "vlm"), "--json", str(tmp_path / "v.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "v.json").read_text())
    names = {v["name"] for v in result["variants"]}
    assert names == {"prefill/ours", "prefill/transformers", "decode/ours", "decode/transformers"}
    for v in result["variants"]:
        assert v["throughput"] > 0 and v["tokens_per_call"] > 0 and v["shape"] == "tiny"
        if v["name"].endswith("/ours"):
            assert v["baseline"].endswith("/transformers") and v["speedup_vs_baseline"] > 0
    assert result["roofline_fraction"] > 0 and result["vlm_roofline"]["copy_bandwidth_gbs"] > 0
    assert 0 <= result["kv_waste_fraction"] < result["contiguous_waste_fraction"]
    assert 0 < result["prefix_sharing_saving"] < 1
    assert "Prefix sharing" in (tmp_path / "vlm" / "bench.md").read_text()
