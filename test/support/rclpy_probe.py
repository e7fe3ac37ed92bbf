"""A plain rclpy client of the nodes, run by the `ros2` tier inside the robot environment (robot venv,
Humble and the colcon install sourced): what a user's own rclpy code would do. Prints one JSON line.

    python3 rclpy_probe.py ask --dim 768 --prompt "Is the door open?"
        publish VisualFeatures of that width on /visual_features, then the question on /vlm/prompt,
        until a VlmAnswer comes back on /vlm/answer (or --timeout): {"answer": {...}} or {"timeout": …}
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def ask(args) -> dict:
    import rclpy
    from openclaw_vision.msg import VisualFeatures, VlmAnswer
    from std_msgs.msg import String

    rclpy.init()
    node = rclpy.create_node("rclpy_probe")
    got: list = []
    node.create_subscription(VlmAnswer, args.answer_topic, got.append, 10)
    features = node.create_publisher(VisualFeatures, args.features_topic, 10)
    prompts = node.create_publisher(String, args.prompt_topic, 10)
    emb = [1.0 / args.dim**0.5] * args.dim
    deadline = time.monotonic() + args.timeout
    sent = 0
    try:
        while not got and time.monotonic() < deadline:
            if features.get_subscription_count() and prompts.get_subscription_count():
                msg = VisualFeatures(model_id="probe", dim=args.dim, embedding=emb)
                msg.header.frame_id = f"probe-{args.dim}-{sent}"
                features.publish(msg)
                rclpy.spin_once(node, timeout_sec=0.3)  # the features first, then the question about them
                prompts.publish(String(data=args.prompt))
                sent += 1
            end = time.monotonic() + 2.0
            while not got and time.monotonic() < min(end, deadline):
                rclpy.spin_once(node, timeout_sec=0.1)
        if not got:
            return {"timeout": args.timeout, "sent": sent}
        a = got[0]
        return {
            "answer": {
                "frame_id": a.header.frame_id,
                "prompt": a.prompt,
                "answer": a.answer,
                "features_model_id": a.features_model_id,
                "answer_tokens": a.answer_tokens,
            },
            "sent": sent,
        }
    finally:
        node.destroy_node()
        rclpy.shutdown()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ask")
    a.add_argument("--dim", type=int, required=True)
    a.add_argument("--prompt", default="Is the door open?")
    a.add_argument("--features-topic", default="/visual_features")
    a.add_argument("--prompt-topic", default="/vlm/prompt")
    a.add_argument("--answer-topic", default="/vlm/answer")
    a.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    print(json.dumps(ask(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
