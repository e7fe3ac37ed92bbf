"""The types every part of the transport seam shares: QoS, callbacks, type names, protocols (topics and
services).

A module of its own so that the two implementations (rclpy_transport.py, cyclone.py), the nodes
and the chooser (transport.py) all import from here and nothing imports back: transport.py
imports the implementations, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.errors import OpenclawError
from ..runtime.config import RELIABILITIES  # the keys' choices are the config's (runtime/config.py)

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
VISUAL_FEATURES = "openclaw_vision/msg/VisualFeatures"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
DIAGNOSTIC_STATUS = "diagnostic_msgs/msg/DiagnosticStatus"
KEY_VALUE = "diagnostic_msgs/msg/KeyValue"
HEADER = "std_msgs/msg/Header"
TIME = "builtin_interfaces/msg/Time"
STRING = "std_msgs/msg/String"
QUERY_MEMORY = "openclaw_vision/srv/QueryMemory"
#: a service's two messages, as `Transport.msg` names them: QUERY_MEMORY + REQUEST
REQUEST, RESPONSE = "_Request", "_Response"

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
#: handler(request) -> response (`transport.msg(srv_type + RESPONSE)`); called on a thread of the service's
#: own, never a subscription's: it must not raise (an exception is logged and counted, and no reply goes out)
ServiceHandler = Callable[[Any], Any]


class ServiceTimeout(OpenclawError, TimeoutError):
    """No reply came within the call's timeout (no server, or it did not answer)."""


class Publisher(Protocol):
    def publish(self, msg: Any) -> None: ...
    def matched(self) -> int: ...


class Subscription(Protocol):
    #: the subscription's subscription.SampleIntake (every sample passes it; a node may ask it to hold samples)
    intake: Any

    def matched(self) -> int: ...

    def close(self) -> None:
        """Stop delivering samples (a node re-creates its subscription this way to change QoS)."""
        ...


class Service(Protocol):
    #: requests whose handler raised (no reply went out for them)
    failed: int

    def close(self) -> None: ...


class Client(Protocol):
    def ready(self) -> bool:
        """Whether a server of this service is matched (its request reader and reply writer)."""
        ...

    def call(self, request: Any, timeout: float = 10.0) -> Any:
        """Send `request` (`transport.msg(srv_type + REQUEST)`), wait for its reply; ServiceTimeout if none."""
        ...

    def close(self) -> None: ...


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

    def service(self, name: str, srv_type: str, handler: ServiceHandler) -> Service:
        """Answer `srv_type` requests (e.g. QUERY_MEMORY) on service `name`, e.g. '/query_memory'."""
        ...

    def client(self, name: str, srv_type: str) -> Client: ...

    def deserialize(self, raw: bytes, ros_type: str) -> Any: ...

    def serialize(self, msg: Any, ros_type: str) -> bytes: ...

    def close(self) -> None: ...
