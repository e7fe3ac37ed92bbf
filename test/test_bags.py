"""rosbag2 files that Humble can read: version 8, both storages, our message type registered."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from openclaw_vision import bags


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_sample_bag_is_version8_1080p_panning_frames(tmp_path, storage):
    path = tmp_path / "b"
    n = bags.write_sample_bag(path, frames=4, fps=30, storage=storage, encoding="bgr8")
    meta = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8
    assert meta["storage_identifier"] == storage
    msgs = list(bags.read_messages(path, bags.IMAGE_TYPE))
    assert n == len(msgs) == 4
    assert [m.timestamp_ns - msgs[0].timestamp_ns for m in msgs] == [0, 33333333, 66666666, 99999999]
    imgs = [bags.deserialize(m.raw, bags.IMAGE_TYPE) for m in msgs]
    assert {(i.width, i.height, i.encoding, i.step) for i in imgs} == {(1920, 1080, "bgr8", 5760)}
    # the camera pans: consecutive frames differ, and they are not blank
    a, b = (np.asarray(i.data).reshape(1080, 1920, 3).astype(int) for i in imgs[:2])
    assert np.abs(a - b).mean() > 1.0 and a.std() > 20


def test_features_type_comes_from_the_msg_file():
    store = bags.typestore()
    _consts, fields = store.fielddefs[bags.FEATURES_TYPE]
    assert [name for name, _ in fields] == ["header", "model_id", "dim", "embedding"]
    text, _md5 = store.generate_msgdef(bags.FEATURES_TYPE)
    assert text.startswith("std_msgs/Header header\nstring model_id\nuint32 dim\nfloat32[] embedding")


def test_reading_a_missing_topic_says_what_the_bag_has(tmp_path):
    bags.write_sample_bag(tmp_path / "b", frames=1, width=64, height=48)
    with pytest.raises(ValueError, match=r"it has /camera/image_raw \[sensor_msgs/msg/Image\]"):
        list(bags.read_messages(tmp_path / "b", topic="/nope"))


@pytest.mark.parametrize(
    ("codec", "encoding", "fmt"),
    [("jpeg", "rgb8", "rgb8; jpeg compressed bgr8"), ("png", "mono8", "mono8; png compressed "),
     ("jpeg", "mono8", "mono8; jpeg compressed mono8")],
)  # fmt: skip
def test_sample_bag_compressed_is_image_transports_compressed_topic(tmp_path, codec, encoding, fmt):
    from openclaw_vision.preprocess.compressed import decode_compressed

    path = tmp_path / "c"
    assert bags.write_sample_bag(path, frames=2, width=320, height=240, encoding=encoding, compressed=codec) == 2
    assert bags.camera_topics(path) == {"/camera/image_raw/compressed": bags.COMPRESSED_IMAGE_TYPE}
    assert bags.image_topics(path) == []
    msgs = [bags.deserialize(m.raw, bags.COMPRESSED_IMAGE_TYPE) for m in bags.read_messages(path)]
    assert {m.format for m in msgs} == {fmt}  # compressed_image_transport's format strings
    frame = decode_compressed(np.asarray(msgs[0].data), msgs[0].format)
    assert (frame.width, frame.height) == (320, 240)


@pytest.mark.parametrize("encoding", ["nv12", "bayer_grbg8", "mono16"])
def test_sample_bag_in_camera_encodings(tmp_path, encoding):
    from openclaw_vision.preprocess.frame import Frame

    bags.write_sample_bag(tmp_path / "e", frames=1, width=64, height=48, encoding=encoding)
    img = bags.deserialize(next(bags.read_messages(tmp_path / "e")).raw, bags.IMAGE_TYPE)
    assert (img.width, img.height, img.encoding) == (64, 48, encoding)
    assert len(img.data) == img.step * (72 if encoding == "nv12" else 48)
    assert Frame.from_buffer(img.data, img.height, img.width, img.step, img.encoding).to_rgb().shape == (48, 64, 3)


def test_replay_keep_stamps_flag():
    from openclaw_vision.bag_commands import replay_options
    from openclaw_vision.cli import build_parser

    parse = build_parser().parse_args
    assert replay_options(parse(["replay", "b"])).restamp is True
    assert replay_options(parse(["replay", "b", "--keep-stamps"])).restamp is False
