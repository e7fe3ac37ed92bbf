"""`capacity` mode: the encoder node at this machine's limit, and where every core-millisecond goes.

    player process ──(N camera topics)──DDS──► node process ──features──► this process (counts, stamps)
    player process ──(N camera topics)──DDS──► echo process ──a header back per frame──► this process
                                                (ros/echo.py)

For 1 and 4 cameras, raw rgb8 1080p and JPEG, with the sender in a process of its own:

- **capacity**: the highest offered rate per camera at which fewer than 5 % of the frames sent
  inside the measured window fail to come back as features (ros2_benchmark's method: a search over
  short trials, not capped at the camera rate). Each trial says the rate offered and the rate the
  player achieved; where the player falls short, the capacity is the sender's (`sender_limited`).
- **compute-bound rate**: the node's own backend, precision, threads and batch (min(N, max_batch))
  run in this process on frames in memory while nothing else runs: what the CPU allows the
  encoding alone.
- **transport ceiling**: the same search into a bare subscriber (ros/echo.py: the node's transport and
  QoS, every frame deserialised and validated as the node does, its header sent back, no encode).
- **per-thread CPU** of the node (and of the echo and the player) in each trial, from
  /proc/<pid>/task (runtime/threads.py): per frame that came back, by thread role (Cyclone's own threads,
  our transport thread, the worker, the runtime's pool, diagnostics, main), and the worker's stage
  times per frame beside it.
- **INT8 encode per frame vs the INT8 GEMM peak** at batch 1, 4 and 8, on the node's backend, the
  runtime's INT8 GEMM timed in the same interleaved rounds (a peak timed alone once met another
  job's load), and ONNX Runtime's float32 GEMM beside it: the INT8 peak's lead over float says what
  INT8 hardware this CPU has (1.12x on the AVX2-only EPYC: docs/cameras-and-capacity.md), and the batch-1
  fraction how much a batch can still win on the encode (what one node for many cameras can gain over one
  node per camera).
- **four cameras at 30 fps**: one multi-camera node against four single-camera nodes (bench/cameras.py
  setups), raw and JPEG, fed by one publisher process and by one per camera, each ratio beside the rates
  the nodes were delivered; where those differ, the pair again with the senders paced to the lower one
  (bench/cameras.py `compare`), and only a pair delivered alike is judged.
- **what a dropped frame costs** (bench/dropcost.py): per transport, the transport's floor beside our
  share (take, decode, validate, count), the path before newest-only beside it.

The goals (bench/goals.py) are judged from ratios of this one run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import children
from ..runtime import bags, threads
from ..runtime.config import IMAGE_TRANSPORTS
from ..runtime.stats import percentiles
from .cameras import (
    FPS,
    PLAYER_FRAMES,
    _Features,
    compare,
    socket_buffers,
    socket_line,
    start_player,
    topics,
    where_time_goes,
)
from .cameras import node_args as camera_node_args
from .goals import GOALS, row, within
from .harness import Variant, run_interleaved
from .node import MAX_DROP, BenchError, compute_bound
from .roles import thread_role

log = logging.getLogger(__name__)

#: what the capacity goals are judged on, and the batch sizes of the encode-vs-peak table
CAPACITY_CAMERAS = (1, 4)
ENCODE_BATCHES = (1, 4, 8)


# --- one receiver (node or echo) fed by the player at several rates ------------------------------------


@dataclass
class Trial:
    """One player run into one receiver: what was offered, sent and came back inside the window."""

    cameras: int
    offered_fps: float  # per camera
    send_fps: float  # per camera, what the player achieved
    sent: int  # frames stamped inside the window, all cameras
    back: int  # of those, how many came back (features or echoes)
    latency_ms: dict
    cpu_ms_per_frame: dict  # thread role → core-ms per frame that came back
    player_cpu_ms_per_frame: float

    @property
    def drop_fraction(self) -> float:
        return 1 - self.back / self.sent if self.sent else 1.0

    @property
    def sender_limited(self) -> bool:
        return self.send_fps < 0.95 * self.offered_fps

    def record(self) -> dict:
        return {
            "offered_fps": round(self.offered_fps, 2),
            "send_fps": round(self.send_fps, 2),
            "sent": self.sent,
            "back": self.back,
            "drop_fraction": round(self.drop_fraction, 4),
            "sender_limited": self.sender_limited,
            "latency_ms": self.latency_ms,
            "cpu_ms_per_frame": self.cpu_ms_per_frame,
            "player_cpu_ms_per_frame": self.player_cpu_ms_per_frame,
        }


class Receiver:
    """A node or an echo process with this process's feature subscriptions, fed by player runs."""

    def __init__(self, child: children.Child, n: int, compressed: bool, work: Path,
                 stack: contextlib.ExitStack) -> None:  # fmt: skip
        from ..ros.cyclone import CycloneTransport
        from ..ros.types import VISUAL_FEATURES, QoS

        self.n, self.compressed, self.work = n, compressed, work
        self.transport = CycloneTransport("capacity_bench")
        stack.callback(self.transport.close)
        self.feats = _Features(n)
        subs = [self.transport.subscribe(f, VISUAL_FEATURES, QoS("reliable", 100), self.feats.callback(k))
                for k, (_, f) in enumerate(topics(n, compressed))]  # fmt: skip
        self.child = stack.enter_context(child)
        deadline = time.monotonic() + 180
        while not all(s.matched() for s in subs):
            if time.monotonic() > deadline or self.child.proc.poll() is not None:
                raise BenchError(f"the receiver did not start ({self.child.how}): {self.child.log_text()[-1500:]}")
            time.sleep(0.1)
        self.trials: list[Trial] = []
        self._cpu: list[tuple[dict, dict]] = []  # per trial: thread CPU at the window's start and end

    def trial(self, fps: float, seconds: float, warmup: float, bag: Path) -> Trial:
        """Play `fps` per camera for warmup + seconds; count what came back of the frames stamped in the window."""
        out = self.work / f"player-{len(self.trials)}.json"
        with start_player(bag, self.n, fps, warmup + seconds, self.compressed, out, self.work.name) as player:
            time.sleep(warmup)
            window0, cpu0, p0 = time.time_ns(), threads.cpu_by_thread(self.child.pid), _cpu_s(player.pid)
            time.sleep(seconds)
            window1, cpu1, p1 = time.time_ns(), threads.cpu_by_thread(self.child.pid), _cpu_s(player.pid)
            if player.wait(timeout=60) is None:
                raise BenchError("the player did not finish within 60 s of its window")
        time.sleep(1.0)  # the window's last frames come back
        played = json.loads(out.read_text())
        sent = sum(window0 <= s < window1 for cam in played["stamps_ns"] for s in cam)
        with self.feats.lock:
            got = [(k, r, s) for k, cam in enumerate(self.feats.got) for r, s in cam if window0 <= s < window1]
        back = len({(k, s) for k, _, s in got})  # a frame counts once per camera
        self._cpu.append((cpu0, cpu1))
        t = Trial(
            cameras=self.n,
            offered_fps=fps,
            send_fps=sum(played["sent"]) / self.n / played["seconds"],
            sent=sent,
            back=min(back, sent),
            latency_ms={q: round(v, 2) for q, v in percentiles([(r - s) / 1e6 for _, r, s in got], (50, 99)).items()},
            cpu_ms_per_frame={},
            player_cpu_ms_per_frame=round(1e3 * (p1 - p0) / max(back, 1), 2),
        )
        self.trials.append(t)
        log.info("%s x%d at %.1f fps/camera: %d of %d back", self.work.name, self.n, fps, t.back, t.sent)
        return t

    def attribute(self, named: dict[int, str]) -> None:
        """Per-thread CPU of every trial by role, once the receiver has said which thread ids are its own."""
        pid = self.child.pid
        for t, (cpu0, cpu1) in zip(self.trials, self._cpu, strict=True):
            main_comm = cpu1[pid].comm if pid in cpu1 else ""
            by_role: dict[str, float] = {}
            for tid, c in cpu1.items():
                used = c.cpu_s - (cpu0[tid].cpu_s if tid in cpu0 else 0.0)
                role = thread_role(tid, c.comm, pid, main_comm, named)
                by_role[role] = by_role.get(role, 0.0) + used
            t.cpu_ms_per_frame = {r: round(1e3 * s / max(t.back, 1), 2) for r, s in sorted(by_role.items())}


def _cpu_s(pid: int) -> float:
    return sum(c.cpu_s for c in threads.cpu_by_thread(pid).values())


def search(measure, guess: float, steps: int) -> tuple[Trial | None, list[Trial]]:
    """The highest rate with < MAX_DROP lost, in `steps` trials: up from `guess` by 1.5x while trials
    pass (never capped), down by half while they fail, then bisection between the highest pass and the
    lowest fail. A passing trial the player could not feed at its offered rate ends the search: the
    sender is the limit there, and the report says so."""
    lo = hi = None  # highest passing, lowest failing offered rate
    best, tried, rate = None, [], guess
    for _ in range(steps):
        t = measure(rate)
        tried.append(t)
        if t.drop_fraction < MAX_DROP:
            best, lo = t, rate
            if t.sender_limited:
                break
            rate = rate * 1.5 if hi is None else (lo + hi) / 2
        else:
            hi = rate
            rate = rate * 0.5 if lo is None else (lo + hi) / 2
    return best, tried


# --- compute alone -------------------------------------------------------------------------------------


def encode_vs_peak(model: str, model_path: Path, backend: str, hint: str, quick: bool) -> dict:
    """INT8 encode per frame at each batch of ENCODE_BATCHES against each runtime's INT8 GEMM peak, all
    timed in the same interleaved rounds: the node's backend as the node runs it (its performance_hint),
    OpenVINO also as one request per batch (latency), and ONNX Runtime where it runs this model. The
    fraction is the model's ops per frame over the time per frame, over the runtime's peak. ONNX Runtime's
    float32 GEMM of the same size runs in the same rounds, with the encoders' settings."""
    import numpy as np

    from ..encoders import EncoderError, create_encoder
    from ..models.configs import get_config
    from .roofline import PEAK_GEMM_N, fp32_gemm_call, int8_gemm_call

    setups = {f"{backend} (as the node)": (backend, hint)}
    if backend == "openvino":  # the other way to run a batch (encoders/openvino.py)
        other = "throughput" if hint == "latency" else "latency"
        setups[f"openvino {other}"] = ("openvino", other)
    if backend != "onnxruntime":
        setups["onnxruntime"] = ("onnxruntime", "latency")
    encoders = {}
    for label, (runtime, hint) in setups.items():
        try:
            encoders[label] = create_encoder(runtime, model_path, performance_hint=hint)
        except EncoderError as err:  # e.g. the INT8 gate refuses this runtime here: its row is left out, said why
            log.warning("encode vs peak: %s left out: %s", label, err)
    s = next(iter(encoders.values())).image_size
    rng = np.random.default_rng(0)
    inputs = {b: rng.standard_normal((b, 3, s, s), dtype=np.float32) for b in ENCODE_BATCHES}
    variants = [Variant(label, lambda e=e, b=b: e.encode(inputs[b]), batch=b)
                for label, e in encoders.items() for b in ENCODE_BATCHES if b <= e.max_batch]  # fmt: skip
    runtimes = sorted({e.backend for e in encoders.values()})
    peaks = {r: Variant(f"peak/int8-gemm-{r}", int8_gemm_call(r, PEAK_GEMM_N), group="peak") for r in runtimes}
    fp32 = Variant("peak/fp32-gemm-onnxruntime", fp32_gemm_call(PEAK_GEMM_N), group="peak")
    rounds, iters = (3, 3) if quick else (6, 6)
    run_interleaved([*variants, *peaks.values(), fp32], rounds, iters)

    def rate(v: Variant) -> float:
        return 2 * PEAK_GEMM_N**3 / (min(v.samples_ms) / 1e3) / 1e9

    peak_gops = {r: rate(v) for r, v in peaks.items()}
    ops = get_config(model.split("@")[0]).flops_per_image()
    rows = []
    for v in variants:
        runtime = encoders[v.name].backend
        per_frame_ms = float(np.median(v.samples_ms)) / v.batch
        gops = ops / (per_frame_ms / 1e3) / 1e9
        rows.append({"setup": v.name, "runtime": runtime, "batch": v.batch, "per_frame_ms": round(per_frame_ms, 2),
                     "gops": round(gops, 1), "of_peak": round(gops / peak_gops[runtime], 3)})  # fmt: skip
    return {"backend": backend, "peak_gops": {r: round(g, 1) for r, g in peak_gops.items()}, "rows": rows,
            "node_setup": f"{backend} (as the node)", "fp32_gflops_onnxruntime": round(rate(fp32), 1)}  # fmt: skip


# --- the run ---------------------------------------------------------------------------------------------


def _node_args(args, n: int, compressed: bool, stats: Path) -> list[str]:
    """The multi-camera node of bench/cameras.py (its defaults: sensor-data QoS, auto threads and batch)."""
    return [*camera_node_args(args, stats),
            "--image-topics", *(image for image, _ in topics(n, compressed))]  # fmt: skip


def _bag(work: Path, compressed: bool) -> Path:
    bag = work / f"cameras_frames_{'compressed' if compressed else 'raw'}"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=PLAYER_FRAMES, fps=FPS, compressed="jpeg" if compressed else "")
    return bag


def measure_node(args, n: int, compressed: bool, bag: Path, work: Path, guess: float,
                 expect: tuple[str, str]) -> dict:  # fmt: skip
    """The node for n cameras: a trial at 30 fps per camera, then the capacity search; per-thread CPU of each."""
    from ..ros.process import NodeProcess

    work.mkdir(parents=True, exist_ok=True)
    stats_path = work / "stats.json"
    with contextlib.ExitStack() as stack:
        node = NodeProcess(_node_args(args, n, compressed, stats_path), log_path=work / "node.log")
        rx = Receiver(node, n, compressed, work, stack)
        at30 = rx.trial(FPS, args.seconds, args.warmup, bag)
        best, tried = search(lambda f: rx.trial(f, args.seconds, args.warmup, bag), guess, 4 if args.quick else 6)
        rx.child.stop(timeout=60)  # SIGINT: the node writes its --stats-json on the way out
    stats = json.loads(stats_path.read_text())
    if (stats.get("backend"), stats.get("precision")) != expect:
        raise BenchError(f"the node ran {stats.get('backend')} {stats.get('precision')}, the figures measured "
                         f"alone are {' '.join(expect)}: they would not compare")  # fmt: skip
    rx.attribute({int(k): v for k, v in stats.get("threads", {}).items()})
    return _result(n, compressed, at30, best, tried, stats)


def measure_echo(args, n: int, compressed: bool, bag: Path, work: Path, guess: float) -> dict:
    from ..ros.dds_config import chosen_uri

    work.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        images = [image for image, _ in topics(n, compressed)]
        argv = children.python("-m", "openclaw_vision.ros.echo", "--transport", "cyclonedds",
                               *(["--compressed"] if compressed else []), *images)  # fmt: skip
        env = {"CYCLONEDDS_URI": chosen_uri(os.environ)}  # loopback, as the nodes (ros/process.py)
        rx = Receiver(children.Child(argv, log_path=work / "echo.log", env=env), n, compressed, work, stack)
        best, tried = search(lambda f: rx.trial(f, args.seconds, args.warmup, bag), guess, 4 if args.quick else 6)
        rx.attribute({})
    return _result(n, compressed, None, best, tried, {})


def _result(n: int, compressed: bool, at30: Trial | None, best: Trial | None, tried: list[Trial], stats: dict) -> dict:
    worker = {}
    for stage, v in (stats.get("stages_ms") or {}).items():
        if v.get("n"):
            worker[stage] = round(v["p50"], 2)
    return {
        "cameras": n,
        "transport": "compressed" if compressed else "raw",
        "capacity_fps_per_camera": round(best.send_fps, 2) if best else None,
        "capacity_fps_total": round(best.send_fps * n, 2) if best else None,
        "sender_limited": best.sender_limited if best else False,
        "at_30fps": at30.record() if at30 else None,
        "at_capacity": best.record() if best else None,
        "trials": [t.record() for t in tried],
        "backend": stats.get("backend"),
        "precision": stats.get("precision"),
        "max_batch": stats.get("max_batch"),
        "stage_p50_ms": worker,
    }


def _backend_of(args) -> tuple[str, str]:
    """The backend and precision `--backend` resolves to here (`auto`: the node's own choice, the same
    rule); each node run checks the backend and precision in its --stats-json against it (measure_node)."""
    from ..encoders import create_encoder

    enc = create_encoder(args.backend, args.int8_model_path)
    return enc.backend, enc.precision


def run_capacity(args, work: Path) -> dict:
    """Every (transport, N) of IMAGE_TRANSPORTS x args.cameras: compute alone, the transport's ceiling, the node."""
    if args.quick:
        args.seconds, args.warmup = min(args.seconds, 3.0), min(args.warmup, 1.0)
    work = work / "capacity"
    transports = [args.camera_transport] if args.camera_transport else list(IMAGE_TRANSPORTS)
    cams = tuple(n for n in args.cameras if n in CAPACITY_CAMERAS) or CAPACITY_CAMERAS
    backend, precision = _backend_of(args)
    out: dict = {"backend": backend, "precision": precision, "seconds": args.seconds, "warmup": args.warmup,
                 "compute": [], "ceiling": [], "node": [], "four_cameras": {},
                 "socket_buffers": socket_buffers()}  # fmt: skip
    out["encode_vs_peak"] = encode_vs_peak(args.model, args.int8_model_path, backend, args.performance_hint, args.quick)
    for transport in transports:
        compressed = transport == "compressed"
        bag = _bag(work, compressed)
        for n in cams:
            c = compute_bound(bag, args.int8_model_path, backend, precision, n, 3.0 if args.quick else 9.0,
                              frames=PLAYER_FRAMES)  # fmt: skip
            out["compute"].append({"cameras": n, "transport": transport, **c})
            ceiling = measure_echo(args, n, compressed, bag, work / f"echo-{transport}-{n}", guess=120.0 / n)
            out["ceiling"].append(ceiling)
            combined = _combined(c["frames_per_s"], ceiling["capacity_fps_total"])
            node = measure_node(args, n, compressed, bag, work / f"node-{transport}-{n}",
                                guess=(combined or c["frames_per_s"]) / n, expect=(backend, precision))  # fmt: skip
            node["compute_frames_per_s"] = c["frames_per_s"]
            node["ceiling_fps_total"] = ceiling["capacity_fps_total"]
            node["ceiling_sender_limited"] = ceiling["sender_limited"]  # then the ceiling is at least that
            node["combined_limit_fps"] = combined
            out["node"].append(node)
            print(_line(node), flush=True)
        if 4 in cams and not args.quick:  # bench/cameras.py's two setups, as its own mode runs them
            args.camera_transport = transport
            trials = [t for publishers in ("one", "per-camera")
                      for t in compare(4, args, bag, work / f"four-{transport}", publishers, FPS)]  # fmt: skip
            out["four_cameras"][transport] = {"trials": trials, "where_time_goes": where_time_goes(trials),
                                              "camera_transport": transport, "seconds": args.seconds,
                                              "warmup": args.warmup}  # fmt: skip
        args.camera_transport = None if len(transports) > 1 else transport
    from .dropcost import run_dropcost  # what a dropped frame costs: the transport's floor beside our share

    out["drop_cost"] = run_dropcost(args.quick, work)
    out["goals"] = goals(out)
    return out


def _combined(compute_fps: float, ceiling_fps: float | None) -> float | None:
    """The rate of a receiver that pays both costs on one CPU: 1 / (1/ceiling + 1/compute)."""
    if not ceiling_fps or not compute_fps:
        return None
    return round(1 / (1 / ceiling_fps + 1 / compute_fps), 2)


def _line(node: dict) -> str:
    cap = node["capacity_fps_total"]
    return (f"capacity {node['transport']} x{node['cameras']}: {cap} frames/s total "
            f"(compute alone {node['compute_frames_per_s']}, transport ceiling {node['ceiling_fps_total']}, "
            f"combined limit {node['combined_limit_fps']})")  # fmt: skip


def _find(rows: list[dict], **keys) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in keys.items())), None)


def goals(res: dict) -> list[dict]:
    from .cameras import goals as camera_goals

    out = []
    one = _find(res["node"], cameras=1, transport="raw")
    if one and one["combined_limit_fps"]:
        share, target = (one["capacity_fps_total"] or 0) / one["combined_limit_fps"], GOALS["capacity_share"]
        out.append(row(f"one raw 1080p camera: capacity within {within(target)} of its parts' combined limit",
                       f"{one['capacity_fps_total']} of {one['combined_limit_fps']} frames/s ({share:.0%}; compute "
                       f"alone {one['compute_frames_per_s']}, transport ceiling {one['ceiling_fps_total']})",
                       share >= target))  # fmt: skip
    for transport, four in res["four_cameras"].items():
        for g in camera_goals(four["trials"]):
            out.append({**g, "goal": f"{transport}: {g['goal']}"})
    if res.get("drop_cost"):
        from .dropcost import goals as drop_goals

        out += drop_goals(res["drop_cost"])
    ev = res["encode_vs_peak"]
    node_rows = [r for r in ev["rows"] if r["setup"] == ev["node_setup"]]
    batched = [r for r in node_rows if r["batch"] > 1]
    if batched:
        best, target = max(batched, key=lambda r: r["of_peak"]), GOALS["encode_of_int8_peak"]
        b1 = _find(node_rows, batch=1)
        peak = ev["peak_gops"][best["runtime"]]
        out.append(row(f"INT8 encode per frame at batch 4 or 8 >= {target:.0%} of the INT8 GEMM peak",
                       f"{best['of_peak']:.0%} at batch {best['batch']} ({best['gops']} of {peak} GOP/s, "
                       f"{ev['node_setup']})" + (f"; batch 1: {b1['of_peak']:.0%}" if b1 else ""),
                       best["of_peak"] >= target))  # fmt: skip
    c1 = _find(res["compute"], cameras=1, transport="raw")
    if one and c1 and one["at_30fps"]:
        bound = c1["call_ms"]["p99"] + c1["call_ms"]["p50"]
        p99, target = one["at_30fps"]["latency_ms"]["p99"], GOALS["newest_frame_bound"]
        out.append(row(f"stamp->features P99 at 30 fps <= {target}x the newest-frame bound (compute P99 + P50)",
                       f"{p99} ms against {bound:.1f} ms ({p99 / bound:.2f}x)", p99 <= target * bound))  # fmt: skip
    return out


def markdown(res: dict) -> list[str]:
    from .cameras import markdown as cameras_markdown

    lines = ["", f"Capacity ({res['backend']} {res['precision']}; trials of {res['seconds']} s after "
             f"{res['warmup']} s; < {MAX_DROP:.0%} of the window's frames lost). "
             + (socket_line(res["socket_buffers"]) if "socket_buffers" in res else ""), "",
             "| transport | cameras | node frames/s | compute alone | transport ceiling | combined limit "
             "| node/limit | P99 ms at 30 fps | sender-limited |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for n in res["node"]:
        lim = n["combined_limit_fps"]
        share = f"{(n['capacity_fps_total'] or 0) / lim:.0%}" if lim else "-"
        p99 = n["at_30fps"]["latency_ms"]["p99"] if n["at_30fps"] else "-"
        ceiling = f"{'>= ' if n.get('ceiling_sender_limited') else ''}{n['ceiling_fps_total']}"
        lines.append(f"| {n['transport']} | {n['cameras']} | {n['capacity_fps_total']} | {n['compute_frames_per_s']} "
                     f"| {ceiling} | {lim} | {share} | {p99} | {n['sender_limited']} |")  # fmt: skip
    lines += ["", "Core-ms per frame by thread at capacity (node; the player apart):", ""]
    for n in res["node"]:
        cap = n["at_capacity"] or n["at_30fps"]
        if cap:
            parts = ", ".join(f"{k} {v}" for k, v in cap["cpu_ms_per_frame"].items())
            stages = ", ".join(f"{k} {v}" for k, v in n["stage_p50_ms"].items())
            lines.append(f"- {n['transport']} x{n['cameras']} at {cap['send_fps']} fps/camera: {parts}; player "
                         f"{cap['player_cpu_ms_per_frame']}. The node's stage P50 ms (wall): {stages}")  # fmt: skip
    for four in res["four_cameras"].values():
        lines += cameras_markdown(four)
    if res.get("drop_cost"):
        from .dropcost import markdown as drop_markdown

        lines += drop_markdown(res["drop_cost"])
    ev = res["encode_vs_peak"]
    peaks = ", ".join(f"{r} {g} GOP/s" for r, g in ev["peak_gops"].items())
    peaks += f"; beside it float32 onnxruntime {ev['fp32_gflops_onnxruntime']} GFLOP/s"
    lines += ["", f"INT8 encode per frame against the runtime's INT8 GEMM peak ({peaks}; same interleaved rounds; "
              "above 100 %: the model's GEMMs ran faster than the bench's Q/DQ MatMul, which also quantises its "
              "float input, so the peak is a floor of the runtime's best):",
              "", "| setup | batch | ms per frame | GOP/s | of peak |", "|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {r['setup']} | {r['batch']} | {r['per_frame_ms']} | {r['gops']} | {r['of_peak']:.0%} |"
              for r in ev["rows"]]  # fmt: skip
    return lines


def cpu_figure(plt, res: dict):
    """Stacked bars: core-ms per frame by thread role, one bar per (transport, cameras) at capacity."""
    bars = [(f"{n['transport']} x{n['cameras']}", (n["at_capacity"] or n["at_30fps"] or {}).get("cpu_ms_per_frame", {}))
            for n in res["node"]]  # fmt: skip
    roles = sorted({r for _, b in bars for r in b})
    fig, ax = plt.subplots(figsize=(9, 5))
    bottom = [0.0] * len(bars)
    for role in roles:
        vals = [b.get(role, 0.0) for _, b in bars]
        ax.bar([name for name, _ in bars], vals, bottom=bottom, label=role)
        bottom = [a + v for a, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("core-ms per frame")
    ax.set_title("encoder node at capacity: CPU per frame by thread")
    ax.legend(fontsize=7)
    return fig
