"""The store seam: `VisualMemory(spec)`, one client for the embedded store and a server, one row shape.

`spec` is a folder (Chroma's PersistentClient, embedded: the default, `default_store()` in the data home)
or `http://HOST:PORT` (a Chroma server, `chroma run --path DIR --host 127.0.0.1 --port PORT`, from the same
PyPI package; many robots write to one). The code above this file never knows which; the two roles differ in
where a query is answered:

- embedded (the robot's own store): every row is in the hot layer (hot.py, exact), loaded at open. Fast,
  and the robot's alone (one process holds the folder).
- server (the fleet's store): nothing is loaded at open, whatever the server holds. A query goes to the
  server's own index (HNSW, with the filters as a `where`: time window, camera, robot), asks for more
  candidates than it returns (`candidates(k)`) and rescores them exactly on their stored vectors, so a
  score means the same on both paths and any robot's row is found by the next query. What the client keeps
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

from ..core.errors import OpenclawError
from ..core.resources import data_home
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
#: a server collection's index: the server path answers every query from it, so it is built for recall
#: (recall@10 after exact rescoring is a goal: bench --mode memory's fleet section); a server's writes run in
#: its own process, beside many robots', where the embedded store's insert rate is the robot's own
SERVER_HNSW = {"space": "ip", "ef_construction": 128, "max_neighbors": 16, "ef_search": 128}
#: rows read from the engine per call when the hot layer is loaded
LOAD_PAGE = 5000
#: seconds a server call may take, and its connection: chromadb's HTTP client waits forever by default, and a
#: server that hangs (stopped, or a network that drops packets) would stall a robot's forwarder and queries
SERVER_TIMEOUT_S, CONNECT_TIMEOUT_S = 30.0, 5.0
#: the fewest candidates a server query asks its index for (then rescored exactly); see `candidates`
MIN_CANDIDATES = 40


class StoreError(OpenclawError, RuntimeError):
    """A store that cannot be opened or written; the message names it and says what to do."""


class StoreCorrupt(StoreError):
    """The store's files are not a sound store; nothing was written over them."""


class StoreLocked(StoreError):
    """Another process has the store open."""


class StoreMismatch(StoreError, ValueError):
    """Vectors (or a query) of another model or width than the store's."""


class StoreUnavailable(StoreError):
    """The server did not answer (down, unreachable, failing); the same call may succeed later."""


class StoreRefused(StoreError):
    """The server (or chromadb's client, before sending) refused this request for good: sending the same rows
    again gets the same answer (`refused_for_good`)."""


#: status codes of a Chroma error in the 4xx range that are about the server or the client's credentials, not
#: about the request: 401/403 (credentials: every batch alike), 404 (the collection went away: made again on
#: the next write), 408 (a timeout), 429 (the server's load)
RETRIED_4XX = frozenset({401, 403, 404, 408, 429})


def refused_for_good(err: BaseException) -> bool:
    """Whether a failed server call failed because of what was sent (retrying it is useless) rather than
    because of the server or the way to it (retrying later may succeed).

    For good (the request's fault, the same each time):
    - a `chromadb.errors.ChromaError` whose `code()` is 4xx and not in RETRIED_4XX: the server's validation
      (`InvalidArgumentError`: a non-finite value, an empty id, another width than the collection's;
      `DuplicateIDError`, `IDAlreadyExistsError`, `UniqueConstraintError`, `InvalidUUIDError`,
      `BatchSizeExceededError`, `QuotaError`, `InvalidHTTPVersion`, the catch-all `ChromaError`);
    - `ValueError` / `TypeError` but not a `json.JSONDecodeError`: chromadb's own checks before it sends
      (its `validate_*` functions), or orjson unable to encode the request (`JSONEncodeError`, an int beyond
      64 bits).

    Everything else is retried: `httpx.TransportError` (connection refused or reset, connect/read/write/pool
    timeouts), a Chroma error of 5xx (`InternalError`, `VersionMismatchError`) or in RETRIED_4XX (auth,
    not found, rate limit), a reply that is not JSON (`JSONDecodeError`), the bare `Exception(text)` chromadb
    raises for an error body it cannot name (a proxy's 502/503), and any type not named here: unknown is
    retried, so a row is never set aside for a failure that may pass."""
    import json

    from chromadb.errors import ChromaError

    if isinstance(err, ChromaError):
        code = err.code()
        return 400 <= code < 500 and code not in RETRIED_4XX
    if isinstance(err, json.JSONDecodeError):  # orjson's is one too
        return False
    return isinstance(err, (ValueError, TypeError))


def default_store() -> Path:
    """The embedded store in the data home (what `index`, `search` and the node use without --store)."""
    return data_home() / "memory"


def is_server(spec: str | Path) -> bool:
    return str(spec).startswith(("http://", "https://"))


def candidates(k: int) -> int:
    """How many candidates a server query asks the index for before exact rescoring: an approximate index
    misses some of the true top k at cheap build settings, and most of them are found among a few times k."""
    return max(4 * k, MIN_CANDIDATES)


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


def check_sqlite(db: Path, where: str) -> None:
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


class FolderLock:
    """An exclusive, non-blocking flock on a folder's lock file (a store's, a spool's), holding our pid (for
    the error message)."""

    HINT = "close that one or use a server store (http://HOST:PORT) for several writers"

    def __init__(self, folder: Path, hint: str = HINT) -> None:
        self.path = folder / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise StoreLocked(f"{folder}: the store is open in another process (pid {holder}); {hint}") from err
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
        import urllib.request

        import httpx

        url = urlparse(str(spec))
        port = url.port or (443 if url.scheme == "https" else 8000)
        host = url.hostname or "127.0.0.1"
        try:  # first a heartbeat of our own, bounded: the client's constructor calls the server without a timeout
            with urllib.request.urlopen(f"{url.scheme}://{host}:{port}/api/v2/heartbeat", timeout=CONNECT_TIMEOUT_S):
                pass
            client = chromadb.HttpClient(host=host, port=port, ssl=url.scheme == "https", settings=settings)
            session = getattr(getattr(client, "_server", None), "_session", None)  # chromadb's httpx.Client
            if session is not None:
                session.timeout = httpx.Timeout(SERVER_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            client.heartbeat()
        except Exception as err:
            raise StoreUnavailable(f"{spec}: no Chroma server answers there ({type(err).__name__}: {err})") from err
        return client
    return chromadb.PersistentClient(str(spec), settings=settings)


def _first_of_each(ids: Sequence[str], known) -> list[int]:
    """Positions of the ids not in `known`, each id's first only (a batch may repeat a row)."""
    fresh, seen = [], set()
    for i, rid in enumerate(ids):
        if rid not in known and rid not in seen:
            fresh.append(i)
            seen.add(rid)
    return fresh


def _where(since_ns: int | None, until_ns: int | None, camera: str | None, robot: str | None) -> dict | None:
    """The filters as the engine's `where` (None: no filter)."""
    clauses: list[dict] = []
    if since_ns is not None:
        clauses.append({"stamp_ns": {"$gte": int(since_ns)}})
    if until_ns is not None:
        clauses.append({"stamp_ns": {"$lte": int(until_ns)}})
    if camera is not None:
        clauses.append({"camera": camera})
    if robot is not None:
        clauses.append({"robot": robot})
    return None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}


class VisualMemory:
    """Rows of one model in one store (embedded folder or server URL), searchable by vector or text.

    cache_rows, cache_seconds: a server client's bound on the rows it keeps itself (see the module's
    docstring; 0 rows: none). connect=False: a server that does not answer yet is not an error at open (a
    robot that boots before its network); each later call tries it again."""

    def __init__(self, spec: str | Path | None = None, cache_rows: int = 0, cache_seconds: float = 0.0,
                 connect: bool = True) -> None:  # fmt: skip
        self.spec = str(spec if spec is not None else default_store())
        self.server = is_server(self.spec)
        self.cache_rows, self.cache_seconds = int(cache_rows), float(cache_seconds)
        self._lock: FolderLock | None = None
        self._client = None
        self._collection = None
        self.model_id: str | None = None
        self.dim: int | None = None
        self.refused = 0
        self._ids: dict[str, int] = {}
        self._frame_ids: list[str] = []
        self._sources: list[str] = []
        self._labels: list[str | None] = []
        self._codes: dict[str, dict[str, int]] = {"camera": {}, "robot": {}}
        self._names: dict[str, list[str]] = {"camera": [], "robot": []}
        self._row_cameras: list[int] = []
        self._row_robots: list[int] = []
        self.hot: HotIndex | None = None
        self._hot_lock = threading.Lock()
        self._server_lock = threading.Lock()
        if self.server:
            try:
                self._connect()
            except StoreUnavailable:
                if connect:
                    raise
            return
        folder = Path(self.spec)
        if folder.exists() and not folder.is_dir():
            raise StoreError(f"{folder}: not a store folder (a file is there); pass a folder or http://HOST:PORT")
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = FolderLock(folder)
        try:
            if (folder / DB_FILE).exists():
                check_sqlite(folder / DB_FILE, self.spec)
            self._client = _client(self.spec)
            names = [c.name for c in self._client.list_collections()]
            if COLLECTION in names:
                self._collection = self._client.get_collection(COLLECTION, embedding_function=None)
        except StoreError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise StoreCorrupt(f"{self.spec}: the store cannot be opened ({type(err).__name__}: {err}); "
                               "nothing was written") from err  # fmt: skip
        self._read_model()
        if self._collection is not None:
            self._load()

    # -- opening -------------------------------------------------------------------------------------------

    def _read_model(self) -> None:
        meta = (self._collection.metadata or {}) if self._collection is not None else {}
        if "model_id" in meta:
            self.model_id, self.dim = meta["model_id"], int(meta["dim"])

    def _connect(self) -> None:
        """A server client and its collection (if some robot made it already); nothing of its rows is read."""
        self._client = _client(self.spec)
        try:
            self._collection = self._client.get_collection(COLLECTION, embedding_function=None)
        except Exception as err:  # chromadb raises NotFoundError (1.x) or ValueError (older) for a missing one
            if "does not exist" not in str(err) and type(err).__name__ != "NotFoundError":
                self._client = None
                raise StoreUnavailable(f"{self.spec}: the server did not answer ({type(err).__name__}: {err})") \
                    from err  # fmt: skip
            self._collection = None
        self._read_model()

    def _server_call(self, what: str, fn):
        """`fn(collection)` on the server: connect first if needed (a robot's client outlives the server's
        restarts). A request refused for good (`refused_for_good`) is StoreRefused and keeps the client (the
        server answered); any other failure is StoreUnavailable and drops the client, so the next call
        connects again. None: no collection yet."""
        with self._server_lock:
            if self._client is None or self._collection is None:
                self._connect()
            if self._collection is None:
                return None
            try:
                return fn(self._collection)
            except StoreError:
                raise
            except Exception as err:
                why = f"{self.spec}: {what} failed ({type(err).__name__}: {err})"
                if refused_for_good(err):
                    raise StoreRefused(f"{why}; sending it again would not change that") from err
                self._client, self._collection = None, None
                raise StoreUnavailable(why) from err

    def _load(self) -> None:
        """Every row of an embedded store into the hot layer (paged reads: the engine caps a call's size)."""
        total = self._collection.count()
        self.hot = HotIndex(self.dim, max(1024, total))
        for offset in range(0, total, LOAD_PAGE):
            got = self._collection.get(include=["embeddings", "metadatas"], limit=LOAD_PAGE, offset=offset)
            metas = got["metadatas"]
            robots = [m.get("robot", "") for m in metas]
            self._append(got["ids"], np.asarray(got["embeddings"], np.float32), [m["stamp_ns"] for m in metas],
                         [m["frame_id"] for m in metas], [m["camera"] for m in metas],
                         [source_of(i, r) for i, r in zip(got["ids"], robots, strict=True)],
                         [m.get("labels") for m in metas], robots)  # fmt: skip

    def _code(self, kind: str, name: str) -> int:
        codes = self._codes[kind]
        if name not in codes:
            codes[name] = len(self._names[kind])
            self._names[kind].append(name)
        return codes[name]

    def _append(self, ids, vectors, stamps, frame_ids, cameras, sources, labels, robots) -> None:
        with self._hot_lock:
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
        """Rows in the store: the hot layer's (embedded), the server's count (a call; StoreUnavailable)."""
        if self.server:
            return int(self._server_call("count", lambda c: c.count()) or 0)
        return self.held

    @property
    def held(self) -> int:
        """Rows this client holds in memory: every row (embedded), its own recent ones (server)."""
        return len(self.hot) if self.hot is not None else 0

    def free_bytes(self) -> int | None:
        """Free bytes on the embedded store's filesystem; None for a server store (its disk is not ours)."""
        if self.server:
            return None
        import shutil

        return shutil.disk_usage(self.spec).free

    @property
    def cameras(self) -> list[str]:
        return list(self._names["camera"])

    def has(self, source: str, camera: str, stamp_ns: int, robot: str = "") -> bool:
        """Whether that row is in the store already (a resumed `index` skips its frame before encoding it)."""
        rid = row_id(source, camera, stamp_ns, robot)
        if rid in self._ids:
            return True
        return bool(self.server and self._existing([rid]))

    def _refresh(self) -> None:
        """A server client that knows no collection yet looks again: another robot may have made it."""
        if self.server and self._collection is None:
            with self._server_lock:
                self._connect()

    def _existing(self, ids: list[str]) -> set[str]:
        """Which of `ids` the server holds (one call per batch, nothing but the ids comes back)."""
        got = self._server_call("a lookup by id", lambda c: c.get(ids=ids, include=[]))
        return set(got["ids"]) if got is not None else set()

    # -- checks --------------------------------------------------------------------------------------------

    def check_model(self, model_id: str, dim: int, what: str = "vectors") -> None:
        """Refuse `what` of another model id or width than the store's, naming both (no call to a server: a
        server client knows its store's model once some robot made the collection, `_refresh`)."""
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

    def add(self, rows: Rows, cache: bool = True) -> Counts:
        """Write `rows` (those not there yet); a batch of another model or width is refused whole. A server
        client also keeps them in its bounded recent layer, unless `cache` is False (a node's forwarder: the
        rows were remembered when they were spooled). A server that does not answer: StoreUnavailable, and
        nothing of the batch is known to be written (writing it again adds nothing twice); a batch the server
        refuses for good: StoreRefused."""
        vectors = np.ascontiguousarray(rows.vectors, np.float32)
        counts = Counts()
        self._refresh()
        try:
            self.check_model(rows.model_id, int(vectors.shape[1]))
        except StoreMismatch as err:
            self.refused += len(vectors) - 1  # check_model counted one
            counts.refused, counts.reasons = len(vectors), [str(err)]
            raise
        ids = rows.ids()
        # a server's rows are not all held here: the server says which are there already
        fresh = _first_of_each(ids, () if self.server else self._ids)
        if self.server and fresh:
            there = self._existing([ids[i] for i in fresh])
            fresh = [i for i in fresh if ids[i] not in there]
        counts.skipped = len(ids) - len(fresh)
        if fresh:
            self._write(rows, vectors, ids, fresh)
        counts.written = len(fresh)
        if self.server and cache:
            self.remember(rows)
        return counts

    def _metas(self, rows: Rows, pick: list[int]) -> tuple[list[dict], list[str | None]]:
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

    def _write(self, rows: Rows, vectors: np.ndarray, ids: list[str], fresh: list[int]) -> None:
        if self._collection is None:
            self._create(rows.model_id, int(vectors.shape[1]))
            self.check_model(rows.model_id, int(vectors.shape[1]))  # a server's collection: another robot's model?
        metas, labels = self._metas(rows, fresh)
        pick = np.asarray(fresh)
        new_ids = [ids[i] for i in fresh]
        step = self._client.get_max_batch_size()
        for s in range(0, len(fresh), step):
            part = {"ids": new_ids[s : s + step], "embeddings": vectors[pick[s : s + step]],
                    "metadatas": metas[s : s + step]}  # fmt: skip
            if self.server:  # upsert: a batch resent after a crash or a lost reply is the same rows, once
                self._server_call("writing rows", lambda c, part=part: c.upsert(**part))
            else:
                self._collection.add(**part)
        if not self.server:
            self._append(new_ids, vectors[pick], [m["stamp_ns"] for m in metas], [m["frame_id"] for m in metas],
                         [m["camera"] for m in metas], [rows.source] * len(fresh), labels,
                         [rows.robot] * len(fresh))  # fmt: skip

    def _create(self, model_id: str, dim: int) -> None:
        def make():
            return self._client.get_or_create_collection(
                COLLECTION, configuration={"hnsw": dict(SERVER_HNSW if self.server else HNSW)},
                metadata={"model_id": model_id, "dim": dim}, embedding_function=None,
            )  # fmt: skip

        if self.server:
            with self._server_lock:
                if self._client is None:
                    self._connect()
                if self._collection is None:
                    try:
                        self._collection = make()
                    except Exception as err:
                        self._client = None
                        raise StoreUnavailable(f"{self.spec}: creating the collection failed ({err})") from err
            self._read_model()  # get_or_create: the first robot's model id is the store's
            return
        self._collection = make()
        self.model_id, self.dim = model_id, dim

    def remember(self, rows: Rows) -> int:
        """Keep `rows` in a server client's bounded recent layer (what `search` scans beside the server's
        index, and alone with `local_only`); returns how many it holds now. Embedded: its hot layer has every
        row already, so nothing to do."""
        if not self.server or self.cache_rows <= 0 or not len(rows.vectors):
            return self.held
        ids = rows.ids()
        fresh = _first_of_each(ids, self._ids)
        if fresh:
            metas, labels = self._metas(rows, fresh)
            vectors = np.ascontiguousarray(rows.vectors, np.float32)[np.asarray(fresh)]
            self._append([ids[i] for i in fresh], vectors, [m["stamp_ns"] for m in metas],
                         [m["frame_id"] for m in metas], [m["camera"] for m in metas], [rows.source] * len(fresh),
                         labels, [rows.robot] * len(fresh))  # fmt: skip
        self._trim_cache()
        return self.held

    def _trim_cache(self) -> None:
        """Back to `cache_rows` (the newest) within `cache_seconds` of the newest stamp, once the layer is an
        eighth over its bound: trimming moves every row (and seals int8 blocks again), so not on every batch."""
        n = self.held
        slack = max(1, self.cache_rows // 8)
        stamps = self.hot.stamps_ns
        window = int(self.cache_seconds * 1e9)
        stale = window > 0 and int(stamps.min()) < int(stamps.max()) - window - int(window / 8)
        if n <= self.cache_rows + slack and not stale:
            return
        self._keep_newest(self.cache_rows, window)

    def _keep_newest(self, max_rows: int, max_age_ns: int, now_ns: int | None = None) -> list[str]:
        """Drop hot-layer rows older than `max_age_ns` before `now_ns` (default: the newest stamp), then the oldest
        beyond `max_rows` (0: no limit); the dropped rows' ids."""
        with self._hot_lock:
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

    def retain(self, max_rows: int = 0, max_age_ns: int = 0, now_ns: int | None = None) -> int:
        """Delete rows older than `max_age_ns` before `now_ns` (default: the newest stamp) and then the oldest
        beyond `max_rows` (0: no limit); returns how many were deleted. An embedded store's own retention: a
        server's rows are the fleet's (its retention is the server's business), so a server client refuses."""
        if self.server:
            raise StoreError(f"{self.spec}: retention (max_rows, max_age) applies to an embedded store; a server "
                             "holds the fleet's rows")  # fmt: skip
        if self.hot is None or not len(self.hot):
            return 0
        drop = self._keep_newest(max_rows, max_age_ns, now_ns)
        step = self._client.get_max_batch_size()
        for s in range(0, len(drop), step):
            self._collection.delete(ids=drop[s : s + step])
        return len(drop)

    # -- searching -----------------------------------------------------------------------------------------

    def search(self, vector: np.ndarray, model_id: str, top_k: int = 8, since_ns: int | None = None,
               until_ns: int | None = None, camera: str | None = None, exact: bool = True,
               robot: str | None = None, local_only: bool = False) -> list[Match]:  # fmt: skip
        """The `top_k` rows nearest the unit `vector` (of `model_id`), best first, within the filters.

        Embedded: exact, the hot layer (every row scanned); exact=False: the engine's own index, its
        candidates rescored. Server: the server's index (candidates rescored exactly) merged with the
        client's recent layer; local_only: the recent layer alone (the server down). StoreUnavailable when the
        server does not answer."""
        vector = np.asarray(vector, np.float32).reshape(-1)
        if not local_only:
            self._refresh()
        self.check_model(model_id, len(vector), "query's")
        filters = {"since_ns": since_ns, "until_ns": until_ns, "camera": camera, "robot": robot}
        if not self.server:
            if self.hot is None:
                return []
            return self._hot_search(vector, top_k, **filters) if exact else \
                self._engine_search(vector, top_k, **filters)  # fmt: skip
        here = self._hot_search(vector, top_k, **filters) if self.held else []
        if local_only:
            return here
        there = self._engine_search(vector, top_k, **filters)
        held = {row_id(m.source, m.camera, m.stamp_ns, m.robot) for m in here}
        both = here + [m for m in there if row_id(m.source, m.camera, m.stamp_ns, m.robot) not in held]
        both.sort(key=lambda m: (-m.score, m.stamp_ns))
        return both[:top_k]

    def _hot_search(self, vector, top_k, since_ns, until_ns, camera, robot) -> list[Match]:
        with self._hot_lock:
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

    def search_text(self, encoder, text: str, top_k: int = 8, **filters) -> list[Match]:
        """`search` with the text tower's embedding of `text` (a tower of another model is refused)."""
        emb = encoder.encode([text])
        self.check_model(emb.model_id, emb.dim, "text tower's query")
        return self.search(emb.vectors[0], emb.model_id, top_k, **filters)

    def _engine_search(self, vector, top_k, since_ns, until_ns, camera, robot) -> list[Match]:
        """The engine's index asked for `candidates(top_k)` rows within the filters; those rescored exactly on
        their stored vectors (the same inner product as the hot layer), best first."""
        where = _where(since_ns, until_ns, camera, robot)

        def ask(c):
            return c.query(query_embeddings=vector[None], n_results=candidates(top_k), where=where,
                           include=["embeddings", "metadatas"])  # fmt: skip

        got = self._server_call("a query", ask) if self.server else ask(self._collection)
        if got is None or not got["ids"] or not got["ids"][0]:
            return []
        scores = np.asarray(got["embeddings"][0], np.float32) @ vector
        out = []
        for rid, m, s in zip(got["ids"][0], got["metadatas"][0], scores.tolist(), strict=True):
            labels = json.loads(m["labels"]) if m.get("labels") else None
            robot_name = m.get("robot", "")
            out.append(Match(int(m["stamp_ns"]), m["camera"], m["frame_id"], float(s), source_of(rid, robot_name),
                             labels, robot_name))  # fmt: skip
        out.sort(key=lambda m: (-m.score, m.stamp_ns))
        return out[:top_k]


def add_all(memory: VisualMemory, batches: Iterable[Rows]) -> Counts:
    """`add` every batch; the counts summed."""
    total = Counts()
    for rows in batches:
        c = memory.add(rows)
        total.written += c.written
        total.skipped += c.skipped
    return total
