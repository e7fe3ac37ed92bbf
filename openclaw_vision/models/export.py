"""Export a CLIP tower (image or text) to ONNX (dynamic batch) and prove the export right.

The check compares ONNX Runtime's output to PyTorch's on the same inputs, at batch 1 and a
larger batch, and refuses to call an export good below a cosine of 0.9999. The model id,
embedding width and input size go into the ONNX metadata, so the runtime never needs torch
or a side file to know what it is running. Both towers go through the same functions; what
differs (input, output names, example inputs, metadata) is in `_tower_io`.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import build_model, build_text_model
from .text import TextTransformer
from .vit import VisionTransformer

log = logging.getLogger(__name__)

INPUT_NAME = "pixel_values"
OUTPUT_NAME = "image_embeds"
TEXT_INPUT_NAME = "input_ids"
TEXT_OUTPUT_NAME = "text_embeds"
OPSET = 17
TOWERS = ("image", "text")
#: CLIP's start- and end-of-text token ids (the last two of its 49 408-token vocabulary).
SOT_ID, EOT_ID = 49406, 49407


@dataclass
class ExportResult:
    path: Path
    model_id: str
    embed_dim: int
    min_cosine: float


class ExportCheckError(RuntimeError):
    """ONNX Runtime and PyTorch disagree on the exported graph."""


def random_token_ids(batch: int, context_length: int, vocab_size: int, rng: np.random.Generator) -> np.ndarray:
    """(batch, context_length) int64 rows shaped like tokenizer output: start, random tokens, end, zero padding."""
    ids = np.zeros((batch, context_length), np.int64)
    for row in ids:
        n = int(rng.integers(0, context_length - 1))
        row[0] = SOT_ID
        row[1 : n + 1] = rng.integers(0, min(vocab_size, SOT_ID), n)
        row[n + 1] = EOT_ID
    return ids


def _tower_io(model: VisionTransformer | TextTransformer, batch: int, seed: int) -> tuple[str, str, np.ndarray, dict]:
    """(input name, output name, example input of `batch` rows, metadata) of an image or a text tower."""
    rng = np.random.default_rng(seed)
    cfg = model.cfg
    if isinstance(model, TextTransformer):
        ids = random_token_ids(batch, cfg.context_length, cfg.vocab_size, rng)
        meta = {
            "tower": "text",
            "embed_dim": str(cfg.embed_dim),
            "context_length": str(cfg.context_length),
            "logit_scale": repr(float(model.logit_scale.detach().exp())),
            "text_config": json.dumps(cfg.to_dict()),
        }
        return TEXT_INPUT_NAME, TEXT_OUTPUT_NAME, ids, meta
    size = cfg.image_size
    pixels = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    meta = {"embed_dim": str(cfg.embed_dim), "image_size": str(size), "vision_config": json.dumps(cfg.to_dict())}
    return INPUT_NAME, OUTPUT_NAME, pixels, meta


def _dynamic_input(model: VisionTransformer | TextTransformer) -> dict[int, str]:
    """Symbolic input axes: the batch; for a text tower also the tokens (77 from the tokenizer, fewer once the
    runtime cuts the padding after the last end-of-text token: the causal mask makes the result the same)."""
    return {0: "batch", 1: "tokens"} if isinstance(model, TextTransformer) else {0: "batch"}


def export_onnx(model: VisionTransformer | TextTransformer, model_id: str, out: Path) -> Path:
    """Write `model` as ONNX with a symbolic batch axis; metadata carries the model id.

    Uses the TorchScript-based exporter: on this tower it gives a graph ORT fuses well, and
    with `dynamic_axes` the batch stays symbolic even though the example input has batch 2
    (the dynamo exporter specialises a batch-1 example input to a fixed batch of 1).
    """
    import onnx

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    input_name, output_name, example, tower_meta = _tower_io(model, 2, seed=1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is chosen on purpose
        torch.onnx.export(
            model,
            (torch.from_numpy(example),),
            str(out),
            dynamo=False,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: _dynamic_input(model), output_name: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
        )
    proto = onnx.load(str(out))
    meta = {"model_id": model_id, **tower_meta, "precision": "fp32"}
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(out))
    return out


def check_export(
    model: VisionTransformer | TextTransformer, path: Path, min_cosine: float = 0.9999, seed: int = 2
) -> float:
    """Run torch and ONNX Runtime on the same random inputs (batch 1 and 3); return the worst cosine.

    Image: random pixels. Text: random token rows with start, end and padding where the
    tokenizer puts them, so the end-of-text pooling is checked at varied positions."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 1.0
    for batch in (1, 3):
        input_name, output_name, x, _meta = _tower_io(model, batch, seed + batch)
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy()
        runs = [x]
        if isinstance(model, TextTransformer):  # also cut after the last end token, as the runtime does
            runs.append(np.ascontiguousarray(x[:, : int(x.argmax(axis=1).max()) + 1]))
        for inp in runs:
            got = sess.run([output_name], {input_name: inp})[0]
            if got.shape != ref.shape:
                raise ExportCheckError(f"input {inp.shape}: ONNX output shape {got.shape} != torch {ref.shape}")
            cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
            worst = min(worst, float(cos.min()))
    if worst < min_cosine:
        raise ExportCheckError(f"ONNX Runtime vs PyTorch cosine {worst:.6f} < {min_cosine}")
    return worst


def export_model(
    name: str, out: Path, checkpoint: Path | None = None, seed: int = 0, tower: str = "image"
) -> ExportResult:
    """Build (or load) the tower (`image` or `text`), export it, check it; the one entry point tools call.

    The image and the text tower of one checkpoint (or of one random seed) get the same model id."""
    if tower not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(TOWERS)}, got {tower!r}")
    model, model_id = (build_text_model if tower == "text" else build_model)(name, checkpoint, seed)
    path = export_onnx(model, model_id, out)
    cos = check_export(model, path)
    log.info("exported %s to %s (ORT vs torch min cosine %.6f)", model_id, path, cos)
    return ExportResult(path=path, model_id=model_id, embed_dim=model.cfg.embed_dim, min_cosine=cos)
