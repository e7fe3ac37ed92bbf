"""The memory node's QueryMemory service on a real Humble, called from rclpy (support/rclpy_memory_client.py):
the node under rclpy (`ros2 run`), and the pip-path node (Cyclone, rmw_cyclonedds's service wire format)
called by the same rclpy client. Planted vectors and a planted text prompt: exact ranks and stamps."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from support.humble import PACKAGE, ROOT, pip_env, ros_args

CLIENT = str(ROOT / "test" / "support" / "rclpy_memory_client.py")
T0 = 1_700_000_000_000_000_000
N = 10


@pytest.fixture(scope="module")
def plan(tiny_text_model) -> dict:
    from openclaw_vision.text.encoder import TextEncoder

    prompt = TextEncoder(tiny_text_model).encode(["a forklift"])
    v = np.random.default_rng(11).standard_normal((N, prompt.dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[4] = prompt.vectors[0]
    q = v[6] + 0.3 * v[2]
    q /= np.linalg.norm(q)
    stamps = [T0 + i * 1_000_000 for i in range(N)]
    return {"model_id": prompt.model_id, "vectors": v.tolist(), "stamps_ns": stamps, "q": q,
            "order": [int(i) for i in np.argsort(-(v @ q))[:3]],
            "queries": [{"vector": q.tolist(), "top_k": 3}, {"text": "a forklift", "top_k": 1},
                        {"vector": [1.0] * (prompt.dim + 1)}]}  # fmt: skip


def check(plan: dict, out: dict) -> None:
    by_vector, by_text, wide = out["responses"]
    assert by_vector["ok"] and by_vector["model_id"] == plan["model_id"], by_vector
    assert by_vector["stamps_ns"] == [plan["stamps_ns"][i] for i in plan["order"]], by_vector
    assert by_vector["frame_ids"] == [f"f{i}" for i in plan["order"]]
    assert by_vector["cameras"] == ["/visual_features"] * 3
    assert by_vector["scores"] == sorted(by_vector["scores"], reverse=True)
    assert by_text["ok"] and by_text["stamps_ns"] == [plan["stamps_ns"][4]], by_text
    dim = len(plan["vectors"][0])
    assert not wide["ok"] and f"{dim}-d" in wide["error"] and f"{dim + 1}-d" in wide["error"], wide


def _run_client(ros2, plan: dict, tmp_path, env) -> dict:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({k: plan[k] for k in ("model_id", "vectors", "stamps_ns", "queries")}))
    out = tmp_path / "out.json"
    ros2.run("python3", CLIENT, str(plan_file), str(out), env=env, timeout=120)
    return json.loads(out.read_text())


def test_an_rclpy_client_queries_the_rclpy_memory_node(ros2, node_params, tiny_text_model, plan, tmp_path):
    params = {"store": str(tmp_path / "store"), "flush_period": "0.2", "batch_rows": "4",
              "text_model": str(tiny_text_model), "bpe_path": node_params["labels_node"]["bpe_path"]}  # fmt: skip
    stats = tmp_path / "stats.json"
    proc = ros2.start("ros2", "run", PACKAGE, "memory_node", "--stats-json", str(stats), *ros_args(params))
    proc.wait_for("queries on /query_memory", timeout=90)
    assert "transport: rclpy" in proc.output()
    try:
        check(plan, _run_client(ros2, plan, tmp_path, ros2.environ()))
        # docs/memory.md's line: `ros2 service call` with a text query
        called = ros2.run("ros2", "service", "call", "/query_memory", "openclaw_vision/srv/QueryMemory",
                          "{text: 'a forklift', top_k: 1}", timeout=60).stdout  # fmt: skip
        assert "ok=True" in called and str(plan["stamps_ns"][4]) in called, called
    finally:
        assert proc.stop(timeout=10) == 0, proc.output()[-3000:]
    st = json.loads(stats.read_text())
    assert st["written"] == N and st["queries_refused"] == 1 and st["queries"] >= 5 and st["transport"] == "rclpy", st


def test_an_rclpy_client_queries_the_pip_path_memory_node(ros2, tiny_text_model, plan, tmp_path):
    """rclpy (rmw_cyclonedds) client → our Cyclone service: the request header and names interoperate."""
    node = subprocess.Popen([sys.executable, "-m", "openclaw_vision.ros.memory_node", "--transport", "cyclonedds",
                             "--store", str(tmp_path / "store"), "--flush-period", "0.2", "--batch-rows", "4",
                             "--text-model", str(tiny_text_model)], env=pip_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        out = _run_client(ros2, plan, tmp_path, ros2.environ())
        called = ros2.run("python3", "-c", OUR_RCLPY_CLIENT, timeout=60).stdout  # the transport seam's client
    finally:
        node.send_signal(2)
        log = node.communicate(timeout=30)[0]
    assert "transport: cyclonedds" in log, log[-2000:]
    check(plan, out)
    assert f"got True [{plan['stamps_ns'][4]}]" in called, called


#: the rclpy transport's own client (what tools and tests use), in the robot venv against the pip-path node
OUR_RCLPY_CLIENT = """
import time
from openclaw_vision.ros.rclpy_transport import RclpyTransport
from openclaw_vision.ros.types import QUERY_MEMORY, REQUEST
t = RclpyTransport("our_rclpy_client", [])
try:
    c = t.client("/query_memory", QUERY_MEMORY)
    end = time.monotonic() + 30
    while not c.ready() and time.monotonic() < end:
        time.sleep(0.05)
    r = c.call(t.msg(QUERY_MEMORY + REQUEST)(text="a forklift", top_k=1), 10)
    print("got", r.ok, list(r.stamps_ns), flush=True)
finally:
    t.close()
"""
