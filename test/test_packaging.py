"""The ROS 2 package plumbing: package.xml, CMakeLists.txt, setup.py, launch file, scripts."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from openclaw_vision.config import EncoderConfig, VlmConfig

ROOT = Path(__file__).resolve().parents[1]


def test_package_xml_is_valid_format3_with_run_dependencies():
    from catkin_pkg.package import parse_package

    pkg = parse_package(str(ROOT / "package.xml"))
    pkg.validate()
    assert pkg.package_format == 3
    assert pkg.name == "openclaw_vision"
    run = {d.name for d in pkg.exec_depends} | {d.name for d in pkg.build_export_depends}
    for dep in (
        "rclpy",
        "sensor_msgs",
        "std_msgs",
        "diagnostic_msgs",
        "rosidl_default_runtime",
        "launch_ros",
        "python3-numpy",
        "python3-opencv",
        "python3-yaml",
        "python3-onnxruntime-pip",
    ):
        assert dep in run, dep
    assert "rosidl_interface_packages" in [g.name for g in pkg.member_of_groups]
    assert pkg.get_build_type() == "ament_cmake"


def test_cmakelists_generates_every_msg_and_installs_launch_config_msg():
    text = (ROOT / "CMakeLists.txt").read_text()
    gen = re.search(r"rosidl_generate_interfaces\((.*?)\)", text, re.S).group(1)
    for msg in sorted((ROOT / "msg").glob("*.msg")):
        assert f'"msg/{msg.name}"' in gen, msg.name
    install = re.search(r"install\(DIRECTORY (.*?)DESTINATION share/\$\{PROJECT_NAME\}", text, re.S).group(1).split()
    assert {"launch", "config", "msg"} <= set(install)
    assert "ament_python_install_package(${PROJECT_NAME})" in text
    for script in ("encoder_node", "openclaw-vision"):
        assert f"scripts/{script}" in text
        assert os.access(ROOT / "scripts" / script, os.X_OK)


def test_setup_py_installs_every_launch_config_and_msg_file(monkeypatch):
    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(ROOT)
    code = compile((ROOT / "setup.py").read_text(), "setup.py", "exec")
    exec(code, {"__file__": str(ROOT / "setup.py"), "__name__": "__main__"})
    installed = {f for _dest, files in captured["data_files"] for f in files}
    for folder in ("launch", "config", "msg"):
        for f in (ROOT / folder).iterdir():
            assert f"{folder}/{f.name}" in installed, f
    assert "resource/openclaw_vision" in installed


@pytest.mark.parametrize(("table", "cls"), [("ENCODER_OVERRIDES", EncoderConfig), ("VLM_OVERRIDES", VlmConfig)])
def test_launch_file_arguments_are_node_parameters_with_their_defaults(table, cls):
    tree = ast.parse((ROOT / "launch" / "vision.launch.py").read_text())
    overrides = next(
        n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == table
    )
    launch_defaults = ast.literal_eval(overrides)
    defaults = cls().as_dict()
    for key, value in launch_defaults.items():
        assert key in defaults, f"launch argument {key} is not a {cls.__name__} parameter"
        assert str(defaults[key]) == value, f"launch default for {key} differs from the node's"
    text = (ROOT / "launch" / "vision.launch.py").read_text()
    assert 'DeclareLaunchArgument("enable_vlm", default_value="false"' in text and 'executable="vlm_node"' in text


def test_shipped_config_files_hold_the_node_defaults():
    from openclaw_vision.config import read_params_file

    assert read_params_file(ROOT / "config" / "encoder.yaml", "encoder_node") == EncoderConfig().as_dict()
    assert read_params_file(ROOT / "config" / "vlm.yaml", "vlm_node") == VlmConfig().as_dict()


def test_loopback_dds_config_stays_on_this_machine():
    import xml.etree.ElementTree as ET

    ns = {"c": "https://cdds.io/config"}
    root = ET.parse(ROOT / "config" / "cyclonedds-loopback.xml").getroot()
    nic = root.find(".//c:Interfaces/c:NetworkInterface", ns)
    assert nic.get("name") == "lo" and nic.get("multicast") == "false"
    assert root.find(".//c:AllowMulticast", ns).text == "false"
    assert [p.get("address") for p in root.findall(".//c:Peers/c:Peer", ns)] == ["127.0.0.1"]


def test_makefile_and_ci_pin_dds_to_loopback():
    make = (ROOT / "Makefile").read_text()
    assert "export CYCLONEDDS_URI := file://$(CURDIR)/config/cyclonedds-loopback.xml" in make
    assert "make test" in (ROOT / ".ci" / "run").read_text()
