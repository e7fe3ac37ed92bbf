"""Start and stop a node (encoder or VLM) as a child process (demo, benchmarks, tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .cyclone import ensure_loopback_config


class NodeProcess:
    """`openclaw-vision <node> ...` (encoder or vlm) in a subprocess, on loopback DDS, stopped with SIGINT."""

    def __init__(
        self, args: list[str], log_path: Path | None = None, env: dict[str, str] | None = None, node: str = "encoder"
    ) -> None:
        ensure_loopback_config()  # the child inherits CYCLONEDDS_URI
        full_env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self._log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openclaw_vision.cli", node, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def __enter__(self) -> NodeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
