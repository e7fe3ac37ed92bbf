"""The newest-frame mailbox and the percentile helpers."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from openclaw_vision.runtime.stats import Counters, LatestSlots, StampGaps, percentiles


@given(st.lists(st.sampled_from(["put", "take"]), max_size=60))
def test_latest_slot_hands_out_only_the_newest_and_counts_every_displacement(ops):
    slot, n, displaced, taken = LatestSlots(["cam"]), 0, 0, []
    for op in ops:
        if op == "put":
            n += 1
            displaced += slot.put("cam", n)
        else:
            taken += [item for _, item in slot.take(timeout=0)]
    taken += [item for _, item in slot.take(timeout=0)]
    assert taken == sorted(taken)  # never an older frame after a newer one
    assert len(taken) + displaced == n  # every item is either consumed or counted as displaced
    if n:
        assert taken and taken[-1] == n  # the newest is never lost


def test_take_blocks_until_put_and_close_releases_it():
    slot, got = LatestSlots(["cam"]), []
    t = threading.Thread(target=lambda: got.append(slot.take(timeout=5)))
    t.start()
    slot.put("cam", "frame")
    t.join()
    assert got == [[("cam", "frame")]]
    t = threading.Thread(target=lambda: got.append(slot.take(timeout=5)))
    t.start()
    slot.close()
    t.join()
    assert got == [[("cam", "frame")], []]


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans()), max_size=80), st.integers(1, 5))
def test_cross_camera_takes_are_round_robin_and_lose_nothing(ops, limit):
    """Under any sequence of arrivals, a camera with a frame waits at most ceil(5 / limit) - 1
    takes, a take holds at most `limit` distinct cameras, and every frame is taken or displaced."""
    keys = list("abcde")
    slots, n, displaced, taken, waited = LatestSlots(keys), 0, 0, [], dict.fromkeys(keys, 0)
    for key, take in ops:
        n += 1
        displaced += slots.put(key, n)
        if take:
            batch = slots.take(limit, timeout=0)
            assert 0 < len(batch) <= limit and len({k for k, _ in batch}) == len(batch)
            for k in keys:
                waited[k] = 0 if any(b == k for b, _ in batch) else waited[k] + (k in slots._items)
                assert waited[k] <= -(-len(keys) // limit) - 1, (k, waited)
            taken += [item for _, item in batch]
    for batch in iter(lambda: slots.take(limit, timeout=0), []):
        taken += [item for _, item in batch]
    assert len(taken) + displaced == n


@given(
    st.lists(
        st.tuples(st.sampled_from(["put", "take", "back"]), st.sampled_from("abc"), st.integers(0, 1)), max_size=80
    )
)
def test_lent_cameras_are_in_one_batch_at_a_time_and_keep_their_order(ops):
    """Two takers that lend (the node's lanes), under any interleaving of arrivals, takes and give-backs: a
    take never serves a camera another taker holds, each camera's frames come out oldest first, and every
    frame is taken or displaced."""
    keys = list("abc")
    slots, n, displaced, out = LatestSlots(keys), 0, 0, {k: [] for k in keys}
    held: list[set] = [set(), set()]  # the cameras each taker holds
    for op, key, taker in ops:
        if op == "put":
            n += 1
            displaced += slots.put(key, n)
        elif op == "take":
            batch = slots.take(2, timeout=0, lend=True)
            got = {k for k, _ in batch}
            assert not got & held[1 - taker] and not got & held[taker]
            held[taker] |= got
            for k, item in batch:
                out[k].append(item)
        else:
            slots.give_back(held[taker])
            held[taker] = set()
    slots.give_back(held[0] | held[1])
    for batch in iter(lambda: slots.take(2, timeout=0, lend=True), []):
        for k, item in batch:
            out[k].append(item)
    assert all(items == sorted(items) for items in out.values())
    assert sum(map(len, out.values())) + displaced == n


def test_a_taker_waiting_for_a_lent_camera_wakes_when_it_is_given_back():
    slots, got = LatestSlots(["a"]), []
    slots.put("a", 1)
    assert slots.take(1, timeout=0, lend=True) == [("a", 1)]
    slots.put("a", 2)
    assert slots.take(1, timeout=0, lend=True) == []  # lent: its new frame waits
    t = threading.Thread(target=lambda: got.append(slots.take(1, timeout=30, lend=True)))
    t.start()
    threading.Event().wait(0.3)  # most likely waiting by now: a give_back that wakes nobody leaves it until 30 s
    slots.give_back(["a"])
    t.join(10)
    assert got == [[("a", 2)]]


def test_percentiles_and_counters():
    p = percentiles(range(1, 101))
    assert (p["p50"], p["n"]) == (50.5, 100) and 99 < p["p99"] <= 100
    assert percentiles([])["n"] == 0
    c = Counters(["a", "b"])
    c.inc("a")
    c.inc("a", 2)
    assert c.snapshot() == {"a": 3, "b": 0}


PERIOD = 33_333_333  # 30 fps, in ns
START = 1_700_000_000_000_000_000


def estimate(stamps) -> StampGaps:
    gaps = StampGaps()
    for s in stamps:
        gaps.add(int(s))
    return gaps


def stamps_without(n: int, missing: set[int] = frozenset()) -> list[int]:
    return [START + i * PERIOD for i in range(n) if i not in missing]


def test_steady_stamps_estimate_no_missing_frames():
    assert estimate(stamps_without(300)).missing == 0


def test_one_missing_frame_is_one():
    assert estimate(stamps_without(60, {30})).missing == 1


def test_three_missing_in_a_row_are_three():
    assert estimate(stamps_without(60, {20, 21, 22})).missing == 3


def test_a_frame_missing_right_after_start_is_counted_once_the_period_is_known():
    assert estimate(stamps_without(60, {2})).missing == 1


def test_losses_here_and_there_add_up():
    assert estimate(stamps_without(120, {5, 40, 41, 90, 91, 92, 93})).missing == 7


def test_stamps_going_backwards_count_nothing_and_the_estimate_starts_over():
    loop = stamps_without(60) + stamps_without(60)  # a bag played twice: its stamps start again
    gaps = estimate(loop)
    assert gaps.missing == 0 and gaps.resets == 1
    again = estimate(stamps_without(60) + stamps_without(60, {30}))
    assert again.missing == 1  # and after the restart it counts again


def test_a_long_pause_or_stamps_at_zero_count_nothing():
    paused = stamps_without(30) + [START + 3600 * 10**9 + i * PERIOD for i in range(30)]
    assert estimate(paused).missing == 0
    assert estimate([0] * 50).missing == 0


@given(st.lists(st.floats(-0.2, 0.2), min_size=10, max_size=200))
def test_jitter_of_a_fifth_of_the_period_counts_nothing(jitter):
    assert estimate(START + (i + j) * PERIOD for i, j in enumerate(jitter)).missing == 0
