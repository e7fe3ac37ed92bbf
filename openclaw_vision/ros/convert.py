"""Conversions at the ROS boundary: Image/CompressedImage message → Frame, Embedding → VisualFeatures."""

from __future__ import annotations

from typing import Any

from ..preprocess.compressed import CompressedFrame
from ..preprocess.frame import Frame, stamp_to_ns
from .types import HEADER, TIME, VISUAL_FEATURES, Transport

__all__ = ["compressed_to_frame", "features_message", "image_to_frame", "ns_to_stamp", "ros_header", "stamp_to_ns"]


def ns_to_stamp(transport: Transport, ns: int) -> Any:
    return transport.msg(TIME)(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


#: Image / CompressedImage sample → Frame / CompressedFrame: the conversions live with the frame
#: types (tools read bag messages without ros/); these are their names at the ROS boundary.
image_to_frame = Frame.from_message
compressed_to_frame = CompressedFrame.from_message


def ros_header(transport: Transport, header: Any) -> Any:
    """The transport's own std_msgs/Header with `header`'s stamp and frame_id: an image's header comes as
    cdr's plain Header (or, read by a transport's deserialiser, as that transport's own)."""
    stamp = transport.msg(TIME)(sec=header.stamp.sec, nanosec=header.stamp.nanosec)
    return transport.msg(HEADER)(stamp=stamp, frame_id=header.frame_id)


def features_message(transport: Transport, header: Any, model_id: str, vector) -> Any:
    """VisualFeatures carrying the source image's header: its stamp and frame_id unchanged."""
    cls = transport.msg(VISUAL_FEATURES)
    return cls(header=ros_header(transport, header), model_id=model_id, dim=len(vector),
               embedding=transport.float_array(vector))  # fmt: skip
