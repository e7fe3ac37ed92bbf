"""Next-token choice from one logits vector: greedy, or temperature with nucleus (top-p) sampling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.numerics import softmax


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")


class Sampler:
    def __init__(self, cfg: Sampling) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits, np.float64)
        if self.cfg.temperature == 0:
            return int(np.argmax(logits))
        p = softmax(logits / self.cfg.temperature)
        order = np.argsort(-p)
        keep = np.cumsum(p[order]) - p[order] < self.cfg.top_p  # smallest set reaching top_p (at least one)
        chosen = order[keep]
        q = p[chosen] / p[chosen].sum()
        return int(chosen[self.rng.choice(len(chosen), p=q)])
