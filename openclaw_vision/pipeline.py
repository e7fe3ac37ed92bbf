"""FramePipeline: camera frames to unit embeddings, in one batch — the one path from image to vector.

    Frame | CompressedFrame ──[decode]──► Frame ──preprocess──► row k of one (n, 3, S, S) batch
                                                                            │
                                                          encoder.encode ◄──┘  ──► n unit rows

The encoder node, the tools (label, ask, bench, ladder) and the quantiser's calibration reader all
go through here, so a frame becomes the same tensor everywhere. The preprocessor is the encoder's
own when it declares one (`ImageEncoder.frame_preprocessor`: a GPU encoder's CUDA kernel writing
into its input buffer), else the CPU one. Frames in one batch may differ in size and encoding:
each is preprocessed alone into its row, and only the model runs on the batch.

`run` is the node's form: a frame that is not a valid image is rejected on its own (the others
of its batch are still encoded) and the stage times come back per frame. `encode` is the tools'
form: any number of frames, split into batches of `max_batch`, the first bad frame an error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .encoders.base import Embedding, FramePreprocessor, ImageEncoder
from .preprocess.compressed import CompressedFrame, ImageDecoder, create_decoder
from .preprocess.cpu import CpuPreprocessor
from .preprocess.encodings import FrameError
from .preprocess.frame import Frame
from .preprocess.spec import PreprocessSpec

AnyFrame = Frame | CompressedFrame


@dataclass
class BatchResult:
    """One batch: which input positions were encoded (row i of `vectors` is input `encoded[i]`),
    which were rejected and why, and where the time went."""

    vectors: np.ndarray
    model_id: str
    encoded: list[int] = field(default_factory=list)
    rejected: dict[int, FrameError] = field(default_factory=dict)
    decode_s: dict[int, float] = field(default_factory=dict)  # compressed inputs only
    preprocess_s: dict[int, float] = field(default_factory=dict)
    encode_s: float = 0.0  # the whole batch's model call: every frame in it waited for all of it


class FramePipeline:
    """An encoder plus its preprocessor (and a decoder for compressed frames)."""

    def __init__(
        self,
        encoder: ImageEncoder,
        max_batch: int = 0,
        decoder: ImageDecoder | None = None,
        preprocessor: FramePreprocessor | None = None,
    ) -> None:
        self.encoder = encoder
        self.preprocessor: FramePreprocessor = (
            preprocessor or encoder.frame_preprocessor() or CpuPreprocessor(PreprocessSpec(size=encoder.image_size))
        )
        limit = int(encoder.max_batch)
        if max_batch > limit:
            raise ValueError(f"max_batch {max_batch}: {encoder.backend} runs this model at most {limit} at a time")
        self.max_batch = max_batch or limit
        self.decoder = decoder or create_decoder()

    @property
    def model_id(self) -> str:
        return self.encoder.model_id

    def run(self, frames: Sequence[AnyFrame]) -> BatchResult:
        """Up to `max_batch` frames → one model call on those that are valid images.

        A FrameError (decode or preprocess) rejects that frame only; an error of the model call
        itself raises (the batch is lost as a whole and the caller counts it so)."""
        if not 0 < len(frames) <= self.max_batch:
            raise ValueError(f"a batch of {len(frames)} frames; this pipeline runs 1..{self.max_batch}")
        out = BatchResult(np.empty((0, self.encoder.embed_dim), np.float32), self.model_id)
        batch = self.preprocessor.buffer(len(frames))
        for i, frame in enumerate(frames):
            t0 = time.perf_counter()
            try:
                if isinstance(frame, CompressedFrame):
                    frame = frame.decode(self.decoder)
                    t = time.perf_counter()
                    out.decode_s[i] = t - t0
                    t0 = t
                self.preprocessor(frame, out=batch[len(out.encoded)])
            except FrameError as err:
                out.rejected[i] = err
                continue
            out.preprocess_s[i] = time.perf_counter() - t0
            out.encoded.append(i)
        if out.encoded:
            t0 = time.perf_counter()
            out.vectors = self.encoder.encode(batch[: len(out.encoded)]).vectors
            out.encode_s = time.perf_counter() - t0
        return out

    def encode(self, frames: AnyFrame | Sequence[AnyFrame]) -> Embedding:
        """One frame or a list → one unit row each, in order (batches of `max_batch`); the first
        frame that is not a valid image raises its FrameError."""
        items: list[Any] = [frames] if isinstance(frames, Frame | CompressedFrame) else list(frames)
        if not items:
            raise ValueError("no frames to encode")
        rows = []
        for start in range(0, len(items), self.max_batch):
            res = self.run(items[start : start + self.max_batch])
            if res.rejected:
                i, err = next(iter(res.rejected.items()))
                raise FrameError(f"frame {start + i}: {err}") from err
            rows.append(res.vectors)
        return Embedding(np.concatenate(rows), self.model_id)
