"""The text tower at run time: strings → CLIP token ids → ONNX Runtime → unit-length embeddings.

The ONNX file is a text export (`openclaw-vision export --tower text`); its metadata says which
model it is (`model_id`, the same id as the image export of the same weights), the embedding
width, the context length and the model's `logit_scale`, so nothing else has to be configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..encoders.base import Embedding, EncoderError, l2_normalise
from .tokenizer import ClipTokenizer

#: Rows per ONNX Runtime call: label sets are small; this bounds memory for long lists.
BATCH = 32


class TextEncoder:
    backend = "onnxruntime"
    precision = "fp32"

    def __init__(self, model_path: str | Path, threads: int = 0, bpe_path: str | Path | None = None) -> None:
        from ..core.ortsession import session

        path = Path(model_path)
        if not path.is_file():
            raise EncoderError(
                f"text model not found: {path} (build it with `openclaw-vision export --model <the image model's "
                "name> --tower text [--checkpoint <its weights>]`)"
            )
        try:
            self.session = session(path, threads)
        except Exception as err:  # onnxruntime raises its own exception types; name the file
            raise EncoderError(f"cannot load {path}: {err}") from err
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("tower") != "text":
            raise EncoderError(f"{path} is not a text tower export (export one with `--tower text`)")
        self.model_id = meta.get("model_id", path.stem)
        self.embed_dim = int(meta["embed_dim"])
        self.context_length = int(meta.get("context_length", 77))
        self.logit_scale = float(meta.get("logit_scale", 100.0))
        self._input = self.session.get_inputs()[0].name
        # exports with a symbolic token axis run only up to the last end token (see encode_ids)
        self.trim = not isinstance(self.session.get_inputs()[0].shape[1], int)
        self.tokenizer = ClipTokenizer(bpe_path, self.context_length)

    def encode_ids(self, ids: np.ndarray) -> Embedding:
        """(N, context_length) int64 token ids → N unit-length rows.

        Each batch runs only up to its last end-of-text token (the largest id of a row is where the
        tower pools): the mask is causal, so the padding after it changes nothing and is not
        computed. A label of a few words costs ~10 positions instead of 77."""
        if ids.ndim != 2 or ids.shape[1] != self.context_length:
            raise EncoderError(f"expected token ids (N, {self.context_length}), got {ids.shape}")
        out = []
        for i in range(0, len(ids), BATCH):
            chunk = ids[i : i + BATCH]
            used = int(chunk.argmax(axis=1).max()) + 1 if self.trim else self.context_length
            out.append(self.session.run(None, {self._input: np.ascontiguousarray(chunk[:, :used])})[0])
        vectors = np.concatenate(out) if out else np.zeros((0, self.embed_dim), np.float32)
        return Embedding(l2_normalise(vectors), self.model_id)

    def encode(self, texts: Sequence[str]) -> Embedding:
        """Strings → N unit-length rows (tokenised as CLIP was trained, 77 tokens each)."""
        return self.encode_ids(self.tokenizer(list(texts)))
