"""Where the text tower's ONNX export lives in the data home, and building it on first use.

`<data home>/models/<model>.text.fp32.onnx`, beside the image tower's `<model>.fp32.onnx` and
`<model>.int8.onnx`. The text tower stays FP32 (it runs once per label set, not per frame).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..core.resources import data_home

log = logging.getLogger(__name__)


def default_text_model_path(model: str) -> Path:
    return data_home() / "models" / f"{model}.text.fp32.onnx"


def model_stem(model_id: str) -> str:
    """The data-home stem of a model id's builds: `ViT-B-32@random-seed0` → `ViT-B-32`, a projected
    `ViT-bigG-14@random-seed0/512` → `ViT-bigG-14-512` (models/projection.py writes the width after a `/`)."""
    name, _, weights = model_id.partition("@")
    _, slash, width = weights.rpartition("/")
    return f"{name}-{width}" if slash else name


def text_model_path_for(model_id: str) -> Path:
    """Where the data home keeps the text tower of the image model `model_id` (its projection's, if any)."""
    return default_text_model_path(model_stem(model_id))


def ensure_text_fp32(
    model: str, model_path: str | Path | None = None, checkpoint: Path | None = None, seed: int = 0
) -> Path:
    """`model_path` if given, else the data-home text export of `model` (exported now if missing: needs torch)."""
    if model_path:
        return Path(model_path)
    path = default_text_model_path(model)
    if not path.exists():
        from ..models.export import export_model

        log.info("building %s text tower (FP32 export) -> %s", model, path)
        res = export_model(model, path, checkpoint, seed, tower="text")
        log.info("text export checked: ONNX Runtime vs PyTorch min cosine %.6f", res.min_cosine)
    return path
