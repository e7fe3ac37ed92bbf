"""A camera in its own process for the reliability suite: publishes sensor_msgs/Image (or CompressedImage)
over loopback DDS.

Its own process because cyclonedds-python holds the GIL inside a blocking reliable write: a
sender thread in the test process would starve the test's own /visual_features reader while
the node's input buffer is full, and the test would be measuring itself.

    python camera_sender.py fuzz N SEED OUT.json     # image_fuzz.generate(N, SEED), as fast as accepted
    python camera_sender.py compressed N SEED OUT.json  # compressed_fuzz.generate(N, SEED) on <topic>/compressed
    python camera_sender.py paced SECONDS FPS OUT.json  # small valid frames at FPS (core/pacing.py: no catch-up bursts)
    python camera_sender.py flood N OUT.json           # N small valid frames, as fast as accepted

Prints 'ready' once the node's subscription is matched, then writes OUT.json: the stamp of each
message in the order sent (the stamp is the send time, ns, this host's clock).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from dds_helpers import Inbox, cameras_connected
from image_fuzz import ImageCase, generate

from openclaw_vision.core.pacing import Pacer
from openclaw_vision.ros.cyclone import CycloneTransport
from openclaw_vision.ros.types import COMPRESSED_IMAGE, DIAGNOSTIC_ARRAY, IMAGE, QoS

TOPIC = "/camera/image_raw"


def small_frames(n: int = 16) -> list[ImageCase]:
    """`n` distinct valid 64x48 rgb8 frames (a camera's stream cycles through them)."""
    rng = np.random.default_rng(0)
    return [ImageCase("good", 48, 64, 192, "rgb8", rng.integers(0, 256, 48 * 64 * 3, np.uint8).tobytes(), "camera",
                      True) for _ in range(n)]  # fmt: skip


def paced_cases(seconds: float, fps: float):
    """Valid 64x48 frames at `fps` for `seconds`, like a camera (openclaw_vision/core/pacing.py: absolute deadlines,
    a late frame sent at once, the deadlines missed in a stall skipped, never a catch-up burst)."""
    frames = small_frames()
    return (frames[i % len(frames)] for i in Pacer(fps, seconds=seconds))


def flood_cases(n: int):
    """`n` valid 64x48 frames with no pacing: an overload measured in frames, not seconds."""
    frames = small_frames()
    return (frames[i % len(frames)] for i in range(n))


def main(argv: list[str]) -> int:
    mode, out = argv[0], Path(argv[-1])
    topic, ros_type = TOPIC, IMAGE
    if mode == "fuzz":
        cases = generate(int(argv[1]), int(argv[2]))
    elif mode == "compressed":
        from compressed_fuzz import generate as generate_compressed

        cases = generate_compressed(int(argv[1]), int(argv[2]))
        topic, ros_type = TOPIC + "/compressed", COMPRESSED_IMAGE  # image_transport's `compressed` sub-topic
    elif mode == "flood":
        cases = flood_cases(int(argv[1]))
    else:
        cases = paced_cases(float(argv[1]), float(argv[2]))
    t = CycloneTransport("camera_sender")
    Image, Header, Time = t.msg(ros_type), t.msg("std_msgs/msg/Header"), t.msg("builtin_interfaces/msg/Time")
    pub = t.publisher(topic, ros_type, QoS("reliable", 10, "keep_all"))
    diags = Inbox()
    t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), diags)
    # both sides matched: ours, and the node's camera status (a sample sent before the node's reader has matched
    # this writer would be in no count; dds_helpers.node_matched says why)
    node_side = cameras_connected([TOPIC], subscribers=0)
    deadline = time.monotonic() + 60
    while pub.matched() < 1 or not diags.holds(node_side, 0.05):
        if time.monotonic() > deadline:
            print("no node", flush=True)
            return 1
    print("ready", flush=True)
    stamps, last = [], 0
    for case in cases:
        last = max(time.time_ns(), last + 1)
        header = Header(stamp=Time(sec=last // 10**9, nanosec=last % 10**9), frame_id=case.frame_id)
        pub.publish(Image(header=header, **case.fields()))
        stamps.append(last)
    out.write_text(json.dumps(stamps))
    print("done", flush=True)
    time.sleep(0.5)  # let the last samples' acknowledgements come in before the writer goes
    t.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
