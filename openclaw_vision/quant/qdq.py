"""Write a Q/DQ (QuantizeLinear/DequantizeLinear) model: the form both runtimes read.

Default scheme `s8s8` is what TensorRT's explicit quantisation expects: signed INT8, symmetric,
zero point 0, per-tensor activation scales, per-output-channel weight scales. Weights are
stored as INT8 initializers followed by a DequantizeLinear (TensorRT folds it into the
layer's weights; ONNX Runtime fuses DQ→MatMul into an integer MatMul), which is also what
shrinks the file. `u8s8` (unsigned, asymmetric activations) is an ONNX-Runtime-only variant.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .calibrate import Range
from .graph import Layer

SCHEMES = ("s8s8", "u8s8")


def activation_qparams(r: Range, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32 scalar, zero point scalar) for one activation tensor."""
    if scheme == "s8s8":
        return np.array(r.absmax / 127.0, np.float32), np.array(0, np.int8)
    span = max(r.hi - r.lo, 1e-12)
    scale = span / 255.0
    zp = int(np.clip(round(-r.lo / scale), 0, 255))
    return np.array(scale, np.float32), np.array(zp, np.uint8)


def quantise_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel INT8 along `axis`: (int8 weights, float32 scales)."""
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    absmax = np.abs(w).max(axis=reduce)
    # A channel of (sub)normal-tiny weights must still get a positive, normal float32 scale:
    # absmax / 127 can underflow to 0 (found by the property test), and TensorRT needs scales > 0.
    scale = np.where(absmax > 0, np.maximum(absmax / 127.0, np.finfo(np.float32).tiny), 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def build_qdq_model(
    model: onnx.ModelProto,
    layers: list[Layer],
    ranges: dict[str, Range],
    scheme: str = "s8s8",
    keep_float: frozenset[str] | set[str] = frozenset(),
    metadata: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """Copy of `model` with every layer not named in `keep_float` quantised; metadata updated."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1

    todo = {layer.node: layer for layer in layers if layer.node not in keep_float}
    new_inits: list[TensorProto] = []
    done_act: dict[str, str] = {}
    dropped: set[str] = set()
    nodes = []
    for node in graph.node:
        layer = todo.get(node.name)
        if layer is not None:
            act = layer.activation
            if act not in done_act:
                if act not in ranges:
                    raise KeyError(f"no calibration range for {act} (input of {layer.node})")
                scale, zp = activation_qparams(ranges[act], scheme)
                base = f"{act}_qdq"
                new_inits += [
                    numpy_helper.from_array(scale, f"{base}_scale"),
                    numpy_helper.from_array(zp, f"{base}_zp"),
                ]
                nodes.append(
                    helper.make_node(
                        "QuantizeLinear", [act, f"{base}_scale", f"{base}_zp"], [f"{base}_q"], name=f"{base}_Q"
                    )
                )
                nodes.append(
                    helper.make_node(
                        "DequantizeLinear",
                        [f"{base}_q", f"{base}_scale", f"{base}_zp"],
                        [f"{base}_dq"],
                        name=f"{base}_DQ",
                    )
                )
                done_act[act] = f"{base}_dq"
            w = numpy_helper.to_array(inits[layer.weight])
            q, wscale = quantise_weight(w, layer.channel_axis)
            wbase = f"{layer.weight}_int8"
            new_inits += [
                numpy_helper.from_array(q, wbase),
                numpy_helper.from_array(wscale, f"{wbase}_scale"),
                numpy_helper.from_array(np.zeros(wscale.shape, np.int8), f"{wbase}_zp"),
            ]
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [wbase, f"{wbase}_scale", f"{wbase}_zp"],
                    [f"{wbase}_dq"],
                    name=f"{wbase}_DQ",
                    axis=layer.channel_axis,
                )
            )
            node.input[0] = done_act[act]
            node.input[1] = f"{wbase}_dq"
            if uses.get(layer.weight, 0) == 1:
                dropped.add(layer.weight)
        nodes.append(node)

    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)

    meta = {p.key: p.value for p in out.metadata_props}
    meta.update(
        {
            "precision": "int8",
            "quant_scheme": scheme,
            "quant_kept_float": json.dumps(sorted(set(keep_float))),
            "quant_layers": str(len(todo)),
        }
    )
    meta.update(metadata or {})
    del out.metadata_props[:]
    for key, value in meta.items():
        entry = out.metadata_props.add()
        entry.key, entry.value = key, value
    return out


SWITCH_INPUT = "quant_switch"


def build_switch_model(
    model: onnx.ModelProto, layers: list[Layer], ranges: dict[str, Range], scheme: str = "s8s8"
) -> onnx.ModelProto:
    """One model in which each layer's quantisation is switched on or off per run (fake quantisation).

    Adds a bool input `quant_switch` of shape [len(layers)]; where layer i's switch is on, its
    activation goes through QuantizeLinear→DequantizeLinear with its calibrated scale and its
    weight is replaced by the dequantised INT8 weight — the same scales and rounding as
    `build_qdq_model`, with float accumulation instead of integer. One session then serves a
    whole sensitivity sweep instead of one session build per layer.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    index = {layer.node: i for i, layer in enumerate(layers)}
    graph.input.append(helper.make_tensor_value_info(SWITCH_INPUT, TensorProto.BOOL, [len(layers)]))
    new_inits: list[TensorProto] = []
    nodes = []
    for node in graph.node:
        if node.name in index:
            i, layer = index[node.name], layers[index[node.name]]
            base = f"switch{i}"
            scale, zp = activation_qparams(ranges[layer.activation], scheme)
            q, wscale = quantise_weight(numpy_helper.to_array(inits[layer.weight]), layer.channel_axis)
            new_inits += [
                numpy_helper.from_array(np.array([i], np.int64), f"{base}_index"),
                numpy_helper.from_array(scale, f"{base}_scale"),
                numpy_helper.from_array(zp, f"{base}_zp"),
                numpy_helper.from_array(q, f"{base}_w"),
                numpy_helper.from_array(wscale, f"{base}_wscale"),
                numpy_helper.from_array(np.zeros(wscale.shape, np.int8), f"{base}_wzp"),
            ]
            act, weight = node.input[0], node.input[1]
            nodes += [
                helper.make_node("Gather", [SWITCH_INPUT, f"{base}_index"], [f"{base}_on1"], axis=0),
                helper.make_node("Squeeze", [f"{base}_on1"], [f"{base}_on"]),
                helper.make_node("QuantizeLinear", [act, f"{base}_scale", f"{base}_zp"], [f"{base}_aq"]),
                helper.make_node("DequantizeLinear", [f"{base}_aq", f"{base}_scale", f"{base}_zp"], [f"{base}_adq"]),
                helper.make_node("Where", [f"{base}_on", f"{base}_adq", act], [f"{base}_a"]),
                helper.make_node(
                    "DequantizeLinear",
                    [f"{base}_w", f"{base}_wscale", f"{base}_wzp"],
                    [f"{base}_wdq"],
                    axis=layer.channel_axis,
                ),
                helper.make_node("Where", [f"{base}_on", f"{base}_wdq", weight], [f"{base}_wsel"]),
            ]
            node.input[0], node.input[1] = f"{base}_a", f"{base}_wsel"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    return out
