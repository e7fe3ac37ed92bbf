"""The hot layer: every row's unit vector in one float32 matrix, searched exactly (one GEMV + a partial sort).

Why exact and in memory: at the retention window of a robot (10^5–10^6 rows of 512-d) one matrix-vector
product is a few milliseconds on two cores, recall is 1 by construction, and no index has to be built or
loaded before the first query. A vector database's per-call overhead (serialisation, its own process or
thread pool) costs more than that scan. The arrays grow by doubling so appends are amortised O(1).

Filters (a time window, a camera) are boolean masks over the same rows, applied before the top-k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Hits:
    """Row positions in the hot layer, best first, with their cosine scores."""

    rows: np.ndarray  # int64
    scores: np.ndarray  # float32


class HotIndex:
    """Append-only unit vectors + stamps + camera codes; exact top-k with optional filters."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self._vectors = np.zeros((capacity, dim), np.float32)
        self._stamps = np.zeros(capacity, np.int64)
        self._cameras = np.zeros(capacity, np.int32)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _reserve(self, n: int) -> None:
        cap = len(self._stamps)
        if self.size + n <= cap:
            return
        new = max(cap * 2, self.size + n)
        for name in ("_vectors", "_stamps", "_cameras"):
            old = getattr(self, name)
            grown = np.zeros((new, *old.shape[1:]), old.dtype)
            grown[: self.size] = old[: self.size]
            setattr(self, name, grown)

    def add(self, vectors: np.ndarray, stamps_ns: np.ndarray, camera_codes: np.ndarray) -> None:
        n = len(vectors)
        self._reserve(n)
        self._vectors[self.size : self.size + n] = vectors
        self._stamps[self.size : self.size + n] = stamps_ns
        self._cameras[self.size : self.size + n] = camera_codes
        self.size += n

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: self.size]

    @property
    def stamps_ns(self) -> np.ndarray:
        return self._stamps[: self.size]

    def keep(self, mask: np.ndarray) -> None:
        """Drop the rows where `mask` is False (retention), keeping the order of the others."""
        n = int(mask.sum())
        for name in ("_vectors", "_stamps", "_cameras"):
            arr = getattr(self, name)
            arr[:n] = arr[: self.size][mask]
        self.size = n

    def search(self, query: np.ndarray, k: int, since_ns: int | None = None, until_ns: int | None = None,
               camera_code: int | None = None) -> Hits:  # fmt: skip
        """The `k` best rows by inner product with the unit `query` (cosine), within the filters."""
        if self.size == 0 or k <= 0:
            return Hits(np.zeros(0, np.int64), np.zeros(0, np.float32))
        scores = self.vectors @ np.asarray(query, np.float32)
        if since_ns is not None or until_ns is not None or camera_code is not None:
            mask = np.ones(self.size, bool)
            if since_ns is not None:
                mask &= self.stamps_ns >= since_ns
            if until_ns is not None:
                mask &= self.stamps_ns <= until_ns
            if camera_code is not None:
                mask &= self._cameras[: self.size] == camera_code
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
        k = min(k, self.size)
        if k == 0:
            return Hits(np.zeros(0, np.int64), np.zeros(0, np.float32))
        top = np.argpartition(-scores, k - 1)[:k] if k < self.size else np.arange(self.size)
        # best first; equal scores by row (older first), so ties rank the same on every run
        top = top[np.lexsort((top, -scores[top]))]
        return Hits(top.astype(np.int64), scores[top].astype(np.float32))
