"""The struct-level XCDR1 image reader (ros/cdr.py): zero-copy reads of what rosbags and cyclonedds-python
write; and the tests' own writer (support/cdr_writer.py): byte-for-byte what they write."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from dds_helpers import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cdr_writer import compressed_image_cdr, image_cdr

from openclaw_vision.ros import cdr
from openclaw_vision.ros.convert import ros_header
from openclaw_vision.ros.dds_types import idl_type
from openclaw_vision.runtime import bags

ENCODINGS = ["rgb8", "bgr8", "mono8", "mono16", "yuv422", "nv12", "bayer_rggb8", "rgba8", "", "x" * 33]


def rosbags_image(sec, nanosec, frame_id, h, w, encoding, big, step, data, little=True) -> bytes:
    store = bags.typestore()
    T, H = store.types["builtin_interfaces/msg/Time"], store.types["std_msgs/msg/Header"]
    msg = store.types[bags.IMAGE_TYPE](
        header=H(stamp=T(sec=sec, nanosec=nanosec), frame_id=frame_id),
        height=h, width=w, encoding=encoding, is_bigendian=big, step=step, data=np.frombuffer(data, np.uint8),
    )  # fmt: skip
    return bytes(store.serialize_cdr(msg, bags.IMAGE_TYPE, little_endian=little))


def cyclone_image(sec, nanosec, frame_id, h, w, encoding, big, step, data) -> bytes:
    T, H = idl_type("builtin_interfaces/msg/Time"), idl_type("std_msgs/msg/Header")
    return idl_type(bags.IMAGE_TYPE)(
        header=H(stamp=T(sec=sec, nanosec=nanosec), frame_id=frame_id),
        height=h, width=w, encoding=encoding, is_bigendian=big, step=step, data=data,
    ).serialize()  # fmt: skip


images = st.tuples(
    st.integers(-(2**31), 2**31 - 1),  # sec
    st.integers(0, 2**32 - 1),  # nanosec
    st.text(max_size=12) | st.sampled_from(["", "c", "cam", "camera_optical_frame", "é" * 5]),  # frame_id
    st.integers(0, 9),  # height
    st.integers(0, 9),  # width
    st.sampled_from(ENCODINGS),
    st.integers(0, 1),  # is_bigendian
    st.integers(0, 7),  # extra bytes per row: odd steps
    st.integers(0, 5),  # extra trailing data bytes
)


@settings(max_examples=300, deadline=None)
@given(images)
def test_image_bytes_equal_rosbags_and_cyclone_and_read_back(args):
    sec, nanosec, frame_id, h, w, encoding, big, extra, tail = args
    step = w * 3 + extra
    data = bytes((i * 7 + 3) % 256 for i in range(step * h + tail))
    fields = (sec, nanosec, frame_id, h, w, encoding, big, step, data)
    ours = image_cdr(*fields)
    assert ours == rosbags_image(*fields) == cyclone_image(*fields)
    for raw in (ours, rosbags_image(*fields, little=False)):  # both byte orders read back
        view = cdr.parse_image(raw)
        got = (view.header.stamp.sec, view.header.stamp.nanosec, view.header.frame_id)
        assert (*got, view.height, view.width, view.encoding, view.is_bigendian, view.step) == fields[:-1]
        assert bytes(view.data) == data


def test_reading_shares_the_buffer_writing_copies_the_pixels_once():
    data = np.arange(1080 * 1920 * 3, dtype=np.uint32).astype(np.uint8)
    raw = image_cdr(1, 2, "cam", 1080, 1920, "rgb8", 0, 5760, data)
    view = cdr.parse_image(raw)
    assert np.shares_memory(np.frombuffer(view.data, np.uint8), np.frombuffer(raw, np.uint8))
    assert np.array_equal(np.frombuffer(view.data, np.uint8), data)


@pytest.mark.parametrize("frame_id", ["", "a", "abc", "abcd", "camera"])
@pytest.mark.parametrize("fmt", ["jpeg", "rgb8; jpeg compressed bgr8", "mono8; png compressed "])
def test_compressed_image_bytes_equal_rosbags_and_cyclone(frame_id, fmt):
    data = bytes(range(251)) * 3
    ours = compressed_image_cdr(5, 6, frame_id, fmt, data)
    assert ours == bags.serialize_compressed_image(data, fmt, 5_000_000_006, frame_id)
    T, H = idl_type("builtin_interfaces/msg/Time"), idl_type("std_msgs/msg/Header")
    typed = idl_type(bags.COMPRESSED_IMAGE_TYPE)(header=H(stamp=T(sec=5, nanosec=6), frame_id=frame_id), format=fmt,
                                                 data=data)  # fmt: skip
    assert ours == typed.serialize()
    view = cdr.parse_compressed_image(ours)
    assert (view.header.frame_id, view.format, bytes(view.data)) == (frame_id, fmt, data)


def test_restamp_changes_only_the_stamp():
    data = bytes(range(200))
    raw = rosbags_image(1, 2, "cam", 5, 10, "rgb8", 0, 40, data)
    assert cdr.restamp(raw, 1_700_000_000, 999_999_999) == rosbags_image(
        1_700_000_000, 999_999_999, "cam", 5, 10, "rgb8", 0, 40, data
    )
    assert cdr.header_stamp(raw) == (1, 2)
    big = rosbags_image(1, 2, "cam", 5, 10, "rgb8", 0, 40, data, little=False)
    assert cdr.header_stamp(cdr.restamp(big, -3, 4)) == (-3, 4)


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        (b"\x00\x01", cdr.CdrError, "shorter than the CDR encapsulation header"),
        (b"\x00\x07\x00\x00" + b"\0" * 40, cdr.CdrUnsupported, "not plain XCDR1"),
        (b"\x00\x01\x00\x00" + struct.pack("<iII", 1, 2, 99) + b"cam\0", cdr.CdrError, "header.frame_id: needs 99"),
        (b"\x00\x01\x00\x00" + struct.pack("<iII", 1, 2, 4) + b"camX", cdr.CdrError, "not NUL-terminated"),
        (b"\x00\x01\x00\x00" + struct.pack("<iII", 1, 2, 3) + b"\xff\xfe\0", cdr.CdrError, "not UTF-8"),
    ],
)
def test_malformed_bytes_raise(raw, error, message):
    with pytest.raises(error, match=message):
        cdr.parse_image(raw)


def test_a_data_length_beyond_the_sample_raises():
    raw = image_cdr(1, 2, "cam", 2, 2, "rgb8", 0, 6, bytes(12))
    lying = raw[:-16] + struct.pack("<I", 10**9) + raw[-12:]  # the data count claims a gigabyte
    with pytest.raises(cdr.CdrError, match="data: needs 1000000000 bytes"):
        cdr.parse_image(lying)


@pytest.mark.dds
@pytest.mark.parametrize("zero_copy", [True, False])
def test_cyclone_transport_hands_over_views_and_publishes_raw_bytes(dds_domain, monkeypatch, zero_copy):
    """Through real DDS: raw CDR in, an image whose header is cdr's plain one (the transport's own built from it
    to publish) and whose data is a view.

    zero_copy: dds_takecdr's reference into Cyclone's sample; else the binding's copying take.
    """
    from openclaw_vision.ros import cyclone
    from openclaw_vision.ros.types import COMPRESSED_IMAGE, IMAGE, QoS

    if not zero_copy:
        monkeypatch.setattr(cyclone, "_ddsc", lambda: None)
    released = []
    real_release = cyclone._release
    monkeypatch.setattr(cyclone, "_release", lambda *a: (released.append(1), real_release(*a)))
    t = cyclone.CycloneTransport("cdr_probe")
    got: dict[str, list] = {IMAGE: [], COMPRESSED_IMAGE: []}
    try:
        subs = [t.subscribe("/probe/image", IMAGE, QoS(), lambda m, dt: got[IMAGE].append((m, dt)))]
        subs.append(
            t.subscribe(
                "/probe/image/compressed", COMPRESSED_IMAGE, QoS(), lambda m, dt: got[COMPRESSED_IMAGE].append(m)
            )
        )
        assert [s.zero_copy for s in subs] == [zero_copy] * 2
        pubs = [
            t.publisher("/probe/image", IMAGE, QoS()),
            t.publisher("/probe/image/compressed", COMPRESSED_IMAGE, QoS()),
        ]
        wait_until(lambda: all(p.matched() for p in pubs) and all(s.matched() for s in subs))
        pixels = bytes(range(256)) * 30 + b"\x01"  # 7681 bytes: an odd length is padded on the wire
        for i in range(5):
            pubs[0].publish(image_cdr(3, i, "cam", 1, 7681, "mono8", 0, 7681, pixels))
        pubs[1].publish(compressed_image_cdr(5, 6, "cam", "jpeg", b"\xff\xd8\xff\xd9"))
        wait_until(lambda: len(got[IMAGE]) == 5 and bool(got[COMPRESSED_IMAGE]), what="5 images and a compressed one")
        img, dt = got[IMAGE][0]
        assert isinstance(img, cdr.ImageView) and isinstance(img.data, memoryview) and dt >= 0
        assert bytes(img.data) == pixels and (img.width, img.encoding) == (7681, "mono8")
        assert isinstance(img.header, cdr.Header)
        assert (img.header.stamp.sec, img.header.stamp.nanosec, img.header.frame_id) == (3, 0, "cam")
        own = ros_header(t, img.header)
        assert isinstance(own, idl_type("std_msgs/msg/Header"))
        assert (own.stamp.sec, own.stamp.nanosec, own.frame_id) == (3, 0, "cam")
        assert [m.header.stamp.nanosec for m, _ in got[IMAGE]] == list(range(5))
        comp = got[COMPRESSED_IMAGE][0]
        assert comp.format == "jpeg" and bytes(comp.data) == b"\xff\xd8\xff\xd9"
        if zero_copy:  # each sample's reference is given back once nothing views it any more
            import gc

            assert released == []
            got[IMAGE].clear()
            del img, comp
            got[COMPRESSED_IMAGE].clear()
            gc.collect()
            assert len(released) == 6
    finally:
        t.close()
