"""The embedded store's folder: opened only after it is checked, held by one process, loaded into the hot layer.

Apart from the store seam because opening is where a robot's store can be damaged by the opener: a folder
another process holds (our lock file, or SQLite's lock) is `StoreLocked`, a database file that is not a sound
SQLite file is `StoreCorrupt`, and in both cases the folder is left exactly as it was. The spool (spool.py)
opens its own folder with the same lock and the same read-only check."""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np

from .engine import COLLECTION, Engine, settings
from .errors import StoreCorrupt, StoreError, StoreLocked
from .hot import HotIndex
from .rows import source_of
from .table import RowTable

#: our lock file inside an embedded store's folder (one writer per folder)
LOCK_FILE = "openclaw-memory.lock"
#: Chroma's database file inside an embedded store's folder
DB_FILE = "chroma.sqlite3"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: rows read from the engine per call when the hot layer is loaded
LOAD_PAGE = 5000


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


class Folder(Engine):
    """Chroma's PersistentClient on a folder this process holds (the lock, released by `close`)."""

    def __init__(self, spec: str) -> None:
        super().__init__(spec)
        self._lock: FolderLock | None = None
        folder = Path(spec)
        if folder.exists() and not folder.is_dir():
            raise StoreError(f"{folder}: not a store folder (a file is there); pass a folder or http://HOST:PORT")
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = FolderLock(folder)
        try:
            if (folder / DB_FILE).exists():
                check_sqlite(folder / DB_FILE, spec)
            import chromadb

            self.client = chromadb.PersistentClient(spec, settings=settings())
            names = [c.name for c in self.client.list_collections()]
            if COLLECTION in names:
                self.collection = self.client.get_collection(COLLECTION, embedding_function=None)
        except StoreError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise StoreCorrupt(f"{spec}: the store cannot be opened ({type(err).__name__}: {err}); "
                               "nothing was written") from err  # fmt: skip
        self.read_model()

    def call(self, what: str, fn):
        return None if self.collection is None else fn(self.collection)

    def put(self, part: dict) -> None:
        self.collection.add(**part)

    def create(self, model_id: str, dim: int) -> None:
        self.collection = self.make(model_id, dim)
        self.model_id, self.dim = model_id, dim

    def load(self, table: RowTable) -> None:
        """Every row into `table` (paged reads: the engine caps a call's size)."""
        if self.collection is None:
            return
        total = self.collection.count()
        table.hot = HotIndex(self.dim, max(1024, total))
        for offset in range(0, total, LOAD_PAGE):
            got = self.collection.get(include=["embeddings", "metadatas"], limit=LOAD_PAGE, offset=offset)
            metas = got["metadatas"]
            robots = [m.get("robot", "") for m in metas]
            table.append(got["ids"], np.asarray(got["embeddings"], np.float32), [m["stamp_ns"] for m in metas],
                         [m["frame_id"] for m in metas], [m["camera"] for m in metas],
                         [source_of(i, r) for i, r in zip(got["ids"], robots, strict=True)],
                         [m.get("labels") for m in metas], robots)  # fmt: skip

    def delete(self, ids: list[str]) -> None:
        step = self.client.get_max_batch_size()
        for s in range(0, len(ids), step):
            self.collection.delete(ids=ids[s : s + step])

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.spec).free

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
