"""Each node under rclpy, started the way a robot starts it (`ros2 run`), seen with the ros2 tools
(/diagnostics), and stopped the way a robot stops it (SIGINT from a terminal, SIGTERM from a
supervisor): exit 0 within 2 s with its final counts logged, no abort, nothing left running."""

from __future__ import annotations

import signal
import time

import pytest
from support.humble import PACKAGE, exit_status, ros_args

NODES = ("encoder_node", "labels_node", "vlm_node")
#: the status each node publishes on /diagnostics (diagnostic_updater's "<node>: <task>")
STATUS = {
    "encoder_node": "encoder_node: pipeline", "labels_node": "labels_node: labels", "vlm_node": "vlm_node: pipeline",
}
#: the line node_main logs once the node runs (runner.watch_parameters)
RUNNING = "parameters: "
STOP_S = 2.0


def stopped_cleanly(proc, node_pid: int, sig: int) -> tuple[int | None, float]:
    """Send `sig` to the group; (the node's exit code, seconds from the signal to its exit)."""
    t0 = time.monotonic()
    proc.send(sig)
    leader = proc.wait(10)
    if sig == signal.SIGINT:
        code = leader  # ros2 run waits for the node and exits with its code (ros2run/api run_executable)
    else:
        # ros2 run itself does not handle SIGTERM (Python's default: it dies at once); the node, which got
        # the same signal from the group, is adopted by this process (support.humble.become_subreaper)
        assert leader == -signal.SIGTERM, leader
        code = exit_status(node_pid, 10)
    return code, time.monotonic() - t0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("node", NODES)
def test_ros2_run_diagnostics_and_stop(ros2, node_params, node, sig):
    proc = ros2.start("ros2", "run", PACKAGE, node, *ros_args(node_params[node]))
    proc.wait_for(RUNNING, timeout=90)
    assert "transport: rclpy" in proc.output()
    [node_pid] = proc.children()

    echo = ros2.run("ros2", "topic", "echo", "--once", "/diagnostics", timeout=30).stdout
    assert f"name: '{STATUS[node]}'" in echo or f"name: {STATUS[node]}" in echo, echo
    assert "hardware_id: none" in echo

    code, took = stopped_cleanly(proc, node_pid, sig)
    out = proc.output()
    assert code == 0, f"{node} exited {code} on {signal.Signals(sig).name}:\n{out[-3000:]}"
    assert took <= STOP_S, f"{node} took {took:.2f} s to stop"
    assert "stopped: {" in out, out[-3000:]
    assert "terminate called" not in out and "Traceback" not in out, out[-3000:]
    assert proc.members() == [], "processes left in the session"
