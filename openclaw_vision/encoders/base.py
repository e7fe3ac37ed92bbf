"""The encoder stage's interface: normalised pixels in, unit-length embeddings out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Embedding:
    """N×D float32 rows of unit L2 norm, with the id of the model that produced them."""

    vectors: np.ndarray
    model_id: str

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def l2_normalise(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


@runtime_checkable
class ImageEncoder(Protocol):
    """What every backend (ONNX Runtime, TensorRT, torch) offers the node and the tools."""

    model_id: str
    embed_dim: int
    image_size: int
    backend: str
    precision: str

    def encode(self, pixels: np.ndarray) -> Embedding:
        """pixels: (N, 3, S, S) float32, normalised per `PreprocessSpec` → Embedding of N rows."""
        ...


class EncoderError(RuntimeError):
    """A model that cannot be loaded or an input it cannot take."""
