"""rclpy.parameter.Parameter (Humble): a name, a Type inferred from the value, the value."""

from __future__ import annotations

from enum import Enum


class Parameter:
    class Type(Enum):
        NOT_SET = 0
        BOOL = 1
        INTEGER = 2
        DOUBLE = 3
        STRING = 4
        BYTE_ARRAY = 5
        STRING_ARRAY = 9

        @classmethod
        def from_parameter_value(cls, value):
            # bool before int: True is an int in Python, a BOOL parameter in ROS
            for kind, py in ((cls.NOT_SET, type(None)), (cls.BOOL, bool), (cls.INTEGER, int), (cls.DOUBLE, float),
                             (cls.STRING, str)):  # fmt: skip
                if isinstance(value, py):
                    return kind
            # sequences as Humble's rule takes them: all bytes (so also an empty one) first, then all str
            if isinstance(value, list | tuple):
                if all(isinstance(v, bytes) for v in value):
                    return cls.BYTE_ARRAY
                if all(isinstance(v, str) for v in value):
                    return cls.STRING_ARRAY
            raise TypeError(f"The given value is not one of the allowed types '{value}'.")

        def check(self, value) -> bool:
            return Parameter.Type.from_parameter_value(value) == self

    def __init__(self, name, type_=None, value=None):
        if type_ is None:
            type_ = Parameter.Type.from_parameter_value(value)
        if not isinstance(type_, Parameter.Type):
            raise TypeError(f"type must be an instance of '{Parameter.Type!r}'")
        if not type_.check(value):
            raise ValueError(f"Type '{type_}' and value '{value}' do not agree")
        self._type_, self._name, self._value = type_, name, value

    @property
    def name(self):
        return self._name

    @property
    def type_(self):
        return self._type_

    @property
    def value(self):
        return self._value
