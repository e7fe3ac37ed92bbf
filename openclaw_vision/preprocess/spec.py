"""The preprocessing math, written once.

CLIP's standard preprocessing is: resize the short side to S (bicubic, antialiased), center
crop S×S, scale to [0, 1], subtract the per-channel mean and divide by the std, NCHW. Every
implementation (OpenCV on the CPU, the fused CUDA kernel on a GPU, the PIL reference) takes
its numbers from a `PreprocessSpec`, and the crop geometry from `crop_box`, so they cannot
drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class PreprocessSpec:
    size: int = 224
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD

    def scale_shift(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (a, b) so that normalised = uint8_value * a + b, i.e. one multiply-add."""
        std = np.asarray(self.std, np.float64)
        mean = np.asarray(self.mean, np.float64)
        return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)

    def normalise(self, rgb_u8: np.ndarray) -> np.ndarray:
        """Exact reference normalisation of RGB uint8 values (…, 3) to float32."""
        return ((rgb_u8.astype(np.float64) / 255.0 - np.asarray(self.mean)) / np.asarray(self.std)).astype(np.float32)


@dataclass(frozen=True)
class CropBox:
    """A region of the source image, in source pixels; it maps onto the S×S output."""

    x0: float
    y0: float
    width: float
    height: float


def resized_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(h, w) after 'resize the short side to `size`', with the long side truncated as torchvision does."""
    if height <= width:
        return size, int(size * width / height)
    return int(size * height / width), size


def crop_box(height: int, width: int, size: int) -> CropBox:
    """The source region that resize-short-side + center-crop turns into the output.

    Computed from the reference's own integer steps (resized size, rounded crop offset) and
    mapped back to source coordinates, so cropping the source first and resizing only the
    crop lands on the same pixels while touching a fraction of the data.
    """
    rh, rw = resized_size(height, width, size)
    top = round((rh - size) / 2.0)
    left = round((rw - size) / 2.0)
    sy, sx = height / rh, width / rw
    return CropBox(x0=left * sx, y0=top * sy, width=size * sx, height=size * sy)
