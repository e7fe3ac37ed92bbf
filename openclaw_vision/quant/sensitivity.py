"""Sensitivity: how much each layer suffers from INT8, measured two ways.

`local` (one pass, any model size): each layer's own output error under its own fake
quantisation, SQNR = 10·log10(Σy² / Σ(y_q − y)²) in dB over the probe frames, all layers
collected in one run of `qdq.build_probe_model` (about twice a float run). It is what scales
to ViT-bigG-14 (289 layers at seconds per image); it ranks layers by how much INT8 disturbs
them where they are, not by what that does to the embedding.

`sweep` (end to end, one run per layer): the damage of quantising each layer alone, everything
else float, on the final embedding. Measured on one fake-quantisation model
(`qdq.build_switch_model`): each run switches one layer's quantisation on, with the same
scales and rounding as the real Q/DQ model (float accumulation instead of integer; the two
agree to ~1e-7 in cosine here). One session serves the whole sweep — building a session per
layer cost ~2.4 s each on ViT-B/32, the switch model ~0.7 s per layer on SWEEP_FRAMES
native-resolution held-out frames. It costs one run per layer, so the quantiser runs it only
where its estimated time fits a budget; where it ran, its ranking (most damaging first)
drives the hybrid partition, otherwise the local one does. Tables and the plot go into the
report, grouped by block and by role, so a reader sees *where* a model is fragile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..core.gate import Metrics
from ..core.numerics import l2_normalise
from ..core.ortsession import session
from .evaluate import Evaluator, compare
from .graph import Layer
from .qdq import SWITCH_INPUT, probe_outputs

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
            **self.layer.names(),
            "mean_cosine": round(self.metrics.mean_cosine, 7),
            "min_cosine": round(self.metrics.min_cosine, 7),
            "kl": float(f"{self.metrics.kl:.4g}"),
        }


def sweep(
    layers: list[Layer], switch_model: bytes, evaluator: Evaluator, resolution: str, progress=None
) -> list[LayerSensitivity]:
    """Score each layer quantised alone, through the switch model (see module doc)."""
    wrap = progress or (lambda it, desc: it)
    sess = session(switch_model, evaluator.threads, quiet=True)
    name = sess.get_inputs()[0].name
    pixels = evaluator.heldout[resolution][:SWEEP_FRAMES]
    reference = evaluator.reference[resolution][: len(pixels)]
    out = []
    for i, layer in enumerate(wrap(layers, "sensitivity (one layer at a time)")):
        switch = np.zeros(len(layers), bool)
        switch[i] = True
        emb = sess.run(None, {name: pixels, SWITCH_INPUT: switch})[0]
        emb = l2_normalise(emb)
        out.append(LayerSensitivity(layer, compare(emb, reference)))
    return out


def worst_per_layer(*runs: list[LayerSensitivity]) -> list[LayerSensitivity]:
    """Layer by layer, the run where the layer did more damage (sweeps of the same layers on several rows:
    the native one and the shift row, whose frames the calibration never saw)."""
    return [min(same, key=lambda r: (r.metrics.mean_cosine, -r.metrics.kl)) for same in zip(*runs, strict=True)]


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


# --- local, one pass ----------------------------------------------------------------------------

#: Frames the probe runs on by default (spread over the calibration frames).
PROBE_FRAMES = 16


@dataclass
class LocalError:
    layer: Layer
    err: float  # Σ (y_q − y)² over the probe frames
    sig: float  # Σ y²

    @property
    def sqnr_db(self) -> float:
        """Signal-to-quantisation-noise ratio of the layer's output; lower = more sensitive."""
        if self.err <= 0:
            return math.inf
        return 10.0 * math.log10(max(self.sig, 1e-30) / self.err)

    def as_dict(self) -> dict:
        return {
            **self.layer.names(),
            "sqnr_db": round(self.sqnr_db, 3) if math.isfinite(self.sqnr_db) else None,
            "relative_error": float(f"{self.err / max(self.sig, 1e-30):.4g}"),
        }


def local(layers: list[Layer], probe_sess, batches: Iterable[np.ndarray], progress=None) -> list[LocalError]:
    """Each layer's output SQNR under its own fake quantisation, all layers from one pass of the probe model."""
    wrap = progress or (lambda it, desc: it)
    names = [n for i in range(len(layers)) for n in probe_outputs(i)]
    inp = probe_sess.get_inputs()[0].name
    totals = np.zeros(len(names), np.float64)
    for x in wrap(batches, "sensitivity, local (one pass, all layers)"):
        totals += np.array([float(v) for v in probe_sess.run(names, {inp: x})], np.float64)
    return [LocalError(layer, totals[2 * i], totals[2 * i + 1]) for i, layer in enumerate(layers)]


def local_ranking(results: list[LocalError]) -> list[str]:
    """Node names, lowest SQNR (most disturbed) first."""
    return [r.layer.node for r in sorted(results, key=lambda r: r.sqnr_db)]


def block_table(results: list[LocalError]) -> list[dict]:
    """One row per transformer block (and one for the layers outside them): SQNR per role, the block's worst."""
    rows: dict[int, dict] = {}
    for r in results:
        row = rows.setdefault(r.layer.block, {"block": r.layer.block})
        row[r.layer.role] = round(r.sqnr_db, 2) if math.isfinite(r.sqnr_db) else None
    out = []
    for block in sorted(rows):
        row = rows[block]
        values = [v for k, v in row.items() if k != "block" and v is not None]
        row["worst_db"] = min(values) if values else None
        out.append(row)
    return out


def rank_agreement(a: list[str], b: list[str]) -> float:
    """Spearman correlation of two rankings of the same layers (1: same order; 0: unrelated)."""
    pos_b = {name: i for i, name in enumerate(b)}
    n = len(a)
    if n < 2:
        return 1.0
    d2 = sum((i - pos_b[name]) ** 2 for i, name in enumerate(a))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))
