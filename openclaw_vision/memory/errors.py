"""The store's errors, in one leaf module: the folder, the server connection, the row table and the store seam
each raise these same types (store.py re-exports them, so callers import them from there)."""

from __future__ import annotations

from ..core.errors import OpenclawError


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
