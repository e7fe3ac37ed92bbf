"""The server engine on this machine: `chroma run` (the chromadb package's own server) on loopback, and the
ingest in front of it (`openclaw-vision ingest`, ingest.py).

On a fleet the server runs wherever the fleet keeps it (`chroma run --path DIR --port 8000`, or Chroma's
container image), the ingest beside it (`openclaw-vision ingest --server http://127.0.0.1:8000 --host 0.0.0.0
--port 8100`), and robots pass `--store http://HOST:8100`. Here both are started as children
(children.Child: each its own process group, stopped in `finally`) for the suite and the bench.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from ..core.children import Child, cli, free_port
from .errors import StoreError


def chroma_program() -> str:
    """The `chroma` console script of this interpreter's environment (beside python), else on PATH."""
    here = Path(sys.executable).parent / "chroma"
    found = str(here) if here.exists() else shutil.which("chroma")
    if not found:
        raise StoreError("no `chroma` program: install the memory extra (pip install 'openclaw_vision[memory]')")
    return found


def start_server(folder: Path, port: int | None = None, log_path: Path | None = None,
                 timeout: float = 30.0) -> tuple[Child, str]:  # fmt: skip
    """`chroma run` on 127.0.0.1 keeping its rows in `folder`; returns the child and its URL once it answers."""
    port = port or free_port()
    child = Child([chroma_program(), "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)],
                  log_path=log_path, env={"ANONYMIZED_TELEMETRY": "False", "NO_COLOR": "1",
                                          "PATH": os.environ.get("PATH", "")})  # fmt: skip
    return child, _answering(child, f"http://127.0.0.1:{port}", "chroma server", timeout)


def _answering(child: Child, url: str, what: str, timeout: float) -> str:
    """`url` once a Chroma heartbeat answers there; StoreError (the child stopped) if `child` exits first or
    `timeout` passes."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise StoreError(f"{what} exited at start ({child.how}): {child.log_text()[-500:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                return url
        except OSError:
            time.sleep(0.2)
    child.stop()
    raise StoreError(f"{what} on {url} did not answer within {timeout:.0f} s")


def start_ingest(server_url: str, port: int | None = None, log_path: Path | None = None,
                 timeout: float = 30.0) -> tuple[Child, str]:  # fmt: skip
    """`openclaw-vision ingest` (memory/ingest.py) on 127.0.0.1 in front of `server_url`, as a child; returns the
    child and the URL robots write to once the server answers through it."""
    port = port or free_port()
    child = Child(cli("ingest", "--server", server_url, "--port", str(port)), log_path=log_path)
    return child, _answering(child, f"http://127.0.0.1:{port}", "the ingest", timeout)
