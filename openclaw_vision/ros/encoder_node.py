"""The encoder node: sensor_msgs/Image from one or many cameras in, VisualFeatures out, newest frame first.

Threads and data flow, one direction:

    transport threads: take sample → validate into a Frame → that camera's newest-frame slot
                       (a displaced frame: dropped, counted for its camera)
    prepare stage:     the newest frame of every camera that has one (at most max_batch, round
                       robin: stats.LatestSlots) → FramePipeline.prepare ([decode] → preprocess into
                       row k; the frames of a batch in parallel on the pipeline's prep_N threads)
    encode stage:      FramePipeline.encode_prepared (one encode for the batch) → each camera's
                       VisualFeatures on its own topic, with its own image's header
    diagnostics:       every `diagnostics_period` s, totals and per-camera counters and stage
                       percentiles on /diagnostics

The worker thread runs both stages, one batch after the other; where the runtime answers calls at
once (ONNX Runtime), one such worker (a lane) per core runs its own batches beside the others, a camera
in one lane's batch at a time (`lanes_for`, scheduler.py). Where it pays (`overlaps`: the
encode leaves this host's cores free, e.g. triton) the two stages overlap instead: an
encoder-prepare thread prepares batch k+1 while the worker encodes batch k. The hand-off between
them holds no queue: the prepare thread takes the next frames only once the worker has taken the
previous batch, and not before the running encode is due to end less one preparation's time (both
the last measured), so a frame waits in its slot — where a newer one from its camera displaces
it — and not in a batch. Not overlapped: beside an in-process CPU runtime (it runs a thread per
core; overlap measured slower, see `overlaps`), and with a preprocessor that writes into the
encoder's own input buffer (a GPU encoder's CUDA kernel: `FramePipeline.concurrent` is False),
where a second batch in flight would overwrite the one being encoded.

Cameras: `image_topic` (one camera, features on `features_topic`, as before) or `image_topics`
(N cameras in one node and one model session; camera k's features on `features_pattern` with
{camera} = its topic's namespace, e.g. /front/image_raw → /front/visual_features). A topic in
`image_topics` ending in /compressed is read as CompressedImage; the others by `image_transport`.

Stages per frame: `queue` (in its slot until the prepare stage takes it), `batch` (taken, until
the model call starts, less its own decode and preprocess: waiting for the other frames of its
batch to be prepared, and for the worker to finish the previous batch), `decode`, `preprocess`,
`encode` (the batch's one model call), `publish`. In the order listed they add up to the frame's
time in the node, `publish` aside (frames of a batch publish one after another). The node never
waits for a camera to fill a batch: it runs what is there, so a batch costs no latency that a
single frame would not.

Frames that never arrive (`lost`, and `missing_estimate` from the stamps' gaps): see ros/node_counters.py.

Every frame that arrives is counted exactly once, for its camera and in the totals, as encoded,
dropped (a newer one from the same camera arrived before the worker took it), rejected (bytes
that are not a valid image; logged) or failed (an unexpected error in encode/publish; logged —
an encode error fails every frame of its batch). The node keeps running through all of them,
and one camera's bad frames move only that camera's counters.

`reconfigure` changes the run-time parameters (config.Param.runtime) while the node runs:
`ros2 param set` with rclpy, a direct call on any transport.

Where each part lives: the cameras, their counts and the transport threads' intake in ros/intake.py;
the two stages' scheduling (one thread or two, the hand-off, its timing estimates) in ros/scheduler.py,
transport-free; what the stages do with a batch in ros/batch_stages.py; totals, health and /diagnostics
in ros/node_counters.py. This module wires them to the transport: subscriptions, publishers,
run-time parameters, start and stop.

`image_transport: compressed` subscribes to sensor_msgs/CompressedImage on `<image_topic>/compressed`
(ros/intake.py); the transport thread checks format and signature only, and the worker decodes (the
`decode` stage), so a frame dropped by the newest-frame policy costs no decode.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from ..core import heap
from ..core.cpu import usable_cores
from ..core.resources import default_model_path
from ..encoders import EncoderError, EncoderOptions, ImageEncoder, backends, create_encoder
from ..models.naming import projected_name
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.pipeline import FramePipeline
from ..runtime.stats import Counters
from . import dds_config
from .batch_stages import BatchStages, TakenBatch
from .intake import COUNTS, Camera, Intake, camera_specs
from .node_counters import NODE_NAME, STATUS_NAME, UNSEEN, NodeCounters
from .runner import every, node_main
from .scheduler import WORKER_NICE, BatchScheduler
from .types import DEFAULT, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger(NODE_NAME)
#: every node module names its /diagnostics status as STATUS_NAME (bench/soak reads the four nodes' alike)
__all__ = ["STATUS_NAME", "EncoderNode", "main"]

#: how long stop() waits for the node's threads in all: an encode in flight finishes within it; one that does
#: not return (a runtime hung in a native call) is left behind, and the runner exits without it
STOP_JOIN_S = 10.0


class EncoderNode:
    """The node's parts wired to a transport: Intake (subscriptions in), BatchScheduler running BatchStages
    (features out), NodeCounters (stats and /diagnostics); start, stop and run-time parameters here."""

    def __init__(self, cfg: cfgmod.EncoderConfig, transport: Transport, encoder: ImageEncoder,
                 overlap: bool | None = None) -> None:  # fmt: skip
        """`overlap`: prepare batch k+1 while batch k encodes; None: where it pays (`overlaps`)."""
        self.cfg, self.transport, self.encoder = cfg, transport, encoder
        self.pipeline = FramePipeline(encoder, max_batch=cfg.max_batch, prep_threads=cfg.prep_threads or None)
        self._stop = threading.Event()
        self.supervisor = threads.Supervisor(self._stop, log)
        self.watchdog = threads.Watchdog(cfg.watchdog_period)
        self._reconfigure_lock = threading.Lock()
        self.intake = Intake(camera_specs(cfg), cfg.log_throttle_period, cfg.held_samples, cfg.reader_samples)
        self.cameras, self._slots = self.intake.cameras, self.intake.slots
        for cam in self.cameras.values():
            cam.features = transport.publisher(cam.spec.features_topic, VISUAL_FEATURES, DEFAULT)
        self.node_counters = NodeCounters(self.intake, encoder, self.pipeline.max_batch, transport,
                                          self.supervisor, self.watchdog, cfg.log_throttle_period)  # fmt: skip
        self._warn_fail = self.node_counters.warn_fail
        for cam in self.cameras.values():
            cam.images = self._subscribe_images(cam)
        self.overlap = overlaps(self.pipeline) if overlap is None else overlap and self.pipeline.concurrent
        # the batches encoded at once: as many as the encoder took (its `lanes`: encoder_node.lanes_for says how
        # many the node asks for), each of up to its share of the cameras
        self.lanes = 1 if self.overlap or not self.pipeline.concurrent else max(1, getattr(encoder, "lanes", 1))
        lane_batch = min(self.pipeline.max_batch, -(-len(self.cameras) // self.lanes))
        self.stages = BatchStages(self.pipeline, self.cameras, transport, self.node_counters)
        # stage two through `_encode_and_publish`, looked up per batch: the node's seam (a test injects a fault there)
        self.scheduler: BatchScheduler[TakenBatch] = BatchScheduler(
            self.intake, lane_batch if self.lanes > 1 else self.pipeline.max_batch, self.stages.prepare,
            lambda t: self._encode_and_publish(t), self.stages.failed, self.supervisor, self.overlap,
            self.lanes)  # fmt: skip
        self._reporter = self.supervisor.thread("diagnostics", self._report)

    # what the transport threads and the worker call ---------------------------------------
    def _on_image(self, cam: Camera, msg: Any, deserialize_s: float) -> None:
        """A sample from `cam`'s subscription (its callback looks this up per sample: a test holds it here)."""
        self.intake.on_image(cam, msg, deserialize_s)

    def _encode_and_publish(self, taken: TakenBatch) -> float | None:
        """Stage two of a batch (BatchStages.encode_and_publish), the scheduler's `encode`."""
        return self.stages.encode_and_publish(taken)

    def _encode_batch(self, batch: list[tuple[str, tuple]]) -> None:
        """One batch, both stages, on the calling thread."""
        self.scheduler.run_batch(batch)

    # counts and diagnostics ---------------------------------------------------------------
    @property
    def counters(self) -> Counters:
        """The totals over every camera (a snapshot-only view: counts are kept per camera)."""
        return self.node_counters.totals

    @property
    def last_failure(self) -> str:
        """The reason of the latest failed frame (/diagnostics)."""
        return self.node_counters.last_failure

    def stats(self) -> dict[str, Any]:
        """Totals at the top level (as for one camera), each camera's own under `cameras`."""
        return self.node_counters.stats()

    def stats_between_frames(self) -> dict[str, Any]:
        """`stats()` while no frame is in the intake (Intake.between_frames). Two of these bound a window in
        which every received frame is accounted (bench.dropcost)."""
        with self.intake.between_frames():
            return self.stats()

    def diagnostics_values(self, st: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.node_counters.diagnostics_values(st)

    def health(self, st: dict[str, Any]) -> str:
        """Why the node is not working ('' when it is): see NodeCounters.health."""
        return self.node_counters.health(st)

    def publish_diagnostics(self) -> None:
        self.node_counters.publish_diagnostics()

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    # run-time parameters ----------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.EncoderConfig:
        """Apply run-time parameter changes; a ConfigError (bad value, read-only key) changes nothing."""
        with self._reconfigure_lock:
            old, new = self.cfg, self.cfg.updated(changes)
            self.cfg = new  # diagnostics_period: the reporter reads it before each wait
            self.watchdog.period = new.watchdog_period
            for throttle in (self._warn_fail, *(c.warn_reject for c in self.cameras.values())):
                throttle.period = new.log_throttle_period
            if (new.reliability, new.depth) != (old.reliability, old.depth):
                for cam in self.cameras.values():
                    self._resubscribe(cam)
            log.info("parameters changed: %s", ", ".join(f"{k}={v!r}" for k, v in changes.items()))
            return new

    def _resubscribe(self, cam: Camera) -> None:
        """A QoS change takes a new subscription (QoS is fixed at creation). Frames sent while
        neither exists are not received (nor counted): what any subscriber restart does."""
        self.intake.stop_holding([cam])  # what the old subscription held is this camera's: counted before it goes
        cam.lost_before = cam.lost()
        cam.images.close()
        cam.images = self._subscribe_images(cam)

    def _subscribe_images(self, cam: Camera):
        """A camera's image subscription as `self.cfg` asks for it (at start, and again after a QoS change);
        its callback looks `_on_image` up per sample; it holds samples while the camera's slot is full."""
        cam.images = self.transport.subscribe(
            cam.spec.input_topic,
            cam.spec.input_type,
            QoS(self.cfg.reliability, self.cfg.depth),
            lambda msg, deserialize_s: self._on_image(cam, msg, deserialize_s),
        )
        self.intake.hold_samples(cam)
        return cam.images

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> EncoderNode:
        dds_config.check_receive_buffer()  # one warning line with the fix: frames lost there are never reported
        if heap.keep_freed_frames(self.cfg.frame_heap_mb):
            log.info("frame buffers: heap blocks, up to %d MB of freed ones kept (frame_heap_mb)",
                     self.cfg.frame_heap_mb)  # fmt: skip
        self.scheduler.start()  # the worker stages, at scheduler.WORKER_NICE
        self._reporter.start()
        for cam in self.cameras.values():
            log.info("camera %s (%s) [%s] -> %s [reliable]", cam.spec.input_topic, cam.spec.input_type,
                     self.cfg.reliability, cam.spec.features_topic)  # fmt: skip
        log.info(
            "ready: %d camera(s), batches of up to %d (%s), model %s, backend %s/%s, transport %s",
            len(self.cameras),
            self.pipeline.max_batch,
            f"prepared on {self.pipeline.prep_threads} thread(s)"
            + (", overlapped with the encode" if self.overlap else ", then encoded")
            + (f", {self.lanes} batches at once" if self.lanes > 1 else ""),
            self.encoder.model_id,
            self.encoder.backend,
            self.encoder.precision,
            self.transport.name,
        )
        return self

    def stop(self) -> None:
        self._stop.set()
        self.intake.close()  # frames after this are not the node's: the final counts below are complete
        deadline = time.monotonic() + STOP_JOIN_S
        self.scheduler.stop(STOP_JOIN_S)  # the worker stages first, then the reporter
        late = self.supervisor.join(timeout=max(0.0, deadline - time.monotonic()))
        for taken in self.scheduler.unfinished():  # prepared, never encoded (the encode thread was restarting)
            self.stages.dropped(taken)
        if late:  # a call that does not return: its pipeline and encoder stay as they are (the runner leaves)
            log.warning("thread(s) %s still in a call at stop: not waited for", ", ".join(late))
            return
        self.pipeline.close()
        try:
            self.publish_diagnostics()  # a last, complete count for whoever is listening
        except Exception:
            log.exception("final diagnostics failed")
        getattr(self.encoder, "close", lambda: None)()  # e.g. triton's shared-memory region


#: malloc arenas in the encoder node's process (issue 38). Measured under rclpy (the shared Humble, ONNX Runtime
#: INT8, raw 1080p at 30 fps per camera, frame_heap_mb 64, two rounds in alternating order): with glibc's own
#: limit a 4-camera node peaked at 518-550 MB and a 1-camera node at 384, with one arena at 455-460 and 350
#: (the ratio 1.43x -> 1.31x), and the 4-camera node encoded 33.5 and 34.6 frames/s against 33.8 and 31.8.
#: With one arena, keeping freed frames (frame_heap_mb) no longer costs memory on the pip path either
#: (docs/cameras-and-capacity.md).
MALLOC_ARENAS = 1


def share_malloc_arenas() -> None:
    """The encoder node's process shares MALLOC_ARENAS malloc arenas (core/heap.py `share_arenas` says why);
    first thing in its main, before the transport and the runtime start their threads."""
    heap.share_arenas(MALLOC_ARENAS)


def overlaps(pipeline: FramePipeline) -> bool:
    """Whether the node prepares batch k+1 while batch k encodes: when two batches may be in flight
    (`FramePipeline.concurrent`: not a GPU preprocessor writing the encoder's input) and the encode
    leaves this host's cores free (a backend that is not a CPU runtime: triton's server).

    Not beside an in-process CPU runtime: it already runs a thread per core, so the two stages only
    share the cores. Measured on 2 cores (4 cameras at 30 fps, 1080p, OpenVINO INT8, one run, both
    with parallel preparation): frames/s with overlap over without 0.97x (JPEG) and 0.99x (raw
    rgb8), stamp→features P50 1.38x and 1.17x — the encode itself slowed (JPEG, a batch of 4:
    78-89 → 107-124 ms P50) while the preparation beside it took the cores."""
    try:
        on_this_cpu = backends.get(pipeline.encoder.backend).cpu_runtime
    except KeyError:  # not a backend of the table (a wrapper, a test's): as today, no overlap
        on_this_cpu = True
    return pipeline.concurrent and not on_this_cpu


def lanes_for(cfg: cfgmod.EncoderConfig, cameras: int) -> int:
    """The batches the node asks its encoder to take at once (EncoderOptions.encode_lanes): `encode_lanes`, or
    (0) one per usable core; never more than one per camera, since a camera is in one batch at a time
    (scheduler.py), so a further lane would only take its share of the threads and never run. A runtime that
    answers one call at a time (OpenVINO's one request, a GPU engine) takes one whatever is asked.

    Why one per core (issue 38; `python -m openclaw_vision.bench.schedule`, docs/cameras-and-capacity.md): on an
    AVX2-only EPYC with 2 cores, ONNX Runtime INT8, one 4-camera node at 30 fps 1080p per camera, two rounds, two
    lanes of one thread encoded 9.8 frames/s (raw) and 14.4 (JPEG) against 8.0 and 12.4 for one lane of two
    threads. One ONNX Runtime session with spinning off (core/ortsession.py) leaves its threads idle between
    parallel sections; two calls on a thread each have none."""
    return max(1, min(cfg.encode_lanes or usable_cores(), cameras))


def _build(cfg: cfgmod.EncoderConfig, transport: Transport) -> EncoderNode:
    specs = camera_specs(cfg)  # a camera set that cannot work stops here, before a model is loaded
    model_path = cfg.model_path or str(default_model_path(projected_name(cfg.model, cfg.output_dim), cfg.precision))
    # the runtime's pool, made here, does the encode's work: it waits for the CPU as the encode stage does
    # (scheduler.WORKER_NICE says why and what it measured)
    with threads.lower_threads_started(WORKER_NICE):
        encoder = create_encoder(cfg.backend, model_path, options=encoder_options(cfg, lanes_for(cfg, len(specs))))
    return EncoderNode(cfg, transport, encoder)


def encoder_options(cfg: cfgmod.EncoderConfig, lanes: int = 1) -> EncoderOptions:
    """The backend options of a node's configuration (the keys of EncoderOptions' fields), `lanes` batches at once."""
    keys = EncoderOptions.__dataclass_fields__
    values = {k: v for k, v in cfg.as_dict().items() if k in keys}
    return EncoderOptions(**{**values, "encode_lanes": lanes})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    share_malloc_arenas()
    return node_main(argv, "openclaw-vision encoder", NODE_NAME, cfgmod.EncoderConfig, "encoder.yaml",
                     (*COUNTS, *UNSEEN), _build, (EncoderError, cfgmod.ConfigError, ValueError), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
