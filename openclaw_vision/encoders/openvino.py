"""OpenVINO backend: the same FP32 and Q/DQ INT8 ONNX files, compiled by OpenVINO's CPU plugin.

No second model format: OpenVINO reads the ONNX file itself (its ONNX front end keeps the
file's metadata under the model's `framework` runtime info, which `ModelInfo` reads exactly as
for ONNX Runtime). On x86 CPUs its INT8 kernels can beat ONNX Runtime's on the same Q/DQ
model; the two runtimes may round that model differently, so an INT8 model runs here only as
far as its accuracy gate was measured here, on this ISA class (the backend table's wrapper,
gating.py, applies the policy to every backend; oneDNN honours ONEDNN_MAX_CPU_ISA, so the class is
the lower of the CPU's and that cap).

`backend: auto` also leaves INT8 models to ONNX Runtime on CPUs without INT8 dot-product units
(VNNI/AMX): measured on an AVX2-only AMD EPYC (ViT-B/32, batch 1, 2 threads, one interleaved
`bench --mode stages` run) OpenVINO INT8 took 98 ms against ONNX Runtime INT8's 59 ms (and
OpenVINO FP32's 84 ms), its INT8 GEMM 119 against 192 GOP/s; on a Xeon with AVX-512 VNNI it was
the other way round (15.6 ms against 20.6 ms). FP32 models go to OpenVINO on any x86 CPU.

`performance_hint` says how a batch runs: `latency` (the default) as one request on all threads;
`throughput` each frame a request of its own on NUM_STREAMS streams of one thread each (a model
compiled for a static batch of one). Alone, on a 2-core EPYC with AVX-512 VNNI (ViT-B/32 INT8,
per frame at batch 1 / 4 / 8, interleaved): one request 17.0 / 15.8 / 14.8 ms, a model compiled per
static batch size 16.8 / 15.0 / 14.1 ms, two streams 29.7 / 13.3 / 13.5 ms. In the multi-camera
node the streams lost that lead and cost memory: four 1080p cameras at 30 fps into one node, one
run each (`bench --mode cameras --cameras 4 --performance-hint ...`), frames/s 33.2 on streams
against 35.4 as one request (JPEG), 25.8 against 28.2 (raw), resident memory 670 against 385 MB and
728 against 433 MB (the streams' compiled model: +290 MB). So the node runs a batch as one request;
`throughput` is there for a host with cores to spare beside the encode.

Inference precision is pinned to f32: on CPUs with bf16 units OpenVINO would otherwise run
the float parts of the model in bf16, and the FP32 model would no longer be the FP32 reference.
"""

from __future__ import annotations

import importlib
import logging
import platform
from pathlib import Path

import numpy as np

from ..core import cpu
from .base import (
    Embedding,
    EncoderError,
    HostInput,
    ModelInfo,
    check_model_file,
    checked_output,
    l2_normalise,
    one_line,
)
from .options import PERFORMANCE_HINTS

log = logging.getLogger(__name__)

X86 = ("x86_64", "amd64", "i386", "i686")


def usable() -> tuple[bool, str]:
    """Whether `backend: auto` may pick OpenVINO here, and why: x86 only, and importable."""
    machine = platform.machine().lower()
    if machine not in X86:
        return False, f"not x86 ({machine})"
    try:
        ov = importlib.import_module("openvino")
    except ImportError as err:
        return False, f"not installed ({err}; `pip install openclaw_vision[openvino]`)"
    if not hasattr(ov, "Core"):
        return False, "openvino has no Core (broken install)"
    return True, f"{machine}, openvino {version()} importable"


def declines(info) -> str | None:
    """Why `backend: auto` should leave this model to the next backend although OpenVINO can run it:
    INT8 on a CPU without INT8 dot-product units (VNNI/AMX), where ONNX Runtime's INT8 kernels are
    faster (measured: the module doc). None: take it."""
    if info.precision == "int8" and not cpu.int8_dot_units():
        return "INT8 on a CPU without VNNI/AMX, where ONNX Runtime's INT8 kernels are faster"
    return None


def version() -> str:
    import openvino

    return str(getattr(openvino, "__version__", "?")).split("-")[0]


def _dims(shape) -> list[int | None]:
    return [d.get_length() if d.is_static else None for d in shape]


class OpenVinoEncoder(HostInput):
    backend = "openvino"

    def __init__(self, model_path: str | Path, threads: int = 0, performance_hint: str = "latency") -> None:
        if performance_hint not in PERFORMANCE_HINTS:
            raise EncoderError(
                f"unknown performance_hint {performance_hint!r}; choose one of {', '.join(PERFORMANCE_HINTS)}"
            )
        try:
            import openvino as ov
        except ImportError as err:
            raise EncoderError(f"the openvino backend needs `pip install openvino` ({err})") from err
        path = check_model_file(model_path)
        core = ov.Core()
        try:
            model = core.read_model(str(path))
        except Exception as err:  # OpenVINO raises RuntimeError subclasses of its own; name the file
            raise EncoderError(f"cannot load {path}: {one_line(err)}") from err
        meta = {}
        if model.has_rt_info(["framework"]):
            meta = {str(k): v.astype(str) for k, v in model.get_rt_info(["framework"]).astype(dict).items()}
        self.info = ModelInfo.from_metadata(
            meta, path, _dims(model.inputs[0].get_partial_shape()), _dims(model.outputs[0].get_partial_shape())
        )
        self.model_id, self.precision = self.info.model_id, self.info.precision
        self.image_size, self.embed_dim = self.info.image_size, self.info.embed_dim
        self.max_batch = self.info.max_batch
        self.threads = threads if threads > 0 else cpu.usable_cores()
        self.performance_hint = performance_hint
        self._core, self._path = core, path
        if performance_hint == "throughput":
            self._request, self._streams = None, self._stream_queue()
        else:
            self._request, self._streams = self._compile("LATENCY", model).create_infer_request(), None

    def _compile(self, hint: str, model=None, **extra):
        """The model (read again unless given) compiled for the CPU with `hint` (f32 inference precision,
        our thread count)."""
        model = self._core.read_model(str(self._path)) if model is None else model
        if hint == "THROUGHPUT":  # single-frame requests: a static shape of 1
            model.reshape({model.inputs[0].get_any_name(): [1, 3, self.image_size, self.image_size]})
        config = {"PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": self.threads, "INFERENCE_PRECISION_HINT": "f32"}
        try:
            return self._core.compile_model(model, "CPU", {**config, **extra})
        except Exception as err:
            raise EncoderError(f"OpenVINO cannot compile {self._path} for the CPU: {one_line(err)}") from err

    def _stream_queue(self):
        """One stream per thread, each running one frame at a time, and as many requests as streams."""
        import openvino as ov

        compiled = self._compile("THROUGHPUT", NUM_STREAMS=self.threads)
        return ov.AsyncInferQueue(compiled, int(compiled.get_property("NUM_STREAMS")))

    def encode(self, pixels: np.ndarray) -> Embedding:
        s = self.image_size
        if pixels.ndim != 4 or pixels.shape[1:] != (3, s, s):
            raise EncoderError(f"expected pixels (N, 3, {s}, {s}), got {pixels.shape}")
        pixels = np.ascontiguousarray(pixels, np.float32)
        if self._request is not None:
            self._request.infer({0: pixels})
            out = self._request.get_output_tensor(0).data  # a view of the request's buffer: normalised into a copy
        else:
            out = self._on_streams(pixels)
        return Embedding(l2_normalise(checked_output(out, len(pixels), self.embed_dim, self.backend)), self.model_id)

    def _on_streams(self, pixels: np.ndarray) -> np.ndarray:
        """Each frame a request of its own on the streams, its output row copied out as it completes."""
        rows: list = [None] * len(pixels)

        def done(request, i: int) -> None:
            rows[i] = np.array(request.get_output_tensor(0).data[0])

        self._streams.set_callback(done)
        for i in range(len(pixels)):
            self._streams.start_async({0: pixels[i : i + 1]}, i)
        self._streams.wait_all()
        if any(r is None for r in rows):
            raise EncoderError(f"{self.backend}: {sum(r is None for r in rows)} of {len(rows)} requests gave no output")
        return np.stack(rows)
