"""The one subscription core under both transports: what a subscription does with each sample it takes.

rclpy_transport.py and cyclone.py differ only in how a serialized sample is taken (an rclpy raw
callback on the executor's thread; a WaitSet thread of ours on Cyclone). From the bytes on, both hand
them to a `SampleIntake`, which

- decodes them: images by cdr's struct reader (`data` a view of the sample, the header cdr's plain
  Header: what publishes it builds the transport's own, convert.ros_header), every other type by the
  transport's own deserialiser;
- times the decode (the `deserialize` stage the nodes report; Cyclone's includes its take);
- counts and logs (throttled) a sample that does not decode: the subscription goes on;
- guards the user's callback: an exception there is counted and logged (a throttled line with its
  traceback) and the subscription goes on. Unguarded, one exception ends rclpy's spin thread (our
  executor loop) without a word, and every subscription of the node with it.

QoS is translated here too (`writer_qos`, `reader_qos`), so both transports ask DDS for the same
thing from our `QoS`, and say in one place where they cannot.

**What a dropped frame costs here.** Where the reader lets us take everything it holds in one call
(Cyclone: `dds_takecdr` with a limit), one wake-up and one take serve every sample waiting, however
many a busy moment left there; and while the subscriber is busy, Cyclone's samples are left in the
reader and taken together, about `in_reader` samples' time apart or when the subscriber wants the newest
(`pull`, `now`; cyclone.py, "Paced"): a wake-up of the take thread per sample was most of what a
dropped frame cost on the pip path. Each sample still comes through this core and the node's checks: a
frame is decoded by reading its ~60 bytes of fields (its pixels stay a view of the sample and are never
touched before the worker takes the frame), checked, and only then may it displace its camera's newest
frame. Never decoding the older samples of a take was tried (issue 38) and given up: a bad image among
them would be counted as a drop instead of rejected and logged, and a garbage frame arriving last would
push out the valid one before it (the reliability fuzz and the multi-camera test caught both). What
costs is not the ~15 µs those calls take warm in a loop but running them cold after each 6 MB sample
(0.15-0.2 core-ms): so a subscriber may have samples held and decoded a little later, back to back
(`SampleIntake`, "Holding"; on Cyclone they wait in the reader), every one still in order
(`bench/dropcost.py`'s table says what a dropped frame costs). Where the reader hands samples over one
at a time (rclpy's executor: one take per callback, its two copies already made) every sample costs
rclpy's take: its floor, beside our share.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import cdr
from .types import Callback, QoS

log = logging.getLogger(__name__)

#: Samples a Cyclone reader may hold before we take them (the taking thread normally keeps it near 0).
READER_BUFFER = 32
#: Seconds between two log lines about one subscription's undecodable samples or failing callback.
LOG_PERIOD_S = 2.0


class Throttle:
    """Log a repeated problem at most once per `period` seconds, with how often it happened.

    `period` may be changed at any time (the log_throttle_period parameter). `clock` (seconds, monotonic)
    is injectable so that a test steps time instead of waiting for it."""

    def __init__(self, period: float = LOG_PERIOD_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.period, self.clock = period, clock
        self._last: float | None = None  # when the last line was logged; None: never
        self._n = 0  # occurrences since then
        self.total = 0  # occurrences ever

    def _due(self) -> float | None:
        """Count one occurrence; the seconds since the last line if one is due now (0.0 for the first)."""
        self._n += 1
        self.total += 1
        now = self.clock()
        if self._last is None:
            self._last = now
            return 0.0
        if now - self._last >= self.period:
            since, self._last = now - self._last, now
            return since
        return None

    def __call__(self, fn, text: str, *args) -> None:
        if self._due() is not None:
            fn(text + " (%d such since last report)", *args, self._n)
            self._n = 0

    def failure(self, logger: logging.Logger, what: str, err: BaseException) -> None:
        """A loop's repeated failure of one kind (`what`, e.g. 'take on /cam failed'): the first is logged as
        an error with its traceback; after that one line per period, with the count and the last error
        (a take retried every 100 ms would otherwise print a traceback ten times a second)."""
        since = self._due()
        if since is None:
            return
        if self.total == 1:
            logger.error("%s: %s: %s", what, type(err).__name__, err, exc_info=err)
        else:
            logger.error("%s %d more times in the last %.0f s: %s: %s", what, self._n, since, type(err).__name__, err)
        self._n = 0


@dataclass(frozen=True)
class DdsQos:
    """What one endpoint asks DDS for. `depth` is keep_last's depth, or for keep_all the most samples
    the reader holds untaken (0: the library offers no such limit)."""

    reliability: str
    history: str
    depth: int


def writer_qos(q: QoS) -> DdsQos:
    return DdsQos(q.reliability, q.history, q.depth)


def reader_qos(q: QoS, bounded_keep_all: bool) -> DdsQos:
    """A reader's history, by what the library can express: the per-transport choice.

    With a bound on keep_all (Cyclone's ResourceLimits) a reader keeps every sample until it is taken,
    at most max(depth, READER_BUFFER): nothing is overwritten unseen; a full reader rejects, which is
    flow control on reliable (the writer sends again) and a counted loss on best effort. A deep reader
    adds no wake-up per waiting sample there: the take thread takes all it holds in one call (module
    doc). Without a bound (rmw: ROS QoS has no resource limits) the configured keep_last depth, as
    `ros2 topic info -v` shows it: an unbounded keep_all would let a stalled callback grow memory without
    limit, and a frame overwritten in that history is not counted (README, "Frames DDS can lose without
    telling"). Under rclpy a shallow reader would save rclpy's take and two copies of each frame it
    overwrites, but those frames would be lost uncounted, and `ros2 bag play` of 60 frames into the node
    delivered 55-60 (8 of 10 plays short, overwritten in the history) at depth 5 against 60 in 6 of 8
    plays at 30-32, the two short ones lost at the sockets, not in the history (scripts/bag_loss.py;
    README): the node's depth stays 32 on both transports.
    Depth never takes part in QoS matching, so the two readers match the same writers."""
    if bounded_keep_all:
        return DdsQos(q.reliability, "keep_all", max(q.depth, READER_BUFFER))
    return DdsQos(q.reliability, q.history, q.depth)


class SampleIntake:
    """bytes → message → the user's callback(message, deserialize seconds), for one subscription.

    Called from the transport's thread (Cyclone: the subscription's take thread; rclpy: the node's
    mutually exclusive default callback group). It keeps no reference to a sample after the call
    (on Cyclone the sample's bytes go back when its last user is done), unless the subscriber asked
    it to hold samples while it is busy (`hold_while`); then a lock keeps the samples in order between
    that thread and whoever releases them (`release_held`).

    **Holding, and why** (issue 38). A node that keeps only each camera's newest frame drops most of
    what a busy camera sends, yet decodes, checks and counts every sample in order (a bad image must be
    rejected, never pass as a drop). Between two samples the transport streams megabytes through the
    caches (rclpy copies each 1080p frame twice before our callback runs), so each sample's ~100 Python
    calls run cold. Held while the subscriber's `busy()` says it has not taken the last sample yet, up
    to `most` samples wait undecoded and are then handled back to back with the next, where the code is
    warm after the first. The subscriber releases them before it takes, so its newest frame is never
    left behind a held one; what is held costs up to `most` more samples of memory per subscription
    while it is busy. A transport that can leave the samples in its reader instead (Cyclone: no wake-up
    of its thread per sample) lets about `in_reader` of them wait there while `paced()`, hands a batch on
    with `now`, and gives `pull`, which `release_held` calls; `taken()` tells it the subscriber has room
    again."""

    def __init__(self, topic: str, ros_type: str, callback: Callback, generic: Callable[[Any], Any]) -> None:
        self.topic, self._callback = topic, callback
        self._decode = cdr.sample_decoder(ros_type, generic)
        self.malformed = 0  # samples whose bytes did not decode
        self.failed = 0  # samples whose callback raised
        self._warn_malformed, self._warn_failed = Throttle(), Throttle()
        self._busy: Callable[[], bool] | None = None
        self._most = self.in_reader = 0
        self._held: list[Any] = []
        self._lock = threading.Lock()
        #: set by a transport that can leave samples in its reader while the subscriber is busy (Cyclone): takes
        #: them and hands each to `now`; `release_held` calls it, so what waits there is handled too
        self.pull: Callable[[], None] | None = None
        #: set when the subscriber took its last sample (`taken`): a transport thread waiting while it was busy
        #: goes back to taking
        self.room = threading.Event()

    def hold_while(self, busy: Callable[[], bool], most: int, in_reader: int = 0) -> None:
        """From now on, while `busy()`, keep up to `most` samples undecoded, and let a transport that can leave
        about `in_reader` samples waiting in its reader do so (class doc); 0: none. Once asked, every sample
        passes the lock, so one held earlier and one arriving now are still handed on in order."""
        with self._lock:
            self._busy, self._most, self.in_reader = busy, max(0, most), max(0, in_reader)
        self.room.set()  # a transport thread waiting on the old rule looks again

    def paced(self) -> bool:
        """Whether a transport that can should leave the samples arriving now in its reader (the subscriber is
        busy and asked for that)."""
        busy = self._busy
        return busy is not None and self.in_reader > 0 and busy()

    def taken(self) -> None:
        """The subscriber took its last sample: a transport thread waiting while it was busy takes again."""
        self.room.set()

    @property
    def held(self) -> int:
        """Samples held now (a moment's view)."""
        return len(self._held)

    def release_held(self) -> None:
        """Handle the samples held so far, oldest first, on the calling thread, then what waits in the
        transport's reader (`pull`), so the subscriber's newest sample is the newest that came."""
        if self._held:
            with self._lock:
                self._handle_held()
        if self.pull is not None:
            self.pull()

    def now(self, raw: Any, t0: float | None = None) -> None:
        """Take one sample in and handle it at once, after what is held (`pull`'s samples: the subscriber
        wants the newest now)."""
        with self._lock:
            self._handle_held()
            self._handle(raw, t0)

    def _handle_held(self) -> None:
        held, self._held = self._held, []
        for raw in held:
            self._handle(raw, None)  # its deserialize time is its decode: the hold is no stage of its own

    def __call__(self, raw: Any, t0: float | None = None) -> None:
        """Take one serialized sample in; `t0`: when taking it began (default: now)."""
        if self._busy is None:
            self._handle(raw, t0)
            return
        with self._lock:
            if len(self._held) < self._most and self._busy():
                self._held.append(raw)
                return
            self._handle_held()
            self._handle(raw, t0)

    def _handle(self, raw: Any, t0: float | None) -> None:
        """Decode one sample and hand it to the callback; count and log what fails."""
        t0 = time.perf_counter() if t0 is None else t0
        try:
            msg = self._decode(raw)
        except Exception as err:  # malformed bytes: counted and logged, the subscription goes on
            self.malformed += 1
            self._warn_malformed(log.warning, "undecodable sample on %s (%d bytes): %s", self.topic, len(raw), err)
            return
        try:
            self._callback(msg, time.perf_counter() - t0)
        except Exception as err:  # a failing callback must not end the subscription (nor rclpy's spin thread)
            self.failed += 1
            self._warn_failed(functools.partial(log.error, exc_info=True), "callback for %s failed: %r",
                              self.topic, err)  # fmt: skip
