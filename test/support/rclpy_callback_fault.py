"""An encoder node under rclpy whose image callback raises on one frame: does it keep encoding after it?

Run in a sourced Humble with the package built (the `ros2` tier):

    python3 rclpy_callback_fault.py OUT.json --model-path tiny.fp32.onnx [--frames 4] [--bad 1]

Builds the real EncoderNode on the real RclpyTransport (rclpy.init, MultiThreadedExecutor, raw
subscriptions), then makes its camera's conversion raise RuntimeError for the frames whose frame_id is
`bad` (a stand-in for any bug that one odd frame reaches inside a subscription callback). Publishes
`--frames` images one at a time from the same process (frame `--bad` is the bad one), waiting for each
good frame's features before the next, and writes OUT.json: the frame_ids whose features came back,
the node's final counts and the image subscription's count of failed callbacks. Unguarded, the
exception ends rclpy's spin thread (our executor loop) and nothing after the bad frame is encoded.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from pathlib import Path

from cdr_writer import image_cdr  # this folder is first on sys.path: the script's own

from openclaw_vision.encoders import create_encoder
from openclaw_vision.ros.encoder_node import EncoderNode
from openclaw_vision.ros.rclpy_transport import RclpyTransport
from openclaw_vision.ros.types import IMAGE, VISUAL_FEATURES, QoS
from openclaw_vision.runtime import config

WIDTH, HEIGHT = 64, 48


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--model-path", required=True)
    p.add_argument("--frames", type=int, default=4)
    p.add_argument("--bad", type=int, default=1)
    p.add_argument("--timeout", type=float, default=20.0)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(levelname)s: %(message)s")

    transport = RclpyTransport("callback_fault", [])
    cfg = config.EncoderConfig(model="tiny", model_path=args.model_path, precision="fp32", threads=1,
                               reliability="reliable", depth=10, transport="rclpy")  # fmt: skip
    node = EncoderNode(cfg, transport, create_encoder("onnxruntime", args.model_path))
    cam = node.cameras[cfg.image_topic]
    convert = cam.to_frame

    def to_frame(msg):
        if msg.header.frame_id == "bad":
            raise RuntimeError("a bug that only this frame reaches")
        return convert(msg)

    cam.to_frame = to_frame
    got: list[str] = []
    arrived = threading.Condition()

    def on_features(msg, _dt: float) -> None:
        with arrived:
            got.append(str(msg.header.frame_id))
            arrived.notify_all()

    features = transport.subscribe(cfg.features_topic, VISUAL_FEATURES, QoS("reliable", 10), on_features)
    images = transport.publisher(cfg.image_topic, IMAGE, QoS("reliable", 10))
    node.start()
    try:
        deadline = time.monotonic() + args.timeout
        while not (images.matched() and features.matched()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pixels = bytes(WIDTH * HEIGHT * 3)
        for i in range(args.frames):
            frame_id = "bad" if i == args.bad else f"f{i}"
            images.publish(image_cdr(1_000 + i, 0, frame_id, HEIGHT, WIDTH, "rgb8", 0, WIDTH * 3, pixels))
            if frame_id == "bad":
                wait_until = time.monotonic() + 2.0
                while cam.images.intake.failed == 0 and time.monotonic() < wait_until:
                    time.sleep(0.05)
                continue
            with arrived:
                arrived.wait_for(lambda f=frame_id: f in got, args.timeout)
    finally:
        node.stop()
        stats = node.stats()
        failed = cam.images.intake.failed
        transport.close()
    args.out.write_text(json.dumps({"features": got, "stats": {k: stats[k] for k in ("received", "encoded")},
                                    "callback_failures": failed}))  # fmt: skip
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
