"""What the encoder node's two stages do with a batch of camera frames (the scheduler, ros/scheduler.py,
decides when they run and on which thread):

    prepare: the frames taken from their slots (`queue` ends here) → FramePipeline.prepare ([decode] →
             preprocess into row k; the frames of a batch in parallel on the pipeline's prep_N threads)
    encode:  FramePipeline.encode_prepared (one model call for the batch) → each camera's VisualFeatures
             on its own topic, with its own image's header

Every frame of a batch is counted once, for its camera: encoded, rejected (not a valid image, found while
preparing it), or failed (an encode error fails every frame of its batch; a publish error, that frame).
Stage times per frame: `batch` (taken, until the model call starts, less its own decode and preprocess),
`decode`, `preprocess`, `encode` (the batch's one call), `publish`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..encoders import EncoderError
from ..runtime.pipeline import FramePipeline, PreparedBatch
from .convert import features_message
from .intake import Camera
from .node_counters import NodeCounters
from .types import Transport

log = logging.getLogger("encoder_node")


@dataclass
class TakenBatch:
    """A batch between the two stages: the slots' items, their cameras, when they were taken, and the
    prepared batch (or the error that stopped its preparation)."""

    batch: list[tuple[str, tuple]]
    cams: list[Camera]
    at: float
    prepared: PreparedBatch | None = None
    error: Exception | None = None
    settled: set[int] = field(default_factory=set)  # indexes of the frames already counted

    @property
    def rows(self) -> int:
        """The frames the model call runs (those not rejected while preparing)."""
        return len(self.prepared.encoded) if self.prepared else 0

    @property
    def prepare_s(self) -> float | None:
        return self.prepared.prepare_s if self.prepared else None

    def unsettled(self) -> list[int]:
        """The frames not yet counted (a batch ended by an unexpected exception: each counts as failed)."""
        return [i for i in range(len(self.batch)) if i not in self.settled]


class BatchStages:
    """The node's `prepare`, `encode` and `failed` for scheduler.BatchScheduler, over its cameras."""

    def __init__(self, pipeline: FramePipeline, cameras: dict[str, Camera], transport: Transport,
                 node_counters: NodeCounters) -> None:  # fmt: skip
        self.pipeline, self.cameras, self.transport = pipeline, cameras, transport
        self.node_counters = node_counters

    def prepare(self, batch: list[tuple[str, tuple]]) -> TakenBatch:
        """Stage one: the frames taken from their slots, decoded and preprocessed (`queue` ends here).
        Whatever goes wrong here is the batch's error (its frames then count as failed), never lost frames."""
        taken = TakenBatch(batch, [self.cameras[key] for key, _ in batch], time.perf_counter())
        try:
            for cam, (_, (_, _, queued_at)) in zip(taken.cams, batch, strict=True):
                cam.time("queue", taken.at - queued_at)  # waiting in its slot for the worker
            taken.prepared = self.pipeline.prepare([frame for _, (frame, _, _) in batch])
        except Exception as err:  # not a bad frame (that is a FrameError, rejected alone): the batch fails
            taken.error = err
        return taken

    def encode_and_publish(self, taken: TakenBatch) -> float | None:
        """Stage two: the model call on a prepared batch, then each frame's features published; the call's
        seconds (None when none ran)."""
        if taken.prepared is None:
            self._fail_batch(taken, taken.error or RuntimeError("batch not prepared"))
            return None
        batch, cams, prep = taken.batch, taken.cams, taken.prepared
        started = time.perf_counter()
        try:
            res = self.pipeline.encode_prepared(prep)
        except Exception as err:  # keep serving frames; the counters, log and diagnostics make it visible
            self._fail_batch(taken, err)
            return None
        for i, err in res.rejected.items():
            taken.settled.add(i)
            cams[i].reject(err)
        own = {i: res.decode_s.get(i, 0.0) + res.preprocess_s[i] for i in res.encoded}
        for row, i in enumerate(res.encoded):
            cam, header = cams[i], batch[i][1][1]
            t0 = time.perf_counter()
            try:
                cam.features.publish(features_message(self.transport, header, res.model_id, res.vectors[row]))
            except Exception as err:
                taken.settled.add(i)
                self.node_counters.fail([cam], repr(err))
                self.node_counters.warn_fail(log.error, "publishing features of %s failed: %r", cam.spec.topic, err)
                continue
            cam.time("publish", time.perf_counter() - t0)
            cam.time("batch", started - taken.at - own[i])
            if i in res.decode_s:
                cam.time("decode", res.decode_s[i])
            cam.time("preprocess", res.preprocess_s[i])
            cam.time("encode", res.encode_s)
            taken.settled.add(i)
            cam.count("encoded")
        return res.encode_s

    def failed(self, taken: TakenBatch, err: Exception) -> None:
        """Stage two ended by an unexpected exception (a bug, not an encode or publish error: those are
        counted where they happen): every frame it left uncounted counts as failed."""
        self.node_counters.fail([taken.cams[i] for i in taken.unsettled()], f"{type(err).__name__}: {err}")

    def dropped(self, taken: TakenBatch) -> None:
        """A batch prepared but never encoded (the node stopped): its frames are dropped."""
        for i in taken.unsettled():
            taken.settled.add(i)
            taken.cams[i].count("dropped")

    def _fail_batch(self, taken: TakenBatch, err: Exception) -> None:
        reason = str(err) if isinstance(err, EncoderError) else repr(err)
        unsettled = taken.unsettled()
        taken.settled.update(unsettled)
        self.node_counters.fail([taken.cams[i] for i in unsettled], reason)
        self.node_counters.warn_fail(log.error, "encoding a frame failed (a batch of %d, each counted): %s",
                                     len(taken.batch), reason)  # fmt: skip
