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

The worker thread runs both stages, one batch after the other. Where it pays (`overlaps`: the
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

Frames that never arrive: `lost` is what the reader's sample-lost status reports (Cyclone's; on
Humble/rclpy nothing for a best-effort reader), so a frame lost in the socket buffer, overwritten in
the reader's history or published before the reader matched is in no count. `missing_estimate` is
an estimate of those, per camera, from the gaps between the header stamps that did arrive
(stats.StampGaps: a gap of k camera periods means k - 1 frames missing); frames missing before the
first that arrived or after the last are not in it.

Every frame that arrives is counted exactly once, for its camera and in the totals, as encoded,
dropped (a newer one from the same camera arrived before the worker took it), rejected (bytes
that are not a valid image; logged) or failed (an unexpected error in encode/publish; logged —
an encode error fails every frame of its batch). The node keeps running through all of them,
and one camera's bad frames move only that camera's counters.

`reconfigure` changes the run-time parameters (config.Param.runtime) while the node runs:
`ros2 param set` with rclpy, a direct call on any transport.

`image_transport: compressed` subscribes to sensor_msgs/CompressedImage on `<image_topic>/compressed`
(image_transport's name for its `compressed` plugin: SimpleSubscriberPlugin::getTopicToSubscribe
is `base_topic + "/" + transport name`, ros-perception/image_common humble). The transport thread
checks format and signature only; the worker decodes (the `decode` stage), so a frame dropped by
the newest-frame policy costs no decode. A frame that fails either check is rejected.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import config as cfgmod
from .. import threads
from ..bags import COMPRESSED_SUFFIX
from ..build import projected_name
from ..encoders import EncoderError, EncoderOptions, ImageEncoder, backends, create_encoder
from ..pipeline import FramePipeline, PreparedBatch
from ..preprocess.encodings import FrameError
from ..resources import default_model_path
from ..stats import Counters, LatestSlots, StageTimes, StampGaps
from . import dds_config
from .convert import compressed_to_frame, features_message, image_to_frame
from .diagnostics import ERROR, OK, WARN, diagnostic_array, stage_values
from .runner import every, node_main
from .subscription import Throttle
from .types import COMPRESSED_IMAGE, DEFAULT, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("encoder_node")

NODE_NAME = "encoder_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
CAMERA_STATUS = f"{NODE_NAME}: camera {{topic}}"  # one more DiagnosticStatus per camera
STAGES = ("deserialize", "queue", "batch", "decode", "preprocess", "encode", "publish")
COUNTS = ("received", "encoded", "dropped", "rejected", "failed")
#: The worker threads' niceness above the process's (the prepare and encode stages; threads they start,
#: such as the prepare pool and OpenVINO's streams, inherit it). On a machine with no core to spare, what
#: waits for the CPU should be the encode: a frame the worker is late for is dropped by its newest-frame
#: slot, and counted, while one that the DDS receive threads or the transport thread are late for is lost
#: unseen (a socket buffer overflowing, a reader history overwritten). Measured (README, "Frames DDS can
#: lose without telling"): `ros2 bag play` of 60 1080p frames at 30 fps into the rclpy node, 2 cores,
#: depth 32: at +10 the node received 57-60 of 60 in 10 of 10 runs, without it 52-60 (2 of 8 runs below
#: 57, the socket overflowing); the price is fewer frames encoded at saturation (mean 46.9 against 50.0
#: of 60). A runtime pool made at load (ONNX Runtime's threads, OpenVINO's latency model) keeps the
#: process's niceness.
WORKER_NICE = 10
#: how long stop() waits for the worker threads in all: an encode in flight finishes within it; one that does
#: not return (a runtime hung in a native call) is left behind, and the runner exits without it
STOP_JOIN_S = 10.0
#: how often a stage waiting for the other looks at the node's stop
HANDOFF_POLL_S = 0.2
#: frames that never reached the node: reported by the reader (`lost`), estimated from stamp gaps
UNSEEN = ("lost", "missing_estimate")


@dataclass(frozen=True)
class CameraSpec:
    """One camera as configured: the stats key (the image topic as given), what to subscribe, where to publish."""

    topic: str
    input_topic: str
    input_type: str
    features_topic: str


def camera_namespace(topic: str) -> str:
    """'/robot/front/image_raw' → '/robot/front'; a topic with one name is its own namespace."""
    ns = topic.rstrip("/").rsplit("/", 1)[0]
    return ns or topic.rstrip("/")


def camera_features_topic(image_topic: str, pattern: str) -> str:
    """Where a node with `image_topics` publishes the features of one camera: `pattern` (features_pattern)
    with {camera} = the image topic's namespace and {topic} = the image topic, its `/compressed` dropped
    (/front/image_raw/compressed → /front/visual_features). The replay finds a node's topic by it too."""
    base = image_topic.removesuffix(COMPRESSED_SUFFIX)
    return pattern.format(camera=camera_namespace(base), topic=base.rstrip("/"))


def camera_specs(cfg: cfgmod.EncoderConfig) -> list[CameraSpec]:
    """The cameras `cfg` asks for; a ConfigError when two would publish on one features topic."""
    if not cfg.image_topics:
        topic, kind = image_subscription(cfg)
        return [CameraSpec(cfg.image_topic, topic, kind, cfg.features_topic)]
    specs = []
    for t in cfg.image_topics:
        if t.endswith(COMPRESSED_SUFFIX):
            topic, kind = t, COMPRESSED_IMAGE
        else:
            topic, kind = image_subscription(cfgmod.replace(cfg, image_topic=t, image_topics=()))
        specs.append(CameraSpec(t, topic, kind, camera_features_topic(t, cfg.features_pattern)))
    seen: dict[str, str] = {s.input_topic: s.topic for s in specs}
    for s in specs:
        if s.features_topic in seen:
            raise cfgmod.ConfigError(
                f"parameter features_pattern={cfg.features_pattern!r}: {s.topic}'s features topic "
                f"{s.features_topic} is already {seen[s.features_topic]}'s"
            )
        seen[s.features_topic] = s.topic
    return specs


@dataclass
class Camera:
    """One camera's state in the node: its subscription and publisher, counters and stage times."""

    spec: CameraSpec
    to_frame: Callable[[Any], Any]
    warn_reject: Throttle
    counters: Counters = field(default_factory=lambda: Counters(COUNTS))
    times: StageTimes = field(default_factory=lambda: StageTimes(STAGES))
    features: Any = None
    images: Any = None
    lost_before: int = 0  # samples lost by image subscriptions replaced since start
    gaps: StampGaps = field(default_factory=StampGaps)  # frames estimated missing before the node

    def lost(self) -> int:
        return self.lost_before + getattr(self.images, "lost", lambda: 0)()


@dataclass
class _Taken:
    """A batch between the worker's two stages: the slots' items, their cameras, when they were
    taken, and the prepared batch (or the error that stopped its preparation)."""

    batch: list[tuple[str, tuple]]
    cams: list[Camera]
    at: float
    prepared: PreparedBatch | None = None
    error: Exception | None = None
    settled: set[int] = field(default_factory=set)  # indexes of the frames already counted

    def unsettled(self) -> list[int]:
        """The frames not yet counted (a batch ended by an unexpected exception: each counts as failed)."""
        return [i for i in range(len(self.batch)) if i not in self.settled]


class EncoderNode:
    def __init__(self, cfg: cfgmod.EncoderConfig, transport: Transport, encoder: ImageEncoder,
                 overlap: bool | None = None) -> None:  # fmt: skip
        """`overlap`: prepare batch k+1 while batch k encodes; None: where it pays (`overlaps`)."""
        self.cfg = cfg
        self.transport = transport
        self.encoder = encoder
        self.pipeline = FramePipeline(encoder, max_batch=cfg.max_batch)
        self.times = StageTimes(STAGES)  # every camera's frames: the totals' percentiles
        self._stop = threading.Event()
        # A frame is classified whole either before stop() or not taken at all, so the final counts add up.
        self._intake = threading.Lock()
        self._accepting = True
        self._warn_fail = Throttle(cfg.log_throttle_period)
        self.last_failure = ""  # the reason of the latest failed frame (/diagnostics)
        self.supervisor = threads.Supervisor(self._stop, log)
        self.watchdog = threads.Watchdog(cfg.watchdog_period)
        self._reconfigure_lock = threading.Lock()
        self.cameras = {
            spec.topic: Camera(
                spec,
                compressed_to_frame if spec.input_type == COMPRESSED_IMAGE else image_to_frame,
                Throttle(cfg.log_throttle_period),
            )
            for spec in camera_specs(cfg)
        }
        self._slots = LatestSlots(self.cameras)
        for cam in self.cameras.values():
            cam.features = transport.publisher(cam.spec.features_topic, VISUAL_FEATURES, DEFAULT)
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        for cam in self.cameras.values():
            cam.images = self._subscribe_images(cam)
        # the worker: two stages on two threads, or one thread doing both (see `overlaps`)
        self.overlap = overlaps(self.pipeline) if overlap is None else overlap and self.pipeline.concurrent
        self._handoff: queue.Queue[_Taken] = queue.Queue(maxsize=1)
        self._encoder_idle = threading.Event()
        self._encode_ends = 0.0  # when the running encode is due to end (0: none running)
        self._encode_estimate: dict[int, float] = {}  # the last encode's seconds, by batch size
        self._prepare_estimate = 0.0  # the last preparation's seconds
        sv = self.supervisor
        self._workers = (
            [sv.thread("encoder-prepare", self._prepare_work), sv.thread("encoder-worker", self._encode_work)]
            if self.overlap
            else [sv.thread("encoder-worker", self._work)]
        )
        sv.thread("diagnostics", self._report)

    @property
    def counters(self) -> Counters:
        """The totals over every camera (a snapshot-only view: counts are kept per camera)."""
        total = Counters(COUNTS)
        for cam in self.cameras.values():
            for k, v in cam.counters.snapshot().items():
                total.inc(k, v)
        return total

    def _count(self, cam: Camera, what: str) -> None:
        cam.counters.inc(what)

    def _time(self, cam: Camera, stage: str, seconds: float) -> None:
        cam.times.add(stage, seconds)
        self.times.add(stage, seconds)

    # transport threads ------------------------------------------------------------------
    def _on_image(self, cam: Camera, msg: Any, deserialize_s: float) -> None:
        with self._intake:
            if self._accepting:
                self._take_in(cam, msg, deserialize_s)

    def _take_in(self, cam: Camera, msg: Any, deserialize_s: float) -> None:
        self._count(cam, "received")
        cam.gaps.add(stamp_ns(msg))  # before any check: a rejected frame still arrived
        t0 = time.perf_counter()
        try:
            frame = cam.to_frame(msg)
        except FrameError as err:
            self._reject(cam, err)
            return
        self._time(cam, "deserialize", deserialize_s + time.perf_counter() - t0)
        if self._slots.put(cam.spec.topic, (frame, msg.header, time.perf_counter())):
            self._count(cam, "dropped")

    def _reject(self, cam: Camera, err: FrameError) -> None:
        self._count(cam, "rejected")
        cam.warn_reject(log.warning, "rejected image on %s: %s", cam.spec.input_topic, err)

    # worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        """No overlap: take, prepare, encode, publish, one batch after the other."""
        while not self._stop.is_set():
            batch = self._slots.take(self.pipeline.max_batch, timeout=0.2)
            if batch:
                self._encode_batch(batch)

    def _prepare_work(self) -> None:
        """Overlap, first stage: batch k+1 is taken and prepared while the encode thread runs batch k.

        It takes from the slots only when the encode thread has taken the previous batch (the
        hand-off is a rendezvous: one batch encoding, at most one being prepared, never a queue),
        and not before the running encode is due to end less the time a preparation takes: frames
        stay in their slots until then, where a newer frame of the camera still displaces them.

        Neither stage waits for the other without also watching the stop: a stage that failed (and
        waits out its backoff, or was given up) never holds the other, or the node's stop."""
        while not self._stop.is_set():
            wait = self._encode_ends - self._prepare_estimate - time.perf_counter()
            if wait > 0:
                self._encoder_idle.wait(wait)  # set when that encode ends early, or the node stops
                continue
            batch = self._slots.take(self.pipeline.max_batch, timeout=0.2)
            if not batch:
                continue
            self._handoff.put(self._prepare_batch(batch))
            with self._handoff.all_tasks_done:  # until the encode thread has it: then the next may be taken
                while self._handoff.unfinished_tasks and not self._stop.is_set():
                    self._handoff.all_tasks_done.wait(HANDOFF_POLL_S)

    def _encode_work(self) -> None:
        """Overlap, second stage: encode and publish each prepared batch; what was handed over before the
        stop is still encoded. The hand-off is marked done whatever happens to the batch, so the prepare
        thread never waits for an encode thread that failed (the supervisor then runs this loop again)."""
        while True:
            try:
                taken = self._handoff.get(timeout=HANDOFF_POLL_S)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            try:
                n = len(taken.prepared.encoded) if taken.prepared else 0
                self._encoder_idle.clear()
                self._encode_ends = time.perf_counter() + self._encode_estimate.get(n, 0.0)  # before the hand-off ends
            finally:
                self._handoff.task_done()
            try:
                self._finish_batch(taken)
            finally:
                self._encode_ends = 0.0
                self._encoder_idle.set()

    def _encode_batch(self, batch: list[tuple[str, tuple]]) -> None:
        """One batch, both stages here: at most one frame per camera, each published on its camera's topic."""
        self._finish_batch(self._prepare_batch(batch))

    def _finish_batch(self, taken: _Taken) -> None:
        """Stage two, every frame of the batch counted: one that an unexpected exception (a bug, not an
        encode or publish error: those are counted where they happen) left uncounted counts as failed,
        and the exception goes on to the supervisor, which logs it and runs the loop again."""
        try:
            self._encode_and_publish(taken)
        except Exception as err:
            self.last_failure = f"{type(err).__name__}: {err}"
            for i in taken.unsettled():
                self._count(taken.cams[i], "failed")
            raise

    def _prepare_batch(self, batch: list[tuple[str, tuple]]) -> _Taken:
        """Stage one: the frames taken from their slots, decoded and preprocessed (`queue` ends here).
        Whatever goes wrong here is the batch's error (its frames then count as failed), never lost frames."""
        taken = _Taken(batch, [self.cameras[key] for key, _ in batch], time.perf_counter())
        try:
            for cam, (_, (_, _, queued_at)) in zip(taken.cams, batch, strict=True):
                self._time(cam, "queue", taken.at - queued_at)  # waiting in its slot for the worker
            taken.prepared = self.pipeline.prepare([frame for _, (frame, _, _) in batch])
        except Exception as err:  # not a bad frame (that is a FrameError, rejected alone): the batch fails
            taken.error = err
        else:
            self._prepare_estimate = taken.prepared.prepare_s
        return taken

    def _fail_batch(self, taken: _Taken, err: Exception) -> None:
        # the reason before the counts: /diagnostics reads the counts first, so a message that
        # shows a failure always carries its reason
        self.last_failure = str(err) if isinstance(err, EncoderError) else repr(err)
        for i in taken.unsettled():
            taken.settled.add(i)
            self._count(taken.cams[i], "failed")
        self._warn_fail(log.error, "encoding a frame failed (a batch of %d, each counted): %s", len(taken.batch),
                        self.last_failure)  # fmt: skip

    def _encode_and_publish(self, taken: _Taken) -> None:
        """Stage two: the model call on a prepared batch, then each frame's features published."""
        if taken.prepared is None:
            self._fail_batch(taken, taken.error or RuntimeError("batch not prepared"))
            return
        batch, cams, prep = taken.batch, taken.cams, taken.prepared
        started = time.perf_counter()
        try:
            res = self.pipeline.encode_prepared(prep)
        except Exception as err:  # keep serving frames; the counters, log and diagnostics make it visible
            self._fail_batch(taken, err)
            return
        self._encode_estimate[len(res.encoded)] = res.encode_s
        for i, err in res.rejected.items():
            taken.settled.add(i)
            self._reject(cams[i], err)
        own = {i: res.decode_s.get(i, 0.0) + res.preprocess_s[i] for i in res.encoded}
        for row, i in enumerate(res.encoded):
            cam, header = cams[i], batch[i][1][1]
            t0 = time.perf_counter()
            try:
                cam.features.publish(features_message(self.transport, header, res.model_id, res.vectors[row]))
            except Exception as err:
                self.last_failure = repr(err)
                taken.settled.add(i)
                self._count(cam, "failed")
                self._warn_fail(log.error, "publishing features of %s failed: %r", cam.spec.topic, err)
                continue
            self._time(cam, "publish", time.perf_counter() - t0)
            self._time(cam, "batch", started - taken.at - own[i])
            if i in res.decode_s:
                self._time(cam, "decode", res.decode_s[i])
            self._time(cam, "preprocess", res.preprocess_s[i])
            self._time(cam, "encode", res.encode_s)
            taken.settled.add(i)
            self._count(cam, "encoded")

    # diagnostics ------------------------------------------------------------------------
    def _camera_stats(self, cam: Camera) -> dict[str, Any]:
        return {
            **cam.counters.snapshot(),
            "lost": cam.lost(),
            "missing_estimate": cam.gaps.missing,
            "features_topic": cam.spec.features_topic,
            "input_topic": cam.spec.input_topic,
            "stages_ms": cam.times.summary(),
        }

    def stats(self) -> dict[str, Any]:
        """Totals at the top level (as for one camera), each camera's own under `cameras`."""
        cameras = {key: self._camera_stats(cam) for key, cam in self.cameras.items()}
        return {
            **{k: sum(c[k] for c in cameras.values()) for k in COUNTS},
            "lost": sum(c["lost"] for c in cameras.values()),
            "missing_estimate": sum(c["missing_estimate"] for c in cameras.values()),
            "stages_ms": self.times.summary(),
            "backend": self.encoder.backend,
            "precision": self.encoder.precision,
            "model": self.encoder.model_id,
            "transport": self.transport.name,
            "max_batch": self.pipeline.max_batch,
            "thread_failures": self.supervisor.failures(),
            "stalls": self.watchdog.stalls,
            "cameras": cameras,
        }

    def stats_between_frames(self) -> dict[str, Any]:
        """`stats()` while no frame is in the intake: a frame's `received` and the `dropped` of the frame it
        displaced are counted a conversion apart, so a snapshot between them is one frame short of accounted.
        Two of these bound a window in which every received frame is accounted (bench.dropcost)."""
        with self._intake:
            return self.stats()

    def diagnostics_values(self, st: dict[str, Any] | None = None) -> dict[str, Any]:
        st = st or self.stats()
        values: dict[str, Any] = {k: st[k] for k in (*COUNTS, *UNSEEN, "backend", "precision", "model", "transport")}
        values["cameras"] = len(st["cameras"])
        values.update(stage_values(st["stages_ms"]))
        values["last_failure"] = self.last_failure
        values.update({k: st[k] for k in ("thread_failures", "stalls")})
        values.update(getattr(self.encoder, "status", dict)())  # a remote backend's server state
        return values

    @staticmethod
    def _level(values: dict[str, Any], what: str) -> tuple[int, str]:
        bad = int(values["rejected"]) + int(values["failed"])
        return (WARN, f"{bad} frames rejected or failed") if bad else (OK, what)

    def health(self, st: dict[str, Any]) -> str:
        """Why the node is not working ('' when it is): a thread that failed lately, or a stall (frames
        arriving and none encoded for watchdog_period). Checked at the diagnostics cadence."""
        self.watchdog.period = self.cfg.watchdog_period
        stalled = self.watchdog.check(st["received"] - st["rejected"], st["encoded"] + st["failed"])
        if stalled:
            return f"stalled: frames arriving and none encoded for {stalled:.0f} s"
        return self.supervisor.recent_fault()

    def publish_diagnostics(self) -> None:
        st = self.stats()
        values = self.diagnostics_values(st)
        per_camera = []
        for key, cam in st["cameras"].items():
            cv = {k: cam[k] for k in (*COUNTS, *UNSEEN, "features_topic")}
            cv.update(stage_values(cam["stages_ms"]))
            per_camera.append((CAMERA_STATUS.format(topic=key), *self._level(cv, "encoding"), cv))
        level, text = self._level(values, "encoding")
        problem = self.health(st)
        if problem:
            level, text = ERROR, problem
        values["stalls"] = self.watchdog.stalls
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values, per_camera))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    # run-time parameters ----------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.EncoderConfig:
        """Apply run-time parameter changes; a ConfigError (bad value, read-only key) changes nothing."""
        with self._reconfigure_lock:
            old, new = self.cfg, self.cfg.updated(changes)
            self.cfg = new  # diagnostics_period: the reporter reads it before each wait
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
        cam.lost_before = cam.lost()
        cam.images.close()
        cam.images = self._subscribe_images(cam)

    def _subscribe_images(self, cam: Camera):
        """A camera's image subscription as `self.cfg` asks for it (at start, and again after a QoS change)."""
        return self.transport.subscribe(
            cam.spec.input_topic,
            cam.spec.input_type,
            QoS(self.cfg.reliability, self.cfg.depth),
            lambda msg, deserialize_s: self._on_image(cam, msg, deserialize_s),
        )

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> EncoderNode:
        dds_config.check_receive_buffer()  # one warning line with the fix: frames lost there are never reported
        self.supervisor.start()
        for t in self._workers:  # the worker stages
            lower_priority(t, WORKER_NICE)
        for cam in self.cameras.values():
            log.info("camera %s (%s) [%s] -> %s [reliable]", cam.spec.input_topic, cam.spec.input_type,
                     self.cfg.reliability, cam.spec.features_topic)  # fmt: skip
        log.info(
            "ready: %d camera(s), batches of up to %d (%s), model %s, backend %s/%s, transport %s",
            len(self.cameras),
            self.pipeline.max_batch,
            f"prepared on {self.pipeline.prep_threads} thread(s)"
            + (", overlapped with the encode" if self.overlap else ", then encoded"),
            self.encoder.model_id,
            self.encoder.backend,
            self.encoder.precision,
            self.transport.name,
        )
        return self

    def stop(self) -> None:
        with self._intake:  # frames after this are not the node's: the final counts below are complete
            self._accepting = False
        self._stop.set()
        self._encoder_idle.set()
        for key in self._slots.close():
            self._count(self.cameras[key], "dropped")  # it waited for the worker when the node stopped
        # the prepare thread first: the encode thread finishes what it handed over
        late = self.supervisor.join(timeout=STOP_JOIN_S)
        while True:  # a batch prepared but never encoded (the encode thread was restarting): dropped at stop
            try:
                taken = self._handoff.get_nowait()
            except queue.Empty:
                break
            for i in taken.unsettled():
                taken.settled.add(i)
                self._count(taken.cams[i], "dropped")
        if late:  # a call that does not return: its pipeline and encoder stay as they are (the runner leaves)
            log.warning("thread(s) %s still in a call at stop: not waited for", ", ".join(late))
            return
        self.pipeline.close()
        try:
            self.publish_diagnostics()  # a last, complete count for whoever is listening
        except Exception:
            log.exception("final diagnostics failed")
        getattr(self.encoder, "close", lambda: None)()  # e.g. triton's shared-memory region


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


def lower_priority(thread: threading.Thread, nice: int) -> None:
    """Give a started thread a higher niceness (Linux schedules each thread on its own); elsewhere, or
    when refused, it keeps the process's, with one debug line."""
    try:
        os.setpriority(os.PRIO_PROCESS, thread.native_id, os.getpriority(os.PRIO_PROCESS, thread.native_id) + nice)
    except (AttributeError, OSError, TypeError) as err:
        log.debug("thread %s keeps its priority: %s", thread.name, err)


def stamp_ns(msg: Any) -> int:
    """A message's header stamp in nanoseconds (0 for one without a usable stamp: the estimate ignores it)."""
    try:
        return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
    except (AttributeError, TypeError, ValueError):
        return 0


def image_subscription(cfg: cfgmod.EncoderConfig) -> tuple[str, str]:
    """(topic, message type) the node reads, by `image_transport`."""
    if cfg.image_transport == "compressed":
        return cfg.image_topic.rstrip("/") + COMPRESSED_SUFFIX, COMPRESSED_IMAGE
    return cfg.image_topic, IMAGE


def _build(cfg: cfgmod.EncoderConfig, transport: Transport) -> EncoderNode:
    camera_specs(cfg)  # a camera set that cannot work stops here, before a model is loaded
    model_path = cfg.model_path or str(default_model_path(projected_name(cfg.model, cfg.output_dim), cfg.precision))
    return EncoderNode(cfg, transport, create_encoder(cfg.backend, model_path, options=encoder_options(cfg)))


def encoder_options(cfg: cfgmod.EncoderConfig) -> EncoderOptions:
    """The backend options of a node's configuration (the keys of EncoderOptions' fields)."""
    keys = EncoderOptions.__dataclass_fields__
    return EncoderOptions(**{k: v for k, v in cfg.as_dict().items() if k in keys})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision encoder", NODE_NAME, cfgmod.EncoderConfig, "encoder.yaml",
                     (*COUNTS, *UNSEEN), _build, (EncoderError, cfgmod.ConfigError, ValueError), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
