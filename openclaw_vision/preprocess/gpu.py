"""The preprocessing stage on an NVIDIA GPU: one host-to-device copy of the raw bytes, one kernel.

    frame bytes (pageable host memory) ──H2D──► staging buffer ──preprocess kernel──► (3, S, S)
                                                                  (cuda/preprocess.cu)   in the
                                                                                         encoder's
                                                                                         input buffer

The kernel is compiled once per process (CuPy's NVRTC; CuPy also caches the binary on disk)
and each frame size's launch plan (crop, weight tables: `kernel_plan.py`) is uploaded once and
reused. Everything runs on one CUDA stream, the encoder's, so the encoder's work is queued
behind the kernel with no synchronisation and no copy in between.

Needs CuPy (the optional `gpu` extra); importing this module does not.
"""

from __future__ import annotations

import ctypes
import logging
from collections import OrderedDict
from functools import lru_cache
from typing import Any

import numpy as np

from .encodings import FrameError
from .frame import Frame
from .kernel_plan import ROWS_PER_THREAD, KernelJob, plan_job
from .spec import PreprocessSpec

log = logging.getLogger(__name__)

#: C type of each kernel parameter → the NumPy scalar type CuPy must be handed for it.
ARG_TYPES = {"long long": np.int64, "int": np.int32}


def kernel_arguments(
    job: KernelJob, src: Any, tables: tuple[Any, Any, Any, Any, Any], out: Any, half: bool, big_endian: bool
) -> tuple:
    """The `preprocess` kernel's arguments in its parameter order (cuda/preprocess.cu), typed for CuPy.

    `src`, the five `tables` (y_start, y_weights, x_start, x_weights, affine) and `out` are device
    arrays (anything CuPy passes as a pointer); every scalar is a NumPy scalar of the C type, since
    CuPy would pass a bare Python int as 64 bits.
    """
    s = job.scalars(big_endian)
    y_start, y_weights, x_start, x_weights, affine = tables
    i32 = np.int32
    return (
        src,
        np.int64(s["step"]),
        i32(s["height"]),
        i32(s["width"]),
        i32(s["encoding"]),
        i32(s["big_endian"]),
        i32(s["crop_x0"]),
        i32(s["crop_y0"]),
        y_start,
        y_weights,
        i32(s["y_count"]),
        x_start,
        x_weights,
        i32(s["x_count"]),
        affine,
        i32(s["size"]),
        out,
        i32(int(half)),
    )


def raw_bytes(frame: Frame) -> tuple[np.ndarray, int]:
    """(flat uint8 view from the frame's first byte to its last, row step), without a copy when it can.

    The CPU path's frames are (H, W, bytes per pixel) uint8 views of the message's buffer with the
    message's row step: the raw bytes are read in place. Any other layout is made contiguous first.
    """
    px = frame.pixels
    if px.dtype == np.uint8 and px.ndim == 3:
        h, w, bpp = px.shape
        if px.strides[1:] == (bpp, 1) and px.strides[0] >= w * bpp:
            step = px.strides[0]
            n = step * (h - 1) + w * bpp
            return np.lib.stride_tricks.as_strided(px, shape=(n,), strides=(1,), writeable=False), step
    flat = np.ascontiguousarray(px).reshape(-1).view(np.uint8)
    return flat, flat.size // max(px.shape[0], 1)  # rows: nv12/nv21 frames hold H * 3/2 of them


@lru_cache(maxsize=4)
def load_kernel(rows_per_thread: int = ROWS_PER_THREAD):
    """The compiled `preprocess` kernel (once per process and option set)."""
    import cupy

    from .cuda import compile_options, kernel_source

    module = cupy.RawModule(code=kernel_source(), options=compile_options(rows_per_thread))
    return module.get_function("preprocess")


class _DevicePlan:
    """A KernelJob with its tables on the device."""

    def __init__(self, job: KernelJob, cp) -> None:
        self.job = job
        self.tables = (
            cp.asarray(job.rows.start),
            cp.asarray(job.rows.weights),
            cp.asarray(job.cols.start),
            cp.asarray(job.cols.weights),
            cp.asarray(job.affine),
        )


class CudaPreprocessor:
    """Frame → normalised (3, S, S) fp16/fp32 CuPy array, written into a caller's buffer when given."""

    name = "cuda"

    def __init__(
        self,
        spec: PreprocessSpec | None = None,
        half: bool = True,
        stream: Any = None,
        rows_per_thread: int = ROWS_PER_THREAD,
        max_plans: int = 8,
    ) -> None:
        import cupy

        self._cp = cupy
        self.spec = spec or PreprocessSpec()
        self.half = half
        self.dtype = np.float16 if half else np.float32
        self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
        self.rows_per_thread = rows_per_thread
        self._kernel = load_kernel(rows_per_thread)
        self._plans: OrderedDict[tuple, _DevicePlan] = OrderedDict()
        self._max_plans = max_plans
        self._staging = cupy.empty(0, cupy.uint8)

    def _plan(self, height: int, width: int, step: int, encoding: str, nbytes: int) -> _DevicePlan:
        key = (height, width, step, encoding)
        plan = self._plans.get(key)
        if plan is None:
            job = plan_job(height, width, step, encoding, self.spec, nbytes, self.rows_per_thread)
            plan = self._plans[key] = _DevicePlan(job, self._cp)
            if len(self._plans) > self._max_plans:
                self._plans.popitem(last=False)
            log.info(
                "GPU preprocessing plan for %dx%d %s: %d x %d taps",
                width,
                height,
                encoding,
                job.rows.count,
                job.cols.count,
            )
        else:
            self._plans.move_to_end(key)
            if nbytes < plan.job.nbytes:
                raise FrameError(
                    f"{nbytes} data bytes, {width}x{height} {encoding} with step {step} needs {plan.job.nbytes}"
                )
        return plan

    def output(self, batch: int | None = None):
        """A fresh (3, S, S) — or (batch, 3, S, S) — device array of this preprocessor's dtype."""
        s = self.spec.size
        shape = (3, s, s) if batch is None else (batch, 3, s, s)
        return self._cp.empty(shape, self.dtype)

    def __call__(self, frame: Frame, out: Any = None):
        """Preprocess one Frame; returns `out` (or a new array) once the work is queued on `stream`."""
        data, step = raw_bytes(frame)
        big_endian = frame.big_endian
        return self.run(data, frame.height, frame.width, step, frame.encoding, big_endian, out)

    def run(
        self,
        data: np.ndarray | bytes | memoryview,
        height: int,
        width: int,
        step: int,
        encoding: str,
        big_endian: bool = False,
        out: Any = None,
    ):
        """Preprocess raw image bytes described as in sensor_msgs/Image (one H2D copy, one launch)."""
        plan = self.upload(data, height, width, step, encoding)
        return self.launch(plan, big_endian, out)

    def upload(self, data: np.ndarray | bytes | memoryview, height: int, width: int, step: int, encoding: str):
        """Stage 1: validate and plan the frame, copy its bytes to the device (queued on `stream`)."""
        host = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
        plan = self._plan(height, width, step, encoding, host.size)
        n = plan.job.nbytes
        if self._staging.size < n:
            self._staging = self._cp.empty(n, self._cp.uint8)
        src = np.ascontiguousarray(host[:n])  # a view unless the caller's bytes were strided
        self._staging.data.copy_from_host_async(ctypes.c_void_p(src.ctypes.data), n, self.stream)
        return plan

    def launch(self, plan: _DevicePlan, big_endian: bool = False, out: Any = None):
        """Stage 2: the kernel, from the staged bytes into `out` (queued on `stream`)."""
        if out is None:
            out = self.output()
        s = self.spec.size
        if out.shape[-3:] != (3, s, s) or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"output must be a C-contiguous (3, {s}, {s}) {np.dtype(self.dtype).name} array")
        job = plan.job
        args = kernel_arguments(job, self._staging, plan.tables, out, self.half, big_endian)
        with self.stream:
            self._kernel(job.grid, job.block, args)
        return out
