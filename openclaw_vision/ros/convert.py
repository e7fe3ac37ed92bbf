"""Conversions at the ROS boundary: Image/CompressedImage message → Frame, Embedding → VisualFeatures."""

from __future__ import annotations

from typing import Any

from ..preprocess.compressed import CompressedFrame
from ..preprocess.frame import Frame, stamp_to_ns
from .types import VISUAL_FEATURES, Transport

__all__ = ["compressed_to_frame", "features_message", "image_to_frame", "ns_to_stamp", "stamp_to_ns"]


def ns_to_stamp(transport: Transport, ns: int) -> Any:
    return transport.msg("builtin_interfaces/msg/Time")(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


#: Image / CompressedImage sample → Frame / CompressedFrame: the conversions live with the frame
#: types (tools read bag messages without ros/); these are their names at the ROS boundary.
image_to_frame = Frame.from_message
compressed_to_frame = CompressedFrame.from_message


def features_message(transport: Transport, header: Any, model_id: str, vector) -> Any:
    """VisualFeatures carrying the source image's header object unchanged."""
    cls = transport.msg(VISUAL_FEATURES)
    return cls(header=header, model_id=model_id, dim=len(vector), embedding=transport.float_array(vector))
