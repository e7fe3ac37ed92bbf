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


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row of (N, K) scores of the same N frames against K items: does the candidate pick what FP32 picks?

    The tie rule. Let e = candidate − reference be what the INT8 model did to the frame's scores,
    a the FP32 top item and k the candidate's. The frame agrees when the FP32 margin between them,
    reference[a] − reference[k], is at most the INT8 model's perturbation on that frame:
    max |e_j − mean(e)| over the items j other than a and k (0 when there are none). k = a has
    margin 0 and always agrees; so does an exact FP32 tie, whichever way it falls.

    Why: a margin smaller than what INT8 does to this frame's other scores anyway is a tie that
    the CPU's integer kernels decide (AVX2 and VNNI round differently), not a change of answer;
    random weights are full of such near-ties. The two items compared are left out of the
    measurement so a flip cannot widen its own band: an error aimed at one pair beyond the
    frame's noise (a clear-margin flip) still counts against the model. Centred, because moving
    every score by the same amount reorders nothing. The band grows with the perturbation, so
    this term means something only beside the cosine checks, which bound the perturbation.
    """
    reference, candidate = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    rows = np.arange(len(reference))
    a, k = reference.argmax(axis=1), candidate.argmax(axis=1)
    others = np.ones(reference.shape, bool)
    others[rows, a] = others[rows, k] = False
    e = candidate - reference
    count = np.maximum(others.sum(axis=1, keepdims=True), 1)
    centred = np.abs(e - (e * others).sum(axis=1, keepdims=True) / count)
    band = np.where(others, centred, 0.0).max(axis=1) if reference.shape[1] else np.zeros(len(rows))
    return reference[rows, a] - reference[rows, k] <= band


#: CLIP's logit scale: the retrieval distribution softmax(100 · cosine) the gate's KL compares.
RETRIEVAL_LOGIT_SCALE = 100.0


def agreement(candidate: np.ndarray, reference: np.ndarray, labels: np.ndarray | None = None,
              label_logit_scale: float = RETRIEVAL_LOGIT_SCALE) -> dict[str, float]:  # fmt: skip
    """How far unit candidate rows (INT8) are from unit reference rows (FP32) of the same frames: the
    INT8 gate's metrics, by name (gate.Metrics' fields).

    - mean/min cosine of matching rows;
    - nn_agreement: the share of frames whose nearest reference item is their own frame, ties by the
      FP32 margin (`top1_agreement`);
    - kl: KL of the retrieval distribution softmax(100 · u_i·V) from softmax(100 · v_i·V);
    - collapse: mean ‖u_i − v_i‖² (the image term of the cross-modal collapse degree);
    - with `labels` ((K, D) unit text embeddings of a label set, scored as the labels node scores):
      zero_shot_top1 (top-1 label agreement, the same tie rule) and zero_shot_kl (over every label).
    """
    cos = np.sum(candidate * reference, axis=1)
    sims, ref_sims = candidate @ reference.T, reference @ reference.T
    kl = kl_from_logits(RETRIEVAL_LOGIT_SCALE * ref_sims, RETRIEVAL_LOGIT_SCALE * sims)
    out = {
        "mean_cosine": float(cos.mean()),
        "min_cosine": float(cos.min()),
        "nn_agreement": float(top1_agreement(ref_sims, sims).mean()),
        "kl": float(kl.mean()),
        "collapse": float(np.mean(np.sum((candidate - reference) ** 2, axis=1))),
    }
    if labels is not None:
        ref_cos, cand_cos = reference @ labels.T, candidate @ labels.T
        out["zero_shot_top1"] = float(top1_agreement(ref_cos, cand_cos).mean())
        out["zero_shot_kl"] = float(kl_from_logits(label_logit_scale * ref_cos, label_logit_scale * cand_cos).mean())
    return out
