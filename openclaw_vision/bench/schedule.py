"""`python -m openclaw_vision.bench.schedule`: how many threads one multi-camera node gives its runtime and its
prepare pool, and how many batches it encodes at once, measured on this CPU (issue 38, items 3 and 4).

One node with 4 cameras at 30 fps each, 1080p from one publisher process (bench/cameras.py's own trial,
`run_setup`), once per layout and per image transport, the layouts in reversed order every other round:

- `default`: what the node picks at start (`threads` 0, `prep_threads` 0 and `encode_lanes` 0: the runtime gets
  one thread per usable core, core/cpu.py `usable_cores`; the prepare pool min(max_batch, those cores); one
  lane per core where the runtime answers calls at once, encoder_node.lanes_for);
- `one lane`: the same threads, one batch at a time (the node's default before lanes);
- one runtime thread and one preparing thread; all cores and one; one lane each.

Per layout: frames encoded per second (all cameras), frames delivered per camera, the node's CPU. The best
layout is the one with the highest mean encoded rate; the default is kept where it is within the rounds' spread
of the best (its best round at least the best layout's worst). The intake (one take thread per camera) and
the DDS receive threads are not counted out: they run at the process's priority, the encode side (worker,
prepare pool, the runtime's pool) `scheduler.WORKER_NICE` below it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.cpu import usable_cores

CAMERAS = 4
#: (name, runtime threads, prepare threads, lanes); 0 = the node's own choice; -1 = every usable core
LAYOUTS = (("default", 0, 0, 0), ("one lane", 0, 0, 1), ("1 + 1", 1, 1, 1), ("all + 1", -1, 1, 1))


def flags(threads: int, prep: int, lanes: int) -> tuple[str, ...]:
    """The node flags of one layout (-1: every usable core)."""
    cores = usable_cores()
    return ("--threads", str(cores if threads < 0 else threads), "--prep-threads", str(cores if prep < 0 else prep),
            "--encode-lanes", str(lanes))  # fmt: skip


def run_schedule(rounds: int, transports: tuple[str, ...], work: Path) -> dict:
    """Every layout, per transport, `rounds` times (order reversed every other round)."""
    from ..build_tools.first_use import ensure_int8
    from ..models.configs import DEFAULT_MODEL, canonical_name
    from ..runtime import bags
    from . import cameras
    from .run import add_arguments

    buffers = cameras.socket_buffers()
    trials = []
    for transport in transports:
        p = argparse.ArgumentParser()
        add_arguments(p)
        args = p.parse_args(["--mode", "cameras", "--camera-transport", transport])
        args.model = canonical_name(DEFAULT_MODEL)
        args.int8_model_path = Path(ensure_int8(args.model))
        bag = work / f"schedule_frames_{transport}"
        if not bag.exists():
            bags.write_sample_bag(bag, frames=cameras.PLAYER_FRAMES, fps=cameras.FPS,
                                  compressed="jpeg" if transport == "compressed" else "")  # fmt: skip
        for r in range(rounds):
            for name, threads, prep, lanes in LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]:
                trial = work / f"schedule-{transport}-{r}-{threads}-{prep}-{lanes}"
                t = cameras.run_setup("multi", CAMERAS, args, bag, trial, node_flags=flags(threads, prep, lanes))
                keep = ("total_fps", "delivered_fps_per_camera", "cpu_percent", "min_share_of_mean")
                trials.append({"transport": transport, "layout": name, "round": r, **{k: t.get(k) for k in keep}})
                print(f"schedule {transport} round {r} {name}: {cameras._line(t)}", file=sys.stderr, flush=True)
    return {"cores": usable_cores(), "cameras": CAMERAS, "fps": cameras.FPS, "rounds": rounds,
            "trials": trials, "verdicts": verdicts(trials), "socket_buffers": buffers}  # fmt: skip


def verdicts(trials: list[dict]) -> list[dict]:
    """Per transport: each layout's encoded frames/s (mean, min, max over rounds), the best by mean, and whether
    the default is within the spread of the best (its best round >= the best layout's worst)."""
    out = []
    for transport in dict.fromkeys(t["transport"] for t in trials):
        rows = {}
        for name, *_ in LAYOUTS:
            mine = [t for t in trials if t["transport"] == transport and t["layout"] == name]
            fps = [t["total_fps"] for t in mine]
            got = [t["delivered_fps_per_camera"] for t in mine]
            cpu = [t["cpu_percent"] for t in mine if t.get("cpu_percent") is not None]
            if fps:
                rows[name] = {"mean": round(sum(fps) / len(fps), 2), "min": min(fps), "max": max(fps),
                              "delivered_mean": round(sum(got) / len(got), 2),
                              "cpu_percent_mean": round(sum(cpu) / len(cpu), 1) if cpu else None}  # fmt: skip
        best = max(rows, key=lambda k: rows[k]["mean"])
        keep = rows["default"]["max"] >= rows[best]["min"]
        out.append({"transport": transport, "layouts": rows, "best": best, "default_kept": keep})
    return out


def markdown(res: dict) -> list[str]:
    from . import cameras

    lines = [f"One node, {res['cameras']} cameras at {res['fps']:g} fps (1080p, one publisher), {res['rounds']} "
             f"round(s) per layout, {res['cores']} usable cores. Layout: runtime threads + preparing threads; "
             "`default` also runs one batch per core at once where the runtime can (`encode_lanes` 0). "
             + (cameras.socket_line(res["socket_buffers"]) if "socket_buffers" in res else ""), "",
             "| transport | layout | encoded frames/s, mean (min-max) | delivered per camera | node CPU % | best "
             "| default kept |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for v in res["verdicts"]:
        for name, r in v["layouts"].items():
            kept = ("yes" if v["default_kept"] else "NO") if name == "default" else ""
            lines.append(f"| {v['transport']} | {name} | {r['mean']} ({r['min']}-{r['max']}) | {r['delivered_mean']} "
                         f"| {r['cpu_percent_mean']} | {'yes' if name == v['best'] else ''} | {kept} |")  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    from . import figures

    p = argparse.ArgumentParser(prog="python -m openclaw_vision.bench.schedule")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--transports", default="raw,compressed", help="raw, compressed or both, comma-separated")
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    p.add_argument("--docs", default=None, metavar="NAME", help="also publish it as docs/figures/NAME.json and .md")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    res = run_schedule(args.rounds, tuple(args.transports.split(",")), args.out)
    md = "\n".join(markdown(res))
    print(md)
    (args.out / "schedule.json").write_text(json.dumps(res, indent=1))
    if args.docs:
        command = "python -m openclaw_vision.bench.schedule " + " ".join(argv)
        print("published", *figures.publish(args.docs, res, md, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
