"""The rows a client holds in memory: the hot layer (hot.py: vectors, stamps, camera and robot codes) and,
beside it, each row's other fields (id, frame id, source, labels) and the code ↔ name tables of cameras and
robots.

Apart from the store seam because it is the one piece both roles share (an embedded store's every row, a
server client's recent ones) and the one with its own lock: a query on one thread (the memory node's service)
and writes on another (its writer) each hold it only while they read or change these rows, never during the
engine's write or a server's answer."""

from __future__ import annotations

import json
import threading

import numpy as np

from .hot import HotIndex
from .rows import Match


class RowTable:
    """Rows in arrival order: `hot` (None until the first row) and the per-row fields at the same positions."""

    def __init__(self) -> None:
        self.hot: HotIndex | None = None
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._frame_ids: list[str] = []
        self._sources: list[str] = []
        self._labels: list[str | None] = []
        self._codes: dict[str, dict[str, int]] = {"camera": {}, "robot": {}}
        self._names: dict[str, list[str]] = {"camera": [], "robot": []}
        self._row_cameras: list[int] = []
        self._row_robots: list[int] = []

    def __len__(self) -> int:
        return len(self.hot) if self.hot is not None else 0

    def __contains__(self, rid: object) -> bool:
        return rid in self._ids

    @property
    def cameras(self) -> list[str]:
        return list(self._names["camera"])

    def _code(self, kind: str, name: str) -> int:
        codes = self._codes[kind]
        if name not in codes:
            codes[name] = len(self._names[kind])
            self._names[kind].append(name)
        return codes[name]

    def append(self, ids, vectors, stamps, frame_ids, cameras, sources, labels, robots) -> None:
        """Rows at the end (the caller knows they are new: `rows.first_of_each`)."""
        with self._lock:
            if self.hot is None:
                self.hot = HotIndex(int(vectors.shape[1]))
            cams = np.array([self._code("camera", c) for c in cameras], np.int32)
            bots = np.array([self._code("robot", r) for r in robots], np.int32)
            for i in ids:
                self._ids[i] = len(self._ids)
            self._frame_ids += frame_ids
            self._sources += sources
            self._labels += labels
            self._row_cameras += cams.tolist()
            self._row_robots += bots.tolist()
            self.hot.add(vectors, np.asarray(stamps, np.int64), cams, bots)

    def append_rows(self, ids: list[str], vectors: np.ndarray, metas: list[dict], labels: list[str | None],
                    source: str, robot: str) -> None:  # fmt: skip
        """New rows of one batch, with the metadata the engine keeps for them (`rows.metadata`)."""
        self.append(ids, vectors, [m["stamp_ns"] for m in metas], [m["frame_id"] for m in metas],
                    [m["camera"] for m in metas], [source] * len(ids), labels, [robot] * len(ids))  # fmt: skip

    def trim(self, max_rows: int, seconds: float) -> None:
        """Back to `max_rows` (the newest) within `seconds` of the newest stamp, once the layer is an eighth over
        its bound: trimming moves every row (and seals int8 blocks again), so not on every batch."""
        slack = max(1, max_rows // 8)
        stamps = self.hot.stamps_ns
        window = int(seconds * 1e9)
        stale = window > 0 and int(stamps.min()) < int(stamps.max()) - window - int(window / 8)
        if len(self) <= max_rows + slack and not stale:
            return
        self.keep_newest(max_rows, window)

    def keep_newest(self, max_rows: int, max_age_ns: int, now_ns: int | None = None) -> list[str]:
        """Drop rows older than `max_age_ns` before `now_ns` (default: the newest stamp), then the oldest beyond
        `max_rows` (0: no limit); the dropped rows' ids."""
        with self._lock:
            stamps = self.hot.stamps_ns
            keep = np.ones(len(stamps), bool)
            if max_age_ns:
                now = int(stamps.max()) if now_ns is None else now_ns
                keep &= stamps >= now - max_age_ns
            if max_rows and keep.sum() > max_rows:
                kept = np.flatnonzero(keep)
                order = kept[np.argsort(stamps[kept], kind="stable")]
                keep[order[: len(order) - max_rows]] = False
            if keep.all():
                return []
            order_ids = list(self._ids)
            drop = [order_ids[i] for i in np.flatnonzero(~keep)]
            idx = np.flatnonzero(keep)
            self.hot.keep(keep)
            self._ids = {order_ids[i]: j for j, i in enumerate(idx)}
            for name in ("_frame_ids", "_sources", "_labels", "_row_cameras", "_row_robots"):
                old = getattr(self, name)
                setattr(self, name, [old[i] for i in idx])
        return drop

    def search(self, vector, top_k, since_ns, until_ns, camera, robot) -> list[Match]:
        """The hot layer's exact top-k within the filters, as matches (a camera or robot never seen: none)."""
        with self._lock:
            codes = {}
            for kind, name in (("camera", camera), ("robot", robot)):
                if name is not None:
                    if name not in self._codes[kind]:
                        return []
                    codes[kind] = self._codes[kind][name]
            hits = self.hot.search(vector, top_k, since_ns, until_ns, codes.get("camera"), codes.get("robot"))
            stamps, cams, bots = self.hot.stamps_ns, self._names["camera"], self._names["robot"]
            return [Match(int(stamps[r]), cams[self._row_cameras[r]], self._frame_ids[r], float(s), self._sources[r],
                          json.loads(self._labels[r]) if self._labels[r] else None, bots[self._row_robots[r]])
                    for r, s in zip(hits.rows.tolist(), hits.scores.tolist(), strict=True)]  # fmt: skip
