"""FC2's input centred for signed symmetric INT8 (the channel shift of Outlier Suppression+, Wei et al. 2023).

The FC2 input follows a GELU (or QuickGELU): its values lie in [-0.17, hi], almost all of them just above 0.
`s8s8`, the scheme TensorRT's explicit quantisation needs, gives it a symmetric range [-hi, hi] with zero
point 0, so the negative half of the 255 levels is spent on a side the tensor never reaches: one bit of the
eight is lost on every FC2 of every block. An unsigned scheme (`u8s8`, NNCF's on OpenVINO) spends all 255
on [lo, hi], which is the whole of its lead over ours on the tower without outliers (ViT-B/32 `none`). Here
the tensor is shifted instead, exactly:

    x W + b = (x - c) W + (b + c·1ᵀW),        c = (lo + hi) / 2

a Sub of one constant between the activation and FC2's QuantizeLinear, and FC2's bias (an initializer of its
own: the exporter shares zero biases) corrected by c times each output column's weight sum. [lo, hi] is the
tensor's range under the run's calibration method (percentile by default: a few wide hidden units that the
split left are still clipped, as they were before centring). Each method's range is that method's range of
the unshifted tensor, shifted: the chosen one is symmetric, [lo - c, hi - c], half the old step. A percentile
of the shifted tensor's |x| would be no use: almost all its values sit at -c, the edge of the range.

What decided whether it helps at all: the INT8 GEMM adds c times its *quantised* weight column sums, the bias
c times the float ones, and plain rounding leaves their difference (the rounding error of 4W weights summed)
as a bias every token shares. So FC2's weights are rounded keeping each output channel's sum
(`qdq.quantise_weight(keep_sums=True)`, the pipeline asks for it for each centred layer). On the tiny
`clip-like` tower, every layer INT8, mean cosine 0.99728 uncentred, 0.99664 centred with plain rounding (and
the partition then kept an FC2 float), 0.99796 with the sums kept.

The shift is also a whole number of steps (c = k·scale, the scale nudged by under 1 %), as an asymmetric
scheme's zero point is an integer: most of the tensor sits at or next to 0, and the FC2 input units the split
zeroed sit at exactly 0; with c on the grid they quantise to a grid point as they did before, instead of all
rounding the same way.

The FP32 function is unchanged (the test checks it); the INT8 GEMM keeps its shape and its Q/DQ form, so
TensorRT's rules, OpenVINO and ONNX Runtime read it as before; the Sub is a pointwise op next to the GELU,
which runtimes fuse into the FC1 epilogue. A tensor is centred only where that at least shrinks its step by
MIN_GAIN: an activation whose range is already about symmetric is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .calibrate import Range
from .graph import Layer
from .qdq import S8_MAX
from .split import bias_add

#: The centred step must be at most this share of the symmetric one (GELU's input: about 0.5).
MIN_GAIN = 0.75
#: The layers whose input is a GELU's output (graph.py's roles).
ROLE = "mlp_proj"


@dataclass(frozen=True)
class Centre:
    """One FC2 whose input is shifted by `c` before its QuantizeLinear."""

    layer: Layer
    c: float
    lo: float
    hi: float

    def shifted(self, r: Range) -> Range:
        """A range of the unshifted tensor as the shifted one's symmetric range, its step a whole fraction of c
        (see the module doc): [lo - c, hi - c] for `plan`'s own, within a step at either end."""
        half = max(r.hi - self.c, self.c - r.lo, 1e-12)
        k = max(1, round(abs(self.c) * S8_MAX / half))
        return Range(-S8_MAX * abs(self.c) / k, S8_MAX * abs(self.c) / k)

    def as_dict(self) -> dict:
        half = (self.hi - self.lo) / 2
        return {"layer": self.layer.label, "shift": round(self.c, 4), "range": [round(self.lo, 4), round(self.hi, 4)],
                "step_ratio": round(half / max(abs(self.lo), abs(self.hi), 1e-12), 3)}  # fmt: skip


def candidates(layers: list[Layer], scheme: str) -> list[Layer]:
    """The layers whose input a centre may shift: the FC2s, under s8s8 (an unsigned scheme's zero point already
    does what the shift does)."""
    return [layer for layer in layers if scheme == "s8s8" and layer.role == ROLE and layer.op_type == "MatMul"]


def plan(layers: list[Layer], ranges: dict[str, Range], scheme: str) -> list[Centre]:
    """The FC2s to centre, from their inputs' ranges under the run's calibration method."""
    out = []
    for layer in candidates(layers, scheme):
        r = ranges.get(layer.activation)
        if r is None:
            continue
        lo, hi = min(r.lo, 0.0), max(r.hi, 0.0)
        half, c = (hi - lo) / 2, (lo + hi) / 2
        if half <= MIN_GAIN * max(abs(lo), abs(hi), 1e-12) and round(abs(c) * S8_MAX / half) >= 1:
            out.append(Centre(layer, c, lo, hi))
    return out


def rewrite(graph: onnx.ModelProto, centres: list[Centre], read) -> onnx.ModelProto:
    """`graph` with each centre's Sub (the activation keeps its name, so every `Layer` stays valid: its producer
    writes `<name>/uncentred`) and FC2's corrected bias; `read(name)` gives an initializer of `graph`."""
    out = onnx.ModelProto()
    out.CopyFrom(graph)
    g = out.graph
    inits = {i.name for i in g.initializer}
    for ce in centres:
        act, tag = ce.layer.activation, f"{ce.layer.node}/centre"
        readers = [n for n in g.node if act in n.input]
        mm = next(n for n in g.node if n.name == ce.layer.node)
        if readers != [mm]:
            raise ValueError(f"{act} is read by more than {ce.layer.label}: centring it would change the others")
        at, producer = next((k, n) for k, n in enumerate(g.node) if act in n.output)
        producer.output[list(producer.output).index(act)] = f"{act}/uncentred"
        g.node.insert(at + 1, helper.make_node("Sub", [f"{act}/uncentred", f"{tag}_c"], [act], name=tag))
        bias_node = bias_add(g, mm.output[0], inits)
        b_name = next(i for i in bias_node.input if i in inits)
        w = read(ce.layer.weight).astype(np.float64)
        bias = read(b_name).astype(np.float64) + ce.c * w.sum(axis=0)
        g.initializer.extend([numpy_helper.from_array(np.array(ce.c, np.float32), f"{tag}_c"),
                              numpy_helper.from_array(bias.astype(np.float32), f"{tag}_bias")])  # fmt: skip
        bias_node.input[list(bias_node.input).index(b_name)] = f"{tag}_bias"
    return out
