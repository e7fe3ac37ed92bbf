"""Which part of a receiver process a thread is, by its kernel name: the per-thread CPU tables of the capacity
and drop-cost benches read the same roles.

A module of its own with no imports of DDS or ROS: the drop-cost receiver runs it inside a Humble node's
process too, where rclpy is and cyclonedds-python may not be.
"""

from __future__ import annotations

from ..runtime import threads

#: kernel thread name prefix → what that thread of ours does (threads.Thread names them)
ROLES = {
    "dds-take": "transport thread (take, deserialize, validate)",
    "dds-service": "transport thread (services)",
    "rclpy-spin": "transport thread (rclpy executor: take, deserialize, validate)",
    "encoder-worker": "worker (encode call, publish; a lone frame's decode and preprocess)",
    "encoder-prepa": "prepare thread (takes frames, hands batches on)",
    "prep_": "prepare pool (decode, preprocess)",
    "diagnostics": "diagnostics",
    # the model loads on "node-build" (ros/runner.py: a stop during a load exits at once), which ends after the
    # load: the threads named so later are those it started, the runtime's pool (OpenVINO's at compile)
    "node-build": "runtime pool (started at load)",
}


def thread_role(tid: int, comm: str, pid: int, main_comm: str, named: dict[int, str]) -> str:
    """Which part of the receiver a thread is: by its kernel name (threads.Thread names ours), and where
    the receiver said which ids are its own (`named`), a thread with one of our names but another id is
    a runtime's pool thread started from that thread. Every other thread is Cyclone's own."""
    if tid == pid:
        return "main"
    ours = {name[: threads.NAME_BYTES] for name in named.values()}
    if named and comm in ours and tid not in named:
        return f"runtime pool (started by {comm})"
    role = next((r for prefix, r in ROLES.items() if comm.startswith(prefix)), None)
    if role:
        return role
    return "runtime pool (started at load)" if comm == main_comm else "cyclone threads (receive, send, timers)"
