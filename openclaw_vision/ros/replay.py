"""Play a bag's images into a running encoder node over DDS and record what comes back.

The replay is the user's regression test and the demo's main job, so it accounts for every
frame: it reads the node's counters from /diagnostics before and after, and reports the
difference next to what it sent and what it received, with stamp-to-receipt latency.

Images go out as the bag holds them: sensor_msgs/Image or CompressedImage, the recorded CDR
bytes published as they are (no per-field pass over 6 MB of pixels), with only the header
stamp rewritten to the send time unless `restamp` is off (`--keep-stamps`: the bag's stamps,
as `ros2 bag play` leaves messages untouched).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import bags
from ..errors import OpenclawError
from ..stats import percentiles
from . import cdr
from .convert import stamp_to_ns
from .diagnostics import status_values
from .encoder_node import COUNTS, STAGES, STATUS_NAME
from .types import DIAGNOSTIC_ARRAY, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger(__name__)


@dataclass
class ReplayOptions:
    bag: Path
    out: Path | None = None
    bag_topic: str | None = None  # Image or CompressedImage topic in the bag; default: its first Image topic
    image_topic: str | None = None  # where to publish; default: the bag topic
    features_topic: str = "/visual_features"
    rate: float = 1.0  # 1.0 = the bag's own timing; 0 = as fast as possible
    lockstep: bool = False  # wait for each frame's features before sending the next
    reliability: str = "reliable"
    restamp: bool = True  # stamp = send time; False keeps the bag's stamps (latency is send → receipt either way)
    limit: int = 0
    discovery_timeout: float = 30.0
    settle_timeout: float = 15.0
    lockstep_timeout: float = 30.0
    storage: str = "mcap"


class ReplayError(OpenclawError, RuntimeError):
    pass


class _Receiver:
    """Collects VisualFeatures and the node's latest diagnostics, from transport threads."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.features: list[tuple[int, int, Any]] = []  # (receipt ns, stamp ns, msg)
        self.stamps: set[int] = set()
        self.diag: dict[str, str] | None = None
        self.diag_seq = 0

    def on_features(self, msg: Any, _dt: float) -> None:
        now = time.time_ns()
        with self.cond:
            stamp = stamp_to_ns(msg.header.stamp)
            self.features.append((now, stamp, msg))
            self.stamps.add(stamp)
            self.cond.notify_all()

    def on_diag(self, msg: Any, _dt: float) -> None:
        values = status_values(msg, STATUS_NAME)
        if values is not None:
            with self.cond:
                self.diag, self.diag_seq = values, self.diag_seq + 1
                self.cond.notify_all()

    def wait(self, pred, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)


def _counts(diag: dict[str, str] | None) -> dict[str, int] | None:
    if diag is None:
        return None
    return {k: int(diag.get(k, 0)) for k in (*COUNTS, "lost")}


def _camera_topic(opts: ReplayOptions) -> tuple[str, str]:
    """(bag topic, its message type): the one asked for, else the first Image topic, else the first CompressedImage."""
    topics = bags.camera_topics(opts.bag)
    if opts.bag_topic is not None:
        if opts.bag_topic not in topics:
            have = ", ".join(f"{t} [{k}]" for t, k in topics.items()) or "none"
            raise ReplayError(
                f"{opts.bag}: no Image or CompressedImage topic {opts.bag_topic!r} (camera topics: {have})"
            )
        return opts.bag_topic, topics[opts.bag_topic]
    for kind in bags.CAMERA_TYPES:
        for topic, msgtype in topics.items():
            if msgtype == kind:
                return topic, msgtype
    raise ReplayError(f"{opts.bag}: no sensor_msgs/msg/Image or CompressedImage topic in this bag")


def replay(opts: ReplayOptions, transport: Transport) -> dict[str, Any]:
    bag_topic, msgtype = _camera_topic(opts)
    image_topic = opts.image_topic or bag_topic
    rx = _Receiver()
    qos = QoS(opts.reliability, 10, "keep_all" if opts.reliability == "reliable" else "keep_last")
    pub = transport.publisher(image_topic, msgtype, qos)
    feat_sub = transport.subscribe(opts.features_topic, VISUAL_FEATURES, QoS("reliable", 100), rx.on_features)
    transport.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), rx.on_diag)

    deadline = time.monotonic() + opts.discovery_timeout
    while pub.matched() < 1 or feat_sub.matched() < 1:
        if time.monotonic() > deadline:
            raise ReplayError(
                f"no encoder node found within {opts.discovery_timeout:.0f} s: {image_topic} has "
                f"{pub.matched()} subscribers, {opts.features_topic} has {feat_sub.matched()} publishers"
            )
        time.sleep(0.05)
    # The node's counters before we send anything, so a node that ran earlier replays is fine.
    rx.wait(lambda: rx.diag is not None, 5.0)
    before = _counts(rx.diag)

    sent: dict[int, int] = {}  # stamp ns → send ns
    n_sent = 0
    t_start = time.perf_counter()
    first_ts = None
    timeouts = 0
    for i, m in enumerate(bags.read_messages(opts.bag, msgtype, bag_topic)):
        if opts.limit and i >= opts.limit:
            break
        if first_ts is None:
            first_ts = m.timestamp_ns
        if opts.rate > 0 and not opts.lockstep:
            due = t_start + (m.timestamp_ns - first_ts) / 1e9 / opts.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        raw = m.raw
        now = time.time_ns()
        if opts.restamp:
            raw = cdr.restamp(raw, now // 1_000_000_000, now % 1_000_000_000)
            stamp = now
        else:
            sec, nanosec = cdr.header_stamp(raw)
            stamp = sec * 1_000_000_000 + nanosec
        sent[stamp] = now
        n_sent += 1
        pub.publish(raw)  # the serialized message as it is (both transports publish bytes raw)
        if opts.lockstep and not rx.wait(lambda s=stamp: s in rx.stamps, opts.lockstep_timeout):
            timeouts += 1
            log.warning("no features for frame %d within %.0f s", i, opts.lockstep_timeout)
    send_s = time.perf_counter() - t_start

    def settled() -> bool:
        c = _counts(rx.diag)
        if c is None or before is None:
            return False
        d = {k: c[k] - before[k] for k in c}
        got = sum(1 for _, s, _ in rx.features if s in sent)
        accounted = d["encoded"] + d["dropped"] + d["rejected"] + d["failed"]
        return d["received"] >= n_sent and accounted == d["received"] and got >= d["encoded"]

    rx.wait(settled, opts.settle_timeout)
    with rx.cond:
        after = _counts(rx.diag)
        features = [f for f in rx.features if f[1] in sent]
        diag = dict(rx.diag or {})
    node = {k: after[k] - before[k] for k in after} if after and before else None
    latencies = [(recv - sent[stamp]) / 1e6 for recv, stamp, _ in features]

    if opts.out is not None:
        with bags.BagWriter(opts.out, opts.storage) as writer:
            for recv, _stamp, msg in features:
                writer.write(opts.features_topic, bags.FEATURES_TYPE, recv, transport.serialize(msg, VISUAL_FEATURES))

    summary: dict[str, Any] = {
        "sent": n_sent,
        "features_received": len(features),
        "duplicates": len(features) - len({s for _, s, _ in features}),
        "node": node,
        "accounted": bool(
            node
            and node["received"] == n_sent
            and node["encoded"] + node["dropped"] + node["rejected"] + node["failed"] == node["received"]
            and len(features) == node["encoded"]
        ),
        "latency_ms": {k: round(v, 3) if isinstance(v, float) else v for k, v in percentiles(latencies).items()},
        "latency_samples_ms": [round(v, 3) for v in latencies],
        "stages_ms": {
            s: {q: float(diag.get(f"{s}_ms_{q}", 0.0)) for q in ("p50", "p95", "p99", "mean")} for s in STAGES
        },
        "backend": diag.get("backend"),
        "precision": diag.get("precision"),
        "model": diag.get("model"),
        "node_transport": diag.get("transport"),
        "image_topic": image_topic,
        "image_type": msgtype,
        "kept_stamps": not opts.restamp,
        "repeated_stamps": n_sent - len(sent),
        "features_topic": opts.features_topic,
        "reliability": opts.reliability,
        "rate": opts.rate,
        "lockstep": opts.lockstep,
        "lockstep_timeouts": timeouts,
        "send_seconds": round(send_s, 3),
        "send_fps": round(n_sent / send_s, 2) if send_s > 0 else None,
        "out_bag": str(opts.out) if opts.out else None,
    }
    if features:
        summary["embedding_dim"] = int(features[0][2].dim)
    return summary
