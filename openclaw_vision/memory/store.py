"""The store seam: `VisualMemory(spec)`, one client for the embedded store and a server, one row shape.

`spec` is a folder (Chroma's PersistentClient, embedded: the default, `default_store()` in the data home)
or `http://HOST:PORT` (a Chroma server, `chroma run --path DIR --host 127.0.0.1 --port PORT`, from the same
PyPI package; many robots can write to one). The code above this file never knows which.

A row: unit vector, stamp (ns), frame_id, camera topic, model id, source (a bag's path, or a node's name)
and optional label scores. Its id is `source|camera|stamp`, so indexing the same bag twice adds nothing.
A store holds one model's vectors: the first rows fix its model id and width, and a vector of another
model or width, or a query from another model's text tower, is refused naming both (`StoreMismatch`,
counted in `refused`).

Opening an embedded store checks it before anything is written: a folder another process holds (our
lock file, or SQLite's lock) is `StoreLocked`, a database file that is not a sound SQLite file is
`StoreCorrupt`; in both cases the folder is left exactly as it was.

Queries run on the hot layer (hot.py, exact) loaded from the store at open; `search(..., exact=False)`
asks the engine's own index instead (what the bench compares). The hot layer has a lock of its own: a
query on one thread (the memory node's service) and writes on another (its writer) each hold it only
while they read or change the hot layer, never during the engine's write.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from ..errors import OpenclawError
from ..resources import data_home
from .hot import HotIndex

#: the one collection a store keeps its rows in
COLLECTION = "visual_memory"
#: our lock file inside an embedded store's folder (one writer per folder)
LOCK_FILE = "openclaw-memory.lock"
#: Chroma's database file inside an embedded store's folder
DB_FILE = "chroma.sqlite3"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: the engine's own index (the fallback query path, and a fleet server's): cheap to build, because building it
#: is what limits Chroma's insert rate (measured here at 10k rows, 240-row batches: ~630 rows/s with its
#: defaults, ~1200 with these); queries run on the exact hot layer anyway
HNSW = {"space": "ip", "ef_construction": 40, "max_neighbors": 8, "ef_search": 64}
#: rows read from the engine per call when the hot layer is loaded
LOAD_PAGE = 5000


class StoreError(OpenclawError, RuntimeError):
    """A store that cannot be opened or written; the message names it and says what to do."""


class StoreCorrupt(StoreError):
    """The store's files are not a sound store; nothing was written over them."""


class StoreLocked(StoreError):
    """Another process has the store open."""


class StoreMismatch(StoreError, ValueError):
    """Vectors (or a query) of another model or width than the store's."""


def default_store() -> Path:
    """The embedded store in the data home (what `index`, `search` and the node use without --store)."""
    return data_home() / "memory"


def is_server(spec: str | Path) -> bool:
    return str(spec).startswith(("http://", "https://"))


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

    def __post_init__(self) -> None:
        n = len(self.vectors)
        lens = {len(self.stamps_ns), len(self.frame_ids), len(self.cameras), n}
        if self.labels is not None:
            lens.add(len(self.labels))
        if len(lens) != 1 or np.ndim(self.vectors) != 2:
            raise ValueError(f"rows: {n} vectors need as many stamps, frame ids, cameras (and labels)")

    def ids(self) -> list[str]:
        return [row_id(self.source, c, int(s)) for c, s in zip(self.cameras, self.stamps_ns, strict=True)]


def row_id(source: str, camera: str, stamp_ns: int) -> str:
    return f"{source}|{camera}|{stamp_ns}"


def source_of(rid: str) -> str:
    """The source part of a row id (a source may hold '|'; a camera topic and a stamp never do)."""
    return rid.rsplit("|", 2)[0]


@dataclass(frozen=True)
class Match:
    """One search result."""

    stamp_ns: int
    camera: str
    frame_id: str
    score: float
    source: str
    labels: dict[str, float] | None = None


@dataclass
class Counts:
    """What happened to the rows given to `add`: written, already there (skipped), refused."""

    written: int = 0
    skipped: int = 0
    refused: int = 0
    reasons: list[str] = field(default_factory=list)


def _check_sqlite(db: Path, where: str) -> None:
    """A read-only look at the database file: its header and SQLite's quick_check, never a write."""
    with open(db, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise StoreCorrupt(f"{where}: {db.name} is not an SQLite database (a damaged store?); nothing was written. "
                           "Move it aside or pass another --store")  # fmt: skip
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5)
        try:
            verdict = con.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError as err:
        if "locked" in str(err):
            raise StoreLocked(f"{where}: its database is locked by another process ({err})") from err
        raise StoreCorrupt(f"{where}: {db.name} cannot be read ({err}); nothing was written. "
                           "Move it aside or pass another --store") from err  # fmt: skip
    except sqlite3.DatabaseError as err:
        raise StoreCorrupt(f"{where}: {db.name} is damaged ({err}); nothing was written. "
                           "Move it aside or pass another --store") from err  # fmt: skip
    if verdict != "ok":
        raise StoreCorrupt(f"{where}: {db.name} fails SQLite's quick_check ({verdict}); nothing was written")


class _FolderLock:
    """An exclusive, non-blocking flock on the store's lock file, holding our pid (for the error message)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise StoreLocked(f"{folder}: the store is open in another process (pid {holder}); close that one or "
                              "use a server store (http://HOST:PORT) for several writers") from err  # fmt: skip
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _client(spec: str | Path):
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if is_server(spec):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # else one INFO line per request, at camera rate
        url = urlparse(str(spec))
        port = url.port or (443 if url.scheme == "https" else 8000)
        try:
            client = chromadb.HttpClient(host=url.hostname or "127.0.0.1", port=port, ssl=url.scheme == "https",
                                         settings=settings)  # fmt: skip
            client.heartbeat()
        except Exception as err:
            raise StoreError(f"{spec}: no Chroma server answers there ({type(err).__name__}: {err})") from err
        return client
    return chromadb.PersistentClient(str(spec), settings=settings)


class VisualMemory:
    """Rows of one model in one store (embedded folder or server URL), searchable by vector or text."""

    def __init__(self, spec: str | Path | None = None) -> None:
        self.spec = str(spec if spec is not None else default_store())
        self._lock: _FolderLock | None = None
        if not is_server(self.spec):
            folder = Path(self.spec)
            if folder.exists() and not folder.is_dir():
                raise StoreError(f"{folder}: not a store folder (a file is there); pass a folder or http://HOST:PORT")
            folder.mkdir(parents=True, exist_ok=True)
            self._lock = _FolderLock(folder)
            try:
                if (folder / DB_FILE).exists():
                    _check_sqlite(folder / DB_FILE, self.spec)
            except StoreError:
                self.close()
                raise
        try:
            self._client = _client(self.spec)
            names = [c.name for c in self._client.list_collections()]
            self._collection = self._client.get_collection(COLLECTION, embedding_function=None) \
                if COLLECTION in names else None  # fmt: skip
        except StoreError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise StoreCorrupt(f"{self.spec}: the store cannot be opened ({type(err).__name__}: {err}); "
                               "nothing was written") from err  # fmt: skip
        meta = (self._collection.metadata or {}) if self._collection is not None else {}
        self.model_id: str | None = meta.get("model_id")
        self.dim: int | None = int(meta["dim"]) if "dim" in meta else None
        self.refused = 0
        self._ids: dict[str, int] = {}
        self._frame_ids: list[str] = []
        self._sources: list[str] = []
        self._labels: list[str | None] = []
        self._camera_codes: dict[str, int] = {}
        self._camera_names: list[str] = []
        self._row_cameras: list[int] = []
        self.hot: HotIndex | None = None
        self._hot_lock = threading.Lock()
        if self._collection is not None:
            self._load()

    # -- opening -------------------------------------------------------------------------------------------

    def _load(self) -> None:
        """Every row of the store into the hot layer (paged reads: the engine caps a call's size)."""
        total = self._collection.count()
        self.hot = HotIndex(self.dim, max(1024, total))
        for offset in range(0, total, LOAD_PAGE):
            got = self._collection.get(include=["embeddings", "metadatas"], limit=LOAD_PAGE, offset=offset)
            metas = got["metadatas"]
            self._append(got["ids"], np.asarray(got["embeddings"], np.float32),
                         [m["stamp_ns"] for m in metas], [m["frame_id"] for m in metas], [m["camera"] for m in metas],
                         [source_of(i) for i in got["ids"]], [m.get("labels") for m in metas])  # fmt: skip

    def _camera_code(self, camera: str) -> int:
        if camera not in self._camera_codes:
            self._camera_codes[camera] = len(self._camera_names)
            self._camera_names.append(camera)
        return self._camera_codes[camera]

    def _append(self, ids, vectors, stamps, frame_ids, cameras, sources, labels) -> None:
        with self._hot_lock:
            codes = np.array([self._camera_code(c) for c in cameras], np.int32)
            for i in ids:
                self._ids[i] = len(self._ids)
            self._frame_ids += frame_ids
            self._sources += sources
            self._labels += labels
            self._row_cameras += codes.tolist()
            self.hot.add(vectors, np.asarray(stamps, np.int64), codes)

    def close(self) -> None:
        """Release the folder (the lock); the engine has written every added row already."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> VisualMemory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.hot) if self.hot is not None else 0

    def free_bytes(self) -> int | None:
        """Free bytes on the embedded store's filesystem; None for a server store (its disk is not ours)."""
        if is_server(self.spec):
            return None
        import shutil

        return shutil.disk_usage(self.spec).free

    @property
    def cameras(self) -> list[str]:
        return list(self._camera_names)

    def has(self, source: str, camera: str, stamp_ns: int) -> bool:
        """Whether that row is in the store already (a resumed `index` skips its frame before encoding it)."""
        return row_id(source, camera, stamp_ns) in self._ids

    # -- checks --------------------------------------------------------------------------------------------

    def check_model(self, model_id: str, dim: int, what: str = "vectors") -> None:
        """Refuse `what` of another model id or width than the store's, naming both."""
        if self.model_id is None:
            return
        if model_id != self.model_id or dim != self.dim:
            self.refused += 1
            raise StoreMismatch(
                f"{self.spec} holds {self.dim}-d vectors of model {self.model_id!r}, but these {what} are {dim}-d "
                f"from model {model_id!r}: embeddings of different models are not comparable "
                "(use another --store for another model)"
            )

    # -- writing -------------------------------------------------------------------------------------------

    def add(self, rows: Rows) -> Counts:
        """Write `rows` (those not there yet); a batch of another model or width is refused whole."""
        vectors = np.ascontiguousarray(rows.vectors, np.float32)
        counts = Counts()
        try:
            self.check_model(rows.model_id, int(vectors.shape[1]))
        except StoreMismatch as err:
            self.refused += len(vectors) - 1  # check_model counted one
            counts.refused, counts.reasons = len(vectors), [str(err)]
            raise
        ids = rows.ids()
        fresh, seen = [], set()
        for i, rid in enumerate(ids):
            if rid not in self._ids and rid not in seen:
                fresh.append(i)
                seen.add(rid)
        counts.skipped = len(ids) - len(fresh)
        if not fresh:
            return counts
        if self._collection is None:
            self._create(rows.model_id, int(vectors.shape[1]))
        pick = np.asarray(fresh)
        labels = [json.dumps(rows.labels[i], sort_keys=True) if rows.labels is not None else None for i in fresh]
        metas = []
        for j, i in enumerate(fresh):
            # few keys: each metadata key costs the engine's write path (measured here, 240-row adds: 5 keys
            # 2 056 rows/s, 2 keys 3 264). The source is in the row's id, the model id in the collection's
            m = {"stamp_ns": int(rows.stamps_ns[i]), "frame_id": str(rows.frame_ids[i]), "camera": str(rows.cameras[i])}
            if labels[j] is not None:
                m["labels"] = labels[j]
            metas.append(m)
        new_ids = [ids[i] for i in fresh]
        step = self._client.get_max_batch_size()
        for s in range(0, len(fresh), step):
            self._collection.add(ids=new_ids[s : s + step], embeddings=vectors[pick[s : s + step]],
                                 metadatas=metas[s : s + step])  # fmt: skip
        self._append(new_ids, vectors[pick], [m["stamp_ns"] for m in metas], [m["frame_id"] for m in metas],
                     [m["camera"] for m in metas], [rows.source] * len(fresh), labels)  # fmt: skip
        counts.written = len(fresh)
        return counts

    def _create(self, model_id: str, dim: int) -> None:
        self._collection = self._client.get_or_create_collection(
            COLLECTION, configuration={"hnsw": dict(HNSW)}, metadata={"model_id": model_id, "dim": dim},
            embedding_function=None,
        )  # fmt: skip
        self.model_id, self.dim = model_id, dim
        self.hot = HotIndex(dim)

    def retain(self, max_rows: int = 0, max_age_ns: int = 0, now_ns: int | None = None) -> int:
        """Delete rows older than `max_age_ns` before `now_ns` (default: the newest stamp) and then the oldest
        beyond `max_rows` (0: no limit); returns how many were deleted."""
        if self.hot is None or not len(self.hot):
            return 0
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
            return 0
        order_ids = list(self._ids)
        drop = [order_ids[i] for i in np.flatnonzero(~keep)]
        step = self._client.get_max_batch_size()
        for s in range(0, len(drop), step):
            self._collection.delete(ids=drop[s : s + step])
        idx = np.flatnonzero(keep)
        with self._hot_lock:
            self.hot.keep(keep)
            self._ids = {order_ids[i]: j for j, i in enumerate(idx)}
            self._frame_ids = [self._frame_ids[i] for i in idx]
            self._sources = [self._sources[i] for i in idx]
            self._labels = [self._labels[i] for i in idx]
            self._row_cameras = [self._row_cameras[i] for i in idx]
        return len(drop)

    # -- searching -----------------------------------------------------------------------------------------

    def search(self, vector: np.ndarray, model_id: str, top_k: int = 8, since_ns: int | None = None,
               until_ns: int | None = None, camera: str | None = None, exact: bool = True) -> list[Match]:  # fmt: skip
        """The `top_k` rows nearest the unit `vector` (of `model_id`), best first, within the filters.

        exact: the hot layer (every row scanned); False: the engine's own approximate index."""
        vector = np.asarray(vector, np.float32).reshape(-1)
        self.check_model(model_id, len(vector), "query's")
        if self.hot is None:
            return []
        if not exact:
            return self._engine_search(vector, top_k, since_ns, until_ns, camera)
        with self._hot_lock:
            code = None
            if camera is not None:
                if camera not in self._camera_codes:
                    return []
                code = self._camera_codes[camera]
            hits = self.hot.search(vector, top_k, since_ns, until_ns, code)
            stamps = self.hot.stamps_ns
            return [Match(int(stamps[r]), self._camera_names[self._row_cameras[r]], self._frame_ids[r], float(s),
                          self._sources[r], json.loads(self._labels[r]) if self._labels[r] else None)
                    for r, s in zip(hits.rows.tolist(), hits.scores.tolist(), strict=True)]  # fmt: skip

    def search_text(self, encoder, text: str, top_k: int = 8, **filters) -> list[Match]:
        """`search` with the text tower's embedding of `text` (a tower of another model is refused)."""
        emb = encoder.encode([text])
        self.check_model(emb.model_id, emb.dim, "text tower's query")
        return self.search(emb.vectors[0], emb.model_id, top_k, **filters)

    def _engine_search(self, vector, top_k, since_ns, until_ns, camera) -> list[Match]:
        clauses = []
        if since_ns is not None:
            clauses.append({"stamp_ns": {"$gte": int(since_ns)}})
        if until_ns is not None:
            clauses.append({"stamp_ns": {"$lte": int(until_ns)}})
        if camera is not None:
            clauses.append({"camera": camera})
        where = None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
        got = self._collection.query(query_embeddings=vector[None], n_results=top_k, where=where,
                                     include=["metadatas", "distances"])  # fmt: skip
        out = []
        for rid, m, d in zip(got["ids"][0], got["metadatas"][0], got["distances"][0], strict=True):
            labels = json.loads(m["labels"]) if m.get("labels") else None
            out.append(Match(int(m["stamp_ns"]), m["camera"], m["frame_id"], 1.0 - float(d), source_of(rid), labels))
        return out


def add_all(memory: VisualMemory, batches: Iterable[Rows]) -> Counts:
    """`add` every batch; the counts summed."""
    total = Counts()
    for rows in batches:
        c = memory.add(rows)
        total.written += c.written
        total.skipped += c.skipped
    return total
