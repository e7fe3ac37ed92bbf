"""`openclaw-vision bench`: the report a user gets has the stable keys, ratios and plots.

No timing is asserted here: speed is measured by running the command, never by a test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from openclaw_vision.bench.report import best_int8
from openclaw_vision.encoders.openvino import usable as openvino_usable

pytestmark = pytest.mark.dds


def test_quick_bench_writes_json_markdown_and_plots(tiny_model, tmp_path, dds_domain, data_home):
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
    node = result["node"]  # the isolated figures are the node's own backend and precision, never another runtime
    assert (node["isolated_compute_ms"]["backend"], node["isolated_compute_ms"]["precision"]) == (
        node["backend"], node["precision"])  # fmt: skip
    assert node["backend"] in ("onnxruntime", "openvino") and node["precision"] == "int8"
    for t in node["search_trials"]:  # a trial reports the rate the node was fed, at most the offered one
        assert 0 < t["fps"] <= t["offered_fps"]
    assert result["roofline"]["fraction_of_peak"] > 0
    if openvino_usable()[0]:  # the same two files on OpenVINO, at both batch sizes
        assert {(f"encode/openvino-{p}", b) for p in ("fp32", "int8") for b in (1, 8)} <= names
        assert set(result["stages"]["int8_peak"]["gops"]) == {"onnxruntime", "openvino"}
    assert result["stages"]["int8_peak"]["gops"]["onnxruntime"] > 0
    goals = {g["goal"]: g for g in result["goals"]}
    best = goals["best CPU INT8 backend >= 3x ORT FP32 at batch 1 (gated on its runtime)"]
    assert "best: encode/" in best["measured"]
    assert "moonshot: best CPU INT8 backend >= 3.5x ORT FP32 (about 65 % of the INT8 VNNI peak)" in goals
    assert "INT8 GEMM peak here" in goals[next(g for g in goals if g.startswith("moonshot"))]["measured"]
    assert {g.split()[0] for g in goals} >= {"preprocess", "best", "moonshot:", "node"}
    # the INT8 model was quantised from the given FP32 file, beside it, and passed its gate
    assert result["stages"]["int8_model"] == str(tiny_model.with_name("tiny.int8.onnx"))
    assert set(result["stages"]["int8_vs_ort_fp32"]) == {"batch1", "batch8"}
    for f in ("bench.md", "latency_cdf.png", "node_stages.png"):
        assert (out / f).stat().st_size > 0
    assert "| preprocess/ours-cpu | 1 |" in (out / "bench.md").read_text()


def test_cameras_bench_runs_both_setups_and_accounts_for_every_frame_per_camera(tiny_model, tmp_path, dds_domain):
    """`bench --mode cameras` on the tiny model, N = 2, short windows: the table's rows and counts."""
    out = tmp_path / "bench"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "bench", "--mode", "cameras", "--model", "tiny",
         "--model-path", str(tiny_model), "--int8-model-path", str(tiny_model), "--backend", "onnxruntime",
         "--cameras", "2", "--seconds", "1.5", "--warmup", "0.5", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    trials = json.loads((out / "bench.json").read_text())["cameras"]["trials"]
    assert [(t["setup"], t["cameras"], t["nodes"]) for t in trials] == [("multi", 2, 1), ("single", 2, 2)]
    for t in trials:
        assert len(t["per_camera"]) == t["cameras"] and t["rss_mb"] > 0 and t["total_fps"] > 0
        for cam in t["per_camera"]:
            assert cam["sent"] >= cam["received"] == cam["encoded"] + cam["dropped"] + cam["rejected"] + cam["failed"]
            assert cam["rejected"] == cam["failed"] == 0 and cam["p50_ms"] <= cam["p99_ms"]
    assert [c["camera"] for c in trials[0]["per_camera"]] == ["/cam0/image_raw", "/cam1/image_raw"]
    assert "| 2 | single | 2 |" in (out / "bench.md").read_text()


def test_overload_bench_prints_its_figures_and_accounts_for_every_frame(tiny_model, tmp_path, dds_domain):
    """`bench --mode overload --quick` on the tiny model: the figures the overload tests no longer time are
    printed and recorded (one camera: rates, latency ratios, memory; cameras: each one's share), and the
    frames behind them all add up. Which values they take is the bench's to report, not this test's."""
    out = tmp_path / "bench"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "bench", "--mode", "overload", "--quick", "--model", "tiny",
         "--model-path", str(tiny_model), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    for words in ("x the served rate", "x (compute", "x the first", "x compute; RSS", "of mean); min share"):
        assert words in res.stdout, res.stdout[-2000:]
    over = json.loads((out / "bench.json").read_text())["overload"]
    one = over["one_camera"]
    assert one["sent"] >= one["received"] == one["encoded"] + one["dropped"] + one["rejected"] + one["failed"]
    assert one["features"] == one["encoded"] > 0 and one["rejected"] == one["failed"] == 0
    for k in ("input_over_served", "p50_over_compute_plus_transport", "last_over_first_third", "queue_over_compute"):
        assert one[k] >= 0, (k, one)
    assert one["compute_ms"] > 0 and one["latency_ms"]["n"] > 0
    cams = over["cameras"]
    assert len(cams["per_camera"]) == 3 and 0 < cams["largest_batch"] <= cams["max_batch"]
    for cam in cams["per_camera"]:
        assert cam["received"] == cam["encoded"] + cam["dropped"] and cam["encoded"] > 0, cam


def test_soak_bench_restarts_the_player_and_every_count_adds_up(tiny_model, home_with_text_tower, tmp_path,
                                                                 dds_domain):  # fmt: skip
    """`bench --mode soak --quick --soak-seconds 20` on the tiny model: the four nodes run beside the CPU hogs,
    the player is started more than once, the bench's subscription comes and goes, and the accounting the
    soak reports adds up (sent vs received, each node's counts, no unreported thread death, exit 0 on
    SIGTERM). How long anything took, and the RSS slope over 20 s, are the bench's to report, not this test's."""
    out = tmp_path / "bench"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "bench", "--mode", "soak", "--quick", "--soak-seconds", "20",
         "--model", "tiny", "--model-path", str(tiny_model), "--out", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    for words in ("soak frames: players sent", "soak memory: received", "soak RSS vlm:", "soak stop encoder:"):
        assert words in res.stdout, res.stdout[-3000:]
    soak = json.loads((out / "bench.json").read_text())["soak"]
    assert soak["players"] >= 2 and set(soak["player_exits"]) == {"exit 0"} and soak["hogs"] >= 1
    f = soak["frames"]
    assert f["sent"] >= f["received"] > 0 and f["lost"] == f["sent"] - f["received"]
    assert f["received"] == f["encoded"] + f["dropped"] + f["rejected"] + f["failed"]
    ft = soak["features"]
    assert 0 < ft["memory_received"] <= ft["published"] == f["encoded"] and ft["labels_received"] <= ft["published"]
    assert ft["bench_subscriptions"] >= 2 and sum(ft["bench_received"]) > 0
    m = soak["memory"]
    assert m["received"] == m["written"] + m["skipped"] + m["dropped"] + m["rejected"] + m["refused"] + m["pending"]
    assert m["rows"] == m["written"] > 0
    p = soak["prompts"]
    assert 0 < p["prompts"] <= p["sent"]
    assert p["prompts"] == p["answered"] + p["failed"] + p["rejected"] + p["unanswered"]
    for name, d in soak["threads"].items():
        assert d["unreported"] == 0 and d["thread_failures"] is not None, (name, d)
    for name, s in soak["stop"].items():
        assert s["exit_code"] == 0 and s["seconds"] is not None, (name, s)
        assert soak["rss"][name]["growth_mb_per_h"] is not None, name
    assert [g["met"] for g in soak["goals"]][:2] == [True, True], soak["goals"]


def test_the_soak_counts_a_thread_death_missing_from_the_log_or_the_counts():
    """The unreported-death check: a supervised failure in both the count and the log is reported; one in only
    one of them, or a traceback no supervisor line explains, is not."""
    from openclaw_vision.bench.soak import thread_deaths

    supervised = "ERROR: thread worker failed (restarting in 0.5 s): boom\nTraceback (most recent call last):\n  x\n"
    stray = "Traceback (most recent call last):\n  File ...\nValueError\n"
    assert thread_deaths(supervised, 1)["unreported"] == 0
    assert thread_deaths(supervised, 0)["unreported"] == 1  # logged, not counted
    assert thread_deaths("", 1)["unreported"] == 1  # counted, not logged
    assert thread_deaths(supervised + stray, 1)["unreported"] == 1  # a thread that died outside the supervisor
    assert thread_deaths(supervised, None)["unreported"] == 1  # counted nowhere


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
    # the roofline's denominator is a read-only pass over the decoder's own weights, not a copy
    assert result["vlm_roofline"]["weight_stream_bandwidth_gbs"] > 0
    assert "read-only weight stream" in (tmp_path / "vlm" / "bench.md").read_text()
    assert 0 <= result["kv_waste_fraction"] < result["contiguous_waste_fraction"]
    assert 0 < result["prefix_sharing_saving"] < 1
    assert "Prefix sharing" in (tmp_path / "vlm" / "bench.md").read_text()


def _result(gates: dict, ort_ms: float, ov_ms: float) -> dict:
    variants = [
        {"name": "encode/ort-fp32", "batch": 1, "p50_ms": 50.0},
        {"name": "encode/ort-int8", "batch": 1, "p50_ms": ort_ms},
        {"name": "encode/openvino-int8", "batch": 1, "p50_ms": ov_ms},
    ]
    return {"variants": variants, "stages": {"int8_gate_by_runtime": gates}}


@pytest.mark.parametrize(
    ("gates", "best", "why"),
    [
        ({"onnxruntime": {"passed": True}, "openvino": {"passed": True}}, "encode/openvino-int8", None),
        (
            {"onnxruntime": {"passed": True}, "openvino": {"passed": False, "mean_cosine": 0.998}},
            "encode/ort-int8",
            "gate failed on openvino (0.998)",
        ),
        ({"onnxruntime": None, "openvino": None}, "encode/ort-int8", "model not gated on openvino"),
    ],
)
def test_the_best_int8_backend_is_the_fastest_one_that_passed_its_gate_on_its_runtime(gates, best, why):
    chosen, excluded = best_int8(_result(gates, ort_ms=20.0, ov_ms=15.0))
    assert chosen["name"] == best
    assert (why is None and not excluded) or (why and why in excluded[0])


def test_the_capacity_search_is_not_capped_and_stops_where_the_sender_is_the_limit():
    from openclaw_vision.bench.capacity import Trial, search

    def receiver(limit: float, sender: float = 1e9):
        def measure(fps: float) -> Trial:
            sent = 300
            back = sent if fps <= limit else int(sent * limit / fps)
            return Trial(1, fps, min(fps, sender), sent, back, {}, {}, 0.0)

        return measure

    best, tried = search(receiver(47.0), guess=20.0, steps=6)
    offered = [t.offered_fps for t in tried]
    assert offered[:3] == [20.0, 30.0, 45.0] and max(offered) > 47.0  # up past the camera rate and the limit
    assert best.offered_fps == 45.0 and all(t.drop_fraction >= 0.05 for t in tried if t.offered_fps > 47.0)
    best, tried = search(receiver(12.0), guess=20.0, steps=4)  # the first rate fails: down, then bisect
    assert [t.offered_fps for t in tried][:2] == [20.0, 10.0] and 10.0 <= best.offered_fps <= 12.0 / 0.95
    best, tried = search(receiver(1000.0, sender=50.0), guess=40.0, steps=6)  # the player tops out at 50
    assert best.sender_limited and tried[-1] is best and best.send_fps == 50.0


@pytest.mark.dds
def test_capacity_bench_finds_a_rate_and_accounts_the_cores_by_thread(tiny_model, tmp_path, dds_domain):
    """`bench --mode capacity` on the tiny model, one raw camera, short trials: the search, the echo's
    ceiling, compute alone and the per-thread CPU per frame in the report."""
    out = tmp_path / "cap"
    proc = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "bench", "--mode", "capacity", "--quick", "--model", "tiny",
         "--model-path", str(tiny_model), "--int8-model-path", str(tiny_model), "--backend", "onnxruntime",
         "--cameras", "1", "--camera-transport", "raw", "--seconds", "1", "--warmup", "0.5", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cap = json.loads((out / "bench.json").read_text())["capacity"]
    (node,), (ceiling,), (compute,) = cap["node"], cap["ceiling"], cap["compute"]
    assert (node["backend"], compute["backend"], cap["backend"]) == ("onnxruntime",) * 3  # alone = the node's
    for t in node["trials"] + ceiling["trials"]:
        assert 0 < t["back"] <= t["sent"] and t["send_fps"] > 0
    assert node["at_30fps"]["offered_fps"] == 30.0 and node["at_30fps"]["latency_ms"]["p99"] > 0
    passing = [t for t in node["trials"] if t["drop_fraction"] < 0.05]
    assert node["at_capacity"]["offered_fps"] == max(t["offered_fps"] for t in passing)
    roles = node["at_capacity"]["cpu_ms_per_frame"]
    assert roles["worker (encode call, publish; a lone frame's decode and preprocess)"] > 0
    assert roles["transport thread (take, deserialize, validate)"] > 0
    assert compute["frames_per_s"] > 0 and node["combined_limit_fps"] < compute["frames_per_s"]
    ev = cap["encode_vs_peak"]  # the float32 GEMM beside the INT8 peak: what INT8 units this CPU has
    assert ev["fp32_gflops_onnxruntime"] > 0 and ev["peak_gops"]["onnxruntime"] > 0
    assert f"float32 onnxruntime {ev['fp32_gflops_onnxruntime']} GFLOP/s" in (out / "bench.md").read_text()
    goals = {g["goal"].split(":")[0] for g in json.loads((out / "bench.json").read_text())["goals"]}
    assert "one raw 1080p camera" in goals and (out / "capacity_cpu.png").stat().st_size > 0


def test_the_schedule_bench_keeps_the_default_layout_only_within_the_rounds_spread_of_the_best():
    """bench/schedule.py's verdict: the best layout is the highest mean; the default is kept where its best round
    reaches the best layout's worst, and said NO where every round of it is below."""
    from openclaw_vision.bench.schedule import LAYOUTS, markdown, verdicts

    def trials(transport: str, fps: dict[str, list[float]]) -> list[dict]:
        return [{"transport": transport, "layout": name, "round": r, "total_fps": f, "delivered_fps_per_camera": 25.0}
                for name, rounds in fps.items() for r, f in enumerate(rounds)]  # fmt: skip

    names = [n for n, *_ in LAYOUTS]
    close = trials("raw", dict(zip(names, ([31.0, 33.0], [30.0, 31.0], [28.0, 29.0], [32.0, 34.0]), strict=True)))
    far = trials("compressed", dict(zip(names, ([27.0, 28.0], [30.0, 31.0], [35.0, 36.0], [29.0, 30.0]), strict=True)))
    got = {v["transport"]: v for v in verdicts(close + far)}
    assert (got["raw"]["best"], got["raw"]["default_kept"]) == ("all + 1", True)
    assert (got["compressed"]["best"], got["compressed"]["default_kept"]) == ("1 + 1", False)
    assert got["raw"]["layouts"]["default"] == {
        "mean": 32.0,
        "min": 31.0,
        "max": 33.0,
        "delivered_mean": 25.0,
        "cpu_percent_mean": None,
    }
    table = "\n".join(markdown({"cameras": 4, "fps": 30.0, "rounds": 2, "cores": 2, "verdicts": list(got.values())}))
    assert "| compressed | default | 27.5 (27.0-28.0) | 25.0 | None |  | NO |" in table
