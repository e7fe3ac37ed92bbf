"""Many cameras, one encoder node: cross-camera batches, per-camera topics, headers and counts, fairness.

- FramePipeline: a batch of frames of mixed sizes and encodings gives what each frame gives alone
  (ONNX Runtime and OpenVINO, FP32 and INT8); a bad frame in a batch is rejected on its own.
- The node as a process over loopback DDS, `--image-topics` with three cameras (raw rgb8, raw nv12,
  a compressed JPEG) and a silent fourth: features on each camera's own topic with that camera's
  headers, exact per-camera counts in --stats-json and on /diagnostics, garbage from one camera
  moving only its rejected count.
- Overload in process over DDS: cameras sending three frames for every one the node encodes are
  served round robin, batch by batch (the test holds each batch; the fairness figure under a
  sleeping encoder is `bench --mode overload`).
- The node's two stages overlapped (prepare batch k+1 while batch k encodes): a newer frame still
  displaces the older one in its slot while a batch encodes, and a failed model call fails its batch
  only.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import compressed_fuzz
import numpy as np
import pytest
from dds_helpers import Inbox, cameras_connected, node_matched, wait_until

from openclaw_vision.core.gate import GateSpec
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.preprocess.compressed import CompressedFrame
from openclaw_vision.preprocess.encodings import FrameError
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import compress_rgb, convert_rgb, pan_frames
from openclaw_vision.ros.intake import camera_specs
from openclaw_vision.runtime.config import ConfigError, EncoderConfig, from_sources
from openclaw_vision.runtime.pipeline import FramePipeline

ROOT = Path(__file__).resolve().parents[1]
FRONT, LEFT, REAR, SILENT = "/front/image_raw", "/left/image_raw", "/rear/image_raw/compressed", "/silent/image_raw"


def _pan(h: int, w: int, i: int) -> np.ndarray:
    frames = list(pan_frames(i + 1, w, h))
    return np.ascontiguousarray(frames[i])


def _mixed_frames() -> list:
    """Five frames a robot's cameras might send at once: sizes, encodings and one JPEG all differ."""
    rgb = _pan(1080, 1920, 0)
    nv12 = convert_rgb(_pan(480, 640, 1), "nv12")
    mono16 = convert_rgb(_pan(200, 300, 2), "mono16")
    bgr = convert_rgb(_pan(150, 97, 3), "bgr8")
    fmt, jpeg = compress_rgb(_pan(216, 384, 4), "rgb8", "jpeg")
    return [
        Frame.from_rgb(rgb),
        Frame.from_buffer(nv12.tobytes(), 480, 640, 640, "nv12"),
        Frame.from_buffer(mono16.tobytes(), 200, 300, 600, "mono16"),
        Frame.from_buffer(bgr.tobytes(), 150, 97, 97 * 3, "bgr8"),
        CompressedFrame.from_buffer(jpeg, fmt),
    ]


def _encoders(tiny_model, int8_model):
    from openclaw_vision.encoders.openvino import OpenVinoEncoder

    return [
        ("onnxruntime fp32", OnnxRuntimeEncoder(tiny_model, threads=1), 0.99999),
        ("openvino fp32", OpenVinoEncoder(tiny_model, threads=1), 0.99999),
        ("onnxruntime int8", OnnxRuntimeEncoder(int8_model, threads=1), GateSpec().min_cosine),
        ("openvino int8", OpenVinoEncoder(int8_model, threads=1), GateSpec().min_cosine),
    ]


def test_a_batch_of_mixed_frames_gives_what_each_frame_gives_alone(tiny_model, int8_model):
    frames = _mixed_frames()
    for name, enc, bound in _encoders(tiny_model, int8_model):
        pipe = FramePipeline(enc)
        assert pipe.max_batch == 8  # our exports have a dynamic batch axis: the default limit
        batch = pipe.encode(frames).vectors
        alone = np.stack([pipe.encode(f).vectors[0] for f in frames])
        assert batch.shape == (5, 32)
        cos = (batch * alone).sum(1)
        assert cos.min() >= bound, (name, cos)
        assert np.allclose(np.linalg.norm(batch, axis=1), 1, atol=1e-5)


def test_a_bad_frame_in_a_batch_is_rejected_alone_and_the_others_are_encoded(tiny_model):
    pipe = FramePipeline(OnnxRuntimeEncoder(tiny_model, threads=1), max_batch=4)
    good = _mixed_frames()
    bad = compressed_fuzz.by_decoding(per_kind=1, seed=3)[0]  # passes the checks on arrival, no decoder takes it
    broken = CompressedFrame.from_buffer(bad.data, bad.format)
    res = pipe.run([good[0], broken, good[1], good[4]])
    assert res.encoded == [0, 2, 3] and list(res.rejected) == [1] and isinstance(res.rejected[1], FrameError)
    alone = pipe.encode([good[0], good[1], good[4]]).vectors
    assert ((res.vectors * alone).sum(1) >= 0.99999).all()
    assert set(res.decode_s) >= {3} and set(res.preprocess_s) == {0, 2, 3} and res.encode_s > 0
    with pytest.raises(FrameError, match="frame 1"):
        pipe.encode([good[0], broken])
    with pytest.raises(ValueError, match="at most 8"):
        FramePipeline(OnnxRuntimeEncoder(tiny_model, threads=1), max_batch=9)


def test_camera_topics_and_their_features_topics():
    cfg = EncoderConfig(image_topics=(FRONT, REAR, "/cam3"))
    specs = {s.topic: (s.input_topic, s.input_type.split("/")[-1], s.features_topic) for s in camera_specs(cfg)}
    assert specs == {
        FRONT: (FRONT, "Image", "/front/visual_features"),
        REAR: (REAR, "CompressedImage", "/rear/visual_features"),
        "/cam3": ("/cam3", "Image", "/cam3/visual_features"),
    }
    one = camera_specs(EncoderConfig(image_transport="compressed"))  # one camera: as before
    assert [(s.input_topic, s.features_topic) for s in one] == [("/camera/image_raw/compressed", "/visual_features")]
    with pytest.raises(ConfigError, match="already"):
        camera_specs(EncoderConfig(image_topics=("/a/image_raw", "/a/image_rect")))  # both /a/visual_features
    assert [s.features_topic for s in camera_specs(EncoderConfig(image_topics=("/a/image_raw", "/a/image_rect"),
                                                               features_pattern="{topic}/features"))] == [
        "/a/image_raw/features", "/a/image_rect/features"]  # fmt: skip
    example = from_sources(ROOT / "config" / "encoder-4-cameras.yaml", "encoder_node", {})
    assert [s.features_topic for s in camera_specs(example)] == [
        "/front/visual_features",
        "/rear/visual_features",
        "/left/visual_features",
        "/right/visual_features",
    ]
    assert [s.input_type.split("/")[-1] for s in camera_specs(example)] == ["Image", "Image"] + ["CompressedImage"] * 2
    with pytest.raises(ConfigError, match="features_pattern"):
        EncoderConfig(features_pattern="/visual_features").validate()
    with pytest.raises(ConfigError, match="image_topics"):
        EncoderConfig(image_topics=(FRONT, FRONT)).validate()


# --- over DDS -------------------------------------------------------------------------------------


def _header(t, stamp_ns: int, frame_id: str):
    return t.msg("std_msgs/msg/Header")(
        stamp=t.msg("builtin_interfaces/msg/Time")(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9), frame_id=frame_id
    )


def _image(t, stamp_ns: int, frame_id: str, rows: np.ndarray, h: int, w: int, encoding: str, step: int | None = None):
    from openclaw_vision.ros.types import IMAGE

    data = np.ascontiguousarray(rows).tobytes()
    return t.msg(IMAGE)(header=_header(t, stamp_ns, frame_id), height=h, width=w, encoding=encoding, is_bigendian=0,
                        step=step if step is not None else len(data) // rows.shape[0], data=data)  # fmt: skip


@pytest.mark.dds
def test_three_cameras_one_node_each_gets_its_features_headers_and_counts(tiny_model, dds_domain, tmp_path):
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.diagnostics import status_values
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import COMPRESSED_IMAGE, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS

    stats_path = tmp_path / "stats.json"
    node = NodeProcess(
        ["--model", "tiny", "--model-path", str(tiny_model), "--backend", "onnxruntime", "--threads", "1",
         "--image-topics", FRONT, LEFT, REAR, SILENT, "--reliability", "reliable", "--depth", "5",
         "--diagnostics-period", "0.2", "--transport", "cyclonedds", "--stats-json", str(stats_path)],
        log_path=tmp_path / "node.log",
    )  # fmt: skip
    t = CycloneTransport("test_cameras")
    try:
        qos = QoS("reliable", 10, "keep_all")
        pubs = {FRONT: t.publisher(FRONT, IMAGE, qos), LEFT: t.publisher(LEFT, IMAGE, qos),
                REAR: t.publisher(REAR, COMPRESSED_IMAGE, qos)}  # fmt: skip
        names = {FRONT: "front", LEFT: "left", REAR: "rear", SILENT: "silent"}
        inboxes = {cam: Inbox() for cam in names}
        subs = [t.subscribe(f"/{names[cam]}/visual_features", VISUAL_FEATURES, QoS("reliable", 50, "keep_all"), inbox)
                for cam, inbox in inboxes.items()]  # fmt: skip
        diags = Inbox()
        t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), diags)
        wait_until(lambda: all(e.matched() for e in [*pubs.values(), *subs]) and node.alive(), 90, "the node's side")
        diags.wait_for(cameras_connected(pubs), 90, "the node's subscriptions and features publishers matched")
        sent: dict[str, list] = {cam: [] for cam in names}
        pipe = FramePipeline(OnnxRuntimeEncoder(tiny_model, threads=1))
        rounds = 4
        for r in range(rounds):
            stamp = 1_800_000_000_000_000_000 + r * 33_000_000
            front = _pan(240, 320, r)
            left = convert_rgb(_pan(144, 256, r + 1), "nv12")
            fmt, jpeg = compress_rgb(_pan(216, 384, r + 2), "rgb8", "jpeg")
            msgs = {
                FRONT: _image(t, stamp + 1, "front", front.reshape(240, -1), 240, 320, "rgb8"),
                LEFT: _image(t, stamp + 2, "left", left.reshape(216, -1), 144, 256, "nv12"),
                REAR: t.msg(COMPRESSED_IMAGE)(header=_header(t, stamp + 3, "rear"), format=fmt, data=jpeg),
            }
            for cam, msg in msgs.items():
                pubs[cam].publish(msg)
                sent[cam].append((stamp + 1 + list(msgs).index(cam), msg))
            if r in (1, 2):  # garbage from the left camera: a step shorter than a row
                pubs[LEFT].publish(_image(t, stamp + 9, "left", left.reshape(216, -1), 144, 256, "nv12", step=10))
            for cam in msgs:  # lockstep: every camera's frame is encoded before the next round
                inboxes[cam].wait(r + 1, timeout=60)
        last = diags.wait_for(
            lambda ms: any((status_values(m, f"encoder_node: camera {LEFT}") or {}).get("rejected") == "2"
                           and (status_values(m, f"encoder_node: camera {REAR}") or {}).get("encoded") == "4"
                           for m in ms), 30, "per-camera diagnostics")  # fmt: skip
        assert node.stop() == 0, node.log_text()[-3000:]
    finally:
        node.stop()
        t.close()

    stats = json.loads(stats_path.read_text())
    cams = stats["cameras"]
    counts = {cam: {k: cams[cam][k] for k in ("received", "encoded", "dropped", "rejected", "failed")} for cam in cams}
    assert counts == {
        FRONT: {"received": 4, "encoded": 4, "dropped": 0, "rejected": 0, "failed": 0},
        LEFT: {"received": 6, "encoded": 4, "dropped": 0, "rejected": 2, "failed": 0},
        REAR: {"received": 4, "encoded": 4, "dropped": 0, "rejected": 0, "failed": 0},
        SILENT: {"received": 0, "encoded": 0, "dropped": 0, "rejected": 0, "failed": 0},
    }
    for k in ("received", "encoded", "dropped", "rejected", "failed"):
        assert stats[k] == sum(c[k] for c in counts.values())  # the totals stay at the top level
    assert cams[REAR]["stages_ms"]["decode"]["n"] == 4 and cams[FRONT]["stages_ms"]["decode"]["n"] == 0
    assert cams[SILENT]["features_topic"] == "/silent/visual_features" and not inboxes[SILENT].items
    left_diag = next(status_values(m, f"encoder_node: camera {LEFT}") for m in reversed(last)
                     if status_values(m, f"encoder_node: camera {LEFT}"))  # fmt: skip
    assert left_diag["features_topic"] == "/left/visual_features" and "encode_ms_p50" in left_diag
    # who is connected, per camera: the silent camera has no publisher, every camera's features one subscriber
    connected = {cam: (v["publishers"], v["subscribers"]) for cam in names
                 if (v := status_values(last[-1], f"encoder_node: camera {cam}"))}  # fmt: skip
    assert connected == {FRONT: ("1", "1"), LEFT: ("1", "1"), REAR: ("1", "1"), SILENT: ("0", "1")}, connected

    for cam in (FRONT, LEFT, REAR):
        got = inboxes[cam].items
        assert len(got) == rounds
        want = {s: m for s, m in sent[cam]}
        for feat in got:
            stamp = feat.header.stamp.sec * 10**9 + feat.header.stamp.nanosec
            assert stamp in want and feat.header.frame_id == cam.split("/")[1], (cam, stamp)
            msg = want[stamp]
            frame = (CompressedFrame if cam == REAR else Frame).from_message(msg)
            alone = pipe.encode(frame).vectors[0]
            assert float(np.dot(alone, feat.embedding)) >= 0.99999, cam


def test_replay_finds_a_cameras_features_topic_by_the_nodes_rule():
    from openclaw_vision.ros.replay import features_topics

    assert features_topics("/cam0/image_raw") == ("/cam0/visual_features", "/visual_features")
    assert features_topics("/cam0/image_raw/compressed") == ("/cam0/visual_features", "/visual_features")
    assert features_topics("/image_raw") == ("/image_raw/visual_features", "/visual_features")


@pytest.mark.dds
def test_replay_of_one_cameras_bag_into_a_multi_camera_node(tiny_model, dds_domain, tmp_path):
    """`replay BAG` of a /cam0 bag (no --features-topic) against a node with --image-topics /cam0 /cam1: the
    replay finds /cam0/visual_features (the node's features_pattern) by itself and accounts for every frame."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.replay import ReplayOptions, replay
    from openclaw_vision.runtime.bags import write_sample_bag

    bag = tmp_path / "cam0"
    write_sample_bag(bag, frames=4, fps=30, width=320, height=240, topic="/cam0/image_raw")
    node = NodeProcess(
        ["--model", "tiny", "--model-path", str(tiny_model), "--backend", "onnxruntime", "--threads", "1",
         "--image-topics", "/cam0/image_raw", "/cam1/image_raw", "--reliability", "reliable",
         "--diagnostics-period", "0.2", "--transport", "cyclonedds"],
        log_path=tmp_path / "node.log",
    )  # fmt: skip
    t = CycloneTransport("test_replay")
    try:
        summary = replay(ReplayOptions(bag=bag, rate=0, lockstep=True, discovery_timeout=90), t)
    finally:
        t.close()
        node.stop()
    assert summary["features_topic"] == "/cam0/visual_features" and summary["image_topic"] == "/cam0/image_raw"
    assert summary["sent"] == summary["features_received"] == 4 and summary["accounted"], (summary, node.log_text())


class GatedEncoder:
    """An encoder whose calls wait for `gate` (set: no wait), noting when a call is inside; call
    number `fail_on` (from 1) raises, as a runtime that fails mid-stream would."""

    def __init__(self, inner, fail_on: int = 0) -> None:
        self.inner, self.fail_on, self.calls = inner, fail_on, 0
        self.gate, self.inside = threading.Event(), threading.Event()
        for k in ("model_id", "embed_dim", "image_size", "backend", "precision", "max_batch"):
            setattr(self, k, getattr(inner, k))

    def frame_preprocessor(self):
        return None

    def encode(self, pixels):
        from openclaw_vision.encoders import EncoderError

        self.calls += 1
        self.inside.set()
        self.gate.wait(30)
        if self.calls == self.fail_on:
            raise EncoderError("the runtime failed on this batch")
        return self.inner.encode(pixels)


class SteppedEncoder(GatedEncoder):
    """A GatedEncoder whose calls pass one at a time: call k waits inside until `release(k)`, so the test,
    not a clock, decides when a batch ends and what has arrived in the slots by then. Each batch's size is kept."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.batches: list[int] = []
        self.released = 0
        self.cond = threading.Condition()

    def encode(self, pixels):
        with self.cond:
            self.batches.append(len(pixels))
            n = len(self.batches)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.released >= n, 60)  # liveness only: the test fails on its own wait
        return self.inner.encode(pixels)

    def entered(self, n: int, timeout: float = 60.0) -> None:
        """Wait until call `n` is inside (its batch taken from the slots, held)."""
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.batches) >= n, timeout), f"call {n} never came: {self.batches}"

    def release(self, n: int) -> None:
        """Let calls up to `n` finish."""
        with self.cond:
            self.released = max(self.released, n)
            self.cond.notify_all()


#: rounds of the round-robin test: batches 3 .. ROUNDS + 1 are taken with every slot full
ROUNDS = 31


@pytest.mark.dds
def test_under_overload_every_camera_is_served_round_robin(tiny_model, dds_domain):
    """Three cameras, batches of at most 2, each batch held in the encoder while every camera sends two
    more frames (6 frames per batch of 2: an overload), so from the third batch on every slot holds a
    frame at each take. Round robin (stats.LatestSlots: a take starts after the camera served last)
    then serves a+b, c+a, b+c, ...: over 3m such batches each camera is encoded exactly 2m times, on any
    host at any speed. Every frame is counted encoded or dropped; no batch is above max_batch."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, QoS

    cams = ["/a/image_raw", "/b/image_raw", "/c/image_raw"]
    enc = SteppedEncoder(OnnxRuntimeEncoder(tiny_model, threads=1))
    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("cameras")
    cfg = EncoderConfig(image_topics=tuple(cams), max_batch=2, reliability="reliable", diagnostics_period=5.0)
    node = EncoderNode(cfg, node_t, enc)
    assert not node.overlap  # one worker: while a batch is held, nothing is taken from the slots

    def per(key: str) -> list[int]:
        return [node.stats()["cameras"][c][key] for c in cams]

    rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
    n = 0
    try:
        pubs = [cam_t.publisher(c, IMAGE, QoS("reliable", 10, "keep_all")) for c in cams]
        node.start()
        wait_until(lambda: node_matched(node, pubs), 30, "the node's subscriptions")
        for k in range(1, ROUNDS + 1):
            if k > 1:
                enc.entered(k)  # batch k is held: this round's frames all land in the slots
            if k == 3:
                base = per("encoded")  # batches 1 and 2 (taken while round 1 still arrived) are counted
            for _ in range(2):  # a camera's first frame is in its slot before its second is received
                n += 1
                for i, p in enumerate(pubs):
                    p.publish(_image(cam_t, n * 1000 + i, cams[i], rows, 48, 64, "rgb8"))
            # a camera's second frame may be held undecoded while its slot is full (the held_samples parameter)
            wait_until(lambda k=k: [r + h for r, h in zip(per("received"), per("held"), strict=True)] == [2 * k] * 3,
                       30, f"round {k}'s frames")  # fmt: skip
            enc.entered(k)
            enc.release(k)
        enc.entered(ROUNDS + 1)  # the last full take
        enc.release(ROUNDS + 1)
        enc.entered(ROUNDS + 2)  # the one camera left in its slot: batches up to ROUNDS + 1 are counted
        full = [e - b for e, b in zip(per("encoded"), base, strict=True)]
        enc.release(ROUNDS + 2)
        wait_until(lambda: per("received") == [a + b for a, b in zip(per("encoded"), per("dropped"), strict=True)],
                   30, "every frame encoded or dropped")  # fmt: skip
    finally:
        enc.release(10**9)
        node.stop()
        node_t.close()
        cam_t.close()
    stats = node.stats()["cameras"]
    for c in cams:
        s = stats[c]
        assert s["received"] == 2 * ROUNDS and s["rejected"] == s["failed"] == 0 and s["lost"] == 0, (c, s)
        assert s["received"] == s["encoded"] + s["dropped"] and s["dropped"] > 0, (c, s)  # thinned, never queued
    # no camera starved: the full batches went round robin, each camera in two of every three
    assert full == [2 * (ROUNDS - 1) // 3] * 3, (full, enc.batches)
    assert enc.batches[2 : ROUNDS + 1] == [2] * (ROUNDS - 1)  # every full take made a batch of max_batch
    assert max(enc.batches) == 2 and sum(enc.batches) == sum(stats[c]["encoded"] for c in cams)
    assert len(enc.batches) == ROUNDS + 2


def _stamp(feat) -> int:
    return feat.header.stamp.sec * 10**9 + feat.header.stamp.nanosec


def arrived(node) -> int:
    """Frames the node received or holds undecoded (the held_samples parameter) while their camera's slot is full."""
    s = node.stats()
    return s["received"] + s["held"]


@contextlib.contextmanager
def one_camera_node(enc, overlap: bool, **cfg):
    """A node on FRONT with encoder `enc` (reliable QoS), started, a camera publisher matched to it and its
    features collected: yields (node, camera transport, publisher, features); stopped and closed after."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, VISUAL_FEATURES, QoS

    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("camera")
    cfg = EncoderConfig(image_topic=FRONT, reliability="reliable", diagnostics_period=5.0, **cfg)
    node = EncoderNode(cfg, node_t, enc, overlap=overlap)
    feats = Inbox()
    try:
        pub = cam_t.publisher(FRONT, IMAGE, QoS("reliable", 10, "keep_all"))
        sub = cam_t.subscribe("/visual_features", VISUAL_FEATURES, QoS("reliable", 10, "keep_all"), feats)
        node.start()
        wait_until(lambda: node_matched(node, [pub], [sub]), 30, "the node's subscription")
        yield node, cam_t, pub, feats
    finally:
        if hasattr(enc, "gate"):
            enc.gate.set()
        node.stop()
        node_t.close()
        cam_t.close()


@contextlib.contextmanager
def a_busy_camera(tiny_model, rows):
    """`one_camera_node` on a gated encoder (`reader_samples` 3), frame 1 held inside the model call and frame 2
    waiting in the camera's slot: what the camera sends next finds it busy. Yields (node, camera transport,
    publisher, features, encoder); the encoder's gate opens when the block ends."""
    enc = GatedEncoder(OnnxRuntimeEncoder(tiny_model, threads=1))
    with one_camera_node(enc, False, reader_samples=3) as (node, cam_t, pub, feats):
        pub.publish(_image(cam_t, 1, "front", rows, 48, 64, "rgb8"))
        assert enc.inside.wait(30)  # frame 1 is in the model call, held there
        pub.publish(_image(cam_t, 2, "front", rows, 48, 64, "rgb8"))
        wait_until(lambda: node.stats()["received"] == 2, 30, "frame 2")
        yield node, cam_t, pub, feats, enc


@pytest.mark.dds
def test_a_busy_cameras_frames_wait_in_its_reader_and_come_in_a_few_at_a_time(tiny_model, dds_domain):
    """While frame 1 is in the model and frame 2 waits in the camera's slot, the twelve frames a 30 fps
    camera sends next wait in the reader and are taken a few at a time (`reader_samples` 3: about three
    frames' time apart), not one wake-up each; every one is still received, checked and counted once, and
    when the encoder goes on the newest is encoded last."""
    rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
    last = 14
    with a_busy_camera(tiny_model, rows) as (node, cam_t, pub, feats, enc):
        sub = node.cameras[FRONT].images
        takes = sub.takes
        for n in range(3, last + 1):
            pub.publish(_image(cam_t, n, "front", rows, 48, 64, "rgb8"))
            time.sleep(1 / 30)  # the camera's rate, not a timing assertion
        wait_until(lambda: node.stats()["received"] == last, 30, "the frames waiting in the reader")
        assert sub.takes - takes <= 6 and enc.calls == 1, (sub.takes - takes, enc.calls)
        enc.gate.set()
        wait_until(lambda: sum(node.counters.snapshot()[k] for k in ("encoded", "dropped")) == last, 30, "every frame")
        feats.wait(node.counters.snapshot()["encoded"], timeout=30)
    s = node.stats()
    assert s["received"] == last and s["encoded"] + s["dropped"] == last and s["rejected"] == s["failed"] == 0, s
    stamps = [_stamp(f) for f in feats.items]
    assert stamps[0] == 1 and stamps[-1] == last and stamps == sorted(stamps), stamps


@pytest.mark.dds
def test_frames_waiting_in_the_reader_when_the_node_stops_are_taken_by_its_close_and_counted(tiny_model, dds_domain,
                                                                                            monkeypatch):  # fmt: skip
    """The node stops while frame 1 is in the model, frame 2 in the camera's slot and frames 3-6 wait in the
    reader (its take thread paced to drain a minute apart): the node's close takes them, and every frame is
    counted, received, then encoded or dropped; none is left uncounted in a reader that goes away."""
    from cyclonedds.util import duration

    from openclaw_vision.ros import cyclone

    monkeypatch.setattr(cyclone, "DRAIN_MIN_S", 59.0)  # drains a minute apart: the test is over before the next
    monkeypatch.setattr(cyclone, "DRAIN_MAX_S", 60.0)
    rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
    with a_busy_camera(tiny_model, rows) as (node, cam_t, pub, feats, enc):
        sub = node.cameras[FRONT].images
        # the take thread, paced: the room the worker's take of frame 1 left only makes it look again (no drain),
        # and it then waits a minute; the frames sent once that room is used wait in the reader
        wait_until(lambda: not sub.intake.room.is_set(), 30, "the take thread's paced wait")
        for n in range(3, 7):
            pub.publish(_image(cam_t, n, "front", rows, 48, 64, "rgb8"))
        assert pub._writer.wait_for_acks(duration(seconds=30))  # all four reached the node's reader
        assert node.stats()["received"] == 2  # and all four still wait there
        stopping = threading.Thread(target=node.stop)
        stopping.start()
        wait_until(lambda: node.stats()["received"] == 6, 30, "the close's take")
        enc.gate.set()  # frame 1's call returns; the worker sees the stop
        stopping.join(30)
        assert not stopping.is_alive()
    s = node.stats()
    assert (s["received"], s["encoded"], s["dropped"], s["rejected"], s["failed"]) == (6, 1, 5, 0, 0), s
    assert [_stamp(f) for f in feats.wait(1)] == [1]


@pytest.mark.dds
def test_with_overlap_a_newer_frame_still_displaces_the_older_while_a_batch_encodes(tiny_model, dds_domain):
    """One camera, the node's two stages overlapped: while the encoder holds frame 1, frames 2-4
    arrive. The prepare stage takes at most one batch ahead, so the others wait in the camera's
    slot and a newer one displaces an older one (dropped, counted); every frame is counted once and
    the newest is encoded last."""
    enc = GatedEncoder(OnnxRuntimeEncoder(tiny_model, threads=1))
    rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
    with one_camera_node(enc, True) as (node, cam_t, pub, feats):
        assert node.overlap and [t.name for t in node.supervisor.threads][:2] == ["encoder-prepare", "encoder-worker"]
        pub.publish(_image(cam_t, 1, "front", rows, 48, 64, "rgb8"))
        assert enc.inside.wait(30)  # frame 1 is in the model call, held there
        for n in (2, 3, 4):
            pub.publish(_image(cam_t, n, "front", rows, 48, 64, "rgb8"))
            wait_until(lambda n=n: arrived(node) == n, 30, f"frame {n}")
        enc.gate.set()
        wait_until(lambda: sum(node.counters.snapshot()[k] for k in ("encoded", "dropped")) == 4, 30, "every frame")
        feats.wait(node.counters.snapshot()["encoded"], timeout=30)
    s = node.stats()
    assert s["received"] == 4 and s["encoded"] + s["dropped"] == 4 and s["rejected"] == s["failed"] == 0, s
    assert s["dropped"] >= 1, s  # not queued behind the held batch: displaced in the slot
    stamps = [_stamp(f) for f in feats.items]
    assert len(stamps) == s["encoded"] and stamps[0] == 1 and stamps[-1] == 4 and stamps == sorted(stamps), stamps
    assert s["stages_ms"]["batch"]["n"] == s["encoded"]  # every encoded frame has each of its stages once


@pytest.mark.dds
def test_with_overlap_a_batch_the_encoder_fails_on_is_counted_failed_and_the_next_is_served(tiny_model, dds_domain):
    enc = GatedEncoder(OnnxRuntimeEncoder(tiny_model, threads=1), fail_on=2)
    enc.gate.set()
    rows = np.random.default_rng(1).integers(0, 256, (48, 64 * 3), np.uint8)
    with one_camera_node(enc, True) as (node, cam_t, pub, feats):
        assert node.overlap
        accounted = lambda: sum(node.counters.snapshot()[k] for k in ("encoded", "dropped", "rejected", "failed"))  # noqa: E731
        for n in range(1, 4):  # lockstep; the second model call fails
            pub.publish(_image(cam_t, n, "front", rows, 48, 64, "rgb8"))
            wait_until(lambda n=n: accounted() == n, 30, f"frame {n}")
        feats.wait(2, timeout=30)
    s = node.stats()
    assert (s["received"], s["encoded"], s["failed"], s["dropped"]) == (3, 2, 1, 0), s
    assert "the runtime failed on this batch" in node.last_failure
    assert [_stamp(f) for f in feats.items] == [1, 3]  # frame 2's batch failed, the node went on


def test_the_node_overlaps_its_stages_only_where_the_encode_leaves_this_hosts_cores_free(tiny_model):
    from openclaw_vision.encoders.gpu_common import BoundPreprocessor
    from openclaw_vision.preprocess.cpu import CpuPreprocessor
    from openclaw_vision.ros.encoder_node import overlaps

    ort = OnnxRuntimeEncoder(tiny_model, threads=1)
    assert not overlaps(FramePipeline(ort))  # an in-process CPU runtime: the stages would share its cores
    remote = GatedEncoder(ort)
    remote.backend = "triton"  # the encode runs on a server
    assert overlaps(FramePipeline(remote))
    shared = BoundPreprocessor(CpuPreprocessor(), np.empty((8, 3, 224, 224), np.float32))  # writes the encoder's input
    assert not overlaps(FramePipeline(remote, preprocessor=shared))


@pytest.mark.dds
def test_a_camera_whose_stamps_skip_frames_shows_the_estimate_in_stats_and_diagnostics(tiny_model, dds_domain,
                                                                                       tmp_path):  # fmt: skip
    """Two cameras at 30 fps into the pip-path node; the left one's stamps skip 3 frames in a row and
    then 1 (frames a camera sent that never arrived): that camera alone shows missing_estimate 4, in
    --stats-json and on its /diagnostics status, and the totals carry it."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.diagnostics import status_values
    from openclaw_vision.ros.node_counters import STATUS_NAME
    from openclaw_vision.ros.process import NodeProcess
    from openclaw_vision.ros.types import DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS

    stats_path = tmp_path / "stats.json"
    node = NodeProcess(
        ["--model", "tiny", "--model-path", str(tiny_model), "--backend", "onnxruntime", "--threads", "1",
         "--image-topics", FRONT, LEFT, "--reliability", "reliable", "--diagnostics-period", "0.2",
         "--transport", "cyclonedds", "--stats-json", str(stats_path)],
        log_path=tmp_path / "node.log",
    )  # fmt: skip
    t = CycloneTransport("test_stamp_gaps")
    skipped = {6, 7, 8, 12}
    try:
        qos = QoS("reliable", 10, "keep_all")
        pubs = {cam: t.publisher(cam, IMAGE, qos) for cam in (FRONT, LEFT)}
        inboxes = {cam: Inbox() for cam in pubs}
        subs = [t.subscribe(cam.replace("image_raw", "visual_features"), VISUAL_FEATURES,
                            QoS("reliable", 50, "keep_all"), inbox) for cam, inbox in inboxes.items()]  # fmt: skip
        diags = Inbox()
        t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), diags)
        wait_until(lambda: all(e.matched() for e in [*pubs.values(), *subs]) and node.alive(), 90, "the node's side")
        diags.wait_for(cameras_connected(pubs), 90, "the node's subscriptions and features publishers matched")
        rgb = _pan(120, 160, 0)
        sent = dict.fromkeys(pubs, 0)
        for i in range(20):
            stamp = 1_800_000_000_000_000_000 + i * 33_333_333
            for cam, pub in pubs.items():
                if cam == LEFT and i in skipped:
                    continue
                pub.publish(_image(t, stamp, cam, rgb.reshape(120, -1), 120, 160, "rgb8"))
                sent[cam] += 1
                inboxes[cam].wait(sent[cam], timeout=60)  # lockstep: nothing is dropped or lost here
        camera = f"encoder_node: camera {LEFT}"
        last = diags.wait_for(lambda ms: any((status_values(m, camera) or {}).get("encoded") == str(sent[LEFT])
                                             for m in ms), 30, "the left camera's diagnostics")  # fmt: skip
        assert node.stop() == 0, node.log_text()[-3000:]
    finally:
        node.stop()
        t.close()

    stats = json.loads(stats_path.read_text())
    cams = stats["cameras"]
    assert cams[LEFT]["received"] == 16 and cams[LEFT]["lost"] == 0 and cams[LEFT]["missing_estimate"] == 4
    assert cams[FRONT]["received"] == 20 and cams[FRONT]["missing_estimate"] == 0
    assert stats["missing_estimate"] == 4
    shown = next(m for m in reversed(last) if (status_values(m, camera) or {}).get("encoded") == str(sent[LEFT]))
    assert status_values(shown, camera)["missing_estimate"] == "4"
    assert status_values(shown, f"encoder_node: camera {FRONT}")["missing_estimate"] == "0"
    assert status_values(shown, STATUS_NAME)["missing_estimate"] == "4"


@pytest.mark.dds
def test_frames_that_waited_in_the_reader_are_each_checked_and_counted_and_the_newest_is_encoded(
    tiny_model, dds_domain
):
    """Two cameras; each camera's transport thread is held (busy) with its frame 0 while frames 1-7 arrive,
    a garbage frame among the front camera's. When the threads run again, one take per camera gets what
    waited; every frame is checked and counted (the garbage one rejected, never passed off as a drop),
    the newest is the last encoded, and the stamp-gap estimate sees no frame missing."""
    from cyclonedds.util import duration

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, VISUAL_FEATURES, QoS

    cams = [FRONT, LEFT]
    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("cameras")
    cfg = EncoderConfig(image_topics=tuple(cams), reliability="reliable", diagnostics_period=5.0)
    node = EncoderNode(cfg, node_t, OnnxRuntimeEncoder(tiny_model, threads=1))
    entered, go = {c: threading.Event() for c in cams}, threading.Event()
    on_image = node._on_image

    def busy(cam, msg, deserialize_s):  # the subscription looks the node's callback up per sample
        entered[cam.spec.topic].set()
        go.wait(30)
        on_image(cam, msg, deserialize_s)

    node._on_image = busy
    feats = {c: Inbox() for c in cams}
    rows = np.random.default_rng(2).integers(0, 256, (48, 64 * 3), np.uint8)
    frames = 8
    try:
        pubs = {c: cam_t.publisher(c, IMAGE, QoS("reliable", 10, "keep_all")) for c in cams}
        subs = [cam_t.subscribe(c.replace("image_raw", "visual_features"), VISUAL_FEATURES,
                                QoS("reliable", 50, "keep_all"), feats[c]) for c in cams]  # fmt: skip
        node.start()
        wait_until(lambda: node_matched(node, pubs.values(), subs), 30, "the node's subscriptions")
        for i in range(frames):
            for c, pub in pubs.items():
                step = 10 if (c == FRONT and i == 3) else None  # not a valid image
                pub.publish(_image(cam_t, 10**9 + i * 30_000_000, c, rows, 48, 64, "rgb8", step=step))
                if i == 0:
                    assert entered[c].wait(30)  # its transport thread holds frame 0: the rest wait in the reader
        for pub in pubs.values():
            assert pub._writer.wait_for_acks(duration(seconds=30))  # acknowledged: in the node's readers
        go.set()
        last = 10**9 + (frames - 1) * 30_000_000
        for c in cams:  # the newest frame of each camera is encoded last
            feats[c].wait_for(lambda ms: any(_stamp(m) == last for m in ms), 30, f"{c}'s newest frame")
    finally:
        go.set()
        node.stop()
        node_t.close()
        cam_t.close()
    st = node.stats()
    for c in cams:
        s = st["cameras"][c]
        bad = 1 if c == FRONT else 0
        assert (s["received"], s["rejected"], s["failed"]) == (frames, bad, 0), s
        assert s["encoded"] + s["dropped"] + s["rejected"] == frames and s["missing_estimate"] == s["lost"] == 0, s
        assert s["encoded"] == len(feats[c].items) and _stamp(feats[c].items[-1]) == last
        assert node.cameras[c].images.takes == 2  # frame 0's take, then one for the seven that waited


def test_the_node_takes_its_prepare_pool_size_from_prep_threads_and_its_defaults_from_the_cores_it_may_use(tiny_model):
    """`prep_threads` sizes the pool that prepares one batch's frames; 0 means min(max_batch, cores), and every
    default thread count (the pool, ONNX Runtime's, OpenVINO's, llama.cpp's) counts the cores of this process's
    affinity mask: a node pinned to one core of two prepares on one thread and runs one runtime thread."""
    import os
    from unittest import mock

    from openclaw_vision.core.cpu import usable_cores
    from openclaw_vision.core.ortsession import session_options
    from openclaw_vision.ros.encoder_node import EncoderNode

    cams = (FRONT, LEFT, "/rear/image_raw", "/top/image_raw")

    def pool(**kw) -> int:
        node = EncoderNode(EncoderConfig(image_topics=cams, max_batch=4, **kw), mock.MagicMock(),
                           OnnxRuntimeEncoder(tiny_model, threads=1))  # fmt: skip
        try:
            return node.pipeline.prep_threads
        finally:
            node.pipeline.close()

    assert pool(prep_threads=1) == 1
    assert pool(prep_threads=3) == 3
    assert pool() == min(4, usable_cores())
    mask = os.sched_getaffinity(0)
    if len(mask) < 2:
        pytest.skip("one core: the affinity half of the test needs two")
    try:
        os.sched_setaffinity(0, {min(mask)})  # this thread only (Linux: pid 0 is the calling thread)
        assert usable_cores() == 1
        assert pool() == 1
        assert session_options().intra_op_num_threads == 1
    finally:
        os.sched_setaffinity(0, mask)
    assert pool() == min(4, len(mask))


def test_the_runtime_pool_made_while_the_model_loads_waits_for_the_cpu_like_the_encode_stage(tiny_model):
    """The node's build loads the model inside threads.lower_threads_started: the threads ONNX Runtime starts
    for its pool then run at the worker's niceness (scheduler.WORKER_NICE), so on a busy machine the DDS receive
    threads and the take threads (the process's own niceness) come first; threads that were there before keep
    theirs."""
    import os
    from unittest import mock

    from openclaw_vision.ros import encoder_node
    from openclaw_vision.ros.scheduler import WORKER_NICE
    from openclaw_vision.runtime.threads import task_ids

    def nice(tid: int) -> int:
        return os.getpriority(os.PRIO_PROCESS, tid)

    before = {tid: nice(tid) for tid in task_ids()}
    cfg = EncoderConfig(image_topics=(FRONT, LEFT), model_path=str(tiny_model), backend="onnxruntime", threads=2,
                        encode_lanes=1)  # fmt: skip
    node = encoder_node._build(cfg, mock.MagicMock())
    try:
        started = task_ids() - set(before)
        assert started, "ONNX Runtime started no pool thread for threads=2"
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert {nice(tid) for tid in started} == {min(19, base + WORKER_NICE)}
        assert all(nice(tid) == n for tid, n in before.items() if tid in task_ids())
    finally:
        node.pipeline.close()


def test_the_node_encodes_one_batch_per_core_at_once_on_onnx_runtime_and_one_for_a_lone_camera(tiny_model):
    """`encode_lanes` 0: a node of four cameras on two usable cores (the test pins itself to two) encodes two
    batches at once (two lanes of up to two cameras each), and ONNX Runtime gives each call one of the two
    threads; one camera keeps one lane on both threads (a second lane would never run: a camera is in one batch
    at a time); OpenVINO answers one call at a time, so the node runs one lane there whatever it asked."""
    import os
    from unittest import mock

    from openclaw_vision.encoders import openvino
    from openclaw_vision.ros import encoder_node

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: one lane")
    cams = (FRONT, LEFT, "/rear/image_raw", "/top/image_raw")

    def built(backend: str, topics: tuple, **kw) -> tuple[int, int, int, int]:
        cfg = EncoderConfig(image_topics=topics, model_path=str(tiny_model), backend=backend, threads=2, **kw)
        node = encoder_node._build(cfg, mock.MagicMock())
        try:
            threads = getattr(node.encoder, "threads", 0)
            return node.lanes, len(node.scheduler.threads), node.scheduler.max_batch, threads
        finally:
            node.pipeline.close()

    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, set(sorted(mask)[:2]))  # two usable cores on any machine (this thread: Linux pid 0)
        assert built("onnxruntime", cams) == (2, 2, 2, 1)
        assert built("onnxruntime", (FRONT,)) == (1, 1, 8, 2)
        assert built("onnxruntime", cams, encode_lanes=1) == (1, 1, 8, 2)
        if openvino.usable()[0]:
            assert built("openvino", cams)[:3] == (1, 1, 8)
    finally:
        os.sched_setaffinity(0, mask)


class LanedEncoder(GatedEncoder):
    """An encoder that takes two calls at once (`lanes` 2, as ONNX Runtime with encode_lanes 2): its first two
    calls wait inside for each other, so they are in flight together or the test fails; the later ones pass."""

    lanes = 2

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.gate.set()
        self.meet = threading.Barrier(2, timeout=60)
        self.lock = threading.Lock()

    def encode(self, pixels):
        with self.lock:
            self.calls += 1
            first_two = self.calls <= 2
        if first_two:
            self.meet.wait()  # BrokenBarrierError: the node never had two batches in flight
        return self.inner.encode(pixels)


@pytest.mark.dds
def test_two_lanes_encode_at_once_and_each_cameras_features_keep_their_frames_order(tiny_model, dds_domain):
    """Four cameras into a node whose encoder takes two calls at once: two batches (of up to two cameras each)
    are in the encoder together, every camera's features come out in its frames' order, and every frame
    is counted encoded or dropped, with a feature for each one encoded."""
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, VISUAL_FEATURES, QoS

    cams = ["/a/image_raw", "/b/image_raw", "/c/image_raw", "/d/image_raw"]
    enc = LanedEncoder(OnnxRuntimeEncoder(tiny_model, threads=2, lanes=2))
    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("cameras")
    node = EncoderNode(EncoderConfig(image_topics=tuple(cams), reliability="reliable", diagnostics_period=5.0),
                       node_t, enc)  # fmt: skip
    assert (node.lanes, node.scheduler.max_batch, len(node.scheduler.threads)) == (2, 2, 2)
    inboxes = {c: Inbox() for c in cams}
    rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
    rounds = 12
    try:
        subs = [cam_t.subscribe(c.replace("image_raw", "visual_features"), VISUAL_FEATURES,
                                QoS("reliable", 50, "keep_all"), inboxes[c]) for c in cams]  # fmt: skip
        pubs = [cam_t.publisher(c, IMAGE, QoS("reliable", 10, "keep_all")) for c in cams]
        node.start()
        wait_until(lambda: node_matched(node, pubs, subs), 30, "the node's subscriptions")
        for k in range(1, rounds + 1):
            for i, p in enumerate(pubs):
                p.publish(_image(cam_t, k * 1000 + i, cams[i], rows, 48, 64, "rgb8"))
        st = node.stats
        wait_until(lambda: st()["received"] == 4 * rounds and st()["received"] == st()["encoded"] + st()["dropped"],
                   60, "every frame encoded or dropped")  # fmt: skip
        wait_until(lambda: sum(len(b.items) for b in inboxes.values()) == st()["encoded"], 30, "every feature")
    finally:
        node.stop()
        node_t.close()
        cam_t.close()
    assert enc.calls >= 2 and not enc.meet.broken
    for c in cams:
        stamps = [_stamp(f) for f in inboxes[c].items]
        assert stamps and stamps == sorted(stamps) and len(set(stamps)) == len(stamps), (c, stamps)
        assert stamps[-1] == rounds * 1000 + cams.index(c)  # the newest frame is never lost
