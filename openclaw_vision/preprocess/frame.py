"""`Frame`: what the preprocessing stage receives, free of any ROS type.

It lives in `preprocess/` beside the encodings it validates against, so imports read one way:
ros/, quant/, bench/ → preprocess/ (frame → encodings), never back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .encodings import encoding_of, pixel_view, to_rgb


def stamp_to_ns(stamp: Any) -> int:
    """A builtin_interfaces/Time (sec, nanosec) as integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


@dataclass
class Frame:
    """One camera image: a validated uint8 view plus how to read it and when it was taken.

    `pixels` is (rows, W, bytes/px): rows = H, except nv12/nv21 where the H/2 chroma rows follow
    the H luma rows (see encodings.py). `big_endian` matters only for 16-bit encodings.
    """

    pixels: np.ndarray
    encoding: str
    stamp_ns: int = 0
    frame_id: str = ""
    big_endian: bool = False

    @classmethod
    def from_buffer(
        cls,
        data,
        height: int,
        width: int,
        step: int,
        encoding: str,
        stamp_ns: int = 0,
        frame_id: str = "",
        big_endian: bool = False,
    ) -> Frame:
        """Validate raw image bytes (raises FrameError) and wrap them without copying."""
        return cls(pixel_view(data, height, width, step, encoding), encoding, stamp_ns, frame_id, bool(big_endian))

    @classmethod
    def from_message(cls, msg: Any) -> Frame:
        """Validate and wrap anything shaped like sensor_msgs/Image (a DDS sample, an rclpy message, a
        rosbags message) without copying its pixels (raises FrameError)."""
        return cls.from_buffer(
            msg.data,
            int(msg.height),
            int(msg.width),
            int(msg.step),
            str(msg.encoding),
            stamp_ns=stamp_to_ns(msg.header.stamp),
            frame_id=str(msg.header.frame_id),
            big_endian=bool(msg.is_bigendian),
        )

    @classmethod
    def from_rgb(cls, rgb: np.ndarray, stamp_ns: int = 0) -> Frame:
        return cls(np.ascontiguousarray(rgb, dtype=np.uint8), "rgb8", stamp_ns)

    @property
    def height(self) -> int:
        rows = self.pixels.shape[0]
        return rows * 2 // 3 if encoding_of(self.encoding).planar420 else rows

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    def to_rgb(self) -> np.ndarray:
        """The whole frame as contiguous (H, W, 3) RGB uint8 (the conversion in encodings.py)."""
        return to_rgb(self.pixels, self.encoding, self.big_endian)
