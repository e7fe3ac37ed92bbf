"""`cameras` mode: N cameras at 30 fps 1080p into one multi-camera node, and into N single-camera
nodes, side by side in one run (N = 1, 2, 4, 8).

    player process ──(N camera topics, one paced loop)──DDS──► node(s) ──DDS──► this process
    (every camera ticks at 30 fps; a late tick is not caught up)         (features per camera)

For each N both setups get the same input from the same player: one node with `--image-topics`
(one model session, cross-camera batches) against N processes of the one-camera node (what a robot
runs without it). Per camera: frames encoded per second (features received in the measured window),
stamp → features P50/P99 (the stamp is the send time on this host's clock), drops (the node's
newest-frame drops plus samples lost on the way: sent - received). For the setup: total frames/s,
total resident memory (the nodes' RSS summed) and CPU (of the nodes, and of the player apart).
Where the time goes: each node's stage percentiles (deserialize, queue, batch, decode, preprocess,
encode, publish) from its --stats-json.

Both setups use the nodes' defaults (sensor-data QoS best effort, depth 1; threads = one per core
each), as deployed. The player runs in a process of its own so that its writes never hold up this
process's readers (cyclonedds-python holds the GIL in a write).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import bags

CAMERA_COUNTS = (1, 2, 4, 8)
FPS = 30.0
GOAL_N = 4
GOALS = {"fps_ratio": 1.3, "rss_ratio": 1.3, "min_share": 0.8}
PLAYER_FRAMES = 8  # distinct frames per camera in the player's memory (1080p rgb8: 6 MB each)


def topics(n: int, compressed: bool) -> list[tuple[str, str]]:
    """(image topic, features topic) of camera k: /cam<k>/image_raw[/compressed] → /cam<k>/visual_features
    (the multi-camera node's rule, given to the single-camera nodes as their --features-topic)."""
    from ..config import EncoderConfig
    from ..ros.encoder_node import camera_features_topic

    images = [f"/cam{k}/image_raw{bags.COMPRESSED_SUFFIX if compressed else ''}" for k in range(n)]
    return [(image, camera_features_topic(image, EncoderConfig.features_pattern)) for image in images]


# --- the player (its own process) -----------------------------------------------------------------


def play(bag: Path, n: int, fps: float, seconds: float, compressed: bool, out: Path) -> int:
    """Publish `n` cameras at `fps` for `seconds` (after every node's subscription is matched)."""
    from ..ros import cdr
    from ..ros.cyclone import CycloneTransport
    from ..ros.types import COMPRESSED_IMAGE, IMAGE, QoS

    source = bags.camera_source(bag)
    messages = bags.read_messages(bag, source.msgtype, source.topic)
    frames = [m.raw for m, _ in zip(messages, range(PLAYER_FRAMES), strict=False)]
    t = CycloneTransport("camera_player")
    pubs = [
        t.publisher(topic, COMPRESSED_IMAGE if compressed else IMAGE, QoS("best_effort", 1))
        for topic, _ in topics(n, compressed)
    ]
    deadline = time.monotonic() + 120
    while not all(p.matched() for p in pubs):
        if time.monotonic() > deadline:
            print("no node", flush=True)
            return 1
        time.sleep(0.05)
    print("ready", flush=True)
    period, sent = 1.0 / fps, [0] * n
    start = time.monotonic()
    due, tick = start, 0
    while (now := time.monotonic()) < start + seconds:
        if due > now:
            time.sleep(due - now)
        due = max(due, time.monotonic() - period) + period  # a late tick is sent now, the next one a period on
        for k, pub in enumerate(pubs):
            ns = time.time_ns()
            pub.publish(cdr.restamp(frames[(tick + k) % len(frames)], ns // 1_000_000_000, ns % 1_000_000_000))
            sent[k] += 1
        tick += 1
    out.write_text(json.dumps({"sent": sent, "seconds": time.monotonic() - start}))
    time.sleep(0.3)
    t.close()
    return 0


# --- the measuring side ---------------------------------------------------------------------------


@dataclass
class _Features:
    """Every VisualFeatures receipt per camera: (receipt ns, stamp ns)."""

    n: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    got: list[list[tuple[int, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.got = [[] for _ in range(self.n)]

    def callback(self, k: int):
        def on(msg, _deserialize_s: float) -> None:
            now = time.time_ns()
            with self.lock:
                self.got[k].append((now, msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec))

        return on


class _Usage:
    """CPU seconds and RSS of a set of processes over a window (psutil)."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.rss_peak = [0] * len(pids)
        self._stop = threading.Event()
        self._cpu0 = self._t0 = 0.0
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _cpu(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                c = p.cpu_times()
                total += c.user + c.system
            except Exception:  # ended
                pass
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            for i, p in enumerate(self.procs):
                with contextlib.suppress(Exception):
                    self.rss_peak[i] = max(self.rss_peak[i], p.memory_info().rss)

    def begin(self) -> None:
        self._cpu0, self._t0 = self._cpu(), time.monotonic()

    def end(self) -> dict:
        cpu = self._cpu() - self._cpu0
        wall = time.monotonic() - self._t0
        self._stop.set()
        self._thread.join()
        return {
            "cpu_percent": round(100 * cpu / max(wall, 1e-9), 1),
            "rss_mb": round(sum(self.rss_peak) / 2**20, 1),
            "rss_mb_per_process": [round(r / 2**20, 1) for r in self.rss_peak],
        }


def _node_args(model: str, model_path: Path, backend: str, stats: Path) -> list[str]:
    return [
        "--model",
        model,
        "--model-path",
        str(model_path),
        "--backend",
        backend,
        "--transport",
        "cyclonedds",
        "--diagnostics-period",
        "1.0",
        "--stats-json",
        str(stats),
    ]


def run_setup(setup: str, n: int, args, bag: Path, work: Path) -> dict:
    """One trial: the nodes of `setup` (multi: one node, single: n nodes), the player, the counts."""
    from ..ros.cyclone import CycloneTransport
    from ..ros.process import NodeProcess
    from ..ros.types import VISUAL_FEATURES, QoS
    from ..stats import percentiles

    cams = topics(n, args.camera_transport == "compressed")
    trial = work / f"{setup}{n}"
    trial.mkdir(parents=True, exist_ok=True)
    base = _node_args(args.model, args.int8_model_path, args.backend, trial / "stats0.json")
    if setup == "multi":
        launches = [[*base, "--image-topics", *(t for t, _ in cams)]]
    else:
        launches = []
        for k, (image, feats) in enumerate(cams):
            one = _node_args(args.model, args.int8_model_path, args.backend, trial / f"stats{k}.json")
            if image.endswith("/compressed"):
                one += ["--image-transport", "compressed"]
            launches.append([*one, "--image-topic", image.removesuffix("/compressed"), "--features-topic", feats])
    feats = _Features(n)
    t = CycloneTransport("camera_bench")
    subs = [t.subscribe(f, VISUAL_FEATURES, QoS("reliable", 100), feats.callback(k)) for k, (_, f) in enumerate(cams)]
    nodes = [NodeProcess(a, log_path=trial / f"node{i}.log") for i, a in enumerate(launches)]
    player = None
    try:
        usage = _Usage([p.proc.pid for p in nodes])
        deadline = time.monotonic() + 180
        while not all(s.matched() for s in subs):  # every node has its model loaded and publishes
            if time.monotonic() > deadline or not all(p.alive() for p in nodes):
                raise RuntimeError(f"{setup} x{n}: nodes did not start: " + nodes[0].log_text()[-1500:])
            time.sleep(0.1)
        seconds = args.warmup + args.seconds
        out = trial / "player.json"
        player = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "openclaw_vision.bench.cameras",
                "play",
                str(bag),
                str(n),
                str(FPS),
                str(seconds),
                args.camera_transport,
                str(out),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert player.stdout is not None
        if player.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{setup} x{n}: the player found no node")
        import psutil

        pproc = psutil.Process(player.pid)
        t_start = time.time_ns()
        time.sleep(args.warmup)
        window0, p_cpu0 = time.time_ns(), sum(pproc.cpu_times()[:2])
        usage.begin()
        time.sleep(args.seconds)
        window1 = time.time_ns()
        used = usage.end()
        try:
            p_cpu = 100 * (sum(pproc.cpu_times()[:2]) - p_cpu0) / args.seconds
        except psutil.Error:
            p_cpu = None
        player.wait(timeout=60)
        time.sleep(1.5)  # the last frames' features
        for p in nodes:
            p.stop()
        played = json.loads(out.read_text())
    finally:
        for p in nodes:
            p.stop()
        if player is not None and player.poll() is None:
            player.kill()
        t.close()
    stats = [json.loads((trial / f"stats{k}.json").read_text()) for k in range(len(nodes))]
    if setup == "multi":
        per_cam = [stats[0]["cameras"][image] for image, _ in cams]
    else:  # node k serves camera k alone
        per_cam = [next(iter(s["cameras"].values())) for s in stats]
    rows = []
    span = (window1 - window0) / 1e9
    for k, (image, _) in enumerate(cams):
        c = per_cam[k]
        got = [(r, s) for r, s in feats.got[k] if s >= t_start]
        window = [(r, s) for r, s in got if window0 <= s < window1]
        lat = percentiles([(r - s) / 1e6 for r, s in window], (50, 99))
        sent = played["sent"][k]
        rows.append(
            {
                "camera": image,
                "sent": sent,
                "received": c["received"],
                "encoded": c["encoded"],
                "dropped": c["dropped"],
                "lost": sent - c["received"],
                "rejected": c["rejected"],
                "failed": c["failed"],
                "fps": round(len(window) / span, 2),
                "p50_ms": round(lat["p50"], 1),
                "p99_ms": round(lat["p99"], 1),
                "stages_p50_ms": {s: round(v["p50"], 2) for s, v in c["stages_ms"].items() if v["n"]},
            }
        )
    total = sum(r["fps"] for r in rows)
    mean = total / n
    return {
        "setup": setup,
        "cameras": n,
        "nodes": len(nodes),
        "total_fps": round(total, 2),
        "min_share_of_mean": round(min(r["fps"] for r in rows) / mean, 3) if mean else 0.0,
        "input_fps_per_camera": round(sum(played["sent"]) / n / played["seconds"], 2),
        "player_cpu_percent": round(p_cpu, 1) if p_cpu is not None else None,
        "backend": stats[0].get("backend"),
        "max_batch": stats[0].get("max_batch"),
        **used,
        "per_camera": rows,
    }


def run_cameras(args, work: Path) -> dict:
    """Every N of `args.cameras`, multi then single, one after the other in this run."""
    if args.quick:  # repeat runs: shorter windows, same table
        args.seconds, args.warmup = min(args.seconds, 4.0), min(args.warmup, 1.5)
    compressed = args.camera_transport == "compressed"
    bag = work / f"cameras_frames_{args.camera_transport}"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=PLAYER_FRAMES, fps=FPS, compressed="jpeg" if compressed else "")
    trials = []
    for n in args.cameras:
        for setup in ("multi", "single"):
            trials.append(run_setup(setup, n, args, bag, work / "cameras"))
            print(_line(trials[-1]), flush=True)
    return {
        "trials": trials,
        "goals": goals(trials),
        "where_time_goes": where_time_goes(trials),
        "camera_transport": args.camera_transport,
        "seconds": args.seconds,
        "warmup": args.warmup,
    }


def _line(t: dict) -> str:
    fps = [r["fps"] for r in t["per_camera"]]
    return (
        f"{t['setup']:6s} N={t['cameras']}: {t['total_fps']:.1f} frames/s total, per camera {min(fps):.1f}-"
        f"{max(fps):.1f} (min {t['min_share_of_mean']:.0%} of mean), RSS {t['rss_mb']:.0f} MB, "
        f"CPU {t['cpu_percent']:.0f} %"
    )


def _trial(trials: list[dict], setup: str, n: int) -> dict | None:
    return next((t for t in trials if t["setup"] == setup and t["cameras"] == n), None)


def goals(trials: list[dict]) -> list[dict]:
    multi, single, one = _trial(trials, "multi", GOAL_N), _trial(trials, "single", GOAL_N), _trial(trials, "single", 1)
    out = []
    if multi and single:
        r = round(multi["total_fps"] / max(single["total_fps"], 1e-9), 2)
        out.append(
            {
                "goal": f"N={GOAL_N}: one multi-camera node >= {GOALS['fps_ratio']}x the frames/s of "
                f"{GOAL_N} single-camera nodes",
                "measured": f"{r}x ({multi['total_fps']} vs {single['total_fps']} frames/s)",
                "met": r >= GOALS["fps_ratio"],
            }
        )
    if multi and one:
        r = round(multi["rss_mb"] / max(one["rss_mb"], 1e-9), 2)
        out.append(
            {
                "goal": f"N={GOAL_N}: multi-camera node RSS <= {GOALS['rss_ratio']}x one single-camera node",
                "measured": f"{r}x ({multi['rss_mb']} vs {one['rss_mb']} MB)",
                "met": r <= GOALS["rss_ratio"],
            }
        )
    if multi:
        s = multi["min_share_of_mean"]
        out.append(
            {
                "goal": f"N={GOAL_N}: no camera below {GOALS['min_share']:.0%} of the mean per-camera rate",
                "measured": f"slowest camera {s:.0%} of the mean",
                "met": s >= GOALS["min_share"],
            }
        )
    return out


def where_time_goes(trials: list[dict]) -> dict:
    """Stage P50s (ms) per setup at GOAL_N, averaged over its cameras."""
    out = {}
    for setup in ("multi", "single"):
        t = _trial(trials, setup, GOAL_N)
        if not t:
            continue
        stages: dict[str, list[float]] = {}
        for r in t["per_camera"]:
            for s, v in r["stages_p50_ms"].items():
                stages.setdefault(s, []).append(v)
        out[setup] = {s: round(sum(v) / len(v), 2) for s, v in stages.items()}
    return out


def markdown(res: dict) -> list[str]:
    lines = [
        "",
        f"Cameras ({res['camera_transport']} 1080p at {FPS:.0f} fps each, {res['seconds']} s measured after "
        f"{res['warmup']} s warm-up):",
        "",
        "| N | setup | nodes | frames/s total | per camera frames/s | min/mean | P50 / P99 ms per camera "
        "| drops per camera (dropped+lost) | RSS MB | CPU % | player CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in res["trials"]:
        rows = t["per_camera"]
        fps = " ".join("{:.1f}".format(r["fps"]) for r in rows)
        lat = " ".join("{:.0f}/{:.0f}".format(r["p50_ms"], r["p99_ms"]) for r in rows)
        drops = " ".join(str(r["dropped"] + r["lost"]) for r in rows)
        lines.append(
            f"| {t['cameras']} | {t['setup']} | {t['nodes']} | {t['total_fps']:.1f} | {fps} "
            f"| {t['min_share_of_mean']:.2f} | {lat} | {drops} | {t['rss_mb']:.0f} | {t['cpu_percent']:.0f} "
            f"| {t['player_cpu_percent']} |"
        )
    for setup, st in res["where_time_goes"].items():
        lines.append(
            f"\nWhere the time goes, {setup} at N={GOAL_N} (stage P50 ms, mean over cameras): "
            + ", ".join(f"{k} {v}" for k, v in st.items())
        )
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["play"]:
        bag, n, fps, seconds, transport, out = argv[1:7]
        return play(Path(bag), int(n), float(fps), float(seconds), transport == "compressed", Path(out))
    print("usage: python -m openclaw_vision.bench.cameras play BAG N FPS SECONDS raw|compressed OUT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
