"""TensorRT's explicit-quantisation rules, checked on a Q/DQ ONNX model before TensorRT sees it.

TensorRT builds a QuantizeLinear/DequantizeLinear network only if every Q/DQ pair is in the form
it implements (TensorRT developer guide, "Explicit Quantization"): symmetric signed INT8 —
zero point present, INT8, and 0 —, scales that are build-time constants, finite and positive,
per-tensor scales on activations, and per-channel scales on weights only, along the output
channel (axis 1 of a MatMul weight [K, N]; 0 of a Conv weight; Gemm's by transB). A model that
breaks one fails at engine build time, minutes in, with a terse parser message; this check
names the node and the rule at once. `polygraphy check lint` does not catch a non-zero INT8
zero point, which TensorRT rejects, hence our own check (on onnx-graphsurgeon's graph view).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _channel_axis(consumer, weight_index: int, rank: int) -> int | None:
    """The output-channel axis of a weight tensor for the layer that consumes it (None: unknown layer)."""
    if consumer.op == "MatMul" and weight_index == 1:
        return rank - 1
    if consumer.op == "Gemm" and weight_index == 1:
        return 0 if consumer.attrs.get("transB", 0) else 1
    if consumer.op in ("Conv", "ConvTranspose") and weight_index == 1:
        return 0 if consumer.op == "Conv" else 1
    return None


def explicit_quantisation_problems(model) -> list[str]:
    """Every Q/DQ node that breaks a TensorRT rule, as 'node: what is wrong' (empty: the model is fine)."""
    import onnx
    import onnx_graphsurgeon as gs

    proto = onnx.load(str(model)) if isinstance(model, str | Path) else model
    graph = gs.import_onnx(proto)
    problems: list[str] = []
    qdq = [n for n in graph.nodes if n.op in ("QuantizeLinear", "DequantizeLinear")]
    if not qdq:
        return ["no QuantizeLinear/DequantizeLinear nodes: not an explicitly quantised model"]
    for node in qdq:
        where = f"{node.op} {node.name or node.outputs[0].name}"
        x, scale = node.inputs[0], node.inputs[1]
        zp = node.inputs[2] if len(node.inputs) > 2 else None
        if not isinstance(scale, gs.Constant):
            problems.append(f"{where}: scale is computed at run time; TensorRT needs a constant")
            continue
        s = np.asarray(scale.values, np.float64)
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            problems.append(f"{where}: scales must be finite and > 0 (min {s.min():.3g})")
        if zp is None or (isinstance(zp, gs.Variable) and zp.name == ""):
            problems.append(f"{where}: no zero point (ONNX then means UINT8); TensorRT needs an INT8 zero point 0")
        elif not isinstance(zp, gs.Constant):
            problems.append(f"{where}: zero point is computed at run time; TensorRT needs a constant 0")
        else:
            z = np.asarray(zp.values)
            if z.dtype != np.int8:
                problems.append(f"{where}: zero point is {z.dtype}; TensorRT's Q/DQ is signed INT8")
            if np.any(z != 0):
                problems.append(
                    f"{where}: zero point {z.reshape(-1)[:4].tolist()} is not 0 (TensorRT is symmetric only)"
                )
        if s.size > 1:  # per-channel
            axis = int(node.attrs.get("axis", 1))
            if not isinstance(x, gs.Constant):
                problems.append(f"{where}: per-channel scales on an activation; TensorRT takes them on weights only")
                continue
            shape = x.values.shape
            axis = axis + len(shape) if axis < 0 else axis
            if not 0 <= axis < len(shape) or shape[axis] != s.size:
                problems.append(f"{where}: {s.size} scales along axis {axis} of a {list(shape)} weight")
                continue
            for consumer in node.outputs[0].outputs:
                idx = next(i for i, t in enumerate(consumer.inputs) if t is node.outputs[0])
                want = _channel_axis(consumer, idx, len(shape))
                if want is not None and axis != want:
                    problems.append(
                        f"{where}: weight of {consumer.op} {consumer.name} quantised along axis {axis}, "
                        f"its output channels are axis {want}"
                    )
    return problems
