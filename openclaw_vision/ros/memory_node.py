"""The memory node: /visual_features in, rows of visual memory out (memory/store.py), written in batches.

Threads and data flow, one direction:

    transport thread (features):  check the vector (finite, not all 0) → append to the pending queue
                                  (a short lock, never a store call: the subscription never waits on disk)
    writer thread:                every `flush_period` or `batch_rows` rows: take the queue → one Rows
                                  per model → VisualMemory.add → retention (max_rows, max_age)
    service thread (QueryMemory): a text (embedded by the text tower, loaded once at start) or a vector →
                                  the store's hot layer, under its own lock (held for the scan only:
                                  neither the subscription nor the writer waits on a query for long)
    diagnostics:                  counters on /diagnostics

Every features message is counted once as received, and then as written, skipped (that row is in the
store already), dropped (the queue was full: the store is slower than the cameras), rejected (not a
usable vector), refused (another model's or width's than the store's: not comparable; or the store
refused the write, e.g. a full disk: logged with the reason) or, on a stop, left pending. The node keeps
running through all of them. A store that cannot be opened (corrupt, locked, no server) stops the node
at start with the reason; nothing is written over it.

Killing the node loses at most the rows not yet written: one batch (`batch_rows`, or `flush_period`
seconds of rows).

Queries (srv/QueryMemory on `query_service`) are counted as `queries`; a bad one (neither or both of text
and vector, a vector of another width or model than the store's, a text query without `text_model`, a
window that ends before it starts) gets `ok: false` and the reason in `error`, is counted in
`queries_refused` and logged, and the node goes on. A text tower of another model than the store's is
refused at start, naming both. Offline, `openclaw-vision search --store` reads the same store (a server
store while the node runs; the embedded folder after it stops, as the folder has one writer at a time).
"""

from __future__ import annotations

import logging
import sys
import threading
from functools import partial
from typing import Any

import numpy as np

from .. import config as cfgmod
from .. import threads
from ..errors import OpenclawError
from ..numerics import l2_normalise
from ..stats import Counters
from .diagnostics import ERROR, OK, WARN, diagnostic_array
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, DIAGNOSTIC_ARRAY, QUERY_MEMORY, RESPONSE, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("memory_node")

NODE_NAME = "memory_node"
STATUS_NAME = f"{NODE_NAME}: memory"
COUNTS = ("received", "written", "skipped", "dropped", "rejected", "refused", "flushes", "retained_deleted",
          "queries", "queries_refused")  # fmt: skip
#: matches a query returns when its top_k is 0, and at most
DEFAULT_TOP_K, MAX_TOP_K = 8, 1000


class QueryError(OpenclawError, ValueError):
    """A QueryMemory request that cannot be answered as asked; the message says why."""


class MemoryNode:
    def __init__(self, cfg: cfgmod.MemoryConfig, transport: Transport, memory, text=None) -> None:
        self.cfg, self.transport, self.memory, self.text = cfg, transport, memory, text
        self.counters = Counters(COUNTS)
        self._pending: list[tuple[str, int, str, str, np.ndarray]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._warn = Throttle()
        self._last_refusal = ""
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self._subs = [transport.subscribe(topic, VISUAL_FEATURES, DEFAULT, partial(self._on_features, topic))
                      for topic in cfg.topics()]  # fmt: skip
        self.supervisor = threads.Supervisor(self._stop, log)
        self._writer = self.supervisor.thread("memory-writer", self._write_loop)
        self.supervisor.thread("diagnostics", self._report)
        self._warn_query = Throttle()
        self._last_query_error = ""
        self._response = transport.msg(QUERY_MEMORY + RESPONSE)
        self._service = transport.service(cfg.query_service, QUERY_MEMORY, self.on_query)

    # service thread -----------------------------------------------------------------------
    def on_query(self, req: Any) -> Any:
        """One QueryMemory request → its response; a bad query is answered with ok=false and the reason."""
        self.counters.inc("queries")
        try:
            matches = self.query(req)
        except OpenclawError as err:  # QueryError, StoreMismatch, the text tower's errors
            self.counters.inc("queries_refused")
            self._last_query_error = str(err)
            self._warn_query(log.warning, "query refused: %s", err)
            return self._response(ok=False, error=str(err), model_id=self.memory.model_id or "", stamps_ns=[],
                                  frame_ids=[], cameras=[], scores=[])  # fmt: skip
        return self._response(ok=True, error="", model_id=self.memory.model_id or "",
                              stamps_ns=[m.stamp_ns for m in matches], frame_ids=[m.frame_id for m in matches],
                              cameras=[m.camera for m in matches],
                              scores=self.transport.float_array([m.score for m in matches]))  # fmt: skip

    def query(self, req: Any) -> list:
        text = str(req.text).strip()
        vector = np.asarray(req.vector, np.float32).reshape(-1)
        if bool(text) == bool(vector.size):
            raise QueryError("give either text or a vector (not both, not neither)")
        top_k = int(req.top_k) or DEFAULT_TOP_K
        if top_k > MAX_TOP_K:
            raise QueryError(f"top_k {top_k} is more than {MAX_TOP_K}")
        since, until = int(req.since_ns) or None, int(req.until_ns) or None
        if since is not None and until is not None and until < since:
            raise QueryError(f"the window ends (until_ns {until}) before it starts (since_ns {since})")
        filters = {"since_ns": since, "until_ns": until, "camera": str(req.camera) or None}
        if text:
            if self.text is None:
                raise QueryError("text queries need the text_model parameter (a text tower export of the "
                                 "store's model); this node answers vector queries only")  # fmt: skip
            return self.memory.search_text(self.text, text, top_k, **filters)
        if not np.isfinite(vector).all() or not np.any(vector):
            raise QueryError(f"the query vector ({vector.size} values) is not a finite non-zero vector")
        model = str(req.model_id) or self.memory.model_id or ""
        return self.memory.search(l2_normalise(vector[None])[0], model, top_k, **filters)

    # transport thread ---------------------------------------------------------------------
    def _on_features(self, topic: str, msg: Any, _deserialize_s: float) -> None:
        from ..preprocess.frame import stamp_to_ns

        self.counters.inc("received")
        vec = np.asarray(msg.embedding, dtype=np.float32)
        if vec.ndim != 1 or not vec.size or not np.isfinite(vec).all() or not np.any(vec):
            self.counters.inc("rejected")
            self._warn(log.warning, "rejected features: %d values, not a finite non-zero vector", vec.size)
            return
        row = (str(msg.model_id), stamp_to_ns(msg.header.stamp), str(msg.header.frame_id), topic,
               vec)  # fmt: skip
        with self._lock:
            if len(self._pending) >= self.cfg.queue_rows:
                full = True
            else:
                full = False
                self._pending.append(row)
                n = len(self._pending)
        if full:
            self.counters.inc("dropped")
            self._warn(log.warning, "dropped a row: %d rows wait to be written (queue_rows)", self.cfg.queue_rows)
        elif n >= self.cfg.batch_rows:
            self._wake.set()

    # writer thread ------------------------------------------------------------------------
    def _write_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.cfg.flush_period)
            self._wake.clear()
            self.flush()

    def _refuse(self, n: int, why: str) -> None:
        self.counters.inc("refused", n)
        self._last_refusal = why
        self._warn(log.error, "refused %d rows: %s", n, why)

    def flush(self) -> None:
        """Write what is pending: one Rows per model (another model's rows are refused alone)."""
        from ..memory.store import Rows

        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        by_model: dict[str, list] = {}
        for row in pending:
            by_model.setdefault(row[0], []).append(row)
        free = self.memory.free_bytes()
        if free is not None and free < self.cfg.min_free_mb * 2**20:  # never hand the engine a write it cannot end
            self._refuse(len(pending), f"{free / 2**20:.1f} MiB free on the store's disk, below min_free_mb "
                         f"{self.cfg.min_free_mb:g}: free space or move the store")  # fmt: skip
            return
        for model, rows in by_model.items():
            dims = {len(r[4]) for r in rows}
            for dim in sorted(dims):
                part = [r for r in rows if len(r[4]) == dim]
                batch = Rows(np.stack([r[4] for r in part]), [r[1] for r in part], [r[2] for r in part],
                             [r[3] for r in part], model, self.cfg.source)  # fmt: skip
                try:
                    c = self.memory.add(batch)
                except Exception as err:  # another model, a full disk, the server gone (the engine and its HTTP
                    # client raise their own types): the rows are refused, counted and logged; the writer goes on
                    self._refuse(len(part), str(err))
                    continue
                self.counters.inc("written", c.written)
                self.counters.inc("skipped", c.skipped)
        self.counters.inc("flushes")
        if self.cfg.max_rows or self.cfg.max_age:
            try:
                deleted = self.memory.retain(self.cfg.max_rows, int(self.cfg.max_age * 1e9))
            except Exception as err:  # retention failing must not stop the writes
                self._warn(log.error, "retention failed: %r", err)
            else:
                self.counters.inc("retained_deleted", deleted)

    # diagnostics and lifecycle ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            pending = len(self._pending)
        return {**self.counters.snapshot(), "pending": pending, "rows": len(self.memory),
                "model": self.memory.model_id or "", "store": self.memory.spec,
                "transport": self.transport.name, "thread_failures": self.supervisor.failures()}  # fmt: skip

    def publish_diagnostics(self) -> None:
        st = self.stats()
        values = dict(st)
        fault = self.supervisor.recent_fault()
        if fault:
            level, text = ERROR, fault
        elif st["refused"]:
            level, text = WARN, f"rows refused: {self._last_refusal}"
        elif st["queries_refused"]:
            level, text = WARN, f"queries refused: {self._last_query_error}"
        elif st["dropped"] + st["rejected"]:
            level, text = WARN, "rows dropped or rejected (see the counts)"
        else:
            level, text = OK, f"{st['rows']} rows in {st['store']}"
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, values))

    def _report(self) -> None:
        every(lambda: self.cfg.diagnostics_period, self._stop, self.publish_diagnostics)

    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.MemoryConfig:
        """Run-time parameter changes (diagnostics_period, flush_period): the runner's protocol."""
        changes = {k: v for k, v in changes.items() if k in self.cfg.params()}
        self.cfg = self.cfg.updated(changes)
        return self.cfg

    def start(self) -> MemoryNode:
        self.supervisor.start()
        log.info("ready: %s -> %s (%d rows, model %s), batches of %d or every %.1f s, transport %s",
                 ", ".join(self.cfg.topics()), self.memory.spec, len(self.memory),
                 self.memory.model_id or "not yet set",
                 self.cfg.batch_rows, self.cfg.flush_period, self.transport.name)  # fmt: skip
        log.info(
            "queries on %s: vectors%s",
            self.cfg.query_service,
            f" and text (tower {self.text.model_id})" if self.text is not None else " only (no text_model)",
        )
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        late = self.supervisor.join(timeout=30)  # a batch being written ends within it
        if late:
            log.warning("thread(s) %s still in a call at stop: not waited for", ", ".join(late))
            return
        try:
            self.flush()  # the last partial batch
            self.publish_diagnostics()
        except Exception:
            log.exception("final flush or diagnostics failed")
        finally:
            self.memory.close()


class MemoryLoadError(OpenclawError, RuntimeError):
    """The store could not be opened (corrupt, locked, no server), or the text tower not used with it."""


def _text_tower(cfg: cfgmod.MemoryConfig, memory):
    """The text tower of `text_model`, loaded once (None without it); one of another model id or width than
    the store's is refused here, naming both, rather than on every query."""
    from ..encoders.base import EncoderError
    from ..memory.store import StoreMismatch
    from ..text.encoder import TextEncoder
    from ..text.merges import TokenizerError

    if not cfg.text_model:
        return None
    try:
        text = TextEncoder(cfg.text_model, 1, cfg.bpe_path or None)
        memory.check_model(text.model_id, text.embed_dim, f"text tower's ({cfg.text_model}) queries")
    except (EncoderError, TokenizerError, StoreMismatch) as err:
        raise MemoryLoadError(f"cannot start the memory node: {err}") from err
    return text


def _build(cfg: cfgmod.MemoryConfig, transport: Transport) -> MemoryNode:
    from ..memory.store import StoreError, VisualMemory

    try:
        memory = VisualMemory(cfg.store or None)
    except StoreError as err:
        raise MemoryLoadError(f"cannot start the memory node: {err}") from err
    try:
        return MemoryNode(cfg, transport, memory, _text_tower(cfg, memory))
    except BaseException:
        memory.close()  # the folder's lock goes with a node that does not start
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision memory", NODE_NAME, cfgmod.MemoryConfig, "memory.yaml", COUNTS,
                     _build, (MemoryLoadError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
