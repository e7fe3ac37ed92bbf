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


class LatestSlots:
    """One newest-item mailbox per camera, one taker: the newest-frame policy in one place.

    `put` replaces what is waiting in that camera's slot (and says so, so the producer can count
    the displaced frame as dropped); a slow consumer sees each camera's latest frame and never a
    queue of stale ones. `take` waits until any slot is full and empties up to `limit` of them in
    one go — a cross-camera batch.

    Fairness, when more cameras have a frame than a batch holds: round robin. Cameras are kept in
    a fixed order; each `take` starts at the camera after the last one the previous `take`
    served and takes the cameras with a frame in that order. A camera with a frame therefore waits
    at most ceil(cameras / limit) - 1 batches, whatever the others send.
    """

    def __init__(self, keys: Iterable) -> None:
        self._keys = list(keys)
        if not self._keys or len(set(self._keys)) != len(self._keys):
            raise ValueError("LatestSlots needs distinct keys")
        self._cond = threading.Condition()
        self._items: dict = {}
        self._next = 0
        self._closed = False

    def put(self, key, item) -> bool:
        """Store `item` as `key`'s newest; True when it displaced one the consumer never took."""
        with self._cond:
            displaced = key in self._items
            self._items[key] = item
            self._cond.notify()
            return displaced

    def take(self, limit: int = 1, timeout: float | None = None) -> list[tuple]:
        """[(key, item)] of up to `limit` cameras (round robin, see the class); [] on timeout or after close()."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed, timeout) or not self._items:
                return []
            n = len(self._keys)
            order = [self._keys[(self._next + i) % n] for i in range(n)]
            chosen = [k for k in order if k in self._items][: max(1, limit)]
            self._next = (self._keys.index(chosen[-1]) + 1) % n
            return [(k, self._items.pop(k)) for k in chosen]

    def close(self) -> dict:
        """Wake the taker for good; return {key: item} nobody took, so they can be counted."""
        with self._cond:
            self._closed = True
            left, self._items = self._items, {}
            self._cond.notify_all()
            return left
