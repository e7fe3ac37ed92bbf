"""The encoder node's counts for whoever asks: `stats()` (totals and each camera's), its health, and all of it
on /diagnostics — one DiagnosticStatus for the pipeline, one more per camera.

Frames that never arrive: `lost` is what the reader's sample-lost status reports (Cyclone's; on
Humble/rclpy nothing for a best-effort reader), so a frame lost in the socket buffer, overwritten in
the reader's history or published before the reader matched is in no count. `missing_estimate` is
an estimate of those, per camera, from the gaps between the header stamps that did arrive
(stats.StampGaps: a gap of k camera periods means k - 1 frames missing); frames missing before the
first that arrived or after the last are not in it.

`held`: samples a camera's subscription holds undecoded while its slot is full (the held_samples parameter, under
rclpy), not yet received: each is counted when it is handled, at the latest when the worker next takes. On the
pip path such samples wait in the DDS reader instead (reader_samples; cyclone.py, "Paced") and are in no count
until taken, as a sample still in the socket is.

A failure's reason is kept before its frames are counted (`fail`): /diagnostics reads the counts
first, so a message that shows a failure always carries its reason.

Each camera's /diagnostics status also says who is connected: `publishers`, the image publishers its
subscription has matched (diagnostics.publishers: 0, no camera driver is sending to this node, whatever the
topic list says; a sender that waits for 1 loses no first frame), and `subscribers`, the subscriptions its
features publisher has matched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..encoders import ImageEncoder
from ..runtime import threads
from ..runtime.stats import Counters
from .diagnostics import ERROR, OK, WARN, diagnostic_array, publishers, stage_values
from .intake import COUNTS, Camera, Intake
from .subscription import Throttle
from .types import DIAGNOSTIC_ARRAY, QoS, Transport

log = logging.getLogger("encoder_node")

NODE_NAME = "encoder_node"
STATUS_NAME = f"{NODE_NAME}: pipeline"
CAMERA_STATUS = f"{NODE_NAME}: camera {{topic}}"  # one more DiagnosticStatus per camera
#: frames that never reached the node: reported by the reader (`lost`), estimated from stamp gaps
UNSEEN = ("lost", "missing_estimate")


class NodeCounters:
    """Every camera's counts summed into the node's, the latest failure's reason, the node's health and
    its /diagnostics. The counting itself is each Camera's; this reads them and publishes."""

    def __init__(self, intake: Intake, encoder: ImageEncoder, max_batch: int, transport: Transport,
                 supervisor: threads.Supervisor, watchdog: threads.Watchdog,
                 log_throttle_period: float) -> None:  # fmt: skip
        self.intake, self.encoder, self.max_batch, self.transport = intake, encoder, max_batch, transport
        self.supervisor, self.watchdog = supervisor, watchdog
        self.last_failure = ""  # the reason of the latest failed frame (/diagnostics)
        self.warn_fail = Throttle(log_throttle_period)
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))

    def fail(self, cams: Iterable[Camera], reason: str) -> None:
        """Frames that failed: the reason kept first (module doc), then each frame counted for its camera."""
        self.last_failure = reason
        for cam in cams:
            cam.count("failed")

    @property
    def totals(self) -> Counters:
        """The totals over every camera (a snapshot-only view: counts are kept per camera)."""
        total = Counters(COUNTS)
        for cam in self.intake.cameras.values():
            for k, v in cam.counters.snapshot().items():
                total.inc(k, v)
        return total

    @staticmethod
    def _camera_stats(cam: Camera) -> dict[str, Any]:
        return {
            **cam.counters.snapshot(),
            "lost": cam.lost(),
            "missing_estimate": cam.gaps.missing,
            "held": cam.held(),
            "features_topic": cam.spec.features_topic,
            "input_topic": cam.spec.input_topic,
            "stages_ms": cam.times.summary(),
        }

    def stats(self) -> dict[str, Any]:
        """Totals at the top level (as for one camera), each camera's own under `cameras`."""
        cameras = {key: self._camera_stats(cam) for key, cam in self.intake.cameras.items()}
        return {
            **{k: sum(c[k] for c in cameras.values()) for k in COUNTS},
            "lost": sum(c["lost"] for c in cameras.values()),
            "missing_estimate": sum(c["missing_estimate"] for c in cameras.values()),
            "held": sum(c["held"] for c in cameras.values()),
            "stages_ms": self.intake.times.summary(),
            "backend": self.encoder.backend,
            "precision": self.encoder.precision,
            "model": self.encoder.model_id,
            "transport": self.transport.name,
            "max_batch": self.max_batch,
            "thread_failures": self.supervisor.failures(),
            "stalls": self.watchdog.stalls,
            "cameras": cameras,
        }

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
        stalled = self.watchdog.check(st["received"] - st["rejected"], st["encoded"] + st["failed"])
        if stalled:
            return f"stalled: frames arriving and none encoded for {stalled:.0f} s"
        return self.supervisor.recent_fault()

    def publish_diagnostics(self) -> None:
        """One DiagnosticArray: the pipeline's status (ERROR with the reason when `health` finds one), then
        each camera's."""
        st = self.stats()
        values = self.diagnostics_values(st)
        per_camera = []
        for key, cam in st["cameras"].items():
            cv = {k: cam[k] for k in (*COUNTS, *UNSEEN, "features_topic")}
            live = self.intake.cameras[key]
            cv.update(publishers=publishers([live.images]), subscribers=live.features.matched())  # module doc
            cv.update(stage_values(cam["stages_ms"]))
            per_camera.append((CAMERA_STATUS.format(topic=key), *self._level(cv, "encoding"), cv))
        level, text = self._level(values, "encoding")
        problem = self.health(st)
        if problem:
            level, text = ERROR, problem
        values["stalls"] = self.watchdog.stalls
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values, per_camera))
