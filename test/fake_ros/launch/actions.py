"""launch.actions.DeclareLaunchArgument and OpaqueFunction (Humble signatures)."""

from __future__ import annotations

from . import LaunchContext, perform


class DeclareLaunchArgument:
    def __init__(self, name: str, *, default_value=None, description: str = "no description given",
                 choices=None, **kwargs) -> None:  # fmt: skip
        self.name, self.default_value, self.description = name, default_value, description

    def execute(self, context: LaunchContext, given: dict[str, str]) -> None:
        if self.name in given:
            context.launch_configurations[self.name] = given[self.name]
        elif self.name not in context.launch_configurations:
            if self.default_value is None:
                raise RuntimeError(f"Required launch argument '{self.name}' was not provided")
            context.launch_configurations[self.name] = perform(context, self.default_value)


class OpaqueFunction:
    def __init__(self, *, function, args=None, kwargs=None, **left_over_kwargs) -> None:
        if not callable(function):
            raise TypeError(f"OpaqueFunction expected a callable for 'function', got '{type(function)}'")
        self.function, self.args, self.kwargs = function, list(args or []), dict(kwargs or {})

    def execute(self, context: LaunchContext):
        return self.function(context, *self.args, **self.kwargs)
