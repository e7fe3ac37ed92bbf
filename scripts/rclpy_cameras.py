"""One 4-camera encoder node against four one-camera nodes, both under rclpy on the real Humble (issue 38: the
robot's path). A measurement, not a test: it prints the cameras bench's table and asserts nothing.

    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/rclpy_cameras.py [--camera-transport raw|compressed]
                                                                          [--rebuild] [--docs NAME]

`bench --mode cameras --cameras 4`'s comparison (bench/cameras.py: equal delivered input, 15 and 30 fps per camera,
one publisher process and one per camera; the players and the measuring side on the pip path, which speaks the
same DDS), with every node run by the robot venv's Python from a colcon build of this checkout under the shared
Humble (`--transport rclpy`, `--backend onnxruntime`: the robot venv has ONNX Runtime, not OpenVINO).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))  # test/ (for `support`)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout

from bag_loss import humble_run


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--camera-transport", choices=("raw", "compressed"), default="raw")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--work", type=Path, default=Path("/tmp/openclaw-receive-cost"))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--docs", default=None, metavar="NAME", help="also publish as docs/figures/NAME.json and .md")
    args = p.parse_args(argv)

    from openclaw_vision.bench import cameras
    from openclaw_vision.core import children
    from openclaw_vision.core.resources import default_model_path
    from openclaw_vision.ros import process

    ros2, lock = humble_run(args.work, args.rebuild)  # noqa: RUF059 - the lock is held until exit
    robot_python = str(ros2.venv / "bin" / "python")

    class RclpyNode(children.Child):
        """The encoder node the bench asked for, run under rclpy: the robot venv's Python, Humble sourced, the
        colcon install's package (its cwd is outside the checkout)."""

        def __init__(self, node_args: list[str], log_path: Path | None = None, env=None, node: str = "encoder"):
            rclpy_args = ["rclpy" if a == "cyclonedds" else a for a in node_args]  # the value of --transport
            super().__init__([robot_python, "-m", "openclaw_vision.ros.encoder_node", *rclpy_args], log_path,
                             env=ros2.environ(), cwd=args.work)  # fmt: skip

    process.NodeProcess = RclpyNode  # bench/cameras.run_setup imports it when a trial starts
    bench = argparse.Namespace(model="ViT-B-32", int8_model_path=default_model_path("ViT-B-32", "int8"),
                               backend="onnxruntime", performance_hint="latency", cameras=[cameras.CAMERAS_GOAL_N],
                               seconds=args.seconds, warmup=args.warmup, quick=False,
                               camera_transport=args.camera_transport)  # fmt: skip
    res = cameras.run_cameras(bench, args.work / f"rclpy-cameras-{args.camera_transport}")
    res["transport"] = "rclpy (Humble, rmw_cyclonedds_cpp; the robot venv's ONNX Runtime)"
    md = "\n".join(cameras.markdown(res))
    print(md)
    if args.docs:
        from openclaw_vision.bench import figures

        command = "scripts/rclpy_cameras.py " + " ".join(argv)
        print("published", *figures.publish(args.docs, {"cameras": res, "goals": res["goals"]}, md, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
