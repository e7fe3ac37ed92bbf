"""Conversions at the ROS boundary: Image/CompressedImage message → Frame, Embedding → VisualFeatures."""

from __future__ import annotations

from typing import Any

from ..preprocess.compressed import CompressedFrame
from ..preprocess.frame import Frame
from .types import VISUAL_FEATURES, Transport


def stamp_to_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(transport: Transport, ns: int) -> Any:
    return transport.msg("builtin_interfaces/msg/Time")(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def image_to_frame(msg: Any) -> Frame:
    """Validate and wrap a sensor_msgs/Image without copying its pixels (raises FrameError)."""
    return Frame.from_buffer(
        msg.data,
        int(msg.height),
        int(msg.width),
        int(msg.step),
        str(msg.encoding),
        stamp_ns=stamp_to_ns(msg.header.stamp),
        frame_id=str(msg.header.frame_id),
        big_endian=bool(msg.is_bigendian),
    )


def compressed_to_frame(msg: Any) -> CompressedFrame:
    """Check a sensor_msgs/CompressedImage's format and signature (raises FrameError); decode later."""
    return CompressedFrame.from_buffer(
        msg.data, str(msg.format), stamp_ns=stamp_to_ns(msg.header.stamp), frame_id=str(msg.header.frame_id)
    )


def features_message(transport: Transport, header: Any, model_id: str, vector) -> Any:
    """VisualFeatures carrying the source image's header object unchanged."""
    cls = transport.msg(VISUAL_FEATURES)
    return cls(header=header, model_id=model_id, dim=len(vector), embedding=transport.float_array(vector))
