"""`openclaw-vision quantize`: FP32 ONNX + calibration frames → gated hybrid INT8 Q/DQ model + report.

Phases, in order (each timed, with its own peak RSS, in the report):
1. frames → preprocessed calibration / held-out tensors, one frame at a time;
2. one FP32 session: activation statistics on the calibration frames (one pass, channel-aware) and
   the reference embeddings of the held-out frames; then it is closed;
3. outliers (on by default): migration (smooth.py: per-channel factors folded into the LayerNorms before the
   QKV / FC1 / proj GEMMs and into their weights, alpha per layer by the local cosine) and the FC2 split
   (split.py: FC2's outlier hidden units computed apart in FP32); the changed activations' ranges measured
   again (one FP32 pass over those tensors; a migrated one keeps its minmax range); then every layer's weight
   is quantised once, into the scratch folder (`workspace`);
4. ranges for each calibration method; each scored with every layer INT8 (one INT8 session at a time);
5. sensitivity: the local per-layer SQNR (one pass, any size) and, where affordable, the
   end-to-end sweep (one run per layer); the sweep's ranking drives the partition when it ran;
6. hybrid partition against the gate (real Q/DQ models, one session each);
7. the final model streamed to a temporary folder beside `--out`; batch invariance and a quick
   latency check (one FP32 and one INT8 session); session memory in fresh processes; moved into
   place only if the gate passed.

At no point are two FP32 sessions, or more than one INT8 session, open together; the weights are
on disk once in FP32 and once in INT8 (see workspace.py).

Each phase is a function returning a typed result (`calibration_phase` → Calibration,
`methods_phase` → MethodScore per method, `sensitivity_phase` → Ranking, `partition.choose` →
Partition, `Evaluator.by_runtime`, `checks_phase` → Checks); `quantize` runs them in order and
returns one `QuantResult`, which every entry point (`quantize`, `build.ensure_int8`, the ladder
through the CLI) reads by attribute and `report.write` saves.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..bench.harness import Variant, first_call_s, run_interleaved
from ..core import gate
from ..core.gate import GATE_KEY, GateSpec, Metrics, gate_summary
from ..core.ortsession import session
from ..core.phases import PhaseLog
from ..encoders import gating
from ..models import onnx_files
from . import calibrate, centre, crossmodal, data, memory, partition, sensitivity, shift, smooth, split
from .evaluate import Evaluator, embed, worst
from .graph import quantisable_layers
from .qdq import SCHEMES, build_probe_model, build_qdq_model, build_switch_model
from .runtimes import installed_runtimes, stamp
from .sensitivity import PROBE_FRAMES
from .workspace import Workspace

log = logging.getLogger(__name__)

SWEEP_MODES = ("auto", "always", "never")

#: FP32 work (image count × FLOPs per image) each phase may spend when the frame counts are left to
#: `auto`: ViT-bigG-14 (0.97 TFLOP/image, ~17 s per image with ONNX Runtime on this 2-core machine)
#: gets 16 calibration, 8 held-out and 4 probe frames; ViT-B/32 (8.8 GFLOP) is never cut.
CALIB_BUDGET_FLOP = 16e12
HELDOUT_BUDGET_FLOP = 8e12
PROBE_BUDGET_FLOP = 4e12
MIN_CALIB, MIN_HELDOUT, MIN_PROBE = 16, 8, 2


def _cap(budget: float, flops: float | None, floor: int) -> int:
    """Frames a phase may use within `budget` (0: no limit — unknown or cheap model)."""
    if not flops:
        return 0
    return max(floor, int(budget // flops))


def _flops(meta: dict[str, str]) -> float | None:
    """FLOPs per image from the export's `vision_config` metadata (None for a model exported elsewhere)."""
    try:
        from ..models.configs import VisionConfig

        return float(VisionConfig(**json.loads(meta["vision_config"])).flops_per_image())
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class QuantOptions:
    fp32_model: Path
    calib: Path
    out: Path
    topic: str | None = None
    limit: int = 0  # the first N frames; 0: up to max_frames spread over the recording
    max_frames: int = data.MAX_FRAMES
    method: str = "percentile"
    percentile: float = 99.99
    scheme: str = "s8s8"
    gate: GateSpec = field(default_factory=GateSpec)
    max_float: int = -1  # -1: a quarter of the quantisable layers
    holdout_every: int = 4
    threads: int = 0
    sensitivity: bool = True  # measure it for the report even when every layer passes as INT8
    sweep: str = "auto"  # end-to-end sweep: auto = when its estimated time is within sweep_budget_s
    sweep_budget_s: float = 600.0
    probe_frames: int = 0  # 0: auto (PROBE_FRAMES, fewer for big models)
    calib_frames: int = 0  # 0: auto (every calibration frame, fewer for big models: CALIB_BUDGET_FLOP)
    heldout_frames: int = 0  # 0: auto (every held-out frame, fewer for big models: HELDOUT_BUDGET_FLOP)
    data_threshold: int = onnx_files.EXTERNAL_DATA_THRESHOLD  # INT8 model bytes above which it gets a data file
    measure_memory: bool = True
    text_model: Path | None = None  # FP32 text export for the gate's text term; None: the data home's, if any
    text: bool = True  # False: no text term
    report: Path | None = None  # the report folder (the re-gate set goes there); None: `report_dir`'s default
    partition_runtimes: tuple[str, ...] = ("onnxruntime",)  # the runtimes the partition's gate scores on
    smooth: bool = True  # outlier migration into the LayerNorms before INT8 (smooth.py); False: the plain path
    split: bool = True  # FC2 outlier units to an FP32 side path (split.py); False: the plain path
    centre: bool = True  # asymmetric FC2 inputs shifted to a symmetric range under s8s8 (centre.py); False: plain
    shift: Path | None = None  # the gate's distribution-shift row: another bag or image folder (None: shift.scenes)
    shift_frames: int = 16  # frames of the shift row (0: no shift row)

    @property
    def report_dir(self) -> Path:
        """The report folder: `report`, else beside the model (x.int8.onnx → x.int8.report), so that the
        re-gate set travels with the model when the folder it is in is copied."""
        return self.report or self.out.with_suffix(".report")


#: report.json keys that are the rounded worst metrics (`as_dict` writes them from `worst`).
_WORST_KEYS = ("mean_cosine", "min_cosine", "nn_agreement", "kl")


@dataclass
class QuantResult:
    """What `quantize` returns, read by attribute (cli, build, report); `as_dict()` is report.json (stable keys).

    The verdict and what every caller prints are fields; the report's other sections (calibration,
    trials, sensitivity, memory...) travel in `sections` under their report.json keys."""

    passed: bool
    model: str
    gate: GateSpec
    worst: Metrics
    kept_float: list[str]
    layers: int
    int8_model: str | None
    size_mb: dict[str, float]
    latency_b1_ms: dict[str, float]
    phases: list[dict]
    peak_rss_mb: float
    seconds: float
    sections: dict = field(default_factory=dict)

    def summary(self) -> str:
        """The gate in one line with its bounds, and how many layers stayed float: every pass/fail message."""
        return f"{gate_summary(self.worst, self.gate)}, {len(self.kept_float)}/{self.layers} layers kept float"

    @classmethod
    def load(cls, report_json: Path) -> QuantResult:
        """The result a `quantize` run (often another process: the ladder's child) saved as report.json."""
        r = json.loads(Path(report_json).read_text())
        checks = r["gate"]["checks"]
        own = {f for f in cls.__dataclass_fields__ if f not in ("gate", "worst", "sections")}
        return cls(
            **{k: r[k] for k in own},
            gate=GateSpec(**{c["metric"]: c["bound"] for c in checks if c["bound"] is not None}),
            worst=Metrics(**{c["metric"]: c["value"] for c in checks}),
            sections={k: v for k, v in r.items() if k not in own and k not in _WORST_KEYS},
        )

    def as_dict(self) -> dict:
        w = self.worst
        return {
            "passed": self.passed,
            "model": self.model,
            "int8_model": self.int8_model,
            "mean_cosine": round(w.mean_cosine, 7),
            "min_cosine": round(w.min_cosine, 7),
            "nn_agreement": round(w.nn_agreement, 4),
            "kl": float(f"{w.kl:.4g}"),
            "kept_float": self.kept_float,
            "layers": self.layers,
            "size_mb": self.size_mb,
            "latency_b1_ms": self.latency_b1_ms,
            "phases": self.phases,
            "peak_rss_mb": self.peak_rss_mb,
            "seconds": self.seconds,
            **self.sections,
        }


def _progress():
    try:
        from tqdm import tqdm
    except ImportError:  # progress bars are a nicety, not a dependency of the result
        return None
    return lambda it, desc: tqdm(it, desc=desc, leave=False, disable=None)


def _latency_ms(sessions: dict, x: np.ndarray, budget_s: float = 20.0, rounds: int = 3) -> dict[str, float]:
    """Median batch-1 latency of each session, interleaved round by round (indicative; bench is the reference):
    the package's one timing harness (stats.run_interleaved). Iterations per round shrink for slow models so
    the check takes about `budget_s` in total."""
    variants = []
    for k, sess in sessions.items():
        feed, out = {sess.get_inputs()[0].name: x}, [sess.get_outputs()[0].name]
        variants.append(Variant(k, lambda sess=sess, feed=feed, out=out: sess.run(out, feed)))
    first = first_call_s(variants)  # also the warm-up
    iters = int(np.clip(budget_s / rounds / max(sum(first.values()), 1e-3), 1, 5))
    run_interleaved(variants, rounds, iters, warmup=0)
    return {v.name: round(float(np.median(v.samples_ms)), 2) for v in variants}


@dataclass
class Calibration:
    """The one FP32 pass: activation ranges per calibration method, the held-out reference embeddings, its cost."""

    ranges: dict[str, dict]
    reference: dict[str, np.ndarray]
    images_per_run: int
    fp32_s_per_image: float
    stats: dict = field(default_factory=dict)  # {tensor: TensorStats} kept for the migration (row samples)


def calibration_phase(ws: Workspace, layers, qdata, opts: QuantOptions, progress) -> Calibration:
    """Activation statistics on the calibration frames and reference embeddings in one FP32 session, then closed.
    With migration on, the migratable activations also keep a row sample (smooth.ROWS rows each)."""
    tensors = sorted({layer.activation for layer in layers})
    rows = {g.activation: smooth.ROWS for g in smooth.groups(ws.graph, layers)} if opts.smooth else {}
    # the split's per-channel |max|; the outlier phase runs only with these (centring: only where it may shift)
    keep = bool(rows) or opts.split or (opts.centre and bool(centre.candidates(layers, opts.scheme)))
    observe = ws.write(calibrate.observation_model(ws.graph, tensors), "observe")
    obs = session(observe, opts.threads, level="basic", quiet=True)
    batch = calibrate.observe_batch(obs, tensors)
    t = time.perf_counter()
    stats = calibrate.collect_stats(obs, tensors, qdata.batches(batch), progress, rows)
    per_image = (time.perf_counter() - t) / qdata.calibration_frames
    # same batch: ONNX Runtime keeps every graph output of a run alive until it ends, fetched or not
    reference = {res: embed(obs, x, batch) for res, x in qdata.heldout.items()}
    del obs
    ranges = {m: calibrate.compute_ranges(stats, m, opts.percentile) for m in calibrate.METHODS}
    return Calibration(ranges, reference, batch, per_image, stats if keep else {})


@dataclass
class Outliers:
    """What the outlier phase did: every migratable activation's `smooth.Migration` (alpha None: left as it was),
    each `split.Split` and each `centre.Centre`."""

    migrations: list = field(default_factory=list)
    splits: list = field(default_factory=list)
    centres: list = field(default_factory=list)


def outlier_phase(ws: Workspace, layers, qdata, cal: Calibration, opts: QuantOptions, progress) -> Outliers:
    """Outlier migration (smooth.py: alpha per migratable activation) and the FC2 split (split.py: outlier hidden
    units to an FP32 side path), folded into the workspace's FP32 graph in one rewrite; the changed activations'
    ranges measured again (one FP32 pass over those tensors, and over every FC2 input when centring is on); then
    the asymmetric FC2 inputs centred (centre.py: s8s8 only) with the ranges of that pass."""
    if not cal.stats:
        return Outliers()
    reader = ws.reader()
    migrations = smooth.plan(ws.graph, layers, cal.stats, reader.array, opts.scheme, progress) if opts.smooth else []
    splits = split.plan(layers, cal.stats) if opts.split else []
    cal.stats = {}  # the row samples are spent (ViT-bigG-14: hundreds of MB)
    moved = [m for m in migrations if m.alpha is not None]
    fc2 = {layer.activation for layer in centre.candidates(layers, opts.scheme)} if opts.centre else set()
    if not moved and not splits and not fc2:
        return Outliers(migrations, splits)
    graph, weights = smooth.rewrite(ws.graph, migrations, reader.array)
    graph, weights = split.rewrite(graph, splits, weights, reader.array)
    ws.replace(graph, weights)
    tensors = sorted({m.group.activation for m in moved} | {sp.fc2.activation for sp in splits} | fc2)
    obs = session(ws.write(calibrate.observation_model(ws.graph, tensors), "observe-rewritten"), opts.threads,
                  level="basic", quiet=True)  # fmt: skip
    stats = calibrate.collect_stats(obs, tensors, qdata.batches(calibrate.observe_batch(obs, tensors)), progress)
    del obs
    measured = {m: calibrate.compute_ranges(stats, m, opts.percentile) for m in calibrate.METHODS}
    centres = centre.plan(layers, measured[opts.method], opts.scheme) if opts.centre else []
    if centres:
        ws.replace(centre.rewrite(ws.graph, centres, ws.reader().array), [])
    # A migrated activation keeps its whole range under every method: alpha was chosen for that scale (smooth.py),
    # and what remains widest there is what migration left on purpose, e.g. the massive-activation tokens, 4 values
    # in 263k a frame on ViT-L/14: percentile 99.99 clipped them, and with them the attention sinks every later
    # block reads (mean cosine 0.974 every layer INT8; the QKV GEMMs kept float: 0.9998). A centred one has each
    # method's range of the unshifted tensor, shifted (centre.py says why).
    for m in calibrate.METHODS:
        cal.ranges[m].update(measured[m])
        cal.ranges[m].update({mg.group.activation: measured["minmax"][mg.group.activation] for mg in moved})
        cal.ranges[m].update({ce.layer.activation: ce.shifted(measured[m][ce.layer.activation]) for ce in centres})
    for sp in splits:
        log.info("split %s: units %s (|max| %s, median unit %.3g) to an FP32 side path", sp.fc2.label, sp.units,
                 [round(a, 1) for a in sp.absmax], sp.median)  # fmt: skip
    return Outliers(migrations, splits, centres)


@dataclass
class MethodScore:
    """One calibration method with every layer INT8, scored on the gate's rows."""

    scores: dict[str, Metrics]
    passed: bool

    def as_dict(self) -> dict:
        return {"worst": worst(self.scores).as_dict(), "passed": self.passed, "rows": list(self.scores)}


def methods_phase(evaluator: Evaluator, build, opts: QuantOptions, big: bool) -> dict[str, MethodScore]:
    """Each calibration method, every layer INT8 (a big model: the methods not chosen on the native row only)."""
    out = {}
    for m in calibrate.METHODS:
        rows = [evaluator.rows[0].name] if big and m != opts.method else None
        scored = evaluator.gate_rows(build(frozenset(), m), rows)
        out[m] = MethodScore(scored, worst(scored).passes(opts.gate))
        log.info("calibration %s, all layers INT8: %s", m, worst(scored).as_dict())
    return out


@dataclass
class Ranking:
    """The order in which the partition keeps layers float, and the measurements behind it."""

    order: list[str]
    local: list = field(default_factory=list)  # sensitivity.LocalError per layer (one pass)
    sweep: list = field(default_factory=list)  # sensitivity.LayerSensitivity per layer (end to end)
    sweep_cost: float = 0.0  # its estimated seconds


def sensitivity_phase(ws, layers, qdata, cal: Calibration, evaluator, opts, probe_n, needed, phases, progress):
    """Local SQNR in one pass and, where affordable, the end-to-end sweep, whose ranking then wins."""
    rank = Ranking([layer.node for layer in layers])
    rows = 2 if gate.SHIFT_ROW in qdata.heldout else 1
    rank.sweep_cost = rows * len(layers) * min(sensitivity.SWEEP_FRAMES, len(qdata.native)) * cal.fp32_s_per_image * 1.5
    run_sweep = opts.sweep == "always" or (opts.sweep == "auto" and rank.sweep_cost <= opts.sweep_budget_s)
    if not needed:
        return rank
    ranges = cal.ranges[opts.method]
    with phases.phase("sensitivity, local (one pass)"):
        probe = build_probe_model(ws.graph, layers, ranges, opts.scheme, weights=ws.weights)
        probe_sess = session(ws.write(probe, "probe"), opts.threads, quiet=True)
        probe_x = data.spread(qdata.calibration, probe_n)
        if gate.SHIFT_ROW in qdata.heldout:  # as the sweep: a layer whose range only the calibration source's
            # frames fit must rank high, also where the sweep is too dear to run (the big towers)
            shifted = qdata.heldout[gate.SHIFT_ROW]
            probe_x = np.concatenate([probe_x, data.spread(shifted, max(1, min(len(shifted), probe_n // 2)))])
        # one image per run: ONNX Runtime schedules the probe branches late, so a run holds
        # nearly every activation of the network at once (ViT-L-14: +1.7 GB at batch 4, +0.4 GB at 1)
        rank.local = sensitivity.local(layers, probe_sess, (probe_x[i : i + 1] for i in range(len(probe_x))))
        del probe_sess
        rank.order = sensitivity.local_ranking(rank.local)
    if run_sweep:
        with phases.phase("sensitivity, end-to-end sweep"):
            switch = build_switch_model(ws.graph, layers, ranges, opts.scheme, ws.weights)
            path = ws.write(switch, "switch")
            rows = [next(iter(qdata.heldout))] + ([gate.SHIFT_ROW] if gate.SHIFT_ROW in qdata.heldout else [])
            # the shift row too: a layer whose range only the calibration source's frames fit must rank high
            runs = [sensitivity.sweep(layers, path, evaluator, row, progress) for row in rows]
            rank.sweep = sensitivity.worst_per_layer(*runs)
            rank.order = sensitivity.ranking(rank.sweep)
    return rank


@dataclass
class Checks:
    """The written model's checks: batch invariance, an indicative latency, session memory (fresh processes)."""

    batch_invariance_max_abs: float
    latency_b1_ms: dict[str, float]
    memory: dict = field(default_factory=dict)


def checks_phase(int8_path: Path, qdata, opts: QuantOptions, big: bool, phases: PhaseLog) -> Checks:
    with phases.phase("checks: batch invariance and latency"):
        int8_sess = session(int8_path, opts.threads, quiet=True)
        few = qdata.native[: 4 if big else 8]
        one, eight = embed(int8_sess, few, batch=1), embed(int8_sess, few, batch=8)
        fp32_sess = session(opts.fp32_model, opts.threads, quiet=True)
        latency = _latency_ms({"fp32": fp32_sess, "int8": int8_sess}, qdata.native[:1])
        del int8_sess, fp32_sess
    mem = {}
    if opts.measure_memory:
        with phases.phase("session memory (fresh processes)"):
            mem = {"fp32": memory.measure(opts.fp32_model), "int8": memory.measure(int8_path)}
    return Checks(float(f"{np.abs(one - eight).max():.3g}"), latency, mem)


#: Held-out frames per row kept in the re-gate set (float16 224² pixels: ~0.3 MB each).
REGATE_FRAMES = 16


def _candidate_builder(ws: Workspace, layers, ranges: dict, opts: QuantOptions):
    """(layers kept float, calibration method) → the path of that candidate Q/DQ model in the workspace."""
    count = itertools.count(1)

    def build(keep: frozenset[str], method: str = opts.method) -> Path:
        model = build_qdq_model(ws.graph, layers, ranges[method], opts.scheme, keep, weights=ws.weights)
        return ws.write(model, f"candidate{next(count)}")

    return build


def final_model(ws: Workspace, layers, cal: Calibration, part, qdata, opts: QuantOptions):
    """The chosen partition as one Q/DQ model, with its calibration and the partition's verdict in its metadata."""
    w = worst(part.metrics)
    calibration = {"method": opts.method, "percentile": opts.percentile, "frames": qdata.calibration_frames,
                   "source": str(opts.calib)}  # fmt: skip
    return build_qdq_model(
        ws.graph, layers, cal.ranges[opts.method], opts.scheme, frozenset(part.kept_float),
        metadata={"quant_calibration": json.dumps(calibration),
                  GATE_KEY: json.dumps({"passed": part.passed, **w.as_dict()})},
        weights=ws.weights,
    )  # fmt: skip


def save_regate(folder: Path, run: str, qdata, cal: Calibration, text_ref) -> Path:
    """The re-gate set in the report folder: up to REGATE_FRAMES held-out frames per row with their FP32
    references (and the gate's label embeddings), so a runtime meeting this model on another ISA class
    can gate it there without the bag (encoders/gating.py)."""
    rows = {}
    for res, pixels in qdata.heldout.items():
        keep = np.linspace(0, len(pixels) - 1, min(REGATE_FRAMES, len(pixels))).round().astype(int)
        rows[res] = (pixels[keep], cal.reference[res][keep])
    labels = text_ref.embeddings if text_ref is not None else None
    scale = text_ref.logit_scale if text_ref is not None else 0.0
    return gating.save_regate_set(folder, run, rows, labels, scale)


def _sizes(fp32: Path, int8: Path) -> dict[str, float]:
    fp32_bytes, int8_bytes = onnx_files.files_size(fp32), onnx_files.files_size(int8)
    return {"fp32": round(fp32_bytes / 1e6, 2), "int8": round(int8_bytes / 1e6, 2),
            "cut_percent": round(100 * (1 - int8_bytes / fp32_bytes), 1)}  # fmt: skip


@dataclass
class Found:
    """Everything the phases measured, for the report's sections."""

    src: Source
    qdata: data.QuantData
    cal: Calibration
    text_ref: crossmodal.TextReference | None
    text_note: str
    evaluator: Evaluator
    methods: dict[str, MethodScore]
    rank: Ranking
    part: partition.Partition
    by_runtime: dict
    checks: Checks
    max_float: int
    int8_files: list[str]
    outliers: Outliers = field(default_factory=Outliers)


def _calibration_section(opts: QuantOptions, f: Found) -> dict:
    caps = {"calibration": f.src.calib_cap, "heldout": f.src.held_cap, "probe": f.src.probe_n}
    cut = (f.src.calib_cap or f.src.held_cap) and not (opts.calib_frames or opts.heldout_frames)
    return {
        "method": opts.method, "percentile": opts.percentile, "source": str(opts.calib),
        "frames": f.qdata.calibration_frames, "heldout_frames": len(f.qdata.native), "passes": 1,
        "images_per_run": f.cal.images_per_run, "frame_caps": caps, "flops_per_image": f.src.flops,
        "note": "frame counts cut to the FP32 compute budget (big model)" if cut else "",
    }  # fmt: skip


def _gate_sections(opts: QuantOptions, f: Found) -> dict:
    w = worst(f.part.metrics)
    checks = [{**asdict(c), "requirement": c.requirement(), "value": getattr(w, c.metric)} for c in opts.gate.checks()]
    return {
        "gate": {
            "mean_cosine": opts.gate.mean_cosine, "min_cosine": opts.gate.min_cosine,
            "nn_agreement": opts.gate.nn_agreement, "checks": checks,
            "zero_shot_top1": opts.gate.zero_shot_top1 if f.text_ref else None,
            "rows": [r.name for r in f.evaluator.rows], "resolutions": list(f.qdata.heldout),
        },
        "collapse": {
            "image": float(f"{w.collapse:.4g}"), "text": crossmodal.text_term(),
            "cmcd": float(f"{w.collapse + crossmodal.text_term():.4g}"), "text_note": crossmodal.TEXT_TERM_NOTE,
        },
        "zero_shot": {
            "top1_agreement": w.zero_shot_top1,
            "kl": None if w.zero_shot_kl is None else float(f"{w.zero_shot_kl:.4g}"),
            "note": f.text_note, **(f.text_ref.describe() if f.text_ref else {}),
        },
        "per_resolution": {res: m.as_dict() for res, m in f.part.metrics.items()},
        "gate_by_runtime": f.by_runtime,
        "shift": {"row": gate.SHIFT_ROW, "source": f.qdata.shift_source,
                  "frames": len(f.qdata.heldout.get(gate.SHIFT_ROW, ())),
                  "gap_vs_native": gate.shift_gap(f.part.metrics, next(iter(f.qdata.heldout)))},
        "regate": {"set": gate.REGATE_SET, "frames_per_row": REGATE_FRAMES,
                   "note": "held-out pixels (float16) and FP32 references: a runtime re-gates here on another ISA"},
    }  # fmt: skip


def _sensitivity_sections(opts: QuantOptions, f: Found) -> dict:
    local, sens = f.rank.local, f.rank.sweep
    agree = None
    if local and sens:
        agree = sensitivity.rank_agreement(sensitivity.local_ranking(local), sensitivity.ranking(sens))
    return {
        "ranking": "end-to-end sweep" if sens else ("local SQNR" if local else "graph order (no sensitivity run)"),
        "sweep": {"ran": bool(sens), "mode": opts.sweep, "estimated_s": round(f.rank.sweep_cost, 1),
                  "budget_s": opts.sweep_budget_s},
        "sensitivity": [s.as_dict() for s in sens],
        "sensitivity_by_role": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "role").items()},
        "sensitivity_by_block": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "block").items()},
        "sensitivity_local": [r.as_dict() for r in local],
        "sensitivity_local_frames": len(data.spread(f.qdata.calibration, f.src.probe_n)) if local else 0,
        "sensitivity_blocks": sensitivity.block_table(local),
        "rank_agreement": None if agree is None else round(agree, 3),
    }  # fmt: skip


def _migration_section(opts: QuantOptions, f: Found) -> dict:
    """Each migrated layer with its alpha (and each migratable one left as it was), for the report."""
    migrations = f.outliers.migrations
    moved = [m for m in migrations if m.alpha is not None]
    return {"on": opts.smooth, "migrated": len(moved), "migratable": len(migrations),
            "layers": [m.as_dict() for m in migrations]}  # fmt: skip


def _vision_config(meta: dict[str, str]):
    """The export's VisionConfig (tokens, width: what FLOPs are counted in), None when it does not say."""
    from ..models.configs import VisionConfig

    try:
        return VisionConfig(**json.loads(meta["vision_config"]))
    except (KeyError, TypeError, ValueError):
        return None


def layer_flops(layers, meta: dict[str, str]) -> dict[str, float]:
    """GEMM FLOPs per image of each quantisable layer, from the export's vision_config (equal weights when the
    model does not say its shape): what the INT8 share is measured in."""
    cfg = _vision_config(meta)
    if cfg is None:
        return {layer.node: 1.0 for layer in layers}
    t, w = cfg.tokens, cfg.width
    per_role = {"qkv": 2 * t * w * 3 * w, "attn_out": 2 * t * w * w, "mlp_fc": 2 * t * w * cfg.mlp_dim,
                "mlp_proj": 2 * t * w * cfg.mlp_dim, "patch_embed": 2 * cfg.grid**2 * 3 * cfg.patch_size**2 * w,
                "proj": 2 * w * cfg.embed_dim}  # fmt: skip
    return {layer.node: float(per_role.get(layer.role, 2 * t * w * w)) for layer in layers}


def int8_flop_share(layers, kept_float, meta: dict[str, str], split_units: int = 0) -> float:
    """The share of the GEMM FLOPs that run INT8 (1.0: none kept float). The FC2 split's side paths (split.py:
    two GEMMs of width × units per token) count as float."""
    flops = layer_flops(layers, meta)
    cfg = _vision_config(meta)
    side = 4.0 * cfg.tokens * cfg.width * split_units if cfg is not None else 0.0
    total = sum(flops.values()) + side
    return 1.0 - (sum(flops[n] for n in kept_float) + side) / total if total else 1.0


def sections(opts: QuantOptions, f: Found) -> dict:
    """report.json's sections beyond the verdict (stable keys: report.py and the tests read them)."""
    layers, part = f.src.layers, f.part
    random_init = "random" in f.src.meta.get("model_id", "")
    return {
        "model_note": "random-init weights (no download): accuracy numbers describe this model, not real CLIP"
        if random_init else "checkpoint weights",
        "fp32_model": str(opts.fp32_model), "int8_files": f.int8_files, "scheme": opts.scheme,
        "calibration": _calibration_section(opts, f),
        **_gate_sections(opts, f),
        "quantised": len(layers) - len(part.kept_float),
        "kept_float_labels": [next(x.label for x in layers if x.node == n) for n in part.kept_float],
        "float_by_construction": "LayerNormalization, Softmax, GELU, residual Add, attention QK^T and PV MatMuls",
        "migration": _migration_section(opts, f),
        "split": {"on": opts.split, "layers": [sp.as_dict() for sp in f.outliers.splits]},
        "centre": {"on": opts.centre, "layers": [ce.as_dict() for ce in f.outliers.centres]},
        "int8_flop_share": round(int8_flop_share(f.src.layers, part.kept_float, f.src.meta,
                                                 sum(len(sp.units) for sp in f.outliers.splits)), 4),
        "max_float": f.max_float,
        "trials": [{"keep_float": t.keep_float, **worst(t.metrics).as_dict(), "passed": t.passed(opts.gate)}
                   for t in part.trials],
        "methods": {m: r.as_dict() for m, r in f.methods.items()},
        **_sensitivity_sections(opts, f),
        "memory": f.checks.memory, "batch_invariance_max_abs": f.checks.batch_invariance_max_abs,
        "fp32_seconds_per_image": round(f.cal.fp32_s_per_image, 3),
    }  # fmt: skip


def _check(opts: QuantOptions) -> None:
    for value, known, what in ((opts.scheme, SCHEMES, "scheme"), (opts.method, calibrate.METHODS, "calibration method"),
                               (opts.sweep, SWEEP_MODES, "sweep mode")):  # fmt: skip
        if value not in known:
            raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(known)}")
    onnx_files.check_data_files(opts.fp32_model)


@dataclass
class Source:
    """What the FP32 file says about itself, and the frame counts its compute budget allows."""

    meta: dict[str, str]
    layers: list
    flops: float | None
    calib_cap: int
    held_cap: int
    probe_n: int

    @property
    def model_id(self) -> str:
        return self.meta.get("model_id", "")

    @classmethod
    def read(cls, opts: QuantOptions) -> Source:
        graph = onnx_files.load_graph(opts.fp32_model)
        meta = onnx_files.metadata_of(graph)
        if meta.get("precision", "fp32") != "fp32":
            raise ValueError(f"{opts.fp32_model} is a {meta['precision']} model; quantize the FP32 export")
        flops = _flops(meta)
        probe = opts.probe_frames or min(PROBE_FRAMES, _cap(PROBE_BUDGET_FLOP, flops, MIN_PROBE) or PROBE_FRAMES)
        calib = opts.calib_frames or _cap(CALIB_BUDGET_FLOP, flops, MIN_CALIB)
        held = opts.heldout_frames or _cap(HELDOUT_BUDGET_FLOP, flops, MIN_HELDOUT)
        return cls(meta, quantisable_layers(graph), flops, calib, held, probe)


def read_phase(opts: QuantOptions, src: Source, frames, progress) -> data.QuantData:
    """The frames, preprocessed and split (only what the caps keep is read, spread over the recording).
    The held-out pixels are rounded to float16 here, before any reference is taken: they are stored so
    in the re-gate set (encoders/gating.py), and the references must belong to exactly those pixels."""
    spread = opts.max_frames
    if src.calib_cap and src.held_cap and not opts.limit:
        h = opts.holdout_every
        spread = min(spread or 1 << 30, max(-(-src.calib_cap * h // (h - 1)), src.held_cap * h))
    if frames is None:
        frames = data.iter_frames(opts.calib, opts.topic, opts.limit, spread)
    image_size = int(src.meta.get("image_size", 224))
    qdata = data.prepare(frames, image_size, str(opts.calib), opts.holdout_every, progress=progress)
    qdata = qdata.capped(src.calib_cap, src.held_cap)
    if opts.shift_frames:  # another source than the calibration frames, held to the same bounds (quant/shift.py)
        qdata.shift_source, x = shift.heldout(opts.shift, opts.shift_frames, image_size)
        qdata.heldout[gate.SHIFT_ROW] = data.spread(x, src.held_cap)
    qdata.heldout = {k: v.astype(np.float16).astype(np.float32) for k, v in qdata.heldout.items()}
    return qdata


def quantize(opts: QuantOptions, frames=None) -> QuantResult:
    """Run the whole job and return its result (`report.write` saves it). See the module doc.

    `frames`: calibration frames already in memory (any iterable); `opts.calib` is then only their description.
    """
    _check(opts)
    t0, progress, phases = time.perf_counter(), _progress(), PhaseLog()
    src = Source.read(opts)
    layers = src.layers
    max_float = len(layers) // 4 if opts.max_float < 0 else opts.max_float
    with phases.phase("read and preprocess frames"):
        qdata = read_phase(opts, src, frames, progress)
    log.info("%d calibration and %d held-out frames", qdata.calibration_frames, len(qdata.native))
    # A big model: the other calibration methods are scored at the native resolution only.
    big = bool(src.flops) and src.flops * len(qdata.native) * len(qdata.heldout) > HELDOUT_BUDGET_FLOP
    report_dir = opts.report_dir
    with Workspace(opts.fp32_model, opts.out.parent) as ws:
        with phases.phase("FP32: calibration pass and reference embeddings"):
            cal = calibration_phase(ws, layers, qdata, opts, progress)
        with phases.phase("outliers: migration (LayerNorm → GEMM), FC2 split, FC2 centring"):
            outliers = outlier_phase(ws, layers, qdata, cal, opts, progress)
        with phases.phase("quantise weights"):
            ws.quantise_weights(layers, progress, frozenset(ce.layer.weight for ce in outliers.centres))
        text_ref, text_note = (
            crossmodal.find_reference(src.model_id or opts.fp32_model.stem, opts.text_model, opts.threads)
            if opts.text
            else (None, "not computed (--no-text)")
        )
        log.info("zero-shot text term: %s", text_note)
        evaluator = Evaluator(qdata.heldout, cal.reference, opts.threads, text=text_ref,
                              runtimes=opts.partition_runtimes)  # fmt: skip
        build = _candidate_builder(ws, layers, cal.ranges, opts)
        with phases.phase("calibration methods, every layer INT8"):
            methods = methods_phase(evaluator, build, opts, big)
        needed = opts.sensitivity or not worst(methods[opts.method].scores).passes(opts.gate)  # partition needs a rank
        rank = sensitivity_phase(ws, layers, qdata, cal, evaluator, opts, src.probe_n, needed, phases, progress)
        with phases.phase("partition"):
            part = partition.choose(rank.order, build, evaluator, opts.gate, max_float, log.info,
                                    methods[opts.method].scores)  # fmt: skip
        final = final_model(ws, layers, cal, part, qdata, opts)
        with phases.phase("gate on every installed runtime"):
            # as each runtime rounds it, through the node's encoder for it
            by_runtime = evaluator.by_runtime(ws.write(final, "final"), opts.gate, installed_runtimes())
            run = uuid.uuid4().hex[:12]
            stamp(final, by_runtime, gating.report_entry(report_dir, opts.out, run))
            save_regate(report_dir, run, qdata, cal, text_ref)
        with onnx_files.Staged(opts.out) as stage:
            with phases.phase("write the INT8 model"):
                ws.finalize(ws.write(final, "final"), stage.path, opts.data_threshold)
            checks = checks_phase(stage.path, qdata, opts, big, phases)
            sizes = _sizes(opts.fp32_model, stage.path)
            int8_files = [p.name for p in onnx_files.model_files(stage.path)] if part.passed else []
            if part.passed:
                stage.commit()
            elif opts.out.exists():
                onnx_files.remove_model(opts.out)  # a stale model from an earlier passing run must not look current
    found = Found(src, qdata, cal, text_ref, text_note, evaluator, methods, rank, part, by_runtime, checks,
                  max_float, int8_files, outliers)  # fmt: skip
    return QuantResult(
        passed=part.passed, model=src.model_id or opts.fp32_model.stem, gate=opts.gate, worst=worst(part.metrics),
        kept_float=part.kept_float, layers=len(layers), int8_model=str(opts.out) if part.passed else None,
        size_mb=sizes, latency_b1_ms=checks.latency_b1_ms, phases=phases.as_list(), peak_rss_mb=phases.peak_rss_mb,
        seconds=round(time.perf_counter() - t0, 1), sections=sections(opts, found),
    )  # fmt: skip
