"""`openclaw-vision`: one command for the tools (export, bag, encoder, replay, demo)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from .resources import default_model_path

log = logging.getLogger("openclaw_vision")


def cmd_export(args: argparse.Namespace) -> int:
    from .models.export import ExportCheckError, export_model

    out = args.out or default_model_path(args.model, "fp32")
    if out.exists() and not args.force:
        print(f"{out} exists (use --force to rebuild)")
        return 0
    try:
        res = export_model(args.model, out, args.checkpoint, args.seed)
    except (ExportCheckError, ValueError, KeyError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 1
    print(f"wrote {res.path} ({res.model_id}, {res.embed_dim}-d, ORT vs torch min cosine {res.min_cosine:.6f})")
    return 0


def cmd_bag_sample(args: argparse.Namespace) -> int:
    from .bags import write_sample_bag

    if args.out.exists():
        print(f"{args.out} exists; remove it first", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    n = write_sample_bag(
        args.out, args.frames, args.fps, args.width, args.height, args.encoding, args.topic, args.storage
    )
    print(
        f"wrote {n} {args.width}x{args.height} {args.encoding} frames at {args.fps} fps to {args.out} "
        f"({args.storage}, {time.perf_counter() - t0:.1f} s)"
    )
    return 0


def cmd_encoder(rest: list[str]) -> int:
    from .ros.encoder_node import main

    return main(rest)


def _replay_options(args: argparse.Namespace):
    from .ros.replay import ReplayOptions

    return ReplayOptions(
        bag=args.bag,
        out=args.out,
        bag_topic=args.bag_topic,
        image_topic=args.image_topic,
        features_topic=args.features_topic,
        rate=args.rate,
        lockstep=args.lockstep,
        reliability=args.reliability,
        limit=args.limit,
        storage=args.storage,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from .ros.replay import ReplayError, replay
    from .ros.transport import create_transport

    transport = create_transport(args.transport, "openclaw_replay")
    try:
        summary = replay(_replay_options(args), transport)
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


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bag-topic", default=None, help="image topic to read from the bag (default: its first)")
    p.add_argument("--image-topic", default=None, help="topic to publish on (default: the bag topic)")
    p.add_argument("--features-topic", default="/visual_features")
    p.add_argument("--rate", type=float, default=1.0, help="1 = the bag's timing, 2 = twice as fast, 0 = flat out")
    p.add_argument("--lockstep", action="store_true", help="send the next frame only after this one's features")
    p.add_argument("--reliability", choices=("reliable", "best_effort"), default="reliable")
    p.add_argument("--limit", type=int, default=0, help="send at most this many frames")
    p.add_argument(
        "--storage",
        choices=("mcap", "sqlite3"),
        default="mcap",
        help="output bag storage (Humble reads sqlite3 out of the box; mcap needs ros-humble-rosbag2-storage-mcap)",
    )
    p.add_argument("--transport", default="auto", choices=("auto", "rclpy", "cyclonedds"))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.report import markdown
    from .bench.run import run_bench

    result = run_bench(args)
    print(markdown(result))
    print(f"wrote {args.out / 'bench.json'}, {args.out / 'bench.md'} and plots ({result['seconds']} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-vision", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("export", help="build a CLIP vision tower and export it to ONNX (checked vs PyTorch)")
    p.add_argument("--model", default="ViT-B-32")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="open_clip or Hugging Face weights (.safetensors, .bin/.pt, or an HF folder); "
        "default: deterministic random init",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="default: ~/.cache/openclaw_vision/models/<model>.fp32.onnx")
    p.add_argument("--force", action="store_true")
    p.set_defaults(fn=cmd_export)

    bag = sub.add_parser("bag", help="rosbag2 tools").add_subparsers(dest="bagcmd", required=True)
    p = bag.add_parser("sample", help="write a bag of camera-like frames made from real photographs")
    p.add_argument("out", type=Path)
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--encoding", default="rgb8")
    p.add_argument("--topic", default="/camera/image_raw")
    p.add_argument(
        "--storage",
        choices=("mcap", "sqlite3"),
        default="mcap",
        help="mcap (needs ros-humble-rosbag2-storage-mcap on Humble) or sqlite3 (Humble's default)",
    )
    p.set_defaults(fn=cmd_bag_sample)

    sub.add_parser("encoder", help="run the encoder node (flags: see `openclaw-vision encoder --help`)", add_help=False)

    p = sub.add_parser("replay", help="play a bag into a running encoder node and record /visual_features")
    p.add_argument("bag", type=Path)
    p.add_argument("--out", type=Path, default=None, help="bag to record the features into")
    p.add_argument("--json", type=Path, default=None, help="write the summary here too")
    add_replay_arguments(p)
    p.set_defaults(fn=cmd_replay)

    from .bench.run import add_arguments as add_bench_arguments

    p = sub.add_parser("bench", help="latency P50/P95/P99 per stage, side by side with the usual baselines")
    add_bench_arguments(p)
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("demo", help="build the default model and a sample bag, replay it through the node")
    p.add_argument("--out", type=Path, default=Path("out/demo"))
    p.add_argument("--model", default="ViT-B-32")
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--fps", type=float, default=30.0)
    p.set_defaults(fn=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["encoder"]:  # the node parses its own flags (they mirror its config keys)
        return cmd_encoder(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
