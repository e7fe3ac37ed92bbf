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


#: Where each colour of a 2×2 Bayer cell sits, by ROS pattern name: (row, col) of R, G1, G2, B.
BAYER_SITES = {
    "bayer_rggb8": ((0, 0), (0, 1), (1, 0), (1, 1)),
    "bayer_bggr8": ((1, 1), (0, 1), (1, 0), (0, 0)),
    "bayer_gbrg8": ((1, 0), (0, 0), (1, 1), (0, 1)),
    "bayer_grbg8": ((0, 1), (0, 0), (1, 1), (1, 0)),
}


def convert_rgb(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """RGB uint8 → the raw (rows, W, bytes/px) buffer of a ROS image encoding (what a camera sends).

    The inverse of encodings.to_rgb where one exists: Bayer samples one colour per pixel,
    4:2:0 and 4:2:2 average the chroma, mono16 is value × 257 (little-endian).
    """
    codes = {
        "rgb8": None,
        "bgr8": cv2.COLOR_RGB2BGR,
        "8UC3": cv2.COLOR_RGB2BGR,
        "rgba8": cv2.COLOR_RGB2RGBA,
        "bgra8": cv2.COLOR_RGB2BGRA,
        "mono8": cv2.COLOR_RGB2GRAY,
        "8UC1": cv2.COLOR_RGB2GRAY,
    }
    if encoding in ("yuv422", "uyvy", "yuyv", "yuv422_yuy2"):
        return rgb_to_yuv422(rgb, uyvy=encoding in ("yuv422", "uyvy"))
    if encoding in ("nv12", "nv21"):
        return rgb_to_nv(rgb, uv_order=encoding == "nv12")[:, :, None]
    if encoding in BAYER_SITES:
        return rgb_to_bayer(rgb, encoding)[:, :, None]
    if encoding in ("mono16", "16UC1"):
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype("<u2") * 257
        return gray.view(np.uint8).reshape(*gray.shape, 2)
    if encoding not in codes:
        known = [*codes, "yuv422", "uyvy", "yuyv", "yuv422_yuy2", "nv12", "nv21", *BAYER_SITES, "mono16", "16UC1"]
        raise ValueError(f"cannot make {encoding!r} frames; choose one of {', '.join(known)}")
    out = rgb if codes[encoding] is None else cv2.cvtColor(rgb, codes[encoding])
    return out if out.ndim == 3 else out[:, :, None]


def rgb_to_bayer(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """The mosaic a Bayer sensor with this pattern would record of `rgb` (one colour per pixel)."""
    (ry, rx), (g1y, g1x), (g2y, g2x), (by, bx) = BAYER_SITES[encoding]
    out = np.empty(rgb.shape[:2], np.uint8)
    out[ry::2, rx::2] = rgb[ry::2, rx::2, 0]
    out[g1y::2, g1x::2] = rgb[g1y::2, g1x::2, 1]
    out[g2y::2, g2x::2] = rgb[g2y::2, g2x::2, 1]
    out[by::2, bx::2] = rgb[by::2, bx::2, 2]
    return out


def rgb_yuv601(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float Y, U, V planes: BT.601 studio swing (Y 16–235, chroma centred on 128)."""
    f = rgb.astype(np.float32)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    u = 128 - 0.148 * r - 0.291 * g + 0.439 * b
    v = 128 + 0.439 * r - 0.368 * g - 0.071 * b
    return y, u, v


def rgb_to_nv(rgb: np.ndarray, uv_order: bool) -> np.ndarray:
    """(H × 3/2, W) NV12 (U,V) or NV21 (V,U): the luma plane, then chroma averaged over 2×2 blocks."""
    y, u, v = rgb_yuv601(rgb)
    h, w = y.shape
    if h % 2 or w % 2:
        raise ValueError(f"nv12/nv21 need an even width and height, got {w}x{h}")

    def block_mean(p: np.ndarray) -> np.ndarray:
        return p.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))

    first, second = (block_mean(u), block_mean(v)) if uv_order else (block_mean(v), block_mean(u))
    chroma = np.stack([first, second], axis=-1).reshape(h // 2, w)
    return np.clip(np.round(np.concatenate([y, chroma])), 0, 255).astype(np.uint8)


def rgb_to_yuv422(rgb: np.ndarray, uyvy: bool) -> np.ndarray:
    """Pack RGB as 4:2:2 YUV (BT.601 studio swing, chroma averaged over pixel pairs)."""
    y, u, v = rgb_yuv601(rgb)
    u2 = (u[:, 0::2] + u[:, 1::2]) / 2
    v2 = (v[:, 0::2] + v[:, 1::2]) / 2
    h, w = y.shape
    out = np.empty((h, w // 2, 4), np.float32)
    if uyvy:
        out[..., 0], out[..., 1], out[..., 2], out[..., 3] = u2, y[:, 0::2], v2, y[:, 1::2]
    else:
        out[..., 0], out[..., 1], out[..., 2], out[..., 3] = y[:, 0::2], u2, y[:, 1::2], v2
    return np.clip(np.round(out), 0, 255).astype(np.uint8).reshape(h, w, 2)


def compress_rgb(rgb: np.ndarray, encoding: str, codec: str, quality: int = 90) -> tuple[str, bytes]:
    """(format, data) of a sensor_msgs/CompressedImage as compressed_image_transport (humble) publishes it.

    Colour encodings are compressed as BGR ("<encoding>; jpeg compressed bgr8"), grey ones as
    mono8 for JPEG and unchanged for PNG (the format then ends in "compressed "): the format
    strings of its compressed_publisher.cpp.
    """
    if codec not in ("jpeg", "png"):
        raise ValueError(f"codec must be jpeg or png, got {codec!r}")
    if encoding in ("rgb8", "bgr8", "rgba8", "bgra8"):
        img, target = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), "bgr8"
    elif encoding == "mono8":
        img, target = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), "mono8" if codec == "jpeg" else ""
    else:
        raise ValueError(f"compressed sample frames are rgb8, bgr8, rgba8, bgra8 or mono8, not {encoding!r}")
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if codec == "jpeg" else [cv2.IMWRITE_PNG_COMPRESSION, 1]
    ok, data = cv2.imencode(".jpg" if codec == "jpeg" else ".png", img, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {codec} of a {rgb.shape} image")
    return f"{encoding}; {codec} compressed {target}", data.tobytes()
