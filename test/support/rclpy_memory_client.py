"""A plain rclpy client of the memory node, run by the `ros2` tier inside the robot environment: what a
user's own rclpy code would do. Reads a plan, writes what came back.

    python3 rclpy_memory_client.py PLAN.json OUT.json [--service /query_memory] [--timeout 60]

PLAN.json: {"model_id": str, "vectors": [[...], ...], "stamps_ns": [...], "queries": [{QueryMemory.Request
fields}, ...], optional "topics": [features topic of each vector]}. Publishes one VisualFeatures per vector
(frame_id f<i>) on its topic (default /visual_features: one memory node; several topics: several nodes, e.g.
one per robot), waits for the service, calls it with a vector query until every row is found through it,
then makes each query in turn.
OUT.json: {"responses": [{ok, error, model_id, stamps_ns, frame_ids, cameras, robots, scores}, ...]}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _plain(resp) -> dict:
    return {"ok": bool(resp.ok), "error": resp.error, "model_id": resp.model_id, "stamps_ns": list(resp.stamps_ns),
            "frame_ids": list(resp.frame_ids), "cameras": list(resp.cameras),
            "robots": list(resp.robots), "scores": [float(s) for s in resp.scores]}  # fmt: skip


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("plan", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--service", default="/query_memory")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    plan = json.loads(args.plan.read_text())

    import rclpy
    from builtin_interfaces.msg import Time
    from openclaw_vision.msg import VisualFeatures
    from openclaw_vision.srv import QueryMemory
    from std_msgs.msg import Header

    rclpy.init()
    node = rclpy.create_node("rclpy_memory_client")
    topics = plan.get("topics") or ["/visual_features"] * len(plan["vectors"])
    publishers = {t: node.create_publisher(VisualFeatures, t, 10) for t in dict.fromkeys(topics)}
    client = node.create_client(QueryMemory, args.service)
    deadline = time.monotonic() + args.timeout

    def call(**fields):
        fut = client.call_async(QueryMemory.Request(**fields))
        rclpy.spin_until_future_complete(node, fut, timeout_sec=max(0.1, deadline - time.monotonic()))
        if not fut.done():
            raise SystemExit(f"no reply from {args.service}")
        return fut.result()

    if not client.wait_for_service(timeout_sec=args.timeout):
        raise SystemExit(f"{args.service}: no service")
    while not all(pub.get_subscription_count() for pub in publishers.values()):  # every node listens
        if time.monotonic() > deadline:
            raise SystemExit("not every features topic has a subscriber")
        rclpy.spin_once(node, timeout_sec=0.05)
    for i, (vec, stamp, topic) in enumerate(zip(plan["vectors"], plan["stamps_ns"], topics, strict=True)):
        header = Header(stamp=Time(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=f"f{i}")
        publishers[topic].publish(VisualFeatures(header=header, model_id=plan["model_id"], dim=len(vec), embedding=vec))
    while len(call(vector=plan["vectors"][0], top_k=len(plan["vectors"]) + 1).stamps_ns) < len(plan["vectors"]):
        if time.monotonic() > deadline:
            raise SystemExit("the rows were not all stored in time")
        time.sleep(0.1)
    out = [_plain(call(**q)) for q in plan["queries"]]
    args.out.write_text(json.dumps({"responses": out}))
    print("done", len(out), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
