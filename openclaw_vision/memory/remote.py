"""A client's connection to the fleet's Chroma server: connecting (bounded: chromadb's HTTP client waits forever
by default), each call and what its failure means.

Apart from the store seam because a server's failures are of two kinds that callers treat differently: a
server that does not answer is `StoreUnavailable` (at open, unless `connect=False`, and on any later call; the
client is dropped and the next call connects again: a robot's client outlives the server's restarts), and a
request the server answers with a refusal of what was sent (its validation: `refused_for_good`) is
`StoreRefused`: the same request would be refused again. Nothing of the server's rows is read at open."""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlparse

from .engine import COLLECTION, SERVER_HNSW, Engine, settings
from .errors import StoreError, StoreRefused, StoreUnavailable

#: seconds a server call may take, and its connection: chromadb's HTTP client waits forever by default, and a
#: server that hangs (stopped, or a network that drops packets) would stall a robot's forwarder and queries
SERVER_TIMEOUT_S, CONNECT_TIMEOUT_S = 30.0, 5.0
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


def server_client(spec: str):
    """chromadb's HttpClient for `http(s)://HOST:PORT`, its calls bounded by SERVER_TIMEOUT_S; StoreUnavailable
    when no server answers there."""
    import urllib.request

    import chromadb
    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)  # else one INFO line per request, at camera rate
    url = urlparse(spec)
    port = url.port or (443 if url.scheme == "https" else 8000)
    host = url.hostname or "127.0.0.1"
    try:  # first a heartbeat of our own, bounded: the client's constructor calls the server without a timeout
        with urllib.request.urlopen(f"{url.scheme}://{host}:{port}/api/v2/heartbeat", timeout=CONNECT_TIMEOUT_S):
            pass
        client = chromadb.HttpClient(host=host, port=port, ssl=url.scheme == "https", settings=settings())
        session = getattr(getattr(client, "_server", None), "_session", None)  # chromadb's httpx.Client
        if session is not None:
            session.timeout = httpx.Timeout(SERVER_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        client.heartbeat()
    except Exception as err:
        raise StoreUnavailable(f"{spec}: no Chroma server answers there ({type(err).__name__}: {err})") from err
    return client


class Server(Engine):
    """A server store's client: its collection if some robot made it; every call under one lock, connecting
    first when the last call dropped the client. connect=False: no server at open is not an error."""

    hnsw = SERVER_HNSW

    def __init__(self, spec: str, connect: bool = True) -> None:
        super().__init__(spec)
        self._lock = threading.Lock()
        try:
            self.connect()
        except StoreUnavailable:
            if connect:
                raise

    def connect(self) -> None:
        """A server client and its collection (if some robot made it already); nothing of its rows is read."""
        self.client = server_client(self.spec)
        try:
            self.collection = self.client.get_collection(COLLECTION, embedding_function=None)
        except Exception as err:  # chromadb raises NotFoundError (1.x) or ValueError (older) for a missing one
            if "does not exist" not in str(err) and type(err).__name__ != "NotFoundError":
                self.client = None
                raise StoreUnavailable(f"{self.spec}: the server did not answer ({type(err).__name__}: {err})") \
                    from err  # fmt: skip
            self.collection = None
        self.read_model()

    def call(self, what: str, fn):
        """`fn(collection)` on the server: connect first if needed. A request refused for good
        (`refused_for_good`) is StoreRefused and keeps the client (the server answered); any other failure is
        StoreUnavailable and drops the client, so the next call connects again. None: no collection yet."""
        with self._lock:
            if self.client is None or self.collection is None:
                self.connect()
            if self.collection is None:
                return None
            try:
                return fn(self.collection)
            except StoreError:
                raise
            except Exception as err:
                why = f"{self.spec}: {what} failed ({type(err).__name__}: {err})"
                if refused_for_good(err):
                    raise StoreRefused(f"{why}; sending it again would not change that") from err
                self.client, self.collection = None, None
                raise StoreUnavailable(why) from err

    def put(self, part: dict) -> None:
        # upsert: a batch resent after a crash or a lost reply is the same rows, once
        self.call("writing rows", lambda c: c.upsert(**part))

    def create(self, model_id: str, dim: int) -> None:
        """The collection, made if no robot made it yet; the first robot's model id is the store's."""
        with self._lock:
            if self.client is None:
                self.connect()
            if self.collection is None:
                try:
                    self.collection = self.make(model_id, dim)
                except Exception as err:
                    self.client = None
                    raise StoreUnavailable(f"{self.spec}: creating the collection failed ({err})") from err
        self.read_model()  # get_or_create: another robot's model id may be the store's

    def refresh(self) -> None:
        """A client that knows no collection yet looks again: another robot may have made it."""
        if self.collection is None:
            with self._lock:
                self.connect()

    def existing(self, ids: list[str]) -> set[str]:
        """Which of `ids` the server holds (one call per batch, nothing but the ids comes back)."""
        got = self.call("a lookup by id", lambda c: c.get(ids=ids, include=[]))
        return set(got["ids"]) if got is not None else set()

    def count(self) -> int:
        """Rows on the server (a call; StoreUnavailable)."""
        return int(self.call("count", lambda c: c.count()) or 0)
