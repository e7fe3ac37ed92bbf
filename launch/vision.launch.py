"""ros2 launch openclaw_vision vision.launch.py image_topic:=/camera/image_raw [enable_vlm:=true] [enable_labels:=true]
[enable_memory:=true]
[respawn:=true]

Starts the encoder node with a parameters file (`config`, default config/encoder.yaml); with
enable_vlm:=true, the VLM node with `vlm_config` (default config/vlm.yaml); with
enable_labels:=true, the labels node with `labels_config` (default config/labels.yaml): zero-shot
labels on /visual_labels; with enable_memory:=true, the memory node with `memory_config` (default
config/memory.yaml): /visual_features rows into visual memory (`store`), each row named by its robot
(`robot`). The other arguments override the file's key of the same name, but only when given on the
command line: left unset, the file decides (see
openclaw_vision/ros/launch_args.py for why this matters with launch_ros). Some arguments go to more
than one node (`model`, `output_dim` and `features_topic` to the VLM and labels nodes too, so that
they read the encoder's features of its weights): launch_args.argument_nodes says which, and
`--show-args` prints it.

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
    ARGUMENTS,
    UNSET,
    argument_description,
    memory_overrides,
    node_overrides,
)

PACKAGE = "openclaw_vision"
#: seconds between a node's death and its restart with respawn:=true
RESPAWN_DELAY_S = 2.0


def _share(name: str) -> PathJoinSubstitution:
    return PathJoinSubstitution([FindPackageShare(PACKAGE), "config", name])


def _enabled(context, name: str) -> bool:
    return LaunchConfiguration(name).perform(context).lower() in ("true", "1")


def _node(executable: str, params_file: str, overrides: dict, respawn: bool) -> Node:
    """One of our nodes: its parameters file, then only the arguments the user set. With respawn:=true launch
    starts a node again whenever it ends while launch itself is not shutting down, whatever its exit code (Humble
    launch/actions/execute_local.py: `if not context.is_shutdown and ... self.__respawn`): a node whose threads
    keep failing exits 1 for this (threads.Supervisor); a stop of launch stops them all for good."""
    return Node(
        package=PACKAGE,
        executable=executable,
        name=executable,
        output="screen",
        parameters=[params_file, *([overrides] if overrides else [])],
        respawn=respawn,
        respawn_delay=RESPAWN_DELAY_S if respawn else None,
    )


def _nodes(context) -> list:
    """The nodes, made once the arguments are known: a parameter dict only of what the user set."""
    given = context.launch_configurations
    respawn = _enabled(context, "respawn")
    encoder_params, vlm_params, labels_params = node_overrides(given)
    nodes = [_node("encoder_node", given["config"], encoder_params, respawn)]
    if _enabled(context, "enable_vlm"):
        nodes.append(_node("vlm_node", given["vlm_config"], vlm_params, respawn))
    if _enabled(context, "enable_labels"):
        nodes.append(_node("labels_node", given["labels_config"], labels_params, respawn))
    if _enabled(context, "enable_memory"):
        nodes.append(_node("memory_node", given["memory_config"], memory_overrides(given), respawn))
    return nodes


def generate_launch_description() -> LaunchDescription:
    declared = [
        DeclareLaunchArgument("config", default_value=_share("encoder.yaml"), description="encoder parameters file"),
        DeclareLaunchArgument("vlm_config", default_value=_share("vlm.yaml"), description="VLM parameters file"),
        DeclareLaunchArgument("enable_vlm", default_value="false", description="also start the VLM node"),
        DeclareLaunchArgument(
            "labels_config", default_value=_share("labels.yaml"), description="labels node parameters file"
        ),
        DeclareLaunchArgument("enable_labels", default_value="false", description="also start the labels node"),
        DeclareLaunchArgument(
            "memory_config", default_value=_share("memory.yaml"), description="memory node parameters file"
        ),
        DeclareLaunchArgument("enable_memory", default_value="false", description="also start the memory node"),
        DeclareLaunchArgument(
            "respawn", default_value="false", description="start a node again after it ended by itself (a fault)"
        ),
    ]
    declared += [
        DeclareLaunchArgument(name, default_value=UNSET, description=argument_description(name)) for name in ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_nodes)])
