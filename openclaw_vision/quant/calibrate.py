"""Activation ranges for static INT8: observe the float model on calibration tensors, in one pass.

One pass over the calibration tensors through ONNX Runtime, with every quantised layer's input
added as a graph output (`observation_model`). Each tensor's statistics are its extremes and a
histogram of 2 × HIST_BINS bins over [-limit, limit]; when a batch exceeds the limit, the limit
doubles and neighbouring bins merge pairwise (exact, no pass over the data again), so the bins
stay within a factor of two of the final |max| — one pass instead of the former two (a pass of
ViT-bigG-14 over 64 frames is minutes here). The same pass is channel-aware: each tensor's per-channel
|max| (last axis) and, for the tensors asked for, a bounded sample of rows (tokens) that keeps the
rows with the largest |x|; outlier migration (smooth.py) chooses its factors from them. Three ways
to turn the statistics into a per-tensor clipping range:

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

import numpy as np
import onnx

METHODS = ("minmax", "percentile", "entropy")
HIST_BINS = 2048  # per side of zero
QUANT_LEVELS = 128  # magnitude levels of signed symmetric INT8
#: Activations returned per observation run are held at once: batch so they stay under this.
OBSERVE_BYTES = 768 << 20


@dataclass
class TensorStats:
    lo: float
    hi: float
    hist: np.ndarray | None = None  # (2 * HIST_BINS,) counts over [-limit, limit]
    limit: float | None = None  # the histogram's half-range; None: absmax
    channel_absmax: np.ndarray | None = None  # (C,) |max| of each channel of the last axis
    rows: np.ndarray | None = None  # (≤ rows_kept, C) sampled rows, the largest-|x| ones included
    rows_kept: int = 0  # 0: no row sample

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi), 1e-12)

    @property
    def span(self) -> float:
        return self.limit if self.limit is not None else self.absmax

    def folded(self) -> np.ndarray:
        """Histogram of |x| over [0, span]: HIST_BINS bins."""
        h = self.hist
        return h[HIST_BINS:] + h[:HIST_BINS][::-1]

    def update(self, values: np.ndarray) -> None:
        """Add a batch of samples: extremes, and the histogram (its range doubled as often as needed)."""
        lo, hi = float(values.min()), float(values.max())
        self.lo, self.hi = min(self.lo, lo, 0.0), max(self.hi, hi, 0.0)
        flat = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(1, -1)
        chan = np.abs(flat).max(axis=0)
        self.channel_absmax = chan if self.channel_absmax is None else np.maximum(self.channel_absmax, chan)
        if self.rows_kept:
            self._sample_rows(flat)
        a = max(abs(lo), abs(hi))
        if self.hist is None:
            self.limit = a if a > 0 else 1e-12
            self.hist = np.zeros(2 * HIST_BINS, np.int64)
        while a > self.limit:
            self.hist = _double_range(self.hist)
            self.limit *= 2.0
        self.hist += np.histogram(values, bins=2 * HIST_BINS, range=(-self.limit, self.limit))[0]

    def _sample_rows(self, flat: np.ndarray) -> None:
        """Keep at most `rows_kept` rows: the quarter with the largest |x| (outlier tokens are few and decide
        the per-tensor scale), the rest evenly spread over what was seen (deterministic)."""
        rows = flat if self.rows is None else np.concatenate([self.rows, flat])
        if len(rows) <= self.rows_kept:
            self.rows = np.array(rows, np.float32)
            return
        peak = np.abs(rows).max(axis=1)
        top = np.argsort(peak)[::-1][: self.rows_kept // 4]
        rest = np.setdiff1d(np.arange(len(rows)), top)
        even = rest[np.linspace(0, len(rest) - 1, self.rows_kept - len(top)).round().astype(int)]
        self.rows = np.array(rows[np.sort(np.concatenate([top, even]))], np.float32)


def _double_range(hist: np.ndarray) -> np.ndarray:
    """The same counts over twice the range: old bin i lands in new bin HIST_BINS/2 + i//2 (exact)."""
    out = np.zeros_like(hist)
    out[HIST_BINS // 2 : HIST_BINS // 2 + HIST_BINS] = hist.reshape(-1, 2).sum(axis=1)
    return out


@dataclass(frozen=True)
class Range:
    """Clipping range of one activation tensor; always contains 0."""

    lo: float
    hi: float

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi), 1e-12)


def observation_model(model: onnx.ModelProto, tensors: list[str]) -> onnx.ModelProto:
    """A copy of `model` (its graph; weights stay where they are) with `tensors` added as outputs."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for name in tensors:
        if name not in have:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return out


def observe_batch(sess, tensors: list[str], bytes_per_image: int | None = None) -> int:
    """Images per observation run so the returned activations stay under OBSERVE_BYTES (1 to 8)."""
    if bytes_per_image is None:
        shapes = {o.name: o.shape for o in sess.get_outputs()}
        bytes_per_image = 0
        for name in tensors:
            dims = shapes.get(name) or []
            known = [d for d in dims[1:] if isinstance(d, int)]
            if len(known) != len(dims) - 1:
                return 1  # shapes unknown: one image at a time is always safe
            bytes_per_image += 4 * int(np.prod(known, dtype=np.int64))
    return int(np.clip(OBSERVE_BYTES // max(bytes_per_image, 1), 1, 8))


def collect_stats(
    sess, tensors: list[str], batches: Iterable[np.ndarray], progress=None, rows: dict[str, int] | None = None
) -> dict[str, TensorStats]:
    """Run the observation session over `batches` once; returns {tensor: TensorStats}.

    `sess` is an ONNX Runtime session of `observation_model(...)`. `progress(iterable, desc)` wraps the loop.
    `rows`: {tensor: rows to keep} for the tensors whose row sample is wanted (smooth.py).
    """
    wrap = progress or (lambda it, desc: it)
    inp = sess.get_inputs()[0].name
    stats = {t: TensorStats(0.0, 0.0, rows_kept=(rows or {}).get(t, 0)) for t in tensors}
    for x in wrap(batches, "calibration (one pass)"):
        for name, value in zip(tensors, sess.run(tensors, {inp: x}), strict=True):
            stats[name].update(value)
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
            t = min(percentile_threshold(s.folded(), s.span, percentile), s.absmax)
        else:
            t = min(entropy_threshold(s.folded(), s.span), s.absmax)
        ranges[name] = Range(max(s.lo, -t), min(s.hi, t))
    return ranges
