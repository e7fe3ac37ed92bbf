"""What a dropped frame costs, per transport: the transport's own receive beside our share (issue 38).

    player process ──(N camera topics, 1080p rgb8)──DDS──► receiver process: the encoder node, its encoder
                                                           paused on its first batch, so every later frame
                                                           is received and dropped

The receiver is the real `EncoderNode` (its subscriptions, intake, slots and counts) whose encoder holds
its first batch until the window ends: every frame after it is a dropped frame, the regime of a node
offered more than it encodes (88 % of frames at four cameras x 30 fps in issue 38). Its CPU is read per
thread over a measured window and divided by the frames the node received in it:

- **transport floor**: what the transport spends before our code has the sample. Cyclone: its own
  threads (receive, reassembly, timers; /proc ticks, 10 ms, so windows of hundreds of frames). rclpy:
  rmw's Cyclone threads plus the executor thread less our intake (rclpy's executor, `rcl_take` and the
  two copies into `bytes`, which rclpy makes before our callback runs).
- **our share**: take, decode, validate, count. Cyclone: our take thread (`dds-take…`, its own CPU
  clock, nanoseconds); rclpy: our intake (`SampleIntake` calls, timed with the thread's CPU clock).
  Split into the intake (decode, validate, count: SampleIntake's calls, timed alike) and the rest of
  our take thread (waking, `dds_takecdr`).

Two take paths on Cyclone, side by side in one run: `all` (the node's: one wake-up and one `dds_takecdr` for
everything the reader holds, and while the camera's slot is full its samples left in the reader and taken
together: cyclone.py, "Paced") and `one` (a take per sample as it comes: the path before issue 38,
cyclone.TAKE_AT_MOST = 1, not paced). Every sample goes through the node's whole intake either way (decoded,
checked, counted: subscription.py says why the older ones are not skipped). Every path runs the node's own
malloc settings (one arena, freed frame buffers kept in the heap: core/heap.py); full runs add `all+glibc`,
the node with glibc's own thresholds (`frame_heap_mb` 0), where a camera's replaced frame can go back to the
kernel inside our intake and the next one's pages are faulted in again in the transport's receive. Each beside
nothing (`idle`) and beside one busy process per core (`hogs`: the encode and the camera drivers a robot runs,
where the take thread falls behind and the reader fills). rclpy hands every sample over one at a time (its
executor: one take per callback), so it has one path, `one`; it is measured where rclpy imports (a sourced
Humble: scripts/receive_cost.py --drop runs both transports on the shared Humble). `+before`
(scripts/receive_cost.py --drop) is the node before pacing: every sample taken as it comes (`reader_samples`
0).

    openclaw-vision bench --mode capacity    (a section of its report)
    python -m openclaw_vision.bench.dropcost [--quick] [--out DIR]     (this section alone)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import children
from ..runtime import bags, threads

#: the take paths compared: a take per sample (before issue 38), all the reader holds per take (now)
PATHS = ("one", "all")
#: a path's suffix for the node with glibc's own malloc thresholds (frame_heap_mb 0) in place of its default, which
#: keeps freed frame buffers in the heap (core/heap.py): measured beside the default in full runs
GLIBC = "+glibc"
#: a path's suffix for the node as it was before pacing (`reader_samples` 0: every sample taken as it comes) in place
#: of its default: measured beside it on Cyclone by scripts/receive_cost.py --drop (rclpy is never paced)
BEFORE = "+before"
LOADS = ("idle", "hogs")
#: (cameras, fps per camera, measured seconds, warm-up seconds) of a full run and of --quick
SETUP = {False: (4, 30.0, 8.0, 2.0), True: (1, 30.0, 2.0, 1.0)}
GOAL_OUR_SHARE_MS = 0.1


class PausedEncoder:
    """An encoder whose model call holds until `release`: the node's worker takes one batch and keeps it,
    so every frame after it waits in its slot until a newer one displaces it (dropped, counted). Tiny
    shapes: the one batch it prepares costs next to nothing."""

    model_id, embed_dim, image_size, backend, precision, max_batch = "paused", 8, 32, "paused", "fp32", 8

    def __init__(self) -> None:
        self.release = threading.Event()

    def frame_preprocessor(self) -> None:
        return None

    def encode(self, pixels: np.ndarray) -> Any:
        from ..encoders.base import Embedding

        self.release.wait()
        vectors = np.zeros((len(pixels), self.embed_dim), np.float32)
        vectors[:, 0] = 1.0
        return Embedding(vectors, self.model_id)


class IntakeClock:
    """CPU seconds our SampleIntake calls (decode, validate, the node's count and slot) spent, by thread CPU
    clock: installed around the class's two entry points (a sample as it comes, and one a paced reader's
    drain or the worker's pull hands on at once) in the receiver process only."""

    def __init__(self) -> None:
        from ..ros.subscription import SampleIntake

        self.cpu_s = 0.0
        self.calls = 0
        SampleIntake.__call__ = self._timed(SampleIntake.__call__)
        SampleIntake.now = self._timed(SampleIntake.now)

    def _timed(self, fn):
        def timed(intake, *args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(intake, *args, **kwargs)
            finally:
                self.cpu_s += time.thread_time() - t0  # one intake thread per subscription; += under the GIL
                self.calls += 1

        return timed


def _python_threads_cpu() -> dict[int, float]:
    """Native id → CPU seconds (the thread's own clock: nanoseconds) of every Python thread of this process."""
    out = {}
    for t in threading.enumerate():
        try:
            out[t.native_id] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, AttributeError, TypeError):  # ended meanwhile, or not Linux
            continue
    return out


def _snapshot(node, clock: IntakeClock) -> dict[str, Any]:
    st = node.stats_between_frames()  # not mid-frame: received and the drop it causes, counted together
    return {"received": st["received"], "dropped": st["dropped"], "encoded": st["encoded"],
            "procs": {tid: (c.comm, c.cpu_s) for tid, c in threads.cpu_by_thread(os.getpid()).items()},
            "precise": _python_threads_cpu(), "intake_s": clock.cpu_s, "t": time.monotonic()}  # fmt: skip


def _window(a: dict, b: dict) -> dict[str, Any]:
    """Per received frame, from two snapshots: the transport's threads (ticks) and ours (thread clocks)."""
    from .roles import thread_role

    pid, named = os.getpid(), threads.ours()
    received = max(b["received"] - a["received"], 1)
    main_comm = b["procs"].get(pid, ("", 0.0))[0]
    by_role: dict[str, float] = {}
    for tid, (comm, cpu) in b["procs"].items():
        role = thread_role(tid, comm, pid, main_comm, named)
        used = b["precise"][tid] - a["precise"].get(tid, 0.0) if tid in b["precise"] else cpu - a["procs"].get(
            tid, (comm, 0.0))[1]  # fmt: skip
        by_role[role] = by_role.get(role, 0.0) + used
    take = sum(v for k, v in by_role.items() if k.startswith("transport thread (take"))
    spin = sum(v for k, v in by_role.items() if k.startswith("transport thread (rclpy"))
    cyclone = sum(v for k, v in by_role.items() if k.startswith("cyclone threads"))
    intake = b["intake_s"] - a["intake_s"]
    ms = 1e3 / received
    seconds = b["t"] - a["t"]
    if spin:  # rclpy: the executor thread is rclpy's take and copies, and our intake inside it
        floor, ours, take_rest = cyclone + spin - intake, intake, 0.0
    else:
        floor, ours, take_rest = cyclone, take, take - intake
    return {
        "received": b["received"] - a["received"],
        "dropped": b["dropped"] - a["dropped"],
        "received_fps": round((b["received"] - a["received"]) / max(seconds, 1e-9), 2),
        "transport_floor_ms": round(floor * ms, 4),
        "our_share_ms": round(ours * ms, 4),
        "our_intake_ms": round(intake * ms, 4),
        "our_take_ms": round(take_rest * ms, 4),
        "cpu_ms_per_frame_by_role": {k: round(v * ms, 4) for k, v in sorted(by_role.items())},
    }


def receive(transport: str, path: str, topics: Sequence[str], seconds: float, warmup: float, out: Path) -> int:
    """The receiver (its own process): the node with a paused encoder; after the first frame and `warmup`
    seconds, one window of `seconds`; the figures to `out` (JSON)."""
    from ..ros.encoder_node import EncoderNode, share_malloc_arenas
    from ..ros.transport import create_transport
    from ..runtime.config import EncoderConfig

    share_malloc_arenas()  # as the node's main does, before any thread starts

    one = path.split("+")[0] == "one"  # a take per sample as it comes (before issue 38): not paced either
    if transport == "cyclonedds":  # rclpy takes one per callback whatever we ask (and may lack cyclonedds)
        from ..ros import cyclone

        cyclone.TAKE_AT_MOST = 1 if one else None  # before the subscriptions are made
    clock = IntakeClock()
    t = create_transport(transport, "dropcost_receiver", [])
    enc = PausedEncoder()
    changed = {"frame_heap_mb": 0} if GLIBC in path else {}  # else the node's defaults
    if BEFORE in path or one:
        changed["reader_samples"] = 0
    node = EncoderNode(EncoderConfig(image_topics=tuple(topics), diagnostics_period=3600.0, **changed), t, enc)
    try:
        node.start()
        print("ready", flush=True)
        deadline = time.monotonic() + 120
        while node.counters.snapshot()["received"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(warmup)
        takes = lambda: sum(getattr(c.images, "takes", 0) for c in node.cameras.values())  # noqa: E731
        a, takes0 = _snapshot(node, clock), takes()
        time.sleep(seconds)
        b, takes1 = _snapshot(node, clock), takes()
        w = _window(a, b)
        w["samples_per_take"] = round(w["received"] / (takes1 - takes0), 2) if takes1 > takes0 else None
        out.write_text(json.dumps({"transport": t.name, "path": path, **w}))
    finally:
        enc.release.set()
        node.stop()
        t.close()
    return 0


def trial(transport: str, path: str, load: str, n: int, fps: float, seconds: float, warmup: float, bag: Path,
          work: Path, python: Sequence[str] | None = None, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One receiver (`python`: the interpreter argv that runs it, default this one; `env` added to its
    environment; `cwd`: where it runs, e.g. outside the checkout so that a colcon install's package, with its
    generated messages, is the one imported) fed by the capacity bench's player at `fps` per camera; with
    `load` hogs, one busy process per core beside both. Returns the receiver's figures with the player's
    achieved rate."""
    from ..ros.dds_config import chosen_uri
    from .cameras import start_player, topics
    from .stop import HOG

    work.mkdir(parents=True, exist_ok=True)
    images = [image for image, _ in topics(n, False)]
    out = work / "receiver.json"
    out.unlink(missing_ok=True)
    argv = [*(python or children.python()), "-m", "openclaw_vision.bench.dropcost", "receive", transport, path,
            str(seconds), str(warmup), str(out), *images]  # fmt: skip
    env = {"CYCLONEDDS_URI": chosen_uri(os.environ), **(env or {})}
    with contextlib.ExitStack() as stack:
        rx = stack.enter_context(children.Child(argv, log_path=work / "receiver.log", env=env, cwd=cwd))
        if rx.wait_for_line("ready", 120.0) != "ready":
            raise RuntimeError(f"drop cost: the receiver did not start ({rx.how}): {rx.log_text()[-1500:]}")
        if load == "hogs":
            for i in range(os.cpu_count() or 1):
                stack.enter_context(children.Child(children.python("-c", HOG), log_path=work / f"hog-{i}.log"))
        player = stack.enter_context(start_player(bag, n, fps, warmup + seconds + 3.0, False, work / "player.json",
                                                  "drop cost"))  # fmt: skip
        if rx.wait(timeout=warmup + seconds + 120) != 0 or not out.exists():
            raise RuntimeError(f"drop cost: the receiver failed ({rx.how}): {rx.log_text()[-1500:]}")
        player.wait(timeout=60)
    played = json.loads((work / "player.json").read_text())
    res = json.loads(out.read_text())
    return {"load": load, "cameras": n, "offered_fps": fps,
            "sent_fps_per_camera": round(sum(played["sent"]) / n / played["seconds"], 2),
            "received_fps_per_camera": round(res["received_fps"] / n, 2), **res}  # fmt: skip


def run_dropcost(quick: bool, work: Path, rounds: int | None = None) -> dict[str, Any]:
    """Every (load, transport, path) here, `rounds` times in alternating order; rclpy where it imports."""
    from ..ros.transport import rclpy_available

    n, fps, seconds, warmup = SETUP[quick]
    work = work / "dropcost"
    work.mkdir(parents=True, exist_ok=True)
    bag = work / "frames-raw"
    if not bag.exists():
        from .cameras import PLAYER_FRAMES

        bags.write_sample_bag(bag, frames=PLAYER_FRAMES, fps=fps)
    setups = [("cyclonedds", p) for p in PATHS] + ([("rclpy", "one")] if rclpy_available() else [])
    if not quick:
        setups.append(("cyclonedds", "all" + GLIBC))
    loads = LOADS[:1] if quick else LOADS
    rows = []
    for r in range(rounds or (1 if quick else 2)):
        for load in loads:
            for transport, path in setups if r % 2 == 0 else setups[::-1]:
                where = work / f"{transport}-{path}-{load}-{r}"
                row = trial(transport, path, load, n, fps, seconds, warmup, bag, where)
                row["round"] = r
                rows.append(row)
                print(line(row), flush=True)
    return {"cameras": n, "fps": fps, "seconds": seconds, "warmup": warmup, "rows": rows,
            "rclpy": "measured" if rclpy_available() else "not here: rclpy does not import (source a Humble; "
            "scripts/receive_cost.py --drop runs it on the shared Humble)"}  # fmt: skip


def line(row: dict) -> str:
    return (f"drop cost {row['transport']} {row['path']} ({row['load']}): {row['received_fps_per_camera']} of "
            f"{row['sent_fps_per_camera']} frames/s per camera received, {row['dropped']} of {row['received']} "
            f"dropped, {row.get('samples_per_take')} samples per take; transport floor "
            f"{row['transport_floor_ms']:.3f} core-ms, our share {row['our_share_ms']:.3f} "
            f"(intake {row['our_intake_ms']:.3f}, take {row['our_take_ms']:.3f})")  # fmt: skip


def goals(res: dict) -> list[dict]:
    from .goals import row

    now = [r for r in res["rows"] if r["path"] == "all" or (r["transport"], r["path"]) == ("rclpy", "one")]
    out = []
    for transport in sorted({r["transport"] for r in now}):
        worst = max(r["our_share_ms"] for r in now if r["transport"] == transport)
        floor = max(r["transport_floor_ms"] for r in now if r["transport"] == transport)
        out.append(row(f"{transport}: our share of a dropped frame <= {GOAL_OUR_SHARE_MS} core-ms",
                       f"{worst:.3f} core-ms at worst (transport floor {floor:.3f})",
                       worst <= GOAL_OUR_SHARE_MS))  # fmt: skip
    return out


def markdown(res: dict) -> list[str]:
    lines = ["", f"What a dropped frame costs ({res['cameras']} x 1080p rgb8 at {res['fps']:g} fps per camera into "
             f"the node with its encoder paused: every frame after its first batch dropped; {res['seconds']} s "
             f"windows; core-ms per received frame; rclpy: {res['rclpy']}):", "",
             "| transport | take | load | received / sent frames/s per camera | dropped | samples per take "
             "| transport floor | our share | of it: intake (decode, validate, count) | take (wake, dds_takecdr) |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["rows"]:
        lines.append(f"| {r['transport']} | {r['path']} | {r['load']} | {r['received_fps_per_camera']} / "
                     f"{r['sent_fps_per_camera']} | {r['dropped']} of {r['received']} | {r.get('samples_per_take')} "
                     f"| {r['transport_floor_ms']:.3f} "
                     f"| {r['our_share_ms']:.3f} | {r['our_intake_ms']:.3f} | {r['our_take_ms']:.3f} |")  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["receive"]:
        transport, path, seconds, warmup, out, *images = argv[1:]
        return receive(transport, path, images, float(seconds), float(warmup), Path(out))
    p = argparse.ArgumentParser(prog="python -m openclaw_vision.bench.dropcost")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    args = p.parse_args(argv)
    res = run_dropcost(args.quick, args.out, args.rounds)
    print("\n".join(markdown(res)))
    (args.out / "dropcost.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
