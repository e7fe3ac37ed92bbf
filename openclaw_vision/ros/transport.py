"""The transport seam: the choice of implementation (the shared types live in types.py).

Two implementations give the same calls: rclpy, when a ROS 2 installation is sourced, and
Cyclone DDS directly (ROS 2's topic names, type names and CDR), when it is not. Message
objects are each implementation's own; both have ROS's field names, so code that reads
`msg.header.stamp.sec` or builds `types.VisualFeatures(header=..., ...)` works on either.

Data flows one way between the modules: types.py ← rclpy_transport.py, cyclone.py ← this
module. The implementations are imported when chosen, so a robot without cyclonedds (or a
laptop without rclpy) never imports the one it lacks.
"""

from __future__ import annotations

import logging

from ..runtime.config import TRANSPORTS
from .types import Transport

log = logging.getLogger(__name__)


def rclpy_available() -> bool:
    try:
        import rclpy  # noqa: F401
    except ImportError:
        return False
    return True


def create_transport(kind: str, node_name: str, args: list[str] | None = None) -> Transport:
    """`auto` takes rclpy when ROS 2 is sourced, else Cyclone DDS; the log says which.

    `args` is the process's command line for rclpy (its `--ros-args`: parameters, remaps);
    None means sys.argv, as `rclpy.init` itself does."""
    if kind not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {kind!r}")
    if kind == "rclpy" or (kind == "auto" and rclpy_available()):
        from .rclpy_transport import RclpyTransport

        transport: Transport = RclpyTransport(node_name, args)
    else:
        from .cyclone import CycloneTransport

        transport = CycloneTransport(node_name)
    log.info("transport: %s (asked for %r)", transport.name, kind)
    return transport
