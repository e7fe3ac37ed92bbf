"""openclaw_vision/core/pacing.py, the one camera-rate loop (the bench's player, camera_sender.py, rclpy_camera.py),
on a fake clock: how many frames a camera sends for a rate and a duration or count, when each goes out on
that clock, and what a stall does (the late frame at once, the missed deadlines skipped, no catch-up burst).
Nothing here measures wall-clock speed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from openclaw_vision.core.pacing import Pacer, pace

ROOT = Path(__file__).resolve().parents[1]
START = 1000.0


class FakeClock:
    """A monotonic clock that moves only when the pacer sleeps or a send costs time."""

    def __init__(self) -> None:
        self.t = START
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the pacer never sleeps for nothing"
        self.sleeps.append(seconds)
        self.t += seconds


def run(rate: float, cost=lambda tick: 0.0, **until) -> tuple[Pacer, list[float], FakeClock]:
    """A pacer on a fake clock whose send of tick i takes cost(i) seconds; (pacer, each send's time from START)."""
    fake, at = FakeClock(), []

    def send(tick: int) -> None:
        at.append(fake.t - START)
        fake.t += cost(tick)

    return Pacer(rate, clock=fake.clock, sleep=fake.sleep, **until).run(send), at, fake


def test_a_camera_that_keeps_up_sends_rate_times_seconds_frames_on_its_deadlines_and_lasts_the_duration():
    for rate, seconds, sent in ((10.0, 2.0, 20), (30.0, 1.5, 45), (15.0, 1.0, 15), (7.5, 0.4, 3)):
        p, at, fake = run(rate, seconds=seconds)
        assert p.sent == len(at) == sent and p.late == p.skipped == 0
        assert at == pytest.approx([i / rate for i in range(sent)])
        assert fake.t - START == pytest.approx(seconds) and p.elapsed == pytest.approx(seconds)  # sent / seconds = rate


def test_a_count_sends_exactly_that_many_ticks_and_ends_at_the_last():
    p, at, fake = run(4.0, count=5)
    assert p.sent == 5 and at == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0]) and fake.t - START == pytest.approx(1.0)
    p, at, _ = run(4.0, count=3, seconds=10.0)  # both: whichever ends first, and a count does not wait out the rest
    assert p.sent == 3 and p.elapsed == pytest.approx(0.5)
    p, at, _ = run(4.0, count=100, seconds=1.0)
    assert p.sent == 4


def test_send_time_does_not_lower_the_rate():
    """Deadlines are absolute: a send that takes most of a period does not push every later frame back."""
    p, at, _ = run(10.0, cost=lambda tick: 0.09, seconds=1.0)
    assert p.sent == 10 and at == pytest.approx([i / 10 for i in range(10)]) and p.late == 0


def test_a_frame_late_by_less_than_a_period_goes_at_once_and_the_next_keeps_its_own_deadline():
    p, at, _ = run(10.0, cost=lambda tick: 0.15 if tick == 2 else 0.0, seconds=1.0)
    assert at == pytest.approx([0.0, 0.1, 0.2, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    assert p.sent == 10 and p.late == 1 and p.skipped == 0


def test_after_a_stall_the_late_frame_and_the_one_due_now_go_the_deadlines_between_are_skipped_not_caught_up():
    p, at, _ = run(10.0, cost=lambda tick: 0.55 if tick == 5 else 0.0, seconds=2.0)  # 0.5 → 1.05 s
    assert at == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.05, 1.05, *(1.15 + i / 10 for i in range(9))])
    assert p.sent == 17 and p.late == 1 and p.skipped == 3 and p.sent + p.skipped == 20
    assert max(at.count(t) for t in at) == 2  # never more than two frames back to back


def test_a_sender_slower_than_the_rate_sends_as_fast_as_it_can_never_in_bursts():
    p, at, _ = run(10.0, cost=lambda tick: 0.15, seconds=2.9)
    assert at == pytest.approx([0.15 * i for i in range(20)])  # no two at once: the backlog is never replayed
    # every frame after the first is late, and the last one went 0.85 s after its deadline: 8 whole periods lost
    assert p.sent == 20 and p.late == 19 and p.skipped == 8


def test_the_clock_starts_at_the_first_tick_not_when_the_pacer_is_made():
    """camera_sender.py makes its frames' pacer before it waits for the node: the wait is not a stall."""
    fake, at = FakeClock(), []
    ticks = iter(Pacer(10.0, seconds=0.5, clock=fake.clock, sleep=fake.sleep))
    fake.t += 30.0  # discovery
    for _ in ticks:
        at.append(fake.t - START - 30.0)
    assert at == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_pace_runs_send_for_every_tick_in_order():
    ticks: list[int] = []
    p = pace(1e9, ticks.append, count=4)  # a rate no clock notices: nothing to wait for
    assert ticks == [0, 1, 2, 3] and p.sent == 4


@pytest.mark.parametrize("bad", [{"rate": 0.0, "count": 3}, {"rate": -1.0, "count": 3},
                                 {"rate": float("inf"), "count": 3}, {"rate": float("nan"), "count": 3},
                                 {"rate": 10.0}])  # fmt: skip
def test_a_rate_that_is_not_one_or_no_end_is_refused(bad):
    with pytest.raises(ValueError, match="pacing:"):
        Pacer(**bad)


def test_the_module_imports_the_standard_library_alone():
    """test/support/rclpy_camera.py imports it under Humble's system Python, which has none of the venv."""
    tree = ast.parse((ROOT / "openclaw_vision" / "core" / "pacing.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "collections", "math", "time"}, names


def test_the_three_camera_loops_pace_with_it():
    """One pacing loop: the bench's player and both test cameras use core/pacing.py, none keeps a loop of its own."""
    for path in ("openclaw_vision/bench/cameras.py", "test/camera_sender.py", "test/support/rclpy_camera.py"):
        text = (ROOT / path).read_text()
        assert "pacing import" in text and "due = max(" not in text, path
