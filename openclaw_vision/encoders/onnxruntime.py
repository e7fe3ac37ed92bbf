"""ONNX Runtime backend: the CPU default.

The model id, width and input size are read from the ONNX file's metadata (written at export,
read by `ModelInfo`, shared with the other backends), so a node publishing features always says
which weights made them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

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


def session_options(threads: int = 0, spinning: bool = False, exact_u8s8: bool = True):
    """ONNX Runtime CPU session options shared by the node, the quantiser and the benchmarks.

    `session.x64quantprecision`: on x86 CPUs without VNNI (AVX2-only, e.g. the AMD EPYC
    machines here), ORT's default U8S8 integer GEMM pairs products in saturating 16-bit adds
    (vpmaddubsw); our INT8 models then drift from what they were gated on (measured: the
    switch model and the real Q/DQ model differed by 2e-3 instead of 2e-5; the tiny tower's
    gate fell from 0.9999 to 0.9988). The option makes ORT use exact U8U8 kernels on such CPUs
    only; it changes nothing on VNNI machines (ORT's session-option header documents it).
    `exact_u8s8=False` leaves ORT's default kernel (tests use it to check the gate on both paths).
    Spinning is off by default: a node runs one session next to DDS threads, and spinning idle
    threads steal the CPU the transport and preprocessing need.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads if threads > 0 else (os.cpu_count() or 1)
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    opts.add_session_config_entry("session.x64quantprecision", "1" if exact_u8s8 else "0")
    return opts


def session(
    model: str | Path | bytes,
    threads: int = 0,
    *,
    level: str = "all",
    providers: list[str] | None = None,
    spinning: bool = False,
    exact_u8s8: bool = True,
    quiet: bool = False,
):
    """The one place an ONNX Runtime session is made (the node, text tower, quantiser, export check, benches).

    `model`: a path, or the bytes of a model with embedded weights. `level="basic"`: only graph
    optimisations that keep every intermediate tensor as the graph has it (for observing
    activations); "all" is what the node runs. `quiet`: warnings off (the quantiser's many
    candidate models would repeat the same ones).
    """
    import onnxruntime as ort

    opts = session_options(threads, spinning, exact_u8s8)
    if level == "basic":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if quiet:
        opts.log_severity_level = 3
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, opts, providers=providers or ["CPUExecutionProvider"])


class OnnxRuntimeEncoder(HostInput):
    backend = "onnxruntime"

    def __init__(self, model_path: str | Path, threads: int = 0, providers: list[str] | None = None) -> None:
        path = check_model_file(model_path)
        try:
            self.session = session(path, threads, providers=providers)
        except Exception as err:  # onnxruntime raises its own exception types; name the file
            data = path.with_name(path.name + ".data")
            hint = "" if data.is_file() else f" (a model above 1 GB is two files: keep {data.name} beside it)"
            raise EncoderError(f"cannot load {path}: {one_line(err)}{hint}") from err
        inp, out = self.session.get_inputs()[0], self.session.get_outputs()[0]
        self._input, self._output = inp.name, out.name
        meta = self.session.get_modelmeta().custom_metadata_map
        self.info = ModelInfo.from_metadata(meta, path, inp.shape, out.shape)
        self.model_id, self.precision = self.info.model_id, self.info.precision
        self.image_size, self.embed_dim = self.info.image_size, self.info.embed_dim
        self.max_batch = self.info.max_batch
        self.threads = self.session.get_session_options().intra_op_num_threads

    def encode(self, pixels: np.ndarray) -> Embedding:
        s = self.image_size
        if pixels.ndim != 4 or pixels.shape[1:] != (3, s, s):
            raise EncoderError(f"expected pixels (N, 3, {s}, {s}), got {pixels.shape}")
        out = self.session.run([self._output], {self._input: np.ascontiguousarray(pixels, np.float32)})[0]
        return Embedding(l2_normalise(checked_output(out, len(pixels), self.embed_dim, self.backend)), self.model_id)
