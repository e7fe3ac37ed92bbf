"""Activation ranges for static INT8: observe the float model on calibration tensors.

Two passes over the calibration set through ONNX Runtime, with every quantised layer's input
added as a graph output: the first finds each tensor's min and max, the second fills a
histogram over [-absmax, absmax] (HIST_BINS bins per side). Three ways to turn that into a
clipping range:

- `minmax`: the observed extremes. Never clips; one outlier stretches the step for everyone.
- `percentile`: the |x| value below which `percentile` % of the samples lie.
- `entropy`: the threshold whose 128-level quantised histogram is closest (KL divergence) to
  the clipped original — TensorRT's calibrator idea, computed on a real 2048-bin histogram.
  ONNX Runtime's `quantize_static` Entropy method uses 128 bins by default, which leaves it
  nothing to search and makes it identical to MinMax; that is why this module exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

METHODS = ("minmax", "percentile", "entropy")
HIST_BINS = 2048  # per side of zero
QUANT_LEVELS = 128  # magnitude levels of signed symmetric INT8


@dataclass
class TensorStats:
    lo: float
    hi: float
    hist: np.ndarray | None = None  # (2 * HIST_BINS,) counts over [-absmax, absmax]

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi), 1e-12)

    def folded(self) -> np.ndarray:
        """Histogram of |x| over [0, absmax]: HIST_BINS bins."""
        h = self.hist
        return h[HIST_BINS:] + h[:HIST_BINS][::-1]


@dataclass(frozen=True)
class Range:
    """Clipping range of one activation tensor; always contains 0."""

    lo: float
    hi: float

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi), 1e-12)


def _with_outputs(model_path: Path, tensors: list[str]) -> bytes:
    model = onnx.load(str(model_path))
    have = {o.name for o in model.graph.output}
    for name in tensors:
        if name not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return model.SerializeToString()


def collect_stats(model_path: Path, tensors: list[str], batches: Iterable[np.ndarray], threads: int = 0, progress=None):
    """Run the float model over `batches` twice (extremes, then histograms); returns {tensor: TensorStats}.

    `batches` must be re-iterable (a list of arrays). `progress(iterable, desc)` wraps loops.
    """
    import onnxruntime as ort

    wrap = progress or (lambda it, desc: it)
    batches = list(batches)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(_with_outputs(model_path, tensors), opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0].name
    stats = {t: TensorStats(np.inf, -np.inf) for t in tensors}
    for x in wrap(batches, "calibration pass 1/2 (ranges)"):
        for name, value in zip(tensors, sess.run(tensors, {inp: x}), strict=True):
            s = stats[name]
            s.lo, s.hi = min(s.lo, float(value.min())), max(s.hi, float(value.max()))
    for s in stats.values():
        s.lo, s.hi = min(s.lo, 0.0), max(s.hi, 0.0)
        s.hist = np.zeros(2 * HIST_BINS, np.int64)
    for x in wrap(batches, "calibration pass 2/2 (histograms)"):
        for name, value in zip(tensors, sess.run(tensors, {inp: x}), strict=True):
            s = stats[name]
            a = s.absmax
            s.hist += np.histogram(value, bins=2 * HIST_BINS, range=(-a, a))[0]
    return stats


def percentile_threshold(folded: np.ndarray, absmax: float, percentile: float) -> float:
    cdf = np.cumsum(folded) / max(folded.sum(), 1)
    idx = int(np.searchsorted(cdf, percentile / 100.0))
    return absmax * min(idx + 1, len(folded)) / len(folded)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def entropy_threshold(folded: np.ndarray, absmax: float, stride: int = 2) -> float:
    """The clipping threshold minimising KL(clipped reference ‖ its QUANT_LEVELS-level version)."""
    n = len(folded)
    hist = folded.astype(np.float64)
    if hist.sum() == 0:
        return absmax
    best_i, best_kl = n, np.inf
    for i in range(QUANT_LEVELS, n + 1, stride):
        ref = hist[:i].copy()
        ref[-1] += hist[i:].sum()  # clipped samples land in the last kept bin
        # Merge the i kept bins into QUANT_LEVELS levels, then spread each level's mass back
        # uniformly over the bins that had samples: the histogram the quantised tensor would show.
        edges = np.linspace(0, i, QUANT_LEVELS + 1).astype(np.int64)
        src = hist[:i]
        nonzero = src > 0
        level = np.repeat(np.arange(QUANT_LEVELS), np.diff(edges))
        mass = np.bincount(level, weights=src, minlength=QUANT_LEVELS)
        count = np.bincount(level, weights=nonzero, minlength=QUANT_LEVELS)
        quant = np.where(nonzero, mass[level] / np.maximum(count[level], 1), 0.0)
        if not np.any(quant):
            continue
        kl = _kl(ref, np.where(ref > 0, np.maximum(quant, 1e-9), quant))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return absmax * best_i / n


def compute_ranges(stats: dict[str, TensorStats], method: str, percentile: float = 99.99) -> dict[str, Range]:
    """Turn observed statistics into clipping ranges with one of METHODS."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")
    ranges = {}
    for name, s in stats.items():
        if method == "minmax":
            t = s.absmax
        elif method == "percentile":
            t = percentile_threshold(s.folded(), s.absmax, percentile)
        else:
            t = entropy_threshold(s.folded(), s.absmax)
        ranges[name] = Range(max(s.lo, -t), min(s.hi, t))
    return ranges
