"""A robot's compressed camera bag, written by tools that are not ours, through the real node over DDS.

The bag is a bare .mcap file written with `mcap_ros2.writer` (its own CDR serializer and MCAP
writer, from the message definitions below) holding sensor_msgs/CompressedImage topics at
1080p and 720p, JPEG and PNG, the images encoded by Pillow, with compressed_image_transport's
format string. The node runs with `image_transport: compressed` and so reads
`/camera/image_raw/compressed`; the replay plays each bag topic there as recorded.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from openclaw_vision.ros.process import NodeProcess
from openclaw_vision.ros.replay import ReplayOptions, replay

pytestmark = pytest.mark.dds

# sensor_msgs/msg/CompressedImage and its dependencies, in the ROS 2 MCAP schema layout
COMPRESSED_IMAGE_DEF = """std_msgs/Header header
string format
uint8[] data
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""

FRAMES = 4
TOPICS = {  # bag topic → (height, width, Pillow format)
    "/cam_1080_jpeg/image_raw/compressed": (1080, 1920, "JPEG"),
    "/cam_1080_png/image_raw/compressed": (1080, 1920, "PNG"),
    "/cam_720_jpeg/image_raw/compressed": (720, 1280, "JPEG"),
    "/cam_720_png/image_raw/compressed": (720, 1280, "PNG"),
}
BAD_TOPIC = "/cam_bad/image_raw/compressed"
START = 1_700_000_100_000_000_000


def _encoded(rgb: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, fmt, **({"quality": 90} if fmt == "JPEG" else {"compress_level": 1}))
    return out.getvalue()


@pytest.fixture(scope="module")
def camera_bag(tmp_path_factory):
    """(bag file, {topic: [(stamp ns, rgb)]}) — written by mcap_ros2, not by openclaw_vision.runtime.bags."""
    from mcap_ros2.writer import Writer

    from openclaw_vision.preprocess.sample_frames import pan_frames

    path = tmp_path_factory.mktemp("robot") / "cameras.mcap"
    frames: dict[str, list] = {}
    with open(path, "wb") as fh:
        writer = Writer(fh)
        schema = writer.register_msgdef("sensor_msgs/msg/CompressedImage", COMPRESSED_IMAGE_DEF)
        for t, (topic, (h, w, fmt)) in enumerate(TOPICS.items()):
            frames[topic] = []
            for i, rgb in enumerate(pan_frames(FRAMES, w, h)):
                rgb = np.ascontiguousarray(rgb)
                stamp = START + t * 1_000_000_000 + i * 33_333_333
                msg = {
                    "header": {"stamp": {"sec": stamp // 10**9, "nanosec": stamp % 10**9}, "frame_id": "cam"},
                    "format": f"rgb8; {fmt.lower()} compressed bgr8",
                    "data": _encoded(rgb, fmt),
                }
                writer.write_message(topic, schema, msg, log_time=stamp, publish_time=stamp)
                frames[topic].append((stamp, rgb))
        good = _encoded(np.zeros((64, 64, 3), np.uint8), "JPEG")
        for i, data in enumerate([good, good[: len(good) // 2], good, b"\xff\xd8\xff" + bytes(100)]):
            stamp = START + 9_000_000_000 + i * 33_333_333
            msg = {
                "header": {"stamp": {"sec": stamp // 10**9, "nanosec": stamp % 10**9}, "frame_id": "cam"},
                "format": "rgb8; jpeg compressed bgr8",
                "data": data,
            }
            writer.write_message(BAD_TOPIC, schema, msg, log_time=stamp, publish_time=stamp)
        writer.finish()
    return path, frames


@pytest.fixture()
def compressed_node(tiny_model, dds_domain, tmp_path):
    args = ["--model", "tiny", "--model-path", str(tiny_model), "--reliability", "reliable", "--depth", "5",
            "--diagnostics-period", "0.2", "--transport", "cyclonedds", "--threads", "1",
            "--image-topic", "/camera/image_raw", "--image-transport", "compressed"]  # fmt: skip
    proc = NodeProcess(args, log_path=tmp_path / "node.log")
    yield proc
    proc.stop()


@pytest.fixture()
def transport(dds_domain):
    from openclaw_vision.ros.cyclone import CycloneTransport

    t = CycloneTransport("test_compressed_replay")
    yield t
    t.close()


def test_a_foreign_compressed_bag_replays_with_every_frame_encoded_or_dropped(
    compressed_node, transport, camera_bag, tiny_model, tmp_path
):
    bag, frames = camera_bag
    for topic in TOPICS:  # at the bag's own rate: frames the encoder cannot keep up with are dropped
        s = replay(ReplayOptions(bag=bag, bag_topic=topic, image_topic="/camera/image_raw/compressed"), transport)
        n = s["node"]
        assert s["image_type"] == "sensor_msgs/msg/CompressedImage", s
        assert s["sent"] == n["received"] == FRAMES, (topic, s)
        assert n["rejected"] == 0 and n["failed"] == 0, (topic, n, compressed_node.log_text()[-2000:])
        assert n["encoded"] + n["dropped"] == n["received"] and n["encoded"] >= 1, (topic, n)
        assert s["features_received"] == n["encoded"] and s["accounted"], (topic, s)
        assert s["stages_ms"]["decode"]["p50"] > 0  # the worker decoded what it encoded

    # lockstep, the bag's stamps kept: every frame has features, with its stamp, and the embedding of its pixels
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
    from openclaw_vision.preprocess.cpu import CpuPreprocessor
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.runtime import bags

    topic = "/cam_720_png/image_raw/compressed"
    out = tmp_path / "features"
    s = replay(
        ReplayOptions(
            bag=bag, bag_topic=topic, image_topic="/camera/image_raw/compressed", lockstep=True, restamp=False, out=out
        ),
        transport,
    )
    assert s["node"]["encoded"] == s["features_received"] == FRAMES and s["kept_stamps"]
    feats = {
        f.header.stamp.sec * 10**9 + f.header.stamp.nanosec: f
        for f in (bags.deserialize(m.raw, bags.FEATURES_TYPE) for m in bags.read_messages(out))
    }
    assert sorted(feats) == [stamp for stamp, _ in frames[topic]]
    enc, pre = OnnxRuntimeEncoder(tiny_model, threads=1), CpuPreprocessor()
    for stamp, rgb in frames[topic]:
        expected = enc.encode(pre(Frame.from_rgb(rgb))[None]).vectors[0]  # PNG is lossless: the same pixels
        got = np.asarray(feats[stamp].embedding)
        assert float(np.dot(expected, got) / np.linalg.norm(got)) >= 0.9999

    # corrupt JPEGs (truncated; no EOI) among good ones: rejected, counted, logged; the node keeps going
    s = replay(ReplayOptions(bag=bag, bag_topic=BAD_TOPIC, image_topic="/camera/image_raw/compressed",
                             lockstep=True, lockstep_timeout=3.0), transport)  # fmt: skip
    n = s["node"]
    assert (n["received"], n["encoded"], n["rejected"], n["failed"]) == (4, 2, 2, 0) and s["accounted"], s
    assert "rejected image on /camera/image_raw/compressed: corrupt jpeg" in compressed_node.log_text()
    assert compressed_node.alive()
