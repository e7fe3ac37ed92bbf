"""ONNX Runtime backend: the CPU default.

The model id, width and input size are read from the ONNX file's metadata (written at export,
read by `ModelInfo`, shared with the other backends), so a node publishing features always says
which weights made them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.ortsession import session
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


class OnnxRuntimeEncoder(HostInput):
    backend = "onnxruntime"

    def __init__(self, model_path: str | Path, threads: int = 0, providers: list[str] | None = None,
                 lanes: int = 1) -> None:  # fmt: skip
        """`lanes`: calls the caller makes at once (one session answers them in parallel, each on the calling
        thread and its share of `threads`: 0 = the usable cores); `lanes` says how many it took."""
        path = check_model_file(model_path)
        self.lanes = max(1, lanes)
        try:
            self.session = session(path, threads, providers=providers, lanes=self.lanes)
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
