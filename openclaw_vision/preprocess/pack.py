"""RGB frames packed as the raw bytes of every encoding the GPU kernel reads, and OpenCV's way back.

Fixtures for the gpu_static tests and the prepared device check (scripts/gpu_check.py): the
CPU path's own `sample_frames.convert_rgb` covers its encodings; this covers the kernel's
(Bayer mosaics, NV12/NV21, mono16 in either byte order) and gives, for the encodings the CPU
path may not read yet, the reference decode written with OpenCV from their definitions.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..sample_frames import rgb_to_yuv422
from .cpu import CpuPreprocessor
from .encodings import ENCODINGS
from .frame import Frame
from .kernel_plan import NAMED_CODES, encoding_code
from .spec import PreprocessSpec

#: ROS Bayer name → OpenCV code: ROS names the pattern by its first row, OpenCV by its second
#: (ros-perception/vision_opencv, humble, cv_bridge/src/cv_bridge.cpp lines 196-210).
BAYER_TO_RGB = {
    "bayer_rggb8": cv2.COLOR_BayerBG2RGB,
    "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg8": cv2.COLOR_BayerGR2RGB,
    "bayer_grbg8": cv2.COLOR_BayerGB2RGB,
}


def pack(rgb: np.ndarray, encoding: str, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """RGB (H, W, 3) → the encoding's rows of bytes (rows, row bytes), and whether they are big-endian."""
    code = encoding_code(encoding)
    h, w, _ = rgb.shape
    if code in (0, 1, 2, 3):
        px = rgb if code in (0, 2) else rgb[..., ::-1]
        if code in (2, 3):
            px = np.concatenate([px, rng.integers(0, 256, (h, w, 1), dtype=np.uint8)], axis=2)
        return np.ascontiguousarray(px).reshape(h, -1), False
    if code == 4:
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), False
    if code in (5, 6):
        return rgb_to_yuv422(rgb, uyvy=code == 5).reshape(h, -1), False
    if 7 <= code <= 10:
        pattern = encoding[6:10].upper()  # bayer_rggb8 → RGGB: row 0 = R G, row 1 = G B
        chan = {"R": 0, "G": 1, "B": 2}
        out = np.empty((h, w), np.uint8)
        for dy in (0, 1):
            for dx in (0, 1):
                out[dy::2, dx::2] = rgb[dy::2, dx::2, chan[pattern[2 * dy + dx]]]
        return out, False
    if code in (11, 12):
        i420 = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420).reshape(-1)  # Y plane, U plane, V plane
        n = h * w
        y = i420[:n].reshape(h, w)
        u, v = i420[n : n + n // 4].reshape(h // 2, w // 2), i420[n + n // 4 :].reshape(h // 2, w // 2)
        chroma = np.stack([u, v] if code == 11 else [v, u], axis=-1).reshape(h // 2, w)
        return np.concatenate([y, chroma]), False
    if code == 13:
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.int64) * 257
        v = np.clip(gray + rng.integers(-128, 129, gray.shape), 0, 65535).astype(np.uint16)
        big = bool(rng.integers(0, 2))
        return v.astype(">u2" if big else "<u2").view(np.uint8).reshape(h, -1), big
    raise ValueError(f"cannot pack {encoding!r}")


def with_pitch(rows: np.ndarray, pad: int) -> tuple[np.ndarray, int]:
    """Rows padded to step = row bytes + pad: step × rows bytes, as sensor_msgs/Image's data holds
    ("size is (step * rows)"); the kernel reads only up to the last row's last pixel."""
    n, row = rows.shape
    buf = np.zeros((n, row + pad), np.uint8)
    buf[:, :row] = rows
    return buf.reshape(-1), row + pad


def opencv_rgb(rows: np.ndarray, encoding: str, big_endian: bool) -> np.ndarray:
    """RGB from the packed rows by OpenCV (Bayer bilinear, NV12/NV21 BT.601) or round(v / 257) for mono16."""
    code = encoding_code(encoding)
    if 7 <= code <= 10:
        return cv2.cvtColor(rows, BAYER_TO_RGB[encoding])
    if code in (11, 12):
        return cv2.cvtColor(rows, cv2.COLOR_YUV2RGB_NV12 if code == 11 else cv2.COLOR_YUV2RGB_NV21)
    if code == 13:
        v = rows.view(">u2" if big_endian else "<u2").astype(np.int64)
        gray = np.floor(v / 257 + 0.5).astype(np.uint8)  # round(v / 257); never a tie
        return np.repeat(gray[..., None], 3, axis=2)
    raise ValueError(f"{encoding!r} is read by the CPU path; use its own decode")


def every_encoding() -> list[str]:
    """The CPU path's table (whatever it holds after merges) plus the ones the kernel already reads."""
    return list(dict.fromkeys([*ENCODINGS, *NAMED_CODES]))


def cpu_reference(
    raw: np.ndarray, rows: np.ndarray, h: int, w: int, step: int, encoding: str, big_endian: bool, spec: PreprocessSpec
) -> np.ndarray:
    """What the CPU path gives: itself for its own encodings, OpenCV's decode + the CPU resize for the others."""
    if encoding in ENCODINGS:
        return CpuPreprocessor(spec)(Frame.from_buffer(raw.tobytes(), h, w, step, encoding, big_endian=big_endian))
    return CpuPreprocessor(spec)(Frame.from_rgb(opencv_rgb(rows, encoding, big_endian)))
