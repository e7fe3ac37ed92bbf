"""What the GPU encoders share: one CUDA stream, device buffers the engine reads and writes, and
the seam through which the fused preprocessing kernel writes straight into the input buffer.

    frame ──CudaPreprocessor──► input[0] (device, the engine's own input binding)
                                   │ same stream, no copy, no sync
                                   ▼
                              engine / graph ──► output (device) ──D2H──► pinned host ──► Embedding

A GPU encoder offers `frame_preprocessor()` (declared on `ImageEncoder`); `FramePipeline` uses it
in place of the CPU preprocessor, writing frame k of a batch into row k of the input buffer, so
the preprocessed batch never leaves the GPU. `encode` also takes NumPy
batches (tools, benchmarks): those are copied up first.

`CudaDevice` wraps the few CuPy calls involved; tests hand the encoders a NumPy stand-in with
the same methods, so the buffer, binding and copy logic runs without a GPU.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import Embedding, EncoderError, ModelInfo, l2_normalise

log = logging.getLogger(__name__)


def model_metadata(path: Path) -> dict[str, str]:
    """The ONNX file's metadata (model_id, embed_dim, image_size, precision) without a session."""
    try:
        import onnx
    except ImportError:  # fall back to ONNX Runtime (always installed), at the cost of loading the graph
        from ..core.ortsession import session

        sess = session(path, 1)
        return dict(sess.get_modelmeta().custom_metadata_map)
    proto = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in proto.metadata_props}


def device_pointer(array: Any) -> int | None:
    """The device address of a CUDA array (`__cuda_array_interface__`), or None for host arrays."""
    iface = getattr(array, "__cuda_array_interface__", None)
    return int(iface["data"][0]) if iface else None


class CudaDevice:
    """One GPU, one non-blocking stream, CuPy allocations."""

    def __init__(self, device_id: int = 0) -> None:
        import cupy

        self.cp = cupy
        self.device = cupy.cuda.Device(device_id)
        self.device.use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.compute_capability = f"{props['major']}.{props['minor']}"

    @property
    def stream_handle(self) -> int:
        return int(self.stream.ptr)

    def empty(self, shape: tuple[int, ...], dtype) -> Any:
        return self.cp.empty(shape, dtype)

    def pinned(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)

    def upload(self, dst: Any, host: np.ndarray) -> None:
        dst.set(np.ascontiguousarray(host, dst.dtype), stream=self.stream)

    def copy(self, dst: Any, src: Any) -> None:
        with self.stream:
            dst[...] = src  # casts fp32 → fp16 on the device when the dtypes differ

    def download(self, src: Any, host: np.ndarray) -> None:
        src.get(stream=self.stream, out=host)

    def synchronize(self) -> None:
        self.stream.synchronize()


class BoundPreprocessor:
    """The CUDA preprocessor bound to an encoder's (max_batch, 3, S, S) input buffer: frame k of a
    batch is written by the kernel into row k, so the batch the engine reads is that buffer itself
    (one launch per frame, all on the encoder's stream: no copy and no sync in between).

    Not `concurrent`: the kernel's staging buffer and plans are one per preprocessor, and the batch
    is the encoder's input itself — a second batch prepared while one encodes would overwrite it."""

    concurrent = False

    def __init__(self, pre: Any, input_buffer: Any) -> None:
        self.pre = pre
        self.input = input_buffer
        self.name = pre.name

    def buffer(self, n: int) -> Any:
        """Rows [0, n) of the encoder's input: what `encode` runs on without a copy."""
        if not 0 < n <= len(self.input):
            raise ValueError(f"a batch of {n} frames; this encoder's input holds 1..{len(self.input)}")
        return self.input[:n]

    def __call__(self, frame, out: Any = None) -> Any:
        return self.pre(frame, out=self.input[0] if out is None else out)


class GpuEncoder:
    """Buffers, encode() and frame_preprocessor() for a backend that implements `enqueue(n)`."""

    backend = "gpu"

    model_id: str
    embed_dim: int
    image_size: int
    precision: str

    def _read_metadata(self, path: Path) -> None:
        if not path.is_file():
            raise EncoderError(f"model file not found: {path} (build it with `openclaw-vision export` / `quantize`)")
        meta = model_metadata(path)
        size = int(meta.get("image_size", 224))
        dim = int(meta.get("embed_dim", 0)) or int(json.loads(meta.get("vision_config", "{}")).get("embed_dim", 0))
        if not dim:
            raise EncoderError(
                f"{path}: no embed_dim in the model's metadata (export it with `openclaw-vision export`)"
            )
        # what every backend offers: the file's id, sizes and gate verdicts (encoders/gating.py reads them)
        self.info = ModelInfo.from_metadata(meta, path, [None, 3, size, size], [None, dim])
        self.model_id, self.precision = self.info.model_id, self.info.precision
        self.image_size, self.embed_dim = self.info.image_size, self.info.embed_dim

    def _allocate(self, device: Any, max_batch: int, input_dtype) -> None:
        s = self.image_size
        self.device = device
        self.max_batch = max_batch
        self.input = device.empty((max_batch, 3, s, s), input_dtype)
        self.output = device.empty((max_batch, self.embed_dim), np.float32)
        self.host_output = device.pinned((max_batch, self.embed_dim), np.float32)

    def enqueue(self, n: int) -> None:  # pragma: no cover - each backend implements it
        """Queue inference on the device stream for input rows [0, n) into output rows [0, n)."""
        raise NotImplementedError

    def frame_preprocessor(self) -> BoundPreprocessor:
        """Frame → this encoder's input buffer, by the fused CUDA kernel on the encoder's stream."""
        from ..preprocess.gpu import CudaPreprocessor
        from ..preprocess.spec import PreprocessSpec

        half = np.dtype(self.input.dtype) == np.float16
        pre = CudaPreprocessor(PreprocessSpec(size=self.image_size), half=half, stream=self.device.stream)
        return BoundPreprocessor(pre, self.input)

    def encode(self, pixels: Any) -> Embedding:
        """pixels: (N, 3, S, S) on the host (copied up) or on the device (this encoder's input: no copy)."""
        s = self.image_size
        if len(pixels.shape) != 4 or tuple(pixels.shape[1:]) != (3, s, s):
            raise EncoderError(f"expected pixels (N, 3, {s}, {s}), got {tuple(pixels.shape)}")
        n = int(pixels.shape[0])
        if n > self.max_batch:
            parts = [self.encode(pixels[i : i + self.max_batch]).vectors for i in range(0, n, self.max_batch)]
            return Embedding(np.concatenate(parts), self.model_id)
        ptr = device_pointer(pixels)
        if ptr is None:
            self.device.upload(self.input[:n], np.asarray(pixels))
        elif ptr != device_pointer(self.input) or np.dtype(pixels.dtype) != np.dtype(self.input.dtype):
            self.device.copy(self.input[:n], pixels)
        # else: the preprocessing kernel wrote straight into our input buffer
        self.enqueue(n)
        self.device.download(self.output[:n], self.host_output[:n])
        self.device.synchronize()
        return Embedding(l2_normalise(self.host_output[:n].copy()), self.model_id)
