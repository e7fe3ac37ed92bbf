"""ROS 2 through rclpy, for a robot with Humble sourced.

Written to rclpy's documented API. Subscriptions take raw CDR and deserialise in the
callback, so the node can time deserialisation the same way on both transports.
"""

from __future__ import annotations

import array
import importlib
import threading
import time
from typing import Any

from .transport import Callback, QoS


def _profile(q: QoS):
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        reliability=ReliabilityPolicy.RELIABLE if q.reliability == "reliable" else ReliabilityPolicy.BEST_EFFORT,
        history=HistoryPolicy.KEEP_ALL if q.history == "keep_all" else HistoryPolicy.KEEP_LAST,
        depth=q.depth,
        durability=DurabilityPolicy.VOLATILE,
    )


class _Publisher:
    def __init__(self, pub) -> None:
        self._pub = pub

    def publish(self, msg: Any) -> None:
        self._pub.publish(msg)

    def matched(self) -> int:
        return int(self._pub.get_subscription_count())


class _Subscription:
    def __init__(self, node, topic: str) -> None:
        self._node, self._topic = node, topic

    def matched(self) -> int:
        return int(self._node.count_publishers(self._topic))


class RclpyTransport:
    name = "rclpy"

    def __init__(self, node_name: str) -> None:
        import rclpy
        from rclpy.executors import MultiThreadedExecutor

        if not rclpy.ok():
            rclpy.init()
        self.node = rclpy.create_node(node_name)
        self._executor = MultiThreadedExecutor()
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, name="rclpy-spin", daemon=True)
        self._thread.start()

    def msg(self, ros_type: str) -> type:
        pkg, kind, name = ros_type.split("/")
        return getattr(importlib.import_module(f"{pkg}.{kind}"), name)

    def float_array(self, values) -> Any:
        import numpy as np

        return array.array("f", np.asarray(values, np.float32).tobytes())

    def publisher(self, topic: str, ros_type: str, qos: QoS) -> _Publisher:
        return _Publisher(self.node.create_publisher(self.msg(ros_type), topic, _profile(qos)))

    def subscribe(self, topic: str, ros_type: str, qos: QoS, callback: Callback) -> _Subscription:
        from rclpy.serialization import deserialize_message

        cls = self.msg(ros_type)

        def on_raw(raw: bytes) -> None:
            t0 = time.perf_counter()
            msg = deserialize_message(raw, cls)
            callback(msg, time.perf_counter() - t0)

        self.node.create_subscription(cls, topic, on_raw, _profile(qos), raw=True)
        return _Subscription(self.node, topic)

    def deserialize(self, raw: bytes, ros_type: str) -> Any:
        from rclpy.serialization import deserialize_message

        return deserialize_message(raw, self.msg(ros_type))

    def serialize(self, msg: Any, ros_type: str) -> bytes:
        from rclpy.serialization import serialize_message

        return bytes(serialize_message(msg))

    def declare_parameters(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """Declare each config key as a ROS parameter and return the values in force."""
        return {key: self.node.declare_parameter(key, value).value for key, value in defaults.items()}

    def on_parameters_set(self, apply) -> None:
        """Call `apply({name: value})` before parameters change (`ros2 param set`); a ConfigError it raises
        refuses the change, with its message as the reason.

        rclpy (humble, rclpy/node.py): `add_on_set_parameters_callback` callbacks get the list of
        `Parameter`s before they are set and return `rcl_interfaces.msg.SetParametersResult`;
        `successful=False` refuses the whole set and `reason` goes back to the caller. The
        docstring there asks not to refuse names one does not know: `apply` ignores them.
        """
        from rcl_interfaces.msg import SetParametersResult

        from ..config import ConfigError

        def on_set(params) -> SetParametersResult:
            try:
                apply({p.name: p.value for p in params})
            except ConfigError as err:
                return SetParametersResult(successful=False, reason=str(err))
            return SetParametersResult(successful=True)

        self.node.add_on_set_parameters_callback(on_set)

    def set_parameters(self, values: dict) -> str | None:
        """Set declared parameters together, the callbacks run once for all; None, or why they were refused.

        rclpy (humble, rclpy/node.py): `Node.set_parameters_atomically(list[Parameter])` calls the
        on-set callbacks once with the whole list and returns one SetParametersResult."""
        from rclpy.parameter import Parameter

        result = self.node.set_parameters_atomically([Parameter(k, value=v) for k, v in values.items()])
        return None if result.successful else result.reason

    def close(self) -> None:
        import rclpy

        self._executor.shutdown()
        self.node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
