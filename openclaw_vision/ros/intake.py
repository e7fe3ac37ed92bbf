"""The encoder node's cameras and their intake: what a configuration subscribes to and where each camera's
features go, each camera's counts, and every sample from its transport thread into its newest-frame slot.

    transport thread: sample → `received` (its stamp into the camera's gap estimate) → validated into a
                      Frame (bytes that are not an image: `rejected`, logged) → the camera's slot; a frame
                      it displaces, never taken by the worker: `dropped`
    while the slot is full, a camera's samples wait: on the pip path in the DDS reader, taken together about
    `reader_samples` frames' time apart (cyclone.py, "Paced": no wake-up of the transport thread per sample);
    under rclpy, whose executor takes each sample, up to `held_samples` held undecoded in the subscription
    (subscription.SampleIntake). Either way they are handled back to back (fewer cold runs of this path), and
    the worker's `take` handles what waits first, so it always takes each camera's newest frame

Cameras: `image_topic` (one camera, features on `features_topic`) or `image_topics` (N cameras; camera k's
features on `features_pattern` with {camera} = its topic's namespace, e.g. /front/image_raw →
/front/visual_features). A topic in `image_topics` ending in /compressed is read as CompressedImage; the
others by `image_transport` (`compressed`: `<image_topic>/compressed`, image_transport's name for its
`compressed` plugin: SimpleSubscriberPlugin::getTopicToSubscribe is `base_topic + "/" + transport name`,
ros-perception/image_common humble). The transport thread checks a compressed image's format and
signature only (a frame that fails either check is rejected); the worker decodes, so a frame dropped by
the newest-frame policy costs no decode.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..preprocess.encodings import FrameError
from ..runtime import config as cfgmod
from ..runtime.bags import COMPRESSED_SUFFIX
from ..runtime.stats import Counters, LatestSlots, StageTimes, StampGaps
from .convert import compressed_to_frame, image_to_frame
from .subscription import Throttle
from .types import COMPRESSED_IMAGE, IMAGE

log = logging.getLogger("encoder_node")

#: a frame's time in the node, stage by stage (the encoder node's module doc says what each one is)
STAGES = ("deserialize", "queue", "batch", "decode", "preprocess", "encode", "publish")
#: every frame that arrives is counted exactly once, after `received`, as one of the other four
COUNTS = ("received", "encoded", "dropped", "rejected", "failed")


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


def image_subscription(cfg: cfgmod.EncoderConfig) -> tuple[str, str]:
    """(topic, message type) the node reads, by `image_transport`."""
    if cfg.image_transport == "compressed":
        return cfg.image_topic.rstrip("/") + COMPRESSED_SUFFIX, COMPRESSED_IMAGE
    return cfg.image_topic, IMAGE


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


def stamp_ns(msg: Any) -> int:
    """A message's header stamp in nanoseconds (0 for one without a usable stamp: the estimate ignores it)."""
    try:
        return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
    except (AttributeError, TypeError, ValueError):
        return 0


@dataclass
class Camera:
    """One camera's state in the node: its subscription and publisher (set by the node), counters and
    stage times. `totals` is every camera's stage times, shared: a frame's stage time goes to both."""

    spec: CameraSpec
    to_frame: Callable[[Any], Any]
    warn_reject: Throttle
    totals: StageTimes
    counters: Counters = field(default_factory=lambda: Counters(COUNTS))
    times: StageTimes = field(default_factory=lambda: StageTimes(STAGES))
    features: Any = None
    images: Any = None
    lost_before: int = 0  # samples lost by image subscriptions replaced since start
    gaps: StampGaps = field(default_factory=StampGaps)  # frames estimated missing before the node

    def lost(self) -> int:
        return self.lost_before + getattr(self.images, "lost", lambda: 0)()

    def held(self) -> int:
        """Samples its subscription holds, not yet received (Intake.hold_samples)."""
        return self.images.intake.held if self.images is not None else 0

    def count(self, what: str) -> None:
        self.counters.inc(what)

    def time(self, stage: str, seconds: float) -> None:
        self.times.add(stage, seconds)
        self.totals.add(stage, seconds)

    def reject(self, err: FrameError) -> None:
        """A frame that is not a valid image: counted and logged (throttled), the node goes on."""
        self.count("rejected")
        self.warn_reject(log.warning, "rejected image on %s: %s", self.spec.input_topic, err)


class Intake:
    """The transport threads' side of the node: every camera, its newest-frame slot (`slots`, what the
    worker takes from) and every camera's frames' stage times (`times`, the totals' percentiles).

    A frame is classified whole either before `close()` or not taken at all (one lock around each), so
    the final counts add up; `between_frames` holds that lock for a snapshot no frame is halfway through."""

    def __init__(self, specs: Iterable[CameraSpec], log_throttle_period: float, held_samples: int,
                 reader_samples: int) -> None:  # fmt: skip
        """`held_samples`, `reader_samples`: what may wait while a camera's slot is full (`hold_samples`)."""
        self.times = StageTimes(STAGES)
        self.cameras = {
            spec.topic: Camera(
                spec,
                compressed_to_frame if spec.input_type == COMPRESSED_IMAGE else image_to_frame,
                Throttle(log_throttle_period),
                self.times,
            )
            for spec in specs
        }
        self.slots = LatestSlots(self.cameras)
        self._lock = threading.Lock()
        self._accepting = True
        self.held_samples, self.reader_samples = held_samples, reader_samples

    def hold_samples(self, cam: Camera) -> None:
        """While the camera's slot is full, let `cam`'s (new) subscription hold up to `held_samples` samples, or
        its reader fill with about `reader_samples`, where the transport can leave them there
        (subscription.SampleIntake.hold_while says why; the node's parameters of those names:
        docs/cameras-and-capacity.md has what they measured)."""
        key = cam.spec.topic
        cam.images.intake.hold_while(lambda: self.slots.holds(key), self.held_samples, self.reader_samples)

    def release_held(self) -> None:
        """Handle the samples every camera's subscription holds, on this thread."""
        for cam in self.cameras.values():
            cam.images.intake.release_held()

    def stop_holding(self, cams: Iterable[Camera] | None = None) -> None:
        """`cams'` subscriptions (default: every camera's) hold nothing from now on; what they held is handled."""
        for cam in self.cameras.values() if cams is None else cams:
            cam.images.intake.hold_while(lambda: False, 0, 0)
            cam.images.intake.release_held()

    def take(self, limit: int = 1, timeout: float | None = None, lend: bool = False) -> list[tuple]:
        """The worker's take (scheduler.Slots): what is held or waits in a reader first, then the slots' newest
        frames; the subscriptions of the cameras taken may take samples as they come again."""
        self.release_held()
        got = self.slots.take(limit, timeout, lend)
        for key, _ in got:
            self.cameras[key].images.intake.taken()
        return got

    def give_back(self, keys: list) -> None:
        """A lane's batch is out (scheduler.Slots): its cameras may be taken again, with what they held
        handled first, so the lane that takes one next takes its newest frame."""
        self.release_held()
        self.slots.give_back(keys)

    def on_image(self, cam: Camera, msg: Any, deserialize_s: float) -> None:
        """A sample from `cam`'s subscription, `deserialize_s` after it was taken from the reader."""
        with self._lock:
            if self._accepting:
                self._take_in(cam, msg, deserialize_s)

    def _take_in(self, cam: Camera, msg: Any, deserialize_s: float) -> None:
        cam.count("received")
        cam.gaps.add(stamp_ns(msg))  # before any check: a rejected frame still arrived
        t0 = time.perf_counter()
        try:
            frame = cam.to_frame(msg)
        except FrameError as err:
            cam.reject(err)
            return
        cam.time("deserialize", deserialize_s + time.perf_counter() - t0)
        if self.slots.put(cam.spec.topic, (frame, msg.header, time.perf_counter())):
            cam.count("dropped")

    @contextlib.contextmanager
    def between_frames(self) -> Iterator[None]:
        """No frame in the intake while inside: a frame's `received` and the `dropped` of the frame it
        displaced are counted a conversion apart, and a snapshot between them is one frame short."""
        with self._lock:
            yield

    def close(self) -> None:
        """Frames after this are not the node's; a frame still in its slot (it waited for the worker when
        the node stopped) is dropped, and counted, and so is every sample held (handled first)."""
        self.stop_holding()
        with self._lock:
            self._accepting = False
        for key in self.slots.close():
            self.cameras[key].count("dropped")
