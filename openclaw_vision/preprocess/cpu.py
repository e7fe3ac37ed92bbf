"""CPU preprocessing with OpenCV: crop first, halve with 2×2 box filters, one last resize.

Why this shape: a 1080p frame is 6 MB but the model sees 224×224. Cropping the source to the
region the center crop keeps (see `spec.crop_box`) is a free view. Shrinking by ~4.8× must
average every source pixel (bilinear without antialiasing samples 4 of every ~23 pixels and
aliases). OpenCV's bilinear resize at exactly 1/2 *is* a 2×2 box average and its fastest
path, so we halve while the image is at least twice the target (1080 → 540 → 270) and finish
with one area-averaging resize. Box filters are softer than the reference's antialiased
bicubic (whose kernel has negative lobes), which shows on fine texture; a light unsharp mask
on the 224×224 result (`SHARPEN`) restores that. Measured here against the PIL bicubic
reference, ViT-B/32 embedding cosine: ≥ 0.9999 on photographs, 0.9992 on grass texture at
native 1080p resolution, 0.9989 on white noise (the adversarial case); ≈ 1.1 ms per 1080p
frame vs ≈ 15 ms for the reference. Channel order and normalisation happen on the small
result, as one multiply-add per channel.
"""

from __future__ import annotations

import cv2
import numpy as np

from .encodings import CV_TO_RGB, RGB_INDEX, encoding_of, gray16_to_gray8
from .frame import Frame
from .spec import PreprocessSpec, crop_box

#: Pixels around a Bayer crop that are demosaiced with it and then cut off: OpenCV's bilinear
#: demosaic reads a 3×3 neighbourhood, so with this margin the kept pixels equal a demosaic of
#: the whole frame (an even number keeps the pattern's phase).
BAYER_MARGIN = 2


def _even_down(v: int) -> int:
    return v - v % 2


def crop_rgb(frame: Frame, x0: int, y0: int, x1: int, y1: int) -> tuple[np.ndarray, str]:
    """The region [y0:y1, x0:x1] of a frame as (pixels, layout) with layout in RGB_INDEX.

    Packed RGB/BGR/RGBA/BGRA/GRAY crops are zero-copy views; the other encodings are converted
    (encodings.py's table) on the crop only, on boundaries that give the same pixels as
    converting the whole frame: pixel pairs for 4:2:2, 2×2 blocks for 4:2:0 (the region is
    widened to even bounds), a margin for Bayer (the region is exact).
    """
    enc = encoding_of(frame.encoding)
    layout, px = enc.layout, frame.pixels
    if layout in RGB_INDEX:
        return px[y0:y1, x0:x1], layout
    if layout == "GRAY16":
        return gray16_to_gray8(px[y0:y1, x0:x1], frame.big_endian)[:, :, None], "GRAY"
    code = getattr(cv2, CV_TO_RGB[layout])
    if layout in ("UYVY", "YUYV"):  # chroma is shared by pixel pairs: keep the crop on pair boundaries
        x0, x1 = _even_down(x0), min(x1 + x1 % 2, frame.width)
        return cv2.cvtColor(np.ascontiguousarray(px[y0:y1, x0:x1]), code), "RGB"
    if enc.planar420:  # chroma is shared by 2×2 blocks: even bounds, then luma rows + chroma rows, contiguous
        h = frame.height
        x0, y0 = _even_down(x0), _even_down(y0)
        x1, y1 = min(x1 + x1 % 2, frame.width), min(y1 + y1 % 2, h)
        planes = np.concatenate([px[y0:y1, x0:x1, 0], px[h + y0 // 2 : h + y1 // 2, x0:x1, 0]])
        return cv2.cvtColor(planes, code), "RGB"
    # Bayer: demosaic the region plus a margin (starting on an even pixel: same pattern phase), keep the region
    ex0, ey0 = _even_down(max(x0 - BAYER_MARGIN, 0)), _even_down(max(y0 - BAYER_MARGIN, 0))
    ex1, ey1 = min(x1 + BAYER_MARGIN, frame.width), min(y1 + BAYER_MARGIN, frame.height)
    rgb = cv2.cvtColor(np.ascontiguousarray(px[ey0:ey1, ex0:ex1, 0]), code)
    return rgb[y0 - ey0 : y1 - ey0, x0 - ex0 : x1 - ex0], "RGB"


#: Unsharp-mask amount (Gaussian σ = 1 px) applied after downscaling; 0 disables it.
SHARPEN = 0.2


def shrink(img: np.ndarray, size: int) -> np.ndarray:
    """Resize an (H, W[, C]) uint8 crop to size×size: exact 2× box halvings, then one antialiased step."""
    shrinking = min(img.shape[0], img.shape[1]) >= 2 * size
    while img.shape[0] >= 2 * size and img.shape[1] >= 2 * size:
        img = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_LINEAR)
    if min(img.shape[0], img.shape[1]) >= size:
        out = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
    else:  # upsampling a small image: bicubic, as the reference does
        return cv2.resize(img, (size, size), interpolation=cv2.INTER_CUBIC)
    if shrinking and SHARPEN:
        blur = cv2.GaussianBlur(out, (0, 0), 1.0)
        out = cv2.addWeighted(out, 1 + SHARPEN, blur, -SHARPEN, 0)
    return out


class CpuPreprocessor:
    """Frame → normalised (3, S, S) float32, following a `PreprocessSpec`."""

    name = "opencv"
    concurrent = True  # no state between calls, a fresh buffer per batch; cv2 and numpy release the GIL

    def __init__(self, spec: PreprocessSpec | None = None) -> None:
        self.spec = spec or PreprocessSpec()
        self._scale, self._shift = self.spec.scale_shift()

    def _crop(self, frame: Frame) -> tuple[np.ndarray, str]:
        box = crop_box(frame.height, frame.width, self.spec.size)
        x0, y0 = round(box.x0), round(box.y0)
        x1, y1 = round(box.x0 + box.width), round(box.y0 + box.height)
        # a crop one pixel wide can round to nothing (1×40: x0 = round(19.5) = 20 = round(20.5) = x1)
        x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
        return crop_rgb(frame, x0, y0, x1, y1)

    def __call__(self, frame: Frame, out: np.ndarray | None = None) -> np.ndarray:
        """Preprocess one frame; writes into `out` (3, S, S) when given, e.g. a row of a batch."""
        s = self.spec.size
        crop, layout = self._crop(frame)
        if crop.shape[2] == 1:
            crop = crop[:, :, 0]
        small = shrink(crop, s)
        if small.ndim == 2:
            small = small[:, :, None]
        if out is None:
            out = np.empty((3, s, s), np.float32)
        for c, idx in enumerate(RGB_INDEX[layout]):
            np.multiply(small[:, :, idx], self._scale[c], out=out[c], casting="unsafe")
            out[c] += self._shift[c]
        return out

    def buffer(self, n: int) -> np.ndarray:
        """A fresh (n, 3, S, S) float32 batch for `__call__` to fill row by row."""
        s = self.spec.size
        return np.empty((n, 3, s, s), np.float32)

    def batch(self, frames: list[Frame]) -> np.ndarray:
        out = self.buffer(len(frames))
        for i, frame in enumerate(frames):
            self(frame, out[i])
        return out
