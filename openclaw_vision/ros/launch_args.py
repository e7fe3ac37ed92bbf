"""Which launch arguments become node parameters: only those the user set (stdlib + PyYAML only).

launch_ros writes a Node's `parameters=[file, {dict}]` dict to a temporary parameters file
placed after `file` on the command line (Humble launch_ros/actions/node.py,
`_create_params_file_from_dict`, keyed by the node's full name), and rcl applies files in order:
every key in the dict overrides the file. So an argument left at its default must not be in the
dict, or `config:=my.yaml` values for those keys are silently replaced. The launch file declares
these arguments with the default UNSET and passes on only the others, typed the way launch_ros
types a substituted value (`yaml.safe_load`, launch_ros/utilities/evaluate_parameters.py).

Kept free of ROS imports so the tests can run it; vision.launch.py imports it at launch time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ..encoders import backends
from ..resources import PRECISIONS

#: the default of every overriding argument: "not set, the parameters file decides"
UNSET = ""

ENCODER_ARGUMENTS = {
    "image_topic": "sensor_msgs/Image topic to encode",
    "image_topics": "several cameras in one node and one batch, e.g. '[/front/image_raw, /rear/image_raw/compressed]'",
    "features_topic": "VisualFeatures topic (the encoder's output, the VLM's input)",
    "model": "named CLIP architecture",
    "output_dim": "embedding width on /visual_features (0: the tower's; e.g. 512: a fitted, gated projection)",
    "backend": " | ".join(backends.choices()),
    "precision": " | ".join(PRECISIONS),
    "triton_url": "backend triton: the server's gRPC HOST:PORT",
}
VLM_ARGUMENTS = {
    "llm": "tiny | tinyllama-1.1b | a Hugging Face Llama folder",
    "prompt_topic": "std_msgs/String questions",
    "answer_topic": "openclaw_vision/VlmAnswer answers",
    "max_new_tokens": "longest answer, in tokens",
}
LABELS_ARGUMENTS = {
    "labels": "comma-separated label set of the labels node",
    "labels_topic": "openclaw_vision/VisualLabels topic",
}
MEMORY_ARGUMENTS = {
    "store": "memory node: store folder or http://HOST:PORT of a Chroma server",
    "text_model": "memory node: text tower ONNX export for text queries (the store's model); unset: vectors only",
}
#: arguments that also set a parameter of another node: the VLM and labels nodes read what the
#: encoder writes, the VLM takes features of the encoder model's width (its output_dim), and the labels
#: node's text tower must be of the encoder's model and projection (its ids must match); the memory node
#: stores what the encoder publishes
VLM_SHARED = ("features_topic", "model", "output_dim")
LABELS_SHARED = ("features_topic", "model", "output_dim")
MEMORY_SHARED = ("features_topic",)
#: arguments taken as text whatever they look like ("yes" or "1" is a label, not a bool or an int; YAML 1.1
#: reads a HOST:PORT such as "10:50" as the base-60 int 650)
TEXT_ARGUMENTS = ("labels", "triton_url", "store", "text_model")


def user_overrides(values: Mapping[str, str], names) -> dict[str, Any]:
    """{parameter: typed value} for the arguments in `names` that the user set (not UNSET)."""
    return {
        name: values[name] if name in TEXT_ARGUMENTS else yaml.safe_load(values[name])
        for name in names
        if values.get(name, UNSET) != UNSET
    }


def node_overrides(values: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(encoder, VLM, labels node) parameters that the launch arguments `values` override."""
    encoder = user_overrides(values, ENCODER_ARGUMENTS)
    vlm = user_overrides(values, (*VLM_ARGUMENTS, *VLM_SHARED))
    labels = user_overrides(values, (*LABELS_ARGUMENTS, *LABELS_SHARED))
    return encoder, vlm, labels


def memory_overrides(values: Mapping[str, str]) -> dict[str, Any]:
    """The memory node's parameters that the launch arguments `values` override."""
    return user_overrides(values, (*MEMORY_ARGUMENTS, *MEMORY_SHARED))


def argument_description(name: str) -> str:
    """What `ros2 launch ... --show-args` says about an overriding argument."""
    what = {**ENCODER_ARGUMENTS, **VLM_ARGUMENTS, **LABELS_ARGUMENTS, **MEMORY_ARGUMENTS}[name]
    return f"{what}; unset: the parameters file's value"
