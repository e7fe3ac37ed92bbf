"""ONNX files of any size: one `.onnx` and, for big weights, one data file beside it.

A protobuf message cannot exceed 2 GiB, so a model whose weights pass EXTERNAL_DATA_THRESHOLD
keeps them in `<name>.onnx.data` (the ONNX external-data format: each initializer names the
file, an offset and a length). ONNX Runtime, `onnx.load` and TensorRT's parser all read it when
the data file sits beside the model. The threshold is 1 GiB, half the limit: an embedded model
near 2 GB is read whole into memory before its tensors are made (measured with the INT8
ViT-bigG-14, 1.85 GB: ONNX Runtime's load peak was 4.7 GB embedded, 2.9 GB with a data file).

Everything here works one tensor at a time, so a 7 GB model never needs a second copy of its
weights in memory: `TensorReader` reads one initializer (embedded or external) on demand;
`write_model` writes a graph plus a stream of tensors, each produced only when it is written;
`fold_constants` turns weight-only chains the exporter leaves (Transpose of a Linear weight,
Reshape of the patch kernel, Cast, Identity) into initializers that are computed lazily, at
write time. `Staged` gives a writer a temporary folder beside the destination and moves the
finished files into place only when the caller says they are good; a failure leaves nothing.

Torch is not imported here: the quantiser and the runtime tools use this module too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Above this many bytes of initializers a model is written with one external data file
#: (protobuf's hard limit is 2 GiB for the whole message; see the module doc for why half of it).
EXTERNAL_DATA_THRESHOLD = 1 << 30
#: Offsets in the data file are page-aligned, so a reader may memory-map each tensor.
ALIGN = 4096


def data_path(model: Path) -> Path:
    """The data file that goes with `model`: `x.onnx` → `x.onnx.data`."""
    model = Path(model)
    return model.with_name(model.name + ".data")


def load_graph(path: Path) -> onnx.ModelProto:
    """The model without its external weights (embedded weights of a small model do come along)."""
    return onnx.load(str(path), load_external_data=False)


def _external(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data} if t.data_location == TensorProto.EXTERNAL else {}


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The data files `model`'s initializers refer to (relative to its folder), in first-use order."""
    seen: dict[str, None] = {}
    for t in model.graph.initializer:
        loc = _external(t).get("location")
        if loc:
            seen.setdefault(loc)
    return list(seen)


def model_files(path: Path) -> list[Path]:
    """`path` and every data file it refers to: what to size, move or delete as one model."""
    path = Path(path)
    return [path] + [path.parent / loc for loc in external_locations(load_graph(path))]


def files_size(path: Path) -> int:
    """Bytes on disk of the model at `path`, data files included."""
    return sum(p.stat().st_size for p in model_files(path))


def remove_model(path: Path) -> None:
    """Delete a model and its data files (a missing file is fine: nothing to remove)."""
    path = Path(path)
    try:
        files = model_files(path)
    except Exception:  # not a readable model (a half-written or foreign file): remove it and its usual data file
        files = [path]
    files.append(data_path(path))  # also a stale data file left beside an embedded model
    for p in files:
        p.unlink(missing_ok=True)


def nbytes(data_type: int, dims: Iterable[int]) -> int:
    return int(np.prod(list(dims), dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(data_type).itemsize


def check_data_files(path: Path) -> None:
    """Raise FileNotFoundError naming the data file when one the model refers to is missing."""
    path = Path(path)
    for loc in external_locations(load_graph(path)):
        if not (path.parent / loc).is_file():
            raise FileNotFoundError(f"{path}: its external data file {path.parent / loc} is missing")


class TensorReader:
    """Initializers of one model, read one at a time from the proto or from its data files."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)
        self.tensors = {t.name: t for t in model.graph.initializer}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def array(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        ext = _external(t)
        if not ext:
            return numpy_helper.to_array(t)
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        count = int(np.prod(list(t.dims), dtype=np.int64))
        offset = int(ext.get("offset", 0))
        if "length" in ext and int(ext["length"]) != count * dtype.itemsize:
            raise ValueError(f"initializer {name!r}: external length {ext['length']} != {count} x {dtype}")
        arr = np.fromfile(self.base_dir / ext["location"], dtype=dtype, count=count, offset=offset)
        if arr.size != count:
            raise ValueError(f"initializer {name!r}: {self.base_dir / ext['location']} ends before its data")
        return arr.reshape(list(t.dims))


@dataclass
class Pending:
    """An initializer still to be written: its type and shape now, its values only when written."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    produce: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return nbytes(self.data_type, self.dims)


def pending_from(reader: TensorReader, name: str) -> Pending:
    """An existing initializer passed through unchanged."""
    t = reader.tensors[name]
    return Pending(name, t.data_type, tuple(t.dims), lambda: reader.array(name))


def pending_array(name: str, value: np.ndarray) -> Pending:
    """A small tensor computed up front (scales, zero points, indices)."""
    value = np.asarray(value)
    return Pending(name, helper.np_dtype_to_tensor_dtype(value.dtype), tuple(value.shape), lambda: value)


class DataFile:
    """Appends tensors to one data file at page-aligned offsets; returns the proto that points at each."""

    def __init__(self, path: Path, location: str | None = None) -> None:
        self.path = Path(path)
        self.location = location or self.path.name
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()

    def add(self, p: Pending) -> TensorProto:
        arr = np.asarray(p.produce(), order="C")  # (ascontiguousarray would make a scalar 1-d)
        want = helper.tensor_dtype_to_np_dtype(p.data_type)
        if arr.dtype != want or tuple(arr.shape) != tuple(p.dims):
            raise ValueError(f"tensor {p.name!r}: produced {arr.dtype}{arr.shape}, declared {want}{p.dims}")
        pos = self._fh.tell()
        if pos % ALIGN:
            self._fh.write(b"\0" * (ALIGN - pos % ALIGN))
            pos = self._fh.tell()
        self._fh.write(memoryview(arr).cast("B"))
        t = TensorProto(name=p.name, data_type=p.data_type, dims=list(p.dims))
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(pos)), ("length", str(arr.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return t

    def close(self) -> None:
        self._fh.close()


def embedded(p: Pending) -> TensorProto:
    arr = p.produce()
    want = helper.tensor_dtype_to_np_dtype(p.data_type)
    if arr.dtype != want or tuple(arr.shape) != tuple(p.dims):
        raise ValueError(f"tensor {p.name!r}: produced {arr.dtype}{arr.shape}, declared {want}{p.dims}")
    return numpy_helper.from_array(np.asarray(arr, order="C"), p.name)


def write_model(
    model: onnx.ModelProto,
    tensors: list[Pending],
    out: Path,
    threshold: int = EXTERNAL_DATA_THRESHOLD,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write `model` with exactly `tensors` as its initializers, produced and written one at a time.

    Above `threshold` bytes they go to `<out>.data` (one file); otherwise they are embedded.
    `model`'s own initializer list is replaced (the caller's proto is modified). Returns `out`.
    """
    out = Path(out)
    total = sum(p.nbytes for p in tensors)
    del model.graph.initializer[:]
    meta = dict(metadata if metadata is not None else metadata_of(model))
    meta.pop("external_data", None)  # the model it was made from may have had one
    if total > threshold:
        meta["external_data"] = data_path(out).name  # also said in each tensor; here for people and tools
    set_metadata(model, meta)
    if total > threshold:
        data = DataFile(data_path(out))
        try:
            model.graph.initializer.extend(data.add(p) for p in tensors)
        finally:
            data.close()
        out.write_bytes(model.SerializeToString())
        return out
    data_path(out).unlink(missing_ok=True)
    # Embedded, still one tensor at a time: the graph first, then each initializer as a message of
    # its own holding just `graph { initializer }`. A protobuf parser merges repeated occurrences
    # of an embedded message field and appends repeated fields, so the file reads as one model —
    # without ever holding the whole model (and its serialised copy) in memory.
    with open(out, "wb") as fh:
        fh.write(model.SerializeToString())
        for p in tensors:
            chunk = onnx.ModelProto()
            chunk.graph.initializer.append(embedded(p))
            fh.write(chunk.SerializeToString())
    return out


def set_metadata(model: onnx.ModelProto, values: dict[str, str]) -> None:
    """Replace the model's metadata_props with `values` (order kept)."""
    del model.metadata_props[:]
    for key, value in values.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)


def metadata_of(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def read_metadata(path: Path) -> dict[str, str]:
    """The model's metadata without reading its weights (an InferenceSession would load them all)."""
    return metadata_of(load_graph(path))


# --- folding weight-only chains ----------------------------------------------------------------

FOLDABLE = ("Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze")
_SUFFIX = {
    "Transpose": ".T",
    "Reshape": ".reshaped",
    "Cast": ".cast",
    "Unsqueeze": ".unsqueezed",
    "Squeeze": ".squeezed",
}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _apply(node: onnx.NodeProto, args: list[np.ndarray]) -> np.ndarray:
    op, x = node.op_type, args[0]
    if op == "Transpose":
        perm = _attr(node, "perm") or list(range(x.ndim))[::-1]
        return np.ascontiguousarray(np.transpose(x, perm))
    if op == "Reshape":
        shape = [int(s) for s in args[1]]
        if not _attr(node, "allowzero", 0):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return x.reshape(shape)
    if op == "Cast":
        return x.astype(helper.tensor_dtype_to_np_dtype(_attr(node, "to")))
    if op == "Identity":
        return x
    axes = [int(a) for a in args[1]] if len(args) > 1 else list(_attr(node, "axes", []) or [])
    if op == "Unsqueeze":
        out_rank = x.ndim + len(axes)
        return np.expand_dims(x, tuple(a % out_rank for a in axes))
    if op == "Squeeze":
        return np.squeeze(x, tuple(a % x.ndim for a in axes)) if axes else np.squeeze(x)
    raise ValueError(f"cannot fold {op}")


def _out_shape(node: onnx.NodeProto, shape: tuple[int, ...], args: list[np.ndarray]) -> tuple[int, ...]:
    """Shape of a folded node's output from its input's shape alone (big inputs stay on disk)."""
    op = node.op_type
    if op == "Transpose":
        perm = _attr(node, "perm") or list(range(len(shape)))[::-1]
        return tuple(shape[p] for p in perm)
    if op == "Reshape":
        want = [int(s) for s in args[0]]
        if not _attr(node, "allowzero", 0):
            want = [shape[i] if s == 0 else s for i, s in enumerate(want)]
        if -1 in want:
            known = int(np.prod([s for s in want if s != -1], dtype=np.int64))
            want[want.index(-1)] = int(np.prod(shape, dtype=np.int64)) // max(known, 1)
        return tuple(want)
    # Cast, Identity, Unsqueeze, Squeeze: a zero-stride stand-in of the right shape costs no memory
    stand_in = np.broadcast_to(np.zeros((), np.uint8), shape)
    return tuple(_apply(node, [stand_in, *args]).shape)


def fold_constants(model: onnx.ModelProto, reader: TensorReader, weights: Iterable[Pending] = ()) -> list[Pending]:
    """Fold FOLDABLE nodes whose inputs are all weights or constants; returns the initializers to write.

    `weights`: initializers to add (graph inputs of those names become initializers).
    The graph is rewritten in place: folded nodes and the Constant nodes only they used are
    removed, Identity of a weight becomes a plain reference to it (no second copy), and weights
    nothing uses any more are dropped. A folded result is computed when it is written, from its
    inputs read at that moment, so memory holds one chain at a time.
    """
    graph = model.graph
    pending: dict[str, Pending] = {t.name: pending_from(reader, t.name) for t in graph.initializer}
    pending.update({p.name: p for p in weights})  # weights the graph takes as inputs (a graph traced without them)
    consts: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.op_type == "Constant" and _attr(node, "value") is not None:
            consts[node.output[0]] = numpy_helper.to_array(_attr(node, "value"))
    alias: dict[str, str] = {}
    outputs = {o.name for o in graph.output}
    kept = []
    for node in graph.node:
        ins = [alias.get(i, i) for i in node.input]
        del node.input[:]
        node.input.extend(ins)
        if node.op_type not in FOLDABLE or not ins or ins[0] not in pending or not all(i in consts for i in ins[1:]):
            kept.append(node)  # not a weight-only chain: the runtime runs (or folds) it
            continue
        if node.op_type == "Identity" and node.output[0] not in outputs:
            alias[node.output[0]] = ins[0]
            continue
        src, args = pending[ins[0]], [consts[i] for i in ins[1:]]
        shape = _out_shape(node, src.dims, args)
        data_type = _attr(node, "to") if node.op_type == "Cast" else src.data_type

        def produce(node=node, src=src, args=args) -> np.ndarray:
            return _apply(node, [src.produce(), *args])

        name = node.output[0]
        if name not in outputs:  # named after its weight: `blocks.0.mlp.c_fc.weight.T`, not `/.../Transpose_output_0`
            alias[name] = f"{src.name}{_SUFFIX[node.op_type]}"
            name = alias[name]
        pending[name] = Pending(name, data_type, shape, produce)
    used = {i for n in kept for i in n.input} | outputs
    kept = [n for n in kept if n.op_type != "Constant" or any(o in used for o in n.output)]
    del graph.node[:]
    graph.node.extend(kept)
    inputs = [i for i in graph.input if i.name not in pending]  # a weight is an initializer, not an input
    del graph.input[:]
    graph.input.extend(inputs)
    return [p for name, p in pending.items() if name in used]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def scratch_dir(parent: Path, name: str) -> Path:
    """A new scratch folder `.<name>.<host>.<pid>.<random>.tmp` in `parent`, after removing this host's
    folders of the same name whose process is gone.

    A run ends by removing its folder (also on SIGTERM), but a SIGKILL, an out-of-memory kill or
    a power cut cannot: its folder (a big model's data file, GBs) would stay beside the models
    forever. The host and pid in the name say whose it was; another host's is never touched.
    """
    parent = Path(parent)
    host = os.uname().nodename.replace(".", "_")
    for old in parent.glob(f".{name}.{host}.*.tmp"):
        pid = old.name[len(f".{name}.{host}.") :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{name}.{host}.{os.getpid()}.", suffix=".tmp", dir=parent))


class Staged:
    """A temporary folder beside `dest` to write a model into; `commit()` moves it into place.

    Leaving the `with` block without `commit()` (an exception, a failed check) removes the folder
    and everything in it: nothing half-written is ever left at `dest` or beside it.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = Path(dest)
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.dir = scratch_dir(self.dest.parent, self.dest.name)
        self.path = self.dir / self.dest.name

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def commit(self) -> Path:
        """Move the staged model (and its data file, if any) to `dest`; replaces an older model there."""
        new_files = model_files(self.path)
        old_data = data_path(self.dest)
        for src in new_files[1:]:  # data first: the .onnx appearing last marks the model complete
            os.replace(src, self.dest.parent / src.name)
        os.replace(self.path, self.dest)
        if len(new_files) == 1:
            old_data.unlink(missing_ok=True)  # an older, bigger model's data file must not linger
        return self.dest
