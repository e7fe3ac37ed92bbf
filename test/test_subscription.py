"""The subscription core both transports share (ros/subscription.py): decode, time, count, guard, QoS.

The core without DDS here, then on the Cyclone path: a callback that raises on one sample and an
undecodable sample, and the subscription goes on. The rclpy path's run of the same is on the real
Humble tier (test/ros2/test_ros2_transport.py: the encoder node keeps encoding after such a frame).
"""

from __future__ import annotations

import logging
import time

import pytest
from dds_helpers import wait_until
from support.cdr_writer import image_cdr

from openclaw_vision.ros import cdr, subscription
from openclaw_vision.ros.subscription import READER_BUFFER, DdsQos, SampleIntake, reader_qos, writer_qos
from openclaw_vision.ros.types import IMAGE, QoS


def image(frame_id: str, sec: int = 1) -> bytes:
    return image_cdr(sec, 2, frame_id, 2, 2, "rgb8", 0, 6, bytes(12))


def intake(callback, ros_type: str = IMAGE) -> SampleIntake:
    def generic(raw):
        raise AssertionError("images are read by cdr's struct reader, not the generic deserialiser")

    return SampleIntake("/cam/image_raw", ros_type, callback, generic)


def test_a_sample_is_decoded_timed_and_handed_on_with_a_plain_header():
    got = []
    core = intake(lambda msg, dt: got.append((msg, dt)))
    t0 = time.perf_counter()
    core(image("cam0", sec=7), t0)
    [(msg, dt)] = got
    assert isinstance(msg, cdr.ImageView) and isinstance(msg.header, cdr.Header)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id) == (7, 2, "cam0")
    assert (msg.height, msg.width, bytes(msg.data)) == (2, 2, bytes(12))
    assert 0 <= dt <= time.perf_counter() - t0  # the decode, counted from when the take began
    assert core.malformed == core.failed == 0


def test_while_busy_a_sample_is_held_undecoded_then_handled_in_order_with_the_next():
    """hold_while: while the subscriber is busy, up to `most` samples wait undecoded; the next sample, or the
    subscriber's release, hands every held one on first, oldest first; nothing is handed on twice or lost."""
    got: list[str] = []
    core = intake(lambda msg, dt: got.append(msg.header.frame_id))
    busy = [True]
    core.hold_while(lambda: busy[0], most=1)
    core(image("a"))
    assert (got, core.held) == ([], 1)  # held: not decoded, not handed on
    core(image("b"))  # `most` already held: both now, in order
    assert (got, core.held) == (["a", "b"], 0)
    core(image("c"))
    core.release_held()  # the subscriber, before it takes
    assert (got, core.held) == (["a", "b", "c"], 0)
    core(image("d"))
    busy[0] = False
    core(image("e"))  # not busy: the held one, then this one, at once
    assert got == ["a", "b", "c", "d", "e"] and core.held == 0
    core.hold_while(lambda: True, most=0)  # 0: no holding
    core(image("f"))
    assert got[-1] == "f" and core.held == 0


def test_a_held_sample_that_does_not_decode_is_counted_when_handled(caplog):
    got = []
    core = intake(lambda msg, dt: got.append(msg))
    core.hold_while(lambda: True, most=1)
    core(b"\x00\x01\x00\x00" + bytes(3))  # truncated: held first, undecodable when handled
    assert core.malformed == 0
    core.release_held()
    assert core.malformed == 1 and got == [] and "undecodable sample" in caplog.text


def test_a_raising_callback_is_counted_and_logged_once_per_period_and_the_next_sample_arrives(caplog):
    got = []

    def callback(msg, _dt):
        if msg.header.frame_id == "bad":
            raise RuntimeError("a bug only this frame reaches")
        got.append(msg.header.frame_id)

    core = intake(callback)
    with caplog.at_level(logging.ERROR, logger=subscription.__name__):
        for frame_id in ("a", "bad", "bad", "b"):
            core(image(frame_id))
    assert got == ["a", "b"] and core.failed == 2
    [line] = caplog.records  # the second failure within the period is counted, not logged
    assert "callback for /cam/image_raw failed: RuntimeError('a bug only this frame reaches')" in line.getMessage()
    assert line.exc_info is not None  # with its traceback: a bug, not bad input


def test_undecodable_bytes_are_counted_and_logged_and_the_next_sample_arrives(caplog):
    got = []
    core = intake(lambda msg, _dt: got.append(msg.header.frame_id))
    with caplog.at_level(logging.WARNING, logger=subscription.__name__):
        core(image("a"))
        core(image("b")[:30])  # cut inside the encoding string
        core(image("c"))
    assert got == ["a", "c"] and core.malformed == 1 and core.failed == 0
    assert "undecodable sample on /cam/image_raw (30 bytes)" in caplog.text


def test_qos_from_one_place():
    best = QoS("best_effort", 5)
    assert writer_qos(best) == DdsQos("best_effort", "keep_last", 5)
    # Cyclone bounds a keep-all reader: nothing overwritten unseen, at most READER_BUFFER (or depth) held
    assert reader_qos(best, bounded_keep_all=True) == DdsQos("best_effort", "keep_all", READER_BUFFER)
    assert reader_qos(QoS("reliable", 100), bounded_keep_all=True).depth == 100
    # rmw cannot bound keep_all: the configured depth, as `ros2 topic info -v` shows it
    assert reader_qos(best, bounded_keep_all=False) == DdsQos("best_effort", "keep_last", 5)


@pytest.mark.dds
def test_cyclone_subscription_survives_a_raising_callback_and_a_malformed_sample(dds_domain, caplog):
    from openclaw_vision.ros.cyclone import CycloneTransport

    a, b = CycloneTransport("sender"), CycloneTransport("receiver")
    got = []

    def callback(msg, _dt):
        if msg.header.frame_id == "bad":
            raise RuntimeError("a bug only this frame reaches")
        got.append(msg.header.frame_id)

    try:
        sub = b.subscribe("/cam/image_raw", IMAGE, QoS("reliable", 10), callback)
        pub = a.publisher("/cam/image_raw", IMAGE, QoS("reliable", 10))
        wait_until(lambda: pub.matched() and sub.matched(), 20, "the reader and writer matched")
        not_utf8 = image("xx").replace(b"xx\x00", b"\xff\xfe\x00")  # well-formed CDR that DDS passes on
        with caplog.at_level(logging.WARNING, logger=subscription.__name__):
            for raw in (image("one"), image("bad"), image("two"), not_utf8, image("three")):
                pub.publish(raw)
            wait_until(lambda: len(got) >= 3, 20, "the three good samples")
        assert got == ["one", "two", "three"]
        assert sub.intake.failed == 1 and sub.intake.malformed == 1 and sub.lost() >= 1
        assert "callback for /cam/image_raw failed" in caplog.text
        assert "undecodable sample on /cam/image_raw" in caplog.text and "not UTF-8" in caplog.text
    finally:
        a.close()
        b.close()


@pytest.mark.dds
def test_cyclone_takes_what_waited_in_one_take_and_hands_every_sample_on_in_order(dds_domain):
    """The take thread is held inside the callback of frame 0 while frames 1-5 arrive (a busy transport
    thread): when it runs again, one take gets all five, and each reaches the callback, in order."""
    import threading

    from cyclonedds.util import duration

    from openclaw_vision.ros.cyclone import CycloneTransport

    a, b = CycloneTransport("sender"), CycloneTransport("receiver")
    held, release = threading.Event(), threading.Event()
    got = []

    def callback(msg, _dt):
        got.append(msg.header.stamp.sec)
        if len(got) == 1:
            held.set()
            release.wait(30)

    try:
        sub = b.subscribe("/cam/image_raw", IMAGE, QoS("reliable", 10), callback)
        pub = a.publisher("/cam/image_raw", IMAGE, QoS("reliable", 10, "keep_all"))
        wait_until(lambda: pub.matched() and sub.matched(), 20, "the reader and writer matched")
        pub.publish(image("f", sec=0))
        assert held.wait(20)
        for sec in range(1, 6):
            pub.publish(image("f", sec=sec))
        assert pub._writer.wait_for_acks(duration(seconds=20))  # acknowledged: in the reader's history
        release.set()
        wait_until(lambda: len(got) >= 6, 20, "six samples")
        assert got == [0, 1, 2, 3, 4, 5] and sub.takes == 2  # frame 0's take, then one for the five
    finally:
        release.set()
        a.close()
        b.close()


@pytest.mark.parametrize("in_reader", [0, 5])
def test_a_busy_subscriber_finds_its_samples_waiting_in_the_reader_and_takes_them_itself(
    dds_domain, monkeypatch, in_reader
):
    """Paced (cyclone.py): while the subscriber is busy, samples wait in the reader with no wake-up of the take
    thread each (its drain is pushed past the test here); the subscriber's `release_held` (what the node's
    worker calls before it takes) hands every one on, in order, on the subscriber's own thread, in one take.
    `in_reader` 0 asks for no pacing: each sample is handed on by the take thread as it comes."""
    import threading

    from cyclonedds.util import duration

    from openclaw_vision.ros import cyclone

    monkeypatch.setattr(cyclone, "DRAIN_MIN_S", 60.0)
    monkeypatch.setattr(cyclone, "DRAIN_MAX_S", 60.0)
    a, b = cyclone.CycloneTransport("sender"), cyclone.CycloneTransport("receiver")
    got = []
    try:
        sub = b.subscribe("/cam/image_raw", IMAGE, QoS("reliable", 10),
                          lambda msg, _dt: got.append((msg.header.stamp.sec, threading.current_thread())))  # fmt: skip
        sub.intake.hold_while(lambda: True, 0, in_reader)
        pub = a.publisher("/cam/image_raw", IMAGE, QoS("reliable", 10, "keep_all"))
        wait_until(lambda: pub.matched() and sub.matched(), 20, "the reader and writer matched")
        for sec in range(5):
            pub.publish(image("f", sec=sec))
        assert pub._writer.wait_for_acks(duration(seconds=20))  # acknowledged: in the reader's history
        if in_reader:
            assert got == []  # waiting in the reader, not taken
            sub.intake.release_held()
            assert [sec for sec, _ in got] == [0, 1, 2, 3, 4] and {t for _, t in got} == {threading.current_thread()}
            assert sub.takes == 1
        else:
            wait_until(lambda: len(got) >= 5, 20, "five samples from the take thread")
            assert [sec for sec, _ in got] == [0, 1, 2, 3, 4]
            assert {t.name for _, t in got} == {"dds-take/cam/image_raw"}
    finally:
        a.close()
        b.close()


def test_a_reader_left_busy_is_drained_a_few_samples_at_a_time_every_sample_in_order(dds_domain):
    """A subscriber that stays busy never takes: the take thread drains the reader itself, about `in_reader`
    samples' time apart (cyclone.drain_after), so 12 frames of a 30 fps camera come in a few takes, not 12,
    each handed on once, in order, on the take thread."""
    from openclaw_vision.ros.cyclone import CycloneTransport

    a, b = CycloneTransport("sender"), CycloneTransport("receiver")
    got = []
    try:
        sub = b.subscribe(
            "/cam/image_raw", IMAGE, QoS("reliable", 10), lambda msg, _dt: got.append(msg.header.stamp.sec)
        )
        sub.intake.hold_while(lambda: True, 0, 3)
        pub = a.publisher("/cam/image_raw", IMAGE, QoS("reliable", 10, "keep_all"))
        wait_until(lambda: pub.matched() and sub.matched(), 20, "the reader and writer matched")
        for sec in range(12):
            pub.publish(image("f", sec=sec))
            time.sleep(1 / 30)  # the camera's rate, not a timing assertion
        wait_until(lambda: len(got) >= 12, 20, "twelve samples drained")
        assert got == list(range(12)) and sub.intake.held == 0
        assert sub.takes <= 6, sub.takes  # together: one wake-up and one take for several samples
    finally:
        a.close()
        b.close()


def test_a_paced_reader_is_drained_about_most_samples_apart_never_past_half_its_depth():
    """cyclone.drain_after: 8 samples of a 30 fps camera take ~0.27 s; 40 would overfill a 32-sample reader, so
    half its depth counts; a camera never measured is looked at soon, and a slow one at most DRAIN_MAX_S apart."""
    from openclaw_vision.ros.cyclone import DRAIN_MAX_S, DRAIN_MIN_S, drain_after

    assert drain_after(8, 32, 30, 1.0) == pytest.approx(8 / 30)
    assert drain_after(40, 32, 300, 1.0) == pytest.approx(16 / 300)
    assert drain_after(8, 32, 0, 1.0) == DRAIN_MIN_S
    assert drain_after(8, 32, 2, 10.0) == DRAIN_MAX_S
    assert drain_after(8, 32, 1000, 0.001) == DRAIN_MIN_S


class FakeClock:
    """A monotonic clock the test steps: no test here waits for real time to pass."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_failure_is_logged_once_with_its_traceback_then_as_a_count_per_period(caplog):
    clock = FakeClock()
    throttle = subscription.Throttle(period=10.0, clock=clock)
    log = logging.getLogger("test.throttle")
    with caplog.at_level(logging.ERROR, logger="test.throttle"):
        for i in range(38):  # a take failing every 100 ms for 3.7 s, then once more when the period is up
            clock.now = 1000.0 + i / 10
            throttle.failure(log, "take on /cam failed", OSError(f"boom {i}"))
        assert len(caplog.records) == 1  # not 38 tracebacks
        clock.now = 1010.0
        throttle.failure(log, "take on /cam failed", OSError("boom 38"))
    first, count = caplog.records
    assert first.getMessage() == "take on /cam failed: OSError: boom 0" and first.exc_info is not None
    assert count.getMessage() == "take on /cam failed 38 more times in the last 10 s: OSError: boom 38"
    assert count.exc_info is None and throttle.total == 39


def test_the_plain_throttle_logs_the_first_at_once_and_counts_within_the_period_on_an_injected_clock(caplog):
    clock = FakeClock()
    throttle = subscription.Throttle(period=2.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.throttle"):
        for step in (0.0, 0.5, 0.5, 1.0):  # the last at exactly one period after the first
            clock.now += step
            throttle(logging.getLogger("test.throttle").warning, "bad sample on %s", "/cam")
    assert [r.getMessage() for r in caplog.records] == [
        "bad sample on /cam (1 such since last report)",
        "bad sample on /cam (3 such since last report)",
    ]


@pytest.mark.dds
@pytest.mark.parametrize("site", ["topic", "service"])
def test_a_failing_take_is_logged_once_with_its_traceback_not_every_100_ms(dds_domain, caplog, monkeypatch, site):
    """An injected take that always raises, on a subscription's and a service's take thread: with the
    throttle's clock frozen (no period ever passes), however many takes fail there is one line."""
    import functools

    from dds_helpers import wait_until

    from openclaw_vision.ros import cyclone
    from openclaw_vision.ros.types import QUERY_MEMORY

    calls = []

    def failing_take(*_args):
        calls.append(1)
        raise OSError("injected take failure")

    monkeypatch.setattr(cyclone, "Throttle", functools.partial(subscription.Throttle, clock=lambda: 0.0))
    t = cyclone.CycloneTransport("failing_take")
    try:
        with caplog.at_level(logging.ERROR, logger=cyclone.__name__):
            if site == "topic":
                monkeypatch.setattr(cyclone._Subscription, "_take", failing_take)
                ep = t.subscribe("/probe/failing", IMAGE, QoS(), lambda m, dt: None)
            else:
                monkeypatch.setattr(cyclone._ServiceEndpoints, "take", failing_take)
                ep = t.service("/probe_failing", QUERY_MEMORY, lambda req: None)
            wait_until(lambda: len(calls) >= 5, what="5 failed takes")
            ep.close()
        name = "/probe/failing" if site == "topic" else "service /probe_failing"
        [line] = [r for r in caplog.records if "take on" in r.getMessage()]
        assert line.getMessage() == f"take on {name} failed: OSError: injected take failure"
        assert line.exc_info is not None  # the traceback, the first time only
        assert ep.take_failures.total == len(calls) >= 5
    finally:
        t.close()
