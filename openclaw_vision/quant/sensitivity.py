"""Sensitivity sweep: the damage of quantising each layer alone, everything else float.

Measured on one fake-quantisation model (`qdq.build_switch_model`): each run switches one layer's
quantisation on, with the same scales and rounding as the real Q/DQ model (float accumulation
instead of integer; the two agree to ~1e-7 in cosine here). One session serves the whole sweep
— building a session per layer cost ~2.4 s each on ViT-B/32, the switch model ~0.7 s per layer
on SWEEP_FRAMES native-resolution held-out frames. The partition's trials then score real Q/DQ
models. The ranking
(most damaging first) drives the hybrid partition; the table and plot go into the report,
grouped by block and by role so a reader sees *where* a model is fragile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evaluate import Evaluator, Metrics, compare, session
from .graph import Layer
from .qdq import SWITCH_INPUT

SWEEP_FRAMES = 8


@dataclass
class LayerSensitivity:
    layer: Layer
    metrics: Metrics

    @property
    def damage(self) -> float:
        """1 − mean cosine vs FP32: 0 means harmless."""
        return 1.0 - self.metrics.mean_cosine

    def as_dict(self) -> dict:
        return {
            "node": self.layer.node,
            "label": self.layer.label,
            "role": self.layer.role,
            "block": self.layer.block,
            "mean_cosine": round(self.metrics.mean_cosine, 7),
            "min_cosine": round(self.metrics.min_cosine, 7),
            "kl": float(f"{self.metrics.kl:.4g}"),
        }


def sweep(
    layers: list[Layer], switch_model: bytes, evaluator: Evaluator, resolution: str, progress=None
) -> list[LayerSensitivity]:
    """Score each layer quantised alone, through the switch model (see module doc)."""
    wrap = progress or (lambda it, desc: it)
    sess = session(switch_model, evaluator.threads)
    name = sess.get_inputs()[0].name
    pixels = evaluator.heldout[resolution][:SWEEP_FRAMES]
    reference = evaluator.reference[resolution][: len(pixels)]
    out = []
    for i, layer in enumerate(wrap(layers, "sensitivity (one layer at a time)")):
        switch = np.zeros(len(layers), bool)
        switch[i] = True
        emb = sess.run(None, {name: pixels, SWITCH_INPUT: switch})[0]
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        out.append(LayerSensitivity(layer, compare(emb, reference)))
    return out


def ranking(results: list[LayerSensitivity]) -> list[str]:
    """Node names, most damaging first (KL breaks ties)."""
    return [r.layer.node for r in sorted(results, key=lambda r: (r.damage, r.metrics.kl), reverse=True)]


def by_group(results: list[LayerSensitivity], key: str) -> dict[str, float]:
    """Summed damage per role or per block: where the model is fragile."""
    groups: dict[str, float] = {}
    for r in results:
        name = r.layer.role if key == "role" else ("-" if r.layer.block < 0 else f"block{r.layer.block}")
        groups[name] = groups.get(name, 0.0) + r.damage
    return groups
