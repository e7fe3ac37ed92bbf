"""`make demo`: the main job on the embedded default, end to end, with every frame accounted for.

Builds a sample bag of 1080p frames and the default model (a deterministic random-init
ViT-B/32 — no weights are downloaded — exported to ONNX and quantised to the gated INT8
model, calibrated on the bag's frames; both cached in the data home), starts the encoder
node as its own process on loopback Cyclone DDS, replays the bag at its camera rate with
reliable QoS, records /visual_features into a bag, and prints one screen of what happened
(also written to summary.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from ..build_tools.first_use import BuildError, ensure_int8
from ..core.commands import Command, field_flag
from ..core.resources import default_model_path
from ..models.configs import DEFAULT_MODEL, canonical_name
from ..runtime import bags


def _ensure_model(model: str, calib: Path) -> Path:
    path = default_model_path(model, "int8")
    if not path.exists():
        slow = " (ViT-L/H/bigG: minutes to an hour on a 2-core CPU, once)" if _gflops(model) > 100 else ""
        print(
            f"[demo] building {model} (random init, seed 0): FP32 export, then INT8 calibrated on {calib}{slow}",
            flush=True,
        )
    return ensure_int8(model, calib)


def _gflops(model: str) -> float:
    from ..models.configs import get_config

    return get_config(model).flops_per_image() / 1e9


def _timeouts(model: str) -> dict[str, float]:
    """Replay waits scaled to the model: a big model takes longer to load and to finish its last frame."""
    tflop = _gflops(model) / 1000
    return {"discovery_timeout": 30.0 + 60.0 * tflop, "settle_timeout": 15.0 + 60.0 * tflop}


def policy_line(s: dict) -> str | None:
    """What the newest-frame policy did, in counts: why latency stays bounded with an encoder slower than the camera."""
    enc, lat = s["stages_ms"].get("encode"), s["latency_ms"]
    if not s.get("dropped") or not enc or not s.get("encoded"):
        return None
    fifo_s = s["received"] * enc["p50"] / 1000
    return (
        f"  policy     newest frame first: the encoder kept up with {s['encoded']} of {s['received']} frames, "
        f"{s['dropped']} were replaced by a newer one while it was busy; latency P99 {lat['p99']:.0f} ms = "
        f"{lat['p99'] / enc['p50']:.1f}x one encode (P50 {enc['p50']:.0f} ms) — bounded: a FIFO queue would have "
        f"made the last frame wait ~{fifo_s:.1f} s"
    )


def _ensure_bag(path: Path, frames: int, fps: float) -> None:
    """The sample bag at `path`, written now unless a complete one of `frames` frames is there already.

    Only what an interrupted or different earlier run leaves makes it rebuild, and it says why: no
    metadata.yaml yet (FileNotFoundError), a truncated file, unreadable metadata or no Image topic
    (bags.BagError), another frame count. Any other error is a bug and propagates."""
    if path.exists():
        try:
            found = sum(1 for _ in bags.read_messages(path, bags.IMAGE_TYPE))
        except (FileNotFoundError, bags.BagError) as err:
            print(f"[demo] {path} is not a complete bag ({type(err).__name__}: {err}): writing it again", flush=True)
        else:
            if found == frames:
                return
            print(f"[demo] {path} has {found} frames, not {frames}: writing it again", flush=True)
        shutil.rmtree(path)
    print(f"[demo] writing sample bag: {frames} 1920x1080 rgb8 frames at {fps:g} fps -> {path}", flush=True)
    bags.write_sample_bag(path, frames=frames, fps=fps)


def _gate_of(model_path: Path) -> dict | None:
    """The accuracy gate the INT8 model passed when it was built (saved in its metadata; weights not read)."""
    from ..models.onnx_files import read_metadata

    gate = read_metadata(model_path).get("quant_gate")
    return json.loads(gate) if gate else None


def format_summary(s: dict) -> str:
    from ..core.gate import gate_summary

    lat, st = s["latency_ms"], s["stages_ms"]
    lines = [
        "",
        "openclaw_vision demo — rosbag → encoder node (DDS) → /visual_features",
        f"  model      {s['model']}  ({s['backend']}, {s['precision']}, {s['embedding_dim']}-d)",
        f"  frames     sent {s['sent']}  received {s['received']}  encoded {s['encoded']}  "
        f"dropped {s['dropped']}  rejected {s['rejected']}  failed {s['failed']}",
        f"  accounted  {'yes' if s['accounted'] else 'NO'}: encoded + dropped + rejected + failed = received"
        f" = sent; features received {s['features_received']} = encoded",
        f"  latency    stamp → /visual_features  P50 {lat['p50']:.1f} ms  P95 {lat['p95']:.1f} ms"
        f"  P99 {lat['p99']:.1f} ms",
        "  node stages (P50 / P99 ms)  " + "  ".join(f"{k} {v['p50']:.1f}/{v['p99']:.1f}" for k, v in st.items()),
        f"  replay     {s['rate']:g}× bag rate ({s['send_fps']} fps sent), {s['reliability']} QoS,"
        f" transport {s['node_transport']}",
        f"  outputs    {s['out_bag']}  {s['summary_path']}",
        *(
            [
                f"  int8 gate  {'passed' if g['passed'] else 'FAILED'} on held-out frames at 1080p/720p/480p: "
                + gate_summary(g)
            ]
            if (g := s.get("int8_gate"))
            else []
        ),
        *([line] if (line := policy_line(s)) else []),
        "  note       the default model has random weights (no download): embeddings are deterministic, not semantic",
    ]
    return "\n".join(lines)


def run_demo(args: argparse.Namespace) -> int:
    from ..ros.process import NodeProcess
    from ..ros.replay import ReplayOptions, replay
    from ..ros.transport import create_transport

    t0 = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    frames_bag = out / "frames"
    _ensure_bag(frames_bag, args.frames, args.fps)
    try:
        model = canonical_name(args.model)
    except KeyError as err:
        print(f"[demo] {err.args[0]}", flush=True)
        return 2
    try:
        model_path = _ensure_model(model, frames_bag)
    except BuildError as err:
        print(f"[demo] {err}", flush=True)
        return 1
    features_bag = out / "features"
    if features_bag.exists():
        shutil.rmtree(features_bag)

    node_args = [
        "--model",
        model,
        "--reliability",
        "reliable",
        "--depth",
        "5",
        "--diagnostics-period",
        "0.5",
        "--transport",
        "cyclonedds",
        "--stats-json",
        str(out / "node_stats.json"),
    ]
    print("[demo] starting encoder node (log: %s)" % (out / "node.log"), flush=True)
    with NodeProcess(node_args, log_path=out / "node.log") as node:
        transport = create_transport("cyclonedds", "openclaw_replay")
        try:
            print(f"[demo] replaying {frames_bag} at the bag's rate ({args.fps:g} fps), reliable QoS", flush=True)
            result = replay(
                ReplayOptions(bag=frames_bag, out=features_bag, rate=1.0, reliability="reliable", **_timeouts(model)),
                transport,
            )
        finally:
            transport.close()
        if not node.alive():
            print(node.log_text())
            return 1
    counts = result["node"] or {}
    summary = {
        "sent": result["sent"],
        "received": counts.get("received"),
        "encoded": counts.get("encoded"),
        "dropped": counts.get("dropped"),
        "rejected": counts.get("rejected"),
        "failed": counts.get("failed"),
        "lost": counts.get("lost"),
        "features_received": result["features_received"],
        "accounted": result["accounted"],
        "latency_ms": result["latency_ms"],
        "stages_ms": result["stages_ms"],
        "backend": result["backend"],
        "precision": result["precision"],
        "model": result["model"],
        "embedding_dim": result.get("embedding_dim"),
        "node_transport": result["node_transport"],
        "reliability": result["reliability"],
        "rate": result["rate"],
        "send_fps": result["send_fps"],
        "out_bag": str(features_bag),
        "summary_path": str(out / "summary.json"),
        "int8_gate": _gate_of(model_path),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_summary(summary), flush=True)
    return 0 if summary["accounted"] else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("out/demo"))
    p.add_argument("--model", default=DEFAULT_MODEL)
    field_flag(p, "--frames", bags.write_sample_bag)
    field_flag(p, "--fps", bags.write_sample_bag)


COMMAND = Command(add_arguments, run_demo)
