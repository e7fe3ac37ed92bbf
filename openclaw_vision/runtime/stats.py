"""Counters and latency percentiles shared by the nodes, replay and the benchmarks: what a node counts while it
runs. (The timing harness the benches use is bench/harness.py.)"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Iterable

import numpy as np


def percentiles(values: Iterable[float], qs: tuple[int, ...] = (50, 95, 99)) -> dict[str, float]:
    """{'p50': …, 'p95': …, 'p99': …} (NaN-free: empty input gives zeros and n=0)."""
    arr = np.asarray(list(values), np.float64)
    out = {f"p{q}": float(np.percentile(arr, q)) if arr.size else 0.0 for q in qs}
    out["mean"] = float(arr.mean()) if arr.size else 0.0
    out["n"] = int(arr.size)
    return out


class StageTimes:
    """Rolling windows of per-stage durations (seconds in, milliseconds out), thread-safe."""

    def __init__(self, stages: Iterable[str], window: int = 4096) -> None:
        self._lock = threading.Lock()
        self._data = {s: deque(maxlen=window) for s in stages}

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self._data[stage].append(seconds * 1e3)

    def summary(self) -> dict[str, dict[str, float]]:
        with self._lock:
            snap = {s: list(v) for s, v in self._data.items()}
        return {s: percentiles(v) for s, v in snap.items()}


class Counters:
    """Named monotonically increasing counts, thread-safe."""

    def __init__(self, names: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)

    def inc(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._values[name] += by

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


#: a gap counts as frames missing from this many periods up (1.5 would take a gap stretched by jitter)
MISSING_AT = 1.7
#: gaps shorter than this many medians are taken for the period's mean (a loss's gap is left out)
INLIER = 1.9
#: gaps between two estimates of the period (a camera's period is steady; each estimate sorts the window)
REESTIMATE = 4


class StampGaps:
    """An estimate of the frames one camera sent that never arrived, from the gaps between header stamps.

    An estimate, not a count: nothing below us counts these frames. rmw on Humble gives an rclpy
    best-effort reader no report of a sample it never assembled (a 1080p frame whose fragments
    overflowed the socket buffer, one overwritten in the reader's history before it was taken, one
    published before the reader matched), and a Cyclone reader's sample-lost status (the node's
    `lost`) covers only what the reader itself discarded. A camera stamps its frames at a steady
    period, so a gap of k periods between two consecutive stamps that arrived means k - 1 frames
    in between did not.

    The period is the median of the last `window` gaps: robust to the gaps of the losses themselves
    while fewer than half of the recent gaps hold one (a camera losing every other frame looks like
    one at half the rate), and the period is the mean of the window's gaps below 1.9 medians (jitter
    cancels in it), estimated again every `REESTIMATE` (4) gaps. A gap of `MISSING_AT` (1.7) periods
    or more counts k - 1, k its rounded length in periods, so stamps jittered by ±20 % of a period
    count nothing; a single missing frame between two stamps jittered more than ±15 % toward each
    other may go uncounted. The first gaps are held until `warmup` of them are known, then judged
    with that period, so a loss just after start is counted too. A stamp that does not move forward
    (a bag played again, a restarted camera, a camera that leaves stamps at zero) or that jumps more
    than `max_gap` periods (a paused camera, another recording) starts the estimate over and counts
    nothing. Frames lost before the first that arrived, or after the last, cannot be seen here.

    One producer (the camera's subscription thread) calls `add`; `missing` and `resets` may be read
    from any thread.
    """

    def __init__(self, window: int = 15, warmup: int = 8, max_gap: int = 100) -> None:
        self.window, self.warmup, self.max_gap = window, warmup, max_gap
        self._gaps: deque[int] = deque(maxlen=window)
        self._pending: list[int] = []  # gaps seen before the period was known
        self._prev: int | None = None
        self._period: float | None = None  # `period()`, estimated at most REESTIMATE gaps ago; None: not yet
        self._since = 0  # gaps added since the period was estimated
        self.missing = 0  # frames estimated missing between consecutive stamps
        self.resets = 0  # times the stamps went backwards or jumped, and the estimate started over

    def add(self, stamp_ns: int) -> int:
        """Take the next arrived frame's stamp (nanoseconds); returns the frames it adds to `missing`."""
        prev, self._prev = self._prev, stamp_ns
        if prev is None:
            return 0
        gap = stamp_ns - prev
        period = self.period()
        if gap <= 0 or (period and gap > self.max_gap * period):
            self._restart()
            return 0
        self._gaps.append(gap)
        if period:  # the common case, every frame: one comparison unless the gap is long
            self._since += 1
            if self._since >= REESTIMATE:
                self._period = None
            return self._count((gap,), period) if gap >= MISSING_AT * period else 0
        self._pending.append(gap)
        if len(self._gaps) < self.warmup:
            return 0
        self._period = None
        period, gaps, self._pending = self.period(), self._pending, []
        if any(g > self.max_gap * period for g in gaps):  # a jump among the first gaps: judge none of them
            self._restart()
            return 0
        return self._count(gaps, period)

    def _count(self, gaps: Iterable[int], period: float) -> int:
        n = sum(int(g / period + 0.5) - 1 for g in gaps if g >= MISSING_AT * period)  # half up: 2.5 periods count 2
        self.missing += n
        return n

    def period(self) -> float:
        """The camera's period in nanoseconds as estimated now; 0.0 until `warmup` gaps are known.

        Plain Python on at most `window` ints, estimated again every REESTIMATE gaps: `add` runs for every frame
        a camera delivers, dropped ones too, where NumPy's median and mean cost 20-36 us a frame, and this
        estimate at every gap 3 us warm (a loop) and 24-36 us in the node, run cold after each 6 MB sample
        (issue 38); `add` is 0.8 us warm now."""
        if self._period is None:
            self._period, self._since = self._estimate(), 0
        return self._period

    def _estimate(self) -> float:
        if len(self._gaps) < self.warmup:
            return 0.0
        median = statistics.median(self._gaps)
        # the mean of the gaps that hold no loss: a stamp's jitter moves two neighbouring gaps in opposite
        # directions, so their mean stays on the period where a small window's median does not
        inliers = [g for g in self._gaps if g < INLIER * median]
        return sum(inliers) / len(inliers)

    def _restart(self) -> None:
        self._period = None
        self._gaps.clear()
        self._pending = []
        self.resets += 1


class LatestSlots:
    """One newest-item mailbox per camera: the newest-frame policy in one place.

    `put` replaces what is waiting in that camera's slot (and says so, so the producer can count
    the displaced frame as dropped); a slow consumer sees each camera's latest frame and never a
    queue of stale ones. `take` waits until any slot is full and empties up to `limit` of them in
    one go — a cross-camera batch.

    Fairness, when more cameras have a frame than a batch holds: round robin. Cameras are kept in
    a fixed order; each `take` starts at the camera after the last one the previous `take`
    served and takes the cameras with a frame in that order. A camera with a frame therefore waits
    at most ceil(cameras / limit) - 1 batches, whatever the others send.

    Several takers (the encoder node's lanes: batches encoded at once) take with `lend=True`: the
    cameras of a lent batch are skipped by every take until `give_back` returns them, so a camera
    is in one batch at a time and its frames come out in the order they went in.
    """

    def __init__(self, keys: Iterable) -> None:
        self._keys = list(keys)
        if not self._keys or len(set(self._keys)) != len(self._keys):
            raise ValueError("LatestSlots needs distinct keys")
        self._cond = threading.Condition()
        self._items: dict = {}
        self._next = 0
        self._closed = False
        self._lent: set = set()  # cameras whose taken frame is still in a batch (lend=True)

    def put(self, key, item) -> bool:
        """Store `item` as `key`'s newest; True when it displaced one the consumer never took."""
        with self._cond:
            displaced = key in self._items
            self._items[key] = item
            # a frame that displaced another wakes nobody: a taker free to take this camera would have taken that
            # one (a lent camera's frame waits for `give_back`, which wakes the takers)
            if not displaced:
                self._cond.notify()
            return displaced

    def holds(self, key) -> bool:
        """Whether `key`'s slot holds an item the consumer has not taken (a read, no lock: a moment's view)."""
        return key in self._items

    def take(self, limit: int = 1, timeout: float | None = None, lend: bool = False) -> list[tuple]:
        """[(key, item)] of up to `limit` cameras (round robin, see the class); [] on timeout or after close().
        `lend`: skip the cameras lent and not given back, and lend the ones taken (see the class)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready() or self._closed, timeout):
                return []
            ready = self._ready()
            if not ready:
                return []
            n = len(self._keys)
            order = [self._keys[(self._next + i) % n] for i in range(n)]
            chosen = [k for k in order if k in ready][: max(1, limit)]
            self._next = (self._keys.index(chosen[-1]) + 1) % n
            if lend:
                self._lent.update(chosen)
            return [(k, self._items.pop(k)) for k in chosen]

    def give_back(self, keys: Iterable) -> None:
        """The cameras of a lent batch may be taken again (its frames are out: encoded, or counted)."""
        with self._cond:
            self._lent.difference_update(keys)
            if self._ready():  # a frame that came while its camera was lent: a taker may wait for it
                self._cond.notify_all()

    def _ready(self) -> set:
        """The cameras a take may serve now: a frame waiting, and not lent (under the lock)."""
        return self._items.keys() - self._lent

    def close(self) -> dict:
        """Wake the taker for good; return {key: item} nobody took, so they can be counted."""
        with self._cond:
            self._closed = True
            left, self._items = self._items, {}
            self._cond.notify_all()
            return left
