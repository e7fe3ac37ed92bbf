"""The store seam: `VisualMemory(spec)`, one client for the embedded store and a server, one row shape.

`spec` is a folder (Chroma's PersistentClient, embedded: the default, `default_store()` in the data home)
or `http://HOST:PORT` (a Chroma server, `chroma run --path DIR --host 127.0.0.1 --port PORT`, from the same
PyPI package; many robots write to one). The code above this file never knows which; the two roles differ in
where a query is answered:

- embedded (the robot's own store): every row is in the hot layer (hot.py, exact), loaded at open. Fast,
  and the robot's alone (one process holds the folder).
- server (the fleet's store): nothing is loaded at open, whatever the server holds. A query goes to the
  server's own index (HNSW searched wide for recall: engine.SERVER_HNSW, with the filters as a `where`:
  time window, camera, robot), and its top k are rescored exactly on their stored vectors, so a score
  means the same on both paths and any robot's row is found by the next query. What the client keeps
  is bounded: the rows it was given itself (`remember`, `add`), the newest `cache_rows` within
  `cache_seconds`, in a small hot layer that queries also scan (a robot's own rows before the server has
  them, or while it is down: `local_only`).

A row: unit vector, stamp (ns), frame_id, camera topic, model id, source (a bag's path, or a node's name),
robot (who saw it; empty for a bag indexed offline) and optional label scores. Its id is
`robot|source|camera|stamp` (`source|camera|stamp` without a robot), so indexing the same bag twice, or a
robot sending the same row again after a crash, adds nothing, and two robots never collide. A store holds one
model's vectors: the first rows fix its model id and width, and a vector of another model or width, or a
query from another model's text tower, is refused naming both (`StoreMismatch`, counted in `refused`).

Opening an embedded store checks it before anything is written: a folder another process holds (our
lock file, or SQLite's lock) is `StoreLocked`, a database file that is not a sound SQLite file is
`StoreCorrupt`; in both cases the folder is left exactly as it was. A server that does not answer is
`StoreUnavailable` (at open, unless `connect=False`, and on any later call; the next call tries again). A
request the server answers with a refusal of what was sent (its validation: `refused_for_good`) is
`StoreRefused`: the same request would be refused again.

The hot layer has a lock of its own: a query on one thread (the memory node's service) and writes on
another (its writer) each hold it only while they read or change the hot layer, never during the engine's
write or a server's answer.

`VisualMemory` is the seam and the paths through it (write, remember, retain, search); the roles it holds
live beside it: the rows held in memory (table.py, over hot.py), the engine under it (engine.py: the
collection, the batched write, the engine's query with exact rescoring), opened as the embedded folder
(folder.py) or a server client (remote.py), and the row shapes and errors every one of them shares (rows.py,
errors.py; their public names are imported from here).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..core.resources import data_home
from .engine import COLLECTION, HNSW, SERVER_HNSW
from .errors import StoreCorrupt, StoreError, StoreLocked, StoreMismatch, StoreRefused, StoreUnavailable
from .folder import DB_FILE, LOCK_FILE, Folder, FolderLock, check_sqlite
from .hot import HotIndex
from .remote import RETRIED_4XX, Server, refused_for_good
from .rows import Counts, Match, Rows, row_id, source_of
from .table import RowTable
from .write import Writer

#: what callers import from here (the store seam), wherever it is defined
__all__ = ["COLLECTION", "DB_FILE", "HNSW", "LOCK_FILE", "RETRIED_4XX", "SERVER_HNSW", "Counts",
           "FolderLock", "Match", "Rows", "StoreCorrupt", "StoreError", "StoreLocked", "StoreMismatch",
           "StoreRefused", "StoreUnavailable", "VisualMemory", "add_all", "check_sqlite",
           "default_store", "is_server", "refused_for_good", "row_id", "source_of"]  # fmt: skip


def default_store() -> Path:
    """The embedded store in the data home (what `index`, `search` and the node use without --store)."""
    return data_home() / "memory"


def is_server(spec: str | Path) -> bool:
    return str(spec).startswith(("http://", "https://"))


class VisualMemory:
    """Rows of one model in one store (embedded folder or server URL), searchable by vector or text.

    cache_rows, cache_seconds: a server client's bound on the rows it keeps itself (see the module's
    docstring; 0 rows: none). connect=False: a server that does not answer yet is not an error at open (a
    robot that boots before its network); each later call tries it again."""

    def __init__(self, spec: str | Path | None = None, cache_rows: int = 0, cache_seconds: float = 0.0,
                 connect: bool = True) -> None:  # fmt: skip
        self.spec = str(spec if spec is not None else default_store())
        self.server = is_server(self.spec)
        self._table = RowTable()
        self._engine: Folder | Server = Server(self.spec, connect) if self.server else Folder(self.spec)
        if not self.server:
            self._engine.load(self._table)
        self._writer = Writer(self._engine, self._table, int(cache_rows), float(cache_seconds))

    @property
    def model_id(self) -> str | None:
        return self._engine.model_id

    @property
    def dim(self) -> int | None:
        return self._engine.dim

    @property
    def refused(self) -> int:
        """Vectors and queries refused so far as another model's or width's."""
        return self._engine.refused

    @property
    def hot(self) -> HotIndex | None:
        return self._table.hot

    @property
    def _collection(self):
        """The engine's collection (None before the first rows): for a look past the seam (bench, tests)."""
        return self._engine.collection

    def close(self) -> None:
        """Release the folder (the lock); the engine has written every added row already."""
        self._engine.close()

    def __enter__(self) -> VisualMemory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        """Rows in the store: the hot layer's (embedded), the server's count (a call; StoreUnavailable)."""
        return self._engine.count() if self.server else self.held

    @property
    def held(self) -> int:
        """Rows this client holds in memory: every row (embedded), its own recent ones (server)."""
        return len(self._table)

    def free_bytes(self) -> int | None:
        """Free bytes on the embedded store's filesystem; None for a server store (its disk is not ours)."""
        return None if self.server else self._engine.free_bytes()

    @property
    def cameras(self) -> list[str]:
        return self._table.cameras

    def has(self, source: str, camera: str, stamp_ns: int, robot: str = "") -> bool:
        """Whether that row is in the store already (a resumed `index` skips its frame before encoding it)."""
        rid = row_id(source, camera, stamp_ns, robot)
        return rid in self._table or bool(self.server and self._engine.existing([rid]))

    def check_model(self, model_id: str, dim: int, what: str = "vectors") -> None:
        """Refuse `what` of another model id or width than the store's, naming both (counted in `refused`)."""
        self._engine.check_model(model_id, dim, what)

    # -- writing -------------------------------------------------------------------------------------------

    def add(self, rows: Rows, cache: bool = True) -> Counts:
        """Write `rows` (those not there yet); a batch of another model or width is refused whole. A server
        client also keeps them in its bounded recent layer, unless `cache` is False (a node's forwarder: the
        rows were remembered when they were spooled). A server that does not answer: StoreUnavailable, and
        nothing of the batch is known to be written (writing it again adds nothing twice); a batch the server
        refuses for good: StoreRefused."""
        return self._writer.add(rows, cache)

    def remember(self, rows: Rows) -> int:
        """Keep `rows` in a server client's bounded recent layer (what `search` scans beside the server's
        index, and alone with `local_only`); returns how many it holds now. Embedded: its hot layer has every
        row already, so nothing to do."""
        return self._writer.remember(rows)

    def retain(self, max_rows: int = 0, max_age_ns: int = 0, now_ns: int | None = None) -> int:
        """Delete rows older than `max_age_ns` before `now_ns` (default: the newest stamp) and then the oldest
        beyond `max_rows` (0: no limit); returns how many were deleted. An embedded store's own retention: a
        server's rows are the fleet's (its retention is the server's business), so a server client refuses."""
        return self._writer.retain(max_rows, max_age_ns, now_ns)

    # -- searching -----------------------------------------------------------------------------------------

    def search(self, vector: np.ndarray, model_id: str, top_k: int = 8, since_ns: int | None = None,
               until_ns: int | None = None, camera: str | None = None, exact: bool = True,
               robot: str | None = None, local_only: bool = False) -> list[Match]:  # fmt: skip
        """The `top_k` rows nearest the unit `vector` (of `model_id`), best first, within the filters.

        Embedded: exact, the hot layer (every row scanned); exact=False: the engine's own index, its top
        k rescored. Server: the server's index (its top k rescored exactly) merged with the
        client's recent layer; local_only: the recent layer alone (the server down). StoreUnavailable when the
        server does not answer."""
        vector = np.asarray(vector, np.float32).reshape(-1)
        if not local_only:
            self._engine.refresh()
        self.check_model(model_id, len(vector), "query's")
        filters = {"since_ns": since_ns, "until_ns": until_ns, "camera": camera, "robot": robot}
        if not self.server:
            if self._table.hot is None:
                return []
            return self._table.search(vector, top_k, **filters) if exact else \
                self._engine.nearest(vector, top_k, **filters)  # fmt: skip
        here = self._table.search(vector, top_k, **filters) if self.held else []
        if local_only:
            return here
        there = self._engine.nearest(vector, top_k, **filters)
        held = {row_id(m.source, m.camera, m.stamp_ns, m.robot) for m in here}
        both = here + [m for m in there if row_id(m.source, m.camera, m.stamp_ns, m.robot) not in held]
        both.sort(key=lambda m: (-m.score, m.stamp_ns))
        return both[:top_k]

    def search_text(self, encoder, text: str, top_k: int = 8, **filters) -> list[Match]:
        """`search` with the text tower's embedding of `text` (a tower of another model is refused)."""
        emb = encoder.encode([text])
        self.check_model(emb.model_id, emb.dim, "text tower's query")
        return self.search(emb.vectors[0], emb.model_id, top_k, **filters)


def add_all(memory: VisualMemory, batches: Iterable[Rows]) -> Counts:
    """`add` every batch; the counts summed."""
    total = Counts()
    for rows in batches:
        c = memory.add(rows)
        total.written += c.written
        total.skipped += c.skipped
    return total
