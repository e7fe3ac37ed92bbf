"""launch.substitutions.LaunchConfiguration and PathJoinSubstitution (Humble)."""

from __future__ import annotations

import os

from . import LaunchContext, perform


class LaunchConfiguration:
    def __init__(self, variable_name, *, default=None) -> None:
        self.variable_name, self.default = variable_name, default

    def perform(self, context: LaunchContext) -> str:
        if self.variable_name in context.launch_configurations:
            return context.launch_configurations[self.variable_name]
        if self.default is None:
            raise KeyError(f"launch configuration '{self.variable_name}' does not exist")
        return perform(context, self.default)


class PathJoinSubstitution:
    def __init__(self, substitutions) -> None:
        self.substitutions = list(substitutions)

    def perform(self, context: LaunchContext) -> str:
        return os.path.join(*[perform(context, s) for s in self.substitutions])
