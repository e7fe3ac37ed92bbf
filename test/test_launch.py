"""vision.launch.py, run without ROS: launch arguments override the parameters file only when set.

ros2's `launch` and `launch_ros` are not on PyPI (the PyPI package named `launch`, 0.1.3 from
2017, is an early prototype without this API), so the launch file runs here against
test/fake_ros/launch*: the Humble API it uses (DeclareLaunchArgument, OpaqueFunction,
LaunchConfiguration, PathJoinSubstitution, FindPackageShare, Node) and the ROS command line
launch_ros builds from `parameters=` (a path → --params-file, a dict → a temporary params file
after it). The node side reads that command line as rcl/rclpy do (ros/ros_args.py), so these
tests follow a value from `ros2 launch` arguments to the node's configuration.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from openclaw_vision.config import EncoderConfig, VlmConfig, ZeroShotConfig
from openclaw_vision.ros.launch_args import (
    ENCODER_ARGUMENTS,
    LABELS_ARGUMENTS,
    UNSET,
    VLM_ARGUMENTS,
    node_overrides,
)
from openclaw_vision.ros.runner import build_config

ROOT = Path(__file__).resolve().parents[1]
FAKE_ROS = Path(__file__).parent / "fake_ros"


def _forget() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in ("launch", "launch_ros", "vision_launch")]:
        del sys.modules[name]


@pytest.fixture()
def launch(monkeypatch, tmp_path):
    """Run vision.launch.py with `ros2 launch`-style arguments; the nodes' ROS command lines."""
    _forget()
    monkeypatch.syspath_prepend(str(FAKE_ROS))
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch_ros import substitutions

    from launch import LaunchContext

    monkeypatch.setitem(substitutions.SHARE_DIRS, "openclaw_vision", str(ROOT))  # the source tree's config/
    spec = importlib.util.spec_from_file_location("vision_launch", ROOT / "launch" / "vision.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def run(**given: str) -> dict[str, list[str]]:
        context, nodes = LaunchContext(), []
        for entity in module.generate_launch_description().entities:
            if isinstance(entity, DeclareLaunchArgument):
                entity.execute(context, given)
            elif isinstance(entity, OpaqueFunction):
                nodes += entity.execute(context)
        return {n.name: [n.executable, *n.ros_arguments(str(tmp_path))] for n in nodes}

    yield run
    _forget()


NODE_CONFIGS = {
    "encoder_node": (EncoderConfig, "encoder.yaml"),
    "vlm_node": (VlmConfig, "vlm.yaml"),
    "zero_shot_node": (ZeroShotConfig, "labels.yaml"),
}


def _config(argv: list[str], node: str):
    cls, yaml_name = NODE_CONFIGS[node]
    return build_config(argv[1:], node, node, cls, yaml_name)[0]


def test_a_users_parameters_file_is_not_overridden_by_unset_arguments(launch, tmp_path):
    mine = tmp_path / "my.yaml"
    mine.write_text(
        "encoder_node:\n  ros__parameters:\n    model: tiny\n    precision: fp32\n    backend: onnxruntime\n"
        "    image_topic: /front/image_raw\n    features_topic: /front/features\n"
    )
    nodes = launch(config=str(mine))
    assert list(nodes) == ["encoder_node"]  # enable_vlm defaults to false
    cfg = _config(nodes["encoder_node"], "encoder_node")
    assert (cfg.model, cfg.precision, cfg.backend) == ("tiny", "fp32", "onnxruntime")
    assert (cfg.image_topic, cfg.features_topic) == ("/front/image_raw", "/front/features")


def test_an_argument_the_user_sets_overrides_the_file(launch, tmp_path):
    mine = tmp_path / "my.yaml"
    mine.write_text("encoder_node:\n  ros__parameters:\n    model: tiny\n    precision: fp32\n")
    cfg = _config(launch(config=str(mine), model="ViT-L-14")["encoder_node"], "encoder_node")
    assert (cfg.model, cfg.precision) == ("ViT-L-14", "fp32")


def test_defaults_come_from_the_shipped_files_and_arguments_reach_both_nodes_typed(launch):
    nodes = launch(enable_vlm="true", features_topic="/f", max_new_tokens="64", image_topic="/cam")
    enc, vlm = _config(nodes["encoder_node"], "encoder_node"), _config(nodes["vlm_node"], "vlm_node")
    assert enc == EncoderConfig(image_topic="/cam", features_topic="/f")
    assert vlm == VlmConfig(features_topic="/f", max_new_tokens=64)
    assert [nodes[n][0] for n in nodes] == ["encoder_node", "vlm_node"]  # the installed executables


def test_the_labels_node_gets_the_encoders_model_and_labels_stay_text(launch):
    nodes = launch(enable_labels="true", model="tiny", labels="yes,1,door", features_topic="/f")
    assert [nodes[n][0] for n in nodes] == ["encoder_node", "zero_shot_node"]
    labels = _config(nodes["zero_shot_node"], "zero_shot_node")
    assert labels == ZeroShotConfig(model="tiny", labels="yes,1,door", features_topic="/f")
    assert _config(nodes["encoder_node"], "encoder_node").model == "tiny"  # both towers of one model


def test_only_set_arguments_become_parameters_typed_as_launch_ros_types_them():
    unset = {name: UNSET for name in (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS)}
    assert node_overrides(unset) == ({}, {}, {})
    enc, vlm, labels = node_overrides(
        {**unset, "model": "ViT-B-16", "max_new_tokens": "64", "features_topic": "/f", "labels": "yes"}
    )
    assert enc == {"model": "ViT-B-16", "features_topic": "/f"}
    assert vlm == {"max_new_tokens": 64, "features_topic": "/f"}
    assert labels == {"labels": "yes", "features_topic": "/f", "model": "ViT-B-16"}  # "yes" is a label, not True


def test_every_overriding_argument_is_a_parameter_of_the_node_it_goes_to():
    assert set(ENCODER_ARGUMENTS) <= set(EncoderConfig.params())
    assert set(VLM_ARGUMENTS) <= set(VlmConfig.params())
    assert set(LABELS_ARGUMENTS) <= set(ZeroShotConfig.params())


def test_the_launch_file_helpers_import_without_ros_or_numpy():
    """ros2 launch runs the launch file with the system Python, outside any venv: keep it light."""
    import subprocess

    code = (
        "import sys, openclaw_vision.ros.launch_args; "
        "heavy = {'numpy', 'cv2', 'onnxruntime', 'rclpy'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_image_topics_argument_gives_the_encoder_a_camera_list(launch):
    nodes = launch(image_topics="[/front/image_raw, /rear/image_raw/compressed]")
    cfg = _config(nodes["encoder_node"], "encoder_node")
    assert cfg.image_topics == ("/front/image_raw", "/rear/image_raw/compressed")
    assert cfg.image_topic == EncoderConfig().image_topic  # the one-camera key is left to the file
