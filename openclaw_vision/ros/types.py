"""The types every part of the transport seam shares: QoS, callbacks, type names, protocols.

A module of its own so that the two implementations (rclpy_transport.py, cyclone.py), the nodes
and the chooser (transport.py) all import from here and nothing imports back: transport.py
imports the implementations, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import RELIABILITIES  # the keys' choices are the config's (config.py)

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
VISUAL_FEATURES = "openclaw_vision/msg/VisualFeatures"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
DIAGNOSTIC_STATUS = "diagnostic_msgs/msg/DiagnosticStatus"
KEY_VALUE = "diagnostic_msgs/msg/KeyValue"
HEADER = "std_msgs/msg/Header"
TIME = "builtin_interfaces/msg/Time"
STRING = "std_msgs/msg/String"

HISTORIES = ("keep_last", "keep_all")


@dataclass(frozen=True)
class QoS:
    """The QoS settings we use; matching depends on reliability and durability, never depth."""

    reliability: str = "reliable"
    depth: int = 10
    history: str = "keep_last"

    def __post_init__(self) -> None:
        if self.reliability not in RELIABILITIES:
            raise ValueError(f"reliability must be one of {RELIABILITIES}, got {self.reliability!r}")
        if self.history not in HISTORIES:
            raise ValueError(f"history must be one of {HISTORIES}, got {self.history!r}")
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")


DEFAULT = QoS("reliable", 10)

#: callback(message, deserialise_seconds)
Callback = Callable[[Any, float], None]


class Publisher(Protocol):
    def publish(self, msg: Any) -> None: ...
    def matched(self) -> int: ...


class Subscription(Protocol):
    def matched(self) -> int: ...

    def close(self) -> None:
        """Stop delivering samples (a node re-creates its subscription this way to change QoS)."""
        ...


class Transport(Protocol):
    name: str

    def msg(self, ros_type: str) -> type:
        """The message class for a ROS type name, e.g. 'sensor_msgs/msg/Image'."""
        ...

    def float_array(self, values) -> Any:
        """A float32[] field value this transport's messages accept, from a NumPy vector."""
        ...

    def publisher(self, topic: str, ros_type: str, qos: QoS) -> Publisher: ...

    def subscribe(self, topic: str, ros_type: str, qos: QoS, callback: Callback) -> Subscription: ...

    def deserialize(self, raw: bytes, ros_type: str) -> Any: ...

    def serialize(self, msg: Any, ros_type: str) -> bytes: ...

    def close(self) -> None: ...
