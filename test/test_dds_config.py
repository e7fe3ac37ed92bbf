"""dds_config: what the nodes read from CYCLONEDDS_URI at start, and what they hand to rmw / Cyclone.

On a real Humble the combinations run in test/ros2/test_ros2_transport.py (rclpy: loopback config
under ROS_LOCALHOST_ONLY=1, robot config; pip path: robot config under it); here the
reading and the rewriting themselves, without ROS."""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from pathlib import Path

from openclaw_vision.ros import dds_config

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = (ROOT / "config" / "cyclonedds-loopback.xml").as_uri()
ROBOT = (ROOT / "config" / "cyclonedds-robot.xml").as_uri()


def test_shipped_configs_are_read():
    lo, robot = dds_config.DdsConfig.read(LOOPBACK), dds_config.DdsConfig.read(ROBOT)
    assert lo.interfaces == ("lo",) and lo.receive_buffer == 32 * 2**20
    assert robot.interfaces == () and robot.receive_buffer == 32 * 2**20
    both = dds_config.DdsConfig.read(f"{dds_config.LOCALHOST_FRAGMENT},{ROBOT}")
    assert both.interfaces == ("127.0.0.1",) and both.receive_buffer == 32 * 2**20


def test_receive_buffer_warning_names_the_fix():
    cfg = dds_config.DdsConfig.read(ROBOT)
    line = dds_config.receive_buffer_warning(cfg, 4194304)
    assert "net.core.rmem_max is 4194304 B" in line and "sudo sysctl -w net.core.rmem_max=33554432" in line
    assert dds_config.receive_buffer_warning(cfg, 33554432) is None
    bare = dds_config.DdsConfig.read("<CycloneDDS><Domain><General/></Domain></CycloneDDS>")
    assert "sets no SocketReceiveBufferSize" in dds_config.receive_buffer_warning(bare, 2**30)


def test_rclpy_under_localhost_only_gets_our_config_without_its_interface(caplog):
    env = {"CYCLONEDDS_URI": LOOPBACK, "ROS_LOCALHOST_ONLY": "1"}
    with caplog.at_level(logging.INFO):
        inline = dds_config.for_rclpy(env)
    assert env == {"CYCLONEDDS_URI": LOOPBACK, "ROS_LOCALHOST_ONLY": "1"}  # read, never written
    assert inline.startswith("<") and "NetworkInterface" not in inline
    root = ET.fromstring(inline[inline.index("<CycloneDDS") :])  # the same file otherwise: still one peer, no multicast
    assert root.find(".//{https://cdds.io/config}Peer").get("address") == "127.0.0.1"
    assert dds_config.DdsConfig.read(inline).receive_buffer == 32 * 2**20
    assert "given to rmw without its <Interfaces>" in caplog.text
    # without ROS_LOCALHOST_ONLY the file names lo, as it must: nothing to change
    assert dds_config.for_rclpy({"CYCLONEDDS_URI": LOOPBACK}) is None


def test_a_users_config_that_names_an_interface_gets_one_line(tmp_path, caplog):
    mine = tmp_path / "mine.xml"
    mine.write_text('<CycloneDDS><Domain><General><Interfaces><NetworkInterface name="eth0"/></Interfaces>'
                    "</General></Domain></CycloneDDS>")  # fmt: skip
    env = {"CYCLONEDDS_URI": mine.as_uri(), "ROS_LOCALHOST_ONLY": "1"}
    with caplog.at_level(logging.INFO):
        assert dds_config.for_rclpy(env) is None  # left as it is
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "unset ROS_LOCALHOST_ONLY" in errors[0].getMessage()
    assert "eth0" in errors[0].getMessage()


def test_pip_path_honours_localhost_only_as_rmw_does():
    env = {"CYCLONEDDS_URI": ROBOT, "ROS_LOCALHOST_ONLY": "1"}
    uri = dds_config.for_cyclone(env)
    assert uri == f"{dds_config.LOCALHOST_FRAGMENT},{ROBOT}" and dds_config.DdsConfig.read(uri).interfaces == (
        "127.0.0.1",
    )
    assert env["CYCLONEDDS_URI"] == ROBOT  # read, never written
    # a child that inherits the result as its CYCLONEDDS_URI: not added twice
    assert dds_config.for_cyclone({"CYCLONEDDS_URI": uri, "ROS_LOCALHOST_ONLY": "1"}) == uri
    lo = {"CYCLONEDDS_URI": LOOPBACK, "ROS_LOCALHOST_ONLY": "1"}
    assert dds_config.for_cyclone(lo) == LOOPBACK  # names lo already: cyclonedds-python adds nothing itself
    unset: dict[str, str] = {}
    uri = dds_config.for_cyclone(unset)  # nothing chosen: the shipped loopback file
    assert unset == {} and uri == dds_config.chosen_uri(unset) and uri.endswith("/config/cyclonedds-loopback.xml")
    assert dds_config.DdsConfig.read(uri).interfaces == ("lo",)


def test_a_copy_of_our_config_is_ours(tmp_path):
    copy = tmp_path / "lo.xml"
    copy.write_bytes((ROOT / "config" / "cyclonedds-loopback.xml").read_bytes())
    uri = dds_config.for_rclpy({"CYCLONEDDS_URI": copy.as_uri(), "ROS_LOCALHOST_ONLY": "1"})
    assert uri.startswith("<CycloneDDS") and "NetworkInterface" not in uri


def test_the_benches_raise_the_kernels_receive_buffer_cap_as_a_robots_admin_would_and_say_when_they_could_not(
    tmp_path, monkeypatch
):
    """dds_config.raise_rmem_max: below the robot config's buffer the cap is written up (and the result says from
    what); at or above it nothing is written; where the file cannot be written the result says why, and the
    cap it reports is the one in force."""
    from openclaw_vision.bench.cameras import socket_line
    from openclaw_vision.ros import dds_config

    want = dds_config.robot_receive_buffer()
    assert want >= 32 * 2**20  # the robot config asks for whole 1080p frames' fragments
    cap = tmp_path / "rmem_max"
    monkeypatch.setattr(dds_config, "RMEM_MAX", cap)
    cap.write_text("4194304\n")
    got = dds_config.raise_rmem_max(want)
    assert got == {"rmem_max_before": 4194304, "rmem_max": want, "raised": True, "why_not": None}
    assert int(cap.read_text()) == want and "raised from 4194304 B" in socket_line(got)
    assert dds_config.raise_rmem_max(want)["raised"] is False and int(cap.read_text()) == want
    monkeypatch.setattr(dds_config, "RMEM_MAX", tmp_path / "no-such-dir" / "rmem_max")
    refused = dds_config.raise_rmem_max(want)
    assert refused["raised"] is False and refused["rmem_max"] is None and "No such file" in refused["why_not"]
    assert "NOT raised" in socket_line(refused)
