"""How many frames `ros2 bag play` gets into the rclpy encoder node, on the real Humble (issue 27 item 5).

A measurement, not a test (it prints numbers and asserts nothing):

    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/bag_loss.py --runs 3 [--depth N] [--delay S]

Builds this checkout with colcon once into --workspace (kept, reused unless --rebuild), writes a
60-frame 1080p rgb8 sample bag at 30 fps, then per run: starts `ros2 run openclaw_vision encoder_node`
(tiny model, the robot Cyclone config under ROS_LOCALHOST_ONLY=1), plays the bag with `ros2 bag play`,
stops the node with SIGINT and reads its --stats-json. Prints one line per run and a JSON summary:
received / played, encoded, dropped, lost (the reader's sample-lost status) and missing_estimate (the
node's header-stamp gap estimate), and net.core.rmem_max.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))  # test/ (for `support`)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout

from support import humble
from support.domains import take_domain

from openclaw_vision.ros import dds_config


def domain_lock():
    """A DDS domain of this run's own (support/domains.py), set in ROS_DOMAIN_ID; its lock is held until exit."""
    got = take_domain(range(199, 20, -1))
    if got is None:
        raise SystemExit("no free DDS domain")
    os.environ["ROS_DOMAIN_ID"] = str(got[0])
    return got[1]


def humble_run(work: Path, rebuild: bool):
    """What a script on the shared Humble does first: its work folder, a DDS domain of its own (`domain_lock`),
    this process's DDS on the loopback config, and the colcon build of this checkout (humble.built). Returns the
    build and the domain's lock, to be held until exit."""
    work.mkdir(parents=True, exist_ok=True)
    lock = domain_lock()
    os.environ["CYCLONEDDS_URI"] = humble.LOOPBACK_CONFIG.as_uri()
    return humble.built(work, rebuild), lock


def socket_drops(pid: int) -> int:
    """Datagrams the kernel dropped at process `pid`'s UDP sockets (/proc/net/udp's `drops` column)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    drops = 0
    for line in Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[9] in inodes:
            drops += int(cols[-1])
    return drops


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--depth", type=int, default=0, help="the node's depth parameter (0: its default)")
    p.add_argument("--delay", type=float, default=0.0, help="ros2 bag play --delay")
    p.add_argument("--work", type=Path, default=Path("/tmp/openclaw-bag-loss"))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--param", action="append", default=[], help="more node parameters, key:=value")
    p.add_argument("--features", action="store_true", help="also count /visual_features with an rclpy listener")
    p.add_argument("--skip", type=str, default="", help="frame indices to leave out of the bag, e.g. 20,21,22")
    args = p.parse_args(argv)

    from openclaw_vision.models.export import export_model
    from openclaw_vision.runtime import bags

    ros2, lock = humble_run(args.work, args.rebuild)  # noqa: RUF059 - the lock is held until exit
    model = args.work / "tiny.fp32.onnx"
    if not model.is_file():
        export_model("tiny", model)
    bag = args.work / f"bag-{args.frames}-{args.fps:g}-{args.skip or 'all'}"
    if not bag.exists():
        skip = {int(i) for i in args.skip.split(",") if i}
        if skip:
            bags.write_sample_bag(bag.with_name(bag.name + "-full"), frames=args.frames, fps=args.fps)
            msgs = [m for i, m in enumerate(bags.read_messages(bag.with_name(bag.name + "-full"))) if i not in skip]
            with bags.BagWriter(bag, "mcap") as w:
                for m in msgs:
                    w.write(m.topic, m.msgtype, m.timestamp_ns, m.raw)
        else:
            bags.write_sample_bag(bag, frames=args.frames, fps=args.fps)
    played = sum(1 for _ in bags.read_messages(bag))
    start_ns, period_ns = 1_700_000_000_000_000_000, 1e9 / args.fps  # write_sample_bag's defaults
    extra = {k: v for k, v in os.environ.items() if k.startswith("OPENCLAW_WORKER")}
    env = ros2.environ(localhost_only=True, cyclonedds_uri=humble.ROBOT_CONFIG.as_uri(), **extra)
    params = {"model": "tiny", "model_path": str(model), "precision": "fp32", "threads": "1"}
    if args.depth:
        params["depth"] = str(args.depth)
    params.update(dict(kv.split(":=", 1) for kv in args.param))
    rows = []
    for run in range(args.runs):
        stats = args.work / f"stats-{run}.json"
        stats.unlink(missing_ok=True)
        node = ros2.start("ros2", "run", "openclaw_vision", "encoder_node", "--stats-json", str(stats),
                          *humble.ros_args(params), env=env)  # fmt: skip
        node.wait_for("ready:", timeout=90)
        feats = args.work / f"features-{run}.json"
        counter = None
        if args.features:
            counter = ros2.start("python3", str(humble.ROOT / "test" / "support" / "rclpy_counter.py"), str(feats),
                                 "--type", "openclaw_vision/msg/VisualFeatures", "--topic", "/visual_features",
                                 "--seconds", "120", env=env)  # fmt: skip
            counter.wait_for("ready", timeout=30)
        time.sleep(1.0)
        play = ["ros2", "bag", "play", str(bag)] + (["--delay", str(args.delay)] if args.delay else [])
        t0 = time.monotonic()
        ros2.run(*play, env=env, timeout=120)
        play_s = time.monotonic() - t0
        time.sleep(1.5)
        pids = node.children()  # `ros2 run`'s child: the node's own process
        drops = socket_drops(pids[0]) if pids else None
        code = node.stop(timeout=15)
        st = json.loads(stats.read_text())
        first = None
        if counter is not None:
            counter.stop(timeout=15)
            got = json.loads(feats.read_text())["received"]
            stamps = sorted(s * 10**9 + ns for s, ns, *_ in got)
            first = round((stamps[0] - start_ns) / period_ns) if stamps else None
            st["features_heard"] = len(got)
        row = {k: st.get(k) for k in ("received", "encoded", "dropped", "rejected", "failed", "lost",
                                      "missing_estimate")}  # fmt: skip
        row.update(socket_drops=drops, first_encoded_index=first, features_heard=st.get("features_heard"),
                   played=played,
                   play_s=round(play_s, 2), exit=code)  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    ros2.close()
    summary = {
        "rmem_max": dds_config.rmem_max(),
        "params": params,
        "delay": args.delay,
        "received": [r["received"] for r in rows],
        "played": played,
        "missing_estimate": [r["missing_estimate"] for r in rows],
        "runs": rows,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
