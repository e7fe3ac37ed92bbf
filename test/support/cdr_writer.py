"""sensor_msgs/Image and CompressedImage written as XCDR1 bytes by hand, for tests and their children.

The package only reads images this way (openclaw_vision/ros/cdr.py: a struct reader whose `data` is a
view of the received sample) and rewrites a header's stamp in place; it never builds an image sample
itself (the bag tools serialize with rosbags). Tests need samples whose every byte they choose: the
reader's checks against rosbags' codec, samples published raw on a topic, a 1080p frame without a
per-element pass. This writer makes them: the few fixed fields packed with `struct`, the pixel buffer
appended, one `bytes.join`. Layout: ros/cdr.py's module doc.

Importable as `support.cdr_writer` from the suite, and as `cdr_writer` by a child script run from this
folder (its own folder is first on sys.path: test/support/rclpy_callback_fault.py, run by the robot
venv's python3). It imports only struct and ros/cdr's encapsulation constant, which the colcon-built
package a Humble child sees has as well.
"""

from __future__ import annotations

import struct
from typing import Any

from openclaw_vision.ros.cdr import CDR_LE


class Writer:
    """Little-endian XCDR1 fields into a list of parts; the payload is appended, not copied, until join."""

    def __init__(self) -> None:
        self.parts: list[Any] = [CDR_LE + b"\x00\x00"]
        self.off = 0  # bytes written after the encapsulation header

    def _put(self, b) -> None:
        self.parts.append(b)
        self.off += len(b)

    def align(self, n: int) -> None:
        pad = -self.off % n
        if pad:
            self._put(b"\x00" * pad)

    def u32(self, v: int) -> None:
        self.align(4)
        self._put(struct.pack("<I", v))

    def i32(self, v: int) -> None:
        self.align(4)
        self._put(struct.pack("<i", v))

    def u8(self, v: int) -> None:
        self._put(struct.pack("<B", v))

    def string(self, s: str) -> None:
        b = s.encode("utf-8") + b"\x00"
        self.u32(len(b))
        self._put(b)

    def octets(self, data) -> None:
        view = memoryview(data).cast("B")
        self.u32(len(view))
        self._put(view)

    def header(self, sec: int, nanosec: int, frame_id: str) -> None:
        self.i32(sec)
        self.u32(nanosec)
        self.string(frame_id)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def image_cdr(
    sec: int,
    nanosec: int,
    frame_id: str,
    height: int,
    width: int,
    encoding: str,
    is_bigendian: int,
    step: int,
    data,
) -> bytes:
    """Serialized sensor_msgs/Image (little-endian XCDR1), byte-identical to rosbags' and Cyclone's codecs."""
    w = Writer()
    w.header(sec, nanosec, frame_id)
    w.u32(height)
    w.u32(width)
    w.string(encoding)
    w.u8(is_bigendian)
    w.u32(step)
    w.octets(data)
    return w.bytes()


def compressed_image_cdr(sec: int, nanosec: int, frame_id: str, fmt: str, data) -> bytes:
    """Serialized sensor_msgs/CompressedImage (little-endian XCDR1)."""
    w = Writer()
    w.header(sec, nanosec, frame_id)
    w.string(fmt)
    w.octets(data)
    return w.bytes()
