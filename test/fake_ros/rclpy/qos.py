"""rclpy.qos names the transport uses (Humble rclpy/qos.py)."""

from enum import IntEnum


class ReliabilityPolicy(IntEnum):
    RELIABLE = 1
    BEST_EFFORT = 2


class HistoryPolicy(IntEnum):
    KEEP_LAST = 1
    KEEP_ALL = 2


class DurabilityPolicy(IntEnum):
    TRANSIENT_LOCAL = 1
    VOLATILE = 2


class QoSProfile:
    def __init__(self, **kwargs) -> None:
        assert "history" in kwargs or "depth" in kwargs, "QoSProfile needs history or depth"
        self.__dict__.update(kwargs)
