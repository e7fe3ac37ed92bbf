"""Frames sent at a fixed rate, as a camera sends them: the one pacing loop of the bench's player
(bench/cameras.py), the reliability suite's camera (test/camera_sender.py) and the rclpy camera of the
`ros2` tier (test/support/rclpy_camera.py).

Standard library only, and a leaf of the layer order: the rclpy camera runs under the system Python of
Humble, where this package is importable but the venv's libraries are not.

The schedule, tick by tick (period = 1/rate):

- absolute deadlines: tick i is due at start + i/rate, computed rather than added up period by period, so
  sleep overshoot and send time never accumulate into a slower rate;
- a tick the loop reaches after its deadline is sent at once (`late`);
- a loop less than a period behind keeps the grid: the next tick comes at its own deadline, so jitter
  does not lower the rate;
- a loop more than a period behind (a stall) restarts the grid at the present: the overdue tick and
  the one due now go out together, the deadlines missed in between are never sent (`skipped`: the whole
  periods the grid has moved back, so a sender that is slow throughout counts them too) — at most two
  frames back to back, never a catch-up burst;
- by duration (`seconds`): the ticks due before the end are sent while the end has not passed, and the
  run lasts its whole duration (rate × seconds ticks when the loop keeps up, and sent / seconds is the
  rate achieved); by `count`: exactly that many ticks, ending at the last one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator


class Pacer:
    """Ticks at `rate` per second for `count` ticks or `seconds` (one of the two, or both: whichever ends
    first). Iterate it for the tick indices, each handed out at its deadline, or `run(send)`. The counts
    (`sent`, `late`, `skipped`) are read once it is done. `clock` and `sleep` are the monotonic clock and
    its sleep (a test passes fakes)."""

    def __init__(self, rate: float, *, count: int | None = None, seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:  # fmt: skip
        if not rate > 0 or math.isinf(rate):
            raise ValueError(f"pacing: rate must be a finite number of ticks per second above 0, not {rate}")
        if count is None and seconds is None:
            raise ValueError("pacing: give a tick count or a duration (seconds), or both")
        self.rate, self.count, self.seconds = rate, count, seconds
        self._clock, self._sleep = clock, sleep
        self.sent = 0  # ticks handed out (each one a send)
        self.late = 0  # ticks reached after their deadline, sent at once
        self.skipped = 0  # deadlines never sent: the whole periods the grid moved back in stalls
        self.elapsed = 0.0  # seconds from the first tick to the end of the run

    def __iter__(self) -> Iterator[int]:
        rate = self.rate
        start = now = self._clock()
        end = math.inf if self.seconds is None else start + self.seconds
        last = math.inf if self.count is None else self.count
        shift = 0.0  # how far the grid has moved back in stalls: tick i is due at start + shift + i / rate
        tick = 0
        while tick < last and now < end and (due := start + shift + tick / rate) < end:
            if due > now:
                self._sleep(due - now)
            elif now > due:
                self.late += 1
            now = self._clock()
            if now > (after := start + shift + (tick + 1) / rate):  # over a period behind: the grid restarts now
                shift += now - after
                self.skipped = math.floor(shift * rate + 1e-9)  # the deadlines it moved past, never sent
            self.sent += 1
            yield tick
            tick += 1
            now = self._clock()
        if tick < last and now < end:  # by duration: the run lasts it (its last tick has a whole period)
            self._sleep(end - now)
            now = self._clock()
        self.elapsed = now - start

    def run(self, send: Callable[[int], object]) -> Pacer:
        """`send(tick)` for every tick at its deadline; this pacer, its counts filled in."""
        for tick in self:
            send(tick)
        return self


def pace(rate: float, send: Callable[[int], object], *, count: int | None = None,
         seconds: float | None = None) -> Pacer:  # fmt: skip
    """`send(tick)` at `rate` per second for `count` ticks or `seconds` (see Pacer); the finished Pacer."""
    return Pacer(rate, count=count, seconds=seconds).run(send)
