"""The encoder stage's interface: normalised pixels in, unit-length embeddings out.

Every backend reads the same ONNX files (the FP32 export and the gated Q/DQ INT8 model), and
`ModelInfo.from_metadata` is the one place that turns such a file's metadata and tensor shapes
into what a node publishes (model id, width, input size): whichever runtime loads the file, a
frame's features say the same thing about the weights that made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..core.errors import OpenclawError
from ..core.numerics import l2_normalise  # noqa: F401 - the encoders' import of it


@dataclass
class Embedding:
    """N×D float32 rows of unit L2 norm, with the id of the model that produced them."""

    vectors: np.ndarray
    model_id: str

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


#: Largest batch a model with a dynamic batch axis is run at by default (our exports have one);
#: a static batch dimension in the file is its own limit.
DEFAULT_MAX_BATCH = 8


class FramePreprocessor(Protocol):
    """Frame → normalised (3, S, S) pixels, written into a row of the batch the encoder will read.

    The CPU one (preprocess/cpu.py) fills host arrays; a GPU encoder's own (gpu_common.py) writes
    with the CUDA kernel straight into the encoder's input buffer, so the batch never leaves the GPU.
    """

    name: str
    #: calls may run on several threads at once and `buffer` gives a new array each time, so a
    #: pipeline prepares a batch's frames in parallel and may hold two batches in flight (CPU: yes;
    #: the GPU one writes into its encoder's one input buffer from one stream: no)
    concurrent: bool

    def buffer(self, n: int) -> Any:
        """The (n, 3, S, S) batch to fill, row by row (n <= the encoder's max_batch)."""
        ...

    def __call__(self, frame: Any, out: Any = None) -> Any:
        """Preprocess one frame into `out` (a row of `buffer(n)`; a fresh array when None)."""
        ...


@runtime_checkable
class ImageEncoder(Protocol):
    """What every backend (ONNX Runtime, OpenVINO, TensorRT, torch) offers the node and the tools."""

    model_id: str
    embed_dim: int
    image_size: int
    backend: str
    precision: str
    max_batch: int  # the largest batch one `encode` runs at once (larger ones are the caller's to split)
    info: ModelInfo  # what the model file says about itself: its id, sizes and INT8 gate verdicts

    def encode(self, pixels: np.ndarray) -> Embedding:
        """pixels: (N, 3, S, S) float32, normalised per `PreprocessSpec` → Embedding of N rows."""
        ...

    def frame_preprocessor(self) -> FramePreprocessor | None:
        """This encoder's own preprocessor (a GPU encoder's CUDA kernel into its input buffer), or
        None: frames go through the CPU preprocessor (`pipeline.FramePipeline` decides)."""
        ...


class HostInput:
    """For backends that read host arrays: no preprocessor of their own, the CPU one serves them."""

    def frame_preprocessor(self) -> None:
        return None


class EncoderError(OpenclawError, RuntimeError):
    """A model that cannot be loaded or an input it cannot take."""


class BackendUnsuitable(EncoderError):
    """This backend could load the model but should not run it (e.g. the INT8 gate failed on it).

    `backend: auto` moves on to the next backend; an explicit choice stops with the reason.
    """


#: Dimension of a tensor shape as the runtimes report it: an int, or None/str/-1 when dynamic.
Dim = int | str | None


def _static(d: Dim) -> int | None:
    return d if isinstance(d, int) and d > 0 else None


def one_line(err: BaseException) -> str:
    """A runtime's error as one log line: its last non-empty line (OpenVINO's messages open with
    several lines of source locations and end with the reason)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def checked_output(out: np.ndarray, n: int, dim: int, backend: str) -> np.ndarray:
    """The runtime's output if it is (n, dim) — else an EncoderError. A model whose computation goes
    wrong for one input can come back with another shape instead of an error (OpenVINO returned
    (0, 0) where ONNX Runtime raised): that frame must fail, not publish an empty embedding."""
    if out.shape != (n, dim):
        raise EncoderError(f"{backend} returned shape {tuple(out.shape)} for {n} image(s); expected ({n}, {dim})")
    return out


def check_model_file(path: str | Path) -> Path:
    """The model path, or an EncoderError that says how to build a missing model."""
    p = Path(path)
    if not p.is_file():
        raise EncoderError(
            f"model file not found: {p} "
            "(build it with `openclaw-vision export` for FP32, `openclaw-vision quantize` for INT8)"
        )
    return p


@dataclass(frozen=True)
class ModelInfo:
    """What a model file says about itself: read from the ONNX metadata written at export/quantisation."""

    model_id: str
    precision: str
    image_size: int
    embed_dim: int
    metadata: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    max_batch: int = DEFAULT_MAX_BATCH  # the file's static batch dimension, else DEFAULT_MAX_BATCH
    path: Path | None = field(default=None, compare=False)  # the file it was read from (the gate's report is beside it)

    @classmethod
    def from_metadata(
        cls, meta: dict[str, str], path: str | Path, input_shape: Sequence[Dim], output_shape: Sequence[Dim]
    ) -> ModelInfo:
        """Metadata first, shapes as the fallback; a model that does not take (N, 3, S, S) pixels and
        give (N, D) rows is not an image encoder, and loading it stops here with what it is instead."""
        path = Path(path)
        if len(input_shape) != 4 or _static(input_shape[1]) not in (3, None) or len(output_shape) != 2:
            raise EncoderError(
                f"{path} is not an image encoder: input {list(input_shape)}, output {list(output_shape)}; "
                "expected pixels (N, 3, S, S) in and embeddings (N, D) out (an `openclaw-vision export` model)"
            )
        size = meta.get("image_size") or _static(input_shape[-1]) or 224
        dim = meta.get("embed_dim") or _static(output_shape[-1])
        if dim is None:
            raise EncoderError(f"{path}: embedding width unknown (no embed_dim metadata, dynamic output shape)")
        batch = _static(input_shape[0]) or DEFAULT_MAX_BATCH
        return cls(
            meta.get("model_id", path.stem), meta.get("precision", "fp32"), int(size), int(dim), dict(meta), batch, path
        )
