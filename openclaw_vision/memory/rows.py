"""A store's rows as values: the batch written (`Rows`), a result (`Match`), what `add` did (`Counts`), a row's
id and the metadata the engine keeps per row.

A leaf of memory/ (numpy only) so that the row table, the engines, the spool and the store seam share one row
shape and one id scheme; store.py re-exports the public names."""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Rows:
    """A batch of rows of one model and one source: N unit vectors and their per-row fields."""

    vectors: np.ndarray  # N × D float32, unit length
    stamps_ns: Sequence[int]
    frame_ids: Sequence[str]
    cameras: Sequence[str]
    model_id: str
    source: str
    labels: Sequence[dict[str, float]] | None = None
    robot: str = ""

    def __post_init__(self) -> None:
        n = len(self.vectors)
        lens = {len(self.stamps_ns), len(self.frame_ids), len(self.cameras), n}
        if self.labels is not None:
            lens.add(len(self.labels))
        if len(lens) != 1 or np.ndim(self.vectors) != 2:
            raise ValueError(f"rows: {n} vectors need as many stamps, frame ids, cameras (and labels)")
        if "|" in self.robot:
            raise ValueError(f"rows: robot {self.robot!r} holds '|' (it is part of each row's id)")

    def ids(self) -> list[str]:
        return [row_id(self.source, c, int(s), self.robot)
                for c, s in zip(self.cameras, self.stamps_ns, strict=True)]  # fmt: skip

    def take(self, n: int) -> Rows:
        """The first `n` rows (what a bounded spool accepted of a batch)."""
        return Rows(self.vectors[:n], self.stamps_ns[:n], self.frame_ids[:n], self.cameras[:n], self.model_id,
                    self.source, None if self.labels is None else self.labels[:n], self.robot)  # fmt: skip


def row_id(source: str, camera: str, stamp_ns: int, robot: str = "") -> str:
    """`robot|source|camera|stamp`, or `source|camera|stamp` for a row without a robot (a bag indexed offline,
    and every row written before robots were named: their ids stay what they were)."""
    return f"{robot}|{source}|{camera}|{stamp_ns}" if robot else f"{source}|{camera}|{stamp_ns}"


def source_of(rid: str, robot: str = "") -> str:
    """The source part of a row id (a source may hold '|'; a robot, a camera topic and a stamp never do)."""
    head = rid.rsplit("|", 2)[0]
    return head[len(robot) + 1 :] if robot and head.startswith(robot + "|") else head


@dataclass(frozen=True)
class Match:
    """One search result."""

    stamp_ns: int
    camera: str
    frame_id: str
    score: float
    source: str
    labels: dict[str, float] | None = None
    robot: str = ""


@dataclass
class Counts:
    """What happened to the rows given to `add`: written, already there (skipped), refused."""

    written: int = 0
    skipped: int = 0
    refused: int = 0
    reasons: list[str] = field(default_factory=list)


def first_of_each(ids: Sequence[str], known: Container[str]) -> list[int]:
    """Positions of the ids not in `known`, each id's first only (a batch may repeat a row)."""
    fresh, seen = [], set()
    for i, rid in enumerate(ids):
        if rid not in known and rid not in seen:
            fresh.append(i)
            seen.add(rid)
    return fresh


def metadata(rows: Rows, pick: list[int]) -> tuple[list[dict], list[str | None]]:
    """The engine's metadata of the rows at `pick`, and their labels as JSON (None: no labels)."""
    labels = [json.dumps(rows.labels[i], sort_keys=True) if rows.labels is not None else None for i in pick]
    metas = []
    for j, i in enumerate(pick):
        # few keys: each metadata key costs the engine's write path (measured here, 240-row adds: 5 keys
        # 2 056 rows/s, 2 keys 3 264). The source is in the row's id, the model id in the collection's; the
        # robot is a key because queries filter by it
        m = {"stamp_ns": int(rows.stamps_ns[i]), "frame_id": str(rows.frame_ids[i]), "camera": str(rows.cameras[i]),
             "robot": rows.robot}  # fmt: skip
        if labels[j] is not None:
            m["labels"] = labels[j]
        metas.append(m)
    return metas, labels
