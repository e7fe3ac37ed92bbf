"""The memory node's QueryMemory service on a real Humble, called from rclpy (support/rclpy_memory_client.py):
the node under rclpy (`ros2 run`), and the pip-path node (Cyclone, rmw_cyclonedds's service wire format)
called by the same rclpy client; and two robots' memory nodes (one from `ros2 launch ... robot:=`, one named
by its namespace) on one Chroma server, filtered by robot. Planted vectors and a planted text prompt: exact
ranks and stamps."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
import yaml
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


def _run_client(ros2, plan: dict, tmp_path, env, *args: str) -> dict:
    plan_file = tmp_path / "plan.json"
    keys = ("model_id", "vectors", "stamps_ns", "queries", "topics")
    plan_file.write_text(json.dumps({k: plan[k] for k in keys if k in plan}))
    out = tmp_path / "out.json"
    ros2.run("python3", CLIENT, str(plan_file), str(out), *args, env=env, timeout=150)
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
    # the pip path in its own environment (pip_env: this venv, no ROS sourced); its output goes to a log file
    node = ros2.start(sys.executable, "-m", "openclaw_vision.ros.memory_node", "--transport", "cyclonedds",
                      "--store", str(tmp_path / "store"), "--flush-period", "0.2", "--batch-rows", "4",
                      "--text-model", str(tiny_text_model), env=pip_env())  # fmt: skip
    try:
        out = _run_client(ros2, plan, tmp_path, ros2.environ())
        called = ros2.run("python3", "-c", OUR_RCLPY_CLIENT, timeout=60).stdout  # the transport seam's client
    finally:
        code = node.stop(timeout=30)  # SIGINT to its group
    log = node.output()
    assert code == 0, log[-2000:]  # stopped by the signal, cleanly, within 30 s
    assert "transport: cyclonedds" in log, log[-2000:]
    check(plan, out)
    assert f"got True [{plan['stamps_ns'][4]}]" in called, called


#: the two robots: robot name → (its features topic, its rows' stamps)
FLEET = {"alpha": ("/alpha/visual_features", [T0 + i * 1_000_000 for i in range(6)]),
         "beta": ("/beta/visual_features", [T0 + (100 + i) * 1_000_000 for i in range(6)])}  # fmt: skip


@pytest.fixture
def chroma_url(tmp_path):
    """A `chroma run` on 127.0.0.1 of this test's own (the project venv's chromadb, as a fleet's server)."""
    from openclaw_vision.memory.server import start_server

    child, url = start_server(tmp_path / "server-data", log_path=tmp_path / "chroma.log")
    with child:
        yield url


def _params_file(path, node: str, shipped: str, values: dict) -> str:
    """A user's own parameters file (the shipped one with `values` set), as `config:=` / `memory_config:=` take."""
    doc = yaml.safe_load((ROOT / "config" / shipped).read_text())
    doc[node]["ros__parameters"].update(values)
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_two_robots_memory_nodes_on_one_server_answer_by_robot(ros2, node_params, chroma_url, tmp_path):
    """Robot alpha's node from `ros2 launch ... enable_memory:=true robot:=alpha store:=URL`, robot beta's from
    `ros2 run` in namespace /beta (its robot name: the namespace), both writing to one Chroma server. Through
    alpha's QueryMemory service an rclpy client gets, with `robot` set, that robot's rows only (beta's too: they
    reach alpha through the server), each named in `robots`; without it both robots' rows, in exact rank."""
    rng = np.random.default_rng(36)
    v = rng.standard_normal((12, 32)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    robot_of = ["alpha"] * 6 + ["beta"] * 6
    stamps = FLEET["alpha"][1] + FLEET["beta"][1]
    q = v[2] + v[7] + 0.2 * rng.standard_normal(32).astype(np.float32)  # near one row of each robot
    q /= np.linalg.norm(q)
    scores = v @ q

    def top(k: int, robot: str | None = None) -> list[int]:
        return [int(i) for i in np.argsort(-scores) if robot in (None, robot_of[i])][:k]

    plan = {"model_id": "fleet-test", "vectors": v.tolist(), "stamps_ns": stamps,
            "topics": [FLEET[r][0] for r in robot_of],
            "queries": [{"vector": q.tolist(), "top_k": 3, "robot": "alpha"},
                        {"vector": q.tolist(), "top_k": 3, "robot": "beta"},
                        {"vector": q.tolist(), "top_k": 4},
                        {"vector": q.tolist(), "top_k": 4, "robot": "gamma"}]}  # fmt: skip
    encoder_yaml = _params_file(tmp_path / "my_encoder.yaml", "encoder_node", "encoder.yaml",
                                {k: yaml.safe_load(x) for k, x in node_params["encoder_node"].items()})  # fmt: skip
    memory_yaml = _params_file(tmp_path / "my_memory.yaml", "memory_node", "memory.yaml",
                               {"features_topic": FLEET["alpha"][0], "spool": str(tmp_path / "spool-alpha"),
                                "flush_period": 0.2, "batch_rows": 4})  # fmt: skip
    alpha = ros2.start("ros2", "launch", PACKAGE, "vision.launch.py", f"config:={encoder_yaml}", "enable_memory:=true",
                       f"memory_config:={memory_yaml}", f"store:={chroma_url}", "robot:=alpha")  # fmt: skip
    stats = tmp_path / "beta-stats.json"
    beta_params = {"store": chroma_url, "features_topic": FLEET["beta"][0], "query_service": "/beta/query_memory",
                   "spool": str(tmp_path / "spool-beta"), "flush_period": "0.2", "batch_rows": "4"}  # fmt: skip
    beta = ros2.start("ros2", "run", PACKAGE, "memory_node", "--stats-json", str(stats),
                      *ros_args(beta_params), "-r", "__ns:=/beta")  # fmt: skip
    try:
        out = alpha.wait_for("queries on /query_memory", timeout=120)
        assert re.search(r"\[memory_node-\d+\] .* ready: .*\(robot alpha, ", out), out[-3000:]  # the launch argument
        assert "(robot beta, " in beta.wait_for("queries on /beta/query_memory", timeout=120)  # the namespace
        by_alpha, by_beta, everyone, nobody = _run_client(ros2, plan, tmp_path, ros2.environ(),
                                                          "--timeout", "120")["responses"]  # fmt: skip
    finally:
        beta_code = beta.stop(timeout=30)
        alpha_code = alpha.stop(timeout=30)
    for robot, got in (("alpha", by_alpha), ("beta", by_beta)):
        assert got["ok"] and not got["error"], got  # the server answered (no local-cache-only note)
        assert got["stamps_ns"] == [stamps[i] for i in top(3, robot)], (robot, got)
        assert got["robots"] == [robot] * 3 and got["cameras"] == [FLEET[robot][0]] * 3, got
    assert everyone["ok"] and everyone["stamps_ns"] == [stamps[i] for i in top(4)], everyone
    assert everyone["robots"] == [robot_of[i] for i in top(4)] and set(everyone["robots"]) == {"alpha", "beta"}
    assert everyone["scores"] == pytest.approx([float(scores[i]) for i in top(4)], abs=1e-5)
    assert nobody["ok"] and nobody["stamps_ns"] == [] and nobody["robots"] == [], nobody  # a robot with no rows
    assert (alpha_code, beta_code) == (0, 0), (alpha.output()[-3000:], beta.output()[-3000:])
    st = json.loads(stats.read_text())
    assert (st["robot"], st["spooled"], st["forwarded"], st["refused"]) == ("beta", 6, 6, 0), st


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
