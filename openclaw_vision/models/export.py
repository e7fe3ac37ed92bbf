"""Export a vision tower to ONNX (dynamic batch) and prove the export right.

The check compares ONNX Runtime's output to PyTorch's on the same inputs, at batch 1 and a
larger batch, and refuses to call an export good below a cosine of 0.9999. The model id,
embedding width and input size go into the ONNX metadata, so the runtime never needs torch
or a side file to know what it is running.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import build_model
from .vit import VisionTransformer

log = logging.getLogger(__name__)

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "image_embeds"
OPSET = 17


@dataclass
class ExportResult:
    path: Path
    model_id: str
    embed_dim: int
    min_cosine: float


class ExportCheckError(RuntimeError):
    """ONNX Runtime and PyTorch disagree on the exported graph."""


def export_onnx(model: VisionTransformer, model_id: str, out: Path) -> Path:
    """Write `model` as ONNX with a symbolic batch axis; metadata carries the model id.

    Uses the TorchScript-based exporter: on this tower it gives a graph ORT fuses well, and
    with `dynamic_axes` the batch stays symbolic even though the example input has batch 2
    (the dynamo exporter specialises a batch-1 example input to a fixed batch of 1).
    """
    import onnx

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    size = model.cfg.image_size
    example = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is chosen on purpose
        torch.onnx.export(
            model,
            (example,),
            str(out),
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
        )
    proto = onnx.load(str(out))
    meta = {
        "model_id": model_id,
        "embed_dim": str(model.cfg.embed_dim),
        "image_size": str(size),
        "vision_config": json.dumps(model.cfg.to_dict()),
        "precision": "fp32",
    }
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(out))
    return out


def check_export(model: VisionTransformer, path: Path, min_cosine: float = 0.9999, seed: int = 2) -> float:
    """Run torch and ONNX Runtime on the same random pixels (batch 1 and 3); return the worst cosine."""
    import onnxruntime as ort

    size = model.cfg.image_size
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    worst = 1.0
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy()
        got = sess.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        if got.shape != ref.shape:
            raise ExportCheckError(f"batch {batch}: ONNX output shape {got.shape} != torch {ref.shape}")
        cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
        worst = min(worst, float(cos.min()))
    if worst < min_cosine:
        raise ExportCheckError(f"ONNX Runtime vs PyTorch cosine {worst:.6f} < {min_cosine}")
    return worst


def export_model(name: str, out: Path, checkpoint: Path | None = None, seed: int = 0) -> ExportResult:
    """Build (or load) the tower, export it, check it; the one entry point tools call."""
    model, model_id = build_model(name, checkpoint, seed)
    path = export_onnx(model, model_id, out)
    cos = check_export(model, path)
    log.info("exported %s to %s (ORT vs torch min cosine %.6f)", model_id, path, cos)
    return ExportResult(path=path, model_id=model_id, embed_dim=model.cfg.embed_dim, min_cosine=cos)
