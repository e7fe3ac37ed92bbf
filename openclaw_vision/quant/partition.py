"""Hybrid INT8/float partition: the fewest layers kept in float that make the gate pass.

Layers are kept float in sensitivity order (most damaging first). k = 0 (everything INT8) is
tried first; if it fails, k doubles until the gate passes and a bisection then finds the
smallest passing k. Each trial is scored on every gate resolution and recorded for the report.
LayerNorm, Softmax, GELU, residual Adds and the attention QKᵀ/PV products are never
candidates: they are float by construction (see graph.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.gate import GateSpec, Metrics
from .evaluate import Evaluator, worst


@dataclass
class Trial:
    keep_float: int
    metrics: dict[str, Metrics]

    def passed(self, gate: GateSpec) -> bool:
        return worst(self.metrics).passes(gate)


@dataclass
class Partition:
    kept_float: list[str]
    passed: bool
    metrics: dict[str, Metrics]
    trials: list[Trial] = field(default_factory=list)


def choose(
    order: list[str],
    build: Callable[[frozenset[str]], bytes],
    evaluator: Evaluator,
    gate: GateSpec,
    max_float: int,
    log: Callable[[str], None] = lambda s: None,
    all_int8: dict[str, Metrics] | None = None,
) -> Partition:
    """Smallest k ≤ max_float such that keeping order[:k] float passes; the best failure otherwise.

    `all_int8`: the k = 0 scores when the caller already has them.
    """
    trials: dict[int, Trial] = {0: Trial(0, all_int8)} if all_int8 else {}

    def trial(k: int) -> Trial:
        if k not in trials:
            t = Trial(k, evaluator.gate_rows(build(frozenset(order[:k]))))
            w = worst(t.metrics)
            log(
                f"keep {k} float: mean cos {w.mean_cosine:.6f} min {w.min_cosine:.6f} "
                f"nn {w.nn_agreement:.3f} -> {'pass' if w.passes(gate) else 'fail'}"
            )
            trials[k] = t
        return trials[k]

    max_float = min(max_float, len(order))
    lo, hi = -1, None  # lo: largest known failing k; hi: smallest known passing k
    k = 0
    while k <= max_float:
        if trial(k).passed(gate):
            hi = k
            break
        lo = k
        if k == max_float:
            break
        k = min(max(1, 2 * k), max_float)
    if hi is None:
        best = max(trials.values(), key=lambda t: worst(t.metrics).mean_cosine)
        return Partition(
            order[: best.keep_float], False, best.metrics, sorted(trials.values(), key=lambda t: t.keep_float)
        )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if trial(mid).passed(gate):
            hi = mid
        else:
            lo = mid
    chosen = trials[hi]
    return Partition(order[:hi], True, chosen.metrics, sorted(trials.values(), key=lambda t: t.keep_float))
