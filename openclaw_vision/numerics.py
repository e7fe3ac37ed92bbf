"""The package's shared numerics, once: softmax, log-softmax, KL divergence, L2 normalisation, cosine.

Every stage that scores embeddings (the encoders, zero-shot labels, the INT8 gate, the VLM's
sampler and attention) uses these, so a change of convention (the epsilon of a normalisation,
which axis a softmax runs over) happens in one place. All work over the last axis and take any
array module with NumPy's API (`xp`: NumPy on the CPU, CuPy where the VLM runs on a GPU).
"""

from __future__ import annotations

import numpy as np

#: Below this norm a vector is treated as zero (it stays zero instead of becoming NaN).
NORM_EPS = 1e-12


def log_softmax(z, xp=np):
    """log softmax over the last axis, shifted by the maximum so no exp overflows."""
    z = z - z.max(axis=-1, keepdims=True)
    return z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))


def softmax(z, xp=np):
    """softmax over the last axis (sums to 1), shifted by the maximum so no exp overflows."""
    e = xp.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def kl_from_logits(ref_logits: np.ndarray, cand_logits: np.ndarray) -> np.ndarray:
    """KL(softmax(ref) ‖ softmax(cand)) per row (last axis): how much the candidate changes the reference's
    distribution."""
    logp, logq = log_softmax(ref_logits), log_softmax(cand_logits)
    return np.sum(np.exp(logp) * (logp - logq), axis=-1)


def l2_normalise(x, eps: float = NORM_EPS, xp=np, dtype=np.float32):
    """Rows scaled to unit length (last axis), as `dtype` (embeddings are float32 throughout); a zero row stays zero."""
    x = xp.asarray(x, dtype)
    return x / xp.maximum(xp.linalg.norm(x, axis=-1, keepdims=True), eps)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows of `a` and `b` (last axis)."""
    return np.sum(l2_normalise(a, dtype=np.float64) * l2_normalise(b, dtype=np.float64), axis=-1)
