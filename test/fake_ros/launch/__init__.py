"""The part of ros2/launch (Humble) that vision.launch.py uses, enough to run its functions.

`LaunchContext.launch_configurations` is the dict DeclareLaunchArgument fills (the command
line's value, else the performed default; an argument with neither is an error, as in
launch/actions/declare_launch_argument.py). Substitutions have `perform(context) -> str`.
"""

from __future__ import annotations


class LaunchContext:
    def __init__(self) -> None:
        self.launch_configurations: dict[str, str] = {}


class LaunchDescription:
    def __init__(self, initial_entities=None) -> None:
        self.entities = list(initial_entities or [])


def perform(context: LaunchContext, value) -> str:
    """A str, a substitution, or a list of them, performed and joined (launch.utilities.perform_substitutions)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "".join(perform(context, v) for v in value)
    return value.perform(context)
