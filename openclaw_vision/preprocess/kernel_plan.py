"""Everything the fused CUDA kernel needs to know about a frame, computed once per frame size.

The CPU path (`cpu.py`) crops, halves with 2×2 boxes while the crop is at least twice the
target, finishes with one area resize (bicubic when it must enlarge) and sharpens with an
unsharp mask. Each of those steps is linear and acts on rows and columns separately, so the
whole chain is two matrices: output = Wy · crop · Wxᵀ, then the last uint8 cast. This module
builds Wy and Wx from OpenCV's own definitions of those steps (its INTER_LINEAR, INTER_AREA and
INTER_CUBIC coefficient rules, the 7-tap σ = 1 Gaussian with reflect-101 borders), keeps each
row's non-zero span as (start, weights), and packs them with the crop and the colour layout
into a `KernelJob`: the argument list of one launch. The kernel then never writes an
intermediate image (see cuda/preprocess.cu).

Pure NumPy: it runs without CuPy or a GPU, so the tests run the very same job through the
kernel compiled for the CPU (cuda/shim.h) and compare it with the CPU path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import cpu
from .encodings import ENCODINGS, FrameError
from .spec import PreprocessSpec, crop_box

#: pixel layout (encodings.ENCODINGS) → the kernel's ENC_* number (cuda/preprocess.cu). Encodings
#: reach the kernel through their layout, so an alias (8UC3, 16UC1, uyvy) needs no entry here.
LAYOUT_CODES = {"RGB": 0, "BGR": 1, "RGBA": 2, "BGRA": 3, "GRAY": 4, "UYVY": 5, "YUYV": 6, "BAYER_RGGB": 7,
                "BAYER_BGGR": 8, "BAYER_GBRG": 9, "BAYER_GRBG": 10, "NV12": 11, "NV21": 12, "GRAY16": 13}  # fmt: skip
#: kernel code → the table's layout facts (aliases share a code, and their facts)
_BY_CODE = {LAYOUT_CODES[e.layout]: e for e in ENCODINGS.values() if e.layout in LAYOUT_CODES}
_PAIRED = tuple(c for c, e in _BY_CODE.items() if e.even_width and not e.planar420)  # 4:2:2: chroma per pixel pair
_SEMIPLANAR = tuple(c for c, e in _BY_CODE.items() if e.planar420)  # 4:2:0: a half-height chroma plane after luma
#: the encodings the kernel reads: every one of the table whose layout it has a code for
GPU_ENCODINGS = tuple(name for name, e in ENCODINGS.items() if e.layout in LAYOUT_CODES)

#: Launch geometry. Each thread computes one output column for ROWS_PER_THREAD rows.
ROWS_PER_THREAD = 4
BLOCK = (32, 4)


def encoding_code(encoding: str) -> int:
    if encoding in ENCODINGS and ENCODINGS[encoding].layout in LAYOUT_CODES:
        return LAYOUT_CODES[ENCODINGS[encoding].layout]
    raise FrameError(
        f"unsupported encoding {encoding!r} on the GPU path; supported: {', '.join(sorted(GPU_ENCODINGS))}"
    )


def bytes_per_pixel(code: int) -> int:
    """Bytes per pixel of the (first) plane of the kernel's encoding `code`."""
    return _BY_CODE[code].bytes_per_pixel


def raw_nbytes(height: int, width: int, step: int, encoding: str) -> int:
    """Bytes a frame occupies from its first byte to its last (the last row carries no padding)."""
    code = encoding_code(encoding)
    rows = height + height // 2 if code in _SEMIPLANAR else height
    return step * (rows - 1) + width * bytes_per_pixel(code)


def check_frame(height: int, width: int, step: int, encoding: str, nbytes: int) -> int:
    """Validate a raw image's description against its bytes; returns the kernel's encoding code."""
    code = encoding_code(encoding)
    if height <= 0 or width <= 0:
        raise FrameError(f"empty image {width}x{height}")
    if code in _PAIRED and width % 2:
        raise FrameError(f"{encoding} needs an even width, got {width}")
    if code in _SEMIPLANAR and (width % 2 or height % 2):
        raise FrameError(f"{encoding} needs an even width and height, got {width}x{height}")
    row = width * bytes_per_pixel(code)
    if step < row:
        raise FrameError(f"step {step} < width*{bytes_per_pixel(code)} = {row} for {encoding}")
    need = raw_nbytes(height, width, step, encoding)
    if nbytes < need:
        raise FrameError(f"{nbytes} data bytes, {width}x{height} {encoding} with step {step} needs {need}")
    return code


def pixel_crop(height: int, width: int, size: int, code: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1): the source pixels the CPU path crops (`CpuPreprocessor._crop`), exclusive end."""
    box = crop_box(height, width, size)
    x0, y0 = round(box.x0), round(box.y0)
    x1, y1 = round(box.x0 + box.width), round(box.y0 + box.height)
    if code in _PAIRED:  # as the CPU path: keep the crop on pixel-pair boundaries
        x0 -= x0 % 2
        x1 += x1 % 2
        x1 = min(x1, width)
    return x0, y0, x1, y1


# --- OpenCV's 1-D resampling rules as (n_dst × n_src) matrices ---------------------------------


def linear_matrix(n_src: int, n_dst: int) -> np.ndarray:
    """cv2.resize INTER_LINEAR along one axis (at exactly 1/2 this is OpenCV's 2×2 box)."""
    m = np.zeros((n_dst, n_src))
    scale = n_src / n_dst
    for d in range(n_dst):
        f = (d + 0.5) * scale - 0.5
        s = math.floor(f)
        f -= s
        if s < 0:
            s, f = 0, 0.0
        if s >= n_src - 1:
            s, f = n_src - 1, 0.0
        m[d, s] += 1 - f
        m[d, min(s + 1, n_src - 1)] += f
    return m


def area_matrix(n_src: int, n_dst: int) -> np.ndarray:
    """cv2.resize INTER_AREA when shrinking: each output averages the source span it covers."""
    m = np.zeros((n_dst, n_src))
    scale = n_src / n_dst
    for d in range(n_dst):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, n_src - f1)
        s2 = min(math.floor(f2), n_src - 1)
        s1 = min(math.ceil(f1), s2)
        if s1 - f1 > 1e-3:
            m[d, s1 - 1] += (s1 - f1) / cell
        m[d, s1:s2] += 1 / cell
        if f2 - s2 > 1e-3:
            m[d, s2] += min(f2 - s2, 1.0, cell) / cell
    return m


def cubic_matrix(n_src: int, n_dst: int) -> np.ndarray:
    """cv2.resize INTER_CUBIC (a = -0.75, replicated borders): the CPU path's rule for enlarging."""
    a = -0.75
    m = np.zeros((n_dst, n_src))
    scale = n_src / n_dst
    for d in range(n_dst):
        f = (d + 0.5) * scale - 0.5
        s = math.floor(f)
        x = f - s
        c0 = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a
        c1 = ((a + 2) * x - (a + 3)) * x * x + 1
        c2 = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1
        for k, c in enumerate((c0, c1, c2, 1 - c0 - c1 - c2)):
            m[d, min(max(s - 1 + k, 0), n_src - 1)] += c
    return m


def _reflect101(i: int, n: int) -> int:
    if n == 1:
        return 0
    while i < 0 or i >= n:
        i = -i if i < 0 else 2 * (n - 1) - i
    return i


def gaussian_matrix(n: int, sigma: float = 1.0) -> np.ndarray:
    """cv2.GaussianBlur(ksize=(0, 0), σ) along one axis: OpenCV's 8-bit kernel size, reflect-101 borders."""
    radius = (round(sigma * 3 * 2 + 1) | 1) // 2  # OpenCV's ksize rule for 8-bit images
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    g = np.zeros((n, n))
    for i in range(n):
        for t, w in zip(range(-radius, radius + 1), taps, strict=True):
            g[i, _reflect101(i + t, n)] += w
    return g


def shrink_terms(crop_h: int, crop_w: int, size: int, sharpen: float) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """`cpu.shrink` of a crop_h × crop_w crop as a sum of separable terms Σ c·Wy·crop·Wxᵀ.

    The same halvings and resize as the CPU path (A = Wy, Wx). Its unsharp mask,
    (1 + a)·C − a·G C Gᵀ, is not one separable product but two, hence two terms:
    (1 + a, A_y, A_x) and (−a, G·A_y, G·A_x).
    """
    wy, wx = np.eye(crop_h), np.eye(crop_w)
    h, w = crop_h, crop_w
    shrinking = min(h, w) >= 2 * size
    while h >= 2 * size and w >= 2 * size:  # the loop decides for both axes at once, as in cpu.shrink
        wy, wx = linear_matrix(h, h // 2) @ wy, linear_matrix(w, w // 2) @ wx
        h, w = h // 2, w // 2
    resize = area_matrix if min(h, w) >= size else cubic_matrix
    wy, wx = resize(h, size) @ wy, resize(w, size) @ wx
    if not (shrinking and sharpen):
        return [(1.0, wy, wx)]
    blur = gaussian_matrix(size)
    return [(1.0 + sharpen, wy, wx), (-sharpen, blur @ wy, blur @ wx)]


#: The kernel sums exactly this many separable terms (a single-term chain gets a zero second term).
TERMS = 2


@dataclass(frozen=True)
class Taps:
    """Resampling matrices as each output's window: from source `start[i]`, `weights[i, term, :count]`."""

    start: np.ndarray  # (size,) int32
    weights: np.ndarray  # (size, TERMS, count) float32

    @property
    def count(self) -> int:
        return int(self.weights.shape[2])

    @classmethod
    def from_matrices(cls, ms: list[np.ndarray], eps: float = 1e-9) -> Taps:
        """One common window per output row covering every term's non-zero span."""
        stacked = np.stack(ms + [np.zeros_like(ms[0])] * (TERMS - len(ms)), axis=1)  # (n_dst, TERMS, n_src)
        n_src = stacked.shape[2]
        spans = []
        for row in np.abs(stacked).max(axis=1):
            nz = np.flatnonzero(row > eps)
            spans.append((int(nz[0]), int(nz[-1])) if nz.size else (0, 0))
        count = max(b - a + 1 for a, b in spans)
        # windows of one length, slid left where they would run past the last source pixel, so
        # the kernel never reads outside the crop
        start = np.array([min(a, n_src - count) for a, _ in spans], np.int32)
        weights = np.stack([stacked[i, :, s : s + count] for i, s in enumerate(start)]).astype(np.float32)
        return cls(start, np.ascontiguousarray(weights))


@dataclass(frozen=True)
class KernelJob:
    """One frame geometry's launch: everything but the pixel and output pointers."""

    height: int
    width: int
    step: int
    code: int
    crop: tuple[int, int, int, int]
    size: int
    rows: Taps
    cols: Taps
    affine: np.ndarray  # (6,) float32: scale[3], shift[3]
    rows_per_thread: int = ROWS_PER_THREAD

    @property
    def nbytes(self) -> int:
        rows = self.height + self.height // 2 if self.code in _SEMIPLANAR else self.height
        return self.step * (rows - 1) + self.width * bytes_per_pixel(self.code)

    @property
    def block(self) -> tuple[int, int, int]:
        return (BLOCK[0], BLOCK[1], 1)

    @property
    def grid(self) -> tuple[int, int, int]:
        groups = -(-self.size // self.rows_per_thread)
        return (-(-self.size // BLOCK[0]), -(-groups // BLOCK[1]), 1)

    def scalars(self, big_endian: bool) -> dict[str, int]:
        """The integer arguments, by the kernel's parameter names."""
        return {
            "step": self.step,
            "height": self.height,
            "width": self.width,
            "encoding": self.code,
            "big_endian": int(big_endian),
            "crop_x0": self.crop[0],
            "crop_y0": self.crop[1],
            "y_count": self.rows.count,
            "x_count": self.cols.count,
            "size": self.size,
        }


@lru_cache(maxsize=32)
def _taps(crop_h: int, crop_w: int, size: int, sharpen: float) -> tuple[Taps, Taps]:
    terms = shrink_terms(crop_h, crop_w, size, sharpen)
    rows = Taps.from_matrices([c * wy for c, wy, _ in terms])  # each term's factor rides on its rows
    cols = Taps.from_matrices([wx for _, _, wx in terms])
    return rows, cols


def plan_job(
    height: int,
    width: int,
    step: int,
    encoding: str,
    spec: PreprocessSpec,
    nbytes: int | None = None,
    rows_per_thread: int = ROWS_PER_THREAD,
) -> KernelJob:
    """The launch for one frame description (validated: a bad one raises FrameError)."""
    code = check_frame(
        height, width, step, encoding, raw_nbytes(height, width, step, encoding) if nbytes is None else nbytes
    )
    crop = pixel_crop(height, width, spec.size, code)
    rows, cols = _taps(crop[3] - crop[1], crop[2] - crop[0], spec.size, float(cpu.SHARPEN))
    scale, shift = spec.scale_shift()
    affine = np.concatenate([scale, shift]).astype(np.float32)
    return KernelJob(height, width, step, code, crop, spec.size, rows, cols, affine, rows_per_thread)
