"""PyTorch on CUDA in FP16: the GPU encoder for machines without TensorRT.

The ONNX graph runs through `OnnxTorchGraph` on the GPU in FP16. Input and output are the
encoder's CuPy buffers seen as torch tensors through DLPack (no copy), and torch runs on the
encoder's CuPy stream (an external stream to torch), so the fused preprocessing kernel, the
graph and the copy back are queued in order on one stream with no synchronisation between them.
On CUDA the graph's kernels are captured once per batch size into a CUDA graph and replayed
(launch cost: one call instead of hundreds); if capture fails the graph runs eagerly.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import EncoderError
from .gpu_common import CudaDevice, GpuEncoder

log = logging.getLogger(__name__)


class TorchCudaEncoder(GpuEncoder):
    backend = "torch"

    def __init__(
        self, model_path: str | Path, device: Any = None, max_batch: int = 8, cuda_graphs: bool = True
    ) -> None:
        import torch

        from .torch_onnx import OnnxTorchGraph

        path = Path(model_path)
        self._read_metadata(path)
        self.device = device or CudaDevice()
        self._torch = torch
        on_gpu = isinstance(self.device, CudaDevice)
        self.torch_device = torch.device("cuda", self.device.device.id) if on_gpu else torch.device("cpu")
        dtype = torch.float16 if on_gpu else torch.float32
        self.graph = OnnxTorchGraph(path, self.torch_device, dtype)
        self.precision = f"{self.precision} on fp16" if on_gpu else self.precision
        self._allocate(self.device, max_batch, np.float16 if on_gpu else np.float32)
        # the encoder's buffers as torch tensors: same memory (DLPack), no copies
        self._in_t = torch.from_dlpack(self.input)
        self._out_t = torch.from_dlpack(self.output)
        self._stream = torch.cuda.ExternalStream(self.device.stream_handle) if on_gpu else None
        self._cuda_graphs = cuda_graphs and on_gpu
        self._graphs: dict[int, Any] = {}

    def _stream_ctx(self):
        return self._torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()

    def _forward(self, n: int) -> None:
        self._out_t[:n].copy_(self.graph(self._in_t[:n]).float())

    def enqueue(self, n: int) -> None:
        torch = self._torch
        with torch.inference_mode(), self._stream_ctx():
            if not self._cuda_graphs:
                self._forward(n)
                return
            g = self._graphs.get(n)
            if g is None:
                g = self._capture(n)
            if g is False:
                self._forward(n)
            else:
                g.replay()

    def _capture(self, n: int) -> Any:
        torch = self._torch
        try:
            self._forward(n)  # warm-up outside capture (allocations, lazy init)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self._stream):
                self._forward(n)
        except Exception as err:  # capture is an optimisation: run eagerly, say why once
            log.warning("CUDA graph capture of the torch encoder failed at batch %d (%s); running eagerly", n, err)
            self._graphs[n] = False
            return False
        self._graphs[n] = graph
        return graph


def cuda_usable() -> str | None:
    """None if torch sees a CUDA GPU, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU"
    return None


__all__ = ["EncoderError", "TorchCudaEncoder", "cuda_usable"]
