"""`overload` mode: the encoder node fed faster than it encodes, and the figures that say how it copes.

The reliability and multi-camera tests assert what overload must not change (every frame encoded or
dropped and counted, memory bounded, no camera starved) and time nothing; the timings live here, as
ratios measured side by side in one run:

- one camera (the node as a process over loopback DDS, on the model given plus `slow_model`'s
  zero-contributing MatMuls, so the encoder and not the Python sender is the bottleneck): first the
  idle round trip and compute in lockstep (`replay`), then the player (`cameras.start_player`) at 4x
  the idle encode rate. Printed: input over served rate, latency P50 over compute + transport (a
  frame waits for at most the one being encoded), last third over first third (a queue would grow),
  the node's queue stage over its compute, resident memory growth after the warm-up;
- cameras under a sleeping encoder (in process, three cameras at ~100 fps, batches of at most 2):
  each camera's share of the encoded frames over the mean (round robin: all near 1.0).

    openclaw-vision bench --mode overload [--quick] [--model tiny --model-path M.onnx]
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import bags
from ..runtime.stats import percentiles

log = logging.getLogger(__name__)

#: the idle phase's lockstep frames (the node's compute and the round trip without queueing)
IDLE_FRAMES = 30
#: the camera's rate over the node's idle encode rate
OVERLOAD_FACTOR = 4.0
#: (warm-up, measured) seconds of the one-camera overload, and the cameras' measured seconds
SECONDS = {False: (5.0, 30.0, 10.0), True: (1.0, 4.0, 2.5)}
CAMERA = "/cam0/image_raw"
FEATURES = "/cam0/visual_features"
#: the cameras part: three cameras at CAMERA_FPS into a node whose encoder sleeps SLEEP_S per batch of <= 2
CAMERAS = ("/a/image_raw", "/b/image_raw", "/c/image_raw")
CAMERA_FPS = 100.0
SLEEP_S = 0.04


def slow_model(src: Path, dst: Path, size: int = 512, rounds: int = 4) -> Path:
    """The encoder at `src` plus `rounds` float MatMuls of size³ that depend on the input (so no runtime can
    fold them away) and add exactly zero to the output: the same embeddings, at the cost of a real model
    (~10-20 ms more here; the tiny model alone takes ~2 ms). An overload needs an encoder much slower than
    the transport, as real ones are: at 2x the tiny model's rate, a Python DDS sender and reader are the
    bottleneck."""
    import onnx
    from onnx import helper

    model = onnx.load(str(src))
    g = model.graph
    out = g.output[0].name
    g.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.full((size, size), 1 / size, np.float32), "slow_base"),
            onnx.numpy_helper.from_array(np.array(0.0, np.float32), "slow_zero"),
        ]
    )
    nodes = [
        helper.make_node("ReduceMean", [g.input[0].name], ["slow_mean"], keepdims=0),
        helper.make_node("Mul", ["slow_base", "slow_mean"], ["slow_m0"]),
    ]
    for i in range(rounds):
        nodes.append(helper.make_node("MatMul", [f"slow_m{i}", "slow_base"], [f"slow_m{i + 1}"]))
    nodes += [
        helper.make_node("ReduceSum", [f"slow_m{rounds}"], ["slow_sum"], keepdims=0),
        helper.make_node("Mul", ["slow_sum", "slow_zero"], ["slow_nothing"]),
        helper.make_node("Add", [out, "slow_nothing"], ["slowed"]),
    ]
    g.node.extend(nodes)
    g.output[0].name = "slowed"
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst


def memory_mb(pid: int) -> dict[str, float]:
    """A process's resident memory now (VmRSS) and at its peak (VmHWM), MB, from /proc."""
    with open(f"/proc/{pid}/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def reset_peak(pid: int) -> None:
    """Start the process's VmHWM over from its resident memory now (Linux clear_refs 5), so the peak read
    later covers only what came after: no sampling loop, and no earlier peak (the model's load) hiding growth."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class SleepingEncoder:
    """An encoder slower than the cameras: each call waits `delay` s, then encodes; each batch's size is kept."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner, self.delay, self.batches = inner, delay, []
        for k in ("model_id", "embed_dim", "image_size", "backend", "precision", "max_batch"):
            setattr(self, k, getattr(inner, k))

    def frame_preprocessor(self) -> None:
        return None

    def encode(self, pixels: np.ndarray) -> Any:
        self.batches.append(len(pixels))
        time.sleep(self.delay)
        return self.inner.encode(pixels)


# --- one camera, the node as a process ------------------------------------------------------------


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else 0.0


def one_camera(model: str, slow: Path, work: Path, warmup: float, seconds: float) -> dict:
    """Idle lockstep, then the player at OVERLOAD_FACTOR x the idle encode rate; the figures of the overload."""
    import threading

    from ..ros.convert import stamp_to_ns
    from ..ros.cyclone import CycloneTransport
    from ..ros.process import NodeProcess
    from ..ros.replay import ReplayOptions, replay
    from ..ros.types import VISUAL_FEATURES, QoS
    from .cameras import start_player

    bag = work / "frames"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=IDLE_FRAMES, fps=30, width=64, height=48, topic=CAMERA)
    stats_path = work / "stats.json"
    got: list[tuple[int, int]] = []  # (stamp ns, receipt ns) of every VisualFeatures
    lock = threading.Lock()

    def on_features(msg: Any, _dt: float) -> None:
        now = time.time_ns()
        with lock:
            got.append((stamp_to_ns(msg.header.stamp), now))

    node = NodeProcess(
        ["--model", model, "--model-path", str(slow), "--backend", "onnxruntime", "--threads", "1",
         "--image-topic", CAMERA, "--features-topic", FEATURES, "--diagnostics-period", "0.2",
         "--transport", "cyclonedds", "--stats-json", str(stats_path)],
        log_path=work / "node.log",
    )  # fmt: skip
    t = CycloneTransport("overload_bench")
    try:
        t.subscribe(FEATURES, VISUAL_FEATURES, QoS("reliable", 100), on_features)
        idle = replay(ReplayOptions(bag=bag, rate=0, lockstep=True, features_topic=FEATURES,
                                    discovery_timeout=180), t)  # fmt: skip
        compute_idle = idle["stages_ms"]["preprocess"]["p50"] + idle["stages_ms"]["encode"]["p50"]
        fps = OVERLOAD_FACTOR * 1000 / max(compute_idle, 1e-3)
        out = work / "player.json"
        with start_player(bag, 1, fps, warmup + seconds, False, out, "overload") as player:
            time.sleep(warmup)  # the node at its steady state under the overload before memory counts
            reset_peak(node.proc.pid)
            rss_base, window0 = memory_mb(node.proc.pid)["VmRSS"], time.time_ns()
            if player.wait(timeout=seconds + 60) is None:
                raise RuntimeError("overload: the player did not finish")
        rss_peak = memory_mb(node.proc.pid)["VmHWM"]
        time.sleep(1.0)  # the last frames' features
        node.stop()  # writes --stats-json
    finally:
        node.stop()
        t.close()
    played = json.loads(out.read_text())
    stats = json.loads(stats_path.read_text())
    before = idle["node"] or {}
    counts = {k: stats[k] - before.get(k, 0) for k in ("received", "encoded", "dropped", "rejected", "failed")}
    sent, span = played["sent"][0], played["seconds"]
    stamps = set(played["stamps_ns"][0])
    with lock:
        served = sorted((s, r) for s, r in got if s in stamps)
    lat = [(r - s) / 1e6 for s, r in served if s >= window0]
    third = len(lat) // 3
    st = {k: v["p50"] for k, v in stats["stages_ms"].items()}
    compute = st["preprocess"] + st["encode"]
    transport = max(0.0, idle["latency_ms"]["p50"] - compute_idle)  # below 0 only by noise
    first, last, p50 = _median(lat[:third]), _median(lat[-third:]), _median(lat)
    return {
        "seconds": round(span, 1),
        "warmup_s": warmup,
        "offered_fps": round(fps, 1),
        "sent": sent,
        **counts,
        "lost": sent - counts["received"],
        "features": len(served),
        "input_fps": round(sent / span, 1),
        "served_fps": round(counts["encoded"] / span, 1),
        "input_over_served": round(sent / max(counts["encoded"], 1), 2),
        "compute_idle_ms": round(compute_idle, 2),
        "idle_round_trip_ms": round(idle["latency_ms"]["p50"], 2),
        "compute_ms": round(compute, 2),
        "transport_ms": round(transport, 2),
        "latency_ms": {k: round(v, 2) for k, v in percentiles(lat, (50, 99)).items()},
        "p50_over_compute_plus_transport": round(p50 / max(compute + transport, 1e-9), 2),
        "first_third_ms": round(first, 2),
        "last_third_ms": round(last, 2),
        "last_over_first_third": round(last / max(first, 1e-9), 2),
        "queue_ms": round(st["queue"], 2),
        "queue_over_compute": round(st["queue"] / max(compute, 1e-9), 2),
        "rss_base_mb": round(rss_base, 1),
        "rss_growth_mb": round(rss_peak - rss_base, 1),
    }


# --- cameras under a sleeping encoder, in process -------------------------------------------------


def cameras(model: Path, seconds: float) -> dict:
    """Three cameras at CAMERA_FPS into one node whose encoder sleeps SLEEP_S per batch of at most 2:
    each camera's encoded frames and its share of the mean."""
    from ..encoders.onnxruntime import OnnxRuntimeEncoder
    from ..ros.cyclone import CycloneTransport
    from ..ros.encoder_node import EncoderNode
    from ..ros.types import IMAGE, QoS
    from ..runtime.config import EncoderConfig

    enc = SleepingEncoder(OnnxRuntimeEncoder(model, threads=1), SLEEP_S)
    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("cameras")
    node = EncoderNode(EncoderConfig(image_topics=CAMERAS, max_batch=2, diagnostics_period=5.0), node_t, enc)
    Image, Header, Time = cam_t.msg(IMAGE), cam_t.msg("std_msgs/msg/Header"), cam_t.msg("builtin_interfaces/msg/Time")
    data = np.random.default_rng(0).integers(0, 256, 48 * 64 * 3, np.uint8).tobytes()
    try:
        pubs = [cam_t.publisher(c, IMAGE, QoS("best_effort", 1)) for c in CAMERAS]
        node.start()
        deadline = time.monotonic() + 60
        while not all(p.matched() for p in pubs):
            if time.monotonic() > deadline:
                raise RuntimeError("cameras: the node did not subscribe")
            time.sleep(0.05)
        end, n = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            n += 1
            for i, p in enumerate(pubs):
                stamp = Time(sec=n, nanosec=i)
                p.publish(Image(header=Header(stamp=stamp, frame_id=CAMERAS[i]), height=48, width=64, encoding="rgb8",
                                is_bigendian=0, step=192, data=data))  # fmt: skip
            time.sleep(1 / CAMERA_FPS)
    finally:
        node.stop()
        node_t.close()
        cam_t.close()
    per = node.stats()["cameras"]
    rows = [{k: per[c][k] for k in ("received", "encoded", "dropped")} | {"camera": c} for c in CAMERAS]
    mean = sum(r["encoded"] for r in rows) / len(rows)
    for r in rows:
        r["share_of_mean"] = round(r["encoded"] / mean, 3) if mean else 0.0
    return {
        "seconds": seconds,
        "sent_per_camera": n,
        "sleep_ms_per_batch": SLEEP_S * 1e3,
        "max_batch": 2,
        "batches": len(enc.batches),
        "largest_batch": max(enc.batches, default=0),
        "min_share_of_mean": min(r["share_of_mean"] for r in rows),
        "per_camera": rows,
    }


def lines(res: dict) -> list[str]:
    """The figures in words, one line each (printed as they are measured, and in the report)."""
    o, c = res["one_camera"], res["cameras"]
    return [
        f"overload: played {o['seconds']} s (the first {o['warmup_s']} s a warm-up); sent {o['sent']} "
        f"({o['input_fps']}/s), encoded {o['encoded']} ({o['served_fps']}/s), dropped {o['dropped']}, lost "
        f"{o['lost']}: input {o['input_over_served']}x the served rate",
        f"overload latency: P50 {o['latency_ms']['p50']} ms = {o['p50_over_compute_plus_transport']}x (compute "
        f"{o['compute_ms']} + transport {o['transport_ms']} ms); last third {o['last_third_ms']} ms = "
        f"{o['last_over_first_third']}x the first ({o['first_third_ms']} ms); queue P50 {o['queue_ms']} ms = "
        f"{o['queue_over_compute']}x compute; RSS +{o['rss_growth_mb']} MB after warm-up ({o['rss_base_mb']} MB)",
        f"cameras under overload ({len(c['per_camera'])} at {CAMERA_FPS:.0f} fps, encoder sleeping "
        f"{c['sleep_ms_per_batch']:.0f} ms per batch of <= {c['max_batch']}): encoded "
        + ", ".join(f"{r['camera']} {r['encoded']} ({r['share_of_mean']:.2f} of mean)" for r in c["per_camera"])
        + f"; min share {c['min_share_of_mean']:.2f}",
    ]


def run_overload(model: str, fp32_path: Path, quick: bool, work: Path) -> dict:
    """Both parts, one after the other in this run; each line printed as it is measured."""
    warmup, seconds, camera_seconds = SECONDS[quick]
    work = work / "overload"
    slow = slow_model(fp32_path, work / "slow.onnx")
    res: dict = {"one_camera": one_camera(model, slow, work, warmup, seconds)}
    res["cameras"] = cameras(fp32_path, camera_seconds)
    for line in lines(res):
        print(line, flush=True)
    return res
