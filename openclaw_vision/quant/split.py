"""FC2 outlier units computed apart in FP32 (LLM.int8()'s decomposition, Dettmers et al. 2022): FC2 stays INT8.

Migration (smooth.py) cannot reach the FC2 input: it follows the GELU. In real ViTs a few MLP hidden units
fire tens to hundreds of times wider than the rest, on a few tokens: one writes the massive activations
(Sun et al. 2024), a few write the high-norm tokens (Darcet et al. 2023); quant/profiles.py plants both.
Such a unit sets the FC2 input's per-tensor scale, and every other unit is left with a level or two: the
partition then keeps the whole FC2 in float (ViT-L/14 `clip-like`: two FC2s, 2.8 % of the GEMM FLOPs and
~12 % of the latency on OpenVINO). Here each such unit u is taken out of the INT8 path instead:

- the FC1 weight column u and its bias are zeroed, so GELU(0) = 0 and FC2's input channel u is exactly 0
  in the INT8 GEMMs (whose ranges are then measured again without it);
- a side path in FP32 reads FC1's input: x·W1[:, u] + b1[u], the block's own activation (its nodes copied,
  so GELU or QuickGELU alike), then ·W2[u, :], added to FC2's output after its bias Add: the GEMM and
  its bias Add stay adjacent, the pattern runtimes fuse into the INT8 GEMM's epilogue.

The FP32 function is unchanged; the INT8 GEMMs keep their shapes and their Q/DQ form (TensorRT's explicit
rules, OpenVINO, ONNX Runtime); the side path adds k·2·W multiply-adds per token twice (k ≤ MAX_SHARE of
the hidden units), counted as float in the report's INT8 share. Units are chosen from the calibration
pass's per-channel |max| of the FC2 input: those over RATIO × the median channel's, widest first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..models.onnx_files import Pending
from .calibrate import TensorStats
from .graph import Layer

#: A hidden unit is an outlier when its calibration |max| exceeds this many times the median unit's.
RATIO = 12.0
#: At most this share of a block's hidden units is split off (and at least one).
MAX_SHARE = 1 / 64


@dataclass
class Split:
    """One FC2 whose outlier units go to the side path."""

    fc1: Layer
    fc2: Layer
    units: list[int]
    absmax: list[float]  # each unit's calibration |max|
    median: float  # the median unit's

    def as_dict(self) -> dict:
        return {"layer": self.fc2.label, "units": self.units, "unit_absmax": [round(a, 2) for a in self.absmax],
                "median_absmax": round(self.median, 4)}  # fmt: skip


def plan(layers: list[Layer], stats: dict[str, TensorStats]) -> list[Split]:
    """The FC2s with outlier units (see the module doc), each paired with its block's FC1."""
    fc1 = {layer.block: layer for layer in layers if layer.role == "mlp_fc"}
    out = []
    for fc2 in layers:
        st = stats.get(fc2.activation)
        if fc2.role != "mlp_proj" or fc2.block not in fc1 or st is None or st.channel_absmax is None:
            continue
        a = st.channel_absmax.astype(np.float64)
        median = float(np.median(a))
        wide = [int(u) for u in np.argsort(-a) if a[u] > RATIO * max(median, 1e-12)]
        wide = wide[: max(1, int(len(a) * MAX_SHARE))]
        if wide:
            out.append(Split(fc1[fc2.block], fc2, sorted(wide), [float(a[u]) for u in sorted(wide)], median))
    return out


def _depends(graph: onnx.GraphProto, start: str, end: str) -> list[onnx.NodeProto]:
    """The nodes on the paths from tensor `start` to tensor `end` (the block's activation), in graph order
    (which is topological): forward from `start`, then back from `end` among what was reached."""
    reached = {start}
    for n in graph.node:
        if any(i in reached for i in n.input):
            reached.update(n.output)
    if end not in reached:
        raise ValueError(f"{end} does not follow from {start}: not an FC1 → activation → FC2 block")
    wanted, on_path = {end}, []
    for n in reversed(graph.node):
        if any(o in wanted for o in n.output) and any(i in reached for i in n.input):
            wanted.update(n.input)
            on_path.append(n)
    return on_path[::-1]


def bias_add(graph: onnx.GraphProto, matmul_out: str, inits: set[str]) -> onnx.NodeProto:
    """The Add that reads a GEMM's output and a bias initializer (FC1 and FC2 both have one in CLIP's MLP)."""
    adds = [n for n in graph.node if n.op_type == "Add" and matmul_out in n.input]
    if len(adds) != 1 or not any(i in inits for i in adds[0].input):
        raise ValueError(f"GEMM output {matmul_out} is not followed by one bias Add")
    return adds[0]


def rewrite(graph: onnx.ModelProto, splits: list[Split], weights: list[Pending], read):
    """`graph` with each split's side path, and `weights` (the pending replacements so far: migration's) with the
    FC1 weights' split columns zeroed; `read(name)` gives an initializer of `graph`'s source.
    Returns (graph, pending weights), as `smooth.rewrite` does."""
    out = onnx.ModelProto()
    out.CopyFrom(graph)
    g = out.graph
    pending = {p.name: p for p in weights}
    current = lambda name: pending[name].produce() if name in pending else read(name)  # noqa: E731
    inits = {i.name for i in g.initializer}
    for sp in splits:
        u = np.asarray(sp.units)
        nodes = {n.name: n for n in g.node}
        mm1, mm2 = nodes[sp.fc1.node], nodes[sp.fc2.node]
        bias_node = bias_add(g, mm1.output[0], inits)
        b_name = next(i for i in bias_node.input if i in inits)
        w1, b1, w2 = current(sp.fc1.weight), current(b_name), current(sp.fc2.weight)
        tag = f"{sp.fc2.node}/split"
        side = {f"{tag}_w1": w1[:, u], f"{tag}_b1": b1[u], f"{tag}_w2": w2[u, :]}
        # the INT8 path: unit u of FC1 is 0 (its own bias copy: the exporter shares zero biases among layers)
        b_own = b1.copy()
        b_own[u] = 0.0
        side[f"{tag}_fc1_bias"] = b_own
        g.initializer.extend(numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in side.items())
        bias_node.input[list(bias_node.input).index(b_name)] = f"{tag}_fc1_bias"
        base = pending.get(sp.fc1.weight)
        dims = (base.data_type, tuple(base.dims)) if base else _dims(g, sp.fc1.weight)

        def zeroed(name=sp.fc1.weight, base=base, u=u):
            w = (base.produce() if base else read(name)).copy()
            w[:, u] = 0.0
            return w.astype(np.float32)

        pending[sp.fc1.weight] = Pending(sp.fc1.weight, dims[0], dims[1], zeroed)
        _side_path(g, tag, mm1.input[0], bias_node.output[0], mm2, bias_add(g, mm2.output[0], inits))
    return out, list(pending.values())


def _side_path(g: onnx.GraphProto, tag: str, x: str, fc1_out: str, mm2: onnx.NodeProto, bias2: onnx.NodeProto) -> None:
    """x·W1u + b1u → the block's activation nodes (copied) → ·W2u, added to FC2's biased output; placed right
    after FC2's bias Add (every tensor it reads exists by then), that Add's consumers rewired to the sum."""
    fc2_in, fc2_out = mm2.input[0], bias2.output[0]
    act_nodes = _depends(g, fc1_out, fc2_in)
    rename = {fc1_out: f"{tag}_h"}
    new = [helper.make_node("MatMul", [x, f"{tag}_w1"], [f"{tag}_x"], name=f"{tag}_fc1"),
           helper.make_node("Add", [f"{tag}_x", f"{tag}_b1"], [f"{tag}_h"], name=f"{tag}_bias")]  # fmt: skip
    for n in act_nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        c.name = f"{n.name}/split"
        for i, name in enumerate(c.input):
            c.input[i] = rename.get(name, name)
        for i, name in enumerate(c.output):
            rename[name] = c.output[i] = f"{name}/split"
        new.append(c)
    new += [helper.make_node("MatMul", [rename[fc2_in], f"{tag}_w2"], [f"{tag}_y"], name=f"{tag}_fc2"),
            helper.make_node("Add", [fc2_out, f"{tag}_y"], [f"{tag}_out"], name=f"{tag}_sum")]  # fmt: skip
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == fc2_out:
                n.input[i] = f"{tag}_out"
    at = next(k for k, n in enumerate(g.node) if bias2.output[0] in n.output) + 1
    for k, n in enumerate(new):
        g.node.insert(at + k, n)


def _dims(g: onnx.GraphProto, name: str) -> tuple[int, tuple[int, ...]]:
    t = next(i for i in g.initializer if i.name == name)
    return t.data_type, tuple(t.dims)
