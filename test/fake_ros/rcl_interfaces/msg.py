"""rcl_interfaces/msg types as Humble's rosidl-generated classes behave: keyword fields only (an
unknown one is an error), defaults from the .msg files, bounded sequences checked."""

from __future__ import annotations

from typing import ClassVar


class _Msg:
    _fields: ClassVar[dict] = {}
    _bounded: ClassVar[dict] = {}

    def __init__(self, **kwargs) -> None:
        unknown = set(kwargs) - set(self._fields)
        assert not unknown, f"Invalid arguments passed to constructor: {', '.join(sorted(unknown))}"
        for name, default in self._fields.items():
            setattr(self, name, kwargs.get(name, list(default) if isinstance(default, list) else default))

    def __setattr__(self, name, value) -> None:
        assert name in self._fields, f"{type(self).__name__} has no field {name}"
        if name in self._bounded:
            kind, bound = self._bounded[name]
            assert len(value) <= bound and all(isinstance(v, kind) for v in value), f"{name}: {value!r}"
        super().__setattr__(name, value)

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and all(getattr(self, f) == getattr(other, f) for f in self._fields)


class FloatingPointRange(_Msg):  # float64 from_value, to_value, step
    _fields: ClassVar[dict] = {"from_value": 0.0, "to_value": 0.0, "step": 0.0}


class IntegerRange(_Msg):  # int64 from_value, to_value; uint64 step
    _fields: ClassVar[dict] = {"from_value": 0, "to_value": 0, "step": 0}

    def __setattr__(self, name, value) -> None:
        assert isinstance(value, int) and -(2**63) <= value < 2**63, f"{name}: int64 expected, got {value!r}"
        assert name != "step" or value >= 0, "step is uint64"
        super().__setattr__(name, value)


class ParameterDescriptor(_Msg):
    _fields: ClassVar[dict] = {
        "name": "",
        "type": 0,
        "description": "",
        "additional_constraints": "",
        "read_only": False,
        "dynamic_typing": False,
        "floating_point_range": [],
        "integer_range": [],
    }
    _bounded: ClassVar[dict] = {"floating_point_range": (FloatingPointRange, 1), "integer_range": (IntegerRange, 1)}


class SetParametersResult(_Msg):
    _fields: ClassVar[dict] = {"successful": False, "reason": ""}


class ParameterType:
    PARAMETER_NOT_SET = 0
    PARAMETER_BOOL = 1
    PARAMETER_INTEGER = 2
    PARAMETER_DOUBLE = 3
    PARAMETER_STRING = 4
