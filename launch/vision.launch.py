"""ros2 launch openclaw_vision vision.launch.py image_topic:=/camera/image_raw [enable_vlm:=true] [enable_labels:=true]

Starts the encoder node with config/encoder.yaml, and with enable_vlm:=true the VLM node with
config/vlm.yaml (questions on /vlm/prompt, answers on /vlm/answer), and with enable_labels:=true
the labels node with config/labels.yaml (zero-shot labels on /visual_labels, with the encoder's
`model`, so both towers are of the same weights). The arguments below override the files' keys.
"""

from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription

# launch argument -> (node parameter, default). Defaults match config/encoder.yaml and config/vlm.yaml.
ENCODER_OVERRIDES = {
    "image_topic": "/camera/image_raw",
    "features_topic": "/visual_features",
    "model": "ViT-B-32",
    "backend": "auto",
    "precision": "int8",
}
VLM_OVERRIDES = {
    "llm": "tiny",
    "prompt_topic": "/vlm/prompt",
    "answer_topic": "/vlm/answer",
    "max_new_tokens": "32",
}
LABELS_OVERRIDES = {
    "labels": "door,forklift,person",
    "labels_topic": "/visual_labels",
}


def _share(name: str) -> PathJoinSubstitution:
    return PathJoinSubstitution([FindPackageShare("openclaw_vision"), "config", name])


def generate_launch_description() -> LaunchDescription:
    declared = [
        DeclareLaunchArgument("config", default_value=_share("encoder.yaml"), description="encoder parameters file"),
        DeclareLaunchArgument("vlm_config", default_value=_share("vlm.yaml"), description="VLM parameters file"),
        DeclareLaunchArgument("enable_vlm", default_value="false", description="also start the VLM node"),
        DeclareLaunchArgument("labels_config", default_value=_share("labels.yaml"), description="labels parameters"),
        DeclareLaunchArgument("enable_labels", default_value="false", description="also start the labels node"),
    ]
    declared += [DeclareLaunchArgument(n, default_value=d) for n, d in {**ENCODER_OVERRIDES, **VLM_OVERRIDES}.items()]
    declared += [DeclareLaunchArgument(n, default_value=d) for n, d in LABELS_OVERRIDES.items()]
    encoder = Node(
        package="openclaw_vision",
        executable="encoder_node",
        name="encoder_node",
        output="screen",
        parameters=[LaunchConfiguration("config"), {n: LaunchConfiguration(n) for n in ENCODER_OVERRIDES}],
    )
    vlm_params = {n: LaunchConfiguration(n) for n in VLM_OVERRIDES}
    vlm_params["features_topic"] = LaunchConfiguration("features_topic")
    vlm = Node(
        package="openclaw_vision",
        executable="vlm_node",
        name="vlm_node",
        output="screen",
        parameters=[LaunchConfiguration("vlm_config"), vlm_params],
        condition=IfCondition(LaunchConfiguration("enable_vlm")),
    )
    # Labels are strings whatever they look like: launch_ros reads a substituted value as YAML
    # (humble, launch_ros/utilities/evaluate_parameters.py) unless ParameterValue fixes its type
    # (launch_ros/parameter_descriptions.py), so a label set such as "yes" or "1" stays a string.
    labels_params = {n: ParameterValue(LaunchConfiguration(n), value_type=str) for n in LABELS_OVERRIDES}
    labels_params["features_topic"] = LaunchConfiguration("features_topic")
    labels_params["model"] = LaunchConfiguration("model")
    labels = Node(
        package="openclaw_vision",
        executable="zero_shot_node",
        name="zero_shot_node",
        output="screen",
        parameters=[LaunchConfiguration("labels_config"), labels_params],
        condition=IfCondition(LaunchConfiguration("enable_labels")),
    )
    return LaunchDescription([*declared, encoder, vlm, labels])
