"""The memory node's writer: the rows taken from the pending queue → one store batch per model and width →
the store (embedded), or the spool (a server store: memory_forward.py) → retention (max_rows, max_age).

Apart from the node because it is the one place rows turn into store writes, on the writer thread only, and
where each of them is accounted for: written, skipped (in the store already) or refused with the reason
(another model's or width's than the store's, a disk below `min_free_mb`, any failure of the engine's write:
the writer goes on)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

import numpy as np

from ..runtime import config as cfgmod
from ..runtime.stats import Counters
from .memory_forward import Forwarder
from .subscription import Throttle

log = logging.getLogger("memory_node")  # the node's logger: these lines are the node's

#: a pending row, as the subscription took it: (model id, stamp ns, frame id, topic, vector)
Pending = tuple[str, int, str, str, np.ndarray]


class MemoryWriter:
    """Writes pending rows to `memory` (through `forwarder`, with a server store), counting in `counters`.
    `cfg` gives the node's configuration now; `refuse(n, why)` accounts for refused rows; `warn` is the node's
    throttle for problems with rows."""

    def __init__(self, cfg: Callable[[], cfgmod.MemoryConfig], memory, forwarder: Forwarder | None,
                 counters: Counters, refuse: Callable[[int, str], None], warn: Throttle,
                 robot: str) -> None:  # fmt: skip
        self.cfg, self.memory, self.forwarder, self.counters = cfg, memory, forwarder, counters
        self._refuse, self._warn, self.robot = refuse, warn, robot

    def write(self, pending: list[Pending]) -> None:
        """One Rows per model and width (another model's rows are refused alone), then retention."""
        from ..memory.store import Rows

        cfg = self.cfg()
        by_model: dict[str, list] = {}
        for row in pending:
            by_model.setdefault(row[0], []).append(row)
        spool = self.forwarder.spool if self.forwarder is not None else None
        free = shutil.disk_usage(spool.folder).free if spool is not None else self.memory.free_bytes()
        if free is not None and free < cfg.min_free_mb * 2**20:  # never hand the engine a write it cannot end
            where = "spool's" if spool is not None else "store's"
            self._refuse(len(pending), f"{free / 2**20:.1f} MiB free on the {where} disk, below min_free_mb "
                         f"{cfg.min_free_mb:g}: free space or move the {where[:-2]}")  # fmt: skip
            return
        for model, rows in by_model.items():
            dims = {len(r[4]) for r in rows}
            for dim in sorted(dims):
                part = [r for r in rows if len(r[4]) == dim]
                batch = Rows(np.stack([r[4] for r in part]), [r[1] for r in part], [r[2] for r in part],
                             [r[3] for r in part], model, cfg.source, robot=self.robot)  # fmt: skip
                try:
                    if self.forwarder is not None:
                        self.forwarder.put(batch)
                        continue
                    c = self.memory.add(batch)
                except Exception as err:  # another model, a full disk, the server gone (the engine and its HTTP
                    # client raise their own types): the rows are refused, counted and logged; the writer goes on
                    self._refuse(len(part), str(err))
                    continue
                self.counters.inc("written", c.written)
                self.counters.inc("skipped", c.skipped)
        self.counters.inc("flushes")
        self._retain(cfg)

    def _retain(self, cfg: cfgmod.MemoryConfig) -> None:
        if cfg.max_rows or cfg.max_age:
            try:
                deleted = self.memory.retain(cfg.max_rows, int(cfg.max_age * 1e9))
            except Exception as err:  # retention failing must not stop the writes
                self._warn(log.error, "retention failed: %r", err)
            else:
                self.counters.inc("retained_deleted", deleted)
