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

`MemoryNode` is the wiring: the subscriptions, the pending queue, the threads and their lifecycle, the counts
and /diagnostics. Each thread's work is a unit of its own beside it: the writer's (memory_writer.py), store and
forward (memory_forward.py: the spool and the forwarder thread) and the query service (memory_queries.py).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import OpenclawError
from ..runtime import config as cfgmod
from ..runtime import threads
from ..runtime.stats import Counters
from .diagnostics import ERROR, OK, WARN, diagnostic_array, publishers
from .memory_forward import FORWARD_RETRY_MAX_S, Forwarder
from .memory_queries import DEFAULT_TOP_K, MAX_TOP_K, MemoryQueries, QueryError
from .memory_writer import MemoryWriter, Pending
from .runner import every, node_main
from .subscription import Throttle
from .types import DEFAULT, DIAGNOSTIC_ARRAY, QUERY_MEMORY, VISUAL_FEATURES, QoS, Transport

#: the node's names, and those of its units that callers import from here
__all__ = ["COUNTS", "DEFAULT_TOP_K", "FORWARD_RETRY_MAX_S", "MAX_TOP_K", "NODE_NAME", "STATUS_NAME",
           "MemoryLoadError", "MemoryNode", "QueryError", "main", "robot_name"]  # fmt: skip

log = logging.getLogger("memory_node")

NODE_NAME = "memory_node"
STATUS_NAME = f"{NODE_NAME}: memory"
COUNTS = ("received", "written", "skipped", "dropped", "rejected", "refused", "flushes", "retained_deleted",
          "queries", "queries_refused", "spooled", "forwarded", "forward_failures", "queries_local",
          "set_aside")  # fmt: skip


class MemoryNode:
    """/visual_features → the pending queue → the writer (and the forwarder, with a `spool`) → `memory`;
    QueryMemory on `cfg.query_service`; counts on /diagnostics."""

    def __init__(self, cfg: cfgmod.MemoryConfig, transport: Transport, memory, text=None, spool=None,
                 robot: str = "") -> None:  # fmt: skip
        self.cfg, self.transport, self.memory, self.text = cfg, transport, memory, text
        self.spool, self.robot = spool, robot
        self.counters = Counters(COUNTS)
        self._pending: list[Pending] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._warn = Throttle()
        self._last_refusal = ""
        self._diag = transport.publisher("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 1))
        self._subs = [transport.subscribe(topic, VISUAL_FEATURES, DEFAULT, partial(self._on_features, topic))
                      for topic in cfg.topics()]  # fmt: skip
        self.supervisor = threads.Supervisor(self._stop, log)
        self.forwarder = None if spool is None else \
            Forwarder(lambda: self.cfg, memory, spool, self.counters, self._refuse, self._stop)  # fmt: skip
        self.writer = MemoryWriter(lambda: self.cfg, memory, self.forwarder, self.counters, self._refuse, self._warn,
                                   robot)  # fmt: skip
        self._writer_thread = self.supervisor.thread("memory-writer", self._write_loop)
        if self.forwarder is not None:
            self.supervisor.thread("memory-forward", self.forwarder.loop)
        self.supervisor.thread("diagnostics", self._report)
        self.queries = MemoryQueries(memory, text, self.counters, transport)
        self._service = transport.service(cfg.query_service, QUERY_MEMORY, self.on_query)

    # service thread -----------------------------------------------------------------------
    def on_query(self, req: Any) -> Any:
        """One QueryMemory request → its response (memory_queries.MemoryQueries)."""
        return self.queries.on_query(req)

    def query(self, req: Any) -> tuple[list, str]:
        """The matches of one request, and a note ("" or why only the local cache answered)."""
        return self.queries.query(req)

    # transport thread ---------------------------------------------------------------------
    def _on_features(self, topic: str, msg: Any, _deserialize_s: float) -> None:
        from ..preprocess.frame import stamp_to_ns

        self.counters.inc("received")
        vec = np.asarray(msg.embedding, dtype=np.float32)
        if vec.ndim != 1 or not vec.size or not np.isfinite(vec).all() or not np.any(vec):
            self.counters.inc("rejected")
            self._warn(log.warning, "rejected features: %d values, not a finite non-zero vector", vec.size)
            return
        row = (str(msg.model_id), stamp_to_ns(msg.header.stamp), str(msg.header.frame_id), topic, vec)
        with self._lock:
            full = len(self._pending) >= self.cfg.queue_rows
            if not full:
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
        """Rows refused (by the writer or the forwarder): counted, logged, the last reason on /diagnostics."""
        self.counters.inc("refused", n)
        self._last_refusal = why
        self._warn(log.error, "refused %d rows: %s", n, why)

    def flush(self) -> None:
        """Write what is pending: one Rows per model (another model's rows are refused alone)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            self.writer.write(pending)

    def forward(self) -> int:
        """The spool's rows to the server, oldest first (memory_forward.Forwarder.forward); how many."""
        return self.forwarder.forward()

    # diagnostics and lifecycle ------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            pending = len(self._pending)
        out = {**self.counters.snapshot(), "publishers": publishers(self._subs),  # diagnostics.publishers says why
               "pending": pending, "rows": self.memory.held,
               "model": self.memory.model_id or "", "store": self.memory.spec, "robot": self.robot,
               "transport": self.transport.name, "thread_failures": self.supervisor.failures()}  # fmt: skip
        if self.forwarder is not None:  # rows: this robot's cached ones; the server's count is the server's
            out.update(self.forwarder.stats())
        return out

    def publish_diagnostics(self) -> None:
        st = self.stats()
        fault = self.supervisor.recent_fault()
        forwarding = self.forwarder.problem(st) if self.forwarder is not None else ""
        if fault:
            level, text = ERROR, fault
        elif st["refused"]:
            level, text = WARN, f"rows refused: {self._last_refusal}"
        elif forwarding:
            level, text = WARN, forwarding
        elif st["queries_refused"]:
            level, text = WARN, f"queries refused: {self.queries.last_error}"
        elif st["dropped"] + st["rejected"]:
            level, text = WARN, "rows dropped or rejected (see the counts)"
        elif self.forwarder is not None:
            level, text = OK, f"{st['forwarded']} rows forwarded to {st['store']}, {st['spool_rows']} spooled"
        else:
            level, text = OK, f"{st['rows']} rows in {st['store']}"
        self._diag.publish(diagnostic_array(self.transport, STATUS_NAME, level, text, dict(st)))

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
        text = f" and text (tower {self.text.model_id})" if self.text is not None else " only (no text_model)"
        log.info("queries on %s: vectors%s", self.cfg.query_service, text)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.forwarder is not None:
            self.forwarder.wake()
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
            if self.forwarder is not None:
                self.forwarder.close()


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
