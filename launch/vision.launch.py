"""ros2 launch openclaw_vision vision.launch.py image_topic:=/camera/image_raw

Starts the encoder node with config/encoder.yaml; the arguments below override its keys.
"""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription

# launch argument -> (encoder node parameter, default). Defaults match config/encoder.yaml.
OVERRIDES = {
    "image_topic": "/camera/image_raw",
    "features_topic": "/visual_features",
    "model": "ViT-B-32",
    "backend": "auto",
    "precision": "int8",
}


def generate_launch_description() -> LaunchDescription:
    config = DeclareLaunchArgument(
        "config",
        default_value=PathJoinSubstitution([FindPackageShare("openclaw_vision"), "config", "encoder.yaml"]),
        description="ROS 2 parameters file for the encoder node",
    )
    args = [DeclareLaunchArgument(name, default_value=default) for name, default in OVERRIDES.items()]
    encoder = Node(
        package="openclaw_vision",
        executable="encoder_node",
        name="encoder_node",
        output="screen",
        parameters=[LaunchConfiguration("config"), {name: LaunchConfiguration(name) for name in OVERRIDES}],
    )
    return LaunchDescription([config, *args, encoder])
