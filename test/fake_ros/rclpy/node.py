"""rclpy.node.Node's parameter rules (Humble rclpy/node.py), the rest inert.

- declare_parameter(name, value, descriptor, ignore_override): the type comes from the value
  unless descriptor.dynamic_typing; a command-line override replaces the value; the descriptor
  is applied (type, ranges; read_only is NOT checked at declaration); the on-set callbacks run;
  a "Wrong parameter type" result raises InvalidParameterTypeException, any other refusal
  InvalidParameterValueException.
- set_parameters: undeclared → ParameterNotDeclaredException; read_only → refused with
  'Trying to set a read-only parameter: <name>.'; then type and range; then the callbacks
  (newest first); a refusal is a result, not an exception.
- A TimeSource declares use_sim_time (bool) at creation and adds its own callback.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from .exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterAlreadyDeclaredException,
    ParameterNotDeclaredException,
)
from .parameter import Parameter

REL_TOL = 1e-6  # Node.PARAM_REL_TOL


def _overrides(node_name: str, args: list[str]) -> dict:
    """-p name:=value and --params-file sections for '/**' or this node, in command-line order."""
    out, ros, inside = {}, [], False
    for a in args:
        if a == "--ros-args":
            inside = True
        elif a == "--" and inside:
            inside = False
        elif inside:
            ros.append(a)
    for i in range(len(ros) - 1):
        flag, value = ros[i], ros[i + 1]
        if flag in ("-p", "--param"):
            name, _, text = value.partition(":=")
            out[name] = yaml.safe_load(text)
        elif flag == "--params-file":
            doc = yaml.safe_load(Path(value).read_text()) or {}
            for key in doc:
                if key in ("/**", node_name, "/" + node_name):
                    out.update(doc[key]["ros__parameters"])
    return out


class Node:
    def __init__(self, node_name: str, args: list[str]) -> None:
        self._name = node_name
        self._parameters: dict[str, Parameter] = {}
        self._descriptors: dict[str, ParameterDescriptor] = {}
        self._parameters_callbacks = []
        self._parameter_overrides = {k: Parameter(k, value=v) for k, v in _overrides(node_name, args).items()}
        self.subscriptions, self.publishers, self.destroyed = [], [], False
        self.declare_parameter("use_sim_time", False)  # TimeSource(node=self)
        self.add_on_set_parameters_callback(self._time_source_callback)

    def get_name(self) -> str:
        return self._name

    # parameters ------------------------------------------------------------------------
    def declare_parameter(self, name, value=None, descriptor=None, ignore_override=False) -> Parameter:
        descriptor = ParameterDescriptor() if descriptor is None else descriptor
        if name in self._parameters:
            raise ParameterAlreadyDeclaredException([name])
        if not descriptor.dynamic_typing and value is not None:
            descriptor.type = Parameter.Type.from_parameter_value(value).value
        if not ignore_override and name in self._parameter_overrides:
            value = self._parameter_overrides[name].value
        param = Parameter(name, value=value)
        result = self._set_atomically([param], {name: descriptor}, check_read_only=False)
        if not result.successful:
            if result.reason.startswith("Wrong parameter type"):
                raise InvalidParameterTypeException(param, Parameter.Type(descriptor.type).name)
            raise InvalidParameterValueException(name, value, result.reason)
        return self._parameters[name]

    def has_parameter(self, name) -> bool:
        return name in self._parameters

    def get_parameter(self, name) -> Parameter:
        if name not in self._parameters:
            raise ParameterNotDeclaredException(name)
        return self._parameters[name]

    def describe_parameter(self, name) -> ParameterDescriptor:
        if name not in self._descriptors:
            raise ParameterNotDeclaredException(name)
        return self._descriptors[name]

    def set_parameters(self, parameter_list) -> list[SetParametersResult]:
        results = []
        for param in parameter_list:
            if param.name not in self._parameters:
                raise ParameterNotDeclaredException([param.name])
            results.append(self._set_atomically([param], None, check_read_only=True))
        return results

    def set_parameters_atomically(self, parameter_list) -> SetParametersResult:
        """Humble rclpy/node.py: every parameter declared (else ParameterNotDeclaredException, nothing
        set), then one pass of descriptors and callbacks for the whole list: all set or none."""
        missing = [p.name for p in parameter_list if p.name not in self._parameters]
        if missing:
            raise ParameterNotDeclaredException(missing)
        return self._set_atomically(list(parameter_list), None, check_read_only=True)

    def add_on_set_parameters_callback(self, callback) -> None:
        self._parameters_callbacks.insert(0, callback)

    def _set_atomically(self, params, descriptors, check_read_only) -> SetParametersResult:
        for p in params:
            d = descriptors[p.name] if descriptors is not None else self._descriptors[p.name]
            result = self._apply_descriptor(p, d, check_read_only)
            if not result.successful:
                return result
        for callback in self._parameters_callbacks:
            result = callback(params)
            if not result.successful:
                return result
        for p in params:
            if descriptors is not None:
                self._descriptors[p.name] = descriptors[p.name]
            self._parameters[p.name] = p
        return SetParametersResult(successful=True)

    def _apply_descriptor(self, p: Parameter, d: ParameterDescriptor, check_read_only: bool) -> SetParametersResult:
        d.name = p.name
        if check_read_only and d.read_only:
            return SetParametersResult(successful=False, reason=f"Trying to set a read-only parameter: {p.name}.")
        if d.dynamic_typing:
            d.type = p.type_.value
        elif p.type_ != Parameter.Type.NOT_SET and p.type_.value != d.type:
            return SetParametersResult(
                successful=False,
                reason=f"Wrong parameter type, expected '{Parameter.Type(d.type)}' got '{p.type_}'",
            )
        if p.type_ == Parameter.Type.INTEGER and d.integer_range:
            r = d.integer_range[0]
            lo, hi = min(r.from_value, r.to_value), max(r.from_value, r.to_value)
            if p.value not in (lo, hi) and not lo < p.value < hi:
                return SetParametersResult(
                    successful=False, reason=f"Parameter {p.name} out of range. Min: {lo}, Max: {hi}, value: {p.value}"
                )
            if r.step and p.value not in (lo, hi) and (p.value - lo) % r.step:
                return SetParametersResult(successful=False, reason=f"The value for {p.name} is not a valid step")
        if p.type_ == Parameter.Type.DOUBLE and d.floating_point_range:
            r = d.floating_point_range[0]
            lo, hi = min(r.from_value, r.to_value), max(r.from_value, r.to_value)
            edge = math.isclose(p.value, lo, rel_tol=REL_TOL) or math.isclose(p.value, hi, rel_tol=REL_TOL)
            if not edge and not lo < p.value < hi:
                return SetParametersResult(
                    successful=False, reason=f"Parameter {p.name} out of range Min: {lo}, Max: {hi}, value: {p.value}"
                )
        return SetParametersResult(successful=True)

    def _time_source_callback(self, params) -> SetParametersResult:
        for p in params:
            if p.name == "use_sim_time" and p.type_ != Parameter.Type.BOOL:
                return SetParametersResult(successful=False, reason="use_sim_time parameter must be a bool")
        return SetParametersResult(successful=True)

    # inert entities ---------------------------------------------------------------------
    def create_publisher(self, msg_type, topic, qos_profile, **kwargs):
        pub = _Entity(topic)
        self.publishers.append(pub)
        return pub

    def create_subscription(self, msg_type, topic, callback, qos_profile, *, raw=False, **kwargs):
        sub = _Entity(topic, qos_profile)
        self.subscriptions.append(sub)
        return sub

    def destroy_subscription(self, subscription) -> bool:
        if subscription in self.subscriptions:
            self.subscriptions.remove(subscription)
            return True
        return False

    def count_publishers(self, topic) -> int:
        return 0

    def destroy_node(self) -> None:
        self.destroyed = True


class _Entity:
    def __init__(self, topic, qos=None) -> None:
        self.topic, self.qos = topic, qos

    def get_subscription_count(self) -> int:
        return 0
