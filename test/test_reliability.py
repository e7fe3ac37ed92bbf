"""Trying to break the encoder node: the real process, over real (loopback) DDS, with the tiny model.

- fuzz: 10 000 generated Image messages (test/image_fuzz.py), bad ones interleaved with good
  ones: every bad one rejected and counted, every good one encoded or dropped for a newer
  frame, the counters add up exactly to what was sent, the process lives on;
- compressed fuzz: 3000 generated CompressedImage messages (test/compressed_fuzz.py) through a
  node with `image_transport: compressed`, then every defect only a decoder sees, one at a time:
  each bad one rejected, the counts add up, peak memory stays bounded (no header makes the
  decoder allocate gigabytes);
- overload: 20 000 frames as fast as the node takes them, to a node that encodes one in ~15 ms:
  resident memory stays bounded, every frame is encoded or dropped and counted exactly, features
  come only for encoded frames and the newest frame is served (its rates and latency: `bench --mode
  overload`);
- faults: bad model files stop the node at start with one error line and exit code 2; a frame
  the model fails on is counted as failed and the next one served; SIGINT/SIGTERM stop it
  cleanly within 2 s with the final counters logged; publishers leaving and coming back.

Nothing here times the node's speed: rates and latency under overload are `bench --mode overload`
figures; a deadline here only says the node is still alive.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import compressed_fuzz
import numpy as np
import onnx
import pytest
from compressed_fuzz import AT_ARRIVAL, BY_DECODING, CompressedCase
from dds_helpers import cameras_connected
from image_fuzz import ImageCase, generate
from onnx import TensorProto, helper

from openclaw_vision.bench.overload import memory_mb, reset_peak, slow_model
from openclaw_vision.core import children
from openclaw_vision.ros.convert import stamp_to_ns
from openclaw_vision.ros.diagnostics import status_values
from openclaw_vision.ros.intake import COUNTS
from openclaw_vision.ros.node_counters import STATUS_NAME
from openclaw_vision.ros.process import NodeProcess
from openclaw_vision.ros.types import COMPRESSED_IMAGE, DIAGNOSTIC_ARRAY, IMAGE, VISUAL_FEATURES, QoS
from openclaw_vision.runtime.bags import COMPRESSED_SUFFIX

pytestmark = [pytest.mark.reliability, pytest.mark.dds]

FUZZ_MESSAGES = 10_000
COMPRESSED_FUZZ_MESSAGES = 3_000
#: What the node's peak resident memory may grow by over the compressed fuzz, after warming up: a
#: few decoded frames of at most 512×512 and allocator slack. One JPEG header claiming 30000×30000
#: over 600 bytes of data, decoded, took 5.2 GB and 10 s here (libjpeg fills missing data with grey).
COMPRESSED_RSS_GROWTH_BOUND_MB = 256.0
#: ... and its peak address space (untouched allocations included: a PNG claiming 32768×32767
#: RGBA16 would have OpenCV allocate 8 GB for the rows libpng then fails to read)
COMPRESSED_VM_GROWTH_BOUND_MB = 1024.0
#: Frames the overload's camera floods before memory counts (the node's buffers and allocator reach
#: their steady state), then the frames measured.
OVERLOAD_WARMUP_FRAMES = 2_000
OVERLOAD_FRAMES = 20_000
#: Resident memory the node may gain during the overload over what it held after warming up:
#: its reader buffer (32 samples of 9 KB), one frame in the slot, and allocator slack. A leak of
#: one 9 KB frame per dropped frame would cross it within the first ~4 000 of the 20 000 sent.
RSS_GROWTH_BOUND_MB = 32.0


# --- the test's side of the wire ----------------------------------------------------------------
class Link:
    """Publishes images to a node and collects its /visual_features and /diagnostics."""

    def __init__(self, transport, topic: str = "/camera/image_raw", ros_type: str = IMAGE) -> None:
        self.transport = transport
        self.Image = transport.msg(ros_type)
        self.Header = transport.msg("std_msgs/msg/Header")
        self.Time = transport.msg("builtin_interfaces/msg/Time")
        self.cond = threading.Condition()
        self.features: dict[int, tuple[int, str]] = {}  # stamp ns → (receipt ns, frame_id)
        self.duplicates = 0
        self.diag: dict[str, str] | None = None
        # the node's side of the match, from its camera's status (keyed by its image_topic: a compressed transport
        # subscribes to that topic + /compressed)
        self.connected = cameras_connected([topic.removesuffix(COMPRESSED_SUFFIX)])
        self.ready = False
        self.pub = transport.publisher(topic, ros_type, QoS("reliable", 10, "keep_all"))
        self.feat_sub = transport.subscribe("/visual_features", VISUAL_FEATURES, QoS("reliable", 100), self._on_feat)
        transport.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), self._on_diag)
        self._last_stamp = 0

    def _on_feat(self, msg, _dt) -> None:
        now = time.time_ns()
        with self.cond:
            stamp = stamp_to_ns(msg.header.stamp)
            self.duplicates += stamp in self.features
            self.features[stamp] = (now, msg.header.frame_id)
            self.cond.notify_all()

    def _on_diag(self, msg, _dt) -> None:
        values = status_values(msg, STATUS_NAME)
        if values is not None:
            with self.cond:
                self.diag = values
                self.ready = self.ready or self.connected([msg])
                self.cond.notify_all()

    def wait(self, pred, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.pub.matched() < 1 or self.feat_sub.matched() < 1 or not self.ready:
            assert time.monotonic() < deadline, "the node did not come up on DDS"
            time.sleep(0.05)

    def counts(self) -> dict[str, int]:
        with self.cond:
            return {k: int(self.diag[k]) for k in (*COUNTS, "lost")} if self.diag else {}

    def stages(self) -> dict[str, float]:
        with self.cond:
            return {k: float(v) for k, v in (self.diag or {}).items() if k.endswith("_ms_p50")}

    def next_stamp(self) -> int:
        """The send time in ns, unique: latency is receipt minus stamp, both on this host's clock."""
        self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
        return self._last_stamp

    def send(self, case: ImageCase | CompressedCase) -> int:
        stamp = self.next_stamp()
        header = self.Header(stamp=self.Time(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=case.frame_id)
        self.pub.publish(self.Image(header=header, **case.fields()))
        return stamp

    def settled(self, sent: int, base: dict[str, int]) -> bool:
        """The node has classified every frame sent since `base`, and its features all arrived."""
        c = self.counts()
        if not c:
            return False
        d = {k: c[k] - base.get(k, 0) for k in c}
        classified = d["encoded"] + d["dropped"] + d["rejected"] + d["failed"]
        heard = len(self.features) - base.get("features_heard", 0)
        return d["received"] >= sent and classified == d["received"] and heard >= d["encoded"]

    def quiet_counts(self, received: int = 0, timeout: float = 30.0) -> dict[str, int]:
        """The node's counters once it has received at least `received` frames and classified each
        (a /diagnostics snapshot can be a period old, or catch a frame between 'received' and 'encoded')."""

        def quiet() -> bool:
            c = self.counts()
            done = c.get("received", -1) >= received
            return done and c["received"] == c["encoded"] + c["dropped"] + c["rejected"] + c["failed"]

        assert self.wait(quiet, timeout), self.counts()
        with self.cond:  # the features this link had heard by then: later ones are what `settled` waits for
            return {**self.counts(), "features_heard": len(self.features)}

    def close(self) -> None:
        self.transport.close()


def _transport(name: str):
    from openclaw_vision.ros.cyclone import CycloneTransport

    return CycloneTransport(name)


def _node(tmp_path: Path, *extra: str, model: Path) -> NodeProcess:
    return NodeProcess(
        ["--model", "tiny", "--model-path", str(model), "--reliability", "reliable", "--depth", "5",
         "--diagnostics-period", "0.2", "--transport", "cyclonedds", "--threads", "1",
         "--stats-json", str(tmp_path / "stats.json"), *extra],
        log_path=tmp_path / "node.log",
    )  # fmt: skip


SENDER = Path(__file__).with_name("camera_sender.py")


class Camera:
    """test/camera_sender.py in its own process (see there why), a children.Child whose output goes to a log
    file (never a pipe that only a readline drains); `stamps()` once it is done."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.out = tmp_path / "sent.json"
        self.child = children.Child(children.python(str(SENDER), *args, str(self.out)), tmp_path / "camera.log")
        # it gives up after 60 s without a node ('no node'): the wait only guards liveness
        line = self.child.wait_for_line("ready", 120)
        assert line == "ready", f"camera process ({self.child.how}): {self.child.log_text()[-2000:]!r}"

    def stamps(self, timeout: float = 180.0) -> list[int]:
        assert self.child.wait(timeout) == 0, self.child.log_text()[-2000:]
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        self.child.stop(stop_signal=signal.SIGKILL)


def _frame(rng, h: int = 48, w: int = 64, value: int | None = None) -> ImageCase:
    data = np.full((h, w, 3), value, np.uint8) if value is not None else rng.integers(0, 256, (h, w, 3), np.uint8)
    return ImageCase("good", h, w, w * 3, "rgb8", data.tobytes(), "camera", True)


def _stopped_counts(log_text: str) -> dict[str, int]:
    line = next(line for line in log_text.splitlines() if "] INFO: stopped: " in line)
    return json.loads(line.split("stopped: ", 1)[1])


@pytest.fixture()
def link(dds_domain):
    lk = Link(_transport("reliability_test"))
    yield lk
    lk.close()


# --- fuzz ---------------------------------------------------------------------------------------
def test_fuzzed_images_are_each_rejected_or_served_and_the_counts_add_up_exactly(tiny_model, link, tmp_path):
    with _node(tmp_path, model=tiny_model) as node:
        link.wait_ready()
        base = link.quiet_counts()
        camera = Camera(tmp_path, "fuzz", str(FUZZ_MESSAGES), "12")
        try:
            stamps = camera.stamps()
        finally:
            camera.kill()
        cases = list(generate(FUZZ_MESSAGES, seed=12))  # the same seeded sequence the camera sent
        sent = len(stamps)
        good_ids = {st: c.frame_id for st, c in zip(stamps, cases, strict=True) if c.valid}
        kinds, n_bad = Counter(c.kind for c in cases), sum(not c.valid for c in cases)
        assert link.wait(lambda: link.settled(sent, base), 120), (link.counts(), node.log_text()[-3000:])
        d = {k: v - base[k] for k, v in link.counts().items()}
        assert node.alive()

        assert sent == FUZZ_MESSAGES and len(kinds) >= 13 and kinds["good_4k"] >= 1
        assert d["received"] == sent and d["lost"] == 0  # reliable: nothing lost on the way
        assert d["rejected"] == n_bad  # every bad one, and nothing else
        assert d["failed"] == 0  # no valid image made preprocessing or the encoder fail
        assert d["encoded"] + d["dropped"] == len(good_ids)
        assert d["encoded"] == len(link.features) and link.duplicates == 0
        for stamp, (_, frame_id) in link.features.items():  # features only for valid frames, header intact
            assert good_ids[stamp] == frame_id
        assert stamps[-1] in link.features and cases[-1].valid  # the newest frame is always served
        assert "rejected image on /camera/image_raw" in node.log_text()
        assert "Traceback" not in node.log_text()
        assert node.stop() == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert {k: stats[k] for k in COUNTS} == {k: d[k] + base[k] for k in COUNTS}
    print(f"\nfuzz: {sent} messages {dict(kinds)}; node counts {d}")


# --- fuzz: compressed images -------------------------------------------------------------------------
def _memory_mb(pid: int) -> dict[str, float]:
    """Peak resident memory (VmHWM) and peak address space (VmPeak) of a process, MB."""
    with open(f"/proc/{pid}/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmHWM", "VmPeak")}


def test_fuzzed_compressed_images_are_rejected_never_encoded_and_the_counts_add_up_exactly(
    tiny_model, dds_domain, tmp_path
):
    """CompressedImage through a node with `image_transport: compressed`: a stream of generated messages
    as fast as the node takes them, then every defect only a decoder sees, one at a time (lockstep: nothing
    displaces the frame, so it must be decoded and rejected, never dropped)."""
    link = Link(_transport("reliability_compressed"), "/camera/image_raw/compressed", COMPRESSED_IMAGE)
    rng = np.random.default_rng(21)
    try:
        with _node(tmp_path, "--image-transport", "compressed", "--diagnostics-period", "0.05",
                   model=tiny_model) as node:  # fmt: skip
            link.wait_ready()
            for make in (compressed_fuzz.good_jpeg, compressed_fuzz.good_png, compressed_fuzz.good_flat):
                stamp = link.send(make(rng))  # warm up: both decoders and the largest good frames once
                assert link.wait(lambda s=stamp: s in link.features, 30), node.log_text()[-2000:]
            base = link.quiet_counts(received=3)
            mem_base = _memory_mb(node.proc.pid)

            # 1. the stream
            camera = Camera(tmp_path, "compressed", str(COMPRESSED_FUZZ_MESSAGES), "21")
            try:
                stamps = camera.stamps()
            finally:
                camera.kill()
            cases = list(compressed_fuzz.generate(COMPRESSED_FUZZ_MESSAGES, seed=21))  # what the camera sent
            sent = len(stamps)
            assert link.wait(lambda: link.settled(sent, base), 120), (link.counts(), node.log_text()[-3000:])
            d = {k: v - base[k] for k, v in link.counts().items()}
            assert node.alive()
            by_stamp = dict(zip(stamps, cases, strict=True))
            verdicts = Counter(c.verdict for c in cases)
            kinds = Counter(c.kind for c in cases)
            assert sent == COMPRESSED_FUZZ_MESSAGES and set(kinds) == set(compressed_fuzz.KINDS)
            assert d["received"] == sent and d["lost"] == 0
            assert d["failed"] == 0
            # every bad message is rejected, or dropped if only decoding shows its defect; good ones never rejected
            assert verdicts[AT_ARRIVAL] <= d["rejected"] <= verdicts[AT_ARRIVAL] + verdicts[BY_DECODING], (d, verdicts)
            assert d["encoded"] + d["dropped"] + d["rejected"] == sent
            served = {s: fid for s, (_, fid) in link.features.items() if s in by_stamp}
            assert len(served) == d["encoded"] and link.duplicates == 0
            for stamp, frame_id in served.items():  # features only for good frames, their headers intact
                case = by_stamp[stamp]
                assert case.valid and case.frame_id == frame_id, (case.kind, case.format, frame_id)
            assert stamps[-1] in served and cases[-1].valid  # the newest frame is always served

            # 2. lockstep: each defect only a decoder sees is decoded and rejected; the next good frame served
            lockstep = compressed_fuzz.by_decoding(per_kind=4, seed=22)
            for bad in lockstep:
                before = link.quiet_counts(received=base["received"] + sent)
                link.send(bad)
                after = link.quiet_counts(received=before["received"] + 1)
                step = {k: after[k] - before[k] for k in (*COUNTS, "lost")}
                assert step == {**dict.fromkeys((*COUNTS, "lost"), 0), "received": 1, "rejected": 1}, (bad.kind, step)
                make = compressed_fuzz.good_jpeg if rng.random() < 0.5 else compressed_fuzz.good_png
                good = link.send(make(rng))
                assert link.wait(lambda s=good: s in link.features, 30), (bad.kind, node.log_text()[-2000:])
                sent += 2
            mem = _memory_mb(node.proc.pid)
            assert node.alive()
            log_text = node.log_text()
            assert "rejected image on /camera/image_raw/compressed" in log_text
            assert "Traceback" not in log_text
            assert node.stop() == 0
    finally:
        link.close()
    # no frame made the node allocate gigabytes, resident or not
    assert mem["VmHWM"] - mem_base["VmHWM"] <= COMPRESSED_RSS_GROWTH_BOUND_MB, (mem_base, mem)
    assert mem["VmPeak"] - mem_base["VmPeak"] <= COMPRESSED_VM_GROWTH_BOUND_MB, (mem_base, mem)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["received"] == stats["encoded"] + stats["dropped"] + stats["rejected"] + stats["failed"]
    assert stats["received"] == base["received"] + sent and stats["failed"] == 0
    print(
        f"\ncompressed fuzz: {COMPRESSED_FUZZ_MESSAGES} messages ({dict(verdicts)}), {dict(kinds)}; node counts {d}; "
        f"lockstep: {len(lockstep)} decode-only defects, each rejected; memory {mem_base} -> {mem}"
    )


# --- overload -----------------------------------------------------------------------------------
def test_overload_keeps_memory_bounded_and_counts_every_frame_encoded_or_dropped(tiny_model, link, tmp_path):
    """A camera flooding a node that encodes one frame in ~15 ms (bench.overload.slow_model): the node
    keeps the newest frame, drops and counts the rest, and holds no more memory at the end than after
    the first 2 000. The overload is in counts (more dropped than encoded), never in rates."""
    model = slow_model(tiny_model, tmp_path / "slow.onnx")
    with _node(tmp_path, model=model) as node:
        link.wait_ready()
        start = link.quiet_counts()
        warm = Camera(tmp_path, "flood", str(OVERLOAD_WARMUP_FRAMES))
        try:
            warm_sent = len(warm.stamps())
        finally:
            warm.kill()
        assert link.wait(lambda: link.settled(warm_sent, start), 120), (link.counts(), node.log_text()[-3000:])
        base = link.quiet_counts(received=start["received"] + warm_sent)
        reset_peak(node.proc.pid)  # VmHWM from here on: the peak of the measured frames alone
        rss_base = memory_mb(node.proc.pid)["VmRSS"]
        camera = Camera(tmp_path, "flood", str(OVERLOAD_FRAMES))
        try:
            stamps = camera.stamps()
        finally:
            camera.kill()
        sent = dict.fromkeys(stamps)
        assert link.wait(lambda: link.settled(len(sent), base), 120), (len(sent), len(link.features), link.counts())
        rss_peak = memory_mb(node.proc.pid)["VmHWM"]
        d = {k: v - base[k] for k, v in link.counts().items()}
        assert node.alive()
        assert "Traceback" not in node.log_text()

    # drops are exact: every frame sent was received and is either encoded (its features came) or dropped
    assert len(sent) == OVERLOAD_FRAMES
    assert d["received"] == len(sent) and d["lost"] == 0 and d["rejected"] == d["failed"] == 0
    assert d["encoded"] + d["dropped"] == len(sent)
    served = [s for s in stamps if s in link.features]
    assert len(served) == d["encoded"] and link.duplicates == 0  # features for encoded frames only, once each
    assert stamps[-1] in link.features  # the newest frame is always served
    # it was an overload, in counts: the node dropped more frames than it encoded
    assert d["dropped"] >= d["encoded"] > 0, d
    # memory is bounded: its peak over the measured frames stays within the bound of what it held before
    growth = rss_peak - rss_base
    assert growth <= RSS_GROWTH_BOUND_MB, (rss_base, rss_peak)
    print(
        f"\noverload: sent {len(sent)} after {warm_sent} to warm up, encoded {d['encoded']}, dropped {d['dropped']}; "
        f"RSS {rss_base:.1f} MB after warm-up, peak {rss_peak:.1f} MB (+{growth:.1f}, bound +{RSS_GROWTH_BOUND_MB})"
    )


# --- faults: bad model files --------------------------------------------------------------------
def _foreign(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Add", ["ids", "ids"], ["y"])],
        "text_like",
        [helper.make_tensor_value_info("ids", TensorProto.FLOAT, ["N", 77])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 77])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "model file not found: {path}"),
        ("truncated", "cannot load {path}: "),
        ("foreign", "{path} is not an image encoder: input "),
    ],
)
def test_a_bad_model_file_stops_the_node_at_start_with_one_error_line_and_exit_2(
    kind, message, tiny_model, tmp_path, dds_domain
):
    path = tmp_path / f"{kind}.onnx"
    if kind == "truncated":
        path.write_bytes(tiny_model.read_bytes()[: tiny_model.stat().st_size // 3])
    elif kind == "foreign":
        _foreign(path)
    res = children.run(children.cli("encoder", "--model-path", str(path), "--transport", "cyclonedds"), timeout=120)
    out = res.stdout + res.stderr
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert res.returncode == 2, out
    assert len(errors) == 1 and message.format(path=path) in errors[0], out
    assert "Traceback" not in out and "ready:" not in out


# --- faults: the encoder fails on one frame -------------------------------------------------------
def poison_model(src: Path, dst: Path, threshold: float = 1.5) -> Path:
    """The tiny encoder with one more step that fails at run time when the mean normalised pixel is above
    `threshold` (a white frame: ~2.05; camera frames: ~0): it reshapes the (1, D) output to (-1, D + 1),
    which has no solution. The same model, the real process, the node's real error path."""
    model = onnx.load(str(src))
    g = model.graph
    out = g.output[0].name
    dim = int(next(p.value for p in model.metadata_props if p.key == "embed_dim"))
    g.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.array(threshold, np.float32), "poison_threshold"),
            onnx.numpy_helper.from_array(np.array([-1, dim], np.int64), "poison_shape"),
            onnx.numpy_helper.from_array(np.array([0, 1], np.int64), "poison_step"),
        ]
    )
    g.node.extend(
        [
            helper.make_node("ReduceMean", [g.input[0].name], ["poison_mean"], keepdims=0),
            helper.make_node("Greater", ["poison_mean", "poison_threshold"], ["poison_hit"]),
            helper.make_node("Cast", ["poison_hit"], ["poison_k"], to=TensorProto.INT64),
            helper.make_node("Mul", ["poison_step", "poison_k"], ["poison_delta"]),
            helper.make_node("Add", ["poison_shape", "poison_delta"], ["poison_target"]),
            helper.make_node("Reshape", [out, "poison_target"], ["poisoned"]),
        ]
    )
    g.output[0].name = "poisoned"
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return dst


def test_a_frame_the_encoder_fails_on_is_logged_and_counted_and_the_next_one_is_served(tiny_model, link, tmp_path):
    # ONNX Runtime: it raises on the impossible Reshape. OpenVINO (2026.4) does not: it returned a (1, 32)
    # output, or (0, 0) on a fresh request (which the encoders now refuse), so it cannot poison one frame.
    backend = "onnxruntime"
    model = poison_model(tiny_model, tmp_path / "poison.onnx")
    rng = np.random.default_rng(1)
    with _node(tmp_path, "--backend", backend, model=model) as node:
        link.wait_ready()
        base = link.quiet_counts()
        before = link.send(_frame(rng))
        assert link.wait(lambda: before in link.features, 30)
        white = link.send(_frame(rng, value=255))
        assert link.wait(lambda: link.counts()["failed"] - base["failed"] == 1, 30), link.counts()
        after = link.send(_frame(rng))
        assert link.wait(lambda: after in link.features, 30), node.log_text()[-2000:]
        assert link.wait(lambda: link.settled(3, base), 10)
        d = {k: v - base[k] for k, v in link.counts().items()}
        assert d == {"received": 3, "encoded": 2, "dropped": 0, "rejected": 0, "failed": 1, "lost": 0}
        assert white not in link.features and node.alive()
        assert "encoding a frame failed" in node.log_text()
        assert f"backend {backend}/fp32" in node.log_text()


# --- faults: signals ----------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_encode_stops_the_node_with_exit_0_and_its_final_counts_logged(sig, tiny_model, link,
                                                                                  tmp_path):  # fmt: skip
    """How long the stop takes is a bench figure (`openclaw-vision bench --mode stop`, P50/P99 per phase
    beside a CPU hog); this test asserts what a user sees: exit 0 and every frame in the final counts."""
    node = _node(tmp_path, model=tiny_model)
    camera = None
    try:
        link.wait_ready()
        camera = Camera(tmp_path, "paced", "60", "500")  # the node is busy when the signal comes
        assert link.wait(lambda: link.counts().get("encoded", 0) >= 20, 60)
        node.proc.send_signal(sig)
        rc = node.proc.wait(timeout=60)
    finally:
        if camera is not None:
            camera.kill()
        node.stop()
    assert rc == 0, node.log_text()[-2000:]
    final = _stopped_counts(node.log_text())
    assert final["received"] == final["encoded"] + final["dropped"] + final["rejected"] + final["failed"] > 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert {k: stats[k] for k in final} == final
    assert stats["thread_failures"] == 0 and "Traceback" not in node.log_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_discovery_stops_the_node_with_exit_0(sig, tiny_model, tmp_path):
    """The node is up on DDS with nobody to match (no camera, no listener): the signal still ends it, 0."""
    with _node(tmp_path, model=tiny_model) as node:
        assert node.wait_for_line("INFO: ready: ", 120, anywhere=True), node.log_text()[-2000:]  # liveness only
        node.proc.send_signal(sig)
        assert node.proc.wait(timeout=60) == 0, node.log_text()[-2000:]
    assert _stopped_counts(node.log_text())["received"] == 0


# --- faults: publishers come and go ---------------------------------------------------------------
_PUBLISHER = """
import sys, time
import numpy as np
from openclaw_vision.ros.cyclone import CycloneTransport
from openclaw_vision.ros.types import IMAGE, QoS
t = CycloneTransport("doomed_publisher")
Image, Header = t.msg(IMAGE), t.msg("std_msgs/msg/Header")
pub = t.publisher("/camera/image_raw", IMAGE, QoS("reliable", 10, "keep_all"))
data = np.random.default_rng(0).integers(0, 256, 48 * 64 * 3, np.uint8).tobytes()
print("publishing", flush=True)
while True:
    pub.publish(Image(header=Header(frame_id="doomed"), height=48, width=64, encoding="rgb8", is_bigendian=0,
                      step=192, data=data))
    time.sleep(0.002)
"""


def _lockstep(link: Link, n: int, rng) -> None:
    for _ in range(n):
        stamp = link.send(_frame(rng))
        assert link.wait(lambda s=stamp: s in link.features, 30), "no features: traffic did not resume"


def test_publishers_that_leave_cleanly_or_die_do_not_stop_the_node_and_traffic_resumes(
    tiny_model, dds_domain, tmp_path
):
    rng = np.random.default_rng(3)
    with _node(tmp_path, model=tiny_model) as node:
        first = Link(_transport("publisher_a"))
        first.wait_ready()
        _lockstep(first, 5, rng)
        first.close()  # a clean leave: the writer is deleted, the node sees its samples end

        doomed = children.Child(children.python("-c", _PUBLISHER), tmp_path / "doomed.log")
        try:
            assert doomed.wait_for_line("publishing", 60) == "publishing", doomed.log_text()[-2000:]
            time.sleep(2.0)  # mid-stream ...
        finally:
            doomed.stop(stop_signal=signal.SIGKILL)  # ... killed: no goodbye on DDS, only a lease that runs out

        second = Link(_transport("publisher_b"))
        try:
            second.wait_ready()
            base = second.quiet_counts()
            _lockstep(second, 5, rng)
            assert second.wait(lambda: second.settled(5, base), 10)
            d = {k: v - base[k] for k, v in second.counts().items()}
            assert d["received"] >= 5 and d["encoded"] >= 5 and d["failed"] == d["rejected"] == 0
        finally:
            second.close()
        assert node.alive()
        assert node.stop() == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["received"] == stats["encoded"] + stats["dropped"] + stats["rejected"] + stats["failed"]
    assert "Traceback" not in node.log_text()
