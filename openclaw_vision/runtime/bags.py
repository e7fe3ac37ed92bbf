"""rosbag2 reading and writing through the `rosbags` library, plus the sample bag.

Bags are always written as version 8: Humble reads 6–8 and cannot parse version 9's
metadata. Messages are moved as raw CDR bytes; the typestore is Humble's plus our own
VisualFeatures, parsed from msg/VisualFeatures.msg (the one definition of the wire type).

A bag is a rosbag2 folder (metadata.yaml + mcap or sqlite3 files) or a single .mcap / .db3 file as
other tools write them. Which camera of a bag a tool reads is decided once, by `camera_source`:
replay, label, ask, quantize's calibration reader and the benches all go through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.errors import OpenclawError
from ..core.resources import share_path

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_TYPES = (IMAGE_TYPE, COMPRESSED_IMAGE_TYPE)
FEATURES_TYPE = "openclaw_vision/msg/VisualFeatures"
BAG_VERSION = 8
STORAGES = ("mcap", "sqlite3")
BAG_FILE_SUFFIXES = (".mcap", ".db3")
#: image_transport's `compressed` plugin publishes CompressedImage on `<image topic>/compressed`
COMPRESSED_SUFFIX = "/compressed"


class BagError(OpenclawError, ValueError):
    """Not a bag, or a bag without what was asked of it; the message names what the bag has."""


@lru_cache(maxsize=1)
def typestore():
    """Humble's message types plus ours (openclaw_vision/msg/*), parsed from their .msg files, and our
    services' two halves (srv/*.srv) as `openclaw_vision/srv/NAME_Request` and `NAME_Response`, the
    names rosidl gives them (their DDS types: `openclaw_vision::srv::dds_::NAME_Request_`)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    for path in sorted(share_path("msg").glob("*.msg")):
        store.register(get_types_from_msg(path.read_text(), f"openclaw_vision/msg/{path.stem}"))
    for path in sorted(share_path("srv").glob("*.srv")):
        for half, text in zip(SERVICE_HALVES, split_srv(path.read_text()), strict=True):
            # rosbags names every parsed type pkg/msg/NAME; the type is the same under its srv name
            [fielddefs] = get_types_from_msg(text, f"openclaw_vision/msg/{path.stem}_{half}").values()
            store.register({f"openclaw_vision/srv/{path.stem}_{half}": fielddefs})
    return store


#: the two messages of a service, in the order a .srv file holds them
SERVICE_HALVES = ("Request", "Response")


def split_srv(text: str) -> tuple[str, str]:
    """A .srv file's request and response definitions (rosidl: split at the one line `---`)."""
    parts = re.split(r"^---[ \t]*$", text, flags=re.M)
    if len(parts) != 2:
        raise ValueError(f"a .srv file has one '---' line between request and response, found {len(parts) - 1}")
    return parts[0], parts[1]


@dataclass
class BagMessage:
    topic: str
    msgtype: str
    timestamp_ns: int
    raw: bytes


def is_bag(path: Path) -> bool:
    """A rosbag2 folder (its metadata.yaml) or a single .mcap / .db3 file."""
    path = Path(path)
    return (path / "metadata.yaml").is_file() or (path.is_file() and path.suffix in BAG_FILE_SUFFIXES)


@contextmanager
def _reader(path: Path) -> Iterator:
    """rosbags' Reader on a bag; what is not one, or not readable as one, is a BagError."""
    from rosbags.rosbag2 import Reader, ReaderError

    if not is_bag(path):
        raise BagError(f"{path}: not a rosbag2 folder (with metadata.yaml) nor a .mcap or .db3 file")
    try:
        with Reader(Path(path)) as reader:
            yield reader
    except ReaderError as err:
        raise BagError(f"{path}: not readable as a rosbag2 bag: {err}") from err


def _listing(connections) -> str:
    return ", ".join(sorted({f"{c.topic} [{c.msgtype}]" for c in connections})) or "nothing"


def read_messages(path: Path, msgtype: str | None = None, topic: str | None = None) -> Iterator[BagMessage]:
    """Raw CDR messages of a bag (folder or file) in time order, optionally only one type or topic."""
    with _reader(path) as reader:
        conns = [
            c
            for c in reader.connections
            if (msgtype is None or c.msgtype == msgtype) and (topic is None or c.topic == topic)
        ]
        if not conns:
            raise BagError(
                f"{path}: no {topic or msgtype or 'messages'} in this bag (it has {_listing(reader.connections)})"
            )
        for conn, ts, raw in reader.messages(connections=conns):
            yield BagMessage(conn.topic, conn.msgtype, ts, bytes(raw))


@dataclass(frozen=True)
class CameraSource:
    """One camera topic of a bag: what to read, and how many messages it holds."""

    path: Path
    topic: str
    msgtype: str  # IMAGE_TYPE or COMPRESSED_IMAGE_TYPE
    messages: int


def camera_source(path: Path, topic: str | None = None) -> CameraSource:
    """The camera topic a tool reads from a bag: `topic` when given (an Image or CompressedImage topic of
    the bag), else the bag's one camera. A camera is an Image topic and its image_transport twin
    `<topic>/compressed`; of one camera recorded both ways the raw Image topic is read. Two cameras and
    no `topic`, or none at all, is a BagError naming the topics the bag has."""
    with _reader(path) as reader:
        conns = list(reader.connections)
    cameras: dict[str, str] = {}
    counts: dict[str, int] = {}
    for c in conns:
        if c.msgtype in CAMERA_TYPES:
            cameras[c.topic] = c.msgtype
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
    have = ", ".join(f"{t} [{k}]" for t, k in sorted(cameras.items()))
    if topic is None:
        if not cameras:
            raise BagError(f"{path}: no {IMAGE_TYPE} or {COMPRESSED_IMAGE_TYPE} topic (it has {_listing(conns)})")
        named = {t.removesuffix(COMPRESSED_SUFFIX) if k == COMPRESSED_IMAGE_TYPE else t for t, k in cameras.items()}
        if len(named) > 1:
            raise BagError(f"{path}: {len(named)} cameras ({have}): name the topic to read")
        topic = min(cameras, key=lambda t: (cameras[t] != IMAGE_TYPE, t))  # one camera: raw before compressed
    elif topic not in cameras:
        raise BagError(f"{path}: no image topic {topic!r} (its Image and CompressedImage topics: {have or 'none'})")
    return CameraSource(Path(path), topic, cameras[topic], counts[topic])


def iter_frames(path: Path, topic: str | None = None, limit: int = 0, every: int = 1) -> Iterator:
    """The frames of a bag's camera (`camera_source`), one at a time (bags are long): `Frame`s from a
    sensor_msgs/Image topic, `CompressedFrame`s (checked, decoded later: `FramePipeline` does it) from a
    CompressedImage topic. `every` takes every k-th message, `limit` stops after that many frames. The
    bag and topic are checked before the first frame (a BagError); a message that is not a valid image
    raises FrameError naming the bag and the message's position."""
    source = camera_source(path, topic)
    return _frames(source, limit, every)


def _frames(source: CameraSource, limit: int, every: int) -> Iterator:
    from ..preprocess.compressed import CompressedFrame
    from ..preprocess.encodings import FrameError
    from ..preprocess.frame import Frame

    wrap = CompressedFrame.from_message if source.msgtype == COMPRESSED_IMAGE_TYPE else Frame.from_message
    taken = 0
    for i, msg in enumerate(read_messages(source.path, source.msgtype, source.topic)):
        if i % every:
            continue
        if limit and taken >= limit:
            return
        try:
            yield wrap(deserialize(msg.raw, source.msgtype))
        except FrameError as err:
            raise FrameError(f"{source.path}: {source.topic} message {i}: {err}") from err
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
    from ..preprocess.encodings import ENCODINGS

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
    from ..preprocess.sample_frames import compress_rgb, convert_rgb, pan_frames

    period = round(1e9 / fps)
    n = 0
    with BagWriter(path, storage) as bag:
        for i, rgb in enumerate(pan_frames(frames, width, height)):
            stamp = start_ns + i * period
            if compressed:
                fmt, data = compress_rgb(np.ascontiguousarray(rgb), encoding, compressed)
                raw = serialize_compressed_image(data, fmt, stamp)
                bag.write(topic.rstrip("/") + COMPRESSED_SUFFIX, COMPRESSED_IMAGE_TYPE, stamp, raw)
            else:
                bag.write(topic, IMAGE_TYPE, stamp, serialize_image(convert_rgb(rgb, encoding), encoding, stamp))
            n += 1
    return n
