"""`Frame`: what the preprocessing stage receives, free of any ROS type."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .preprocess.encodings import pixel_view


@dataclass
class Frame:
    """One camera image: a validated (H, W, bpp) uint8 view plus how to read it and when it was taken."""

    pixels: np.ndarray
    encoding: str
    stamp_ns: int = 0
    frame_id: str = ""

    @classmethod
    def from_buffer(
        cls, data, height: int, width: int, step: int, encoding: str, stamp_ns: int = 0, frame_id: str = ""
    ) -> Frame:
        """Validate raw image bytes (raises FrameError) and wrap them without copying."""
        return cls(pixel_view(data, height, width, step, encoding), encoding, stamp_ns, frame_id)

    @classmethod
    def from_rgb(cls, rgb: np.ndarray, stamp_ns: int = 0) -> Frame:
        return cls(np.ascontiguousarray(rgb, dtype=np.uint8), "rgb8", stamp_ns)

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]
