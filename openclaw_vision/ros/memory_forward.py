"""Store and forward: a memory node with a server store writes each batch to the spool on the robot's own disk
(memory/spool.py) and the bounded recent cache, and a forwarder thread sends the spool's rows on to the server,
oldest first, deleting them only after the server answered.

Apart from the node because it is a mechanism of its own, with its own thread, state and failures: a server
that does not answer is retried with a backoff (`forward_failures`, the status WARN until it answers); a batch
the server refuses for good (its validation, `store.refused_for_good`) is set aside in the spool's `refused`
table with the reason (`set_aside`), logged, and the rows behind it go on; rows beyond the spool's bound, or of
another model than the store's, are refused (the node's `refuse`: counted, logged, shown)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..runtime import config as cfgmod
from ..runtime.stats import Counters
from .subscription import Throttle

log = logging.getLogger("memory_node")  # the node's logger: these lines are the node's
#: seconds the forwarder waits at most before it tries a server that failed again (doubling from flush_period)
FORWARD_RETRY_MAX_S = 5.0


class Forwarder:
    """The spool between a node's writer and the server `memory`. `cfg` gives the node's configuration now
    (flush_period changes at run time); `refuse(n, why)` accounts for rows refused; `stop` ends the loop."""

    def __init__(self, cfg: Callable[[], cfgmod.MemoryConfig], memory, spool, counters: Counters,
                 refuse: Callable[[int, str], None], stop: threading.Event) -> None:  # fmt: skip
        self.cfg, self.memory, self.spool, self.counters = cfg, memory, spool, counters
        self._refuse, self._stop = refuse, stop
        self._wake = threading.Event()
        self.error = ""  # the server's last failure; "" once a batch went through
        self.last_set_aside = ""
        self._warn = Throttle()
        self._warn_aside = Throttle()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """The spool closed at the node's stop; rows still in it are sent at the next start."""
        if len(self.spool):
            log.info("%d rows wait in the spool %s: sent at the next start", len(self.spool), self.spool.folder)
        self.spool.close()

    # writer thread ------------------------------------------------------------------------
    def put(self, batch) -> None:
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
            self._wake.set()
        if taken < n:
            self._refuse(n - taken, f"the spool {self.spool.folder} is full (spool_max_mb {self.cfg().spool_max_mb:g}, "
                         f"{len(self.spool)} rows wait for the server {self.memory.spec}, "
                         f"{self.spool.aside_rows} were set aside)")  # fmt: skip

    # forwarder thread ---------------------------------------------------------------------
    def loop(self) -> None:
        from ..memory.store import StoreUnavailable

        backoff = 0.0
        while not self._stop.is_set():
            if backoff:
                self._stop.wait(backoff)
            else:
                self._wake.wait(self.cfg().flush_period)
                self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.forward()
            except StoreUnavailable as err:
                self.counters.inc("forward_failures")
                self.error = str(err)
                self._warn(log.warning, "the server does not answer; %d rows wait in the spool: %s",
                           len(self.spool), err)  # fmt: skip
                backoff = min(FORWARD_RETRY_MAX_S, max(self.cfg().flush_period, 2 * backoff))
            else:
                if self.error:
                    log.info("the server answers again: the spool is sent, in order")
                backoff, self.error = 0.0, ""

    def forward(self) -> int:
        """The spool's rows to the server, oldest first, until it is empty or the node stops; each batch
        deleted from the spool only after the server answered (StoreUnavailable: the rest stay). Rows of a
        model the store does not hold are refused, counted and deleted: no server would ever take them. A batch
        the server refuses for good (StoreRefused) is set aside in the spool, counted and logged, so the rows
        behind it go on."""
        from ..memory.store import StoreMismatch, StoreRefused

        sent = 0
        while not self._stop.is_set():
            batches = self.spool.peek(self.cfg().batch_rows)
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
        self.last_set_aside = why
        self._warn_aside(log.error, "set aside %d rows (spool seq up to %d) in %s, table refused: the server "
                         "refused them: %s", n, batch.last_seq, self.spool.folder, why)  # fmt: skip

    # diagnostics --------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {"spool_rows": len(self.spool), "spool_mb": round(self.spool.bytes / 2**20, 3),
                "spool_set_aside": self.spool.aside_rows}  # fmt: skip

    def problem(self, st: dict[str, Any]) -> str:
        """What keeps the node's status at WARN ("" if nothing): rows set aside, a server that does not answer."""
        if st["spool_set_aside"]:
            return (f"{st['spool_set_aside']} rows set aside in the spool, refused by the server: "
                    f"{self.last_set_aside or 'before this start'}")  # fmt: skip
        if self.error:
            return f"the server does not answer, {st['spool_rows']} rows spooled: {self.error}"
        return ""
