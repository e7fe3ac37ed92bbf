"""Images into the encoder node on a real Humble, the way robots send them, and features out to real clients.

- rclpy cameras (raw 1080p rgb8, bgr8, yuyv, bayer_rggb8, nv12) → encoder under rclpy → an rclpy
  subscriber: every feature carries its image's header; the node received every frame sent (the
  robot Cyclone config, net.core.rmem_max raised where this process may), `ros2 topic echo --once`
  and `ros2 topic hz` on /visual_features while a camera runs.
- CompressedImage made by image_transport's own `republish raw compressed` (JPEG, PNG) → the node.
- `ros2 bag play` of the sample bags (mcap, sqlite3) with --rate → the node; `ros2 bag record` of
  /visual_features and /visual_labels read back by the project's bag tools and `ros2 bag info`; the
  project's `replay` (pip path, Cyclone) on the bag `ros2 bag record` wrote, into the rclpy node.
- a bag whose stamps skip frames, played into the node: its missing_estimate counts them.
- the other direction of the mixed graph: rclpy camera → pip-path encoder (Cyclone) → rclpy subscriber.
- an image callback that raises under rclpy: logged and counted, and the node goes on encoding.

Frame counts are small: each check is about what arrives and what it carries, not throughput
(the loss measurements are in docs/robot-and-dds.md, "Cyclone DDS on the robot").
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import pytest
from support.humble import ROBOT_CONFIG, ROOT, pip_env, ros_args

from openclaw_vision.core import children
from openclaw_vision.ros import dds_config

SUPPORT = ROOT / "test" / "support"
CAMERA, COUNTER = str(SUPPORT / "rclpy_camera.py"), str(SUPPORT / "rclpy_counter.py")
CALLBACK_FAULT = str(SUPPORT / "rclpy_callback_fault.py")
RAW_ENCODINGS = ("rgb8", "bgr8", "yuyv", "bayer_rggb8", "nv12")
FEATURES = "openclaw_vision/msg/VisualFeatures"


@pytest.fixture(scope="module")
def rmem_raised() -> bool:
    """net.core.rmem_max at least what the robot config asks for: raised here when we may (root), as a
    robot's admin would; otherwise the counts are not asserted exact, and the test says so."""
    want = dds_config.DdsConfig.read(ROBOT_CONFIG.as_uri()).receive_buffer
    got = dds_config.raise_rmem_max(want)
    if got["why_not"]:
        warnings.warn(f"net.core.rmem_max stays {got['rmem_max']} (< {want}): {got['why_not']}; frame counts not "
                      "asserted exact", stacklevel=1)  # fmt: skip
        return False
    if got["raised"]:
        warnings.warn(f"raised net.core.rmem_max {got['rmem_max_before']} -> {want} for the robot config, as a "
                      f"robot's admin would (sysctl -w net.core.rmem_max={want})", stacklevel=1)  # fmt: skip
    return True


def robot_env(ros2, **extra: str) -> dict[str, str]:
    """The shipped robot config under ROS_LOCALHOST_ONLY=1: rmw selects 127.0.0.1, nothing leaves lo."""
    return ros2.environ(localhost_only=True, cyclonedds_uri=ROBOT_CONFIG.as_uri(), **extra)


def start_encoder(ros2, params: dict[str, str], env: dict[str, str], stats: Path, **more: str):
    proc = ros2.start("ros2", "run", "openclaw_vision", "encoder_node", "--stats-json", str(stats),
                      *ros_args({**params, **more}), env=env)  # fmt: skip
    proc.wait_for("ready:", timeout=60)
    return proc


def start_counter(ros2, out: Path, env: dict[str, str], count: int, topic: str = "/visual_features",
                  msg_type: str = FEATURES, seconds: float = 60):  # fmt: skip
    proc = ros2.start("python3", COUNTER, str(out), "--type", msg_type, "--topic", topic, "--count", str(count),
                      "--seconds", str(seconds), env=env)  # fmt: skip
    proc.wait_for("ready", timeout=30)
    return proc


def camera(ros2, out: Path, env: dict[str, str], encoding: str, count: int, fps: float = 5,
           qos: str = "sensor") -> list[tuple]:  # fmt: skip
    """Run an rclpy camera to its end (it waits for one subscriber); the headers it sent."""
    ros2.run("python3", CAMERA, str(out), "--encoding", encoding, "--count", str(count), "--fps", str(fps),
             "--qos", qos, "--frame-id", f"cam_{encoding}", env=env, timeout=90)  # fmt: skip
    return [tuple(h) for h in json.loads(out.read_text())["sent"]]


def headers(path: Path) -> list[tuple]:
    return [tuple(r[:3]) for r in json.loads(path.read_text())["received"]]


def stop(proc) -> None:
    assert proc.stop(timeout=10) == 0, proc.output()[-3000:]


def test_rclpy_cameras_to_the_rclpy_encoder_and_back(ros2, node_params, rmem_raised, tmp_path):
    """Every raw encoding a robot camera sends, 1080p; each feature's header is its image's header."""
    env = robot_env(ros2)
    node = start_encoder(ros2, node_params["encoder_node"], env, tmp_path / "stats.json")
    n = 3
    counter = start_counter(ros2, tmp_path / "features.json", env, count=n * len(RAW_ENCODINGS) + 12)
    # one camera of 12 frames at 5 fps while `ros2 topic echo --once` and `ros2 topic hz` watch the output
    hz = ros2.start("ros2", "topic", "hz", "/visual_features", "--window", "5", env=env)
    cam = ros2.start("python3", CAMERA, str(tmp_path / "cam-hz.json"), "--count", "12", "--fps", "5",
                     "--frame-id", "cam_hz", env=env)  # fmt: skip
    echo = ros2.run("ros2", "topic", "echo", "--once", "--no-arr", "/visual_features", env=env, timeout=60)
    assert cam.wait(60) == 0, cam.output()[-2000:]
    hz.stop(timeout=10)
    sent = {"hz": [tuple(h) for h in json.loads((tmp_path / "cam-hz.json").read_text())["sent"]]}
    for enc in RAW_ENCODINGS:
        sent[enc] = camera(ros2, tmp_path / f"cam-{enc}.json", env, enc, n)
    time.sleep(1.0)
    stop(node)
    counter.stop(timeout=10)

    all_sent = {h for hs in sent.values() for h in hs}
    got = headers(tmp_path / "features.json")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert got and set(got) <= all_sent, f"features whose header is no image's: {set(got) - all_sent}"
    assert len(got) == len(set(got)), "a frame's features came twice"
    for enc in RAW_ENCODINGS:
        assert set(sent[enc]) & set(got), f"no features for the {enc} camera ({stats})"
    assert stats["rejected"] == stats["failed"] == 0, stats
    assert stats["encoded"] + stats["dropped"] == stats["received"], stats
    if rmem_raised:  # nothing lost between the cameras and the node
        assert stats["received"] == len(all_sent), stats
    assert stats["encoded"] == len(got), (stats, len(got))
    # ros2's own tools see the stream: one message with the model's id; a rate near the camera's
    assert "model_id: tiny@" in echo.stdout and "frame_id: cam_" in echo.stdout, echo.stdout[-2000:]
    rates = [float(line.split()[-1]) for line in hz.output().splitlines() if line.strip().startswith("average rate")]
    assert rates and 2.0 < rates[-1] < 8.0, hz.output()[-2000:]


@pytest.mark.parametrize("codec", ["jpeg", "png"])
def test_image_transport_republish_compressed_to_the_encoder(ros2, node_params, rmem_raised, tmp_path, codec):
    """CompressedImage made by the real compressed_image_transport plugin, as robots publish it."""
    env = robot_env(ros2)
    rep = ros2.start("ros2", "run", "image_transport", "republish", "raw", "compressed", "--ros-args",
                     "-r", "in:=/camera/image_raw", "-r", "out/compressed:=/camera/image_raw/compressed",
                     "-p", f"out.format:={codec}", env=env)  # fmt: skip
    node = start_encoder(ros2, node_params["encoder_node"], env, tmp_path / "stats.json", image_transport="compressed")
    counter = start_counter(ros2, tmp_path / "features.json", env, count=3)
    sent = camera(ros2, tmp_path / "cam.json", env, "rgb8", 3, fps=2, qos="reliable")
    counter.wait(20)
    stop(node)
    rep.stop(timeout=10)
    got = headers(tmp_path / "features.json")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert got and set(got) <= set(sent), (got, sent)
    assert stats["rejected"] == stats["failed"] == 0 and stats["encoded"] >= 1, stats
    assert "sensor_msgs/msg/CompressedImage" in node.output(), node.output()[-2000:]


def test_bag_play_record_info_and_replay(ros2, node_params, rmem_raised, tmp_path, sample_bag):
    """ros2 bag play (mcap, then sqlite3, with --rate) → rclpy encoder + labels → ros2 bag record; the
    recording read back by `ros2 bag info` and our bag tools; then our `replay` (pip path) of it into the
    same rclpy node: the mixed graph's first direction."""
    from openclaw_vision.runtime import bags

    sqlite_bag = tmp_path / "sample_sqlite"
    bags.write_sample_bag(sqlite_bag, frames=4, fps=10, storage="sqlite3", start_ns=1_800_000_000_000_000_000)
    env = robot_env(ros2)
    # our nodes here on the loopback config (names lo) under ROS_LOCALHOST_ONLY=1, the combination that
    # made rmw refuse to create the domain: they hand rmw the file without its <Interfaces>
    ours = ros2.environ(localhost_only=True)
    node = start_encoder(ros2, node_params["encoder_node"], ours, tmp_path / "stats.json")
    assert "given to rmw without its <Interfaces>" in node.output(), node.output()[-2000:]
    labels = ros2.start("ros2", "run", "openclaw_vision", "labels_node", *ros_args(node_params["labels_node"]),
                        env=ours)  # fmt: skip
    labels.wait_for("ready:", timeout=60)
    rec = tmp_path / "rec"
    record = ros2.start("ros2", "bag", "record", "-o", str(rec), "/camera/image_raw", "/visual_features",
                        "/visual_labels", env=env)  # fmt: skip
    for topic in ("/visual_features", "/visual_labels"):  # published already; images only once a player is there
        record.wait_for(f"Subscribed to topic '{topic}'", timeout=30)
    played = []
    for bag, rate in ((sample_bag, "2.0"), (sqlite_bag, "0.5")):
        # --delay: the player's publishers exist 1.5 s before the first frame, so the recorder (which
        # looks for new topics every 100 ms) has subscribed to /camera/image_raw by then
        ros2.run("ros2", "bag", "play", str(bag), "--rate", rate, "--delay", "1.5", env=env, timeout=60)
        played += [(m.timestamp_ns, m.topic) for m in bags.read_messages(bag)]
    time.sleep(2.0)
    record.stop(timeout=15)
    info = ros2.run("ros2", "bag", "info", str(rec), env=env).stdout
    assert "/visual_features" in info and "openclaw_vision/msg/VisualFeatures" in info, info

    feats = list(bags.read_messages(rec, topic="/visual_features"))
    images = list(bags.read_messages(rec, topic="/camera/image_raw"))
    labels_out = list(bags.read_messages(rec, topic="/visual_labels"))

    def stamp(m) -> tuple[int, int]:
        s = bags.deserialize(m.raw, m.msgtype).header.stamp
        return s.sec, s.nanosec

    image_stamps = {stamp(m) for m in images}
    feature_stamps = [stamp(m) for m in feats]
    played_stamps = {(ts // 1_000_000_000, ts % 1_000_000_000) for ts, _ in played}
    assert feats and labels_out, info
    assert set(feature_stamps) <= played_stamps, "a feature stamp that no played image had"
    assert len(images) == len(played), f"recorded {len(images)} of {len(played)} played images"
    assert image_stamps == played_stamps

    # our replay (cyclonedds-python) of the recorded bag into the rclpy node
    # run to its end by children.run (its stdout, the JSON summary, apart from its log), in pip_env alone
    out = children.run(children.cli("replay", str(rec), "--transport", "cyclonedds", "--bag-topic",
                                    "/camera/image_raw", "--rate", "0", "--lockstep", "--storage", "sqlite3",
                                    "--out", str(tmp_path / "replayed")),
                       env=pip_env(), inherit_env=False, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["sent"] == len(images) and summary["accounted"], summary
    stop(node)
    labels.stop(timeout=10)


def test_frames_missing_from_a_played_bag_are_estimated_by_the_node(ros2, node_params, rmem_raised, tmp_path):
    """`ros2 bag play` of a camera recording with frames missing (3 in a row, then 1: what a dropping
    driver leaves) into the rclpy node: the node's missing_estimate accounts for what never arrived, in
    --stats-json and in the line it logs when stopped. Every frame the bag's stamps say the camera took
    is either received or estimated missing (small frames at 30 fps: none lost on the way here)."""
    from openclaw_vision.runtime import bags

    full, bag = tmp_path / "full", tmp_path / "gappy"
    taken = bags.write_sample_bag(full, frames=24, fps=30, width=320, height=240)
    skipped = {8, 9, 10, 16}
    with bags.BagWriter(bag, "mcap") as out:
        for i, m in enumerate(bags.read_messages(full)):
            if i not in skipped:
                out.write(m.topic, m.msgtype, m.timestamp_ns, m.raw)
    env = robot_env(ros2)
    node = start_encoder(ros2, node_params["encoder_node"], env, tmp_path / "stats.json")
    # --delay: the player's writer has matched the node's reader before its first frame
    ros2.run("ros2", "bag", "play", str(bag), "--delay", "1.0", env=env, timeout=60)
    time.sleep(1.0)
    stop(node)
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st["rejected"] == st["failed"] == 0, st
    assert st["missing_estimate"] >= len(skipped), st  # what the camera never delivered is counted
    assert st["received"] + st["missing_estimate"] == taken, st  # and nothing else is invented
    assert st["cameras"]["/camera/image_raw"]["missing_estimate"] == st["missing_estimate"], st
    if rmem_raised:
        assert st["received"] == taken - len(skipped), st
    assert f'"missing_estimate": {st["missing_estimate"]}' in node.output(), node.output()[-2000:]


def test_rclpy_camera_to_the_pip_encoder_to_rclpy(ros2, tiny_model, rmem_raised, tmp_path):
    """The mixed graph's other direction: an rclpy camera → our Cyclone-path node → an rclpy subscriber."""
    env = robot_env(ros2)
    stats = tmp_path / "stats.json"
    # the pip path in its own environment (pip_env: this venv, no ROS sourced); its output goes to a log file
    node = ros2.start(sys.executable, "-m", "openclaw_vision.ros.encoder_node", "--transport", "cyclonedds",
                      "--model", "tiny", "--model-path", str(tiny_model), "--precision", "fp32",
                      "--backend", "onnxruntime", "--threads", "1", "--stats-json", str(stats),
                      env=pip_env(robot=True))  # fmt: skip
    try:
        counter = start_counter(ros2, tmp_path / "features.json", env, count=4)
        sent = camera(ros2, tmp_path / "cam.json", env, "bgr8", 4, fps=4)
        counter.wait(20)
    finally:
        code = node.stop(timeout=20)  # SIGINT to its group
    log = node.output()
    assert code == 0, log[-2000:]  # stopped by the signal, cleanly, within 20 s
    got = headers(tmp_path / "features.json")
    st = json.loads(stats.read_text())
    assert got and set(got) <= set(sent), (got, sent, log[-2000:])
    assert st["transport"] == "cyclonedds" and st["rejected"] == 0, st
    assert "interface 127.0.0.1 added, as rmw_cyclonedds does" in log, log[-2000:]
    if rmem_raised:
        assert st["received"] == len(sent), st


def test_an_image_callback_that_raises_does_not_stop_the_rclpy_node(ros2, tiny_model, tmp_path):
    """One frame that makes the encoder's image callback raise (support/rclpy_callback_fault.py): the
    next frames are still encoded; the failure is one logged line with its traceback, and counted."""
    out = tmp_path / "fault.json"
    run = ros2.run("python3", CALLBACK_FAULT, str(out), "--model-path", str(tiny_model), "--frames", "4", "--bad", "1",
                   env=ros2.environ(), timeout=120)  # fmt: skip
    result = json.loads(out.read_text())
    assert result["features"] == ["f0", "f2", "f3"], run.stdout[-3000:]
    assert result["callback_failures"] == 1 and result["stats"] == {"received": 4, "encoded": 3}, result
    assert "callback for /camera/image_raw failed: RuntimeError('a bug that only this frame reaches')" in run.stdout
    assert "Traceback" in run.stdout, run.stdout[-3000:]
