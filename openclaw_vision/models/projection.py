"""A fitted linear projection appended to an exported tower: `output_dim`-wide unit embeddings from any width.

The projection lives in the graph (a final MatMul by the fitted (D, k) matrix, then an L2
normalisation: ReduceL2, Max with numerics' epsilon, Div), so ONNX Runtime, OpenVINO, TensorRT
and Triton all run the very same thing and no runtime needs a side file. Scaling the tower's raw
output first would change nothing: the projection is linear and the result is normalised.

The model id gets the width (`<name>@<weights>/<k>`): the image and text towers projected by the
same matrix share that id, and every model-id check that already exists (the labels node, the
gate's text term, the VLM) refuses a consumer of another projection or of the full width. The
width rides in the metadata too (`embed_dim` = k, `full_embed_dim` = D, `full_model_id`).

Torch-free and one tensor at a time (onnx_files): a ViT-bigG-14 export is re-written with its
weights streamed from the full-width file, never held twice. Where the matrix comes from (the fit)
and whether it is good enough (the gate) is quant/projection.py's business.

onnx is imported where a graph is read or written, not at import: runtime/config.py reads the width rule
(`check_output_dim`) in every node, and a robot's environment has no onnx (requirements-humble.txt).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import OpenclawError
from ..core.numerics import NORM_EPS

#: metadata: what the projection is (fit, source width, figures), JSON
PROJECTION_KEY = "projection"


class ProjectionError(OpenclawError, ValueError):
    """An output width the tower cannot give, or a projection matrix of the wrong shape."""


def projected_id(model_id: str, dim: int) -> str:
    """`ViT-bigG-14@random-seed0` → `ViT-bigG-14@random-seed0/512`."""
    return f"{model_id}/{dim}"


def check_output_dim(output_dim: int, tower_dim: int, model: str = "the tower") -> int:
    """The width to project to: 0 (none) when `output_dim` is 0 or the tower's own width; an error above it."""
    if output_dim < 0:
        raise ProjectionError(f"output_dim must be >= 0 (0: the tower's width), got {output_dim}")
    if output_dim > tower_dim:
        raise ProjectionError(
            f"output_dim {output_dim} is above {model}'s embedding width {tower_dim}: a linear projection cannot add"
            f" dimensions (use 0 or at most {tower_dim})"
        )
    return 0 if output_dim in (0, tower_dim) else output_dim


def add_projection(
    src: Path,
    out: Path,
    matrix: np.ndarray,
    info: dict | None = None,
    threshold: int | None = None,
) -> Path:
    """Write `src` (an image or text export) with its output projected by `matrix` (D, k) and L2-normalised to `out`.

    The output keeps its name (`image_embeds` / `text_embeds`), now (batch, k); `info` (the fit
    and its figures) goes into the metadata under PROJECTION_KEY. Staged: nothing is left at `out`
    on failure. `threshold`: onnx_files.EXTERNAL_DATA_THRESHOLD unless given."""
    from onnx import TensorProto, helper

    from . import onnx_files

    threshold = onnx_files.EXTERNAL_DATA_THRESHOLD if threshold is None else threshold
    model = onnx_files.load_graph(src)
    meta = onnx_files.metadata_of(model)
    dim = int(meta["embed_dim"])
    matrix = np.ascontiguousarray(matrix, np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != dim or not 0 < matrix.shape[1] <= dim:
        raise ProjectionError(f"projection matrix {matrix.shape} does not fit {src}'s {dim}-d output")
    if PROJECTION_KEY in meta:
        raise ProjectionError(f"{src} is already projected ({meta['model_id']}): project the full-width export")
    k = int(matrix.shape[1])
    graph = model.graph
    out_name = graph.output[0].name
    full = f"{out_name}.full_width"
    for node in graph.node:
        node.output[:] = [full if o == out_name else o for o in node.output]
    weight, eps = "projection.weight", "projection.eps"
    graph.node.extend([
        helper.make_node("MatMul", [full, weight], ["projection.raw"], name="projection/MatMul"),
        helper.make_node("ReduceL2", ["projection.raw"], ["projection.norm"], name="projection/ReduceL2",
                         axes=[-1], keepdims=1),
        helper.make_node("Max", ["projection.norm", eps], ["projection.denominator"], name="projection/Max"),
        helper.make_node("Div", ["projection.raw", "projection.denominator"], [out_name], name="projection/Div"),
    ])  # fmt: skip
    shape = graph.output[0].type.tensor_type.shape
    if len(shape.dim) == 2:
        shape.dim[1].Clear()
        shape.dim[1].dim_value = k
    else:
        graph.output[0].CopyFrom(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", k]))
    reader = onnx_files.TensorReader(model, Path(src).parent)
    tensors = [onnx_files.pending_from(reader, t.name) for t in graph.initializer]
    tensors += [onnx_files.pending_array(weight, matrix), onnx_files.pending_array(eps, np.float32(NORM_EPS))]
    meta.update({
        "model_id": projected_id(meta["model_id"], k),
        "full_model_id": meta["model_id"],
        "embed_dim": str(k),
        "full_embed_dim": str(dim),
        PROJECTION_KEY: json.dumps(info or {}),
    })  # fmt: skip
    with onnx_files.Staged(out) as stage:
        onnx_files.write_model(model, tensors, stage.path, threshold, meta)
        return stage.commit()


def projection_matrix(path: Path) -> np.ndarray | None:
    """The (D, k) matrix in a projected export, or None for a full-width one (for tests and tools)."""
    from . import onnx_files

    model = onnx_files.load_graph(path)
    reader = onnx_files.TensorReader(model, Path(path).parent)
    return reader.array("projection.weight") if "projection.weight" in reader else None
