"""Image encoder backends behind one protocol; `create_encoder` picks one from configuration."""

from __future__ import annotations

import logging
from pathlib import Path

from .base import Embedding, EncoderError, ImageEncoder, l2_normalise

__all__ = ["Embedding", "EncoderError", "ImageEncoder", "create_encoder", "l2_normalise"]

log = logging.getLogger(__name__)

BACKENDS = ("auto", "onnxruntime", "tensorrt")


def create_encoder(backend: str, model_path: str | Path, threads: int = 0) -> ImageEncoder:
    """Build the configured backend. `auto` uses the CPU here: no TensorRT backend ships yet."""
    if backend not in BACKENDS:
        raise EncoderError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "tensorrt":
        raise EncoderError("the tensorrt backend is not available in this build; use onnxruntime")
    from .onnxruntime import OnnxRuntimeEncoder

    enc = OnnxRuntimeEncoder(model_path, threads=threads)
    log.info(
        "encoder backend %s (picked for %r), model %s, %d threads", enc.backend, backend, enc.model_id, enc.threads
    )
    return enc
