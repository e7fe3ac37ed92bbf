"""`ros2 launch openclaw_vision vision.launch.py` on a real Humble: its arguments as launch_ros hands them
to the nodes, all three nodes under rclpy, model:=ViT-L-14 reaching the VLM, and the stop by SIGINT/SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from support.humble import PACKAGE, ROOT, exit_status

from openclaw_vision.ros.launch_args import ENCODER_ARGUMENTS, LABELS_ARGUMENTS, MEMORY_ARGUMENTS, VLM_ARGUMENTS

LAUNCH = ("ros2", "launch", PACKAGE, "vision.launch.py")
PROBE = str(Path(__file__).resolve().parents[1] / "support" / "rclpy_probe.py")
FILES = {"encoder_node": "encoder.yaml", "labels_node": "labels.yaml", "vlm_node": "vlm.yaml"}


@pytest.fixture()
def my_configs(tmp_path, node_params) -> dict[str, Path]:
    """A user's own parameters files (config:=my.yaml …): the shipped ones with the tiny model set."""
    out = {}
    for node, name in FILES.items():
        doc = yaml.safe_load((ROOT / "config" / name).read_text())
        doc[node]["ros__parameters"].update({k: yaml.safe_load(v) for k, v in node_params[node].items()})
        out[node] = tmp_path / f"my_{name}"
        out[node].write_text(yaml.safe_dump(doc))
    return out


def config_args(files: dict[str, Path]) -> list[str]:
    return [f"config:={files['encoder_node']}", f"labels_config:={files['labels_node']}",
            f"vlm_config:={files['vlm_node']}"]  # fmt: skip


def wait_running(proc, nodes: int, timeout: float = 120) -> str:
    """Until `nodes` nodes have logged that they run (runner.watch_parameters' line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = proc.output()
        if out.count("parameters: ") >= nodes:
            return out
        assert proc.alive(), f"ros2 launch ended:\n{out[-4000:]}"
        time.sleep(0.2)
    raise AssertionError(f"not all {nodes} nodes running:\n{proc.output()[-4000:]}")


def param(ros2, node: str, key: str) -> str:
    return ros2.run("ros2", "param", "get", f"/{node}", key, timeout=30).stdout.strip()


def test_show_args_lists_every_argument(ros2):
    out = ros2.run(*LAUNCH, "--show-args", timeout=60).stdout
    names = re.findall(r"^\s+'(\w+)':", out, flags=re.M)
    want = {"config", "vlm_config", "labels_config", "memory_config", "enable_vlm", "enable_labels", "enable_memory",
            "respawn", *ENCODER_ARGUMENTS, *VLM_ARGUMENTS, *LABELS_ARGUMENTS, *MEMORY_ARGUMENTS}  # fmt: skip
    assert set(names) == want, out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_launch_all_nodes_with_arguments_then_stop(ros2, my_configs, sig):
    given = ("image_topic:=/cam/rgb", "features_topic:=/feats", "labels:=door,stairs", "max_new_tokens:=5")
    proc = ros2.start(*LAUNCH, *config_args(my_configs), "enable_labels:=true", "enable_vlm:=true", *given)
    out = wait_running(proc, 3)
    assert out.count("transport: rclpy") == 3
    if sig == signal.SIGINT:  # the arguments, once: what the user set wins, the rest is my.yaml's
        assert param(ros2, "encoder_node", "image_topic") == "String value is: /cam/rgb"
        for node in FILES:
            assert param(ros2, node, "features_topic") == "String value is: /feats", node
        assert param(ros2, "labels_node", "labels") == "String value is: door,stairs"
        assert param(ros2, "vlm_node", "max_new_tokens") == "Integer value is: 5"
        assert param(ros2, "encoder_node", "precision") == "String value is: fp32"  # my.yaml, no argument
        assert param(ros2, "encoder_node", "threads") == "Integer value is: 1"
        # the shipped default keeps freed frames for the next ones under rclpy too (issue 38)
        assert param(ros2, "encoder_node", "frame_heap_mb") == "Integer value is: 64"
        assert "up to 64 MB of freed ones kept (frame_heap_mb)" in out, out[-3000:]
        assert param(ros2, "labels_node", "text_model_path").endswith("tiny.text.fp32.onnx")
    pids = {node: int(re.search(rf"\[{node}-\d+\]: process started with pid \[(\d+)\]", out)[1]) for node in FILES}
    proc.send(sig)
    code = proc.wait(30)
    out = proc.output()
    assert code is not None, out[-3000:]
    if sig == signal.SIGINT:
        for node in FILES:  # launch waits for each child and reports its end (launch/actions/execute_local.py)
            assert re.search(rf"\[INFO\] \[{node}-\d+\]: process has finished cleanly", out), f"{node}:\n{out[-4000:]}"
        assert out.count("stopped: {") == 3, out[-4000:]
    else:
        # Humble's launch does not wait for its children on SIGTERM (launch_service.py _on_sigterm: "using
        # SIGTERM can result in orphaned processes"): it ends at once and the nodes' output pipes with it.
        # The nodes got the same SIGTERM from the group; this process adopted them (become_subreaper).
        # A node that ends before launch itself has ended is reaped by launch, which then reports it.
        codes = {}
        for node, pid in pids.items():
            try:
                codes[node] = exit_status(pid, 30)
            except ProcessLookupError:
                out = proc.output()
                codes[node] = 0 if re.search(rf"\[{node}-\d+\]: process has finished cleanly", out) else out[-2000:]
        assert codes == dict.fromkeys(FILES, 0), codes
    assert "terminate called" not in out and "Traceback" not in out, out[-4000:]
    assert proc.members() == []


def test_model_argument_gives_the_vlm_the_encoders_width(ros2, my_configs):
    """model:=ViT-L-14 enable_vlm:=true enable_labels:=true: every node gets the model, and the VLM takes
    768-d features (ViT-L-14's width) and refuses 512-d ones. The encoder and the labels node run
    my.yaml's tiny model_path/text_model_path (a path wins over the name), so no ViT-L-14 export is
    needed: what is shown is what launch hands the nodes and what the VLM then accepts."""
    proc = ros2.start(*LAUNCH, *config_args(my_configs), "enable_vlm:=true", "enable_labels:=true", "model:=ViT-L-14")
    out = wait_running(proc, 3)
    for node in FILES:
        assert param(ros2, node, "model") == "String value is: ViT-L-14", node
    assert "(768-d, of ViT-L-14)" in out
    probe = ("python3", PROBE, "ask", "--dim")
    wrong = json.loads(ros2.run(*probe, "512", "--timeout", "6", timeout=60).stdout.splitlines()[-1])
    assert "timeout" in wrong and wrong["sent"] >= 1, wrong  # first: no 768-d features held yet
    assert "rejected features: 512 values (expected 768 finite)" in proc.output()
    answer = json.loads(ros2.run(*probe, "768", timeout=60).stdout.splitlines()[-1])
    assert "answer" in answer, answer
    assert answer["answer"]["frame_id"].startswith("probe-768-") and answer["answer"]["answer_tokens"] >= 1
    proc.stop(timeout=15)  # SIGINT, as a terminal's Ctrl-C


def test_the_shipped_defaults_name_the_model_to_export(ros2):
    """No argument at all: the installed config/encoder.yaml (ViT-B-32, INT8), which is not built here:
    the encoder stops at once with exit 2 and says what to run, and launch reports it."""
    proc = ros2.start(*LAUNCH)
    assert proc.wait(90) is not None, proc.output()[-3000:]
    out = proc.output()
    assert re.search(r"\[ERROR\] \[encoder_node-\d+\]: process has died \[pid \d+, exit code 2", out), out[-3000:]
    assert "ViT-B-32.int8.onnx" in out and "openclaw-vision" in out, out[-3000:]
    assert "Traceback" not in out
