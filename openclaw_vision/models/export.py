"""Export a CLIP tower (image or text) to ONNX (dynamic batch) at any size, and prove the export right.

The check compares ONNX Runtime's output to PyTorch's on the same inputs, at batch 1 and a
larger batch, and refuses to call an export good below a cosine of 0.9999. The model id,
embedding width and input size go into the ONNX metadata, so the runtime never needs torch
or a side file to know what it is running. Both towers go through the same functions; what
differs (input, output names, example inputs, metadata) is in `TowerIO`.

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

`torch_export` + `finish_export` work for any torch module.
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

from ..core.errors import OpenclawError
from ..core.phases import PhaseLog
from . import onnx_files
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


class ExportCheckError(OpenclawError, RuntimeError):
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


def random_token_ids(batch: int, context_length: int, vocab_size: int, rng: np.random.Generator) -> np.ndarray:
    """(batch, context_length) int64 rows shaped like tokenizer output: start, random tokens, end, zero padding."""
    ids = np.zeros((batch, context_length), np.int64)
    for row in ids:
        n = int(rng.integers(0, context_length - 1))
        row[0] = SOT_ID
        row[1 : n + 1] = rng.integers(0, min(vocab_size, SOT_ID), n)
        row[n + 1] = EOT_ID
    return ids


Tower = VisionTransformer | TextTransformer


@dataclass(frozen=True)
class TowerIO:
    """What differs between an image and a text tower's export: names, symbolic axes, inputs, metadata."""

    input_name: str
    output_name: str
    #: the batch; for a text tower also the tokens (77 from the tokenizer, fewer once the runtime
    #: cuts the padding after the last end-of-text token: the causal mask makes the result the same)
    input_axes: dict[int, str]
    metadata: dict[str, str]

    @classmethod
    def of(cls, model: Tower, model_id: str) -> TowerIO:
        cfg = model.cfg
        if isinstance(model, TextTransformer):
            meta = {
                "model_id": model_id,
                "tower": "text",
                "embed_dim": str(cfg.embed_dim),
                "context_length": str(cfg.context_length),
                "logit_scale": repr(float(model.logit_scale.detach().exp())),
                "text_config": json.dumps(cfg.to_dict()),
                "precision": "fp32",
            }
            return cls(TEXT_INPUT_NAME, TEXT_OUTPUT_NAME, {0: "batch", 1: "tokens"}, meta)
        meta = {
            "model_id": model_id,
            "embed_dim": str(cfg.embed_dim),
            "image_size": str(cfg.image_size),
            "vision_config": json.dumps(cfg.to_dict()),
            "precision": "fp32",
        }
        return cls(INPUT_NAME, OUTPUT_NAME, {0: "batch"}, meta)


def example_input(model: Tower, batch: int, seed: int) -> np.ndarray:
    """`batch` rows of what the tower reads: random pixels, or token rows with start, end and padding
    where the tokenizer puts them (so the end-of-text pooling is checked at varied positions)."""
    rng = np.random.default_rng(seed)
    cfg = model.cfg
    if isinstance(model, TextTransformer):
        return random_token_ids(batch, cfg.context_length, cfg.vocab_size, rng)
    return rng.standard_normal((batch, 3, cfg.image_size, cfg.image_size)).astype(np.float32)


def _export_tower(model: Tower, io: TowerIO, raw: Path) -> Path:
    example = torch.from_numpy(example_input(model, 2, seed=1))
    axes = {io.input_name: io.input_axes, io.output_name: {0: "batch"}}
    return torch_export(model, (example,), raw, [io.input_name], [io.output_name], axes)


def export_onnx(model: Tower, model_id: str, out: Path, threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD) -> Path:
    """Write `model` as ONNX with a symbolic batch axis (no check; `export_model` is the checked path)."""
    io = TowerIO.of(model, model_id)
    with onnx_files.Staged(out) as stage:
        raw = _export_tower(model, io, stage.dir / "torch" / "model.onnx")
        finish_export(raw, stage.path, io.metadata, threshold, model.state_dict())
        return stage.commit()


@dataclass
class CheckCase:
    """One check input for PyTorch, and the inputs ONNX Runtime must give PyTorch's answer for."""

    torch_input: np.ndarray
    runtime_inputs: list[np.ndarray]


def check_cases(model: Tower, seed: int = 2) -> list[CheckCase]:
    """Batch 1 and 3; a text batch also cut after its last end token, as the runtime does."""
    cases = []
    for batch in CHECK_BATCHES:
        x = example_input(model, batch, seed + batch)
        runs = [x]
        if isinstance(model, TextTransformer):
            runs.append(np.ascontiguousarray(x[:, : int(x.argmax(axis=1).max()) + 1]))
        cases.append(CheckCase(x, runs))
    return cases


def torch_outputs(model: torch.nn.Module, cases: list[CheckCase]) -> list[np.ndarray]:
    with torch.no_grad():
        return [model(torch.from_numpy(c.torch_input)).numpy() for c in cases]


def compare_onnx(
    path: Path, io: TowerIO, cases: list[CheckCase], refs: list[np.ndarray], min_cosine: float = 0.9999
) -> float:
    """Run ONNX Runtime on every case; the worst cosine against PyTorch's `refs` (raises below `min_cosine`)."""
    from ..core.ortsession import session

    sess = session(path)
    worst = 1.0
    for case, ref in zip(cases, refs, strict=True):
        for x in case.runtime_inputs:
            got = sess.run([io.output_name], {io.input_name: x})[0]
            if got.shape != ref.shape:
                raise ExportCheckError(f"input {x.shape}: ONNX output shape {got.shape} != torch {ref.shape}")
            cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
            worst = min(worst, float(cos.min()))
    if worst < min_cosine:
        raise ExportCheckError(f"ONNX Runtime vs PyTorch cosine {worst:.6f} < {min_cosine}")
    return worst


def export_model(
    name: str,
    out: Path,
    checkpoint: Path | None = None,
    seed: int = 0,
    threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD,
    tower: str = "image",
) -> ExportResult:
    """Build (or load) the tower (`image` or `text`), export it, check it, move it into place; the one entry
    point tools call. The image and the text tower of one checkpoint (or of one random seed) get the same id.

    Memory: the tower once (plus what the tracer keeps), then one weight at a time, then one
    ONNX Runtime session; never two copies of the weights together (see the module doc).
    """
    if tower not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(TOWERS)}, got {tower!r}")
    t0 = time.perf_counter()
    phases = PhaseLog()
    with phases.phase("build tower"):
        model, model_id = (build_text_model if tower == "text" else build_model)(name, checkpoint, seed)
    embed_dim, io = model.cfg.embed_dim, TowerIO.of(model, model_id)
    cases = check_cases(model)
    with phases.phase("PyTorch reference outputs"):
        refs = torch_outputs(model, cases)
    with onnx_files.Staged(out) as stage:
        with phases.phase("trace (torch.onnx, graph only)"):
            raw = _export_tower(model, io, stage.dir / "torch" / "model.onnx")
        with phases.phase("fold and write one tensor at a time"):
            finish_export(raw, stage.path, io.metadata, threshold, model.state_dict())
            shutil.rmtree(raw.parent)
        del model
        gc.collect()  # the weights are on disk now: the check's session is the only big thing left
        with phases.phase("check: ONNX Runtime vs PyTorch"):
            cos = compare_onnx(stage.path, io, cases, refs)
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
        check_images=sum(len(c.torch_input) for c in cases),
        seconds=round(time.perf_counter() - t0, 1),
        phases=phases.as_list(),
    )
