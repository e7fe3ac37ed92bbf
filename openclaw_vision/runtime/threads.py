"""Threads the kernel can tell apart, and what each one of a process has spent on the CPU.

Python (3.11) names a thread only for itself: to the kernel every thread it starts is called like
the process ("python3"), as are the runtime's worker threads, so `top -H` or a per-thread CPU table
cannot say which is the transport, the worker or ONNX Runtime. `Thread` sets the kernel's name of
each of our threads (prctl PR_SET_NAME, 15 bytes) when it starts and records its native id, and a
thread it creates (a runtime's pool, spawned lazily on the first call) inherits that name: such a
thread is told from ours by its id. `cpu_by_thread` reads every thread's CPU time of a process
from /proc (Linux; elsewhere it returns nothing and the bench says so).

`Supervisor` runs every loop a node starts on such a thread and keeps it running: a loop that ends
with an unexpected exception is logged once with its traceback, counted, and entered again after a
backoff; too many failures in a window are fatal (the node exits non-zero, so that a launch with
`respawn:=true` starts it again). A thread that dies without a word leaves a node that is up,
subscribed and silent: what a robot cannot tell from a working one.

A leaf module: the nodes and the bench import it; it imports nothing of the package.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_NAME = 15
NAME_BYTES = 15  # the kernel's TASK_COMM_LEN is 16 with the NUL

_ids: dict[int, str] = {}  # native id → our name, for the threads of this process started here
_ids_lock = threading.Lock()
log = logging.getLogger(__name__)


def _prctl():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except OSError:  # not glibc/Linux: names stay Python's own
        return None


_PRCTL = _prctl()


def name_current(name: str) -> None:
    """Give the calling thread `name` in the kernel (truncated to 15 bytes) and record its id."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_NAME, ctypes.c_char_p(name.encode()[:NAME_BYTES]), 0, 0, 0)
    with _ids_lock:
        _ids[threading.get_native_id()] = name


def name_current_as_python() -> None:
    """The calling thread's Python name into the kernel: for pools that name their threads themselves
    (a ThreadPoolExecutor's `initializer`)."""
    name_current(threading.current_thread().name)


def lower_priority(tid: int | None, nice: int, what: str) -> None:
    """Give thread `tid` (a native id) `nice` more niceness (Linux schedules each thread on its own); elsewhere,
    or when refused, it keeps the process's, with one debug line."""
    try:
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    except (AttributeError, OSError, TypeError) as err:
        log.debug("thread %s keeps its priority: %s", what, err)


def task_ids(pid: int | str = "self") -> set[int]:
    """The native thread ids of process `pid` (this one by default) from /proc/<pid>/task; empty where there is
    none."""
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


@contextlib.contextmanager
def lower_threads_started(nice: int):
    """Threads the block starts and leaves running (a runtime's pool made while a model loads) get `nice`
    more niceness: they do the same work as the threads the encode stage starts, which inherit its."""
    before = task_ids()
    yield
    for tid in sorted(task_ids() - before):
        lower_priority(tid, nice, f"{tid} (started at load)")


def ours() -> dict[int, str]:
    """Native id → name of every thread named here that is still alive (the node puts it in its stats)."""
    alive = {t.native_id for t in threading.enumerate()}
    with _ids_lock:
        return {tid: name for tid, name in _ids.items() if tid in alive}


class Thread(threading.Thread):
    """threading.Thread whose kernel name is its Python name (so per-thread CPU can be attributed)."""

    def run(self) -> None:
        name_current(self.name)
        super().run()


#: a loop that failed waits this long before it runs again, doubled after each failure up to BACKOFF_MAX_S
BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0
#: this many failures of one loop within FAULT_WINDOW_S are fatal: the node stops and exits non-zero
MAX_FAILURES = 5
FAULT_WINDOW_S = 60.0


@dataclass
class LoopFaults:
    """What went wrong in one supervised loop: its failures so far and the latest one."""

    failures: int = 0
    last_error: str = ""
    last_at: float = 0.0  # time.monotonic() of the latest failure (0: none)
    recent: deque = field(default_factory=deque)  # monotonic times of the failures inside the window


class Supervisor:
    """Every thread a node starts, each running a loop that returns once the node's `stop` is set.

    A loop that raises is logged once with its traceback (then its name, count and error on
    /diagnostics through `faults()`), and run again after a backoff (BACKOFF_S doubling up to
    BACKOFF_MAX_S) on the same thread, so the thread's name and id stay those the bench and /proc know.
    MAX_FAILURES failures of one loop within FAULT_WINDOW_S are fatal: `fatal` names the loop and
    `on_fatal(reason)` is called (the runner makes the node stop and exit non-zero). A loop that
    returns while the node is not stopping is a failure too: a worker that quietly ends is the fault
    this class exists to catch. `stop` interrupts a backoff, so a stop is never delayed by one.
    """

    def __init__(self, stop: threading.Event, log: logging.Logger,
                 on_fatal: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.stop = stop
        self.log = log
        self.on_fatal = on_fatal or (lambda _reason: None)
        self.fatal = ""  # why the node must end ("": it need not)
        self.threads: list[threading.Thread] = []
        self._faults: dict[str, LoopFaults] = {}
        self._lock = threading.Lock()

    def thread(self, name: str, loop: Callable[[], None], *, until_stopped: bool = True) -> Thread:
        """A daemon Thread (not started) running `loop` under supervision. `until_stopped`: the loop
        runs until the node stops (its return before that is a failure); False: it may end by itself."""
        t = Thread(target=self._run, args=(name, loop, until_stopped), name=name, daemon=True)
        self.threads.append(t)
        with self._lock:
            self._faults[name] = LoopFaults()
        return t

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> list[str]:
        """Join every started thread, in order, within `timeout` seconds in all; the names of those still
        running (a call that does not return)."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        return self.alive()

    def alive(self) -> list[str]:
        return [t.name for t in self.threads if t.is_alive()]

    def _run(self, name: str, loop: Callable[[], None], until_stopped: bool) -> None:
        backoff = BACKOFF_S
        while True:
            try:
                loop()
            except Exception as err:  # BaseException (SystemExit, KeyboardInterrupt) is not ours to keep
                error = f"{type(err).__name__}: {err}"
                self.log.error("thread %s failed (restarting in %.1f s): %s\n%s", name, backoff, error,
                               traceback.format_exc().rstrip())  # fmt: skip
            else:
                if self.stop.is_set() or not until_stopped:
                    return
                error = "the loop returned while the node runs"
                self.log.error("thread %s ended by itself (restarting in %.1f s)", name, backoff)
            if self._record(name, error) or self.stop.wait(backoff):
                return
            backoff = min(2 * backoff, BACKOFF_MAX_S)

    def _record(self, name: str, error: str) -> bool:
        """Count a failure of `name`; True when it is fatal (the thread then ends)."""
        now = time.monotonic()
        with self._lock:
            f = self._faults[name]
            f.failures, f.last_error, f.last_at = f.failures + 1, error, now
            f.recent.append(now)
            while f.recent and now - f.recent[0] > FAULT_WINDOW_S:
                f.recent.popleft()
            if len(f.recent) < MAX_FAILURES or self.fatal:
                return False
            self.fatal = f"thread {name} failed {len(f.recent)} times within {FAULT_WINDOW_S:g} s: {error}"
        self.log.critical("%s: stopping the node (exit code 1; launch with respawn:=true restarts it)", self.fatal)
        self.on_fatal(self.fatal)
        return True

    def faults(self) -> dict[str, LoopFaults]:
        """Name → a copy of its faults, for every supervised loop."""
        with self._lock:
            return {n: LoopFaults(f.failures, f.last_error, f.last_at, deque(f.recent))
                    for n, f in self._faults.items()}  # fmt: skip

    def failures(self) -> int:
        """Failures of every loop so far (the nodes' `thread_failures` count)."""
        with self._lock:
            return sum(f.failures for f in self._faults.values())

    def recent_fault(self, window_s: float = FAULT_WINDOW_S) -> str:
        """'thread NAME failed N times, last: ERROR' for the loop that failed last within `window_s`, or ''."""
        now = time.monotonic()
        with self._lock:
            hit = max(((n, f) for n, f in self._faults.items() if f.failures and now - f.last_at <= window_s),
                      key=lambda nf: nf[1].last_at, default=None)  # fmt: skip
        if hit is None:
            return self.fatal
        name, f = hit
        return self.fatal or f"thread {name} failed {f.failures} time(s), last: {f.last_error}"


class Watchdog:
    """Work keeps arriving but none is finished: a worker that is alive but stuck (a runtime call that never
    returns, a lock never released), which no exception reveals. The supervisor sees threads die; this
    sees them hang.

    `check(arrived, done)` is called at the node's diagnostics cadence with two running counts; it says
    how long the work that arrived since `done` last moved has waited, once that is `period` seconds or
    more. An idle node is never stalled (the clock starts at the first arrival after the last progress),
    and each stall is counted once, however long it lasts. `period` 0 turns it off.
    """

    def __init__(self, period: float) -> None:
        self.period = period
        self.stalls = 0
        self.stalled_s = 0.0  # how long the current stall has lasted (0: none)
        self._done = 0  # the counts as they start: nothing arrived, nothing finished
        self._arrived = 0
        self._waiting_since: float | None = None

    def check(self, arrived: int, done: int, now: float | None = None) -> float:
        """Seconds the waiting work has gone unfinished, when that is a stall; else 0."""
        now = time.monotonic() if now is None else now
        if done != self._done or self.period <= 0:  # progress (or off): the waiting starts again
            self._done, self._arrived, self._waiting_since, self.stalled_s = done, arrived, None, 0.0
            return 0.0
        if arrived == self._arrived:
            return self.stalled_s
        if self._waiting_since is None:
            self._waiting_since = now
        waited = now - self._waiting_since
        if waited < self.period:
            return 0.0
        if not self.stalled_s:
            self.stalls += 1
        self.stalled_s = waited
        return waited


#: a repeat of the first signal within this many seconds is the same request, not a second one: launch
#: run with --noninteractive sends its own SIGINT after the terminal's Ctrl-C reached the whole group
#: (Humble launch/actions/execute_local.py: send_sigint=not due_to_sigint or context.noninteractive)
SAME_REQUEST_S = 1.0


class StopSignals:
    """SIGINT and SIGTERM, from a node's first line to its last (scripts/*_node: before their imports; the
    console scripts: ros.runner.node_main's first line): the first asks the node to stop (and exit 0), a
    second one exits at once with 128 + its number.

    Why from the first line (issue 34's root cause): rclpy.init installs rclpy's own handlers
    (Humble rclpy/__init__.py: SignalHandlerOptions.ALL for the default context), and its SIGTERM handler
    only chains to a Python-level handler: with the default action in place it calls nothing, triggers
    the guard conditions and shuts the context down (rclpy/src/rclpy/signal_handler.cpp). A SIGTERM that
    came after rclpy.init but before the node's own handler was installed was swallowed: the node went
    on starting, installed its handler and then waited for a signal that had already come. Under load
    (a slow start, launch's SIGTERM a moment after "parameters:") that was the encoder still running
    15 s after SIGTERM. Now our handlers are installed before anything else and rclpy installs none
    (ros/rclpy_transport.py passes SignalHandlerOptions.NO), so a signal in any phase is seen.

    The handler takes no lock: it sets a flag and writes a byte to a pipe that `wait` selects on. (An
    Event set from a handler can deadlock: the handler runs in the main thread, which may be inside
    that Event's own wait, holding its lock.) `fail(reason)`, from any thread, asks for a stop that
    exits 1 (a supervised thread that keeps failing)."""

    def __init__(self) -> None:
        self.signal = 0  # the first signal's number (0: none, or a `fail`)
        self.exit_code = 0
        self.reason = ""
        self._set = False
        self._first_at = 0.0
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def install(self) -> StopSignals:
        """Our handlers for SIGINT and SIGTERM, and the pipe as Python's wakeup fd (main thread only)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        return self

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until a stop is asked for (True) or `timeout` seconds pass (False).

        The pipe is also Python's wakeup fd: the interpreter's C-level handler writes to it on whichever
        thread the kernel delivered the signal to. Python runs our handler only in the main thread, and
        only when that thread runs Python code: a signal delivered to another thread (Cyclone DDS blocks
        every signal in the thread creating its threads, pthread_sigmask around pthread_create, so one
        that comes then goes to another thread) does not interrupt the main thread's wait, and without
        this fd a wait with no timeout never ended (seen: the stop bench, a node just matched by a peer)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._set:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            ready, _, _ = select.select([self._read], [], [], left)
            if ready:  # a wake-up: the handler runs at the loop's next turn (it sets the flag) or has run
                with contextlib.suppress(BlockingIOError):
                    os.read(self._read, 4096)
        return self._set

    def _wake(self) -> None:
        self._set = True
        with contextlib.suppress(BlockingIOError):  # the pipe is full of earlier wake-ups: readable already
            os.write(self._write, b"!")

    def _on_signal(self, signum: int, _frame) -> None:
        now = time.monotonic()
        if not self._set:
            self.signal, self._first_at, self.reason = signum, now, signal.Signals(signum).name
            self._wake()
        elif signum != self.signal or now - self._first_at > SAME_REQUEST_S:
            os.write(2, f"second signal ({signal.Signals(signum).name}): exiting now\n".encode())
            os._exit(128 + signum)

    def fail(self, reason: str) -> None:
        """Stop the node and exit with 1 (callable from any thread)."""
        if not self._set:
            self.exit_code, self.reason = 1, reason
            self._wake()


_STOP: StopSignals | None = None


def stop_signals() -> StopSignals:
    """The process's one StopSignals, installed on first use (main thread only, as Python's signal module wants)."""
    global _STOP
    if _STOP is None:
        _STOP = StopSignals().install()
    return _STOP


@dataclass(frozen=True)
class ThreadCpu:
    tid: int
    comm: str  # the kernel's name of the thread
    cpu_s: float  # user + system time so far


def cpu_by_thread(pid: int) -> dict[int, ThreadCpu]:
    """Every live thread of `pid`: its kernel name and CPU seconds (utime + stime, clock ticks: 10 ms
    on Linux, so per-frame figures need windows of many frames). Empty where /proc is absent."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[int, ThreadCpu] = {}
    for tid in task_ids(pid):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended between listing and reading: it is not counted
            continue
        # "tid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        out[tid] = ThreadCpu(tid, comm, (utime + stime) / tick)
    return out
