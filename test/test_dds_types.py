"""Wire compatibility with ROS 2 Humble: names, CDR bytes, loopback-only DDS."""

from __future__ import annotations

import time

import numpy as np
import pytest

from openclaw_vision.ros.cyclone import dds_topic_name
from openclaw_vision.ros.dds_types import dds_type_name, idl_type
from openclaw_vision.runtime import bags


def test_ros2_dds_names():
    assert dds_type_name("sensor_msgs/msg/Image") == "sensor_msgs::msg::dds_::Image_"
    assert dds_topic_name("/visual_features") == "rt/visual_features"
    assert dds_topic_name("camera/image_raw") == "rt/camera/image_raw"
    assert idl_type(bags.FEATURES_TYPE).__idl_typename__ == "openclaw_vision::msg::dds_::VisualFeatures_"


def test_image_cdr_is_byte_identical_to_rosbag2s():
    raw = bags.serialize_image(
        np.arange(6 * 5 * 3, dtype=np.uint8).reshape(6, 5, 3), "rgb8", 12_345_678_901, "cam", step=16
    )
    assert raw[:4] == b"\x00\x01\x00\x00"  # XCDR1 little endian, the encapsulation Humble uses
    msg = idl_type("sensor_msgs/msg/Image").deserialize(raw)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id) == (12, 345_678_901, "cam")
    assert isinstance(msg.data, bytes)
    assert msg.serialize() == raw


def test_visual_features_and_diagnostics_cdr_match_rosbags():
    store = bags.typestore()
    T, H = store.types["builtin_interfaces/msg/Time"], store.types["std_msgs/msg/Header"]
    ref = store.serialize_cdr(
        store.types[bags.FEATURES_TYPE](
            header=H(stamp=T(sec=3, nanosec=4), frame_id="cam"),
            model_id="m",
            dim=3,
            embedding=np.array([0.5, -1.0, 2.0], np.float32),
        ),
        bags.FEATURES_TYPE,
    )
    Ti, Hi = idl_type("builtin_interfaces/msg/Time"), idl_type("std_msgs/msg/Header")
    ours = idl_type(bags.FEATURES_TYPE)(
        header=Hi(stamp=Ti(sec=3, nanosec=4), frame_id="cam"), model_id="m", dim=3, embedding=[0.5, -1.0, 2.0]
    )
    assert ours.serialize() == bytes(ref)

    KV, DS, DA = (store.types[f"diagnostic_msgs/msg/{n}"] for n in ("KeyValue", "DiagnosticStatus", "DiagnosticArray"))
    ref = store.serialize_cdr(
        DA(
            header=H(stamp=T(sec=1, nanosec=2), frame_id=""),
            status=[DS(level=1, name="n", message="m", hardware_id="none", values=[KV(key="a", value="b")])],
        ),
        "diagnostic_msgs/msg/DiagnosticArray",
    )
    KVi, DSi, DAi = (idl_type(f"diagnostic_msgs/msg/{n}") for n in ("KeyValue", "DiagnosticStatus", "DiagnosticArray"))
    ours = DAi(
        header=Hi(stamp=Ti(sec=1, nanosec=2), frame_id=""),
        status=[DSi(level=1, name="n", message="m", hardware_id="none", values=[KVi(key="a", value="b")])],
    )
    assert ours.serialize() == bytes(ref)


@pytest.mark.dds
def test_transport_applies_the_loopback_config_when_none_is_set(monkeypatch, dds_domain):
    """Without CYCLONEDDS_URI the pip path runs on the shipped loopback config, given to its domain: this
    process's environment (what a child started next inherits) is left as it was."""
    import os

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import STRING, QoS

    monkeypatch.delenv("CYCLONEDDS_URI")
    a, b = CycloneTransport("probe_a"), CycloneTransport("probe_b")
    try:
        assert a.uri.endswith("config/cyclonedds-loopback.xml") and "CYCLONEDDS_URI" not in os.environ
        got = []
        sub = b.subscribe("/probe", STRING, QoS("reliable", 10), lambda msg, _dt: got.append(msg.data))
        pub = a.publisher("/probe", STRING, QoS("reliable", 10))
        deadline = time.monotonic() + 20
        while not (pub.matched() and sub.matched()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pub.publish(a.msg(STRING)(data="over lo"))
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got == ["over lo"]  # two transports of one process share the domain made with that config
    finally:
        a.close()
        b.close()
