"""Write a Q/DQ (QuantizeLinear/DequantizeLinear) model: the form both runtimes read.

Default scheme `s8s8` is what TensorRT's explicit quantisation expects: signed INT8, symmetric,
zero point 0, per-tensor activation scales, per-output-channel weight scales. Weights are
stored as INT8 initializers followed by a DequantizeLinear (TensorRT folds it into the
layer's weights; ONNX Runtime fuses DQ→MatMul into an integer MatMul), which is also what
shrinks the file. `u8s8` (unsigned, asymmetric activations) is a CPU-only variant: OpenVINO and ONNX Runtime run
it, TensorRT refuses it (encoders/trt_rules.py); on VNNI CPUs oneDNN's INT8 GEMM reads u8 × s8 natively.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..models import onnx_files
from .calibrate import Range
from .graph import Layer

SCHEMES = ("s8s8", "u8s8")
#: Magnitude levels of the symmetric signed scheme, weights and s8s8 activations alike: scale = |max| / S8_MAX.
S8_MAX = 127


def activation_qparams(r: Range, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32 scalar, zero point scalar) for one activation tensor."""
    if scheme == "s8s8":
        return np.array(r.absmax / S8_MAX, np.float32), np.array(0, np.int8)
    span = max(r.hi - r.lo, 1e-12)
    scale = span / 255.0
    zp = int(np.clip(round(-r.lo / scale), 0, 255))
    return np.array(scale, np.float32), np.array(zp, np.uint8)


def quantise_weight(w: np.ndarray, axis: int, keep_sums: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel INT8 along `axis`: (int8 weights, float32 scales).

    keep_sums: round so that each output channel's quantised weights sum to its float weights' sum within half
    a step (the few elements nearest a rounding boundary round the other way). A GEMM whose input was shifted by
    a constant (centre.py) adds that constant times these sums, and its bias corrects it with the float ones:
    rounding that ignores the sums leaves their difference, an error every token shares."""
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    absmax = np.abs(w).max(axis=reduce)
    # A channel of (sub)normal-tiny weights must still get a positive, normal float32 scale:
    # absmax / 127 can underflow to 0 (found by the property test), and TensorRT needs scales > 0.
    scale = np.where(absmax > 0, np.maximum(absmax / S8_MAX, np.finfo(np.float32).tiny), 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    x = w / scale.reshape(shape)
    if keep_sums:
        channels_last = np.moveaxis(x, axis, -1)
        flat = channels_last.reshape(-1, channels_last.shape[-1])
        q = np.moveaxis(_sum_kept(flat, np.rint(flat)).reshape(channels_last.shape), -1, axis)
    else:
        q = np.rint(x)
    return np.clip(q, -S8_MAX, S8_MAX).astype(np.int8), scale


def _sum_kept(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """`q` = rint(x) (rows × channels) with d_j = rint(sum x_j) - sum q_j elements of each channel j moved one
    level towards x: those whose rounding residual is largest in d_j's direction (|d_j| ≪ rows)."""
    residual = x - q
    d = np.rint(x.sum(axis=0)) - q.sum(axis=0)
    up = np.argsort(np.argsort(-residual, axis=0, kind="stable"), axis=0, kind="stable") < d
    down = np.argsort(np.argsort(residual, axis=0, kind="stable"), axis=0, kind="stable") < -d
    return q + up - down


#: (INT8 weights named `<weight>_int8`, their per-channel scales named `<weight>_int8_scale`) of a layer.
WeightTensors = Callable[[Layer], tuple[TensorProto, TensorProto]]


def int8_name(layer: Layer) -> str:
    return f"{layer.weight}_int8"


def embedded_weights(model: onnx.ModelProto) -> WeightTensors:
    """Quantise each layer's weight from `model`'s embedded initializers when asked (small models, tests).

    A large model's weights come from `workspace.Workspace` instead: quantised once, kept on disk.
    """
    inits = {i.name: i for i in model.graph.initializer}

    def get(layer: Layer) -> tuple[TensorProto, TensorProto]:
        q, scale = quantise_weight(numpy_helper.to_array(inits[layer.weight]), layer.channel_axis)
        return numpy_helper.from_array(q, int8_name(layer)), numpy_helper.from_array(scale, f"{int8_name(layer)}_scale")

    return get


def _weight_dq(layer: Layer, weights: WeightTensors, done: dict[str, str], inits: list[TensorProto], nodes: list):
    """DequantizeLinear of the layer's INT8 weight (added once per weight); returns its output name."""
    base = int8_name(layer)
    if base not in done:
        q, scale = weights(layer)
        inits += [q, scale, numpy_helper.from_array(np.zeros(tuple(scale.dims), np.int8), f"{base}_zp")]
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [base, f"{base}_scale", f"{base}_zp"],
                [f"{base}_dq"],
                name=f"{base}_DQ",
                axis=layer.channel_axis,
            )
        )
        done[base] = f"{base}_dq"
    return done[base]


def _activation_qdq(act: str, r: Range, scheme: str, done: dict[str, str], inits: list[TensorProto], nodes: list):
    """QuantizeLinear→DequantizeLinear of an activation with its calibrated range (once per tensor)."""
    if act not in done:
        scale, zp = activation_qparams(r, scheme)
        base = f"{act}_qdq"
        inits += [numpy_helper.from_array(scale, f"{base}_scale"), numpy_helper.from_array(zp, f"{base}_zp")]
        nodes.append(
            helper.make_node("QuantizeLinear", [act, f"{base}_scale", f"{base}_zp"], [f"{base}_q"], name=f"{base}_Q")
        )
        nodes.append(
            helper.make_node(
                "DequantizeLinear", [f"{base}_q", f"{base}_scale", f"{base}_zp"], [f"{base}_dq"], name=f"{base}_DQ"
            )
        )
        done[act] = f"{base}_dq"
    return done[act]


def _range_of(ranges: dict[str, Range], layer: Layer) -> Range:
    if layer.activation not in ranges:
        raise KeyError(f"no calibration range for {layer.activation} (input of {layer.node})")
    return ranges[layer.activation]


def build_qdq_model(
    model: onnx.ModelProto,
    layers: list[Layer],
    ranges: dict[str, Range],
    scheme: str = "s8s8",
    keep_float: frozenset[str] | set[str] = frozenset(),
    metadata: dict[str, str] | None = None,
    weights: WeightTensors | None = None,
) -> onnx.ModelProto:
    """Copy of `model` with every layer not named in `keep_float` quantised; metadata updated.

    `model` may carry its weights or refer to external data (only the graph is copied then);
    `weights` gives each layer's INT8 tensors (default: quantised from `model`'s own initializers).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    weights = weights or embedded_weights(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1

    todo = {layer.node: layer for layer in layers if layer.node not in keep_float}
    new_inits: list[TensorProto] = []
    done_act: dict[str, str] = {}
    done_w: dict[str, str] = {}
    dropped: set[str] = set()
    nodes = []
    for node in graph.node:
        layer = todo.get(node.name)
        if layer is not None:
            node.input[0] = _activation_qdq(
                layer.activation, _range_of(ranges, layer), scheme, done_act, new_inits, nodes
            )
            node.input[1] = _weight_dq(layer, weights, done_w, new_inits, nodes)
            if uses.get(layer.weight, 0) == 1:
                dropped.add(layer.weight)
        nodes.append(node)

    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)

    meta = onnx_files.metadata_of(out)
    meta.update(
        {
            "precision": "int8",
            "quant_scheme": scheme,
            "quant_kept_float": json.dumps(sorted(set(keep_float))),
            "quant_layers": str(len(todo)),
        }
    )
    meta.update(metadata or {})
    onnx_files.set_metadata(out, meta)
    return out


SWITCH_INPUT = "quant_switch"


def build_switch_model(
    model: onnx.ModelProto,
    layers: list[Layer],
    ranges: dict[str, Range],
    scheme: str = "s8s8",
    weights: WeightTensors | None = None,
) -> onnx.ModelProto:
    """One model in which each layer's quantisation is switched on or off per run (fake quantisation).

    Adds a bool input `quant_switch` of shape [len(layers)]; where layer i's switch is on, its
    activation goes through QuantizeLinear→DequantizeLinear with its calibrated scale and its
    weight is replaced by the dequantised INT8 weight — the same scales and rounding as
    `build_qdq_model`, with float accumulation instead of integer. One session then serves a
    whole sensitivity sweep instead of one session build per layer.
    """
    weights = weights or embedded_weights(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    index = {layer.node: i for i, layer in enumerate(layers)}
    graph.input.append(helper.make_tensor_value_info(SWITCH_INPUT, TensorProto.BOOL, [len(layers)]))
    new_inits: list[TensorProto] = []
    done_w: dict[str, str] = {}
    nodes = []
    for node in graph.node:
        if node.name in index:
            i, layer = index[node.name], layers[index[node.name]]
            base = f"switch{i}"
            scale, zp = activation_qparams(_range_of(ranges, layer), scheme)
            new_inits += [
                numpy_helper.from_array(np.array([i], np.int64), f"{base}_index"),
                numpy_helper.from_array(scale, f"{base}_scale"),
                numpy_helper.from_array(zp, f"{base}_zp"),
            ]
            wdq = _weight_dq(layer, weights, done_w, new_inits, nodes)
            act, weight = node.input[0], node.input[1]
            nodes += [
                helper.make_node("Gather", [SWITCH_INPUT, f"{base}_index"], [f"{base}_on1"], axis=0),
                helper.make_node("Squeeze", [f"{base}_on1"], [f"{base}_on"]),
                helper.make_node("QuantizeLinear", [act, f"{base}_scale", f"{base}_zp"], [f"{base}_aq"]),
                helper.make_node("DequantizeLinear", [f"{base}_aq", f"{base}_scale", f"{base}_zp"], [f"{base}_adq"]),
                helper.make_node("Where", [f"{base}_on", f"{base}_adq", act], [f"{base}_a"]),
                helper.make_node("Where", [f"{base}_on", wdq, weight], [f"{base}_wsel"]),
            ]
            node.input[0], node.input[1] = f"{base}_a", f"{base}_wsel"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    return out


def probe_outputs(i: int) -> tuple[str, str]:
    """(squared error, squared signal) outputs of layer i in the probe model."""
    return f"probe{i}_err", f"probe{i}_sig"


def build_probe_model(
    model: onnx.ModelProto,
    layers: list[Layer],
    ranges: dict[str, Range],
    scheme: str = "s8s8",
    weights: WeightTensors | None = None,
) -> onnx.ModelProto:
    """The float model plus, beside every quantisable layer, the same layer on fake-quantised inputs.

    Layer i's branch reads the layer's *float* input, quantises it with its calibrated scale,
    multiplies by the dequantised INT8 weight (same scales and rounding as `build_qdq_model`;
    ONNX Runtime fuses the Q/DQ pair into its integer MatMul) and compares with the float
    layer's own output: outputs `probe{i}_err` = Σ(y_q − y)² and `probe{i}_sig` = Σy² over the
    batch (MatMul output, before the bias). The float path is untouched, so each layer's error
    is its own — one run scores every layer at once, at about twice the cost of a float run.
    """
    weights = weights or embedded_weights(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    index = {layer.node: i for i, layer in enumerate(layers)}
    new_inits: list[TensorProto] = []
    done_act: dict[str, str] = {}
    done_w: dict[str, str] = {}
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if node.name not in index:
            continue
        i, layer = index[node.name], layers[index[node.name]]
        act = _activation_qdq(layer.activation, _range_of(ranges, layer), scheme, done_act, new_inits, nodes)
        wdq = _weight_dq(layer, weights, done_w, new_inits, nodes)
        branch = onnx.NodeProto()
        branch.CopyFrom(node)
        branch.name = f"probe{i}"
        del branch.input[:2]
        branch.input[0:0] = [act, wdq]
        del branch.output[:]
        branch.output.append(f"probe{i}_y")
        err, sig = probe_outputs(i)
        nodes += [
            branch,
            helper.make_node("Sub", [f"probe{i}_y", node.output[0]], [f"probe{i}_diff"]),
            helper.make_node("ReduceSumSquare", [f"probe{i}_diff"], [err], keepdims=0),
            helper.make_node("ReduceSumSquare", [node.output[0]], [sig], keepdims=0),
        ]
        graph.output.extend([helper.make_tensor_value_info(name, TensorProto.FLOAT, []) for name in (err, sig)])
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    return out
