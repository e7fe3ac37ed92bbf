"""The launch file's rule, without ROS: launch arguments become node parameters only when set.

What `ros2 launch openclaw_vision vision.launch.py …` then does with them on a real Humble (the
parameters file, then the arguments the user set, on each node) is the ros2 tier's
(test/ros2/test_ros2_launch.py); these tests keep the rule itself checked where no Humble is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from openclaw_vision.ros.launch_args import (
    ENCODER_ARGUMENTS,
    LABELS_ARGUMENTS,
    LABELS_SHARED,
    UNSET,
    VLM_ARGUMENTS,
    VLM_SHARED,
    node_overrides,
)
from openclaw_vision.runtime.config import EncoderConfig, LabelsConfig, VlmConfig

ROOT = Path(__file__).resolve().parents[1]


def test_only_set_arguments_become_parameters_typed_as_launch_ros_types_them():
    unset = {name: UNSET for name in (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS)}
    assert node_overrides(unset) == ({}, {}, {})
    enc, vlm, labels = node_overrides(
        {**unset, "model": "ViT-B-16", "max_new_tokens": "64", "features_topic": "/f", "labels": "yes"}
    )
    assert enc == {"model": "ViT-B-16", "features_topic": "/f"}
    assert vlm == {"max_new_tokens": 64, "features_topic": "/f", "model": "ViT-B-16"}  # features of its width
    assert labels == {"labels": "yes", "features_topic": "/f", "model": "ViT-B-16"}  # "yes" is a label, not True


def test_every_overriding_argument_is_a_parameter_of_the_node_it_goes_to():
    assert set(ENCODER_ARGUMENTS) <= set(EncoderConfig.params())
    assert set(VLM_ARGUMENTS) | set(VLM_SHARED) <= set(VlmConfig.params())
    assert set(LABELS_ARGUMENTS) | set(LABELS_SHARED) <= set(LabelsConfig.params())


def test_each_argument_says_what_its_parameter_says_choices_and_all():
    """`--show-args` reads config.Param: the one text, so the two cannot drift (llm names .gguf files, precision
    lists resources.PRECISIONS)."""
    from openclaw_vision.core.resources import PRECISIONS
    from openclaw_vision.ros.launch_args import MEMORY_ARGUMENTS, NODE_ARGUMENTS, argument_description

    for name in (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS, *MEMORY_ARGUMENTS):
        cls = next(cls for cls, names in NODE_ARGUMENTS.values() if name in names)
        spec, text = cls.params()[name], argument_description(name)
        assert (
            spec.description in text
            and spec.range_text() in text
            and text.endswith("unset: the parameters file's value")
        ), name
        assert text.startswith(" | ".join(spec.choices)), name
    assert ".gguf" in argument_description("llm")
    assert argument_description("precision").startswith(" | ".join(PRECISIONS) + ";")
    assert "goes to encoder_node, vlm_node, labels_node, memory_node" in argument_description("features_topic")
    assert "'[/front/image_raw, /rear/image_raw/compressed]'" in argument_description("image_topics")


def test_the_launch_file_helpers_import_without_ros_or_numpy():
    """ros2 launch runs the launch file with the system Python, outside any venv: keep it light."""
    import subprocess

    code = (
        "import sys, openclaw_vision.ros.launch_args; "
        "heavy = {'numpy', 'cv2', 'onnxruntime', 'rclpy'} & set(sys.modules); assert not heavy, heavy; "
        "assert 'openclaw_vision.runtime.config' in sys.modules  # the descriptions' source, light too"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_image_topics_argument_gives_the_encoder_a_camera_list():
    unset = {name: UNSET for name in (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS)}
    enc, _, _ = node_overrides({**unset, "image_topics": "[/front/image_raw, /rear/image_raw/compressed]"})
    assert enc == {"image_topics": ["/front/image_raw", "/rear/image_raw/compressed"]}  # a YAML list: a string array
    cfg = EncoderConfig.from_dict(enc).validate()
    assert cfg.image_topics == ("/front/image_raw", "/rear/image_raw/compressed")
    assert cfg.image_topic == EncoderConfig().image_topic  # the one-camera key is left to the file


def test_memory_arguments_go_to_the_memory_node_only_when_set():
    from openclaw_vision.ros.launch_args import MEMORY_ARGUMENTS, MEMORY_SHARED, memory_overrides
    from openclaw_vision.runtime.config import MemoryConfig

    assert set(MEMORY_ARGUMENTS) | set(MEMORY_SHARED) <= set(MemoryConfig.params())
    assert memory_overrides({"store": UNSET, "features_topic": UNSET}) == {}
    # a server URL stays text (YAML would read "10:50" as a base-60 int)
    assert memory_overrides({"store": "http://10.0.0.5:8000", "features_topic": "/f"}) == {
        "store": "http://10.0.0.5:8000",
        "features_topic": "/f",
    }
    assert memory_overrides({"text_model": "/models/ViT-B-32.text.fp32.onnx"}) == {  # a path stays text
        "text_model": "/models/ViT-B-32.text.fp32.onnx"
    }
    # robot:= names the rows' robot; a name YAML would read as an int or a bool stays the name
    assert memory_overrides({"robot": "7", "store": UNSET}) == {"robot": "7"}
    assert memory_overrides({"robot": "on"}) == {"robot": "on"}
    assert MemoryConfig.from_dict(memory_overrides({"robot": "7"})).validate().robot == "7"


def test_each_argument_names_the_nodes_it_sets_once():
    """What `--show-args` and the docs' launch table say an argument reaches is argument_nodes: every node whose
    configuration has that key, the owning one first; "goes to" only for an argument that sets more than one."""
    from openclaw_vision.ros.launch_args import ARGUMENTS, NODE_ARGUMENTS, argument_description, argument_nodes

    assert len(set(ARGUMENTS)) == len(ARGUMENTS)
    for name in ARGUMENTS:
        nodes = argument_nodes(name)
        assert nodes and all(name in NODE_ARGUMENTS[n][0].params() for n in nodes), name
        assert ("goes to " + ", ".join(nodes) in argument_description(name)) == (len(nodes) > 1), name
    assert argument_nodes("model") == ["encoder_node", "vlm_node", "labels_node"]
    assert argument_nodes("llm") == ["vlm_node"]
