"""A camera as robots have one: an rclpy node publishing sensor_msgs/Image at a fixed rate.

Run in a sourced Humble (the `ros2` tier, or by hand for the loss measurements in docs/robot-and-dds.md):

    python3 rclpy_camera.py OUT.json [--count 60] [--fps 10] [--encoding rgb8] [--qos sensor|reliable]
                            [--topic /camera/image_raw] [--subscribers 1] [--size 1920x1080]

Waits until `--subscribers` subscriptions are matched, then publishes `--count` frames paced at
`--fps` (openclaw_vision/core/pacing.py: absolute deadlines, a late frame goes at once, the deadlines missed
in a stall are skipped: no catch-up bursts), each with a stamp of its own, and writes OUT.json: the
(sec, nanosec, frame_id) of every image in the order sent, and the late and skipped ticks. `--qos sensor`
is rclpy's qos_profile_sensor_data (best effort, keep last 5), what camera drivers use; `reliable` is
the default profile (keep last 10).
"""

from __future__ import annotations

import argparse
import array
import json
import sys
import time
from pathlib import Path

import numpy as np

from openclaw_vision.core.pacing import Pacer  # standard library only: importable under the system Python

#: distinct frames generated once and cycled (the content does not matter to the transport)
DISTINCT = 4


def frames(encoding: str, width: int, height: int) -> list[np.ndarray]:
    """DISTINCT raw buffers of `encoding`: a diagonal colour ramp, shifted a little each frame
    (numpy only: the robot venv has no scikit-image for sample_frames' panorama)."""
    from openclaw_vision.preprocess.sample_frames import convert_rgb

    y, x = np.mgrid[0:height, 0:width]
    out = []
    for i in range(DISTINCT):
        rgb = np.stack([(x + 40 * i) % 256, (y + 20 * i) % 256, (x + y) // 8 % 256], axis=-1).astype(np.uint8)
        out.append(np.ascontiguousarray(convert_rgb(rgb, encoding)))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--count", type=int, default=60)
    p.add_argument("--fps", type=float, default=10.0)
    p.add_argument("--encoding", default="rgb8")
    p.add_argument("--qos", choices=("sensor", "reliable"), default="sensor")
    p.add_argument("--topic", default="/camera/image_raw")
    p.add_argument("--subscribers", type=int, default=1)
    p.add_argument("--size", default="1920x1080")
    p.add_argument("--frame-id", default="camera")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the subscribers")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))

    import rclpy
    from rclpy.qos import qos_profile_sensor_data, qos_profile_system_default
    from sensor_msgs.msg import Image

    raws = frames(args.encoding, width, height)
    # array('B') is what the generated `data` setter takes as it is; bytes or a list are checked
    # element by element in Python (~0.8 s for a 6 MB frame, and the camera would not keep its rate)
    payloads = [array.array("B", raw.tobytes()) for raw in raws]
    rclpy.init()
    node = rclpy.create_node("rclpy_camera")
    qos = qos_profile_sensor_data if args.qos == "sensor" else qos_profile_system_default
    pub = node.create_publisher(Image, args.topic, qos)
    deadline = time.monotonic() + args.timeout
    while pub.get_subscription_count() < args.subscribers:
        if time.monotonic() > deadline:
            print(f"rclpy_camera: {pub.get_subscription_count()} of {args.subscribers} subscribers", file=sys.stderr)
            return 3
        time.sleep(0.05)
    time.sleep(0.5)  # the subscribers' side of the match (their view of this writer) settles
    print("ready", flush=True)
    sent = []
    paced = Pacer(args.fps, count=args.count)
    for i in paced:
        raw = raws[i % DISTINCT]
        msg = Image(height=height, width=width, encoding=args.encoding, is_bigendian=0,
                    step=raw.size // raw.shape[0])  # fmt: skip
        msg.data = payloads[i % DISTINCT]
        ns = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
        msg.header.frame_id = args.frame_id
        pub.publish(msg)
        sent.append([msg.header.stamp.sec, msg.header.stamp.nanosec, args.frame_id])
    time.sleep(1.0)  # a reliable writer's last frames may still be in repair
    args.out.write_text(json.dumps({"sent": sent, "encoding": args.encoding, "fps": args.fps, "late": paced.late,
                                    "skipped": paced.skipped}))  # fmt: skip
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
