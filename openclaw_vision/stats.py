"""Counters and latency percentiles shared by the node, replay and the benchmarks."""

from __future__ import annotations

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


class LatestSlot:
    """A one-item mailbox: `put` replaces what is waiting (and says so), `take` blocks for the newest.

    This is the newest-frame policy in one place: a slow consumer sees the latest frame and
    never a queue of stale ones; the producer learns how many it displaced, to count them.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item = None
        self._full = False
        self._closed = False

    def put(self, item) -> bool:
        """Store `item`; True when it displaced one the consumer never took."""
        with self._cond:
            displaced = self._full
            self._item, self._full = item, True
            self._cond.notify()
            return displaced

    def take(self, timeout: float | None = None):
        """The newest item, or None on timeout or after close()."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._full or self._closed, timeout):
                return None
            if not self._full:
                return None
            item, self._item, self._full = self._item, None, False
            return item

    def close(self):
        """Wake every taker for good; return the item nobody took (None if empty), so it can be counted."""
        with self._cond:
            self._closed = True
            left, self._item, self._full = (self._item if self._full else None), None, False
            self._cond.notify_all()
            return left
