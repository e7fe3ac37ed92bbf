"""Camera-like 1080p frames made from real photographs (the ones scikit-image ships).

The photographs are scaled to the frame height and laid side by side into one wide strip;
a virtual camera pans across it (and back), so consecutive frames overlap but differ, as a
robot's camera does when it turns. Real photographs matter: random pixels hide aliasing
and quantisation damage that natural images show.

Also their bytes as a camera sends them: `convert_rgb` in any encoding of the one table
(preprocess/encodings.ENCODINGS, by layout), `compress_rgb` as compressed_image_transport does;
and the GPU kernel's fixtures (`pack`, `with_pitch`, `cpu_reference`) for the gpu_static tests
and the prepared device check (scripts/gpu_check_vision.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import cv2
import numpy as np

from .compressed import CODECS
from .cpu import CpuPreprocessor
from .encodings import ENCODINGS, layout_of
from .frame import Frame
from .kernel_plan import GPU_ENCODINGS
from .spec import PreprocessSpec

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


#: OpenCV's conversion from RGB to each packed layout (None: the pixels as they are)
_FROM_RGB = {
    "RGB": None,
    "BGR": "COLOR_RGB2BGR",
    "RGBA": "COLOR_RGB2RGBA",
    "BGRA": "COLOR_RGB2BGRA",
    "GRAY": "COLOR_RGB2GRAY",
}


def convert_rgb(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """RGB uint8 → the raw (rows, W, bytes/px) buffer of a ROS image encoding (what a camera sends).

    Any encoding of the table (encodings.ENCODINGS), by its layout. The inverse of encodings.to_rgb
    where one exists: Bayer samples one colour per pixel, 4:2:0 and 4:2:2 average the chroma,
    mono16 is value × 257 (little-endian).
    """
    layout = layout_of(encoding)  # FrameError (a ValueError) naming the supported encodings
    if layout in ("UYVY", "YUYV"):
        return rgb_to_yuv422(rgb, uyvy=layout == "UYVY")
    if layout in ("NV12", "NV21"):
        return rgb_to_nv(rgb, uv_order=layout == "NV12")[:, :, None]
    if layout.startswith("BAYER_"):
        return rgb_to_bayer(rgb, encoding)[:, :, None]
    if layout == "GRAY16":
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype("<u2") * 257
        return gray.view(np.uint8).reshape(*gray.shape, 2)
    if layout not in _FROM_RGB:
        raise ValueError(f"cannot make {encoding!r} frames: no conversion from RGB to its layout {layout}")
    code = _FROM_RGB[layout]
    out = rgb if code is None else cv2.cvtColor(rgb, getattr(cv2, code))
    return out if out.ndim == 3 else out[:, :, None]


def rgb_to_bayer(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """The mosaic a Bayer sensor with this pattern would record of `rgb` (one colour per pixel).

    ROS names the pattern by its 2×2 cell, first row then second (bayer_rggb8: R G / G B)."""
    pattern = layout_of(encoding).removeprefix("BAYER_")
    out = np.empty(rgb.shape[:2], np.uint8)
    for i, colour in enumerate(pattern):
        dy, dx = divmod(i, 2)
        out[dy::2, dx::2] = rgb[dy::2, dx::2, "RGB".index(colour)]
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


#: the encodings a compressed sample frame is made from (colour ones compressed as BGR, mono8 as grey)
COMPRESSIBLE = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")


def compress_rgb(rgb: np.ndarray, encoding: str, codec: str, quality: int = 90) -> tuple[str, bytes]:
    """(format, data) of a sensor_msgs/CompressedImage as compressed_image_transport (humble) publishes it.

    Colour encodings are compressed as BGR ("<encoding>; jpeg compressed bgr8"), grey ones as
    mono8 for JPEG and unchanged for PNG (the format then ends in "compressed "): the format
    strings of its compressed_publisher.cpp.
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
    if encoding not in COMPRESSIBLE:
        raise ValueError(f"compressed sample frames are {', '.join(COMPRESSIBLE)}, not {encoding!r}")
    if encoding == "mono8":
        img, target = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), "mono8" if codec == "jpeg" else ""
    else:
        img, target = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), "bgr8"
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if codec == "jpeg" else [cv2.IMWRITE_PNG_COMPRESSION, 1]
    ok, data = cv2.imencode(".jpg" if codec == "jpeg" else ".png", img, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {codec} of a {rgb.shape} image")
    return f"{encoding}; {codec} compressed {target}", data.tobytes()


# --- fixtures for the GPU kernel's checks (test_gpu_static, scripts/gpu_check_vision.py) ----------------


def every_encoding() -> list[str]:
    """Every encoding the GPU kernel reads (all of the table's, by their layouts)."""
    return list(GPU_ENCODINGS)


def pack(rgb: np.ndarray, encoding: str, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """RGB (H, W, 3) → the encoding's rows of bytes (rows, row bytes), and whether they are big-endian.

    `convert_rgb`'s bytes, varied where a kernel could wrongly depend on them: the alpha channel is
    random (it must be ignored), mono16 carries noise below one 8-bit level and comes in a random
    byte order (the rounding and `is_bigendian` must be honoured)."""
    layout = layout_of(encoding)
    if layout == "GRAY16":
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.int64) * 257
        v = np.clip(gray + rng.integers(-128, 129, gray.shape), 0, 65535).astype(np.uint16)
        big = bool(rng.integers(0, 2))
        return v.astype(">u2" if big else "<u2").view(np.uint8).reshape(rgb.shape[0], -1), big
    px = convert_rgb(rgb, encoding)
    if layout in ("RGBA", "BGRA"):
        px = px.copy()
        px[..., 3] = rng.integers(0, 256, px.shape[:2], dtype=np.uint8)
    return np.ascontiguousarray(px).reshape(px.shape[0], -1), False


def with_pitch(rows: np.ndarray, pad: int) -> tuple[np.ndarray, int]:
    """Rows padded to step = row bytes + pad: step × rows bytes, as sensor_msgs/Image's data holds
    ("size is (step * rows)"); the kernel reads only up to the last row's last pixel."""
    n, row = rows.shape
    buf = np.zeros((n, row + pad), np.uint8)
    buf[:, :row] = rows
    return buf.reshape(-1), row + pad


def cpu_reference(raw: np.ndarray, h: int, w: int, step: int, encoding: str, big_endian: bool,
                  spec: PreprocessSpec) -> np.ndarray:  # fmt: skip
    """What the CPU path makes of the same bytes: the kernel's reference."""
    if encoding not in ENCODINGS:
        raise ValueError(f"{encoding!r} is not an encoding of the table")
    return CpuPreprocessor(spec)(Frame.from_buffer(raw.tobytes(), h, w, step, encoding, big_endian=big_endian))
