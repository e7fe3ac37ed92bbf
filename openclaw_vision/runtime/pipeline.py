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

Two stages, so a caller can overlap them: `prepare` (decode + preprocess every frame into its
row: the CPU's work) gives a `PreparedBatch`, and `encode_prepared` runs the model on it. `run`
is the two one after the other. With the CPU preprocessor, the frames of a batch of more than
one are prepared in parallel on a small pool of threads made once per pipeline (min(max_batch,
cores); cv2's decode and resize and numpy's arithmetic release the GIL), each into row k of its
own batch; with a preprocessor that writes into its encoder's input buffer (`concurrent` False:
the GPU one, one CUDA stream and one staging buffer) frames go one after another, and only one
batch may be prepared at a time — that buffer is the one the model reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.cpu import usable_cores
from ..encoders.base import Embedding, FramePreprocessor, ImageEncoder
from ..preprocess.compressed import CompressedFrame, ImageDecoder, create_decoder
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.encodings import FrameError
from ..preprocess.frame import Frame
from ..preprocess.spec import PreprocessSpec
from . import threads

AnyFrame = Frame | CompressedFrame

#: Thread names of a pipeline's preparation pool: prep_0, prep_1, ... (per-thread CPU reports tell them apart)
PREP_THREAD_PREFIX = "prep"


@dataclass
class PreparedBatch:
    """A batch decoded and preprocessed, ready for the model: `pixels` row i is input `encoded[i]`
    (the valid frames' rows, contiguous and in input order); `rejected` says why the others are not."""

    pixels: Any
    size: int  # frames given
    encoded: list[int] = field(default_factory=list)
    rejected: dict[int, FrameError] = field(default_factory=dict)
    decode_s: dict[int, float] = field(default_factory=dict)  # compressed inputs only
    preprocess_s: dict[int, float] = field(default_factory=dict)
    prepare_s: float = 0.0  # the whole batch's preparation, wall clock (frames in parallel overlap in it)


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
    prepare_s: float = 0.0  # PreparedBatch.prepare_s
    encode_s: float = 0.0  # the whole batch's model call: every frame in it waited for all of it


class FramePipeline:
    """An encoder plus its preprocessor (and a decoder for compressed frames)."""

    def __init__(
        self,
        encoder: ImageEncoder,
        max_batch: int = 0,
        decoder: ImageDecoder | None = None,
        preprocessor: FramePreprocessor | None = None,
        prep_threads: int | None = None,
    ) -> None:
        """`prep_threads`: frames of one batch prepared at once; None: min(max_batch, cores); 1: one
        after another. A preprocessor that is not `concurrent` always runs one frame at a time."""
        self.encoder = encoder
        self.preprocessor: FramePreprocessor = (
            preprocessor or encoder.frame_preprocessor() or CpuPreprocessor(PreprocessSpec(size=encoder.image_size))
        )
        limit = int(encoder.max_batch)
        if max_batch > limit:
            raise ValueError(f"max_batch {max_batch}: {encoder.backend} runs this model at most {limit} at a time")
        self.max_batch = max_batch or limit
        self.decoder = decoder or create_decoder()
        wanted = min(self.max_batch, usable_cores()) if prep_threads is None else max(1, prep_threads)
        self.prep_threads = min(wanted, self.max_batch) if self.concurrent else 1
        self._pool: ThreadPoolExecutor | None = None
        if self.prep_threads > 1:
            self._pool = ThreadPoolExecutor(
                self.prep_threads, thread_name_prefix=PREP_THREAD_PREFIX, initializer=threads.name_current_as_python
            )  # per-thread CPU: threads.py

    @property
    def model_id(self) -> str:
        return self.encoder.model_id

    @property
    def concurrent(self) -> bool:
        """Whether frames may be prepared on several threads and two batches be in flight at once:
        the preprocessor's calls are independent and `buffer` gives a new array each time (CPU). A
        preprocessor that says nothing is taken as not."""
        return bool(getattr(self.preprocessor, "concurrent", False))

    def close(self) -> None:
        """Stop the preparation threads (idempotent); the pipeline prepares one frame at a time after."""
        pool, self._pool, self.prep_threads = self._pool, None, 1
        if pool is not None:
            pool.shutdown(wait=True)

    def _prepare_one(self, frame: AnyFrame, row: Any) -> tuple[float | None, float]:
        """Decode (when compressed) and preprocess one frame into `row`: (decode s or None, preprocess s)."""
        t0 = time.perf_counter()
        decode_s = None
        if isinstance(frame, CompressedFrame):
            frame = frame.decode(self.decoder)
            t = time.perf_counter()
            decode_s, t0 = t - t0, t
        self.preprocessor(frame, out=row)
        return decode_s, time.perf_counter() - t0

    def _record(self, out: PreparedBatch, i: int, times: tuple[float | None, float] | FrameError) -> None:
        if isinstance(times, FrameError):
            out.rejected[i] = times
            return
        decode_s, preprocess_s = times
        if decode_s is not None:
            out.decode_s[i] = decode_s
        out.preprocess_s[i] = preprocess_s
        out.encoded.append(i)

    def _guarded(self, frame: AnyFrame, row: Any) -> tuple[float | None, float] | FrameError:
        try:
            return self._prepare_one(frame, row)
        except FrameError as err:
            return err

    def prepare(self, frames: Sequence[AnyFrame]) -> PreparedBatch:
        """Up to `max_batch` frames → their batch for the model. A FrameError (decode or preprocess)
        rejects that frame only; any other error raises (the batch is lost as a whole)."""
        if not 0 < len(frames) <= self.max_batch:
            raise ValueError(f"a batch of {len(frames)} frames; this pipeline runs 1..{self.max_batch}")
        t0 = time.perf_counter()
        batch = self.preprocessor.buffer(len(frames))
        out = PreparedBatch(batch, len(frames))
        pool = self._pool
        if pool is None or len(frames) == 1:
            for i, frame in enumerate(frames):  # the next valid frame's row: valid rows stay contiguous
                self._record(out, i, self._guarded(frame, batch[len(out.encoded)]))
        else:  # frame i into row i on the pool, then the valid rows moved up in order
            for i, times in enumerate(pool.map(self._guarded, frames, batch)):
                self._record(out, i, times)
            for row, i in enumerate(out.encoded):
                if row != i:
                    batch[row] = batch[i]
        out.pixels = batch[: len(out.encoded)]
        out.prepare_s = time.perf_counter() - t0
        return out

    def encode_prepared(self, prepared: PreparedBatch) -> BatchResult:
        """The model call on a prepared batch (none when every frame was rejected); its errors raise."""
        out = BatchResult(
            np.empty((0, self.encoder.embed_dim), np.float32),
            self.model_id,
            prepared.encoded,
            prepared.rejected,
            prepared.decode_s,
            prepared.preprocess_s,
            prepared.prepare_s,
        )
        if prepared.encoded:
            t0 = time.perf_counter()
            out.vectors = self.encoder.encode(prepared.pixels).vectors
            out.encode_s = time.perf_counter() - t0
        return out

    def run(self, frames: Sequence[AnyFrame]) -> BatchResult:
        """Up to `max_batch` frames → one model call on those that are valid images (`prepare`, then
        `encode_prepared`): the node's form, a bad frame rejected on its own, stage times per frame."""
        return self.encode_prepared(self.prepare(frames))

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
