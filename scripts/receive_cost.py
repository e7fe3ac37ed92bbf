"""What receiving a 1080p frame costs, on the pip path (Cyclone DDS from Python) and under rclpy on the
real Humble (issue 27 item 4). A measurement, not a test: it prints numbers and asserts nothing.

    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/receive_cost.py [--fps 30] [--seconds 6]
    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/receive_cost.py --drop [--rounds 2] [--docs NAME]

`--drop`: what a *dropped* frame costs instead (bench/dropcost.py's trial: the encoder node with its
encoder paused, four 1080p cameras at --fps), on the pip path (a take per sample, and all per take) and under
rclpy on the real Humble, each idle and beside one CPU hog per core: the transport's floor beside our share;
`+glibc`: the node with glibc's own malloc thresholds (frame_heap_mb 0) in place of its default (dropcost.GLIBC);
`+before`: the node before pacing (every sample taken as it comes: reader_samples 0) in place of its default, on the
pip path (dropcost.BEFORE; rclpy is never paced).

For each transport, ros/echo.py (the encoder node's subscription, QoS and frame validation, a header
sent back per frame, no encode) receives one camera of raw rgb8 1080p frames from the capacity bench's
player (its own process, pip path) at --fps, interleaved over --rounds; the echo under rclpy runs from
a colcon build of this checkout in the robot venv (as bag_loss.py builds it). Printed per transport:
frames back of those sent, the echo's CPU per frame by thread (bench/capacity.py's roles) and in total.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))  # test/ (for `support`)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout

from bag_loss import humble_run


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/openclaw-receive-cost"))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--drop", action="store_true", help="the cost of a dropped frame (bench/dropcost.py)")
    p.add_argument("--cameras", type=int, default=4, help="--drop: cameras")
    p.add_argument("--loads", default=",".join(("idle", "hogs")), help="--drop: idle, hogs or both")
    p.add_argument("--docs", default=None, metavar="NAME",
                   help="--drop: also publish the table as docs/figures/NAME.json and .md")  # fmt: skip
    args = p.parse_args(argv)

    from openclaw_vision.bench.cameras import PLAYER_FRAMES, topics
    from openclaw_vision.bench.capacity import Receiver
    from openclaw_vision.core import children
    from openclaw_vision.runtime import bags

    ros2, lock = humble_run(args.work, args.rebuild)  # noqa: RUF059 - the lock is held until exit
    venv = ros2.venv
    bag = args.work / "frames-raw"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=PLAYER_FRAMES, fps=30.0)
    if args.drop:
        return drop_cost(args, ros2, bag)
    images = [image for image, _ in topics(1, False)]
    echo = ["-m", "openclaw_vision.ros.echo", *images]
    how = {
        "pip (cyclonedds-python)": (children.python(*echo, "--transport", "cyclonedds"), None),
        "rclpy (Humble, rmw_cyclonedds_cpp)": ([str(venv / "bin" / "python"), *echo, "--transport", "rclpy"],
                                               ros2.environ()),
    }  # fmt: skip
    rows: dict[str, list] = {k: [] for k in how}
    for r in range(args.rounds):
        for name, (argv_, env) in how.items():
            work = args.work / f"{name.split()[0]}-{r}"
            with contextlib.ExitStack() as stack:
                child = children.Child(argv_, log_path=work / "echo.log", env=env, cwd=args.work)
                rx = Receiver(child, 1, False, work, stack)
                rx.trial(args.fps, args.seconds, args.warmup, bag)
                rx.attribute({})
            t = rx.trials[0]
            rows[name].append(t.record())
            total = sum(t.cpu_ms_per_frame.values())
            print(f"{name}: {t.back}/{t.sent} back at {t.send_fps:.1f} fps; {total:.2f} core-ms per frame: "
                  f"{t.cpu_ms_per_frame}", flush=True)  # fmt: skip
    summary = {
        name: {"cpu_ms_per_frame_total": [round(sum(t["cpu_ms_per_frame"].values()), 2) for t in ts],
               "back_of_sent": [f"{t['back']}/{t['sent']}" for t in ts]}
        for name, ts in rows.items()
    }  # fmt: skip
    print(json.dumps(summary, indent=2))
    return 0


def drop_cost(args, ros2, bag: Path) -> int:
    """bench/dropcost.py's trials, the rclpy receiver run by the robot venv's Python in the sourced Humble."""
    from openclaw_vision.bench import dropcost

    robot = [str(ros2.venv / "bin" / "python")]
    pip, rclpy = (None, None), (robot, ros2.environ())
    setups = {("cyclonedds", "one"): pip, ("cyclonedds", "all"): pip, ("cyclonedds", "all" + dropcost.GLIBC): pip,
              ("cyclonedds", "all" + dropcost.BEFORE): pip, ("rclpy", "one"): rclpy,
              ("rclpy", "one" + dropcost.GLIBC): rclpy}  # fmt: skip
    cwd = {"rclpy": args.work}  # outside the checkout: the colcon install's package (its messages) is imported
    rows = []
    for r in range(args.rounds):
        for load in args.loads.split(","):
            for (transport, path), (python, env) in setups.items() if r % 2 == 0 else list(setups.items())[::-1]:
                row = dropcost.trial(transport, path, load, args.cameras, args.fps, args.seconds, args.warmup, bag,
                                     args.work / f"drop-{transport}-{path}-{load}-{r}", python, env,
                                     cwd.get(transport))  # fmt: skip
                rows.append(row)
                print(dropcost.line(row), flush=True)
    res = {"cameras": args.cameras, "fps": args.fps, "seconds": args.seconds, "warmup": args.warmup, "rows": rows,
           "rclpy": "Humble's rclpy with rmw_cyclonedds_cpp"}  # fmt: skip
    md = "\n".join(dropcost.markdown(res))
    print(md)
    if args.docs:
        from openclaw_vision.bench import figures

        command = "scripts/receive_cost.py " + " ".join(sys.argv[1:])
        print("published", *figures.publish(args.docs, res, md, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
