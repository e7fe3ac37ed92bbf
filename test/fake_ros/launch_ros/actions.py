"""launch_ros.actions.Node (Humble launch_ros/actions/node.py): keyword-only, and the ROS part of
the command line it builds: `--ros-args -r __node:=<name>`, then each `parameters` entry in order,
a path as `--params-file PATH`, a dict as a temporary params file keyed by the node's full name
(`_create_params_file_from_dict`, with values evaluated like `evaluate_parameter_dict`)."""

from __future__ import annotations

import tempfile

import yaml


class Node:
    def __init__(self, *, executable, package=None, name=None, namespace=None, exec_name=None, parameters=None,
                 remappings=None, ros_arguments=None, arguments=None, **kwargs) -> None:  # fmt: skip
        allowed = {"output", "condition", "emulate_tty", "respawn", "respawn_delay", "additional_env", "env"}
        assert set(kwargs) <= allowed, f"unexpected Node arguments: {set(kwargs) - allowed}"
        assert parameters is None or isinstance(parameters, list), "parameters must be a list"
        self.package, self.executable, self.name, self.parameters = package, executable, name, parameters or []

    def ros_arguments(self, tmp_dir: str) -> list[str]:
        args = ["--ros-args"] + (["-r", f"__node:={self.name}"] if self.name else [])
        for entry in self.parameters:
            if isinstance(entry, dict):
                for value in entry.values():  # a scalar, or a list of one scalar type (evaluate_parameter_dict)
                    items = value if isinstance(value, list) else [value]
                    assert all(isinstance(v, (float, int, str, bool, bytes)) for v in items), (
                        f"not a parameter value: {value!r}"
                    )
                    assert len({type(v) for v in items}) <= 1, f"a list of mixed types: {value!r}"
                with tempfile.NamedTemporaryFile("w", prefix="launch_params_", dir=tmp_dir, delete=False) as h:
                    yaml.dump({f"/{self.name}" if self.name else "/**": {"ros__parameters": entry}}, h)
                args += ["--params-file", h.name]
            else:
                args += ["--params-file", str(entry)]
        return args
