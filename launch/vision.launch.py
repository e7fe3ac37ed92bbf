"""ros2 launch openclaw_vision vision.launch.py image_topic:=/camera/image_raw [enable_vlm:=true]

Starts the encoder node with a parameters file (`config`, default config/encoder.yaml) and, with
enable_vlm:=true, the VLM node with `vlm_config` (default config/vlm.yaml). The other arguments
override the file's key of the same name, but only when given on the command line: left unset,
the file decides (see openclaw_vision/ros/launch_args.py for why this matters with launch_ros).

Written to the Humble launch API: DeclareLaunchArgument(name, default_value=, description=),
OpaqueFunction(function=) called with the LaunchContext, whose launch_configurations hold every
declared argument (launch/actions/opaque_function.py, launch/launch_context.py), and
launch_ros.actions.Node(package=, executable=, name=, output=, parameters=) (launch_ros/actions/node.py).
"""

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription
from openclaw_vision.ros.launch_args import (
    ENCODER_ARGUMENTS,
    UNSET,
    VLM_ARGUMENTS,
    argument_description,
    node_overrides,
)

PACKAGE = "openclaw_vision"


def _share(name: str) -> PathJoinSubstitution:
    return PathJoinSubstitution([FindPackageShare(PACKAGE), "config", name])


def _nodes(context) -> list:
    """The nodes, made once the arguments are known: a parameter dict only of what the user set."""
    given = context.launch_configurations
    encoder_params, vlm_params = node_overrides(given)
    encoder = Node(
        package=PACKAGE,
        executable="encoder_node",
        name="encoder_node",
        output="screen",
        parameters=[given["config"], *([encoder_params] if encoder_params else [])],
    )
    nodes = [encoder]
    if LaunchConfiguration("enable_vlm").perform(context).lower() in ("true", "1"):
        nodes.append(
            Node(
                package=PACKAGE,
                executable="vlm_node",
                name="vlm_node",
                output="screen",
                parameters=[given["vlm_config"], *([vlm_params] if vlm_params else [])],
            )
        )
    return nodes


def generate_launch_description() -> LaunchDescription:
    declared = [
        DeclareLaunchArgument("config", default_value=_share("encoder.yaml"), description="encoder parameters file"),
        DeclareLaunchArgument("vlm_config", default_value=_share("vlm.yaml"), description="VLM parameters file"),
        DeclareLaunchArgument("enable_vlm", default_value="false", description="also start the VLM node"),
    ]
    declared += [
        DeclareLaunchArgument(name, default_value=UNSET, description=argument_description(name))
        for name in (*ENCODER_ARGUMENTS, *VLM_ARGUMENTS)
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_nodes)])
