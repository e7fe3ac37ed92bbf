"""Outlier migration (SmoothQuant, Xiao et al. 2023) folded into the FP32 graph before INT8: same function, same speed.

Real CLIP towers have a few LayerNorm output channels tens of times wider than the rest (RepQ-ViT,
FQ-ViT; quant/profiles.py reproduces them). A per-tensor activation scale is set by those channels,
and every other channel of the QKV / FC1 input is left with a handful of levels. Migration divides
each channel j of the activation by s_j and multiplies row j of the GEMM's weight by s_j:

    s_j = max|X_j|^alpha / max|W_j|^(1-alpha)        (X W = (X / s)(s W))

The division goes into the LayerNorm that produces X (gamma_j / s_j, beta_j / s_j: nothing is added to
the graph, so the INT8 model is exactly as fast as without outliers) and the multiplication into the
weight, which is quantised per output channel afterwards as before. Only activations produced by a
LayerNormalization whose every consumer is a quantised MatMul are migrated (ln_1 → QKV, ln_2 → FC1,
ln_post → proj); the FC2 input follows a GELU and the out-projection's an attention product: what
stays wrong there is the partition's (sensitivity order, kept float). The exporter shares one gamma
and one beta initializer among all LayerNorms (and the zero beta with GEMM biases): each migrated
LayerNorm gets tensors of its own.

alpha is chosen per activation, among ALPHAS and "not migrated", by the gate's own metric taken
locally: the mean cosine between each token's FP32 GEMM output and its fake-INT8 output (per-tensor
activation scale, per-channel weight scales, `qdq`'s rounding), on the calibration pass's row sample
(its largest-|x| rows included: the outlier tokens decide the scale); an activation sampled on fewer than
MIN_ROWS rows (the final projection's, one token a frame) is left as it is. The Q/DQ form is untouched,
so the result stays valid for TensorRT's explicit-quantisation rules, OpenVINO and ONNX Runtime.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..models.onnx_files import Pending
from .calibrate import Range, TensorStats
from .graph import Layer
from .qdq import activation_qparams, quantise_weight

log = logging.getLogger(__name__)

ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: Rows (tokens) of each migratable activation the calibration pass keeps for the choice of alpha.
ROWS = 1024
#: Output columns the choice scores (a spread subset of wider GEMMs: the cosine estimate, not the result).
MAX_COLUMNS = 1024
#: A migration must cut the layer's local error (1 − cosine) by this share to be taken: on a layer without
#: outliers it moves range into the weights for nothing (the tiny random tower: alpha 0.9 everywhere, the
#: same end-to-end cosine, and one more zero-shot near-tie flipped).
MIN_GAIN = 0.25
#: Fewest sampled rows a migration is chosen on. s_j comes from each channel's maximum over the sample, and the
#: migrated tensor's per-tensor range is then fitted to those rows alone: the final projection reads one token a
#: frame, so 12-48 calibration frames give it 12-48 rows, and on ViT-L/14 `massive` its migrated range (chosen on
#: 12) clipped the shift row's frames: mean cosine 0.99868 every layer INT8, where plain INT8 scored 0.99973.
MIN_ROWS = 128


@dataclass(frozen=True)
class Group:
    """One activation produced by a LayerNormalization, and the quantised MatMuls reading it (all of its readers)."""

    norm: str  # the LayerNormalization node
    gamma: str
    beta: str
    activation: str
    layers: tuple[Layer, ...]

    @property
    def label(self) -> str:
        return "+".join(layer.label for layer in self.layers)


@dataclass
class Migration:
    """What the choice found for one group: alpha (None: not migrated) and the local cosines behind it."""

    group: Group
    alpha: float | None
    cosine_plain: float
    cosine: float
    factors: np.ndarray | None = None  # s_j, when migrated
    rows: int = 0  # the sampled rows it was chosen on

    def as_dict(self) -> dict:
        return {"layers": [layer.label for layer in self.group.layers], "norm": self.group.norm,
                "alpha": self.alpha, "rows": self.rows, "local_cosine_plain": round(self.cosine_plain, 6),
                "local_cosine": round(self.cosine, 6),
                "max_factor": None if self.factors is None else float(f"{self.factors.max():.4g}"),
                "min_factor": None if self.factors is None else float(f"{self.factors.min():.4g}")}  # fmt: skip


def groups(graph: onnx.ModelProto, layers: list[Layer]) -> list[Group]:
    """The activations migration can fold into their LayerNorm (see the module doc), in graph order."""
    producer = {out: node for node in graph.graph.node for out in node.output}
    readers: dict[str, int] = {}
    for node in graph.graph.node:
        if node.op_type == "Shape":  # reads the shape only, which migration does not change
            continue
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    inits = {i.name for i in graph.graph.initializer}
    by_act: dict[str, list[Layer]] = {}
    for layer in layers:
        by_act.setdefault(layer.activation, []).append(layer)
    out = []
    for act, readers_of in by_act.items():
        node = producer.get(act)
        if node is None or node.op_type != "LayerNormalization" or len(node.input) < 3:
            continue
        if not all(i in inits for i in node.input[1:3]) or readers.get(act, 0) != len(readers_of):
            continue  # a non-GEMM reader (or a computed gamma) would see the rescaled values
        if any(layer.op_type != "MatMul" or layer.channel_axis != 1 for layer in readers_of):
            continue
        out.append(Group(node.name, node.input[1], node.input[2], act, tuple(readers_of)))
    return out


def fake_quant(x: np.ndarray, r: Range, scheme: str) -> np.ndarray:
    """x through QuantizeLinear→DequantizeLinear with the scale `qdq` writes for `r` (signed symmetric here)."""
    scale, zp = activation_qparams(r, scheme)
    lo, hi = (-128, 127) if zp.dtype == np.int8 else (0, 255)
    return ((np.clip(np.rint(x / scale) + zp, lo, hi) - zp) * scale).astype(np.float32)


def _row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-30)))


def local_cosine(x: np.ndarray, weights: list[np.ndarray], s: np.ndarray, scheme: str) -> float:
    """Mean token cosine of X W against Q(X / s) Q_pc(s W), over the group's GEMMs (minmax scale of X / s)."""
    xs = x / s
    xq = fake_quant(xs, Range(float(xs.min()), float(xs.max())), scheme)
    total = 0.0
    for w in weights:
        q, scale = quantise_weight(w * s[:, None], axis=1)
        total += _row_cosine(x @ w, xq @ (q.astype(np.float32) * scale[None, :]))
    return total / len(weights)


def factors(act_absmax: np.ndarray, weight_absmax: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's s_j = max|X_j|^alpha / max|W_j|^(1-alpha) (channels never seen active keep s = 1)."""
    a = np.maximum(act_absmax.astype(np.float64), 1e-8)
    w = np.maximum(weight_absmax.astype(np.float64), 1e-8)
    s = a**alpha / w ** (1.0 - alpha)
    return np.where(act_absmax > 0, s, 1.0).astype(np.float32)


def choose(group: Group, stats: TensorStats, weights: list[np.ndarray], scheme: str) -> Migration:
    """The alpha (or none) with the best local cosine for `group` (see the module doc)."""
    x = stats.rows
    if x is None or stats.channel_absmax is None:
        raise ValueError(f"no row sample for {group.activation}: calibrate with rows=… for migratable tensors")
    cols = [w[:, np.linspace(0, w.shape[1] - 1, min(MAX_COLUMNS, w.shape[1])).round().astype(int)] for w in weights]
    w_absmax = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
    plain = local_cosine(x, cols, np.ones(x.shape[1], np.float32), scheme)
    best = Migration(group, None, plain, plain, rows=len(x))
    if len(x) < MIN_ROWS:
        return best
    for alpha in ALPHAS:
        s = factors(stats.channel_absmax, w_absmax, alpha)
        cos = local_cosine(x, cols, s, scheme)
        if cos > best.cosine:
            best = Migration(group, alpha, plain, cos, s, len(x))
    if best.alpha is not None and 1.0 - best.cosine > (1.0 - MIN_GAIN) * (1.0 - plain):
        return Migration(group, None, plain, plain, rows=len(x))
    return best


def plan(graph: onnx.ModelProto, layers: list[Layer], stats: dict[str, TensorStats], read, scheme: str,
         progress=None) -> list[Migration]:  # fmt: skip
    """One `Migration` per migratable group (`read(name)` gives an initializer's array)."""
    wrap = progress or (lambda it, desc: it)
    out = []
    for group in wrap(groups(graph, layers), "outlier migration: alpha per layer"):
        m = choose(group, stats[group.activation], [read(layer.weight) for layer in group.layers], scheme)
        log.info("migration %s: alpha %s, local cosine %.6f -> %.6f", group.label, m.alpha, m.cosine_plain, m.cosine)
        out.append(m)
    return out


def rewrite(graph: onnx.ModelProto, migrations: list[Migration], read) -> tuple[onnx.ModelProto, list[Pending]]:
    """The graph with each migrated LayerNorm reading gamma/s, beta/s of its own (embedded), and the new weights
    s·W to store, each computed only when written (`Workspace.replace` writes them where the weights live:
    ViT-bigG-14's migrated weights are 4 GB, never held at once)."""
    out = onnx.ModelProto()
    out.CopyFrom(graph)
    nodes = {n.name: n for n in out.graph.node}
    dims = {i.name: (i.data_type, tuple(i.dims)) for i in graph.graph.initializer}
    weights: list[Pending] = []
    for m in migrations:
        if m.alpha is None:
            continue
        g, s = m.group, m.factors
        node = nodes[g.norm]
        for i, (name, kind) in enumerate(((g.gamma, "gamma"), (g.beta, "beta")), start=1):
            own = f"{g.norm}/{kind}_migrated"
            out.graph.initializer.append(numpy_helper.from_array((read(name) / s).astype(np.float32), own))
            node.input[i] = own
        for layer in g.layers:
            dtype, shape = dims[layer.weight]
            produce = lambda name=layer.weight, s=s: (read(name) * s[:, None]).astype(np.float32)  # noqa: E731
            weights.append(Pending(layer.weight, dtype, shape, produce))
    return out, weights
