"""`openclaw-vision serve` as a child process, for the tests and `bench --mode triton`.

The server is a process group (our Python, tritonserver, the Python-backend stub), started in a
session of its own so that stopping it, or killing it to play an outage, takes all of it and
leaves no tritonserver behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..errors import OpenclawError


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
    def __init__(self, model_path: Path, address: str, log_path: Path, extra: list[str] | None = None,
                 start_timeout: float = 120.0) -> None:  # fmt: skip
        self.model_path, self.address, self.log_path = Path(model_path), address, Path(log_path)
        self.extra, self.start_timeout = list(extra or []), start_timeout
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "openclaw_vision.cli", "serve", "--model-path", str(self.model_path),
               "--address", self.address, *self.extra]  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes it for as long as it runs
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True, text=True)
        log.close()
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.extend(self._first_url()), daemon=True)
        reader.start()
        reader.join(self.start_timeout)
        if not got:
            self.stop()
            tail = self.log_path.read_text(errors="replace").splitlines()[-15:]
            raise ServerError(f"serve did not print its URL within {self.start_timeout} s:\n" + "\n".join(tail))
        self.url = got[0]
        return self

    def _first_url(self) -> list[str]:
        for line in self.proc.stdout:
            if line.startswith("grpc://"):
                return [line.strip()]
        return []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group at once: an outage, nothing shut down cleanly."""
        self._end(signal.SIGKILL, 0.0)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the server unloads and exits), then SIGKILL for whatever is left of the group."""
        self._end(signal.SIGTERM, timeout)

    def _end(self, sig: int, timeout: float) -> None:
        """Signal the group, wait, SIGKILL what is left. The shared-memory segments its processes had
        mapped (PyTriton's tensor store, the Python backend's region) outlive them in /dev/shm even
        after a clean stop (measured, PyTriton 0.7.0): those that no process maps any more are removed
        (a client's own region, mapped by the client too, stays)."""
        if self.proc is None:
            return
        segments = mapped_shm(self.proc.pid) if self.proc.poll() is None else set()
        workspaces = pytriton_workspaces(self.proc.pid) if self.proc.poll() is None else set()
        if self.proc.poll() is None and timeout > 0:
            self._signal_group(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL below, then
                self.proc.wait(timeout=timeout)
        self._signal_group(signal.SIGKILL)  # the group: a tritonserver that outlived its parent too
        self.proc.wait(timeout=30)
        for _ in range(50):  # the group's last members are reaped by init a moment after the leader
            if not self._group_alive():
                break
            time.sleep(0.05)
        for seg in segments - mapped_shm():
            seg.unlink(missing_ok=True)
        for ws in workspaces:  # PyTriton's copy of tritonserver per start (~50 MB): a killed one stays behind
            shutil.rmtree(ws, ignore_errors=True)
        if self.proc.stdout:
            self.proc.stdout.close()

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
