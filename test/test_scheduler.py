"""The encoder node's worker alone (ros/scheduler.py): batches taken from newest-frame slots, prepared, then
encoded, on one thread or on two that overlap — driven with plain Python objects, no transport, no model.

The stages are a fake that records what it was given and when (the scheduler is the unit under test):
a frame is a string ("a2": camera a's second frame), a gate holds an encode until the test opens it.
What is checked is what a user of the node would notice: the newest frame of each camera is the one
encoded, cameras share a batch, a frame waits in its slot (where a newer one displaces it) rather than
in a batch, a failed batch is handed back for counting and the worker goes on, and stop() ends both
stages, encoding what was handed over before it. No test times anything: waits are for a state, with
generous deadlines that only guard liveness; the two short waits for something that must not happen
give a wrong scheduler the chance to show itself.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest
from dds_helpers import wait_until

from openclaw_vision.ros.scheduler import BatchScheduler
from openclaw_vision.runtime import threads
from openclaw_vision.runtime.stats import LatestSlots

CAMERAS = ("a", "b", "c")
NOT_HAPPENING_S = 0.3  # how long a test gives a wrong scheduler to take a frame it must leave in its slot


@dataclass
class FakeWork:
    frames: list[str]
    prepare_s: float | None = 0.0

    @property
    def rows(self) -> int:
        return len(self.frames)


class FakeStages:
    """`prepare`, `encode` and `failed` that record their calls in order; `gates[frame]` holds the encode of
    the batch holding that frame until set, `faults` are frames whose batch's encode raises, `encode_s` is
    the model call's seconds that `encode` claims (the scheduler's estimate)."""

    def __init__(self, encode_s: float = 0.0) -> None:
        self.encode_s = encode_s
        self.events: list[tuple[str, list[str]]] = []  # ("prepare" | "encode" | "encoded" | "failed", frames)
        self.gates: dict[str, threading.Event] = {}
        self.faults: set[str] = set()
        self._lock = threading.Lock()

    def _record(self, what: str, frames: list[str]) -> None:
        with self._lock:
            self.events.append((what, frames))

    def seen(self, what: str) -> list[list[str]]:
        with self._lock:
            return [frames for w, frames in self.events if w == what]

    def index(self, what: str, frames: list[str]) -> int:
        with self._lock:
            return self.events.index((what, frames))

    def prepare(self, batch: list[tuple]) -> FakeWork:
        frames = [frame for _, frame in batch]
        self._record("prepare", frames)
        return FakeWork(frames)

    def encode(self, work: FakeWork) -> float:
        self._record("encode", work.frames)
        for frame in work.frames:
            if frame in self.gates:
                assert self.gates[frame].wait(60), f"the test never opened {frame}'s gate"
        if self.faults & set(work.frames):
            raise RuntimeError(f"injected fault in {work.frames}")
        self._record("encoded", work.frames)
        return self.encode_s

    def failed(self, work: FakeWork, err: Exception) -> None:
        self._record("failed", [*work.frames, str(err)])


class Rig:
    """A scheduler over three cameras' slots and a FakeStages, under its own threads.Supervisor."""

    def __init__(self, overlap: bool, stages: FakeStages, max_batch: int = 3, lanes: int = 1) -> None:
        self.stages, self.slots = stages, LatestSlots(CAMERAS)
        self.supervisor = threads.Supervisor(threading.Event(), logging.getLogger("test_scheduler"))
        self.scheduler = BatchScheduler(self.slots, max_batch, stages.prepare, stages.encode, stages.failed,
                                        self.supervisor, overlap, lanes)  # fmt: skip

    def put(self, frame: str) -> bool:
        """Camera frame[0]'s newest frame; True when it displaced one the scheduler never took."""
        return self.slots.put(frame[0], frame)

    def wait_for(self, what: str, frames: list[str]) -> None:
        wait_until(lambda: frames in self.stages.seen(what), 60, f"{what} {frames}")


@pytest.fixture
def rig():
    made: list[Rig] = []

    def make(overlap: bool, stages: FakeStages | None = None, max_batch: int = 3, lanes: int = 1) -> Rig:
        r = Rig(overlap, stages or FakeStages(), max_batch, lanes)
        made.append(r)
        r.scheduler.start()
        return r

    yield make
    for r in made:  # whatever a test left: gates opened, threads stopped
        for gate in r.stages.gates.values():
            gate.set()
        r.scheduler.stop(30)


def test_each_cameras_newest_frame_is_encoded_and_cameras_share_a_batch(rig):
    """One thread: while a batch encodes, camera a sends twice more and b and c once; the next batch holds
    b's, c's and a's newest frame, and a's middle frame (displaced in its slot) is never prepared."""
    r = rig(overlap=False)
    r.stages.gates["a1"] = threading.Event()
    r.put("a1")
    r.wait_for("encode", ["a1"])
    assert not r.put("a2")
    assert not r.put("b1")
    assert r.put("a3")  # a2 never taken: displaced (the node counts it as dropped)
    assert not r.put("c1")
    r.stages.gates["a1"].set()
    r.wait_for("encoded", ["b1", "c1", "a3"])  # round robin from the camera after the last one served
    assert r.stages.seen("prepare") == [["a1"], ["b1", "c1", "a3"]]
    assert r.scheduler.stop(30) == [] and not any(t.is_alive() for t in r.scheduler.threads)


def test_overlapped_the_next_batch_is_prepared_while_one_encodes_and_no_further_batch_is_taken(rig):
    """Two threads: batch 2 is prepared while batch 1 encodes, then waits for the encode thread; frames that
    come meanwhile stay in their slots (a newer one displaces them) instead of queueing in a third batch."""
    r = rig(overlap=True)
    r.stages.gates["a1"] = threading.Event()
    r.put("a1")
    r.wait_for("encode", ["a1"])
    r.put("b1")
    r.wait_for("prepare", ["b1"])  # while a1 still encodes
    assert not r.put("a2")
    assert not threading.Event().wait(NOT_HAPPENING_S) and ["a2"] not in r.stages.seen("prepare")
    assert r.put("a3")  # a2 was still in its slot: the hand-off holds one batch, not a queue
    assert not r.put("c1")
    r.stages.gates["a1"].set()
    r.wait_for("encoded", ["c1", "a3"])
    assert r.stages.seen("encoded") == [["a1"], ["b1"], ["c1", "a3"]]
    assert r.stages.index("prepare", ["b1"]) < r.stages.index("encoded", ["a1"])
    assert r.scheduler.stop(30) == [] and not any(t.is_alive() for t in r.scheduler.threads)


def test_the_prepare_thread_waits_until_the_running_encode_is_due_to_end(rig):
    """Two threads, an encode that claims 60 s: while the next one runs, a frame that arrives waits in its
    slot (not prepared, so a newer frame displaces it) until that encode ends, then the newest is taken."""
    r = rig(overlap=True, stages=FakeStages(encode_s=60.0))
    r.put("a1")
    r.wait_for("encoded", ["a1"])  # the estimate for a batch of one: 60 s
    r.stages.gates["a2"] = threading.Event()
    r.put("a2")
    r.wait_for("encode", ["a2"])
    assert not r.put("b1")
    assert not threading.Event().wait(NOT_HAPPENING_S) and ["b1"] not in r.stages.seen("prepare")
    assert r.put("b2")  # b1 still waited in its slot
    r.stages.gates["a2"].set()  # the encode ends early: the prepare thread takes at once
    r.wait_for("encoded", ["b2"])
    assert ["b1"] not in r.stages.seen("prepare")
    assert r.stages.index("encoded", ["a2"]) < r.stages.index("prepare", ["b2"])


def test_stop_does_not_wait_for_the_running_encode_where_the_prepare_thread_waits_for_it(rig):
    """An encode that does not return (a runtime hung in a native call): stop() wakes the prepare thread,
    which waited for that encode to be nearly done, so only the encode thread is left behind."""
    r = rig(overlap=True, stages=FakeStages(encode_s=60.0))
    r.put("a1")
    r.wait_for("encoded", ["a1"])
    r.stages.gates["a2"] = threading.Event()
    r.put("a2")
    r.wait_for("encode", ["a2"])
    assert r.scheduler.stop(2.0) == ["encoder-worker"]


@pytest.mark.parametrize("overlap", [False, True])
def test_a_batch_whose_encode_fails_is_handed_back_and_the_scheduler_serves_the_next(rig, overlap, monkeypatch,
                                                                                      caplog):  # fmt: skip
    monkeypatch.setattr(threads, "BACKOFF_S", 0.001)  # the restart, not its wait, is tested
    stages = FakeStages()
    stages.faults.add("a1")
    r = rig(overlap=overlap, stages=stages)
    with caplog.at_level("ERROR", logger="test_scheduler"):
        r.put("a1")
        r.wait_for("failed", ["a1", "injected fault in ['a1']"])
        r.put("a2")
        r.wait_for("encoded", ["a2"])
    assert r.stages.seen("encoded") == [["a2"]] and len(r.stages.seen("failed")) == 1
    assert r.supervisor.failures() == 1
    assert [m for m in caplog.messages if m.startswith("thread encoder-worker failed")], caplog.messages


def test_stop_joins_both_stages_and_what_was_handed_over_is_still_encoded(rig):
    r = rig(overlap=True)
    r.stages.gates["a1"] = threading.Event()
    r.put("a1")
    r.wait_for("encode", ["a1"])
    r.put("b1")
    r.wait_for("prepare", ["b1"])  # handed over while a1 encodes
    late: list[list[str]] = []
    stopper = threading.Thread(target=lambda: late.append(r.scheduler.stop(30)))
    stopper.start()
    r.stages.gates["a1"].set()
    stopper.join(60)
    assert late == [[]] and not any(t.is_alive() for t in r.scheduler.threads)
    assert r.stages.seen("encoded") == [["a1"], ["b1"]] and r.scheduler.unfinished() == []


def test_a_batch_handed_to_an_encode_thread_that_failed_is_left_to_the_caller_at_stop(rig, monkeypatch):
    """The encode thread failed and waits out its backoff (long here): the prepare thread still hands the
    next batch over, and stop() neither waits for the backoff nor loses that batch: unfinished() has it."""
    monkeypatch.setattr(threads, "BACKOFF_S", 600.0)
    stages = FakeStages()
    stages.faults.add("a1")
    r = rig(overlap=True, stages=stages)
    r.put("a1")
    r.wait_for("failed", ["a1", "injected fault in ['a1']"])
    r.put("b1")
    r.wait_for("prepare", ["b1"])
    assert r.scheduler.stop(30) == []
    assert [w.frames for w in r.scheduler.unfinished()] == [["b1"]] and r.stages.seen("encoded") == []


def test_lanes_encode_batches_at_once_and_a_camera_is_in_one_batch_at_a_time(rig):
    """Two lanes: camera a's batch and camera b's encode at the same time; a's next frame waits in its slot
    while a1 encodes (camera c's frame is taken before it), and goes out after a1: a camera's features
    keep its frames' order."""
    r = rig(overlap=False, max_batch=1, lanes=2)
    r.stages.gates.update(a1=threading.Event(), b1=threading.Event())
    r.put("a1")
    r.wait_for("encode", ["a1"])
    r.put("b1")
    r.wait_for("encode", ["b1"])  # both in flight: neither gate is open
    assert r.stages.seen("encoded") == []
    assert not r.put("a2")
    r.stages.gates["b1"].set()
    r.wait_for("encoded", ["b1"])
    threading.Event().wait(NOT_HAPPENING_S)  # the free lane must leave a2 alone while a1 encodes
    assert ["a2"] not in r.stages.seen("prepare")
    r.put("c1")
    r.wait_for("encoded", ["c1"])
    assert ["a2"] not in r.stages.seen("prepare")
    r.stages.gates["a1"].set()
    r.wait_for("encoded", ["a2"])
    assert r.stages.index("encoded", ["a1"]) < r.stages.index("prepare", ["a2"])
    assert r.scheduler.stop(30) == [] and not any(t.is_alive() for t in r.scheduler.threads)


def test_a_lane_whose_encode_fails_gives_its_cameras_back(rig):
    """A failed batch on one of two lanes is handed back for counting, and its camera's next frame is
    still encoded (the lane gave the camera back though its batch failed)."""
    stages = FakeStages()
    stages.faults.add("a1")
    r = rig(overlap=False, stages=stages, max_batch=1, lanes=2)
    r.put("a1")
    r.wait_for("failed", ["a1", "injected fault in ['a1']"])
    r.put("a2")
    r.wait_for("encoded", ["a2"])


def test_lanes_are_refused_with_the_overlap():
    with pytest.raises(ValueError, match="lanes"):
        Rig(overlap=True, stages=FakeStages(), lanes=2)
