"""The encoder node's worker: batches taken from newest-frame slots, prepared, then encoded — on one thread,
on two that overlap (batch k+1 prepared while batch k encodes), or on several lanes at once.

    one thread (overlap off):  take → prepare → encode, one batch after the other
    two threads (overlap on):  encoder-prepare: take → prepare → hand over ─┐
                               encoder-worker:                           └→ encode
    lanes (lanes > 1):         encoder-worker, encoder-worker2, ...: each take → prepare → encode,
                               the lanes' batches encoded at the same time

It knows nothing of transports, cameras or models: it takes from anything with LatestSlots' `take`, and
calls three functions the node gives it (`prepare`, `encode`, `failed`), so a test drives it with plain
Python objects. What it promises:

- Frames wait in their slots, never in a queue: a batch is taken only when the stage that runs it can
  start, so a newer frame from a camera still displaces the one waiting (LatestSlots counts it as dropped).
- Overlapped, the hand-off holds no queue: the prepare thread takes the next frames only once the encode
  thread has taken the previous batch (a rendezvous: one batch encoding, at most one prepared and waiting),
  and not before the running encode is due to end less one preparation's time (both the last measured:
  the work's `prepare_s`, and what `encode` returned for a batch of that many rows).
- A batch whose `encode` raises is given to `failed` (so its frames are counted) and the error goes on
  to the threads.Supervisor, which logs it and runs the loop again: the scheduler keeps serving.
- Neither stage waits for the other without also watching the stop: a stage that failed (and waits out
  its backoff, or was given up) never holds the other, or the stop.
- `stop` ends both stages and joins their threads; what was handed over before it is still encoded, and
  a batch handed over but never encoded (the encode thread was restarting) is left in `unfinished()`.
- Lanes (an encoder that answers concurrent calls, each on its share of the cores): a lane takes with
  `lend`, so the cameras of its batch are not taken by another lane until that batch is out (encoded,
  published or counted): a camera is in one batch at a time, and its features go out in its frames' order.

Why the overlap is not always on: see encoder_node.overlaps; how many lanes: encoder_node.lanes_for.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ..runtime import threads

log = logging.getLogger("encoder_node")

#: The worker threads' niceness above the process's (the prepare and encode stages; threads they start,
#: such as the prepare pool and OpenVINO's streams, inherit it). On a machine with no core to spare, what
#: waits for the CPU should be the encode: a frame the worker is late for is dropped by its newest-frame
#: slot, and counted, while one that the DDS receive threads or the transport thread are late for is lost
#: unseen (a socket buffer overflowing, a reader history overwritten). Measured (README, "Frames DDS can
#: lose without telling"): `ros2 bag play` of 60 1080p frames at 30 fps into the rclpy node, 2 cores,
#: depth 32: at +10 the node received 57-60 of 60 in 10 of 10 runs, without it 52-60 (2 of 8 runs below
#: 57, the socket overflowing); the price is fewer frames encoded at saturation (mean 46.9 against 50.0
#: of 60). A runtime pool made at load (ONNX Runtime's threads, OpenVINO's latency model) gets the same
#: niceness (encoder_node._build, threads.lower_threads_started). Measured (issue 38, 2-core AVX-512 EPYC, one
#: 4-camera node at 30 fps 1080p, the cameras bench's trial, rounds in alternating order, with the kernel's
#: socket buffer cap at that machine's default 4 MB, below the robot config's 32 MB): raw rgb8 from one
#: publisher, the node received 27.0 / 27.7 / 27.8 frames/s per camera with it against 21.8 / 23.1 / 25.3
#: without, and encoded as many (31.4 / 33.7 / 34.9 against 32.5 / 29.6 / 36.4 frames/s); JPEG, where every
#: frame arrived either way, 42.8 / 43.2 against 38.0 / 46.0. With the cap at 32 MB every frame arrived
#: either way (bench/schedule.py), and the same raw trial, three rounds, encoded 31.2 / 25.6 / 27.7 frames/s
#: with it against 33.9 / 29.6 / 24.0 without: no difference beyond the trials' spread.
WORKER_NICE = 10
#: how often a stage waiting for the other looks at the stop
HANDOFF_POLL_S = 0.2
#: how long a take from the slots waits for a frame before it looks at the stop again
TAKE_POLL_S = 0.2


class Slots(Protocol):
    """Where the frames wait: the encoder node's intake (what its subscriptions hold, then stats.LatestSlots: one
    newest item per camera, taken round robin)."""

    def take(self, limit: int = 1, timeout: float | None = None, lend: bool = False) -> list[tuple]: ...

    def give_back(self, keys: list) -> None: ...


class Work(Protocol):
    """A prepared batch as the scheduler sees it: only its timing."""

    @property
    def rows(self) -> int:
        """The frames the model call will run (the key of the encode estimate)."""
        ...

    @property
    def prepare_s(self) -> float | None:
        """How long the preparation took; None when it failed (no estimate from it)."""
        ...


W = TypeVar("W", bound=Work)


class BatchScheduler(Generic[W]):
    """Runs `prepare` then `encode` on every batch of up to `max_batch` taken from `slots`.

    `prepare(batch) -> W` must not raise (an error belongs in the work, for `encode` to fail the batch);
    `encode(work)` returns the model call's seconds (None: no call ran); `failed(work, err)` is called
    when `encode` raised. The threads run under `supervisor` until its `stop` is set. `lanes` > 1 (not
    with `overlap`): that many threads each take, prepare and encode, their batches at the same time."""

    def __init__(self, slots: Slots, max_batch: int, prepare: Callable[[list[tuple]], W],
                 encode: Callable[[W], float | None], failed: Callable[[W, Exception], None],
                 supervisor: threads.Supervisor, overlap: bool, lanes: int = 1) -> None:  # fmt: skip
        if lanes < 1 or (overlap and lanes > 1):
            raise ValueError(f"lanes {lanes} (overlap {overlap}): one or more, and one with the overlap")
        # `slots.take` is looked up at each take (a test injects a fault there)
        self._slots, self.max_batch, self.overlap, self.lanes = slots, max_batch, overlap, lanes
        self._prepare_fn, self._encode_fn, self._failed = prepare, encode, failed
        self._stop = supervisor.stop
        self._handoff: queue.Queue[W] = queue.Queue(maxsize=1)
        self._encoder_idle = threading.Event()
        self._encode_ends = 0.0  # when the running encode is due to end (0: none running)
        self._encode_estimate: dict[int, float] = {}  # the last encode's seconds, by rows
        self._prepare_estimate = 0.0  # the last preparation's seconds
        if overlap:
            loops = [("encoder-prepare", self._prepare_work), ("encoder-worker", self._encode_work)]
        elif lanes > 1:
            loops = [("encoder-worker" + (str(i + 1) if i else ""), self._lane_work) for i in range(lanes)]
        else:
            loops = [("encoder-worker", self._work)]
        self.threads = [supervisor.thread(name, loop) for name, loop in loops]

    def start(self, nice: int = WORKER_NICE) -> None:
        """Start the stages' threads, each `nice` steps below the process's priority (see WORKER_NICE)."""
        for t in self.threads:
            t.start()
            threads.lower_priority(t.native_id, nice, t.name)

    def stop(self, timeout: float) -> list[str]:
        """End both stages and join their threads, `timeout` seconds in all (an encode in flight finishes
        within it); the names of those still running (a call that does not return)."""
        self._stop.set()
        self._encoder_idle.set()  # a prepare thread waiting for the running encode to end waits no more
        deadline = time.monotonic() + timeout
        for t in self.threads:  # the prepare thread first: the encode thread finishes what it handed over
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    def unfinished(self) -> list[W]:
        """After `stop`: the batch prepared and handed over but never encoded (the encode thread was restarting)."""
        left = []
        while True:
            try:
                left.append(self._handoff.get_nowait())
            except queue.Empty:
                return left

    def run_batch(self, batch: list[tuple]) -> None:
        """One batch, both stages, on the calling thread (what the one-thread worker does with each take)."""
        self._finish(self._prepare(batch))

    def _take(self) -> list[tuple]:
        return self._slots.take(self.max_batch, timeout=TAKE_POLL_S)

    def _prepare(self, batch: list[tuple]) -> W:
        work = self._prepare_fn(batch)
        if work.prepare_s is not None:
            self._prepare_estimate = work.prepare_s
        return work

    def _finish(self, work: W) -> None:
        try:
            seconds = self._encode_fn(work)
        except Exception as err:  # counted by `failed`; the supervisor logs it and runs the loop again
            self._failed(work, err)
            raise
        if seconds is not None:
            self._encode_estimate[work.rows] = seconds

    def _work(self) -> None:
        """No overlap: take, prepare, encode, one batch after the other."""
        while not self._stop.is_set():
            batch = self._take()
            if batch:
                self.run_batch(batch)

    def _lane_work(self) -> None:
        """One of several lanes: take (lending the batch's cameras), prepare, encode; the cameras go back
        whatever happens to the batch (an error goes on to the supervisor, which runs the lane again)."""
        while not self._stop.is_set():
            batch = self._slots.take(self.max_batch, timeout=TAKE_POLL_S, lend=True)
            try:
                if batch:
                    self.run_batch(batch)
            finally:
                self._slots.give_back([key for key, _ in batch])

    def _prepare_work(self) -> None:
        """Overlap, first stage: batch k+1 is taken and prepared while the encode thread runs batch k, taken
        only once the previous batch was taken over and the running encode is nearly done (module doc)."""
        while not self._stop.is_set():
            wait = self._encode_ends - self._prepare_estimate - time.perf_counter()
            if wait > 0:
                self._encoder_idle.wait(wait)  # set when that encode ends early, or at stop
                continue
            batch = self._take()
            if not batch:
                continue
            self._handoff.put(self._prepare(batch))
            with self._handoff.all_tasks_done:  # until the encode thread has it: then the next may be taken
                while self._handoff.unfinished_tasks and not self._stop.is_set():
                    self._handoff.all_tasks_done.wait(HANDOFF_POLL_S)

    def _encode_work(self) -> None:
        """Overlap, second stage: encode each prepared batch; what was handed over before the stop is still
        encoded. The hand-off is marked done whatever happens to the batch, so the prepare thread never
        waits for an encode thread that failed (the supervisor then runs this loop again)."""
        while True:
            try:
                work = self._handoff.get(timeout=HANDOFF_POLL_S)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            try:
                self._encoder_idle.clear()
                # when this encode is due to end, set before the hand-off ends (the prepare thread reads it then)
                self._encode_ends = time.perf_counter() + self._encode_estimate.get(work.rows, 0.0)
            finally:
                self._handoff.task_done()
            try:
                self._finish(work)
            finally:
                self._encode_ends = 0.0
                self._encoder_idle.set()
