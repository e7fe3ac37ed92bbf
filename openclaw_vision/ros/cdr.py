"""sensor_msgs/Image and CompressedImage read from XCDR1 bytes without a per-element pass.

A 1080p rgb8 image is 6 MB of `uint8[] data` behind ~60 bytes of fields. Generic CDR codecs
walk the whole message in Python; here the few fixed fields are read with `struct` and `data`
stays a memoryview of the received buffer (zero copies). A serialized message's header stamp is
read or rewritten in place (`header_stamp`, `restamp`: replay and the bench cameras send a bag's
bytes with the send time). The package never builds an image sample itself (runtime/bags.py serializes
with rosbags); the tests' hand-written writer is test/support/cdr_writer.py.

The layout is plain CDR version 1 (what ROS 2 Humble's rmw_cyclonedds and rmw_fastrtps put on
the wire and rosbag2 stores): a 4-byte encapsulation header (`00 01 00 00` little-endian,
`00 00 00 00` big-endian; bytes 2–3 are options), then the members in order, each aligned to
its own size (at most 8) counted from the end of that header. Strings are a uint32 length that
counts a terminating NUL, the bytes, the NUL; sequences a uint32 count, then the elements.

    std_msgs/Header header      int32 sec, uint32 nanosec, string frame_id
    sensor_msgs/Image           header, uint32 height, uint32 width, string encoding,
                                uint8 is_bigendian, uint32 step, uint8[] data
    sensor_msgs/CompressedImage header, string format, uint8[] data

Other encapsulations (XCDR2, parameter lists) raise `CdrUnsupported`; callers fall back to a
generic codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import OpenclawError

CDR_BE, CDR_LE = b"\x00\x00", b"\x00\x01"
HEADER_SIZE = 4


class CdrError(OpenclawError, ValueError):
    """Bytes that are not a well-formed message of the expected type."""


class CdrUnsupported(CdrError):
    """A well-formed sample in a representation this fast path does not read (e.g. XCDR2)."""


@dataclass
class Time:
    sec: int
    nanosec: int


@dataclass
class Header:
    """std_msgs/Header as read here: plain fields, whatever the transport. Most images a node receives are
    dropped unseen, so none pays for the transport's own Header (rclpy's, ~4 us with its field checks);
    what publishes an image's header builds that from these fields (convert.ros_header)."""

    stamp: Time
    frame_id: str


@dataclass
class ImageView:
    """sensor_msgs/Image with ROS's field names; `data` is a view of the received bytes."""

    header: Header
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: memoryview


@dataclass
class CompressedImageView:
    """sensor_msgs/CompressedImage with ROS's field names; `data` is a view of the received bytes."""

    header: Header
    format: str
    data: memoryview


#: runs of 4-byte members read in one call, by byte order: (sec, nanosec, frame_id's length) opens every
#: header (its stamp alone: "iI"); (height, width, encoding's length), (step, data's length) and (a length)
_RUNS = {e: {f: struct.Struct(e + f) for f in ("iII", "iI", "III", "II", "I")} for e in "<>"}


class _Reader:
    """A sample's members in order. Every run of 4-byte members is one `struct` call, so an image's ~60
    bytes of fields cost a handful of calls: the take thread reads every sample it receives, and most
    are dropped (issue 38)."""

    def __init__(self, buf) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf.cast("B")
        if len(self.buf) < HEADER_SIZE:
            raise CdrError(f"{len(self.buf)} bytes: shorter than the CDR encapsulation header")
        kind = bytes(self.buf[:2])
        if kind not in (CDR_BE, CDR_LE):
            raise CdrUnsupported(f"encapsulation {kind.hex()} is not plain XCDR1 (0000 or 0001)")
        self.e = "<" if kind == CDR_LE else ">"
        self.runs = _RUNS[self.e]
        self.off = HEADER_SIZE

    def _take(self, n: int, what: str) -> int:
        start = self.off
        if n < 0 or start + n > len(self.buf):
            raise CdrError(f"{what}: needs {n} bytes at offset {start}, the sample has {len(self.buf)}")
        self.off = start + n
        return start

    def words(self, fmt: str, what: str) -> tuple[int, ...]:
        """A run of 4-byte members (`fmt`: a key of _RUNS), aligned to 4 as each of them is."""
        run = self.runs[fmt]
        self.off += -(self.off - HEADER_SIZE) % 4
        return run.unpack_from(self.buf, self._take(run.size, what))

    def u8(self, what: str) -> int:
        return self.buf[self._take(1, what)]

    def text(self, n: int, what: str) -> str:
        """A string whose length `n` (counting its NUL) was read with the run before it."""
        start = self._take(n, what)
        if n == 0:  # not valid CDR (the length counts the NUL), but some writers send it for ""
            return ""
        if self.buf[start + n - 1] != 0:
            raise CdrError(f"{what}: string of {n} bytes is not NUL-terminated")
        try:
            return bytes(self.buf[start : start + n - 1]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise CdrError(f"{what}: not UTF-8 ({err})") from None

    def octets(self, n: int, what: str) -> memoryview:
        """`n` bytes (a sequence whose count was read with the run before it), a view of the sample."""
        start = self._take(n, what)
        return self.buf[start : start + n]


def _header(r: _Reader) -> Header:
    sec, nanosec, n = r.words("iII", "header")
    return Header(Time(sec, nanosec), r.text(n, "header.frame_id"))


def parse_image(buf) -> ImageView:
    """Read a serialized sensor_msgs/Image; `data` is a zero-copy view into `buf`."""
    r = _Reader(buf)
    header = _header(r)
    height, width, n = r.words("III", "height, width")
    encoding = r.text(n, "encoding")
    is_bigendian = r.u8("is_bigendian")
    step, n = r.words("II", "step")
    return ImageView(header, height, width, encoding, is_bigendian, step, r.octets(n, "data"))


def parse_compressed_image(buf) -> CompressedImageView:
    """Read a serialized sensor_msgs/CompressedImage; `data` is a zero-copy view into `buf`."""
    r = _Reader(buf)
    header = _header(r)
    fmt = r.text(*r.words("I", "format"), "format")
    (n,) = r.words("I", "data")
    return CompressedImageView(header, fmt, r.octets(n, "data"))


#: the types this module reads itself, by ROS type name
PARSERS = {"sensor_msgs/msg/Image": parse_image, "sensor_msgs/msg/CompressedImage": parse_compressed_image}


def sample_decoder(ros_type: str, generic: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """bytes → message, as a subscription takes samples: images by the struct readers above (their
    `data` a view of the sample, their header a plain `Header`), every other type, and a sample in
    another representation (XCDR2), by `generic` (the transport's own deserialiser)."""
    parse = PARSERS.get(ros_type)
    if parse is None:
        return generic

    def decode(raw):
        try:
            return parse(raw)
        except CdrUnsupported:
            return generic(raw)

    return decode


def header_stamp(buf) -> tuple[int, int]:
    """(sec, nanosec) of the header.stamp that a serialized message starts with."""
    sec, nanosec = _Reader(buf).words("iI", "header.stamp")
    return sec, nanosec


def restamp(buf, sec: int, nanosec: int) -> bytes:
    """A copy of any serialized message that starts with a std_msgs/Header, with a new header.stamp.

    The stamp is the first member (offset 0 after the encapsulation header, int32 + uint32), so
    this is one copy of the buffer and 8 bytes written, whatever the message size.
    """
    r = _Reader(buf)
    if len(r.buf) < HEADER_SIZE + 8:
        raise CdrError(f"{len(r.buf)} bytes: too short for a message with a header")
    stamp = struct.pack(r.e + "iI", sec, nanosec)
    return b"".join((r.buf[:HEADER_SIZE], stamp, r.buf[HEADER_SIZE + 8 :]))
