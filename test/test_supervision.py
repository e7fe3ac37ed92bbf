"""A node that is up is working (issue 34): every thread a node starts is supervised, a stalled worker is
seen, and a stop signal is never lost.

- threads.Supervisor: a loop that raises is logged once with its traceback, counted, run again after a
  backoff; too many failures in a window are fatal (the runner then exits 1, for launch's respawn).
- threads.Watchdog: work arriving and none finished for a declared period is a stall, counted once.
- threads.StopSignals: the first SIGINT/SIGTERM asks for a stop, a second one exits at once.
- Each thread of each node, with a fault injected into it: the fault is logged, counted, shown as
  ERROR on /diagnostics with the thread's name, the thread runs again and serves the next frame or
  question, and every frame is counted.

No test times anything: waits are for a state, with generous deadlines that only guard liveness.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from dds_helpers import node_matched, wait_until

from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.runtime import threads
from openclaw_vision.runtime.config import EncoderConfig, VlmConfig


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """Restarts without the production backoff (0.5 s doubling): the behaviour, not the wait, is tested."""
    monkeypatch.setattr(threads, "BACKOFF_S", 0.001)
    monkeypatch.setattr(threads, "BACKOFF_MAX_S", 0.001)


class Faulty:
    """Wraps a callable so that its first `times` calls raise `error` (an injected fault), then calls it."""

    def __init__(self, fn, times: int = 1, error: Exception | None = None) -> None:
        self.fn, self.left, self.error = fn, times, error or RuntimeError("injected fault")
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise self.error
        return self.fn(*args, **kwargs)


# --- the supervisor, the watchdog and the stop signals alone ---------------------------------------
def test_a_failing_loop_is_logged_once_with_its_traceback_counted_and_run_again(caplog):
    stop, runs, done = threading.Event(), [], threading.Event()

    def loop() -> None:
        runs.append(1)
        if len(runs) <= 2:
            raise ValueError(f"fault {len(runs)}")
        done.set()
        stop.wait()

    sv = threads.Supervisor(stop, __import__("logging").getLogger("test-supervisor"))
    sv.thread("worker", loop)
    with caplog.at_level("ERROR", logger="test-supervisor"):
        sv.start()
        assert done.wait(30)
    assert sv.failures() == 2 and len(runs) == 3
    failed = [r for r in caplog.records if "thread worker failed" in r.getMessage()]
    assert len(failed) == 2  # once per failure, each with its traceback
    assert all("Traceback" in r.getMessage() and "ValueError" in r.getMessage() for r in failed)
    assert sv.recent_fault() == "thread worker failed 2 time(s), last: ValueError: fault 2"
    stop.set()
    assert sv.join(30) == []


def test_too_many_failures_in_the_window_are_fatal_and_said_once(caplog):
    stop, fatal = threading.Event(), []
    sv = threads.Supervisor(stop, __import__("logging").getLogger("test-supervisor"), on_fatal=fatal.append)
    sv.thread("worker", Faulty(lambda: None, times=10**6))
    sv.start()
    assert sv.join(30) == []  # the thread ends by itself once the failures are fatal
    assert sv.failures() == threads.MAX_FAILURES
    assert fatal == [sv.fatal] and sv.fatal.startswith(f"thread worker failed {threads.MAX_FAILURES} times")
    assert not stop.is_set()  # the supervisor asks (on_fatal); the runner stops the node


def test_a_loop_that_returns_while_the_node_runs_is_a_failure_and_one_that_may_end_is_not():
    stop, seen = threading.Event(), threading.Event()
    calls = []

    def loop() -> None:
        calls.append(1)
        if len(calls) == 2:
            seen.set()
            stop.wait()

    sv = threads.Supervisor(stop, __import__("logging").getLogger("test-supervisor"))
    sv.thread("worker", loop)
    sv.thread("one-shot", lambda: None, until_stopped=False)
    sv.start()
    assert seen.wait(30)
    stop.set()
    assert sv.join(30) == []
    assert {n: f.failures for n, f in sv.faults().items()} == {"worker": 1, "one-shot": 0}


def test_the_watchdog_sees_work_waiting_unfinished_once_and_never_an_idle_node():
    dog = threads.Watchdog(period=10.0)
    assert dog.check(arrived=5, done=5, now=0.0) == 0.0  # progress
    assert dog.check(arrived=5, done=5, now=100.0) == 0.0  # idle for long: not a stall
    assert dog.check(arrived=6, done=5, now=100.0) == 0.0  # work arrived: its clock starts now
    assert dog.check(arrived=9, done=5, now=109.0) == 0.0
    assert dog.check(arrived=9, done=5, now=110.0) == 10.0 and dog.stalls == 1
    assert dog.check(arrived=12, done=5, now=130.0) == 30.0 and dog.stalls == 1  # one stall, however long
    assert dog.check(arrived=12, done=6, now=131.0) == 0.0  # it moved again
    assert dog.check(arrived=13, done=6, now=131.0) == 0.0
    assert dog.check(arrived=13, done=6, now=150.0) == 19.0 and dog.stalls == 2
    off = threads.Watchdog(period=0.0)
    assert off.check(1, 0, now=0.0) == off.check(9, 0, now=1e6) == 0.0 and off.stalls == 0


_SIGNALS = """
import os, signal, sys
from openclaw_vision.runtime.threads import stop_signals
stop = stop_signals()
print("installed", flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIG{first})
assert stop.wait(30) and stop.exit_code == 0
print("asked", stop.reason, flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIG{second})
print("still running", flush=True)
"""


@pytest.mark.parametrize(("first", "second", "code"), [("TERM", "INT", 130), ("INT", "TERM", 143)])
def test_the_first_signal_asks_for_a_stop_and_a_second_one_exits_at_once(first, second, code):
    script = _SIGNALS.format(first=first, second=second)
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen([sys.executable, "-c", script], text=True, **pipes)
    assert proc.stdout.readline().strip() == "installed"
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == f"asked SIG{first}"
    proc.stdin.write("\n")
    proc.stdin.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and "still running" not in out, (out, err)
    assert f"second signal (SIG{second}): exiting now" in err


_OTHER_THREAD = """
import signal, sys, threading
from openclaw_vision.runtime.threads import stop_signals
stop = stop_signals()
idle = threading.Thread(target=threading.Event().wait, daemon=True)  # a thread with every signal unblocked
idle.start()
# The main thread blocks SIGTERM, as Cyclone DDS's thread creation does for a moment: the kernel delivers the
# signal to the other thread, and nothing interrupts the main thread's wait.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
print("waiting", flush=True)
print("stopped" if stop.wait() else "not stopped", stop.reason, flush=True)  # no timeout, as the node waits
"""


def test_a_signal_delivered_to_another_thread_still_ends_the_wait(tmp_path):
    """The encoder once ignored SIGTERM under load: the signal went to a thread other than the main one, whose
    wait was then never interrupted (the stop bench saw it in 1 of 6 stops). The wait wakes on Python's
    wakeup fd, which the interpreter writes on whichever thread the signal arrives."""
    from openclaw_vision.core import children

    with children.Child(children.python("-c", _OTHER_THREAD), tmp_path / "child.log") as child:
        assert child.wait_for_line("waiting", 60) == "waiting", child.log_text()
        child.send(signal.SIGTERM)  # its group: the child alone
        code = child.wait(60)  # liveness: without the wakeup fd it waits forever
        said = child.log_text()
    lines = said.splitlines()
    assert code == 0 and lines[lines.index("waiting") + 1 :] == ["stopped SIGTERM"], said


def test_a_node_whose_threads_keep_failing_makes_the_runner_stop_it_with_exit_code_1(tmp_path):
    """run_until_signal with a node whose one loop always fails: the supervisor's fatal verdict ends the
    wait (no signal), the node is stopped and its final stats written, and the exit code is 1."""
    from openclaw_vision.ros.runner import run_until_signal

    class Node:
        def __init__(self) -> None:
            self.stop_event = threading.Event()
            self.supervisor = threads.Supervisor(self.stop_event, __import__("logging").getLogger("test-node"))
            self.supervisor.thread("worker", Faulty(lambda: None, times=10**6))
            self.stopped = False

        def start(self) -> None:
            self.supervisor.start()

        def stop(self) -> None:
            self.stop_event.set()
            self.supervisor.join(30)
            self.stopped = True

        def stats(self) -> dict:
            return {"thread_failures": self.supervisor.failures()}

    node, stop = Node(), threads.StopSignals()  # not installed: the pytest process keeps its handlers
    stats = run_until_signal(node, tmp_path / "stats.json", ("thread_failures",), __import__("logging").getLogger("t"),
                             stop)  # fmt: skip
    assert node.stopped and stop.exit_code == 1 and stop.reason == node.supervisor.fatal
    assert stats == {"thread_failures": threads.MAX_FAILURES}
    assert (tmp_path / "stats.json").exists()


# --- each thread of each node, with a fault injected ------------------------------------------------
def _image(t, n: int, rows: np.ndarray):
    from openclaw_vision.ros.convert import ns_to_stamp
    from openclaw_vision.ros.types import HEADER, IMAGE

    header = t.msg(HEADER)(stamp=ns_to_stamp(t, 1_000_000_000 + n), frame_id="cam")
    return t.msg(IMAGE)(header=header, height=rows.shape[0], width=rows.shape[1] // 3, encoding="rgb8",
                        is_bigendian=0, step=rows.shape[1], data=rows.tobytes())  # fmt: skip


def _settled(node) -> int:
    """Frames the node has counted as encoded, dropped, rejected or failed."""
    return sum(node.counters.snapshot()[k] for k in ("encoded", "dropped", "rejected", "failed"))


def _send_until_encoded(node, pub, t, want: int, rows: np.ndarray) -> None:
    """Send frames one at a time, each once the previous is settled, until `want` are encoded."""
    n = 0
    while node.counters.snapshot()["encoded"] < want:
        n += 1
        before = _settled(node)
        pub.publish(_image(t, n, rows))
        wait_until(lambda b=before: _settled(node) > b, 60, "frame settled")
        assert n < 50, node.stats()


@pytest.mark.dds
@pytest.mark.parametrize(
    ("thread", "overlap", "inject"),
    [
        ("encoder-worker", False, "_encode_and_publish"),  # one thread runs both stages
        ("encoder-prepare", True, "take"),  # overlap: the first stage, at its take from the slots
        ("encoder-worker", True, "_encode_and_publish"),  # overlap: the second stage
        ("diagnostics", False, "publish_diagnostics"),
    ],
)
def test_an_encoder_thread_that_fails_is_shown_restarted_and_serves_the_next_frame(thread, overlap, inject, tiny_model,
                                                                                 dds_domain, caplog):  # fmt: skip
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, QoS

    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("camera")
    enc = OnnxRuntimeEncoder(tiny_model, threads=1)
    enc.backend = "triton" if overlap else enc.backend  # a backend that is not a CPU runtime: overlap on its own
    node = EncoderNode(EncoderConfig(diagnostics_period=0.05), node_t, enc, overlap=overlap)
    owner = node._slots if inject == "take" else node
    fault = Faulty(getattr(owner, inject))
    setattr(owner, inject, fault)
    try:
        pub = cam_t.publisher("/camera/image_raw", IMAGE, QoS("reliable", 10))
        with caplog.at_level("ERROR", logger="encoder_node"):
            node.start()
            wait_until(lambda: node_matched(node, [pub]), 60, "the node's subscription")
            rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
            wait_until(lambda: fault.calls >= 1 or inject != "publish_diagnostics", 60, "diagnostics")
            _send_until_encoded(node, pub, cam_t, 2, rows)  # the fault was hit, and frames were encoded after it
            assert fault.left == 0
            st = node.stats()
            assert st["thread_failures"] == 1
            assert f"thread {thread} failed 1 time(s), last: RuntimeError: injected fault" == node.health(st)
    finally:
        node.stop()
        node_t.close()
        cam_t.close()
    failed = [r.getMessage() for r in caplog.records if f"thread {thread} failed" in r.getMessage()]
    assert len(failed) == 1 and "Traceback" in failed[0], failed
    st = node.stats()
    assert st["received"] == st["encoded"] + st["dropped"] + st["rejected"] + st["failed"] > 0, st
    if inject == "_encode_and_publish":  # the batch the fault hit: counted as failed, its reason kept
        assert st["failed"] == 1 and "injected fault" in node.last_failure


@pytest.mark.dds
def test_a_stuck_encode_is_a_stall_on_diagnostics_and_counted_once(tiny_model, dds_domain):
    from test_multi_camera import GatedEncoder

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.encoder_node import EncoderNode
    from openclaw_vision.ros.types import IMAGE, QoS

    node_t, cam_t = CycloneTransport("encoder_node"), CycloneTransport("camera")
    enc = GatedEncoder(OnnxRuntimeEncoder(tiny_model, threads=1))  # its calls wait until the gate opens
    node = EncoderNode(EncoderConfig(diagnostics_period=0.05, watchdog_period=0.2), node_t, enc)
    try:
        pub = cam_t.publisher("/camera/image_raw", IMAGE, QoS("reliable", 10))
        node.start()
        wait_until(lambda: node_matched(node, [pub]), 60, "the node's subscription")
        rows = np.random.default_rng(0).integers(0, 256, (48, 64 * 3), np.uint8)
        pub.publish(_image(cam_t, 1, rows))
        assert enc.inside.wait(60)
        for n in range(2, 5):  # frames keep arriving while the encode hangs
            pub.publish(_image(cam_t, n, rows))
        wait_until(lambda: node.stats()["stalls"] == 1, 60, "the stall")
        assert node.health(node.stats()).startswith("stalled: frames arriving and none encoded for ")
        enc.gate.set()  # the encode returns: the node works again
        wait_until(lambda: node.stats()["encoded"] >= 2, 60, "frames encoded after the stall")
        wait_until(lambda: node.health(node.stats()) == "", 60, "the stall cleared")
        assert node.stats()["stalls"] == 1
    finally:
        enc.gate.set()
        node.stop()
        node_t.close()
        cam_t.close()


@pytest.mark.dds
@pytest.mark.vlm
@pytest.mark.parametrize("thread", ["vlm-worker", "diagnostics"])
def test_a_vlm_thread_that_fails_is_shown_restarted_and_answers_the_next_question(thread, dds_domain, caplog):
    from dds_helpers import Inbox

    from openclaw_vision.ros.convert import ns_to_stamp
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import DEFAULT, HEADER, STRING, VISUAL_FEATURES
    from openclaw_vision.ros.vlm_node import VLM_ANSWER, VlmNode, build_pipeline

    cfg = VlmConfig(llm="tiny", model="tiny", visual_tokens=4, max_new_tokens=3, diagnostics_period=0.05)
    node_t, t = CycloneTransport("vlm_node"), CycloneTransport("asker")
    node = VlmNode(cfg, node_t, build_pipeline(cfg))
    name = "_answer" if thread == "vlm-worker" else "publish_diagnostics"
    fault = Faulty(getattr(node, name))
    setattr(node, name, fault)
    try:
        feats = t.publisher(cfg.features_topic, VISUAL_FEATURES, DEFAULT)
        prompts = t.publisher(cfg.prompt_topic, STRING, DEFAULT)
        answers = Inbox()
        sub = t.subscribe(cfg.answer_topic, VLM_ANSWER, DEFAULT, answers)
        with caplog.at_level("ERROR", logger="vlm_node"):
            node.start()
            wait_until(lambda: feats.matched() and prompts.matched() and sub.matched(), 60, "matched")
            header = t.msg(HEADER)(stamp=ns_to_stamp(t, 5), frame_id="cam")
            vec = np.random.default_rng(0).standard_normal(cfg.embed_dim).astype(np.float32)
            msg = t.msg(VISUAL_FEATURES)(header=header, model_id="tiny", dim=vec.size, embedding=t.float_array(vec))
            feats.publish(msg)
            wait_until(lambda: node._latest is not None, 60, "features held")
            asked = 0
            while not answers.items:
                asked += 1
                prompts.publish(t.msg(STRING)(data=f"question {asked}?"))
                wait_until(lambda a=asked: sum(node.counters.snapshot()[k] for k in ("answered", "failed",
                                                                                     "rejected")) >= a, 60)  # fmt: skip
                assert asked < 10, node.stats()
            wait_until(lambda: fault.left == 0, 60, "the fault")
            st = node.stats()
            assert st["thread_failures"] == 1
            assert node.health(st) == f"thread {thread} failed 1 time(s), last: RuntimeError: injected fault"
    finally:
        node.stop()
        node_t.close()
        t.close()
    failed = [r.getMessage() for r in caplog.records if f"thread {thread} failed" in r.getMessage()]
    assert len(failed) == 1 and "Traceback" in failed[0]
    st = node.stats()
    assert st["prompts"] == st["answered"] + st["failed"] + st["rejected"] + st["unanswered"], st
    if thread == "vlm-worker":  # the question the fault hit: failed, not lost; the next one answered
        assert st["failed"] == 1 and st["answered"] >= 1


@pytest.mark.dds
def test_the_memory_writer_that_fails_is_shown_restarted_and_writes_the_rows(dds_domain, tmp_path, caplog):
    from openclaw_vision.memory.store import VisualMemory
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.memory_node import MemoryNode
    from openclaw_vision.runtime.config import MemoryConfig

    cfg = MemoryConfig(store=str(tmp_path / "store"), batch_rows=1, flush_period=0.05, diagnostics_period=0.05)
    node_t = CycloneTransport("memory_node")
    node = MemoryNode(cfg, node_t, VisualMemory(cfg.store))
    fault = Faulty(node.flush)
    node.flush = fault
    try:
        with caplog.at_level("ERROR", logger="memory_node"):
            node.start()
            wait_until(lambda: fault.left == 0 and fault.calls >= 2, 60, "the writer after its fault")
            st = node.stats()
            assert st["thread_failures"] == 1
    finally:
        node.stop()
        node_t.close()
    failed = [r.getMessage() for r in caplog.records if "thread memory-writer failed" in r.getMessage()]
    assert len(failed) == 1 and "Traceback" in failed[0]


_LOADING_NODE = """
import sys
from pathlib import Path
from openclaw_vision.encoders import onnxruntime
onnxruntime.check_model_file = Path  # a FIFO is not a regular file: let the load open it and wait there
from openclaw_vision.ros.encoder_node import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_model_that_never_finishes_loading_is_left_on_a_signal(tmp_path):
    """The stop while the model loads: the load blocks reading the model file (a FIFO nobody writes), the
    node gets SIGTERM and exits 0 at once, without waiting for the load (ros.runner.build_or_stop)."""
    import os

    from openclaw_vision.core import children
    from openclaw_vision.ros import dds_config

    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    args = ["--model", "tiny", "--model-path", str(fifo), "--precision", "fp32", "--transport", "cyclonedds",
            "--backend", "onnxruntime"]  # fmt: skip
    node = children.Child([sys.executable, "-c", _LOADING_NODE, *args], tmp_path / "node.log",
                          {"CYCLONEDDS_URI": dds_config.chosen_uri(os.environ)})  # fmt: skip
    writer: list[int] = []
    try:

        def reading() -> bool:  # the node has opened the model file: it is inside the load
            try:
                # held open until the node is gone: closing it would be an end of file, and the node's read would
                # return an empty model and fail the load before the signal came (seen once on CI)
                writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                assert node.alive(), node.log_text()[-2000:]
                return False
            return True

        wait_until(reading, 120, "the node opening its model")
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(60) == 0, node.log_text()[-2000:]
    finally:
        node.stop()
        for fd in writer:
            os.close(fd)
    log = node.log_text()
    assert "stopping (SIGTERM) while the node loads: exiting without waiting for it" in log, log[-2000:]
    assert "Traceback" not in log
