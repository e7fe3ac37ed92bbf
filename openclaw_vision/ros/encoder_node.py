"""The encoder node: sensor_msgs/Image in, openclaw_vision/VisualFeatures out, newest frame first.

Threads and data flow, one direction:

    transport thread: take sample → validate into a Frame → LatestSlot (displaced frame: dropped)
    worker thread:    LatestSlot → [decode] → preprocess → encode → publish VisualFeatures (header copied)
                      (the time a frame waits in the slot is the `queue` stage)
    diagnostics:      every `diagnostics_period` s, counters and stage percentiles on /diagnostics

Every frame that arrives is counted exactly once as encoded, dropped (a newer one arrived
before the worker was free), rejected (bytes that are not a valid image; logged) or failed
(an unexpected error in preprocess/encode/publish; logged). The node keeps running through
all of them.

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
import sys
import threading
import time
from typing import Any

from .. import config as cfgmod
from ..encoders import EncoderError, ImageEncoder, create_encoder
from ..preprocess.compressed import CompressedFrame, create_decoder
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.encodings import FrameError
from ..preprocess.spec import PreprocessSpec
from ..resources import default_model_path
from ..stats import Counters, LatestSlot, StageTimes
from . import dds_config
from .convert import compressed_to_frame, features_message, image_to_frame
from .diagnostics import OK, WARN, diagnostic_array, stage_values
from .runner import Throttle, every, node_main
from .types import COMPRESSED_IMAGE, DEFAULT, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("encoder_node")

NODE_NAME = "encoder_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
STAGES = ("deserialize", "queue", "decode", "preprocess", "encode", "publish")
COUNTS = ("received", "encoded", "dropped", "rejected", "failed")


class EncoderNode:
    def __init__(self, cfg: cfgmod.EncoderConfig, transport: Transport, encoder: ImageEncoder) -> None:
        self.cfg = cfg
        self.transport = transport
        self.encoder = encoder
        # a GPU encoder preprocesses frames itself, into its own input buffer (gpu_common.py)
        gpu_pre = getattr(encoder, "frame_preprocessor", None)
        self.preprocess = gpu_pre() if gpu_pre else CpuPreprocessor(PreprocessSpec(size=encoder.image_size))
        self.counters = Counters(COUNTS)
        self.times = StageTimes(STAGES)
        self._slot = LatestSlot()
        self._stop = threading.Event()
        # A frame is classified whole either before stop() or not taken at all, so the final counts add up.
        self._intake = threading.Lock()
        self._accepting = True
        self._warn_reject = Throttle(cfg.log_throttle_period)
        self._warn_fail = Throttle(cfg.log_throttle_period)
        self._reconfigure_lock = threading.Lock()
        self._lost_before = 0  # samples lost by image subscriptions replaced since start
        self._features = transport.publisher(cfg.features_topic, VISUAL_FEATURES, DEFAULT)
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self.decoder = create_decoder()
        self.input_topic, self.input_type = image_subscription(cfg)
        self._to_frame = compressed_to_frame if self.input_type == COMPRESSED_IMAGE else image_to_frame
        self._images = self._subscribe_images()
        self._threads = [
            threading.Thread(target=self._work, name="encoder-worker", daemon=True),
            threading.Thread(target=self._report, name="diagnostics", daemon=True),
        ]

    # transport thread -------------------------------------------------------------------
    def _on_image(self, msg: Any, deserialize_s: float) -> None:
        with self._intake:
            if self._accepting:
                self._take_in(msg, deserialize_s)

    def _take_in(self, msg: Any, deserialize_s: float) -> None:
        self.counters.inc("received")
        t0 = time.perf_counter()
        try:
            frame = self._to_frame(msg)
        except FrameError as err:
            self.counters.inc("rejected")
            self._warn_reject(log.warning, "rejected image on %s: %s", self.input_topic, err)
            return
        self.times.add("deserialize", deserialize_s + time.perf_counter() - t0)
        if self._slot.put((frame, msg.header, time.perf_counter())):
            self.counters.inc("dropped")

    # worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            item = self._slot.take(timeout=0.2)
            if item is not None:
                self._encode_one(*item)

    def _encode_one(self, frame, header, queued_at: float) -> None:
        try:
            t0 = time.perf_counter()
            self.times.add("queue", t0 - queued_at)  # waiting for the worker to finish the previous frame
            if isinstance(frame, CompressedFrame):
                frame = frame.decode(self.decoder)
                t = time.perf_counter()
                self.times.add("decode", t - t0)
                t0 = t
            pixels = self.preprocess(frame)[None]
            t1 = time.perf_counter()
            emb = self.encoder.encode(pixels)
            t2 = time.perf_counter()
            self._features.publish(features_message(self.transport, header, emb.model_id, emb.vectors[0]))
            t3 = time.perf_counter()
        except FrameError as err:
            self.counters.inc("rejected")
            self._warn_reject(log.warning, "rejected image on %s: %s", self.input_topic, err)
            return
        except Exception as err:  # keep serving frames; the counter and log make it visible
            self.counters.inc("failed")
            self._warn_fail(log.error, "encoding a frame failed: %r", err)
            return
        self.times.add("preprocess", t1 - t0)
        self.times.add("encode", t2 - t1)
        self.times.add("publish", t3 - t2)
        self.counters.inc("encoded")

    # diagnostics ------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        counts = self.counters.snapshot()
        lost = self._lost_before + getattr(self._images, "lost", lambda: 0)()
        return {
            **counts,
            "lost": lost,
            "stages_ms": self.times.summary(),
            "backend": self.encoder.backend,
            "precision": self.encoder.precision,
            "model": self.encoder.model_id,
            "transport": self.transport.name,
        }

    def diagnostics_values(self) -> dict[str, Any]:
        st = self.stats()
        values: dict[str, Any] = {k: st[k] for k in (*COUNTS, "lost", "backend", "precision", "model", "transport")}
        values.update(stage_values(st["stages_ms"]))
        return values

    def publish_diagnostics(self) -> None:
        values = self.diagnostics_values()
        bad = int(values["rejected"]) + int(values["failed"])
        level, text = (WARN, f"{bad} frames rejected or failed") if bad else (OK, "encoding")
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics, log)

    # run-time parameters ----------------------------------------------------------------
    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.EncoderConfig:
        """Apply run-time parameter changes; a ConfigError (bad value, read-only key) changes nothing."""
        with self._reconfigure_lock:
            old, new = self.cfg, self.cfg.updated(changes)
            self.cfg = new  # diagnostics_period: the reporter reads it before each wait
            for throttle in (self._warn_reject, self._warn_fail):
                throttle.period = new.log_throttle_period
            if (new.reliability, new.depth) != (old.reliability, old.depth):
                self._resubscribe()
            log.info("parameters changed: %s", ", ".join(f"{k}={v!r}" for k, v in changes.items()))
            return new

    def _resubscribe(self) -> None:
        """A QoS change takes a new subscription (QoS is fixed at creation). Frames sent while
        neither exists are not received (nor counted): what any subscriber restart does."""
        self._lost_before += getattr(self._images, "lost", lambda: 0)()
        self._images.close()
        self._images = self._subscribe_images()

    def _subscribe_images(self):
        """The image subscription as `self.cfg` asks for it (at start, and again after a QoS change)."""
        return self.transport.subscribe(
            self.input_topic, self.input_type, QoS(self.cfg.reliability, self.cfg.depth), self._on_image
        )

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> EncoderNode:
        dds_config.check_receive_buffer()  # one warning line with the fix: frames lost there are never reported
        for t in self._threads:
            t.start()
        log.info(
            "ready: %s (%s) [%s] -> %s [%s], model %s, backend %s/%s, transport %s",
            self.input_topic,
            self.input_type,
            self.cfg.reliability,
            self.cfg.features_topic,
            "reliable",
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
        if self._slot.close() is not None:
            self.counters.inc("dropped")  # it waited for the worker when the node stopped: never encoded
        for t in self._threads:
            t.join(timeout=5)
        try:
            self.publish_diagnostics()  # a last, complete count for whoever is listening
        except Exception:
            log.exception("final diagnostics failed")


def image_subscription(cfg: cfgmod.EncoderConfig) -> tuple[str, str]:
    """(topic, message type) the node reads, by `image_transport`."""
    if cfg.image_transport == "compressed":
        return cfg.image_topic.rstrip("/") + "/compressed", COMPRESSED_IMAGE
    return cfg.image_topic, IMAGE


def _build(cfg: cfgmod.EncoderConfig, transport: Transport) -> EncoderNode:
    model_path = cfg.model_path or str(default_model_path(cfg.model, cfg.precision))
    return EncoderNode(cfg, transport, create_encoder(cfg.backend, model_path, cfg.threads, cfg.performance_hint))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision encoder", NODE_NAME, cfgmod.EncoderConfig, "encoder.yaml",
                     (*COUNTS, "lost"), _build, (EncoderError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
