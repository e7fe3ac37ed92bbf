"""The parameters a ROS 2 command line gives a node, read without ROS (stdlib + PyYAML only).

`ros2 launch` and `ros2 run` pass parameters as `--ros-args --params-file F -p name:=value`.
rclpy reads them itself, but only once the transport exists; we must know `transport` before
that, and the Cyclone path (no rclpy at all) must honour them too. So this module reads them
the way rcl and rclpy do on Humble:

- rcl/src/rcl/arguments.c (`rcl_parse_arguments`): ROS arguments sit between `--ros-args` and
  `--` (or the end); `--params-file FILE`; `-p`/`--param [node:]name:=value`, where the value
  is YAML (`rcl_parse_yaml_value`) and a rule without a node prefix is stored under '/**'
  (`_rcl_parse_param_rule`); `-r`/`--remap __node:=name` and `__ns:=/ns` rename the node.
  Every rule lands in one table keyed by node name, in order of first appearance, a later value
  of the same name replacing an earlier one.
- rclpy/src/rclpy/node.cpp (`_populate_node_parameters_from_rcl_params`): the node takes every
  entry whose key matches its fully qualified name (config.node_key_matches), in table order.

A parameters file is read by config.params_file_sections, the same reader as `--config`'s, and the node's
values are picked from the table by config.node_parameters, as from one file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..runtime.config import ConfigError, node_parameters, params_file_sections

ROS_ARGS, END = "--ros-args", "--"
PARAM_FLAGS = ("-p", "--param")
PARAMS_FILE_FLAG = "--params-file"
REMAP_FLAGS = ("-r", "--remap")
#: flags of rcl that take one value we do not use (so that value is not read as a flag)
OTHER_FLAGS_WITH_VALUE = ("-e", "--enclave", "--log-level", "--log-config-file")


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the program's own arguments, the ROS arguments), as rcl splits them."""
    own, ros, inside = [], [], False
    for a in argv:
        if a == ROS_ARGS:
            inside = True
        elif inside and a == END:
            inside = False
        elif inside:
            ros.append(a)
        else:
            own.append(a)
    return own, ros


def _pairs(ros_args: Sequence[str]):
    """(flag, value) for each flag that takes a value, in order; a flag missing its value is an error."""
    i = 0
    while i < len(ros_args):
        flag = ros_args[i]
        if flag in (*PARAM_FLAGS, PARAMS_FILE_FLAG, *REMAP_FLAGS, *OTHER_FLAGS_WITH_VALUE):
            if i + 1 >= len(ros_args):
                raise ConfigError(f"ROS argument {flag} needs a value")
            yield flag, ros_args[i + 1]
            i += 2
        else:
            i += 1


def node_name(ros_args: Sequence[str], default: str) -> str:
    """The node's fully qualified name after `-r __node:=` / `-r __ns:=` remaps (launch_ros adds both)."""
    name, ns = default, "/"
    for flag, value in _pairs(ros_args):
        if flag in REMAP_FLAGS and ":=" in value:
            key, _, target = value.partition(":=")
            if key == "__node":
                name = target
            elif key == "__ns":
                ns = target if target.startswith("/") else "/" + target
    return ns.rstrip("/") + "/" + name


def _add(table: dict[str, dict[str, Any]], node: str, values: dict[str, Any]) -> None:
    table.setdefault(node, {}).update(values)  # first appearance fixes the order; later values win


def parameter_table(ros_args: Sequence[str]) -> dict[str, dict[str, Any]]:
    """rcl's table of parameter overrides: node key → {name: value}, in order of first appearance."""
    table: dict[str, dict[str, Any]] = {}
    for flag, value in _pairs(ros_args):
        if flag == PARAMS_FILE_FLAG:
            try:
                sections = params_file_sections(Path(value))  # config's reader: the one for every parameters file
            except ConfigError as err:
                raise ConfigError(f"--params-file {err}") from None
            for node, values in sections.items():
                _add(table, node, values)
        elif flag in PARAM_FLAGS:
            rule, sep, text = value.partition(":=")
            if not sep or not rule:
                raise ConfigError(f"ROS argument {flag} {value!r}: expected name:=value")
            node, _, name = rule.rpartition(":")
            try:
                _add(table, node or "/**", {name: yaml.safe_load(text)})
            except yaml.YAMLError:
                raise ConfigError(f"ROS argument {flag} {value!r}: the value is not YAML") from None
    return table


def ros_parameters(argv: Sequence[str], default_node: str) -> dict[str, Any]:
    """The parameter values the command line `argv` gives the node `default_node` (renamed by remaps)."""
    _, ros = split_ros_args(argv)
    return node_parameters(parameter_table(ros), node_name(ros, default_node)) or {}
