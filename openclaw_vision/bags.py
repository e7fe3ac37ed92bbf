"""rosbag2 reading and writing through the `rosbags` library, plus the sample bag.

Bags are always written as version 8: Humble reads 6–8 and cannot parse version 9's
metadata. Messages are moved as raw CDR bytes; the typestore is Humble's plus our own
VisualFeatures, parsed from msg/VisualFeatures.msg (the one definition of the wire type).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .resources import share_path

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_TYPES = (IMAGE_TYPE, COMPRESSED_IMAGE_TYPE)
FEATURES_TYPE = "openclaw_vision/msg/VisualFeatures"
BAG_VERSION = 8
STORAGES = ("mcap", "sqlite3")


@lru_cache(maxsize=1)
def typestore():
    """Humble's message types plus ours (openclaw_vision/msg/*), parsed from their .msg files."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    for path in sorted(share_path("msg").glob("*.msg")):
        store.register(get_types_from_msg(path.read_text(), f"openclaw_vision/msg/{path.stem}"))
    return store


@dataclass
class BagMessage:
    topic: str
    msgtype: str
    timestamp_ns: int
    raw: bytes


def read_messages(path: Path, msgtype: str | None = None, topic: str | None = None) -> Iterator[BagMessage]:
    """Raw CDR messages in time order, optionally only one type or topic.

    `path` is a rosbag2 directory (metadata.yaml + mcap or sqlite3 files) or a single .mcap /
    .db3 file as other tools write them (rosbags' Reader opens both).
    """
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        conns = [
            c
            for c in reader.connections
            if (msgtype is None or c.msgtype == msgtype) and (topic is None or c.topic == topic)
        ]
        if not conns:
            have = ", ".join(f"{c.topic} [{c.msgtype}]" for c in reader.connections) or "nothing"
            raise ValueError(f"{path}: no {topic or msgtype or 'messages'} in this bag (it has {have})")
        for conn, ts, raw in reader.messages(connections=conns):
            yield BagMessage(conn.topic, conn.msgtype, ts, bytes(raw))


def image_topics(path: Path) -> list[str]:
    """The bag's sensor_msgs/Image topics."""
    return [t for t, kind in camera_topics(path).items() if kind == IMAGE_TYPE]


def camera_topics(path: Path) -> dict[str, str]:
    """topic → message type for every Image and CompressedImage topic in the bag, sorted by topic."""
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        return dict(sorted({c.topic: c.msgtype for c in reader.connections if c.msgtype in CAMERA_TYPES}.items()))


def iter_frames(path: Path, topic: str | None = None, limit: int = 0, every: int = 1) -> Iterator:
    """The frames of one camera topic of a bag, one at a time (bags are long): `Frame`s from a
    sensor_msgs/Image topic, `CompressedFrame`s (checked, decoded later: `FramePipeline` does it)
    from a CompressedImage topic. `topic` defaults to the bag's first camera topic; `every` takes
    every k-th message, `limit` stops after that many frames. A message that is not a valid image
    raises FrameError naming the bag and the message's position."""
    from .preprocess.compressed import CompressedFrame
    from .preprocess.encodings import FrameError
    from .preprocess.frame import Frame

    cameras = camera_topics(path)
    if not cameras or (topic and topic not in cameras):
        have = ", ".join(cameras) or "none"
        raise ValueError(f"{path}: no camera topic {topic or ''} (Image or CompressedImage); it has {have}")
    topic = topic or next(iter(cameras))
    kind = cameras[topic]
    wrap = CompressedFrame.from_message if kind == COMPRESSED_IMAGE_TYPE else Frame.from_message
    taken = 0
    for i, msg in enumerate(read_messages(path, kind, topic)):
        if i % every:
            continue
        if limit and taken >= limit:
            return
        try:
            yield wrap(deserialize(msg.raw, kind))
        except FrameError as err:
            raise FrameError(f"{path}: {topic} message {i}: {err}") from err
        taken += 1


class BagWriter:
    """Write raw CDR messages to a version-8 rosbag2 (mcap or sqlite3)."""

    def __init__(self, path: Path, storage: str = "mcap") -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(Path(path), version=BAG_VERSION, storage_plugin=plugin)
        self._conns: dict[str, object] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(self, *exc) -> None:
        self._writer.close()

    def write(self, topic: str, msgtype: str, timestamp_ns: int, raw: bytes) -> None:
        if topic not in self._conns:
            self._conns[topic] = self._writer.add_connection(
                topic, msgtype, typestore=typestore(), serialization_format="cdr", offered_qos_profiles=""
            )
        self._writer.write(self._conns[topic], timestamp_ns, raw)


def _header(stamp_ns: int, frame_id: str):
    store = typestore()
    Header, Time = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    return Header(stamp=Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000), frame_id=frame_id)


def serialize_image(
    rgb_or_raw: np.ndarray,
    encoding: str,
    stamp_ns: int,
    frame_id: str = "camera",
    step: int | None = None,
    is_bigendian: int = 0,
) -> bytes:
    """CDR bytes of a sensor_msgs/Image holding `rgb_or_raw` (rows, W, C) as `encoding`.

    rows is the image height, or height × 3/2 for nv12/nv21 (their chroma rows follow).
    """
    from .preprocess.encodings import ENCODINGS

    store = typestore()
    rows, w = rgb_or_raw.shape[:2]
    enc = ENCODINGS.get(encoding)
    h = rows * 2 // 3 if enc is not None and enc.planar420 else rows
    data = np.ascontiguousarray(rgb_or_raw, dtype=np.uint8).reshape(-1)
    msg = store.types[IMAGE_TYPE](
        header=_header(stamp_ns, frame_id),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=is_bigendian,
        step=data.size // rows if step is None else step,
        data=data,
    )
    return bytes(store.serialize_cdr(msg, IMAGE_TYPE))


def serialize_compressed_image(data: bytes, fmt: str, stamp_ns: int, frame_id: str = "camera") -> bytes:
    """CDR bytes of a sensor_msgs/CompressedImage."""
    store = typestore()
    msg = store.types[COMPRESSED_IMAGE_TYPE](
        header=_header(stamp_ns, frame_id), format=fmt, data=np.frombuffer(data, np.uint8)
    )
    return bytes(store.serialize_cdr(msg, COMPRESSED_IMAGE_TYPE))


def deserialize(raw: bytes, msgtype: str):
    return typestore().deserialize_cdr(raw, msgtype)


def write_sample_bag(
    path: Path,
    frames: int = 90,
    fps: float = 30.0,
    width: int = 1920,
    height: int = 1080,
    encoding: str = "rgb8",
    topic: str = "/camera/image_raw",
    storage: str = "mcap",
    start_ns: int = 1_700_000_000_000_000_000,
    compressed: str = "",
) -> int:
    """Write `frames` panning camera frames at `fps`; returns the count.

    As sensor_msgs/Image on `topic`, or with `compressed` = jpeg | png as sensor_msgs/CompressedImage
    on `<topic>/compressed` with compressed_image_transport's format strings.
    """
    from .sample_frames import compress_rgb, convert_rgb, pan_frames

    period = round(1e9 / fps)
    n = 0
    with BagWriter(path, storage) as bag:
        for i, rgb in enumerate(pan_frames(frames, width, height)):
            stamp = start_ns + i * period
            if compressed:
                fmt, data = compress_rgb(np.ascontiguousarray(rgb), encoding, compressed)
                raw = serialize_compressed_image(data, fmt, stamp)
                bag.write(topic.rstrip("/") + "/compressed", COMPRESSED_IMAGE_TYPE, stamp, raw)
            else:
                bag.write(topic, IMAGE_TYPE, stamp, serialize_image(convert_rgb(rgb, encoding), encoding, stamp))
            n += 1
    return n
