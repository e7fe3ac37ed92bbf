"""`openclaw-vision serve` as a child process, for the tests and `bench --mode triton`.

The server is a process group (our Python, tritonserver, the Python-backend stub), started in a
session of its own so that stopping it, or killing it to play an outage, takes all of it and
leaves no tritonserver behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from ..core import children
from ..core.errors import OpenclawError


class ServerError(OpenclawError, RuntimeError):
    """The server did not come up (its log's tail says why)."""


def mapped_shm(pgid: int | None = None) -> set[Path]:
    """/dev/shm files mapped by the processes of process group `pgid` (all processes: None), from /proc."""
    found: set[Path] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if pgid is not None and os.getpgid(int(proc.name)) != pgid:
                continue
            maps = (proc / "maps").read_text()
        except (OSError, ProcessLookupError):
            continue
        found.update(Path(line.split(None, 5)[5].removesuffix(" (deleted)")) for line in maps.splitlines()
                     if line.count(" ") >= 5 and "/dev/shm/" in line)  # fmt: skip
    return found


def pytriton_workspaces(pgid: int) -> set[Path]:
    """The PyTriton workspace folders (…/pytriton/workspace_*) that process group `pgid`'s tritonserver runs from."""
    found: set[Path] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        for arg in argv:
            parts = Path(arg.decode(errors="replace")).parts
            for i, part in enumerate(parts[:-1]):
                if part == "pytriton" and parts[i + 1].startswith("workspace_"):
                    found.add(Path(*parts[: i + 2]))
    return found


class ServerProcess:
    """`openclaw-vision serve --model-path M --address A` as a child (children.Child: a group of its own),
    started by `start()` (or `with`), which returns once the server printed its gRPC URL."""

    def __init__(self, model_path: Path, address: str, log_path: Path, extra: list[str] | None = None,
                 start_timeout: float = 120.0) -> None:  # fmt: skip
        self.model_path, self.address, self.log_path = Path(model_path), address, Path(log_path)
        self.extra, self.start_timeout = list(extra or []), start_timeout
        self.child: children.Child | None = None
        self.url = ""

    def start(self) -> ServerProcess:
        """Start the server; return once its URL line (`grpc://HOST:PORT`, printed when the model is ready)
        is in its log (stdout and stderr both)."""
        argv = children.cli("serve", "--model-path", str(self.model_path), "--address", self.address, *self.extra)
        self.child = children.Child(argv, self.log_path)
        self.url = self.child.wait_for_line("grpc://", self.start_timeout)
        if not self.url:
            how = self.child.how
            self.stop()
            tail = self.child.log_text().splitlines()[-15:]
            raise ServerError(f"serve did not print its URL within {self.start_timeout} s ({how}):\n" + "\n".join(tail))
        return self

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def kill(self) -> None:
        """SIGKILL the whole group at once: an outage, nothing shut down cleanly."""
        self._end(signal.SIGKILL, 0.0)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the server unloads and exits), then SIGKILL for whatever is left of the group."""
        self._end(signal.SIGTERM, timeout)

    def _end(self, sig: int, timeout: float) -> None:
        """Stop the group (children.Child.stop: `sig`, SIGKILL after `timeout`, then the whole group), wait
        until its last member is gone, and remove what it leaves behind. The shared-memory segments its
        processes had mapped (PyTriton's tensor store, the Python backend's region) outlive them in
        /dev/shm even after a clean stop (measured, PyTriton 0.7.0): those that no process maps any more
        are removed (a client's own region, mapped by the client too, stays)."""
        if self.child is None:
            return
        running = self.child.alive()
        segments = mapped_shm(self.child.pgid) if running else set()
        workspaces = pytriton_workspaces(self.child.pgid) if running else set()
        self.child.stop(timeout=timeout, stop_signal=sig)
        for _ in range(50):  # the group's last members are reaped by init a moment after the leader
            if not self._group_alive():
                break
            time.sleep(0.05)
        for seg in segments - mapped_shm():
            seg.unlink(missing_ok=True)
        for ws in workspaces:  # PyTriton's copy of tritonserver per start (~50 MB): a killed one stays behind
            shutil.rmtree(ws, ignore_errors=True)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.child.pgid, 0)
        except ProcessLookupError:
            return False
        return True

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
