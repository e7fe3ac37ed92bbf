"""threads: our threads carry their names into the kernel, and their CPU time is read per thread."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from openclaw_vision.runtime import threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread names and CPU: Linux /proc")


def _burn(done: threading.Event) -> None:
    x = 0
    while not done.is_set():
        x += 1


def test_a_named_thread_is_seen_by_the_kernel_with_its_cpu_and_a_thread_it_starts_inherits_the_name():
    done, spawned = threading.Event(), []

    def work() -> None:
        child = threading.Thread(target=_burn, args=(done,))  # as a runtime's pool thread would be started
        child.start()
        spawned.append(child)
        _burn(done)

    t = threads.Thread(target=work, name="encoder-worker", daemon=True)
    t.start()
    try:
        while sum(c.cpu_s for c in threads.cpu_by_thread(os.getpid()).values() if c.comm == "encoder-worker") < 0.2:
            threading.Event().wait(0.02)
        seen = threads.cpu_by_thread(os.getpid())
        ours = threads.ours()
    finally:
        done.set()
        t.join()
        spawned[0].join()
    assert ours.get(t.native_id) == "encoder-worker"
    assert seen[t.native_id].comm == "encoder-worker" and seen[t.native_id].cpu_s > 0
    child = seen[spawned[0].native_id]
    assert child.comm == "encoder-worker" and child.tid not in ours  # same name, told apart by id
    assert seen[os.getpid()].comm != "encoder-worker"  # the main thread keeps the process's name
    assert t.native_id not in threads.ours()  # ended threads leave the table


def test_a_long_name_is_cut_to_the_kernels_fifteen_bytes():
    hold = threading.Event()
    t = threads.Thread(target=hold.wait, name="dds-take/robot/front/image_raw", daemon=True)
    t.start()
    try:
        while t.native_id not in threads.ours():
            threading.Event().wait(0.01)
        assert threads.cpu_by_thread(os.getpid())[t.native_id].comm == "dds-take/robot/"
    finally:
        hold.set()
        t.join()
