"""Run an ONNX graph with PyTorch ops: the model file every backend runs, on a CUDA device in FP16.

Why not rebuild the torch model: the node has only the ONNX file (an INT8 Q/DQ model has no
torch counterpart at all), and running its graph node by node keeps one source of truth.

Values are of two kinds, decided once by their type:
- float tensors are torch tensors on the run device, in the run dtype (FP16 on a GPU);
- integer tensors (shapes, indices, zero points, INT8 weights) stay NumPy arrays on the host,
  so shape arithmetic (Shape → Gather → Concat → Reshape) never touches the GPU or syncs it.
Nodes whose inputs are all constants are evaluated once at load (in float32, then cast), which
folds every weight DequantizeLinear into a plain weight. QuantizeLinear/DequantizeLinear on
activations compute what they define (round, saturate, rescale), so an INT8 Q/DQ model gives
what ONNX Runtime gives, within FP16 rounding.

The op set is what our exports contain (ViT towers, FP32 and Q/DQ, opset 17) plus a few
neighbours; an unknown op is a clear error at load, not at the first frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .base import EncoderError

_INT_TYPES = {6: np.int32, 7: np.int64, 3: np.int8, 2: np.uint8, 9: np.bool_, 5: np.int16, 12: np.uint32, 13: np.uint64}
_FLOAT_TYPES = (1, 10, 11, 16)  # float, float16, double, bfloat16


def _is_t(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


class OnnxTorchGraph:
    """An ONNX model's graph as a callable on torch tensors."""

    def __init__(
        self, model: str | Path | Any, device: str | torch.device = "cuda", dtype: torch.dtype = torch.float16
    ):
        import onnx
        from onnx import numpy_helper

        proto = onnx.load(str(model)) if isinstance(model, str | Path) else model
        self.device = torch.device(device)
        self.dtype = dtype
        g = proto.graph
        init = {i.name for i in g.initializer}
        self.input = next(i.name for i in g.input if i.name not in init)
        self.output = g.output[0].name
        consts: dict[str, Any] = {}
        for t in g.initializer:
            consts[t.name] = self._const(numpy_helper.to_array(t), torch.float32)
        self._dtype, self._dev = torch.float32, torch.device("cpu")  # fold on the host in float32
        self.nodes: list[tuple[Any, list[str], list[str], dict]] = []
        for node in g.node:
            fn = _OPS.get(node.op_type)
            if fn is None:
                raise EncoderError(f"ONNX op {node.op_type} ({node.name}) is not supported by the torch backend")
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}
            entry = (fn, list(node.input), list(node.output), attrs)
            if all(i == "" or i in consts for i in node.input):
                outs = fn(self, [consts[i] if i else None for i in node.input], attrs)
                consts.update(zip(node.output, outs if isinstance(outs, tuple) else (outs,), strict=False))
            else:
                self.nodes.append(entry)
        self._dtype, self._dev = dtype, self.device
        self.consts = {
            k: (v.to(self.device, dtype) if _is_t(v) and v.is_floating_point() else v) for k, v in consts.items()
        }

    def _const(self, arr: np.ndarray, float_dtype: torch.dtype) -> Any:
        if arr.dtype.kind == "f":
            return torch.from_numpy(np.array(arr, np.float32)).to(float_dtype)
        return arr

    def _tensor(self, x: Any) -> torch.Tensor:
        """A value as a float torch tensor on the run device (host integers become floats)."""
        if _is_t(x):
            return x
        return torch.as_tensor(np.array(x), dtype=self._dtype, device=self._dev)  # a copy: torch wants it writable

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        env = dict(self.consts)
        env[self.input] = x.to(self.dtype)
        for fn, ins, outs, attrs in self.nodes:
            res = fn(self, [env[i] if i else None for i in ins], attrs)
            if isinstance(res, tuple):
                env.update(zip(outs, res, strict=False))
            else:
                env[outs[0]] = res
        return env[self.output]


# --- ops: (graph, inputs, attrs) → value ---------------------------------------------------------


def _binary(tfn, nfn):
    def op(g, xs, a):
        x, y = xs
        if not _is_t(x) and not _is_t(y):
            return nfn(x, y)
        return tfn(g._tensor(x), g._tensor(y))

    return op


def _int_div(x, y):
    return np.trunc(np.asarray(x) / np.asarray(y)).astype(np.result_type(x, y))


def _reshape(g, xs, a):
    x, shape = xs
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _unsqueeze(g, xs, a):
    x = xs[0]
    axes = sorted(int(v) for v in (np.asarray(xs[1]).reshape(-1) if len(xs) > 1 and xs[1] is not None else a["axes"]))
    rank = np.ndim(x) + len(axes)
    for ax in sorted(ax + rank if ax < 0 else ax for ax in axes):
        x = x.unsqueeze(ax) if _is_t(x) else np.expand_dims(x, ax)
    return x


def _squeeze(g, xs, a):
    x = xs[0]
    axes = np.asarray(xs[1]).reshape(-1) if len(xs) > 1 and xs[1] is not None else a.get("axes")
    if axes is None:
        return x.squeeze() if _is_t(x) else np.squeeze(x)
    axes = tuple(sorted((int(v) + np.ndim(x)) % np.ndim(x) for v in axes))
    return x.squeeze(axes) if _is_t(x) else np.squeeze(x, axes)


def _concat(g, xs, a):
    if all(not _is_t(x) for x in xs):
        return np.concatenate([np.atleast_1d(x) for x in xs], axis=a["axis"])
    return torch.cat([g._tensor(x) for x in xs], dim=a["axis"])


def _gather(g, xs, a):
    data, idx = xs
    axis = a.get("axis", 0)
    if not _is_t(data):
        return np.take(data, idx, axis=axis)
    idx = np.asarray(idx)
    if idx.ndim == 0:
        return data.select(axis, int(idx))
    return data.index_select(axis, torch.as_tensor(idx.reshape(-1), device=data.device)).reshape(
        (*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :])
    )


def _shape(g, xs, a):
    shape = np.array(xs[0].shape, np.int64)
    return shape[a.get("start", 0) : a.get("end", None)]


def _constant_of_shape(g, xs, a):
    value = np.asarray(a.get("value", np.zeros(1, np.float32)))
    shape = tuple(int(s) for s in np.asarray(xs[0]).reshape(-1))
    if value.dtype.kind == "f":
        return torch.full(shape, float(value.reshape(-1)[0]), dtype=g._dtype, device=g._dev)
    return np.full(shape, value.reshape(-1)[0], value.dtype)


def _where(g, xs, a):
    c, x, y = xs
    if not any(_is_t(v) for v in xs):
        return np.where(c, x, y)
    cond = torch.as_tensor(np.asarray(c), device=g._dev) if not _is_t(c) else c
    return torch.where(cond, g._tensor(x), g._tensor(y))


def _expand(g, xs, a):
    x, shape = xs
    shape = tuple(int(s) for s in np.asarray(shape).reshape(-1))
    out = np.broadcast_shapes(tuple(x.shape), shape)
    return x.expand(out) if _is_t(x) else np.broadcast_to(x, out).copy()


def _slice(g, xs, a):
    x, starts, ends = xs[0], np.asarray(xs[1]).reshape(-1), np.asarray(xs[2]).reshape(-1)
    axes = np.asarray(xs[3]).reshape(-1) if len(xs) > 3 and xs[3] is not None else np.arange(len(starts))
    steps = np.asarray(xs[4]).reshape(-1) if len(xs) > 4 and xs[4] is not None else np.ones(len(starts), np.int64)
    index = [slice(None)] * np.ndim(x)
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        dim = x.shape[int(ax)]
        s, e = int(max(min(s, dim), -dim - 1)), int(max(min(e, dim), -dim - 1))
        index[int(ax)] = slice(s, e, int(st))
    return x[tuple(index)]


def _cast(g, xs, a):
    x, to = xs[0], a["to"]
    if to in _FLOAT_TYPES:
        return g._tensor(x).to(g._dtype)
    want = _INT_TYPES.get(to)
    if want is None:
        raise EncoderError(f"Cast to ONNX type {to} is not supported by the torch backend")
    return x.cpu().numpy().astype(want) if _is_t(x) else np.asarray(x).astype(want)


def _axis_view(v: Any, axis: int, rank: int, g) -> Any:
    """A scale or zero point ready to broadcast along `axis` of a rank-`rank` tensor.

    A single value becomes a Python float (no host-to-device copy per call, so a CUDA graph can
    capture the op); a per-channel vector becomes a tensor shaped (1, …, C, …, 1)."""
    if not _is_t(v):
        arr = np.asarray(v, np.float32)
        if arr.size == 1:
            return float(arr.reshape(-1)[0])
    elif v.numel() == 1:
        return v.reshape(())  # already on the device
    v = g._tensor(v)
    shape = [1] * rank
    shape[axis % rank] = -1
    return v.reshape(shape)


def _quantize(g, xs, a):
    x = g._tensor(xs[0])
    zp = np.asarray(xs[2]) if len(xs) > 2 and xs[2] is not None else np.zeros((), np.uint8)
    lo, hi = (-128, 127) if zp.dtype == np.int8 else (0, 255)
    axis = a.get("axis", 1)
    q = torch.round(x / _axis_view(xs[1], axis, x.ndim, g)) + _axis_view(zp, axis, x.ndim, g)
    return torch.clamp(q, lo, hi)  # integral values, kept as floats


def _dequantize(g, xs, a):
    x = g._tensor(xs[0].astype(np.float32) if not _is_t(xs[0]) else xs[0])
    axis = a.get("axis", 1)
    zp = np.asarray(xs[2]) if len(xs) > 2 and xs[2] is not None else np.zeros((), np.float32)
    return (x - _axis_view(zp, axis, x.ndim, g)) * _axis_view(xs[1], axis, x.ndim, g)


def _gemm(g, xs, a):
    x, w = xs[0], xs[1]
    x = x.transpose(-1, -2) if a.get("transA", 0) else x
    w = w.transpose(-1, -2) if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    return y + a.get("beta", 1.0) * xs[2] if len(xs) > 2 and xs[2] is not None else y


def _layer_norm(g, xs, a):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    axis = a.get("axis", -1) % x.ndim
    return F.layer_norm(x, tuple(x.shape[axis:]), w, b, a.get("epsilon", 1e-5))


def _reduce_mean(g, xs, a):
    axes = np.asarray(xs[1]).reshape(-1).tolist() if len(xs) > 1 and xs[1] is not None else a.get("axes")
    return xs[0].mean(dim=tuple(axes), keepdim=bool(a.get("keepdims", 1)))


def _const_op(g, xs, a):
    return g._const(np.asarray(a["value"]), g._dtype)


_OPS = {
    "Constant": _const_op,
    "Identity": lambda g, xs, a: xs[0],
    "Add": _binary(torch.add, np.add),
    "Sub": _binary(torch.sub, np.subtract),
    "Mul": _binary(torch.mul, np.multiply),
    "Div": _binary(torch.div, _int_div),
    "Pow": _binary(torch.pow, np.power),
    "Equal": _binary(torch.eq, np.equal),
    "MatMul": lambda g, xs, a: torch.matmul(xs[0], xs[1]),
    "Gemm": _gemm,
    "LayerNormalization": _layer_norm,
    "Softmax": lambda g, xs, a: torch.softmax(xs[0], dim=a.get("axis", -1)),
    "Erf": lambda g, xs, a: torch.erf(xs[0]),
    "Sigmoid": lambda g, xs, a: torch.sigmoid(xs[0]),
    "Tanh": lambda g, xs, a: torch.tanh(xs[0]),
    "Relu": lambda g, xs, a: torch.relu(xs[0]),
    "Sqrt": lambda g, xs, a: torch.sqrt(xs[0]),
    "ReduceMean": _reduce_mean,
    "Transpose": lambda g, xs, a: xs[0].permute(*a["perm"]) if _is_t(xs[0]) else np.transpose(xs[0], a["perm"]),
    "Reshape": _reshape,
    "Flatten": lambda g, xs, a: xs[0].reshape(int(np.prod(xs[0].shape[: a.get("axis", 1)])), -1),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Gather": _gather,
    "Shape": _shape,
    "ConstantOfShape": _constant_of_shape,
    "Where": _where,
    "Expand": _expand,
    "Slice": _slice,
    "Cast": _cast,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
}
