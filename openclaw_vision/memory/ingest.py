"""The fleet's ingest: one writer in front of one Chroma server (`openclaw-vision ingest --server URL`).

Why it exists: Chroma 1.5.9's single-node server cannot take overlapping writes to one collection. Each add
waits for a backfill of the log; when adds overlap, a backfill that found nothing new still moves the HNSW
writer's last-seen sequence id, so rows are counted again, the index is saved early, and every waiting add
waits for the save (docs/memory.md, "Overlapping adds"). Eight robots sending 30 rows a second each waited
1.3-2.0 s per add; one writer sending the same 240 rows in one add waited 115 ms. Robots are separate
processes on separate machines: none can keep its add from overlapping another's. A process beside the
server can.

What it does: an HTTP pass-through (robots' `--store http://INGEST:PORT`). Every request goes to the server
unchanged, except a collection's writes (POST .../collections/ID/upsert or /add), which it sends one at a
time per collection: the writes that arrived while the previous one was at the server are merged into one
(group commit), so the server sees one writer however many robots there are, and a robot alone adds no wait.

What it promises:
- A robot's write is answered only after the server answered the merged write that carried it, with the
  server's answer. The ingest holds no rows of its own: a robot's spool keeps them until that answer, so an
  ingest that dies loses nothing (the robot's forwarder retries, and writes are upserts by row id).
- Writes merge only when they can be one request: their ids disjoint, the same optional fields present, the
  same embedding encoding, the same other fields and the same request headers (a robot's credentials never
  carry another robot's rows). The rest wait for the next round, in arrival order.
- A merged write the server refuses (a 4xx of its validation, not one of remote.RETRIED_4XX) is sent again
  as its parts, one by one, so each robot gets its own answer and one robot's bad row never costs another's
  rows.
- The server unreachable: each waiting write is answered 502 (a robot's client retries: `remote.py`).

`GET /openclaw/ingest`: its counters as JSON (writes in, writes sent, rows, the largest merge, writes sent
again apart, the server's failures).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..core.commands import Command
from .remote import CONNECT_TIMEOUT_S, RETRIED_4XX, SERVER_TIMEOUT_S

log = logging.getLogger("memory_ingest")

#: a collection's writes (Chroma's v2 HTTP API): merged per collection
WRITE_PATH = re.compile(r"^/api/v2/tenants/[^/]+/databases/[^/]+/collections/[^/?]+/(upsert|add)$")
#: a write's per-row lists, concatenated when writes merge (every other field must be equal)
ROW_FIELDS = ("ids", "embeddings", "metadatas", "documents", "uris")
#: rows in one merged write at most (a single larger write is sent as it came); far below Chroma's own batch
#: bound (its pre-flight `max_batch_size`), and a few seconds of a large fleet at camera rate
MERGE_MAX_ROWS = 2048
#: headers that belong to one connection, not to the request (RFC 9110 7.6.1), and the ones re-made here
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length", "accept-encoding", "content-encoding"})  # fmt: skip
STATS_PATH = "/openclaw/ingest"


@dataclass
class Reply:
    """What goes back to the robot: the server's answer (or the ingest's own, when the server is unreachable)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def _error(status: int, name: str, message: str) -> Reply:
    """An error in Chroma's body shape; an `error` name chromadb does not know is raised as a plain Exception
    by its client, which `remote.refused_for_good` retries."""
    body = json.dumps({"error": name, "message": message}).encode()
    return Reply(status, [("content-type", "application/json")], body)


@dataclass
class _Write:
    """One robot's write, waiting for its turn: its body, the key it merges under, its reply once answered."""

    body: dict[str, Any]
    raw: bytes
    headers: list[tuple[str, str]]
    key: tuple
    reply: Reply | None = None

    @property
    def rows(self) -> int:
        return len(self.body["ids"])


@dataclass
class _Line:
    """One collection's writes: at most one at the server (`busy`), the others waiting in arrival order."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    pending: list[_Write] = field(default_factory=list)
    busy: bool = False


def _merge_key(body: Any, headers: list[tuple[str, str]]) -> tuple | None:
    """What writes must share to be sent as one; None: this body is not a write that can merge (the server
    answers it as it is)."""
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list) or not body["ids"]:
        return None
    shape = []
    for name in sorted(body):
        value = body[name]
        if name in ROW_FIELDS:
            if value is not None and (not isinstance(value, list) or len(value) != len(body["ids"])):
                return None
            kind = None if value is None else type(value[0]).__name__ if name == "embeddings" else "list"
            shape.append((name, kind))
        else:
            shape.append((name, json.dumps(value, sort_keys=True)))
    return tuple(shape), tuple(sorted(headers))


def _merged(parts: list[_Write]) -> bytes:
    """One request body carrying every part's rows, in order."""
    out: dict[str, Any] = {}
    for name, value in parts[0].body.items():
        if name in ROW_FIELDS and value is not None:
            out[name] = [x for p in parts for x in p.body[name]]
        else:
            out[name] = value
    return json.dumps(out, separators=(",", ":")).encode()


class Ingest:
    """The pass-through and its per-collection lines of writes; `serve_forever()` answers on `url`."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0,
                 max_rows: int = MERGE_MAX_ROWS) -> None:  # fmt: skip
        import httpx

        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.upstream = upstream.rstrip("/")
        self.max_rows = max_rows
        self._client = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(SERVER_TIMEOUT_S,
                                    connect=CONNECT_TIMEOUT_S), limits=httpx.Limits(max_connections=64))  # fmt: skip
        self._lines: dict[str, _Line] = {}
        self._lines_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.stats = {"requests": 0, "writes_in": 0, "writes_sent": 0, "rows": 0, "largest_merge": 0,
                      "sent_apart": 0, "server_failures": 0}  # fmt: skip
        handler = type("IngestHandler", (_Handler,), {"ingest": self})
        self.httpd = _Server((host, port), handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._serving = threading.Event()

    def count(self, **incs: int) -> None:
        with self._stats_lock:
            for k, v in incs.items():
                self.stats[k] += v

    # the server --------------------------------------------------------------------------
    def send(self, method: str, path: str, body: bytes, headers: list[tuple[str, str]]) -> Reply:
        """One request to the server as it came; 502 when the server cannot be reached."""
        import httpx

        try:
            r = self._client.request(method, path, content=body or None, headers=headers)
        except httpx.HTTPError as err:
            self.count(server_failures=1)
            log.warning("the server %s did not answer %s %s: %s", self.upstream, method, path, err)
            why = f"the ingest could not reach the server {self.upstream}: {type(err).__name__}: {err}"
            return _error(502, "IngestUpstreamUnavailable", why)
        kept = [(k, v) for k, v in r.headers.items() if k.lower() not in HOP_HEADERS]
        return Reply(r.status_code, kept, r.content)

    # a collection's writes ---------------------------------------------------------------
    def write(self, path: str, raw: bytes, headers: list[tuple[str, str]]) -> Reply:
        """A robot's write, sent with the writes that wait beside it once the collection's previous write has its
        answer; this write's answer."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        key = _merge_key(body, headers)
        if key is None:  # not a write this can read: the server says what is wrong with it
            return self.send("POST", path, raw, headers)
        w = _Write(body, raw, headers, key)
        with self._lines_lock:
            line = self._lines.setdefault(path, _Line())
        with line.cond:
            line.pending.append(w)
            self.count(writes_in=1, rows=w.rows)  # once in line: a write counted is one the next round can take
            while w.reply is None:
                if line.busy:
                    line.cond.wait()
                    continue
                batch = self._take(line)
                line.busy = True
                line.cond.release()
                try:
                    replies = self._send_writes(path, batch)
                except Exception as err:  # a fault of ours: every robot in the batch is told, none waits forever
                    log.exception("sending %d writes to %s failed", len(batch), path)
                    replies = [_error(500, "IngestInternalError", f"{type(err).__name__}: {err}")] * len(batch)
                finally:
                    line.cond.acquire()
                for part, reply in zip(batch, replies, strict=True):
                    part.reply = reply
                line.busy = False
                line.cond.notify_all()
        return w.reply

    def _take(self, line: _Line) -> list[_Write]:
        """The oldest waiting write and every later one that can merge with it (same key, ids disjoint, within
        max_rows), out of the line."""
        first = line.pending[0]
        batch, ids, rows = [first], set(first.body["ids"]), first.rows
        for w in line.pending[1:]:
            if w.key != first.key or rows + w.rows > self.max_rows or not ids.isdisjoint(w.body["ids"]):
                continue
            batch.append(w)
            ids.update(w.body["ids"])
            rows += w.rows
        taken = {id(w) for w in batch}
        line.pending = [w for w in line.pending if id(w) not in taken]
        return batch

    def _send_writes(self, path: str, batch: list[_Write]) -> list[Reply]:
        """The batch as one write; refused for what was sent (a 4xx the server would answer again: not one of
        remote.RETRIED_4XX, which are about credentials or the server's load and every part would get alike) as
        a merge, each part again on its own."""
        with self._stats_lock:
            self.stats["writes_sent"] += 1
            self.stats["largest_merge"] = max(self.stats["largest_merge"], len(batch))
        if len(batch) == 1:
            return [self.send("POST", path, batch[0].raw, batch[0].headers)]
        reply = self.send("POST", path, _merged(batch), batch[0].headers)
        if not 400 <= reply.status < 500 or reply.status in RETRIED_4XX:
            return [reply] * len(batch)
        log.info("the server refused a merge of %d writes (%d): each is sent again on its own", len(batch),
                 reply.status)  # fmt: skip
        self.count(sent_apart=len(batch), writes_sent=len(batch))
        return [self.send("POST", path, w.raw, w.headers) for w in batch]

    # serving -----------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._serving.set()
        self.httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """serve_forever returns (from another thread: this waits for it); nothing to do if it never ran."""
        if self._serving.is_set():
            self.httpd.shutdown()

    def close(self) -> None:
        self.stop()
        self.httpd.server_close()
        self._client.close()


class _Server(ThreadingHTTPServer):
    """A thread per robot connection (daemon: a stop does not wait for robots' idle kept-alive connections); a
    listen backlog for a fleet that connects at once (socketserver's default is 5: the rest would retry SYNs)."""

    daemon_threads = True
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    """One robot connection (HTTP/1.1, kept alive: chromadb's client holds its connection)."""

    protocol_version = "HTTP/1.1"
    #: the reply's headers and body are two sends; with Nagle's algorithm the body waits for the client's
    #: delayed ACK of the headers (~40 ms on Linux): queries through the ingest took 60 ms, not 13, before this
    disable_nagle_algorithm = True
    ingest: Ingest

    def _handle(self) -> None:
        self.ingest.count(requests=1)
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            self._reply(_error(411, "IngestLengthRequired", "the ingest takes bodies with a Content-Length only"))
            return
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_HEADERS]
        if self.command == "GET" and self.path == STATS_PATH:
            with self.ingest._stats_lock:
                body = json.dumps(self.ingest.stats).encode()
            self._reply(Reply(200, [("content-type", "application/json")], body))
        elif self.command == "POST" and WRITE_PATH.match(self.path):
            self._reply(self.ingest.write(self.path, raw, headers))
        else:
            self._reply(self.ingest.send(self.command, self.path, raw, headers))

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def _reply(self, reply: Reply) -> None:
        self.send_response(reply.status)
        for k, v in reply.headers:
            if k.lower() not in ("date", "server"):
                self.send_header(k, v)
        self.send_header("content-length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", required=True, help="http://HOST:PORT of the `chroma run` server it writes to")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (a fleet's: the robots' network)")
    p.add_argument("--port", type=int, default=8100, help="port to listen on (0: any free one)")
    p.add_argument("--max-rows", type=int, default=MERGE_MAX_ROWS, help="rows in one merged write at most")


def _run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; the URL robots pass as --store is printed first."""
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] [%(name)s]: %(message)s")
    ingest = Ingest(args.server, args.host, args.port, args.max_rows)

    def stop(signum: int, _frame: Any) -> None:  # shutdown() waits for serve_forever: from another thread
        log.info("%s: stopping", signal.Signals(signum).name)
        threading.Thread(target=ingest.stop, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    print(f"ingest: {ingest.url} -> {ingest.upstream}", flush=True)
    try:
        ingest.serve_forever()
    finally:
        ingest.close()  # serve_forever has returned: stop() returns at once
        log.info("stopped: %s", json.dumps(ingest.stats))
    return 0


COMMAND = Command(_arguments, _run)
