"""`openclaw-vision bench-labels`: the labels node's latency per frame, over loopback DDS, by label-set size.

For each label-set size, in one run: the labels node runs as its own process; this process
publishes VisualFeatures at the camera's rate, each stamped with its send time, and takes the
VisualLabels that come back. Measured:

- end to end: receipt of VisualLabels − the features' stamp (one clock: both ends on this
  machine), P50/P95/P99 — DDS both ways plus the node's work;
- inside the node: its own stage percentiles (deserialize, score, publish), from its stats;
- once per label set: the time to embed the set with the text tower (what a label change costs;
  frames are never waiting for it).

The sizes run side by side in one run, so their ratio holds on this machine whatever its load.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np

from ..core.commands import Command
from ..ros.convert import ns_to_stamp, stamp_to_ns
from ..ros.labels_node import VISUAL_LABELS
from ..ros.process import NodeProcess
from ..ros.types import DEFAULT, HEADER, VISUAL_FEATURES
from ..runtime.stats import percentiles

WORDS = ("door", "forklift", "person", "stairs", "pallet", "box", "chair", "table", "window", "robot")


def label_set(n: int) -> list[str]:
    """`n` distinct labels made of everyday words ('door', …, 'red door', …)."""
    colours = ("", "red ", "blue ", "open ", "closed ", "small ", "large ", "old ", "new ", "broken ")
    out = [c + w for c in colours for w in WORDS]
    if n > len(out):
        out += [f"{w} {i}" for i in range(n) for w in WORDS][: n - len(out)]
    return out[:n]


def embed_ms(text_model: Path, labels: list[str], rounds: int = 3) -> float:
    """Median time to embed one label set with the text tower (tokenise + ONNX Runtime), in ms."""
    from ..text.encoder import TextEncoder
    from ..text.zero_shot import prompts

    enc = TextEncoder(text_model, threads=1)
    texts = prompts(labels)
    enc.encode(texts)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        enc.encode(texts)
        times.append((time.perf_counter() - t) * 1e3)
    return round(float(np.median(times)), 2)


def _one(transport, text_model: Path, model_id: str, dim: int, n: int, frames: int, fps: float, work: Path) -> dict:
    stats = work / f"labels_node_{n}.json"
    received: dict[int, int] = {}
    cond = threading.Condition()

    def on_labels(msg, _s) -> None:
        now = time.time_ns()
        with cond:
            received[stamp_to_ns(msg.header.stamp)] = now
            cond.notify_all()

    node = NodeProcess(
        ["--text-model-path", str(text_model), "--labels", ",".join(label_set(n)), "--transport", "cyclonedds",
         "--stats-json", str(stats), "--threads", "1"],
        log_path=work / f"labels_node_{n}.log", node="labels",
    )  # fmt: skip
    try:
        pub = transport.publisher("/visual_features", VISUAL_FEATURES, DEFAULT)
        sub = transport.subscribe("/visual_labels", VISUAL_LABELS, DEFAULT, on_labels)
        rng = np.random.default_rng(0)
        cls, header = transport.msg(VISUAL_FEATURES), transport.msg(HEADER)
        # Probes until one comes back: a match can be an earlier node still in discovery, so only an
        # answer proves this node is listening. Probes are left out of the numbers.
        end = time.monotonic() + 120
        while not received:
            if not node.alive() or time.monotonic() > end:
                raise RuntimeError(f"labels node did not answer: {node.log_text()[-2000:]}")
            if pub.matched() and sub.matched():
                h = header(stamp=ns_to_stamp(transport, time.time_ns()), frame_id="probe")
                pub.publish(cls(header=h, model_id=model_id, dim=dim, embedding=transport.float_array(np.ones(dim))))
            time.sleep(0.1)
        time.sleep(0.5)
        sent: list[int] = []
        period, t0 = 1.0 / fps, time.perf_counter()
        for i in range(frames):
            vec = rng.standard_normal(dim).astype(np.float32)
            vec /= np.linalg.norm(vec)
            stamp = time.time_ns()
            h = header(stamp=ns_to_stamp(transport, stamp), frame_id="bench")
            pub.publish(cls(header=h, model_id=model_id, dim=dim, embedding=transport.float_array(vec)))
            sent.append(stamp)
            time.sleep(max(0.0, t0 + (i + 1) * period - time.perf_counter()))
        with cond:
            cond.wait_for(lambda: all(s in received for s in sent), timeout=30)
            lat = [(received[s] - s) / 1e6 for s in sent if s in received]
    finally:
        node.stop()
    node_stats = json.loads(stats.read_text()) if stats.exists() else {}
    return {
        "labels": n,
        "sent": len(sent),
        "received": len(lat),
        "end_to_end_ms": {k: round(v, 3) for k, v in percentiles(lat).items()} if lat else {},
        "node_stages_ms": node_stats.get("stages_ms", {}),
        "embed_label_set_ms": embed_ms(text_model, label_set(n)),
    }


def run(text_model: Path, sizes: tuple[int, ...], frames: int, fps: float, work: Path) -> dict:
    from ..ros.cyclone import CycloneTransport
    from ..text.encoder import TextEncoder

    enc = TextEncoder(text_model, threads=1)
    work.mkdir(parents=True, exist_ok=True)
    transport = CycloneTransport("labels_bench")
    try:
        rows = [_one(transport, text_model, enc.model_id, enc.embed_dim, n, frames, fps, work) for n in sizes]
    finally:
        transport.close()
    return {"model": enc.model_id, "fps": fps, "frames": frames, "sizes": rows}


def format_result(r: dict) -> str:
    lines = [f"labels node latency per frame — {r['model']}, {r['frames']} features at {r['fps']:g} Hz, loopback DDS",
             "| labels | received | end to end P50 / P95 / P99 ms | in node: score P50 ms, publish P50 ms "
             "| embed the set once, ms |", "|---|---|---|---|---|"]  # fmt: skip
    for row in r["sizes"]:
        e, st = row["end_to_end_ms"], row["node_stages_ms"]
        score, publish = st.get("score", {}).get("p50", float("nan")), st.get("publish", {}).get("p50", float("nan"))
        lines.append(
            f"| {row['labels']} | {row['received']}/{row['sent']} | {e.get('p50', float('nan')):.2f} / "
            f"{e.get('p95', float('nan')):.2f} / {e.get('p99', float('nan')):.2f} | {score:.3f}, {publish:.3f} "
            f"| {row['embed_label_set_ms']:.1f} |"
        )
    first, last = r["sizes"][0], r["sizes"][-1]
    if len(r["sizes"]) > 1 and first["end_to_end_ms"] and last["end_to_end_ms"]:
        ratio = last["end_to_end_ms"]["p50"] / first["end_to_end_ms"]["p50"]
        lines.append(f"P50 end to end, {last['labels']} vs {first['labels']} labels: {ratio:.2f}x")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from ..models.configs import canonical_name
    from ..text.build import default_text_model_path

    path = args.text_model or default_text_model_path(canonical_name(args.model))
    if not Path(path).is_file():
        print(f"bench-labels: no text model at {path} (openclaw-vision export --tower text)")
        return 2
    r = run(Path(path), tuple(args.sizes), args.frames, args.fps, args.out)
    (args.out / "labels_latency.json").write_text(json.dumps(r, indent=2))
    print(format_result(r))
    print(f"wrote {args.out / 'labels_latency.json'}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="ViT-B-32", help="its text export in the data home")
    p.add_argument("--text-model", type=Path, default=None, help="a text tower export instead")
    p.add_argument("--sizes", type=int, nargs="+", default=[3, 30, 300], help="label-set sizes, side by side")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=Path("out/bench-labels"))


COMMAND = Command(add_arguments, main)  # `openclaw-vision bench-labels`
