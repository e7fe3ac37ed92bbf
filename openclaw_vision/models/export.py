"""Export a vision tower to ONNX (dynamic batch) at any size, and prove the export right.

The check compares ONNX Runtime's output to PyTorch's on the same inputs, at batch 1 and a
larger batch, and refuses to call an export good below a cosine of 0.9999. The model id,
embedding width and input size go into the ONNX metadata, so the runtime never needs torch
or a side file to know what it is running.

Any size: ViT-bigG-14 has 7.4 GB of FP32 weights, past protobuf's 2 GiB limit and too big to
hold twice on a 24 GB machine. So the export runs in steps that never keep two copies:

1. PyTorch's reference outputs for the check are computed first (while the tower is in memory).
2. `torch_export` traces the module to a graph *without* weights (`export_params=False`) and
   with constant folding off: with it on, the exporter makes a transposed copy of every Linear
   weight (the whole model again), and with weights it builds them into a protobuf (another
   copy or two below 2 GB; one file per tensor above).
3. `finish_export` writes one `.onnx` plus, above EXTERNAL_DATA_THRESHOLD, one `.onnx.data`
   beside it (onnx_files), taking each weight from the module's state dict as it is written
   and folding the weight-only chains the exporter left (Transpose of a Linear weight, Reshape
   of the patch kernel, Cast) on the way: one tensor (and its transposed copy) at a time.
4. The tower is released; ONNX Runtime runs the staged file on the check inputs; only then are
   the files moved into place (`onnx_files.Staged`). A failure anywhere leaves nothing behind.

`torch_export` + `finish_export` work for any torch module (the text towers use them too).
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from ..phases import PhaseLog
from . import onnx_files
from .checkpoint import build_model
from .vit import VisionTransformer

log = logging.getLogger(__name__)

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "image_embeds"
OPSET = 17
#: Batches the ONNX-vs-PyTorch check runs (1 and a larger one, so the dynamic batch is exercised).
CHECK_BATCHES = (1, 3)


@dataclass
class ExportResult:
    path: Path
    model_id: str
    embed_dim: int
    min_cosine: float
    files: list[Path] = field(default_factory=list)
    size_bytes: int = 0
    check_images: int = 0
    seconds: float = 0.0
    phases: list[dict] = field(default_factory=list)  # name, seconds, peak RSS (phases.PhaseLog)


class ExportCheckError(RuntimeError):
    """ONNX Runtime and PyTorch disagree on the exported graph."""


def torch_export(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    raw: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> Path:
    """Trace `module` to an ONNX graph at `raw` without its weights (they stay in the module; see the module doc).

    Uses the TorchScript-based exporter: on these towers it gives a graph ORT fuses well, and
    with `dynamic_axes` the batch stays symbolic even though the example input has batch 2
    (the dynamo exporter specialises a batch-1 example input to a fixed batch of 1). With
    `export_params=False` every weight is a graph input named as in `module.state_dict()`;
    `finish_export` turns them into initializers, streamed from the module.
    """
    raw = Path(raw)
    raw.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is chosen on purpose
        torch.onnx.export(
            module,
            example,
            str(raw),
            dynamo=False,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=False,
            export_params=False,
        )
    return raw


def _from_torch(name: str, tensor: torch.Tensor) -> onnx_files.Pending:
    """A module's weight as an initializer to write: read (zero-copy) only when written."""
    t = tensor.detach()
    dtype = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(str(t.dtype).removeprefix("torch.")))
    return onnx_files.Pending(name, dtype, tuple(t.shape), lambda: t.contiguous().numpy())


def finish_export(
    raw: Path,
    out: Path,
    metadata: dict[str, str],
    threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD,
    params: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """The traced graph at `raw` → `out` (+ `out.data` above `threshold`), one weight at a time.

    `params` (the module's `state_dict()`) supplies the weights the graph takes as inputs (a
    graph traced by `torch_export`); weights already in the file at `raw` are read from it.
    Weight-only chains are folded on the way (onnx_files.fold_constants); metadata is set.
    """
    model = onnx_files.load_graph(raw)
    if not model.graph.initializer and not params:
        raise ValueError(f"{raw} has no weights: pass the traced module's state_dict() as `params`")
    reader = onnx_files.TensorReader(model, Path(raw).parent)
    inputs = {i.name for i in model.graph.input}
    weights = [_from_torch(k, v) for k, v in (params or {}).items() if k in inputs]
    tensors = onnx_files.fold_constants(model, reader, weights)
    return onnx_files.write_model(model, tensors, out, threshold, metadata)


def vision_metadata(model: VisionTransformer, model_id: str) -> dict[str, str]:
    return {
        "model_id": model_id,
        "embed_dim": str(model.cfg.embed_dim),
        "image_size": str(model.cfg.image_size),
        "vision_config": json.dumps(model.cfg.to_dict()),
        "precision": "fp32",
    }


def _export_tower(model: VisionTransformer, raw: Path) -> Path:
    size = model.cfg.image_size
    example = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    return torch_export(
        model, (example,), raw, [INPUT_NAME], [OUTPUT_NAME], {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}
    )


def export_onnx(
    model: VisionTransformer, model_id: str, out: Path, threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD
) -> Path:
    """Write `model` as ONNX with a symbolic batch axis (no check; `export_model` is the checked path)."""
    with onnx_files.Staged(out) as stage:
        raw = _export_tower(model, stage.dir / "torch" / "model.onnx")
        finish_export(raw, stage.path, vision_metadata(model, model_id), threshold, model.state_dict())
        return stage.commit()


def check_inputs(image_size: int, seed: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((b, 3, image_size, image_size)).astype(np.float32) for b in CHECK_BATCHES]


def torch_outputs(model: torch.nn.Module, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        return [model(torch.from_numpy(x)).numpy() for x in inputs]


def compare_onnx(path: Path, inputs: list[np.ndarray], refs: list[np.ndarray], min_cosine: float = 0.9999) -> float:
    """Run ONNX Runtime on `inputs`; the worst cosine against PyTorch's `refs` (raises below `min_cosine`)."""
    import onnxruntime as ort

    from ..encoders.onnxruntime import session_options

    sess = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    worst = 1.0
    for x, ref in zip(inputs, refs, strict=True):
        got = sess.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        if got.shape != ref.shape:
            raise ExportCheckError(f"batch {len(x)}: ONNX output shape {got.shape} != torch {ref.shape}")
        cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
        worst = min(worst, float(cos.min()))
    if worst < min_cosine:
        raise ExportCheckError(f"ONNX Runtime vs PyTorch cosine {worst:.6f} < {min_cosine}")
    return worst


def check_export(model: VisionTransformer, path: Path, min_cosine: float = 0.9999, seed: int = 2) -> float:
    """Run torch and ONNX Runtime on the same random pixels (batch 1 and 3); return the worst cosine."""
    inputs = check_inputs(model.cfg.image_size, seed)
    return compare_onnx(path, inputs, torch_outputs(model, inputs), min_cosine)


def export_model(
    name: str,
    out: Path,
    checkpoint: Path | None = None,
    seed: int = 0,
    threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD,
) -> ExportResult:
    """Build (or load) the tower, export it, check it, move it into place; the one entry point tools call.

    Memory: the tower once (plus what the tracer keeps), then one weight at a time, then one
    ONNX Runtime session; never two copies of the weights together (see the module doc).
    """
    t0 = time.perf_counter()
    phases = PhaseLog()
    with phases.phase("build tower"):
        model, model_id = build_model(name, checkpoint, seed)
    embed_dim, meta = model.cfg.embed_dim, vision_metadata(model, model_id)
    inputs = check_inputs(model.cfg.image_size)
    with phases.phase("PyTorch reference outputs"):
        refs = torch_outputs(model, inputs)
    with onnx_files.Staged(out) as stage:
        with phases.phase("trace (torch.onnx, graph only)"):
            raw = _export_tower(model, stage.dir / "torch" / "model.onnx")
        with phases.phase("fold and write one tensor at a time"):
            finish_export(raw, stage.path, meta, threshold, model.state_dict())
            shutil.rmtree(raw.parent)
        del model
        gc.collect()  # the weights are on disk now: the check's session is the only big thing left
        with phases.phase("check: ONNX Runtime vs PyTorch"):
            cos = compare_onnx(stage.path, inputs, refs)
        path = stage.commit()
    files = onnx_files.model_files(path)
    log.info("exported %s to %s (ORT vs torch min cosine %.6f)", model_id, ", ".join(map(str, files)), cos)
    return ExportResult(
        path=path,
        model_id=model_id,
        embed_dim=embed_dim,
        min_cosine=cos,
        files=files,
        size_bytes=sum(p.stat().st_size for p in files),
        check_images=sum(map(len, inputs)),
        seconds=round(time.perf_counter() - t0, 1),
        phases=phases.as_list(),
    )
