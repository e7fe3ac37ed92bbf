"""A bare subscriber for the capacity bench: the transport's own ceiling, on either transport.

It subscribes to camera topics as the encoder node does (its QoS, its subscription core, its
validation of every frame into a Frame) and sends each frame's header back on that camera's features
topic in a VisualFeatures with no embedding: no decode, no preprocess, no encode. What it costs per
frame is what receiving costs; the highest rate it returns < 5 % short of is the transport's
ceiling on this machine (bench/capacity.py).

    python -m openclaw_vision.ros.echo --transport cyclonedds|rclpy [--compressed] IMAGE_TOPIC...

Runs until SIGINT/SIGTERM. Under rclpy it needs Humble sourced (the ros2 tier's robot venv).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import numpy as np

from ..runtime.config import EncoderConfig
from .convert import compressed_to_frame, features_message, image_to_frame
from .intake import camera_features_topic
from .transport import create_transport
from .types import COMPRESSED_IMAGE, IMAGE, VISUAL_FEATURES, QoS


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m openclaw_vision.ros.echo")
    p.add_argument("--transport", choices=("cyclonedds", "rclpy"), default="cyclonedds")
    p.add_argument("--compressed", action="store_true", help="the topics carry CompressedImage")
    p.add_argument("topics", nargs="+")
    args = p.parse_args(argv)
    cfg = EncoderConfig()
    qos = QoS(cfg.reliability, cfg.depth)  # the node's image QoS
    to_frame = compressed_to_frame if args.compressed else image_to_frame
    t = create_transport(args.transport, "capacity_echo", [])
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    empty = np.zeros(0, np.float32)
    try:
        for image in args.topics:
            pub = t.publisher(camera_features_topic(image, cfg.features_pattern), VISUAL_FEATURES, QoS("reliable", 10))

            def on(msg, _deserialize_s: float, pub=pub) -> None:
                to_frame(msg)  # what the node's transport thread does with every frame
                pub.publish(features_message(t, msg.header, "echo", empty))

            t.subscribe(image, COMPRESSED_IMAGE if args.compressed else IMAGE, qos, on)
        print("ready", flush=True)
        done.wait()
    finally:
        t.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
