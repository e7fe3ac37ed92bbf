"""ROS command-line parameters read as rcl (arguments.c) and rclpy (node.cpp) read them on Humble."""

from __future__ import annotations

import pytest

from openclaw_vision.ros.ros_args import node_name, parameter_table, ros_parameters, split_ros_args
from openclaw_vision.runtime.config import ConfigError, node_key_matches


def test_ros_arguments_are_split_from_the_programs_own():
    argv = ["--depth", "3", "--ros-args", "-p", "a:=1", "--", "--model", "tiny", "--ros-args", "-r", "x:=y"]
    assert split_ros_args(argv) == (["--depth", "3", "--model", "tiny"], ["-p", "a:=1", "-r", "x:=y"])


def test_param_rules_are_yaml_typed_and_apply_to_every_node_unless_prefixed():
    table = parameter_table(["-p", "depth:=3", "-p", "period:=0.5", "-p", "topic:=/cam", "--param", "flag:=true",
                             "-p", "vlm_node:top_p:=0.9"])  # fmt: skip
    assert table == {"/**": {"depth": 3, "period": 0.5, "topic": "/cam", "flag": True}, "vlm_node": {"top_p": 0.9}}
    assert ros_parameters(["--ros-args", "-p", "vlm_node:top_p:=0.9", "-p", "seed:=4"], "vlm_node") == {
        "top_p": 0.9,
        "seed": 4,
    }
    assert ros_parameters(["--ros-args", "-p", "vlm_node:top_p:=0.9"], "encoder_node") == {}


def test_params_files_merge_in_rcls_table_order(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("/**:\n  ros__parameters:\n    depth: 1\n    model: tiny\nencoder_node:\n  ros__parameters:\n"
                 "    depth: 2\nother_node:\n  ros__parameters:\n    depth: 9\n")  # fmt: skip
    b.write_text("/**:\n  ros__parameters:\n    depth: 3\n    nested:\n      key: 1\n")
    argv = ["--ros-args", "--params-file", str(a), "--params-file", str(b)]
    # rcl keeps one entry per node key in order of first appearance ('/**' first, from a.yaml),
    # b.yaml's '/**' depth replaces a.yaml's, and rclpy then applies 'encoder_node' after '/**'
    assert ros_parameters(argv, "encoder_node") == {"depth": 2, "model": "tiny", "nested.key": 1}


def test_remaps_rename_the_node_the_parameters_are_looked_up_for(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("/robot/front_encoder:\n  ros__parameters:\n    depth: 5\n/*/front_encoder:\n  ros__parameters:\n"
                 "    model: tiny\n")  # fmt: skip
    ros = ["-r", "__node:=front_encoder", "-r", "__ns:=/robot", "--params-file", str(f)]
    assert node_name(ros, "encoder_node") == "/robot/front_encoder"
    assert ros_parameters(["--ros-args", *ros], "encoder_node") == {"depth": 5, "model": "tiny"}
    assert node_name(["-r", "image:=/cam"], "encoder_node") == "/encoder_node"


@pytest.mark.parametrize(
    ("key", "fqn", "matches"),
    [("encoder_node", "/encoder_node", True), ("/**", "/a/b/encoder_node", True), ("/*/n", "/r/n", True),
     ("/*/n", "/n", False), ("vlm_node", "/encoder_node", False), ("/ns/n", "/n", False)],
)  # fmt: skip
def test_node_keys_match_as_rclpy_matches_them(key, fqn, matches):
    assert node_key_matches(key, fqn) is matches


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["-p"], "-p needs a value"), (["-p", "depth"], "expected name:=value"),
     (["--params-file", "/nonexistent.yaml"], "--params-file /nonexistent.yaml"),
     (["-p", "a:=[1, 2"], "not YAML")],
)  # fmt: skip
def test_malformed_ros_arguments_are_configuration_errors(argv, message):
    with pytest.raises(ConfigError, match=message):
        ros_parameters(["--ros-args", *argv], "encoder_node")
