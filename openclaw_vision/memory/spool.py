"""The spool: rows on the robot's own disk until the fleet's server has them (store and forward).

A robot with a server store does not write to the server from its writer thread: a server that is down, far
or slow would drop the robot's rows or stall its node. It writes each batch to this spool instead, one
SQLite transaction per batch (WAL, synchronous=FULL: a batch that `put` returned is on disk, through a
SIGKILL or a power cut), and a forwarder sends the spool's rows to the server in arrival order (`seq`), a
batch at a time, deleting them (`ack`) only after the server answered. A crash between the server's answer
and the delete sends those rows again on the next start; the server store's writes are upserts by row id
(robot, source, camera, stamp), so they are there once.

A batch the server refuses for good (`store.refused_for_good`: its validation, not its availability) would
block every row behind it if it stayed first in line, and deleting it would lose rows silently. `set_aside`
moves it, in one transaction, to a second table, `refused`: the same columns, plus the server's reason and
when (`refused_ns`, wall clock). Those rows stay on disk to be looked at (`sqlite3 spool.sqlite3 "SELECT
seq, robot, camera, stamp_ns, reason FROM refused"`) and are never sent again by the forwarder.

The spool is bounded (`max_mb`, the rows' own bytes, waiting and set aside together: the robot's disk stays
bounded even when a server refuses everything): rows beyond it are not taken, and the caller counts and logs
them. One process holds a spool folder at a time (the store's folder lock).

`rows(seq INTEGER PRIMARY KEY AUTOINCREMENT, ...)`: AUTOINCREMENT so a seq is never reused, even after the
newest rows were deleted, and the order of arrival survives every restart; a set-aside row keeps its seq.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import StoreCorrupt
from .folder import FolderLock, check_sqlite
from .rows import Rows

SPOOL_FILE = "spool.sqlite3"
#: bytes a row costs beyond its vector and strings (seq, stamp, SQLite's record and index overhead), for the
#: bound: an estimate, so the bound is the rows' size, not the file's (which SQLite reuses, never shrinks)
ROW_OVERHEAD = 48

#: a spooled row's fields: the same in `rows` (waiting) and `refused` (set aside, with why and when)
_FIELDS = """
    model_id TEXT NOT NULL,
    source TEXT NOT NULL,
    robot TEXT NOT NULL,
    camera TEXT NOT NULL,
    frame_id TEXT NOT NULL,
    stamp_ns INTEGER NOT NULL,
    vector BLOB NOT NULL,
    labels TEXT,
    size INTEGER NOT NULL"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS rows (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,{_FIELDS}
);
CREATE TABLE IF NOT EXISTS refused (
    seq INTEGER PRIMARY KEY,{_FIELDS},
    reason TEXT NOT NULL,
    refused_ns INTEGER NOT NULL
);
"""
_COLUMNS = "seq, model_id, source, robot, camera, frame_id, stamp_ns, vector, labels, size"


@dataclass(frozen=True)
class Spooled:
    """Consecutive spooled rows of one model, width, source and robot (one store batch), and the seq of the
    last of them (what `ack` takes once the server has them)."""

    rows: Rows
    last_seq: int


def _row_size(rows: Rows, i: int) -> int:
    strings = (rows.model_id, rows.source, rows.robot, rows.cameras[i], rows.frame_ids[i])
    return int(rows.vectors[i].nbytes) + sum(len(x.encode()) for x in strings) + ROW_OVERHEAD


class Spool:
    """Rows waiting for the server, in arrival order, on disk; bounded by `max_mb` of row bytes (with the rows
    set aside). `rows`, `bytes`: waiting; `aside_rows`, `aside_bytes`: set aside (the `refused` table)."""

    def __init__(self, folder: str | Path, max_mb: float) -> None:
        self.folder = Path(folder)
        self.max_bytes = int(max_mb * 2**20)
        if self.folder.exists() and not self.folder.is_dir():
            raise StoreCorrupt(f"{self.folder}: not a spool folder (a file is there); pass a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._folder_lock = FolderLock(self.folder, "each memory node needs a spool folder of its own (spool)")
        db = self.folder / SPOOL_FILE
        try:
            if db.exists():
                check_sqlite(db, str(self.folder))
            self._db = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self.rows, self.bytes = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM rows").fetchone()
            self.aside_rows, self.aside_bytes = self._db.execute(
                "SELECT count(*), coalesce(sum(size), 0) FROM refused").fetchone()  # fmt: skip
        except BaseException:
            self._folder_lock.release()
            raise
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.rows

    def put(self, rows: Rows) -> int:
        """Append `rows` in one durable transaction, as many as the bound allows (in order); how many."""
        sizes = [_row_size(rows, i) for i in range(len(rows.vectors))]
        vectors = np.ascontiguousarray(rows.vectors, np.float32)
        with self._lock:
            room, taken = self.max_bytes - self.bytes - self.aside_bytes, 0
            while taken < len(sizes) and sizes[taken] <= room:
                room -= sizes[taken]
                taken += 1
            if not taken:
                return 0
            values = [(rows.model_id, rows.source, rows.robot, str(rows.cameras[i]), str(rows.frame_ids[i]),
                       int(rows.stamps_ns[i]), vectors[i].tobytes(),
                       None if rows.labels is None else json.dumps(rows.labels[i], sort_keys=True), sizes[i])
                      for i in range(taken)]  # fmt: skip
            with self._db:  # one transaction: every row of the batch, or none
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO rows (model_id, source, robot, camera, frame_id, stamp_ns, vector, "
                                     "labels, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)  # fmt: skip
            self.rows += taken
            self.bytes += sum(sizes[:taken])
        return taken

    def peek(self, max_rows: int) -> list[Spooled]:
        """The oldest rows (at most `max_rows`), in seq order, as store batches: a batch ends where the model,
        width, source or robot changes, so sending them in turn keeps the order of arrival."""
        with self._lock:
            got = self._db.execute("SELECT seq, model_id, source, robot, camera, frame_id, stamp_ns, vector, labels "
                                   "FROM rows ORDER BY seq LIMIT ?", (max_rows,)).fetchall()  # fmt: skip
        out: list[Spooled] = []
        start = 0
        for end in range(1, len(got) + 1):
            if end < len(got) and got[end][1:4] == got[start][1:4] and len(got[end][7]) == len(got[start][7]):
                continue
            part = got[start:end]
            labelled = any(r[8] is not None for r in part)
            rows = Rows(np.stack([np.frombuffer(r[7], np.float32) for r in part]), [r[6] for r in part],
                        [r[5] for r in part], [r[4] for r in part], part[0][1], part[0][2],
                        [json.loads(r[8]) if r[8] else {} for r in part] if labelled else None,
                        part[0][3])  # fmt: skip
            out.append(Spooled(rows, part[-1][0]))
            start = end
        return out

    def ack(self, last_seq: int) -> int:
        """Delete every row up to `last_seq` (the server has them, or they were refused and counted); how many."""
        return self._take(last_seq, None)

    def set_aside(self, last_seq: int, reason: str) -> int:
        """Move every waiting row up to `last_seq` to the `refused` table with `reason` (the server refused them
        for good), in one transaction; how many. They count toward the bound until someone deletes them."""
        return self._take(last_seq, reason)

    def _take(self, last_seq: int, reason: str | None) -> int:
        """Rows up to `last_seq` out of the line: deleted (reason None) or kept in `refused` with the reason."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            n, size = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM rows WHERE seq <= ?",
                                       (last_seq,)).fetchone()  # fmt: skip
            if reason is not None:
                self._db.execute(f"INSERT INTO refused ({_COLUMNS}, reason, refused_ns) SELECT {_COLUMNS}, ?, ? "
                                 "FROM rows WHERE seq <= ?", (reason, time.time_ns(), last_seq))  # fmt: skip
                self.aside_rows += n
                self.aside_bytes += size
            self._db.execute("DELETE FROM rows WHERE seq <= ?", (last_seq,))
            self.rows -= n
            self.bytes -= size
        return n

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._folder_lock.release()
