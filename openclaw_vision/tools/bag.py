"""The rosbag commands: `openclaw-vision bag sample` writes a bag of camera-like frames, `replay` plays
one into a running encoder node and records what comes back.

Their flags set the parameters of what they drive (bags.write_sample_bag, ros.replay.ReplayOptions)
and take those defaults (commands.field_flag); the choices are the drivers' constants.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core.commands import Command, field_flag, from_args
from ..preprocess.compressed import CODECS
from ..preprocess.encodings import ENCODINGS
from ..preprocess.sample_frames import COMPRESSIBLE
from ..runtime import bags


def _sample_arguments(p: argparse.ArgumentParser) -> None:
    write = bags.write_sample_bag
    p.add_argument("out", type=Path)
    for flag in ("--frames", "--fps", "--width", "--height"):
        field_flag(p, flag, write)
    field_flag(p, "--encoding", write,
               help=f"{' '.join(ENCODINGS)} (compressed: {' '.join(COMPRESSIBLE)})")  # fmt: skip
    field_flag(p, "--compressed", write, choices=("", *CODECS),
               help="write sensor_msgs/CompressedImage on <topic>/compressed, as image_transport's compressed plugin"
               " does")  # fmt: skip
    field_flag(p, "--topic", write)
    field_flag(p, "--storage", write, choices=bags.STORAGES,
               help="mcap (needs ros-humble-rosbag2-storage-mcap on Humble) or sqlite3 (Humble's default)")  # fmt: skip


def _sample(args: argparse.Namespace) -> int:
    if args.out.exists():
        print(f"{args.out} exists; remove it first", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    try:
        n = from_args(bags.write_sample_bag, args, path=args.out)
    except ValueError as err:
        print(f"bag sample: {err}", file=sys.stderr)
        return 2
    what = f"{args.compressed} CompressedImage on {args.topic.rstrip('/')}/compressed" if args.compressed else "Image"
    print(
        f"wrote {n} {args.width}x{args.height} {args.encoding} frames ({what}) at {args.fps} fps to {args.out} "
        f"({args.storage}, {time.perf_counter() - t0:.1f} s)"
    )
    return 0


#: `openclaw-vision bag sample`
SAMPLE = Command(_sample_arguments, _sample)


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    from ..ros.replay import ReplayOptions
    from ..runtime.config import RELIABILITIES, TRANSPORTS

    o = ReplayOptions
    p.add_argument("bag", type=Path)
    field_flag(p, "--out", o, type=Path, help="bag to record the features into")
    p.add_argument("--json", type=Path, default=None, help="write the summary here too")
    field_flag(p, "--bag-topic", o, help="image topic to read from the bag (default: its one camera)")
    field_flag(p, "--image-topic", o, help="topic to publish on (default: the bag topic)")
    field_flag(p, "--features-topic", o, help="default: <camera>/visual_features or /visual_features")
    field_flag(p, "--rate", o, help="1 = the bag's timing, 2 = twice as fast, 0 = flat out")
    field_flag(p, "--lockstep", o, help="send the next frame only after this one's features")
    field_flag(p, "--reliability", o, choices=RELIABILITIES)
    field_flag(p, "--limit", o, help="send at most this many frames")
    field_flag(p, "--keep-stamps", o, "restamp",
               help="keep the bag's header stamps, as `ros2 bag play` does (default: stamp each image with its send"
               " time)")  # fmt: skip
    field_flag(p, "--storage", o, choices=bags.STORAGES,
               help="output bag storage (Humble reads sqlite3 out of the box; mcap needs"
               " ros-humble-rosbag2-storage-mcap)")  # fmt: skip
    p.add_argument("--transport", default=TRANSPORTS[0], choices=TRANSPORTS)


def replay_options(args: argparse.Namespace):
    """The ReplayOptions of `replay`'s parsed flags."""
    from ..ros.replay import ReplayOptions

    return from_args(ReplayOptions, args)


def _replay(args: argparse.Namespace) -> int:
    from ..ros.replay import ReplayError, replay
    from ..ros.transport import create_transport

    transport = create_transport(args.transport, "openclaw_replay")
    try:
        summary = replay(replay_options(args), transport)
    except ReplayError as err:
        print(f"replay failed: {err}", file=sys.stderr)
        return 1
    finally:
        transport.close()
    text = json.dumps(summary, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return 0 if summary["accounted"] else 3


#: `openclaw-vision replay`
REPLAY = Command(_replay_arguments, _replay)
