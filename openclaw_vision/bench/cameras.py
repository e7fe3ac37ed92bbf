"""`cameras` mode: N cameras at 30 fps 1080p into one multi-camera node, and into N single-camera
nodes, side by side in one run (N = 1, 2, 4, 8).

    player process ──(N camera topics, one paced loop)──DDS──► node(s) ──DDS──► this process
    (every camera ticks at 30 fps: core/pacing.py; missed ticks are skipped)  (features per camera)

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
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import children
from ..core.pacing import pace
from ..runtime import bags
from .goals import CAMERAS_GOAL_N, GOALS, row
from .node import BenchError

log = logging.getLogger(__name__)

#: the camera counts measured by default (`bench --cameras`)
CAMERA_COUNTS = (1, 2, 4, 8)
FPS = 30.0
#: the camera rates the one-node-vs-N-nodes comparison runs at (issue 38: the goal holds at both)
COMPARE_FPS = (15.0, 30.0)
PLAYER_FRAMES = 8  # distinct frames per camera in the player's memory (1080p rgb8: 6 MB each)


def topics(n: int, compressed: bool) -> list[tuple[str, str]]:
    """(image topic, features topic) of camera k: /cam<k>/image_raw[/compressed] → /cam<k>/visual_features
    (the multi-camera node's rule, given to the single-camera nodes as their --features-topic)."""
    from ..ros.intake import camera_features_topic
    from ..runtime.config import EncoderConfig

    images = [f"/cam{k}/image_raw{bags.COMPRESSED_SUFFIX if compressed else ''}" for k in range(n)]
    return [(image, camera_features_topic(image, EncoderConfig.features_pattern)) for image in images]


# --- the player (its own process) -----------------------------------------------------------------


def play(bag: Path, n: int, fps: float, seconds: float, compressed: bool, out: Path, only: int | None = None) -> int:
    """Publish `n` cameras at `fps` for `seconds` (after every node's subscription is matched); `only`: camera
    `only` of the n alone (one process per camera, as a robot's drivers run), its counts as camera 0's."""
    from ..ros import cdr
    from ..ros.cyclone import CycloneTransport
    from ..ros.types import COMPRESSED_IMAGE, IMAGE, QoS

    source = bags.camera_source(bag)
    messages = bags.read_messages(bag, source.msgtype, source.topic)
    frames = [m.raw for m, _ in zip(messages, range(PLAYER_FRAMES), strict=False)]
    t = CycloneTransport("camera_player")
    offset = 0.0 if only is None else only / (n * fps)  # this camera's share of one period (below)
    mine = topics(n, compressed) if only is None else topics(n, compressed)[only : only + 1]
    pubs = [t.publisher(topic, COMPRESSED_IMAGE if compressed else IMAGE, QoS("best_effort", 1)) for topic, _ in mine]
    n = len(pubs)
    deadline = time.monotonic() + 120
    while not all(p.matched() for p in pubs):
        if time.monotonic() > deadline:
            print("no node", flush=True)
            return 1
        time.sleep(0.05)
    print("ready", flush=True)
    # every player of a trial starts at the moment the bench gives (`go`), so the measured window holds
    # every camera's whole play; a camera of its own process starts its grid at its share of one period,
    # as free-running drivers' frames arrive spread over it
    wait_for_go(out, offset)
    sent, stamps = [0] * n, [[] for _ in range(n)]

    def send(tick: int) -> None:  # every camera's frame of this tick
        for k, pub in enumerate(pubs):
            ns = time.time_ns()
            pub.publish(cdr.restamp(frames[(tick + k) % len(frames)], ns // 1_000_000_000, ns % 1_000_000_000))
            sent[k] += 1
            stamps[k].append(ns)

    paced = pace(fps, send, seconds=seconds)
    # every frame's stamp: what was sent inside a measuring window is counted, not estimated from a rate;
    # late and skipped ticks say where a starved player fell behind its rate
    out.write_text(json.dumps({"sent": sent, "seconds": paced.elapsed, "stamps_ns": stamps, "late": paced.late,
                               "skipped": paced.skipped}))  # fmt: skip
    time.sleep(0.3)
    t.close()
    return 0


def _go_file(out: Path) -> Path:
    return out.with_suffix(".go")


def wait_for_go(out: Path, offset: float = 0.0, timeout: float = 120.0) -> None:
    """Sleep until the start the bench wrote for this player (`go`: a time on the monotonic clock, which
    every process of the host shares), plus `offset` seconds."""
    go, deadline = _go_file(out), time.monotonic() + timeout
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"player: no start time in {go} after {timeout:g} s")
        time.sleep(0.002)
    at = int(go.read_text()) / 1e9 + offset
    time.sleep(max(0.0, at - time.monotonic()))


def go(outs: list[Path], delay: float = 0.05) -> int:
    """Start the ready players of `outs` together, `delay` seconds from now; the start as wall-clock ns
    (the frames' stamps are on that clock). Written to a temporary name and renamed: a player never
    reads half a number."""
    now_wall, now_mono = time.time_ns(), time.monotonic_ns()
    for out in outs:
        tmp = _go_file(out).with_suffix(".go.tmp")
        tmp.write_text(str(now_mono + int(delay * 1e9)))
        tmp.replace(_go_file(out))
    return now_wall + int(delay * 1e9)


def start_player(bag: Path, n: int, fps: float, seconds: float, compressed: bool, out: Path,
                 what: str, only: int | None = None, start: bool = True) -> children.Child:  # fmt: skip
    """`play` in a process of its own, returned once it is publishing to matched subscribers (its
    `ready` line) and, with `start`, playing; without, it waits for `go`, which starts several players
    at one moment. Its counts and stamps go to `out`, its log beside it."""
    _go_file(out).unlink(missing_ok=True)  # a start left by an earlier trial in the same folder
    argv = children.python("-m", "openclaw_vision.bench.cameras", "play", str(bag), str(n), str(fps), str(seconds),
                           "compressed" if compressed else "raw", str(out),
                           *([] if only is None else [str(only)]))  # fmt: skip
    player = children.Child(argv, log_path=out.with_suffix(".log"))
    if player.wait_for_line("ready", 150.0) != "ready":  # the player itself gives up after 120 s
        player.stop()
        raise BenchError(f"{what}: the player found no receiver ({player.how}): {player.log_text()[-1500:]}")
    if start:
        go([out], delay=0.0)
    return player


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
    """CPU seconds and RSS of a set of processes over a window (psutil), sampled on a thread until `stop`."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.procs = [psutil.Process(p) for p in pids]
        self.rss_peak = [0] * len(pids)
        self._cpu_last = [0.0] * len(pids)
        self._stop = threading.Event()
        self._cpu0 = self._t0 = 0.0
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _cpu(self) -> float:
        import psutil

        for i, p in enumerate(self.procs):
            try:
                c = p.cpu_times()
                self._cpu_last[i] = c.user + c.system
            except psutil.NoSuchProcess:  # its last reading stands: what it used before it ended
                log.warning("node process %d ended during the measurement", p.pid)
        return sum(self._cpu_last)

    def _sample(self) -> None:
        import psutil

        while not self._stop.wait(0.2):
            for i, p in enumerate(self.procs):
                try:
                    self.rss_peak[i] = max(self.rss_peak[i], p.memory_info().rss)
                except psutil.NoSuchProcess:  # its peak so far stands (_cpu says that it ended)
                    continue

    def begin(self) -> None:
        self._cpu0, self._t0 = self._cpu(), time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def end(self) -> dict:
        cpu = self._cpu() - self._cpu0
        wall = time.monotonic() - self._t0
        self.stop()
        return {
            "cpu_percent": round(100 * cpu / max(wall, 1e-9), 1),
            "rss_mb": round(sum(self.rss_peak) / 2**20, 1),
            "rss_mb_per_process": [round(r / 2**20, 1) for r in self.rss_peak],
        }


def node_args(args, stats: Path) -> list[str]:
    """A bench node's flags: the bench's model, backend and performance hint, the nodes' defaults otherwise."""
    return ["--model", args.model, "--model-path", str(args.int8_model_path), "--backend", args.backend,
            "--performance-hint", args.performance_hint, "--transport", "cyclonedds", "--diagnostics-period", "1.0",
            "--stats-json", str(stats)]  # fmt: skip


def _launches(setup: str, cams: list[tuple[str, str]], args, trial: Path,
              node_flags: tuple[str, ...] = ()) -> list[list[str]]:  # fmt: skip
    """Each node's command line: one multi-camera node, or one node per camera (`--image-topic` of its own);
    `node_flags` (bench/schedule.py's thread counts) go to every node."""
    if setup == "multi":
        base = [*node_args(args, trial / "stats0.json"), *node_flags]
        return [[*base, "--image-topics", *(t for t, _ in cams)]]
    launches = []
    for k, (image, feats) in enumerate(cams):
        one = [*node_args(args, trial / f"stats{k}.json"), *node_flags]
        if image.endswith("/compressed"):
            one += ["--image-transport", "compressed"]
        launches.append([*one, "--image-topic", image.removesuffix("/compressed"), "--features-topic", feats])
    return launches


@dataclass
class _Window:
    """What one trial measured while the player played: the window (stamp ns), CPU and RSS, the player's counts."""

    t_start: int
    window0: int
    window1: int
    used: dict
    player_cpu: float | None
    played: dict


def _play(what: str, n: int, args, bag: Path, trial: Path, nodes: list, usage: _Usage,
          stack: contextlib.ExitStack, publishers: str = "one", fps: float = FPS) -> _Window:  # fmt: skip
    """Start the player(s) once every node publishes (`publishers`: one process for every camera, or
    `per-camera`: a process each, as a robot's drivers), measure the window, then stop the nodes."""
    import psutil

    compressed = args.camera_transport == "compressed"
    outs = [trial / "player.json"] if publishers == "one" else [trial / f"player{k}.json" for k in range(n)]
    players = [stack.enter_context(start_player(bag, n, fps, args.warmup + args.seconds, compressed, out, what,
                                                None if publishers == "one" else k, start=False))
               for k, out in enumerate(outs)]  # fmt: skip
    pprocs = [psutil.Process(p.pid) for p in players]
    # together: a process starts in about a second here, and players started one after the other ended one
    # after the other, so the first camera's play ended up to 3 s before the window did (its rate there
    # read 60 % of the last camera's, in a node that had encoded as many of its frames)
    t_start = go(outs)
    time.sleep(max(0.0, (t_start - time.time_ns()) / 1e9) + args.warmup)
    window0, p_cpu0 = time.time_ns(), sum(sum(p.cpu_times()[:2]) for p in pprocs)
    usage.begin()
    time.sleep(args.seconds)
    window1 = time.time_ns()
    used = usage.end()
    try:
        p_cpu = 100 * (sum(sum(p.cpu_times()[:2]) for p in pprocs) - p_cpu0) / args.seconds
    except psutil.NoSuchProcess:
        p_cpu = None  # a player ended before the window did: no reading (the table shows None)
    for player in players:
        if player.wait(timeout=60) is None:
            raise RuntimeError(f"{what}: the player did not finish within 60 s of its window")
    time.sleep(1.5)  # the last frames' features
    for p in nodes:
        p.stop()  # each writes its --stats-json on the way out
    runs = [json.loads(out.read_text()) for out in outs]  # one per camera, or one for all: merged alike
    played = {"sent": [c for r in runs for c in r["sent"]], "seconds": max(r["seconds"] for r in runs),
              "stamps_ns": [c for r in runs for c in r["stamps_ns"]]}  # fmt: skip
    return _Window(t_start, window0, window1, used, p_cpu, played)


def run_setup(setup: str, n: int, args, bag: Path, work: Path, publishers: str = "one", fps: float = FPS,
              node_flags: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """One trial: the nodes of `setup` (multi: one node, single: n nodes, each with `node_flags`), the player(s)
    at `fps` per camera, the counts.

    Everything started here (this process's transport, the nodes, the player, the sampling thread)
    is stopped on the way out whatever fails, nodes and player before the transport."""
    from ..ros.cyclone import CycloneTransport
    from ..ros.process import NodeProcess
    from ..ros.types import VISUAL_FEATURES, QoS

    cams = topics(n, args.camera_transport == "compressed")
    trial = work / f"{setup}{n}" if publishers == "one" else work / f"{setup}{n}-{publishers}"
    if fps != FPS:
        trial = trial.with_name(f"{trial.name}-{fps:g}fps")
    trial.mkdir(parents=True, exist_ok=True)
    feats = _Features(n)
    with contextlib.ExitStack() as stack:
        t = CycloneTransport("camera_bench")
        stack.callback(t.close)
        subs = [t.subscribe(f, VISUAL_FEATURES, QoS("reliable", 100), feats.callback(k))
                for k, (_, f) in enumerate(cams)]  # fmt: skip
        nodes = []
        for i, argv in enumerate(_launches(setup, cams, args, trial, node_flags)):
            nodes.append(NodeProcess(argv, log_path=trial / f"node{i}.log"))
            stack.callback(nodes[-1].stop)
        usage = _Usage([p.proc.pid for p in nodes])  # from the start: the peak RSS includes loading the model
        stack.callback(usage.stop)
        deadline = time.monotonic() + 180
        while not all(s.matched() for s in subs):  # every node has its model loaded and publishes
            if time.monotonic() > deadline or not all(p.alive() for p in nodes):
                raise RuntimeError(f"{setup} x{n}: nodes did not start: " + nodes[0].log_text()[-1500:])
            time.sleep(0.1)
        window = _play(f"{setup} x{n}", n, args, bag, trial, nodes, usage, stack, publishers, fps)
    stats = [json.loads((trial / f"stats{k}.json").read_text()) for k in range(len(nodes))]
    if setup == "multi":
        per_cam = [stats[0]["cameras"][image] for image, _ in cams]
    else:  # node k serves camera k alone
        per_cam = [next(iter(s["cameras"].values())) for s in stats]
    rows = [_camera_row(image, per_cam[k], feats.got[k], window, window.played["sent"][k])
            for k, (image, _) in enumerate(cams)]  # fmt: skip
    total = sum(r["fps"] for r in rows)
    mean = total / n
    played = window.played
    return {
        "setup": setup,
        "cameras": n,
        "publishers": publishers,
        "offered_fps_per_camera": fps,
        "nodes": len(nodes),
        "total_fps": round(total, 2),
        "min_share_of_mean": round(min(r["fps"] for r in rows) / mean, 3) if mean else 0.0,
        "input_fps_per_camera": round(sum(played["sent"]) / n / played["seconds"], 2),
        # what reached the node(s): the offered pace less what the sender or the sockets lost (issue 38: four
        # busy processes starved the sender, and four nodes then looked cheap); every ratio is shown beside it
        "delivered_fps_per_camera": round(sum(r["received"] for r in rows) / n / played["seconds"], 2),
        "player_cpu_percent": round(window.player_cpu, 1) if window.player_cpu is not None else None,
        "backend": stats[0].get("backend"),
        "max_batch": stats[0].get("max_batch"),
        **window.used,
        "per_camera": rows,
    }


def _camera_row(image: str, c: dict, got: list[tuple[int, int]], window: _Window, sent: int) -> dict:
    """One camera's line of the trial: the node's counts for it and the features received in the window."""
    from ..runtime.stats import percentiles

    span = (window.window1 - window.window0) / 1e9
    inside = [(r, s) for r, s in got if s >= window.t_start and window.window0 <= s < window.window1]
    lat = percentiles([(r - s) / 1e6 for r, s in inside], (50, 99))
    return {
        "camera": image,
        "sent": sent,
        "received": c["received"],
        "encoded": c["encoded"],
        "dropped": c["dropped"],
        "lost": sent - c["received"],
        "rejected": c["rejected"],
        "failed": c["failed"],
        "fps": round(len(inside) / span, 2),
        "p50_ms": round(lat["p50"], 1),
        "p99_ms": round(lat["p99"], 1),
        "stages_p50_ms": {s: round(v["p50"], 2) for s, v in c["stages_ms"].items() if v["n"]},
    }


def socket_buffers() -> dict:
    """The kernel's cap on socket receive buffers, raised to the robot config's where this process may, as on a
    robot (dds_config.raise_rmem_max): at Linux's default (~4 MB here) one node receiving four cameras' frames
    on its one socket lost 10-20 % of them, uncounted, while four one-camera nodes lost none, and the
    comparison measured the kernel setting. Every camera bench records it and prints it."""
    from ..ros import dds_config

    return dds_config.raise_rmem_max(dds_config.robot_receive_buffer())


def socket_line(got: dict) -> str:
    """One line for a bench's markdown: the cap its figures were measured under."""
    how = ("raised from {} B, as config/cyclonedds-robot.xml asks".format(got["rmem_max_before"]) if got["raised"]
           else f"NOT raised: {got['why_not']}" if got["why_not"] else "as found")  # fmt: skip
    return f"Socket receive buffers capped at net.core.rmem_max = {got['rmem_max']} B ({how})."


def run_cameras(args, work: Path) -> dict:
    """Every N of `args.cameras`, multi then single, one after the other in this run."""
    if args.quick:  # repeat runs: shorter windows, same table
        args.seconds, args.warmup = min(args.seconds, 4.0), min(args.warmup, 1.5)
    buffers = socket_buffers()
    from ..runtime.config import IMAGE_TRANSPORTS

    args.camera_transport = args.camera_transport or IMAGE_TRANSPORTS[0]
    compressed = args.camera_transport == "compressed"
    bag = work / f"cameras_frames_{args.camera_transport}"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=PLAYER_FRAMES, fps=FPS, compressed="jpeg" if compressed else "")
    trials = []
    for n in args.cameras:
        if n == CAMERAS_GOAL_N and not args.quick:  # the goal's comparisons (issue 38): both rates, both publishers
            for fps in COMPARE_FPS:
                for publishers in ("one", "per-camera"):
                    trials += compare(n, args, bag, work / "cameras", publishers, fps)
            continue
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
        "socket_buffers": buffers,
    }


def compare(n: int, args, bag: Path, work: Path, publishers: str, fps: float) -> list[dict]:
    """One multi-camera node against n one-camera nodes, fed alike (`publishers`, `fps` per camera offered).
    Where their nodes were not delivered the same rate (a sender starved by n busy processes: issue 38), the
    pair runs again with the senders paced at 95 % of the lower delivered rate, so that both receive it;
    those trials are marked `paced`. Returns every trial run, in order."""
    pair = [run_setup(setup, n, args, bag, work, publishers, fps) for setup in ("multi", "single")]
    for t in pair:
        print(_line(t), flush=True)
    if equal_input(*pair):
        return pair
    paced = round(0.95 * min(t["delivered_fps_per_camera"] for t in pair), 1)
    again = [run_setup(setup, n, args, bag, work / "paced", publishers, paced) for setup in ("multi", "single")]
    for t in again:
        t["paced"], t["paced_from"] = True, fps
        print(_line(t), flush=True)
    return pair + again


def _line(t: dict) -> str:
    fps = [r["fps"] for r in t["per_camera"]]
    return (
        f"{t['setup']:6s} N={t['cameras']} (publishers: {t['publishers']},"
        f" {t['delivered_fps_per_camera']:.1f} of {t['input_fps_per_camera']:.1f} frames/s per camera delivered): "
        f"{t['total_fps']:.1f} frames/s total, per camera {min(fps):.1f}-"
        f"{max(fps):.1f} (min {t['min_share_of_mean']:.0%} of mean), RSS {t['rss_mb']:.0f} MB, "
        f"CPU {t['cpu_percent']:.0f} %"
    )


def _trial(trials: list[dict], setup: str, n: int, publishers: str = "one") -> dict | None:
    return next((t for t in trials if t["setup"] == setup and t["cameras"] == n
                 and t.get("publishers", "one") == publishers), None)  # fmt: skip


#: delivered input of two setups within this fraction of each other: a like-for-like comparison
EQUAL_INPUT = 0.05


def equal_input(a: dict, b: dict) -> bool:
    """Whether two trials' nodes received the same frames per second per camera (within EQUAL_INPUT): the
    setups are compared at the same offered pace, and a ratio is judged only where delivery was equal too."""
    da, db = a.get("delivered_fps_per_camera", 0.0), b.get("delivered_fps_per_camera", 0.0)
    return abs(da - db) <= EQUAL_INPUT * max(da, db, 1e-9)


def comparisons(trials: list[dict], n: int) -> list[tuple[str, dict, dict]]:
    """(publishers, multi, single) per (publishers, offered rate) at `n` cameras: the pair whose nodes were
    delivered the same rate where there is one (the paced rerun), else the last pair run. A trial without
    `offered_fps_per_camera` (an older report) is taken as FPS."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for t in trials:
        if t["cameras"] == n:
            base = t.get("paced_from", t.get("offered_fps_per_camera", FPS))  # a paced rerun: its pair's rate
            groups.setdefault((t.get("publishers", "one"), base), []).append(t)
    out = []
    for (publishers, _), ts in groups.items():
        pairs = [(m, s) for m in ts if m["setup"] == "multi" for s in ts
                 if s["setup"] == "single" and bool(s.get("paced")) == bool(m.get("paced"))]  # fmt: skip
        if pairs:
            m, s = next((p for p in pairs if equal_input(*p)), pairs[-1])
            out.append((publishers, m, s))
    return out


def goals(trials: list[dict]) -> list[dict]:
    n = CAMERAS_GOAL_N
    one = _trial(trials, "single", 1)
    single = _trial(trials, "single", n)
    out = []
    for publishers, m, s in comparisons(trials, n):
        r, target = round(m["total_fps"] / max(s["total_fps"], 1e-9), 2), GOALS["cameras_fps_ratio"]
        same = equal_input(m, s)
        who = "one publisher process" if publishers == "one" else f"{n} publisher processes"
        offered = m.get("offered_fps_per_camera", FPS)
        how = f"{offered:g} fps offered" + (f" (paced down from {m['paced_from']:g})" if m.get("paced") else "")
        out.append(row(f"N={n}, {who}, {how}: one multi-camera node >= {target}x the frames/s of {n} single-camera "
                       f"nodes at equal delivered input (same offered pace; delivered within {EQUAL_INPUT:.0%})",
                       f"{r}x ({m['total_fps']} vs {s['total_fps']} frames/s; delivered "
                       f"{m['delivered_fps_per_camera']} vs {s['delivered_fps_per_camera']} of "
                       f"{m['input_fps_per_camera']} / {s['input_fps_per_camera']} frames/s per camera"
                       + ("" if same else ": delivered input unequal, not judged") + ")",
                       r >= target and same))  # fmt: skip
    # one single-camera node: the N=1 trial, else the mean of the N single-camera nodes of this N
    one_rss = one["rss_mb"] if one else (sum(single["rss_mb_per_process"]) / n if single else None)
    # RSS and fairness: judged on every multi-camera trial of this N (each rate and publisher setup), the worst
    multis = [t for t in trials if t["setup"] == "multi" and t["cameras"] == n]
    if multis and one_rss:
        big = max(multis, key=lambda t: t["rss_mb"])
        r, target = round(big["rss_mb"] / one_rss, 2), GOALS["cameras_rss_ratio"]
        out.append(row(f"N={n}: multi-camera node RSS <= {target}x one single-camera node",
                       f"{r}x ({big['rss_mb']} vs {one_rss:.1f} MB; the largest of {len(multis)} trial(s))",
                       r <= target))  # fmt: skip
    if multis:
        worst = min(multis, key=lambda t: t["min_share_of_mean"])
        s, target = worst["min_share_of_mean"], GOALS["cameras_min_share"]
        where = f"{worst.get('offered_fps_per_camera', FPS):g} fps, publishers {worst.get('publishers', 'one')}"
        out.append(row(f"N={n}: no camera below {target:.0%} of the mean per-camera rate",
                       f"slowest camera {s:.0%} of the mean (the worst of {len(multis)} trial(s): {where})",
                       s >= target))  # fmt: skip
    return out


def where_time_goes(trials: list[dict]) -> dict:
    """Stage P50s (ms) per setup at CAMERAS_GOAL_N, averaged over its cameras."""
    out = {}
    for setup in ("multi", "single"):
        t = _trial(trials, setup, CAMERAS_GOAL_N)
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
        f"Cameras ({res['camera_transport']} 1080p, each at the rate of its row, {res['seconds']} s measured after "
        f"{res['warmup']} s warm-up). " + (socket_line(res["socket_buffers"]) if "socket_buffers" in res else ""),
        "",
        "| N | setup | nodes | publisher processes | delivered / offered frames/s per camera | frames/s total "
        "| per camera frames/s | min/mean | P50 / P99 ms per camera "
        "| drops per camera (dropped+lost) | RSS MB | CPU % | player CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in res["trials"]:
        rows = t["per_camera"]
        fps = " ".join("{:.1f}".format(r["fps"]) for r in rows)
        lat = " ".join("{:.0f}/{:.0f}".format(r["p50_ms"], r["p99_ms"]) for r in rows)
        drops = " ".join(str(r["dropped"] + r["lost"]) for r in rows)
        lines.append(
            f"| {t['cameras']} | {t['setup']} | {t['nodes']} | {t.get('publishers', 'one')} "
            f"| {t.get('delivered_fps_per_camera', '-')} / {t['input_fps_per_camera']}"
            f"{' (paced)' if t.get('paced') else ''} | {t['total_fps']:.1f} | {fps} "
            f"| {t['min_share_of_mean']:.2f} | {lat} | {drops} | {t['rss_mb']:.0f} | {t['cpu_percent']:.0f} "
            f"| {t['player_cpu_percent']} |"
        )
    for setup, st in res["where_time_goes"].items():
        lines.append(
            f"\nWhere the time goes, {setup} at N={CAMERAS_GOAL_N} (stage P50 ms, mean over cameras): "
            + ", ".join(f"{k} {v}" for k, v in st.items())
        )
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["play"]:
        bag, n, fps, seconds, transport, out = argv[1:7]
        only = int(argv[7]) if len(argv) > 7 else None
        return play(Path(bag), int(n), float(fps), float(seconds), transport == "compressed", Path(out), only)
    print("usage: python -m openclaw_vision.bench.cameras play BAG N FPS SECONDS raw|compressed OUT [CAMERA]",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
