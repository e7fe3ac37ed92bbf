"""The ROS 2 package plumbing: package.xml, CMakeLists.txt, setup.py, launch file, scripts."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
import yaml

from openclaw_vision.runtime.config import EncoderConfig, LabelsConfig, MemoryConfig, VlmConfig

ROOT = Path(__file__).resolve().parents[1]


def _package():
    from catkin_pkg.package import parse_package

    pkg = parse_package(str(ROOT / "package.xml"))
    pkg.validate()
    return pkg


def _all_dependencies(pkg) -> set[str]:
    groups = ("build_depends", "buildtool_depends", "build_export_depends", "buildtool_export_depends",
              "exec_depends", "test_depends", "doc_depends")  # fmt: skip
    return {d.name for g in groups for d in getattr(pkg, g)}


def test_package_xml_is_valid_format3_with_run_dependencies():
    pkg = _package()
    assert pkg.package_format == 3
    assert pkg.name == "openclaw_vision"
    run = {d.name for d in pkg.exec_depends} | {d.name for d in pkg.build_export_depends}
    for dep in ("rclpy", "sensor_msgs", "std_msgs", "diagnostic_msgs", "rosidl_default_runtime", "launch_ros",
                "python3-numpy", "python3-opencv", "python3-yaml", "python3-venv"):  # fmt: skip
        assert dep in run, dep
    assert "rosidl_interface_packages" in [g.name for g in pkg.member_of_groups]
    assert pkg.get_build_type() == "ament_cmake"


def test_every_dependency_is_a_humble_package_or_a_rosdep_key():
    """`rosdep install` stops at the first name it cannot resolve. test/rosdep_keys.yaml lists the
    names checked in ros/rosdistro (humble/distribution.yaml, rosdep/*.yaml) and where."""
    keys = yaml.safe_load((ROOT / "test" / "rosdep_keys.yaml").read_text())
    known = set(keys["ros_packages"]) | set(keys["system_keys"])
    deps = _all_dependencies(_package())
    assert deps <= known, f"not checked against ros/rosdistro: {sorted(deps - known)}"
    assert not deps & set(keys["not_keys"]) and "python3-tokenizers-pip" in keys["not_keys"]
    for key, where in keys["system_keys"].items():
        assert where["file"].startswith("rosdep/") and where["ubuntu"], key


def test_no_dependency_is_installed_by_an_unpinned_pip_step():
    """rosdep installs a `-pip` key with `pip install -U <name>` (rosdep2/platforms/pip.py): no
    version pin is possible, and onnxruntime's pulls numpy 2.x over Jammy's (docs/robot-and-dds.md, Jammy)."""
    keys = yaml.safe_load((ROOT / "test" / "rosdep_keys.yaml").read_text())
    for dep in _all_dependencies(_package()):
        assert not dep.endswith("-pip") and "pip" not in keys["system_keys"].get(dep, {}).get("ubuntu", ""), dep


def test_the_pinned_humble_requirements_keep_numpy_1():
    """requirements-humble.txt: numpy < 2 (Jammy's cv2 and Humble's message modules are built for
    1.x) and >= 1.21.6 (every onnxruntime from 1.16 on requires it); exact pins throughout."""
    pins = {}
    for line in (ROOT / "requirements-humble.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip()] = tuple(int(x) for x in version.split("."))
    # ftfy: the labels node's CLIP tokenizer; chromadb: the memory node's store; onnx: graphs made at run time
    assert set(pins) == {"numpy", "onnxruntime", "tokenizers", "ftfy", "chromadb", "onnx"}
    assert (1, 21, 6) <= pins["numpy"] < (2,)
    assert pins["onnxruntime"] >= (1, 16)


#: pip packages that the nodes and their config must import without: the extras and the pip-path transport,
#: none of which a robot needs to start the encoder, labels or VLM node (requirements-humble.txt pins onnx and
#: chromadb for the memory node's store and int8 scan, which import them when they first run)
NOT_ON_A_ROBOT = ("onnx", "torch", "chromadb", "openvino", "rosbags", "cyclonedds", "matplotlib", "safetensors",
                  "gguf", "tritonclient", "psutil", "PIL", "skimage")  # fmt: skip


def test_the_nodes_and_their_config_import_with_only_what_a_robot_has():
    """Every node module, config (which each node and the launch file read) and preprocess import with the
    packages above absent (a robot that runs only the encoder needs none of them). The ros2 tier shows the
    same on the real Humble, but only after a colcon build late in the suite; this fails in a second (a
    node's config once imported onnx through the projection)."""
    import subprocess
    import sys

    code = (
        "import sys, importlib\n"
        f"for m in {NOT_ON_A_ROBOT!r}: sys.modules[m] = None\n"
        "for mod in ('runtime.config', 'preprocess', 'ros.encoder_node', 'ros.labels_node', 'ros.vlm_node',"
        " 'ros.memory_node', 'ros.launch_args'):\n"
        "    importlib.import_module('openclaw_vision.' + mod)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


CMAKE = (ROOT / "CMakeLists.txt").read_text()
CALLS = re.findall(r"^\s*([a-z_]+)\((.*?)\)\s*$", re.sub(r"#[^\n]*", "", CMAKE), re.S | re.M)


def _calls(name: str) -> list[str]:
    return [" ".join(args.split()) for cmd, args in CALLS if cmd == name]


def test_cmakelists_installs_the_python_package_without_a_second_ament_python_install_package():
    """The rule that broke colcon on Humble: rosidl_generate_interfaces(${PROJECT_NAME}) already runs
    ament_python_install_package(${PROJECT_NAME} PACKAGE_DIR <generated>) (rosidl_python#131,
    rosidl_generator_py_generate_interfaces.cmake, humble), and a second one for the same name stops
    configuration (ament_cmake_python/cmake/ament_python_install_package.cmake, humble:
    "has been installed before"; rosidl_python#141, ament_cmake#514)."""
    (gen,) = _calls("rosidl_generate_interfaces")
    assert gen.startswith("${PROJECT_NAME}") and "SKIP_INSTALL" not in gen
    assert not [
        c for c in _calls("ament_python_install_package") if c.split()[0] in ("${PROJECT_NAME}", "openclaw_vision")
    ]
    # instead: our sources into the same directory, after rosidl's rules (install rules run in order)
    assert "ament_get_python_install_dir(python_install_dir)" in CMAKE
    names = [cmd for cmd, _ in CALLS]
    ours = [i for i, (cmd, args) in enumerate(CALLS)
            if cmd == "install" and " ".join(args.split()).startswith("DIRECTORY ${PROJECT_NAME}/")]  # fmt: skip
    assert len(ours) == 1 and ours[0] > names.index("rosidl_generate_interfaces")
    assert "DESTINATION ${python_install_dir}/${PROJECT_NAME}" in " ".join(CALLS[ours[0]][1].split())
    assert 'PATTERN "__pycache__" EXCLUDE' in " ".join(CALLS[ours[0]][1].split())


def test_our_python_package_leaves_room_for_what_rosidl_generates_into_it():
    """Generated into the same directory: msg/ (the message classes), <pkg>_s__rosidl_typesupport_*
    libraries, and an empty __init__.py that ours replaces: so no msg/ of ours, no such names."""
    pkg = ROOT / "openclaw_vision"
    assert not (pkg / "msg").exists()
    assert not list(pkg.glob("openclaw_vision_s__*")) and not list(pkg.glob("_openclaw_vision_s.*"))
    text = (pkg / "__init__.py").read_text()
    assert not re.search(r"^\s*(import|from) ", text, re.M), "our __init__.py is imported by every msg import"


def test_cmakelists_generates_every_msg_and_srv_and_installs_executables_launch_config_msg_srv():
    gen = CMAKE[CMAKE.index("set(msg_files") : CMAKE.index("rosidl_generate_interfaces(")]
    for kind in ("msg", "srv"):
        listed = re.findall(rf'"{kind}/([A-Za-z0-9]+\.{kind})"', gen)
        assert listed == sorted(listed) and set(listed) == {m.name for m in (ROOT / kind).glob(f"*.{kind}")}
        assert listed and f"${{{kind}_files}}" in _calls("rosidl_generate_interfaces")[0].split()
    install = [c.split() for c in _calls("install")]
    assert ["DIRECTORY", "launch", "config", "msg", "srv", "DESTINATION", "share/${PROJECT_NAME}"] in install
    assert ["FILES", "requirements-humble.txt", "DESTINATION", "share/${PROJECT_NAME}"] in install
    programs = next(c for c in install if c[0] == "PROGRAMS")
    for script in ("encoder_node", "vlm_node", "openclaw-vision"):
        assert f"scripts/{script}" in programs and os.access(ROOT / "scripts" / script, os.X_OK)
    assert programs[-2:] == ["DESTINATION", "lib/${PROJECT_NAME}"]  # where `ros2 run` looks


def test_setup_py_installs_every_launch_config_msg_and_srv_file(monkeypatch):
    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(ROOT)
    code = compile((ROOT / "setup.py").read_text(), "setup.py", "exec")
    exec(code, {"__file__": str(ROOT / "setup.py"), "__name__": "__main__"})
    installed = {f for _dest, files in captured["data_files"] for f in files}
    for folder in ("launch", "config", "msg", "srv"):
        for f in (ROOT / folder).iterdir():
            assert f"{folder}/{f.name}" in installed, f
    assert "resource/openclaw_vision" in installed


def test_launch_file_declares_each_override_unset_and_starts_the_installed_executables():
    from openclaw_vision.ros.launch_args import (
        ARGUMENTS,
        ENCODER_ARGUMENTS,
        LABELS_ARGUMENTS,
        MEMORY_ARGUMENTS,
        UNSET,
        VLM_ARGUMENTS,
    )

    text = (ROOT / "launch" / "vision.launch.py").read_text()
    tree = ast.parse(text)
    assert "DeclareLaunchArgument(name, default_value=UNSET" in text and UNSET == ""
    assert "for name in ARGUMENTS" in text  # every node's overriding arguments, each once
    assert set(ARGUMENTS) == {*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS, *MEMORY_ARGUMENTS}
    assert len(ARGUMENTS) == len(set(ARGUMENTS)) and ENCODER_ARGUMENTS and VLM_ARGUMENTS and LABELS_ARGUMENTS
    executables = {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and getattr(node.func, "id", "") == "_node"}  # fmt: skip
    assert executables == {"encoder_node", "vlm_node", "labels_node", "memory_node"}
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for exe in executables:  # installed where launch_ros looks: lib/<package>/<executable>
        assert (ROOT / "scripts" / exe).is_file() and f"scripts/{exe}" in cmake
    assert 'DeclareLaunchArgument("enable_vlm", default_value="false"' in text
    assert 'DeclareLaunchArgument("enable_labels", default_value="false"' in text
    assert 'DeclareLaunchArgument("enable_memory", default_value="false"' in text


def test_shipped_config_files_hold_the_node_defaults():
    from openclaw_vision.runtime.config import read_params_file

    assert read_params_file(ROOT / "config" / "encoder.yaml", "encoder_node") == EncoderConfig().as_dict()
    assert read_params_file(ROOT / "config" / "vlm.yaml", "vlm_node") == VlmConfig().as_dict()
    assert read_params_file(ROOT / "config" / "labels.yaml", "labels_node") == LabelsConfig().as_dict()
    assert read_params_file(ROOT / "config" / "memory.yaml", "memory_node") == MemoryConfig().as_dict()


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("encoder.yaml", EncoderConfig),
        ("vlm.yaml", VlmConfig),
        ("labels.yaml", LabelsConfig),
        ("memory.yaml", MemoryConfig),
    ],
)
def test_each_yaml_comment_is_the_parameters_description(name, cls):
    """One source: config.Param's description is the YAML comment and the ROS descriptor's text."""
    comments = {}
    for line in (ROOT / "config" / name).read_text().splitlines():
        m = re.match(r"^    ([a-z_]+): .*?\s+# (.*)$", line)
        if m:
            comments[m.group(1)] = m.group(2)
    assert comments == {key: spec.description for key, spec in cls.params().items()}


def test_the_ros_modules_import_each_other_in_one_direction():
    """No import circle in ros/ (function-level imports included): types.py is imported by the
    transports and transport.py imports them, never the other way round."""
    graph = {}
    for path in (ROOT / "openclaw_vision" / "ros").glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.add(node.module.split(".")[0] if node.module else "")
        graph[path.stem] = deps & {p.stem for p in (ROOT / "openclaw_vision" / "ros").glob("*.py")}
    assert "transport" not in graph["cyclone"] | graph["rclpy_transport"]
    assert graph["types"] == set()

    def visit(mod, stack):
        assert mod not in stack, f"import circle: {' -> '.join([*stack, mod])}"
        for dep in graph[mod]:
            visit(dep, [*stack, mod])

    for mod in graph:
        visit(mod, [])


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
