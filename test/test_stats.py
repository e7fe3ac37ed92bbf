"""The newest-frame mailbox and the percentile helpers."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from openclaw_vision.stats import Counters, LatestSlot, percentiles


@given(st.lists(st.sampled_from(["put", "take"]), max_size=60))
def test_latest_slot_hands_out_only_the_newest_and_counts_every_displacement(ops):
    slot, n, displaced, taken = LatestSlot(), 0, 0, []
    for op in ops:
        if op == "put":
            n += 1
            displaced += slot.put(n)
        else:
            item = slot.take(timeout=0)
            if item is not None:
                taken.append(item)
    last = slot.take(timeout=0)
    if last is not None:
        taken.append(last)
    assert taken == sorted(taken)  # never an older frame after a newer one
    assert len(taken) + displaced == n  # every item is either consumed or counted as displaced
    if n:
        assert taken and taken[-1] == n  # the newest is never lost


def test_take_blocks_until_put_and_close_releases_it():
    slot, got = LatestSlot(), []
    t = threading.Thread(target=lambda: got.append(slot.take(timeout=5)))
    t.start()
    slot.put("frame")
    t.join()
    assert got == ["frame"]
    t = threading.Thread(target=lambda: got.append(slot.take(timeout=5)))
    t.start()
    slot.close()
    t.join()
    assert got == ["frame", None]


def test_percentiles_and_counters():
    p = percentiles(range(1, 101))
    assert (p["p50"], p["n"]) == (50.5, 100) and 99 < p["p99"] <= 100
    assert percentiles([])["n"] == 0
    c = Counters(["a", "b"])
    c.inc("a")
    c.inc("a", 2)
    assert c.snapshot() == {"a": 3, "b": 0}
