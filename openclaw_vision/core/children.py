"""Child processes, one way: each in a process group of its own, always stopped in `finally`.

Everything the package starts as a separate program goes through here: nodes for the demo and the
benches, the Triton server, the ladder's and the memory measurements' fresh interpreters, and the
probes that run a native library which may kill its process (llama.cpp's AMX path dies with SIGILL
on some CPUs) before a node relies on it.

Why a group of its own: a child may start children of its own (tritonserver and its stub, a node
and its runtime's helpers); stopping the group leaves none behind. Why `start_new_session`: a
process started in the background of a non-interactive shell ignores SIGINT, and so would its
children; in a session of its own the group can be signalled as a whole. A child that ends by a
signal is reported with the signal's name, never as a bare negative number.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def python(*args: str) -> list[str]:
    """The argv that runs this interpreter with `args` (e.g. "-m", "openclaw_vision.cli", "demo")."""
    return [sys.executable, *args]


def cli(*args: str) -> list[str]:
    """The argv of `openclaw-vision ARGS` in this interpreter (whatever the console script's PATH says)."""
    return python("-m", "openclaw_vision.cli", *args)


def describe_exit(returncode: int | None) -> str:
    """'exit 2', 'killed by SIGILL', or 'still running': how a child ended, in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


@dataclass(frozen=True)
class Finished:
    """A child that ran to its end (or to its timeout)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def how(self) -> str:
        return "timed out" if self.timed_out else describe_exit(self.returncode)

    def tail(self, lines: int = 20) -> str:
        """The last lines of what it printed (stderr after stdout): for error messages."""
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).rstrip()
        return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _environ(env: Mapping[str, str] | None, inherit: bool) -> dict[str, str]:
    """`env` over this process's environment, or (not `inherit`) `env` alone: a sourced ROS environment
    must not take this venv's PYTHONPATH or ROS_LOCALHOST_ONLY along."""
    return {**(os.environ if inherit else {}), **(env or {})}


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
        stderr_path: Path | None = None, inherit_env: bool = True) -> Finished:  # fmt: skip
    """Run `argv` to its end in a group of its own and return what it printed and how it ended.

    Never raises for the child's failure (a non-zero exit, a signal, the timeout): the caller reads
    `Finished.ok` and says why. On timeout the whole group is killed. `env` is added to this
    process's environment (which is never changed here), or is the whole of it (`inherit_env=False`).
    `stderr_path`: stderr goes to that file instead (a log the caller keeps); `Finished.stderr` is then
    its content.
    """
    t0 = time.perf_counter()
    full_env = _environ(env, inherit_env)
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(open(stderr_path, "w")) if stderr_path else subprocess.PIPE
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, text=True, env=full_env,
                                cwd=cwd, start_new_session=True)  # fmt: skip
        timed_out = False
        try:
            out, errtext = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc.pid, signal.SIGKILL)
            out, errtext = proc.communicate()
        finally:
            if proc.poll() is None:  # interrupted while waiting (KeyboardInterrupt): take the group with us
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
    if stderr_path:
        errtext = Path(stderr_path).read_text(errors="replace")
    return Finished(tuple(argv), proc.returncode, out or "", errtext or "", round(time.perf_counter() - t0, 3),
                    timed_out)  # fmt: skip


class Child:
    """A long-running child (a node, a server) in a group of its own, its output in a log file.

    Use as a context manager, or call `stop()` in a `finally`: the group is stopped with `stop_signal`
    (SIGINT: what `ros2 launch` and our nodes treat as a clean stop), then killed after `timeout`.
    `env` is added to this process's environment, or with `inherit_env=False` is the whole of it. Its
    stdin is /dev/null: in a session of its own it has no business with a terminal (`ros2 bag play`
    would put one in raw mode for its keyboard controls).
    """

    def __init__(self, argv: Sequence[str], log_path: Path | None = None, env: Mapping[str, str] | None = None,
                 cwd: str | Path | None = None, *, inherit_env: bool = True) -> None:  # fmt: skip
        self.argv = tuple(argv)
        self.log_path = Path(log_path) if log_path else None
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environ(env, inherit_env),
                cwd=cwd,
                text=True,
                start_new_session=True,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # the child holds its own descriptor
        self._stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        """The child's process group (its own pid: it leads a session of its own)."""
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int) -> None:
        """Send `sig` to the whole group (an outage test's SIGKILL, a reload's SIGHUP)."""
        _signal_group(self.pgid, sig)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if it is still running after `timeout` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 20.0, stop_signal: int = signal.SIGINT) -> int:
        """Stop the group (`stop_signal`, then SIGKILL after `timeout`); the child's exit code. Once only:
        a second call returns the code (the group id may belong to someone else by then)."""
        if self._stopped:
            return self.proc.returncode
        self._stopped = True
        if self.proc.poll() is None:
            self.send(stop_signal)
            if self.wait(timeout) is None:
                self.send(signal.SIGKILL)
                self.proc.wait()
        # whatever the leader's fate, no member of its group outlives it (while a member lives, the
        # kernel keeps the group id from being reused)
        _signal_group(self.pgid, signal.SIGKILL)
        return self.proc.returncode

    @property
    def how(self) -> str:
        return describe_exit(self.proc.poll())

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def wait_for_line(self, prefix: str, timeout: float, anywhere: bool = False, poll: float = 0.1) -> str:
        """The first line of the log that starts with `prefix` (stripped: a child's "ready" or URL line, printed
        with flush; `anywhere`: that holds it, as a logger's line after its timestamp), or "" once the child
        has exited or `timeout` seconds passed without one, looked for every `poll` seconds. The log is
        polled, not a pipe read by a thread: one CI run saw a server log that it was serving and then no URL
        reach a pipe reader in 116 s, and a file the child writes and this process reads leaves nothing
        between the two to hold a line back (nor a pipe that fills when nobody reads it any more)."""
        deadline = time.monotonic() + timeout
        found = (lambda ln: prefix in ln) if anywhere else (lambda ln: ln.startswith(prefix))
        while True:
            line = next((ln.strip() for ln in self.log_text().splitlines() if found(ln)), "")
            if line or not self.alive() or time.monotonic() > deadline:
                return line
            time.sleep(poll)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now (the kernel's choice), for a server started as a child to listen on."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
