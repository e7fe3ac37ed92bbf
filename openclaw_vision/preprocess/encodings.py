"""Raw sensor_msgs/Image pixel layouts → an (H, W, C) uint8 view, validated.

A camera driver's bytes are trusted for nothing: the sizes, the row `step` and the encoding
are checked against each other and a wrong one raises `FrameError` with what was wrong, so a
node can count and log it instead of crashing or encoding garbage.
"""

from __future__ import annotations

import numpy as np

#: encoding → (bytes per pixel, channel layout). yuv422 is UYVY and yuyv is YUY2, as ROS names them.
ENCODINGS: dict[str, tuple[int, str]] = {
    "rgb8": (3, "RGB"),
    "bgr8": (3, "BGR"),
    "rgba8": (4, "RGBA"),
    "bgra8": (4, "BGRA"),
    "mono8": (1, "GRAY"),
    "8UC1": (1, "GRAY"),
    "8UC3": (3, "BGR"),
    "yuv422": (2, "UYVY"),
    "uyvy": (2, "UYVY"),
    "yuv422_yuy2": (2, "YUYV"),
    "yuyv": (2, "YUYV"),
}


class FrameError(ValueError):
    """An image whose bytes do not describe a frame we can use."""


def pixel_view(
    data: bytes | bytearray | memoryview | np.ndarray, height: int, width: int, step: int, encoding: str
) -> np.ndarray:
    """A zero-copy (H, W, bpp) uint8 view of the image bytes, row padding removed."""
    if encoding not in ENCODINGS:
        raise FrameError(f"unsupported encoding {encoding!r}; supported: {', '.join(ENCODINGS)}")
    bpp, layout = ENCODINGS[encoding]
    if height <= 0 or width <= 0:
        raise FrameError(f"empty image {width}x{height}")
    if layout in ("UYVY", "YUYV") and width % 2:
        raise FrameError(f"{encoding} needs an even width, got {width}")
    row = width * bpp
    if step < row:
        raise FrameError(f"step {step} < width*{bpp} = {row} for {encoding}")
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    need = step * height  # sensor_msgs/Image: "size is (step * rows)"; exact integers, no 32-bit wrap
    if buf.size != need:
        raise FrameError(
            f"{buf.size} data bytes, {width}x{height} {encoding} with step {step} needs {need} (step * height)"
        )
    rows = np.lib.stride_tricks.as_strided(buf, shape=(height, row), strides=(step, 1), writeable=False)
    return rows.reshape(height, width, bpp)


_TO_RGB = {
    "RGB": None,
    "BGR": "COLOR_BGR2RGB",
    "RGBA": "COLOR_RGBA2RGB",
    "BGRA": "COLOR_BGRA2RGB",
    "GRAY": "COLOR_GRAY2RGB",
    "UYVY": "COLOR_YUV2RGB_UYVY",
    "YUYV": "COLOR_YUV2RGB_YUY2",
}


def layout_of(encoding: str) -> str:
    return ENCODINGS[encoding][1]


def to_rgb(pixels: np.ndarray, encoding: str) -> np.ndarray:
    """Convert a validated pixel view to contiguous (H, W, 3) RGB uint8 (OpenCV's BT.601 for YUV)."""
    import cv2

    code = _TO_RGB[layout_of(encoding)]
    if code is None:
        return np.ascontiguousarray(pixels)
    src = np.ascontiguousarray(pixels)
    if src.shape[2] == 1:
        src = src[:, :, 0]
    return cv2.cvtColor(src, getattr(cv2, code))
