"""The bench's harness: the one timing loop, and the record of where a run was measured.

- `Variant`, `run_interleaved`, `summarise`, `first_call_s`: every variant runs in every round, in a shuffled
  order, so drift in the machine (thermal, other processes) lands on all variants alike; ratios are taken inside
  one run, never across runs. The bench's modes, the ladder, the figure scripts (scripts/*_figures.py) and
  quantize's latency check (quant/pipeline.py, the one import from below bench/ that .importlinter allows) all
  time through it.
- `host_info`, `versions`: the host and the versions of what a run timed (the CPU's name as core/cpu.py, the
  package's one reader of the CPU's features, gives it).
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from ..core import cpu
from ..runtime.stats import percentiles


def host_info() -> dict:
    """Where a run was measured: the CPU's model name (as core/cpu gives it), cores, machine, Python."""
    return {
        "cpu": cpu.model_name(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def versions() -> dict:
    out = {}
    for pkg in ("openclaw_vision", "numpy", "onnxruntime", "openvino", "opencv-python-headless", "torch", "cyclonedds",
                "rosbags"):  # fmt: skip
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


# Every variant runs in every round, in a shuffled order, so drift in the machine (thermal, other
# processes) lands on all variants alike. Never compare across runs.


@dataclass
class Variant:
    """One thing to time: `fn` is called, its samples collect here.

    `self_timed`: `fn` returns the seconds to count itself (a decode call that must not count the
    prefill it needs first); otherwise the whole call is timed."""

    name: str
    fn: Callable[[], object]
    batch: int = 1
    group: str = ""  # variants in one group are compared with the group's baseline
    baseline: bool = False
    self_timed: bool = False
    samples_ms: list[float] = field(default_factory=list)
    round_p50_ms: list[float] = field(default_factory=list)

    def call_ms(self) -> float:
        """One call, in milliseconds (see `self_timed`)."""
        if self.self_timed:
            return float(self.fn()) * 1e3
        t0 = time.perf_counter()
        self.fn()
        return (time.perf_counter() - t0) * 1e3


def first_call_s(variants: list[Variant]) -> dict[str, float]:
    """One call of each variant, in seconds (not kept as samples): what sizes the rounds to a time budget
    (iterations = budget / these), and a warm-up."""
    return {v.name: v.call_ms() / 1e3 for v in variants}


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
            times = [v.call_ms() for _ in range(iters)]
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
