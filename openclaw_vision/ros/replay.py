"""Play a bag's images into a running encoder node over DDS and record what comes back.

The replay is the user's regression test and the demo's main job, so it accounts for every
frame: it reads the node's counters from /diagnostics before and after, and reports the
difference next to what it sent and what it received, with stamp-to-receipt latency.

Images go out as the bag holds them: sensor_msgs/Image or CompressedImage, the recorded CDR
bytes published as they are (no per-field pass over 6 MB of pixels), with only the header
stamp rewritten to the send time unless `restamp` is off (`--keep-stamps`: the bag's stamps,
as `ros2 bag play` leaves messages untouched).

Which camera of the bag is played is bags.camera_source's rule (the same as label, ask and
quantize); where the node publishes its features, the node's own rule: the camera's topic under
the default features_pattern for a multi-camera node, else /visual_features (`features_topics`),
unless `features_topic` names it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import OpenclawError
from ..runtime import bags
from ..runtime import config as cfgmod
from ..runtime.stats import percentiles
from . import cdr
from .convert import stamp_to_ns
from .diagnostics import status_values
from .intake import COUNTS, STAGES, camera_features_topic
from .node_counters import STATUS_NAME
from .types import DIAGNOSTIC_ARRAY, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger(__name__)


@dataclass
class ReplayOptions:
    bag: Path
    out: Path | None = None
    bag_topic: str | None = None  # Image or CompressedImage topic in the bag; default: its one camera (runtime/bags.py)
    image_topic: str | None = None  # where to publish; default: the bag topic
    features_topic: str | None = None  # where the node publishes; default: found (features_topics)
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


def features_topics(image_topic: str) -> tuple[str, ...]:
    """Where an encoder node publishes the features of the images on `image_topic`, by the node's own
    rules (intake.camera_features_topic): that camera's topic under the default features_pattern
    (a multi-camera node: /cam0/image_raw → /cam0/visual_features), else the default features_topic
    (a node with one camera). The replay takes the first that has a publisher."""
    own = camera_features_topic(image_topic, cfgmod.EncoderConfig.features_pattern)
    return tuple(dict.fromkeys((own, cfgmod.EncoderConfig.features_topic)))


def _discover(opts: ReplayOptions, transport: Transport, pub, image_topic: str, rx: _Receiver) -> tuple[str, Any]:
    """(features topic, its subscription) once the node subscribes to `image_topic` and publishes features."""
    candidates = (opts.features_topic,) if opts.features_topic else features_topics(image_topic)
    subs = {t: transport.subscribe(t, VISUAL_FEATURES, QoS("reliable", 100), rx.on_features) for t in candidates}
    deadline = time.monotonic() + opts.discovery_timeout
    while True:
        found = next((t for t, sub in subs.items() if sub.matched() > 0), None)
        if found is not None and pub.matched() > 0:
            break
        if time.monotonic() > deadline:
            publishers = ", ".join(f"{t} has {sub.matched()}" for t, sub in subs.items())
            for sub in subs.values():
                sub.close()
            raise ReplayError(
                f"no encoder node found within {opts.discovery_timeout:.0f} s: {image_topic} has {pub.matched()} "
                f"subscribers; features topic publishers: {publishers} (--features-topic names another)"
            )
        time.sleep(0.05)
    for topic, sub in subs.items():
        if topic != found:
            sub.close()
    return found, subs[found]


@dataclass
class _Sent:
    stamps: dict[int, int] = field(default_factory=dict)  # stamp ns → send ns
    count: int = 0
    lockstep_timeouts: int = 0
    seconds: float = 0.0


def _send(opts: ReplayOptions, source: bags.CameraSource, pub, rx: _Receiver) -> _Sent:
    """Publish the bag's frames at its own timing × rate (or in lockstep), stamped with the send time."""
    sent = _Sent()
    t_start = time.perf_counter()
    first_ts = None
    for i, m in enumerate(bags.read_messages(source.path, source.msgtype, source.topic)):
        if opts.limit and i >= opts.limit:
            break
        if first_ts is None:
            first_ts = m.timestamp_ns
        if opts.rate > 0 and not opts.lockstep:
            delay = t_start + (m.timestamp_ns - first_ts) / 1e9 / opts.rate - time.perf_counter()
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
        sent.stamps[stamp] = now
        sent.count += 1
        pub.publish(raw)  # the serialized message as it is (both transports publish bytes raw)
        if opts.lockstep and not rx.wait(lambda s=stamp: s in rx.stamps, opts.lockstep_timeout):
            sent.lockstep_timeouts += 1
            log.warning("no features for frame %d within %.0f s", i, opts.lockstep_timeout)
    sent.seconds = time.perf_counter() - t_start
    return sent


def _settled(rx: _Receiver, before: dict[str, int] | None, sent: _Sent) -> bool:
    """The node counted every frame sent as received, and classified each; every encoded one came back."""
    c = _counts(rx.diag)
    if c is None or before is None:
        return False
    d = {k: c[k] - before[k] for k in c}
    got = sum(1 for _, s, _ in rx.features if s in sent.stamps)
    accounted = d["encoded"] + d["dropped"] + d["rejected"] + d["failed"]
    return d["received"] >= sent.count and accounted == d["received"] and got >= d["encoded"]


def replay(opts: ReplayOptions, transport: Transport) -> dict[str, Any]:
    try:
        source = bags.camera_source(opts.bag, opts.bag_topic)
    except bags.BagError as err:
        raise ReplayError(str(err)) from err
    image_topic = opts.image_topic or source.topic
    rx = _Receiver()
    qos = QoS(opts.reliability, 10, "keep_all" if opts.reliability == "reliable" else "keep_last")
    pub = transport.publisher(image_topic, source.msgtype, qos)
    transport.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), rx.on_diag)
    features_topic, _ = _discover(opts, transport, pub, image_topic, rx)
    # The node's counters before we send anything, so a node that ran earlier replays is fine.
    rx.wait(lambda: rx.diag is not None, 5.0)
    before = _counts(rx.diag)
    sent = _send(opts, source, pub, rx)
    rx.wait(lambda: _settled(rx, before, sent), opts.settle_timeout)
    with rx.cond:
        after = _counts(rx.diag)
        features = [f for f in rx.features if f[1] in sent.stamps]
        diag = dict(rx.diag or {})
    node = {k: after[k] - before[k] for k in after} if after and before else None
    if opts.out is not None:
        with bags.BagWriter(opts.out, opts.storage) as writer:
            for recv, _stamp, msg in features:
                writer.write(features_topic, bags.FEATURES_TYPE, recv, transport.serialize(msg, VISUAL_FEATURES))
    summary = _summary(opts, sent, features, node, diag)
    summary.update(image_topic=image_topic, image_type=source.msgtype, features_topic=features_topic)
    return summary


def _summary(opts: ReplayOptions, sent: _Sent, features: list, node: dict | None, diag: dict) -> dict[str, Any]:
    latencies = [(recv - sent.stamps[stamp]) / 1e6 for recv, stamp, _ in features]
    summary: dict[str, Any] = {
        "sent": sent.count,
        "features_received": len(features),
        "duplicates": len(features) - len({s for _, s, _ in features}),
        "node": node,
        "accounted": bool(
            node
            and node["received"] == sent.count
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
        "kept_stamps": not opts.restamp,
        "repeated_stamps": sent.count - len(sent.stamps),
        "reliability": opts.reliability,
        "rate": opts.rate,
        "lockstep": opts.lockstep,
        "lockstep_timeouts": sent.lockstep_timeouts,
        "send_seconds": round(sent.seconds, 3),
        "send_fps": round(sent.count / sent.seconds, 2) if sent.seconds > 0 else None,
        "out_bag": str(opts.out) if opts.out else None,
    }
    if features:
        summary["embedding_dim"] = int(features[0][2].dim)
    return summary
