"""The encoder node as a real process, fed over real (loopback) DDS by the replay tool."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from openclaw_vision.encoders import create_encoder
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.ros.process import NodeProcess
from openclaw_vision.ros.replay import ReplayError, ReplayOptions, replay
from openclaw_vision.runtime import bags

pytestmark = pytest.mark.dds


@pytest.fixture()
def node(tiny_model, dds_domain, tmp_path):
    proc = NodeProcess(
        [
            "--model",
            "tiny",
            "--model-path",
            str(tiny_model),
            "--reliability",
            "reliable",
            "--depth",
            "5",
            "--diagnostics-period",
            "0.2",
            "--transport",
            "cyclonedds",
            "--threads",
            "1",
            "--stats-json",
            str(tmp_path / "node_stats.json"),
        ],
        log_path=tmp_path / "node.log",
    )
    yield proc
    proc.stop()


@pytest.fixture()
def transport(dds_domain):
    from openclaw_vision.ros.cyclone import CycloneTransport

    t = CycloneTransport("test_replay")
    yield t
    t.close()


def test_every_frame_gives_one_feature_with_its_header_and_the_in_process_embedding(
    node, transport, sample_bag, tiny_model, tmp_path
):
    out = tmp_path / "features"
    summary = replay(ReplayOptions(bag=sample_bag, out=out, lockstep=True, restamp=False), transport)
    assert summary["node"] == {"received": 12, "encoded": 12, "dropped": 0, "rejected": 0, "failed": 0, "lost": 0}
    assert summary["sent"] == summary["features_received"] == 12 and summary["duplicates"] == 0
    assert summary["accounted"] and summary["model"] == "tiny@random-seed0"
    assert summary["backend"] == create_encoder("auto", tiny_model).backend  # openvino on x86 where installed

    images = [bags.deserialize(m.raw, bags.IMAGE_TYPE) for m in bags.read_messages(sample_bag)]
    features = [bags.deserialize(m.raw, bags.FEATURES_TYPE) for m in bags.read_messages(out, bags.FEATURES_TYPE)]
    by_stamp = {(f.header.stamp.sec, f.header.stamp.nanosec): f for f in features}
    assert len(by_stamp) == len(images) == 12
    enc, pre = OnnxRuntimeEncoder(tiny_model, threads=1), CpuPreprocessor()
    for img in images:
        feat = by_stamp[(img.header.stamp.sec, img.header.stamp.nanosec)]
        assert feat.header.frame_id == img.header.frame_id
        assert (feat.model_id, feat.dim, len(feat.embedding)) == ("tiny@random-seed0", 32, 32)
        frame = Frame.from_buffer(img.data, img.height, img.width, img.step, img.encoding)
        expected = enc.encode(pre(frame)[None]).vectors[0]
        assert float(np.dot(expected, feat.embedding)) / float(np.linalg.norm(feat.embedding)) >= 0.9999
    meta = (out / "metadata.yaml").read_text()
    assert "version: 8" in meta


def _flood_bag(path, good: int, bad_every: int) -> tuple[int, int]:
    """Small frames (fast to send, slower to encode) with an invalid image every `bad_every`."""
    rng = np.random.default_rng(0)
    n_bad = 0
    with bags.BagWriter(path, "mcap") as bag:
        stamp = 1_000_000_000
        for i in range(good):
            stamp += 1_000_000
            img = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
            bag.write("/camera/image_raw", bags.IMAGE_TYPE, stamp, bags.serialize_image(img, "rgb8", stamp))
            if i % bad_every == bad_every - 1:
                stamp += 1_000_000
                broken = bags.serialize_image(img, "rgb8", stamp, step=10)  # step < width * 3
                bag.write("/camera/image_raw", bags.IMAGE_TYPE, stamp, broken)
                n_bad += 1
        stamp += 1_000_000
        bag.write("/camera/image_raw", bags.IMAGE_TYPE, stamp, bags.serialize_image(img, "rgb8", stamp))
    return good + 1, n_bad


def test_a_flood_keeps_the_newest_frame_counts_every_frame_and_survives_bad_input(node, transport, tmp_path):
    good, bad = _flood_bag(tmp_path / "flood", good=300, bad_every=50)
    out = tmp_path / "flood_features"
    summary = replay(ReplayOptions(bag=tmp_path / "flood", out=out, rate=0.0, restamp=False), transport)
    counts = summary["node"]
    assert summary["sent"] == counts["received"] == good + bad
    assert counts["rejected"] == bad and counts["failed"] == 0
    assert counts["encoded"] + counts["dropped"] + counts["rejected"] == counts["received"]
    assert counts["dropped"] > 0  # a flood is thinned, never queued
    assert summary["features_received"] == counts["encoded"] and summary["accounted"]
    # the newest frame is always encoded: the last one sent has its features; order is kept
    last = max(m.timestamp_ns for m in bags.read_messages(tmp_path / "flood"))
    feats = [bags.deserialize(m.raw, bags.FEATURES_TYPE) for m in bags.read_messages(out)]
    stamps = [f.header.stamp.sec * 1_000_000_000 + f.header.stamp.nanosec for f in feats]
    assert stamps[-1] == last
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert node.alive()
    assert "rejected image on /camera/image_raw: step 10 < width*3" in node.log_text()

    # the node keeps serving after bad input: a paced replay afterwards is complete
    follow = replay(ReplayOptions(bag=tmp_path / "flood", lockstep=True, limit=3), transport)
    assert follow["node"]["received"] == follow["node"]["encoded"] == follow["features_received"] == 3
    node.stop()
    stats = json.loads((tmp_path / "node_stats.json").read_text())
    assert stats["received"] == good + bad + 3 and stats["rejected"] == bad
    assert stats["encoded"] + stats["dropped"] + stats["rejected"] + stats["failed"] == stats["received"]


def test_replay_without_a_node_fails_clearly(transport, sample_bag):
    with pytest.raises(ReplayError, match="no encoder node found within 1 s"):
        replay(ReplayOptions(bag=sample_bag, discovery_timeout=1.0), transport)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "cuda"], "configuration error: parameter backend='cuda'"),
        (
            ["--model-path", "/nonexistent/m.onnx", "--transport", "cyclonedds"],
            "model file not found: /nonexistent/m.onnx",
        ),
    ],
)
def test_node_refuses_bad_configuration_with_a_message(args, message, dds_domain):
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "encoder", *args], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    assert message in res.stdout + res.stderr
