"""A bare rclpy subscriber that counts what arrives, for the `ros2` tier and the loss measurements.

    python3 rclpy_counter.py OUT.json --type sensor_msgs/msg/Image --topic /camera/image_raw
                           [--qos sensor|reliable] [--depth N] [--seconds 20] [--count N]

Prints 'ready' once subscribed, then records the header (sec, nanosec, frame_id) of every message
(plus `model_id` and the vector length for VisualFeatures) until `--count` messages or `--seconds`
have passed, or SIGINT/SIGTERM, and writes OUT.json with them and the `message_lost` events the
RMW raised (rclpy's QoS event; Cyclone raises it from its sample-lost status).
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
import threading
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--type", default="sensor_msgs/msg/Image")
    p.add_argument("--topic", default="/camera/image_raw")
    p.add_argument("--qos", choices=("sensor", "reliable"), default="reliable")
    p.add_argument("--depth", type=int, default=0, help="history depth (0: the profile's)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--count", type=int, default=0)
    args = p.parse_args(argv)

    import rclpy
    from rclpy.qos import qos_profile_sensor_data, qos_profile_system_default
    from rclpy.qos_event import SubscriptionEventCallbacks

    pkg, kind, name = args.type.split("/")
    cls = getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    qos = qos_profile_sensor_data if args.qos == "sensor" else qos_profile_system_default
    if args.depth:
        from rclpy.qos import QoSProfile

        qos = QoSProfile(reliability=qos.reliability, history=qos.history, depth=args.depth, durability=qos.durability)
    got, lost, arrived = [], [], []
    done = threading.Event()

    def on_msg(msg) -> None:
        h = msg.header
        row = [h.stamp.sec, h.stamp.nanosec, h.frame_id]
        if hasattr(msg, "model_id"):
            row += [msg.model_id, len(msg.embedding) if hasattr(msg, "embedding") else None]
        got.append(row)
        arrived.append(time.time_ns())
        if args.count and len(got) >= args.count:
            done.set()

    rclpy.init()
    node = rclpy.create_node("rclpy_counter")
    events = SubscriptionEventCallbacks(message_lost=lambda info: lost.append(int(info.total_count_change)))
    node.create_subscription(cls, args.topic, on_msg, qos, event_callbacks=events)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print("ready", flush=True)
    end = time.monotonic() + args.seconds
    while not done.is_set() and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    args.out.write_text(json.dumps({"received": got, "arrived_ns": arrived, "message_lost": sum(lost)}))
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
