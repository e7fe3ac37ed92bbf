"""rosbag2 files that Humble can read: version 8, both storages, our message type registered."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from openclaw_vision.runtime import bags


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
    src = bags.camera_source(path)
    assert (src.topic, src.msgtype, src.messages) == ("/camera/image_raw/compressed", bags.COMPRESSED_IMAGE_TYPE, 2)
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


def _bag(path, topics: dict[str, str], frames: int = 2):
    """A bag with `frames` tiny images on each topic (Image, or CompressedImage as a PNG)."""
    from openclaw_vision.preprocess.sample_frames import compress_rgb

    rgb = np.zeros((8, 8, 3), np.uint8)
    with bags.BagWriter(path, "mcap") as bag:
        for i in range(frames):
            for topic, kind in topics.items():
                if kind == bags.IMAGE_TYPE:
                    raw = bags.serialize_image(rgb, "rgb8", 1_000 + i)
                else:
                    raw = bags.serialize_compressed_image(compress_rgb(rgb, "rgb8", "png")[1], "rgb8; png compressed ",
                                                          1_000 + i)  # fmt: skip
                bag.write(topic, kind, 1_000 + i, raw)
    return path


RAW, PNG = bags.IMAGE_TYPE, bags.COMPRESSED_IMAGE_TYPE


def test_one_rule_for_the_camera_of_a_bag(tmp_path):
    """Named, or the bag's one camera (raw before its /compressed twin); else an error naming the topics."""
    one = _bag(
        tmp_path / "one", {"/front/image_raw": RAW, "/front/image_raw/compressed": PNG, "/odom": "std_msgs/msg/String"}
    )
    assert bags.camera_source(one).topic == "/front/image_raw"  # one camera recorded both ways: the raw one
    assert bags.camera_source(one, "/front/image_raw/compressed").msgtype == PNG
    listed = r"/front/image_raw \[sensor_msgs/msg/Image\], /front/image_raw/compressed"
    with pytest.raises(
        bags.BagError, match=rf"no image topic '/odom' \(its Image and CompressedImage topics: {listed}"
    ):
        bags.camera_source(one, "/odom")
    two = _bag(tmp_path / "two", {"/front/image_raw": RAW, "/rear/image_raw/compressed": PNG})
    with pytest.raises(
        bags.BagError, match=r"2 cameras \(/front/image_raw \[.*\], /rear/image_raw/compressed .*name the"
    ):
        bags.camera_source(two)
    assert [f.__class__.__name__ for f in bags.iter_frames(two, "/rear/image_raw/compressed")] == [
        "CompressedFrame"
    ] * 2
    none = _bag(tmp_path / "none", {"/chatter": "std_msgs/msg/String"})
    with pytest.raises(bags.BagError, match=r"no sensor_msgs/msg/Image or sensor_msgs/msg/CompressedImage topic "
                                            r"\(it has /chatter \[std_msgs/msg/String\]\)"):  # fmt: skip
        bags.iter_frames(none)  # checked at the call, before the first frame


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_single_bag_file_is_a_bag(tmp_path, storage):
    """A .mcap or .db3 file on its own (as other tools write them) reads as its folder does."""
    bags.write_sample_bag(tmp_path / "b", frames=3, width=32, height=24, storage=storage)
    [file] = [f for f in (tmp_path / "b").iterdir() if f.suffix in bags.BAG_FILE_SUFFIXES]
    alone = tmp_path / f"alone{file.suffix}"
    file.rename(alone)
    assert bags.is_bag(alone) and bags.camera_source(alone).messages == 3
    assert [f.pixels.shape for f in bags.iter_frames(alone)] == [(24, 32, 3)] * 3
    with pytest.raises(bags.BagError, match="not readable as a rosbag2 bag: Some database files are missing"):
        bags.camera_source(tmp_path / "b")  # its metadata.yaml names the file moved away
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("no")
    for not_a_bag in (tmp_path / "empty", tmp_path / "notes.txt"):
        with pytest.raises(bags.BagError, match="not a rosbag2 folder"):
            bags.camera_source(not_a_bag)
    broken = tmp_path / f"broken{file.suffix}"
    broken.write_bytes(b"not a bag at all" * 8)
    with pytest.raises(bags.BagError, match="not readable as a rosbag2 bag"):
        list(bags.read_messages(broken))


def test_replay_keep_stamps_flag():
    from openclaw_vision.cli import build_parser
    from openclaw_vision.tools.bag import replay_options

    parse = build_parser().parse_args
    assert replay_options(parse(["replay", "b"])).restamp is True
    assert replay_options(parse(["replay", "b", "--keep-stamps"])).restamp is False
