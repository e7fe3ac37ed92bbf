"""Each node under rclpy on a real Humble, started as a robot starts it (`ros2 run`), seen and changed
with the ros2 tools, and stopped as a robot stops it (SIGINT from a terminal, SIGTERM from a supervisor).

- `ros2 topic echo --once /diagnostics`: the node's status.
- `ros2 param describe/get/set`: a run-time key applies (the node logs that it took it), a read-only
  key is refused with rclpy's reason, a value of the wrong type with ours.
- `ros2 param dump` is a parameters file: `--params-file` of it starts the node with the same values.
- SIGINT (the first run) and SIGTERM (the run from the dump): exit 0 within 2 s with the final counts
  logged, no abort, nothing left in the process's session.
"""

from __future__ import annotations

import signal

import pytest
import yaml
from support.humble import PACKAGE, exit_status, ros_args

#: the status each node publishes on /diagnostics (diagnostic_updater's "<node>: <task>")
TASKS = {"encoder_node": "pipeline", "labels_node": "labels", "vlm_node": "pipeline"}
STATUS = {node: f"{node}: {task}" for node, task in TASKS.items()}
#: per node: (run-time key, value, what `ros2 param get` then prints, the node's log line),
#: (read-only key, value), (key, a value of the wrong type, the reason in the refusal)
CASES = {
    "encoder_node": (("depth", "3", "Integer value is: 3", "parameters changed: depth=3"), ("backend", "onnxruntime"),
                     ("depth", "deep", "parameter depth='deep': expected int")),
    "labels_node": (("labels", "stairs,pallet", "String value is: stairs,pallet", "label set: stairs, pallet"),
                    ("threads", "2"), ("diagnostics_period", "slow", "diagnostics_period='slow': expected float")),
    "vlm_node": (("temperature", "0.5", "Double value is: 0.5", "parameters changed: temperature=0.5"), ("seed", "3"),
                 ("max_new_tokens", "many", "parameter max_new_tokens='many': expected int")),
}  # fmt: skip


def encoder_resubscribes(ros2, proc) -> None:
    """depth is QoS: the image subscription was made again with the new depth (as the graph shows it)."""
    info = ros2.run("ros2", "topic", "info", "-v", "/camera/image_raw").stdout
    assert "Node name: encoder_node" in info and "KEEP_LAST (3)" in info, info


def labels_from_the_topic(ros2, proc) -> None:
    """A label set on set_labels_topic goes through the parameters: `ros2 param get` tells the truth."""
    ros2.run("ros2", "topic", "pub", "--once", "-w", "1", "/labels_node/set_labels", "std_msgs/msg/String",
             "{data: 'cat,dog'}")  # fmt: skip
    proc.wait_for("label set: cat, dog", timeout=30)
    assert ros2.run("ros2", "param", "get", "/labels_node", "labels").stdout.strip() == "String value is: cat,dog"


def vlm_takes_an_int_for_a_float(ros2, proc) -> None:
    """`ros2 param set … top_p 1` (YAML: an int) for a float key is taken, as in a parameters file."""
    assert "Set parameter successful" in ros2.run("ros2", "param", "set", "/vlm_node", "top_p", "1").stdout
    proc.wait_for("parameters changed: top_p=1", timeout=30)


#: one more thing per node that a user of that node would notice
EXTRA = {"encoder_node": encoder_resubscribes, "labels_node": labels_from_the_topic}
EXTRA["vlm_node"] = vlm_takes_an_int_for_a_float


def start(ros2, node: str, args: list[str]):
    proc = ros2.start("ros2", "run", PACKAGE, node, *args)
    proc.wait_for("parameters: ", timeout=90)  # runner.watch_parameters: the node runs
    assert "transport: rclpy" in proc.output()
    return proc


def stop(proc, sig: int) -> None:
    """Send `sig` to the group: the node exits 0, its counts logged, nothing left behind (how long it takes is
    a bench figure: `openclaw-vision bench --mode stop`; the waits here only guard liveness)."""
    [node_pid] = proc.children()
    proc.send(sig)
    leader = proc.wait(30)
    if sig == signal.SIGINT:
        code = leader  # ros2 run waits for the node and exits with its code (ros2run/api run_executable)
    else:
        # ros2 run itself does not handle SIGTERM (Python's default: it dies at once); the node, which got
        # the same signal from the group, is adopted by this process (support.humble.become_subreaper)
        assert leader == -signal.SIGTERM, leader
        code = exit_status(node_pid, 30)
    out = proc.output()
    assert code == 0, f"exit {code} on {signal.Signals(sig).name}:\n{out[-3000:]}"
    assert "stopped: {" in out, out[-3000:]
    assert "terminate called" not in out and "Traceback" not in out, out[-3000:]
    assert proc.members() == [], "processes left in the session"


@pytest.mark.parametrize("node", sorted(CASES))
def test_node_under_ros2_run(ros2, node_params, node, tmp_path):
    (key, value, shown, logged), (fixed, fixed_value), (typed, wrong, why) = CASES[node]
    name = f"/{node}"
    proc = start(ros2, node, ros_args(node_params[node]))

    echo = ros2.run("ros2", "topic", "echo", "--once", "/diagnostics", timeout=30).stdout
    assert f"name: '{STATUS[node]}'" in echo or f"name: {STATUS[node]}" in echo, echo
    if node == "encoder_node":  # its camera's status says who is connected, read through rclpy's graph
        assert "key: publishers" in echo and "key: subscribers" in echo, echo

    described = ros2.run("ros2", "param", "describe", name, key, fixed).stdout
    runtime_part, fixed_part = described.split(f"Parameter name: {fixed}")
    assert f"Parameter name: {key}" in runtime_part and "Description: " in runtime_part
    assert "Read only: true" not in runtime_part and "Read only: true" in fixed_part, described

    before = ros2.run("ros2", "param", "get", name, key).stdout.strip()
    out = ros2.run("ros2", "param", "set", name, key, value).stdout
    assert "Set parameter successful" in out, out
    assert ros2.run("ros2", "param", "get", name, key).stdout.strip() == shown != before
    proc.wait_for(logged, timeout=30)  # the node took it, not only rclpy's parameter store
    out = ros2.run("ros2", "param", "set", name, fixed, fixed_value).stdout
    assert f"Setting parameter failed: Trying to set a read-only parameter: {fixed}." in out, out
    out = ros2.run("ros2", "param", "set", name, typed, wrong).stdout
    assert "Setting parameter failed" in out and why in out, out

    dumped = ros2.run("ros2", "param", "dump", name).stdout
    params = yaml.safe_load(dumped)[name]["ros__parameters"]
    assert str(params[key]) == value and params[typed] != wrong
    EXTRA[node](ros2, proc)
    stop(proc, signal.SIGINT)

    (tmp_path / "dump.yaml").write_text(dumped)
    again = start(ros2, node, ["--ros-args", "--params-file", str(tmp_path / "dump.yaml")])
    redumped = yaml.safe_load(ros2.run("ros2", "param", "dump", name).stdout)[name]["ros__parameters"]
    # rcl reads an empty YAML sequence as not set (an empty array has no type on ROS), so an empty
    # list comes back as null; the node itself runs with it as the empty list it was.
    empty = {k for k, v in params.items() if v == [] and redumped.get(k) is None}
    assert {k: v for k, v in redumped.items() if k not in empty} == {k: v for k, v in params.items() if k not in empty}
    stop(again, signal.SIGTERM)


def test_a_bad_value_at_start_is_one_line_and_exit_2(ros2, node_params):
    """`ros2 run … --ros-args -p depth:=2.5`: the same one-line configuration error as on the pip path."""
    out = ros2.run("ros2", "run", PACKAGE, "encoder_node", *ros_args({**node_params["encoder_node"], "depth": "2.5"}),
                   check=False, timeout=60)  # fmt: skip
    assert out.returncode == 2, out.stdout
    assert out.stdout.strip().splitlines()[-2:] == [
        "encoder_node: configuration error: parameter depth=2.5: expected int",
        "[ros2run]: Process exited with failure 2",
    ]
