"""Which launch arguments become node parameters: only those the user set (stdlib + PyYAML only).

launch_ros writes a Node's `parameters=[file, {dict}]` dict to a temporary parameters file
placed after `file` on the command line (Humble launch_ros/actions/node.py,
`_create_params_file_from_dict`, keyed by the node's full name), and rcl applies files in order:
every key in the dict overrides the file. So an argument left at its default must not be in the
dict, or `config:=my.yaml` values for those keys are silently replaced. The launch file declares
these arguments with the default UNSET and passes on only the others, typed the way launch_ros
types a substituted value (`yaml.safe_load`, launch_ros/utilities/evaluate_parameters.py).

Kept free of ROS and NumPy imports (runtime/config.py is too) so the tests can run it; vision.launch.py imports it at
launch time, on the system Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..runtime import config as cfgmod

#: the default of every overriding argument: "not set, the parameters file decides"
UNSET = ""

#: The overriding arguments of each node, by name: each is a key of that node's configuration, and what
#: `--show-args` says about it is that key's `config.Param` (argument_description), never a second text.
ENCODER_ARGUMENTS = ("image_topic", "image_topics", "features_topic", "model", "output_dim", "backend", "precision",
                     "triton_url")  # fmt: skip
VLM_ARGUMENTS = ("llm", "prompt_topic", "answer_topic", "max_new_tokens")
LABELS_ARGUMENTS = ("labels", "labels_topic")
MEMORY_ARGUMENTS = ("store", "text_model", "robot")
#: arguments that also set a parameter of another node: the VLM and labels nodes read what the
#: encoder writes, the VLM takes features of the encoder model's width (its output_dim), and the labels
#: node's text tower must be of the encoder's model and projection (its ids must match); the memory node
#: stores what the encoder publishes
VLM_SHARED = ("features_topic", "model", "output_dim")
LABELS_SHARED = ("features_topic", "model", "output_dim")
MEMORY_SHARED = ("features_topic",)
#: arguments taken as text whatever they look like ("yes" or "1" is a label, not a bool or an int; YAML 1.1
#: reads a HOST:PORT such as "10:50" as the base-60 int 650; a robot named 7 or "on" is that name, not an int or True)
TEXT_ARGUMENTS = ("labels", "triton_url", "store", "text_model", "robot")
#: node → (its configuration, every argument that sets one of its parameters), in launch order
NODE_ARGUMENTS = {
    "encoder_node": (cfgmod.EncoderConfig, ENCODER_ARGUMENTS),
    "vlm_node": (cfgmod.VlmConfig, (*VLM_ARGUMENTS, *VLM_SHARED)),
    "labels_node": (cfgmod.LabelsConfig, (*LABELS_ARGUMENTS, *LABELS_SHARED)),
    "memory_node": (cfgmod.MemoryConfig, (*MEMORY_ARGUMENTS, *MEMORY_SHARED)),
}
#: every overriding argument, in the order the launch file declares them
ARGUMENTS = (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS, *MEMORY_ARGUMENTS)


def argument_nodes(name: str) -> list[str]:
    """The nodes whose parameter the argument `name` sets, in launch order (the first is the one it belongs to)."""
    return [node for node, (_, names) in NODE_ARGUMENTS.items() if name in names]


def user_overrides(values: Mapping[str, str], names) -> dict[str, Any]:
    """{parameter: typed value} for the arguments in `names` that the user set (not UNSET)."""
    return {
        name: values[name] if name in TEXT_ARGUMENTS else yaml.safe_load(values[name])
        for name in names
        if values.get(name, UNSET) != UNSET
    }


def node_overrides(values: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(encoder, VLM, labels node) parameters that the launch arguments `values` override."""
    encoder, vlm, labels = (user_overrides(values, NODE_ARGUMENTS[node][1])
                            for node in ("encoder_node", "vlm_node", "labels_node"))  # fmt: skip
    return encoder, vlm, labels


def memory_overrides(values: Mapping[str, str]) -> dict[str, Any]:
    """The memory node's parameters that the launch arguments `values` override."""
    return user_overrides(values, NODE_ARGUMENTS["memory_node"][1])


def argument_description(name: str) -> str:
    """What `ros2 launch ... --show-args` says about an overriding argument: the parameter's own `Param`
    (choices first, description, range) of the node whose argument it is, the other nodes it also sets,
    and that leaving it unset keeps the parameters file's value."""
    reaches = argument_nodes(name)
    cls = NODE_ARGUMENTS[reaches[0]][0]
    spec, default = cls.params()[name], getattr(cls(), name)
    parts = [" | ".join(spec.choices)] if spec.choices else []
    parts += [spec.description, *([spec.range_text()] if spec.range_text() else [])]
    if isinstance(default, tuple):  # a string array: launch_ros reads the argument as YAML
        parts.append("a YAML list, e.g. '[/front/image_raw, /rear/image_raw/compressed]'")
    if len(reaches) > 1:
        parts.append(f"goes to {', '.join(reaches)}")
    return "; ".join([*parts, "unset: the parameters file's value"])
