"""The memory node: /visual_features in, rows of visual memory out (memory/store.py), written in batches.

Threads and data flow, one direction:

    transport thread (features):  check the vector (finite, not all 0) → append to the pending queue
                                  (a short lock, never a store call: the subscription never waits on disk)
    writer thread:                every `flush_period` or `batch_rows` rows: take the queue → one Rows
                                  per model → VisualMemory.add → retention (max_rows, max_age); with a
                                  server store: → the spool (memory/spool.py, this robot's disk, one
                                  durable transaction per batch) and the bounded recent cache instead
    forwarder thread (a server):  the spool's rows, oldest first, `batch_rows` at a time → the server
                                  (upserts by row id) → deleted from the spool once the server answered
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
seconds of rows). With a server store (store and forward) the node starts and keeps accepting rows while the
server is down: they wait in the spool (`spool`, bounded by `spool_max_mb`: rows beyond it are refused,
counted and logged) and go to the server in the order they came when it answers again; a SIGKILL loses
nothing spooled, and a batch sent again after one is on the server once (its rows' ids are the same). Each
row names its robot (`robot`: the namespace, else the host name), so two robots never share an id. Counted
as spooled, then forwarded (written or skipped on the server), refused (another model's) or set aside;
`spool_rows` wait. A batch the server refuses for good (its validation, `store.refused_for_good`; not a server
that is down or slow, which is retried with a backoff) is set aside in the spool's `refused` table with the
reason (`set_aside`; `spool_set_aside` held there now), logged, and the forwarder goes on with the next one;
the status stays WARN while any rows are set aside there (across restarts: someone has to look at them).

Queries (srv/QueryMemory on `query_service`) are counted as `queries`. On a server store they are answered
by the server's index (every robot's rows, a `robot` filter) merged with this robot's cached newest rows;
while the server does not answer, by that cache alone, with ok and a note in `error` saying so (counted in
`queries_local`). A bad one (neither or both of text
and vector, a vector of another width or model than the store's, a text query without `text_model`, a
window that ends before it starts) gets `ok: false` and the reason in `error`, is counted in
`queries_refused` and logged, and the node goes on. A text tower of another model than the store's is
refused at start, naming both. Offline, `openclaw-vision search --store` reads the same store (a server
store while the node runs; the embedded folder after it stops, as the folder has one writer at a time).
"""

from __future__ import annotations

import logging
import shutil
import socket
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import OpenclawError
from ..core.numerics import l2_normalise
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters
from .diagnostics import ERROR, OK, WARN, diagnostic_array
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, DIAGNOSTIC_ARRAY, QUERY_MEMORY, RESPONSE, VISUAL_FEATURES, QoS, Transport

log = logging.getLogger("memory_node")

NODE_NAME = "memory_node"
STATUS_NAME = f"{NODE_NAME}: memory"
COUNTS = ("received", "written", "skipped", "dropped", "rejected", "refused", "flushes", "retained_deleted",
          "queries", "queries_refused", "spooled", "forwarded", "forward_failures", "queries_local",
          "set_aside")  # fmt: skip
#: seconds the forwarder waits at most before it tries a server that failed again (doubling from flush_period)
FORWARD_RETRY_MAX_S = 5.0
#: matches a query returns when its top_k is 0, and at most
DEFAULT_TOP_K, MAX_TOP_K = 8, 1000


class QueryError(OpenclawError, ValueError):
    """A QueryMemory request that cannot be answered as asked; the message says why."""


class MemoryNode:
    def __init__(self, cfg: cfgmod.MemoryConfig, transport: Transport, memory, text=None, spool=None,
                 robot: str = "") -> None:  # fmt: skip
        self.cfg, self.transport, self.memory, self.text = cfg, transport, memory, text
        self.spool, self.robot = spool, robot
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
        self._forward_wake = threading.Event()
        self._forward_error = ""  # the server's last failure; "" once a batch went through
        self._warn_forward = Throttle()
        self._warn_aside = Throttle()
        self._last_set_aside = ""
        if spool is not None:
            self.supervisor.thread("memory-forward", self._forward_loop)
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
            matches, note = self.query(req)
        except OpenclawError as err:  # QueryError, StoreMismatch, the text tower's errors
            self.counters.inc("queries_refused")
            self._last_query_error = str(err)
            self._warn_query(log.warning, "query refused: %s", err)
            return self._response(ok=False, error=str(err), model_id=self.memory.model_id or "", stamps_ns=[],
                                  frame_ids=[], cameras=[], robots=[], scores=[])  # fmt: skip
        return self._response(ok=True, error=note, model_id=self.memory.model_id or "",
                              stamps_ns=[m.stamp_ns for m in matches], frame_ids=[m.frame_id for m in matches],
                              cameras=[m.camera for m in matches], robots=[m.robot for m in matches],
                              scores=self.transport.float_array([m.score for m in matches]))  # fmt: skip

    def query(self, req: Any) -> tuple[list, str]:
        """The matches of one request, and a note for the caller ("" or why only the local cache answered)."""
        from ..memory.store import StoreUnavailable

        try:
            return self._search(req, local_only=False), ""
        except StoreUnavailable as err:
            if not self.memory.held:
                raise
            self.counters.inc("queries_local")
            self._warn_query(log.warning, "query answered from the local cache only: %s", err)
            return self._search(req, local_only=True), (
                f"the server did not answer ({err}): answered from this robot's {self.memory.held} newest rows only"
            )

    def _search(self, req: Any, local_only: bool) -> list:
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
        filters = {"since_ns": since, "until_ns": until, "camera": str(req.camera) or None,
                   "robot": str(req.robot) or None, "local_only": local_only}  # fmt: skip
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
        free = shutil.disk_usage(self.spool.folder).free if self.spool is not None else self.memory.free_bytes()
        if free is not None and free < self.cfg.min_free_mb * 2**20:  # never hand the engine a write it cannot end
            where = "spool's" if self.spool is not None else "store's"
            self._refuse(len(pending), f"{free / 2**20:.1f} MiB free on the {where} disk, below min_free_mb "
                         f"{self.cfg.min_free_mb:g}: free space or move the {where[:-2]}")  # fmt: skip
            return
        for model, rows in by_model.items():
            dims = {len(r[4]) for r in rows}
            for dim in sorted(dims):
                part = [r for r in rows if len(r[4]) == dim]
                batch = Rows(np.stack([r[4] for r in part]), [r[1] for r in part], [r[2] for r in part],
                             [r[3] for r in part], model, self.cfg.source, robot=self.robot)  # fmt: skip
                try:
                    if self.spool is not None:
                        self._spool(batch)
                        continue
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

    def _spool(self, batch) -> None:
        """A batch into the spool (as much as its bound takes) and the recent cache; the rest refused, counted."""
        from ..memory.store import StoreMismatch

        n = len(batch.vectors)
        try:  # a model the server's store is known not to hold could never be forwarded
            self.memory.check_model(batch.model_id, int(batch.vectors.shape[1]))
        except StoreMismatch as err:
            self._refuse(n, str(err))
            return
        taken = self.spool.put(batch)
        if taken:
            self.memory.remember(batch.take(taken))
            self.counters.inc("spooled", taken)
            self._forward_wake.set()
        if taken < n:
            self._refuse(n - taken, f"the spool {self.spool.folder} is full (spool_max_mb {self.cfg.spool_max_mb:g}, "
                         f"{len(self.spool)} rows wait for the server {self.memory.spec}, "
                         f"{self.spool.aside_rows} were set aside)")  # fmt: skip

    # forwarder thread (a server store) ----------------------------------------------------------
    def _forward_loop(self) -> None:
        from ..memory.store import StoreUnavailable

        backoff = 0.0
        while not self._stop.is_set():
            if backoff:
                self._stop.wait(backoff)
            else:
                self._forward_wake.wait(self.cfg.flush_period)
                self._forward_wake.clear()
            if self._stop.is_set():
                return
            try:
                self.forward()
            except StoreUnavailable as err:
                self.counters.inc("forward_failures")
                self._forward_error = str(err)
                self._warn_forward(log.warning, "the server does not answer; %d rows wait in the spool: %s",
                                   len(self.spool), err)  # fmt: skip
                backoff = min(FORWARD_RETRY_MAX_S, max(self.cfg.flush_period, 2 * backoff))
            else:
                if self._forward_error:
                    log.info("the server answers again: the spool is sent, in order")
                backoff, self._forward_error = 0.0, ""

    def forward(self) -> int:
        """The spool's rows to the server, oldest first, until it is empty or the node stops; each batch
        deleted from the spool only after the server answered (StoreUnavailable: the rest stay). Rows of a
        model the store does not hold are refused, counted and deleted: no server would ever take them. A batch
        the server refuses for good (StoreRefused) is set aside in the spool, counted and logged, so the rows
        behind it go on."""
        from ..memory.store import StoreMismatch, StoreRefused

        sent = 0
        while not self._stop.is_set():
            batches = self.spool.peek(self.cfg.batch_rows)
            if not batches:
                break
            for b in batches:
                n = len(b.rows.vectors)
                try:
                    c = self.memory.add(b.rows, cache=False)
                except StoreMismatch as err:
                    self._refuse(n, str(err))
                    self.spool.ack(b.last_seq)
                except StoreRefused as err:
                    self._set_aside(b, str(err))
                else:
                    self.counters.inc("written", c.written)
                    self.counters.inc("skipped", c.skipped)
                    self.counters.inc("forwarded", n)
                    self.spool.ack(b.last_seq)
                sent += n
                if self._stop.is_set():
                    break
        return sent

    def _set_aside(self, batch, why: str) -> None:
        """A batch the server refused for good out of the line, kept in the spool's `refused` table."""
        n = self.spool.set_aside(batch.last_seq, why)
        self.counters.inc("set_aside", n)
        self._last_set_aside = why
        self._warn_aside(log.error, "set aside %d rows (spool seq up to %d) in %s, table refused: the server "
                         "refused them: %s", n, batch.last_seq, self.spool.folder, why)  # fmt: skip

    # diagnostics and lifecycle ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            pending = len(self._pending)
        out = {**self.counters.snapshot(), "pending": pending, "rows": self.memory.held,
               "model": self.memory.model_id or "", "store": self.memory.spec, "robot": self.robot,
               "transport": self.transport.name, "thread_failures": self.supervisor.failures()}  # fmt: skip
        if self.spool is not None:  # rows: this robot's cached ones; the server's count is the server's
            out.update(spool_rows=len(self.spool), spool_mb=round(self.spool.bytes / 2**20, 3),
                       spool_set_aside=self.spool.aside_rows)  # fmt: skip
        return out

    def publish_diagnostics(self) -> None:
        st = self.stats()
        values = dict(st)
        fault = self.supervisor.recent_fault()
        if fault:
            level, text = ERROR, fault
        elif st["refused"]:
            level, text = WARN, f"rows refused: {self._last_refusal}"
        elif st.get("spool_set_aside"):
            level, text = WARN, (f"{st['spool_set_aside']} rows set aside in the spool, refused by the server: "
                                 f"{self._last_set_aside or 'before this start'}")  # fmt: skip
        elif self._forward_error:
            level, text = WARN, f"the server does not answer, {st['spool_rows']} rows spooled: {self._forward_error}"
        elif st["queries_refused"]:
            level, text = WARN, f"queries refused: {self._last_query_error}"
        elif st["dropped"] + st["rejected"]:
            level, text = WARN, "rows dropped or rejected (see the counts)"
        elif self.spool is not None:
            level, text = OK, f"{st['forwarded']} rows forwarded to {st['store']}, {st['spool_rows']} spooled"
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
        via = f" through the spool {self.spool.folder} ({len(self.spool)} rows waiting)" if self.spool else ""
        log.info("ready: %s -> %s%s (robot %s, %d rows held here, model %s), batches of %d or every %.1f s, "
                 "transport %s", ", ".join(self.cfg.topics()), self.memory.spec, via, self.robot, self.memory.held,
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
        self._forward_wake.set()
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
            if self.spool is not None:
                if len(self.spool):
                    log.info("%d rows wait in the spool %s: sent at the next start", len(self.spool), self.spool.folder)
                self.spool.close()


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


def robot_name(cfg: cfgmod.MemoryConfig, transport: Transport) -> str:
    """`robot`, else the node's namespace (rclpy: `ros2 run ... -r __ns:=/robot7`), else the host name: the pip
    path has no namespace, and the node's name is the same on every robot."""
    if cfg.robot:
        return cfg.robot
    node = getattr(transport, "node", None)
    namespace = node.get_namespace().strip("/") if hasattr(node, "get_namespace") else ""
    return namespace or socket.gethostname()


def _build(cfg: cfgmod.MemoryConfig, transport: Transport) -> MemoryNode:
    from ..core.resources import data_home
    from ..memory.spool import Spool
    from ..memory.store import StoreError, VisualMemory, is_server

    robot = robot_name(cfg, transport)
    server = is_server(cfg.store)
    if server and (cfg.max_rows or cfg.max_age):
        raise MemoryLoadError(f"cannot start the memory node: retention (max_rows, max_age) applies to an embedded "
                              f"store; the server {cfg.store} holds the fleet's rows")  # fmt: skip
    spool = None
    try:  # a server that does not answer yet is no reason to stop: rows wait in the spool
        memory = VisualMemory(cfg.store or None, cfg.cache_rows, cfg.cache_seconds, connect=not server)
    except StoreError as err:
        raise MemoryLoadError(f"cannot start the memory node: {err}") from err
    try:
        if server:
            spool = Spool(Path(cfg.spool) if cfg.spool else data_home() / "memory-spool" / robot, cfg.spool_max_mb)
        return MemoryNode(cfg, transport, memory, _text_tower(cfg, memory), spool, robot)
    except StoreError as err:  # the spool folder: another node's, or damaged
        memory.close()
        raise MemoryLoadError(f"cannot start the memory node: {err}") from err
    except BaseException:
        memory.close()  # the folder's lock goes with a node that does not start
        if spool is not None:
            spool.close()
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return node_main(argv, "openclaw-vision memory", NODE_NAME, cfgmod.MemoryConfig, "memory.yaml", COUNTS,
                     _build, (MemoryLoadError,), log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
