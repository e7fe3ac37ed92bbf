"""Interleaved timing: every variant runs in every round, in a shuffled order, so drift in the
machine (thermal, other processes) lands on all variants alike. Never compare across runs."""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from ..stats import percentiles


@dataclass
class Variant:
    name: str
    fn: Callable[[], object]
    batch: int = 1
    group: str = ""  # variants in one group are compared with the group's baseline
    baseline: bool = False
    samples_ms: list[float] = field(default_factory=list)
    round_p50_ms: list[float] = field(default_factory=list)


def run_interleaved(variants: list[Variant], rounds: int, iters: int, warmup: int = 2, seed: int = 0) -> None:
    """Fill each variant's samples: `rounds` × `iters` timed calls after `warmup` untimed ones."""
    for v in variants:
        for _ in range(warmup):
            v.fn()
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for v in order:
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                v.fn()
                times.append((time.perf_counter() - t0) * 1e3)
            v.samples_ms.extend(times)
            v.round_p50_ms.append(float(np.median(times)))


def summarise(variants: list[Variant]) -> list[dict]:
    """The harness's stable variant records, with each ratio to its group's baseline (p50)."""
    out = []
    base = {(v.group, v.batch): v for v in variants if v.baseline}
    for v in variants:
        p = percentiles(v.samples_ms)
        rec = {
            "name": v.name,
            "batch": v.batch,
            "p50_ms": round(p["p50"], 3),
            "p95_ms": round(p["p95"], 3),
            "p99_ms": round(p["p99"], 3),
            "mean_ms": round(p["mean"], 3),
            "throughput": round(v.batch / (p["mean"] / 1e3), 2) if p["mean"] else 0.0,
            "n": p["n"],
            "spread_p50_ms": [round(min(v.round_p50_ms), 3), round(max(v.round_p50_ms), 3)] if v.round_p50_ms else [],
            "samples_ms": [round(x, 3) for x in v.samples_ms],
        }
        b = base.get((v.group, v.batch))
        if b is not None and b is not v and b.samples_ms:
            rec["baseline"] = b.name
            rec["speedup_vs_baseline"] = round(float(np.median(b.samples_ms)) / max(p["p50"], 1e-9), 2)
        out.append(rec)
    return out


def host_info() -> dict:
    import os

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()}


def versions() -> dict:
    out = {}
    for pkg in ("openclaw_vision", "numpy", "onnxruntime", "openvino", "opencv-python-headless", "torch", "cyclonedds",
                "rosbags"):  # fmt: skip
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out
