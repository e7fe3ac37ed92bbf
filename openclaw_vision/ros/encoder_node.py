"""The encoder node: sensor_msgs/Image in, openclaw_vision/VisualFeatures out, newest frame first.

Threads and data flow, one direction:

    transport thread: take sample → validate into a Frame → LatestSlot (displaced frame: dropped)
    worker thread:    LatestSlot → preprocess → encode → publish VisualFeatures (header copied)
                      (the time a frame waits in the slot is the `queue` stage)
    diagnostics:      every `diagnostics_period` s, counters and stage percentiles on /diagnostics

Every frame that arrives is counted exactly once as encoded, dropped (a newer one arrived
before the worker was free), rejected (bytes that are not a valid image; logged) or failed
(an unexpected error in preprocess/encode/publish; logged). The node keeps running through
all of them.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from .. import config as cfgmod
from ..encoders import EncoderError, ImageEncoder, create_encoder
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.encodings import FrameError
from ..preprocess.spec import PreprocessSpec
from ..resources import default_model_path
from ..stats import Counters, LatestSlot, StageTimes
from .convert import features_message, image_to_frame
from .diagnostics import OK, WARN, diagnostic_array, stage_values
from .runner import Throttle, every, node_main
from .transport import DEFAULT, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("encoder_node")

NODE_NAME = "encoder_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
STAGES = ("deserialize", "queue", "preprocess", "encode", "publish")
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
        self._warn_reject = Throttle()
        self._warn_fail = Throttle()
        self._features = transport.publisher(cfg.features_topic, VISUAL_FEATURES, DEFAULT)
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        image_qos = QoS(cfg.reliability, cfg.depth)
        self._images = transport.subscribe(cfg.image_topic, IMAGE, image_qos, self._on_image)
        self._threads = [
            threading.Thread(target=self._work, name="encoder-worker", daemon=True),
            threading.Thread(target=self._report, name="diagnostics", daemon=True),
        ]

    # transport thread -------------------------------------------------------------------
    def _on_image(self, msg: Any, deserialize_s: float) -> None:
        self.counters.inc("received")
        t0 = time.perf_counter()
        try:
            frame = image_to_frame(msg)
        except FrameError as err:
            self.counters.inc("rejected")
            self._warn_reject(log.warning, "rejected image on %s: %s", self.cfg.image_topic, err)
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
            pixels = self.preprocess(frame)[None]
            t1 = time.perf_counter()
            emb = self.encoder.encode(pixels)
            t2 = time.perf_counter()
            self._features.publish(features_message(self.transport, header, emb.model_id, emb.vectors[0]))
            t3 = time.perf_counter()
        except FrameError as err:
            self.counters.inc("rejected")
            self._warn_reject(log.warning, "rejected image on %s: %s", self.cfg.image_topic, err)
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
        lost = getattr(self._images, "lost", lambda: 0)()
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
        every(self.cfg.diagnostics_period, self._stop, self.publish_diagnostics, log)

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> EncoderNode:
        for t in self._threads:
            t.start()
        log.info(
            "ready: %s [%s] -> %s [%s], model %s, backend %s/%s, transport %s",
            self.cfg.image_topic,
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
        self._stop.set()
        self._slot.close()
        for t in self._threads:
            t.join(timeout=5)
        try:
            self.publish_diagnostics()  # a last, complete count for whoever is listening
        except Exception:
            log.exception("final diagnostics failed")


def _build(cfg: cfgmod.EncoderConfig, transport: Transport) -> EncoderNode:
    model_path = cfg.model_path or str(default_model_path(cfg.model, cfg.precision))
    return EncoderNode(cfg, transport, create_encoder(cfg.backend, model_path, cfg.threads))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision encoder", NODE_NAME, cfgmod.EncoderConfig, "encoder.yaml",
                     (*COUNTS, "lost"), _build, (EncoderError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
