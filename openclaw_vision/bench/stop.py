"""`stop` mode: how long a node takes to end after SIGTERM, phase by phase, with a CPU hog beside it.

The tests assert that a stop always comes (exit 0, every frame in the final counts) and time nothing;
how long it takes is this figure (issue 34's goal: P99 <= 2 s). Each stop is a fresh encoder node
process over loopback DDS (the model given, ONNX Runtime, one thread), signalled with SIGTERM in one phase:

- `loading`: right after the node logs `loading:` (the model load runs on a thread of its own; the stop
  does not wait for it: runner.build_or_stop). Whether the signal came while it still loaded is counted
  from the node's own log line;
- `idle`: up and subscribed, nothing to match (DDS discovery of peers that never come);
- `encoding`: a player sends frames faster than the node encodes, and the node has encoded some.

Beside it, one busy-looping process per core (`os.cpu_count()`), at the node's own priority: the load
under which CI once saw an encoder ignore SIGTERM. The time is from the signal to the process's exit as
this process sees it (os.waitpid), so the figure includes the Python shutdown.

    openclaw-vision bench --mode stop [--quick] [--stops N] [--model M --model-path M.onnx]
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..core import children
from ..runtime import bags
from ..runtime.stats import percentiles
from .goals import row

log = logging.getLogger(__name__)

PHASES = ("loading", "idle", "encoding")
#: stops per phase: the issue asks for at least 50 (P99 of 50 is the second-worst)
STOPS = {False: 50, True: 3}
#: the goal: P99 of the stop time in every phase
GOAL_P99_S = 2.0
#: the player's camera 0 (cameras.topics: it publishes /cam<k>/image_raw)
CAMERA, FEATURES = "/cam0/image_raw", "/cam0/visual_features"
#: how long one node may take to reach its phase (liveness only: a start under the hog is slow)
PHASE_TIMEOUT_S = 120.0
HOG = "while True:\n    pass\n"


def _node(model: str, path: Path, work: Path, k: int):
    from ..ros.process import NodeProcess

    return NodeProcess(
        ["--model", model, "--model-path", str(path), "--backend", "onnxruntime", "--precision", "fp32",
         "--threads", "1", "--image-topic", CAMERA, "--features-topic", FEATURES, "--diagnostics-period", "0.2",
         "--transport", "cyclonedds", "--depth", "2"],
        log_path=work / f"node-{k}.log",
    )  # fmt: skip


def _wait_log(node, text: str) -> None:
    """Until the node logs `text`, looked for every 5 ms: the signal follows the line closely (a tiny model
    loads in tens of ms, and the loading phase must land inside the load)."""
    if not node.wait_for_line(text, PHASE_TIMEOUT_S, anywhere=True, poll=0.005):
        raise RuntimeError(f"stop bench: the node never logged {text!r} ({node.how}): {node.log_text()[-1500:]}")


def _stop_once(node) -> tuple[float, int]:
    """SIGTERM to the node alone (not its group: the bench's children are not the node's); (seconds, code)."""
    t0 = time.monotonic()
    os.kill(node.proc.pid, signal.SIGTERM)
    code = node.proc.wait(timeout=PHASE_TIMEOUT_S)
    return time.monotonic() - t0, code


def _phase(phase: str, n: int, model: str, path: Path, work: Path, encoded_seen) -> dict[str, Any]:
    times, codes, while_loading = [], Counter(), 0
    for k in range(n):
        node = _node(model, path, work, k)
        try:
            if phase == "loading":
                _wait_log(node, "INFO: loading: ")
            else:
                _wait_log(node, "INFO: ready: ")
                if phase == "encoding":
                    before = encoded_seen()
                    deadline = time.monotonic() + PHASE_TIMEOUT_S
                    while encoded_seen() <= before:  # this node has encoded a frame since it started
                        if time.monotonic() > deadline or not node.alive():
                            raise RuntimeError(f"stop bench: node {k} encoded nothing: {node.log_text()[-1500:]}")
                        time.sleep(0.01)
            took, code = _stop_once(node)
        finally:
            node.stop()
        times.append(took)
        codes[str(code)] += 1
        while_loading += "while the node loads" in node.log_text()
    pct = percentiles(times, (50, 99))
    met = pct["p99"] <= GOAL_P99_S and set(codes) == {"0"}
    out = {"stops": n, "p50_s": round(pct["p50"], 3), "p99_s": round(pct["p99"], 3), "max_s": round(max(times), 3),
           "exit_codes": dict(codes), "goal_p99_s": GOAL_P99_S, "met": met}  # fmt: skip
    if phase == "loading":
        out["signalled_while_loading"] = while_loading
    return out


def run_stop(model: str, fp32: Path, quick: bool, out: Path, stops: int | None = None) -> dict[str, Any]:
    """Every phase's stop-time percentiles (JSON-ready), printed as they come."""
    from ..ros.cyclone import CycloneTransport
    from ..ros.diagnostics import status_values
    from ..ros.node_counters import STATUS_NAME
    from ..ros.types import DIAGNOSTIC_ARRAY, QoS
    from .cameras import start_player

    work = out / "stop"
    work.mkdir(parents=True, exist_ok=True)
    n = stops or STOPS[quick]
    bag = work / "frames"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=30, fps=30, width=640, height=480, topic=CAMERA)
    encoded = {"n": 0}

    def on_diag(msg: Any, _dt: float) -> None:  # the nodes' /diagnostics: count nodes that encoded a frame
        values = status_values(msg, STATUS_NAME)
        if values is not None and int(values.get("encoded", 0)) >= 1:
            encoded["n"] += 1

    cores = os.cpu_count() or 1
    hogs = [children.Child(children.python("-c", HOG), log_path=work / f"hog-{i}.log") for i in range(cores)]
    t = CycloneTransport("stop_bench")
    result: dict[str, Any] = {"model": model, "hogs": len(hogs), "signal": "SIGTERM", "phases": {}}
    try:
        t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), on_diag)
        for phase in PHASES:
            if phase == "encoding":
                first = _node(model, fp32, work, -1)  # the player starts once a receiver has matched
                try:
                    _wait_log(first, "INFO: ready: ")
                    player = start_player(bag, 1, 30.0, 36_000.0, False, work / "player.json", "stop bench")
                finally:
                    first.stop()
                with player:
                    res = _phase(phase, n, model, fp32, work, lambda: encoded["n"])
            else:
                res = _phase(phase, n, model, fp32, work, lambda: encoded["n"])
            result["phases"][phase] = res
            print(f"stop, {phase}: {n} SIGTERMs beside {len(hogs)} CPU hogs: P50 {res['p50_s']:.3f} s, P99 "
                  f"{res['p99_s']:.3f} s, max {res['max_s']:.3f} s, exit codes {res['exit_codes']}"
                  + (f", {res['signalled_while_loading']} of them while it loaded" if phase == "loading" else "")
                  + " "
                  f"(goal P99 <= {GOAL_P99_S:g} s: {'met' if res['met'] else 'MISSED'})", flush=True)  # fmt: skip
    finally:
        t.close()
        for hog in hogs:
            hog.stop()
    result["goals"] = [
        row(f"stop on SIGTERM while {phase}: P99 <= {GOAL_P99_S:g} s, exit 0 ({res['stops']} stops, CPU hogs beside)",
            f"P99 {res['p99_s']:.3f} s, exit codes {res['exit_codes']}", res["met"])
        for phase, res in result["phases"].items()
    ]  # fmt: skip
    return result
