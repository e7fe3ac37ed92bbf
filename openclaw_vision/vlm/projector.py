"""LLaVA-style projector: one image embedding → `tokens` visual prefix embeddings for the decoder.

fc1 (embedding width → LLM hidden), GELU, fc2 (hidden → tokens × hidden), reshaped to
(tokens, hidden). LLaVA projects one feature per patch; a VisualFeatures message carries one
pooled vector, so fc2 spreads it over a configurable number of prefix positions instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProjectorConfig:
    in_dim: int  # the encoder's embedding width (512 for ViT-B/32)
    hidden: int  # the LLM's hidden size
    tokens: int = 8  # visual prefix positions per frame


def projector_shapes(cfg: ProjectorConfig) -> dict[str, tuple[int, ...]]:
    return {
        "projector.fc1.weight": (cfg.hidden, cfg.in_dim),
        "projector.fc1.bias": (cfg.hidden,),
        "projector.fc2.weight": (cfg.tokens * cfg.hidden, cfg.hidden),
        "projector.fc2.bias": (cfg.tokens * cfg.hidden,),
    }


def random_projector_params(cfg: ProjectorConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random init: normal weights scaled by 1/sqrt(fan-in), zero biases, float32."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in projector_shapes(cfg).items():
        if name.endswith("bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(shape[1] ** -0.5)
    return out


class Projector:
    def __init__(self, cfg: ProjectorConfig, params: dict, xp=np) -> None:
        self.cfg, self.xp = cfg, xp
        self.w1, self.b1 = params["projector.fc1.weight"], params["projector.fc1.bias"]
        self.w2, self.b2 = params["projector.fc2.weight"], params["projector.fc2.bias"]

    def __call__(self, embedding) -> object:
        """(in_dim,) → (tokens, hidden)."""
        xp = self.xp
        x = xp.asarray(embedding, dtype=self.w1.dtype).reshape(-1)
        if x.shape[0] != self.cfg.in_dim:
            raise ValueError(f"projector expects a {self.cfg.in_dim}-d embedding, got {x.shape[0]}-d")
        h = x @ self.w1.T + self.b1
        h = 0.5 * h * (1 + xp.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))  # GELU (tanh form)
        return (h @ self.w2.T + self.b2).reshape(self.cfg.tokens, self.cfg.hidden)
