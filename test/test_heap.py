"""core/heap.py: with frame_heap_mb set, a freed frame's block stays in malloc's heap for the next frame (no
munmap in our intake, no fresh pages in the transport's receive); with 0, glibc's own thresholds. Each case runs
in a child process: the setting is process-wide, and pytest's own heap must not carry it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, json, sys
from openclaw_vision.core import heap

libc = ctypes.CDLL("libc.so.6")
if not hasattr(libc, "mallinfo2"):
    print(json.dumps({"skip": "no mallinfo2 (glibc < 2.33)"})); sys.exit()
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
took = heap.keep_freed_frames(int(sys.argv[1]))
frame = 1920 * 1080 * 3
mapped, free_after = [], []
for _ in range(4):  # a camera's frames: each replaces the one before
    block = libc.malloc(frame)
    mapped.append(libc.mallinfo2().hblkhd >= frame)  # served by a mapping of its own, not the heap
    libc.free(block)
    free_after.append(libc.mallinfo2().fordblks)
print(json.dumps({"took": took, "mapped": mapped, "free_after": free_after}))
"""


def run_child(megabytes: int) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, str(megabytes)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


def test_a_freed_frame_stays_in_the_heap_for_the_next_one():
    out = run_child(64)
    assert out["took"] is True
    assert out["mapped"] == [False] * 4  # every frame a heap block, the first one too
    assert min(out["free_after"]) >= 1920 * 1080 * 3  # and kept there once freed, for the next frame


def test_zero_leaves_glibc_its_own_thresholds():
    out = run_child(0)
    assert out["took"] is False
    assert out["mapped"][0] is True  # glibc maps the first frame-sized block; it adapts after that


ARENAS_CHILD = r"""
import ctypes, sys, threading
from openclaw_vision.core import heap

took = heap.share_arenas(1) if sys.argv[1] == "share" else None
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
kept = []

def receive():  # a thread that allocates frame-sized blocks, as a transport's receive thread does
    kept.extend(libc.malloc(1920 * 1080 * 3) for _ in range(2))

threads = [threading.Thread(target=receive) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(took, flush=True)
libc.malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


@pytest.mark.parametrize("share", [True, False], ids=["shared", "glibc"])
def test_threads_started_after_share_arenas_allocate_from_the_arenas_that_exist(share):
    """The encoder node's main calls share_arenas(1) before its threads start, so the frames Cyclone's receive
    thread or rclpy's take allocate and our intake frees go back to one arena; left to glibc, each new thread
    makes an arena of its own (issue 38: a 4-camera node under rclpy peaked 60-90 MB higher that way)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    res = subprocess.run([sys.executable, "-c", ARENAS_CHILD, "share" if share else "glibc"], capture_output=True,
                         text=True, timeout=60, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    arenas = res.stderr.count("Arena ")
    if share:
        assert res.stdout.strip() == "True" and arenas == 1, res.stderr
    else:
        assert arenas > 1, res.stderr


def test_a_malloc_arena_max_the_user_set_stands(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    from openclaw_vision.core import heap

    assert heap.share_arenas(1) is False
