"""The quantiser's scratch folder: every model it runs, written once, weights never copied twice.

A quantisation run builds many models from one FP32 export: the observation model
(calibration), the probe (local sensitivity), the switch model (end-to-end sweep), a Q/DQ
candidate per partition trial, and the final model. For ViT-bigG-14 each would be 2–9 GB if
written out whole. Here they are graphs of a few MB that refer to two data files shared by
all of them, both in this folder:

- the FP32 weights: the export's own data file, hard-linked in (no copy; ONNX Runtime only
  reads external data from inside the model's folder, and refuses symbolic links out of it);
  copied only when the output lives on another file system. A small model's embedded
  weights simply stay embedded in each graph.
- `int8-weights.data`: every quantisable layer's per-channel INT8 weights, quantised once,
  one tensor at a time.

Only the model that passes the gate is written out whole, streamed tensor by tensor
(`finalize`). The folder is created beside the output and removed when the run ends (one
left by a killed run is removed by the next: `onnx_files.scratch_dir`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, numpy_helper

from ..models import onnx_files
from .graph import Layer
from .qdq import int8_name, quantise_weight

log = logging.getLogger(__name__)

INT8_DATA = "int8-weights.data"
MIGRATED_DATA = "migrated-weights.data"


def _link_or_copy(src: Path, dst: Path) -> str:
    try:
        os.link(src, dst)
        return "linked"
    except OSError:  # another file system (or no hard links): a copy, once
        shutil.copyfile(src, dst)
        return "copied"


class Workspace:
    def __init__(self, fp32_model: Path, near: Path) -> None:
        """Scratch folder beside `near` (the output's folder) holding `fp32_model`'s weights."""
        self.fp32_model = Path(fp32_model)
        Path(near).mkdir(parents=True, exist_ok=True)
        self.dir = onnx_files.scratch_dir(Path(near), "quantize")
        self.graph = onnx_files.load_graph(self.fp32_model)
        for loc in onnx_files.external_locations(self.graph):
            how = _link_or_copy(self.fp32_model.parent / loc, self.dir / loc)
            log.info("FP32 weights %s %s into %s", loc, how, self.dir)
        self._int8: dict[str, tuple[TensorProto, TensorProto]] = {}

    def quantise_weights(self, layers: list[Layer], progress=None, keep_sums: frozenset[str] = frozenset()) -> None:
        """Quantise every layer's weight once (per output channel), appending it to INT8_DATA; the weights named in
        `keep_sums` keep each channel's sum (`quantise_weight`; a centred input's GEMM, centre.py)."""
        wrap = progress or (lambda it, desc: it)
        reader = self.reader()
        data = onnx_files.DataFile(self.dir / INT8_DATA)
        try:
            for layer in wrap(layers, "quantising weights (per channel)"):
                name = int8_name(layer)
                if name in self._int8:
                    continue
                q, scale = quantise_weight(reader.array(layer.weight), layer.channel_axis, layer.weight in keep_sums)
                qt = data.add(onnx_files.pending_array(name, q))
                self._int8[name] = (qt, numpy_helper.from_array(scale, f"{name}_scale"))
        finally:
            data.close()

    def reader(self) -> onnx_files.TensorReader:
        """The current graph's FP32 initializers (the export's, linked in here, or migrated ones: smooth.py)."""
        return onnx_files.TensorReader(self.graph, self.dir)

    def replace(self, graph: onnx.ModelProto, tensors: list[onnx_files.Pending]) -> None:
        """Make `graph` the workspace's FP32 graph, with `tensors` replacing its initializers of the same names:
        written one at a time into MIGRATED_DATA when the weights live in data files, embedded otherwise.
        Call before `quantise_weights` (the INT8 weights are quantised from this graph)."""
        if self._int8:
            raise RuntimeError("weights were already quantised from the previous graph")
        new = {p.name: p for p in tensors}
        external = bool(onnx_files.external_locations(graph))
        data = onnx_files.DataFile(self.dir / MIGRATED_DATA) if external and new else None
        try:
            for i, init in enumerate(graph.graph.initializer):
                if init.name in new:
                    p = new[init.name]
                    graph.graph.initializer[i].CopyFrom(data.add(p) if data else onnx_files.embedded(p))
        finally:
            if data:
                data.close()
        self.graph = graph

    def weights(self, layer: Layer) -> tuple[TensorProto, TensorProto]:
        """`qdq.WeightTensors`: the layer's INT8 weight (a reference into INT8_DATA) and its scales."""
        q, scale = self._int8[int8_name(layer)]
        return _copy(q), _copy(scale)

    def write(self, model: onnx.ModelProto, name: str) -> Path:
        """Save a derived model's graph here (its weights stay in the shared data files)."""
        path = self.dir / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        return path

    def finalize(self, model: Path, out: Path, threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD) -> Path:
        """Write `model` (a graph in this folder) self-contained at `out`: embedded, or `out` + `out.data`."""
        graph = onnx_files.load_graph(model)
        reader = onnx_files.TensorReader(graph, self.dir)
        tensors = [onnx_files.pending_from(reader, t.name) for t in graph.graph.initializer]
        return onnx_files.write_model(graph, tensors, out, threshold)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _copy(t: TensorProto) -> TensorProto:
    out = TensorProto()
    out.CopyFrom(t)
    return out
