"""Threads the kernel can tell apart, and what each one of a process has spent on the CPU.

Python (3.11) names a thread only for itself: to the kernel every thread it starts is called like
the process ("python3"), as are the runtime's worker threads, so `top -H` or a per-thread CPU table
cannot say which is the transport, the worker or ONNX Runtime. `Thread` sets the kernel's name of
each of our threads (prctl PR_SET_NAME, 15 bytes) when it starts and records its native id, and a
thread it creates (a runtime's pool, spawned lazily on the first call) inherits that name: such a
thread is told from ours by its id. `cpu_by_thread` reads every thread's CPU time of a process
from /proc (Linux; elsewhere it returns nothing and the bench says so).

A leaf module: the nodes and the bench import it; it imports nothing of the package.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

PR_SET_NAME = 15
NAME_BYTES = 15  # the kernel's TASK_COMM_LEN is 16 with the NUL

_ids: dict[int, str] = {}  # native id → our name, for the threads of this process started here
_ids_lock = threading.Lock()


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
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended between listing and reading: it is not counted
            continue
        # "tid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        out[int(task.name)] = ThreadCpu(int(task.name), comm, (utime + stime) / tick)
    return out
