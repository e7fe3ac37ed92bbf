"""The memory node's query service: one QueryMemory request (a text, embedded by the text tower, or a vector)
→ the store's matches, or `ok: false` and the reason.

Apart from the node because it runs on a thread of its own (the service's) and owns its own accounting: a bad
query (neither or both of text and vector, a vector of another width or model than the store's, a text query
without `text_model`, a window that ends before it starts) is counted in `queries_refused`, logged and
answered; on a server store that does not answer, the robot's cached newest rows answer alone, with a note in
`error` (counted in `queries_local`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..core.errors import OpenclawError
from ..core.numerics import l2_normalise
from ..runtime.stats import Counters
from .subscription import Throttle
from .types import QUERY_MEMORY, RESPONSE, Transport

log = logging.getLogger("memory_node")  # the node's logger: these lines are the node's
#: matches a query returns when its top_k is 0, and at most
DEFAULT_TOP_K, MAX_TOP_K = 8, 1000


class QueryError(OpenclawError, ValueError):
    """A QueryMemory request that cannot be answered as asked; the message says why."""


class MemoryQueries:
    """Answers QueryMemory requests from `memory` (and `text`, the text tower, None: vector queries only),
    counting them in the node's `counters`."""

    def __init__(self, memory, text, counters: Counters, transport: Transport) -> None:
        self.memory, self.text, self.counters, self.transport = memory, text, counters, transport
        self._warn = Throttle()
        self.last_error = ""  # the last refused query's reason (diagnostics)
        self._response = transport.msg(QUERY_MEMORY + RESPONSE)

    def on_query(self, req: Any) -> Any:
        """One QueryMemory request → its response; a bad query is answered with ok=false and the reason."""
        self.counters.inc("queries")
        try:
            matches, note = self.query(req)
        except OpenclawError as err:  # QueryError, StoreMismatch, the text tower's errors
            self.counters.inc("queries_refused")
            self.last_error = str(err)
            self._warn(log.warning, "query refused: %s", err)
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
            self._warn(log.warning, "query answered from the local cache only: %s", err)
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
