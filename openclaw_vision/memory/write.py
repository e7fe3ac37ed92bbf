"""The write path of a store: a batch checked against the store's model, its rows not there yet found (in the
rows held here, or by asking the server), written through the engine, and held in memory (every row of an
embedded store; a server client's bounded recent layer); retention's deletes.

Apart from the store seam because this is where the two roles differ most (which rows are new, what is held
after a write, whether retention is ours), and the seam reads best as the list of paths it offers."""

from __future__ import annotations

import numpy as np

from .errors import StoreError, StoreMismatch
from .folder import Folder
from .remote import Server
from .rows import Counts, Rows, first_of_each, metadata
from .table import RowTable


class Writer:
    """Writes to `engine`, holding rows in `table`; a server client's recent layer is bounded by `cache_rows`
    (the newest; 0: none) within `cache_seconds`."""

    def __init__(self, engine: Folder | Server, table: RowTable, cache_rows: int, cache_seconds: float) -> None:
        self.engine, self.table = engine, table
        self.server = isinstance(engine, Server)
        self.cache_rows, self.cache_seconds = cache_rows, cache_seconds

    def add(self, rows: Rows, cache: bool) -> Counts:
        """`VisualMemory.add`: the rows not there yet written, the others counted as skipped."""
        vectors = np.ascontiguousarray(rows.vectors, np.float32)
        counts = Counts()
        self.engine.refresh()
        try:
            self.engine.check_model(rows.model_id, int(vectors.shape[1]))
        except StoreMismatch as err:
            self.engine.refused += len(vectors) - 1  # check_model counted one
            counts.refused, counts.reasons = len(vectors), [str(err)]
            raise
        ids = rows.ids()
        # a server's rows are not all held here: the server says which are there already
        fresh = first_of_each(ids, () if self.server else self.table)
        if self.server and fresh:
            there = self.engine.existing([ids[i] for i in fresh])
            fresh = [i for i in fresh if ids[i] not in there]
        counts.skipped = len(ids) - len(fresh)
        if fresh:
            self._write(rows, vectors, ids, fresh)
        counts.written = len(fresh)
        if self.server and cache:
            self.remember(rows)
        return counts

    def _write(self, rows: Rows, vectors: np.ndarray, ids: list[str], fresh: list[int]) -> None:
        if self.engine.collection is None:
            self.engine.create(rows.model_id, int(vectors.shape[1]))
            self.engine.check_model(rows.model_id, int(vectors.shape[1]))  # a server's: another robot's model?
        metas, labels = metadata(rows, fresh)
        new_ids, new_vectors = [ids[i] for i in fresh], vectors[np.asarray(fresh)]
        self.engine.write(new_ids, new_vectors, metas)
        if not self.server:
            self.table.append_rows(new_ids, new_vectors, metas, labels, rows.source, rows.robot)

    def remember(self, rows: Rows) -> int:
        """`VisualMemory.remember`: `rows` into a server client's bounded recent layer; how many it holds."""
        if not self.server or self.cache_rows <= 0 or not len(rows.vectors):
            return len(self.table)
        ids = rows.ids()
        fresh = first_of_each(ids, self.table)
        if fresh:
            metas, labels = metadata(rows, fresh)
            vectors = np.ascontiguousarray(rows.vectors, np.float32)[np.asarray(fresh)]
            self.table.append_rows([ids[i] for i in fresh], vectors, metas, labels, rows.source, rows.robot)
        self.table.trim(self.cache_rows, self.cache_seconds)
        return len(self.table)

    def retain(self, max_rows: int, max_age_ns: int, now_ns: int | None) -> int:
        """`VisualMemory.retain`: the rows beyond the bounds out of the table and the folder; how many."""
        if self.server:
            raise StoreError(f"{self.engine.spec}: retention (max_rows, max_age) applies to an embedded store; a "
                             "server holds the fleet's rows")  # fmt: skip
        if not len(self.table):
            return 0
        drop = self.table.keep_newest(max_rows, max_age_ns, now_ns)
        self.engine.delete(drop)
        return len(drop)
