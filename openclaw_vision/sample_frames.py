"""Camera-like 1080p frames made from real photographs (the ones scikit-image ships).

The photographs are scaled to the frame height and laid side by side into one wide strip;
a virtual camera pans across it (and back), so consecutive frames overlap but differ, as a
robot's camera does when it turns. Real photographs matter: random pixels hide aliasing
and quantisation damage that natural images show.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import cv2
import numpy as np

PHOTOS = ("astronaut", "coffee", "rocket", "chelsea", "hubble_deep_field", "immunohistochemistry")


def panorama(height: int) -> np.ndarray:
    """The photographs at `height` pixels tall, side by side, RGB uint8."""
    import skimage.data

    tiles = []
    for name in PHOTOS:
        img = getattr(skimage.data, name)()
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        img = img[:, :, :3]
        w = round(img.shape[1] * height / img.shape[0])
        tiles.append(cv2.resize(img, (w, height), interpolation=cv2.INTER_CUBIC))
    return np.ascontiguousarray(np.concatenate(tiles, axis=1))


def pan_frames(count: int, width: int = 1920, height: int = 1080) -> Iterator[np.ndarray]:
    """`count` RGB frames of a camera panning across the panorama and back (a smooth sweep)."""
    strip = panorama(height)
    if strip.shape[1] < width:
        strip = np.concatenate([strip] * (width // strip.shape[1] + 1), axis=1)
    travel = strip.shape[1] - width
    for i in range(count):
        phase = i / max(count - 1, 1)
        x = round(travel * 0.5 * (1 - math.cos(2 * math.pi * phase)))
        yield strip[:, x : x + width]


def convert_rgb(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """RGB uint8 → the packed layout of a ROS image encoding (the inverse of to_rgb)."""
    codes = {
        "rgb8": None,
        "bgr8": cv2.COLOR_RGB2BGR,
        "rgba8": cv2.COLOR_RGB2RGBA,
        "bgra8": cv2.COLOR_RGB2BGRA,
        "mono8": cv2.COLOR_RGB2GRAY,
    }
    if encoding in ("yuv422", "uyvy", "yuyv", "yuv422_yuy2"):
        return rgb_to_yuv422(rgb, uyvy=encoding in ("yuv422", "uyvy"))
    if encoding not in codes:
        raise ValueError(f"cannot make {encoding!r} frames; choose one of {', '.join([*codes, 'yuv422', 'yuyv'])}")
    out = rgb if codes[encoding] is None else cv2.cvtColor(rgb, codes[encoding])
    return out if out.ndim == 3 else out[:, :, None]


def rgb_to_yuv422(rgb: np.ndarray, uyvy: bool) -> np.ndarray:
    """Pack RGB as 4:2:2 YUV (BT.601 studio swing, chroma averaged over pixel pairs)."""
    f = rgb.astype(np.float32)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    u = 128 - 0.148 * r - 0.291 * g + 0.439 * b
    v = 128 + 0.439 * r - 0.368 * g - 0.071 * b
    u2 = (u[:, 0::2] + u[:, 1::2]) / 2
    v2 = (v[:, 0::2] + v[:, 1::2]) / 2
    h, w = y.shape
    out = np.empty((h, w // 2, 4), np.float32)
    if uyvy:
        out[..., 0], out[..., 1], out[..., 2], out[..., 3] = u2, y[:, 0::2], v2, y[:, 1::2]
    else:
        out[..., 0], out[..., 1], out[..., 2], out[..., 3] = y[:, 0::2], u2, y[:, 1::2], v2
    return np.clip(np.round(out), 0, 255).astype(np.uint8).reshape(h, w, 2)
