"""`openclaw-vision quantize`: FP32 ONNX + calibration frames → gated hybrid INT8 Q/DQ model + report.

Phases, in order (each timed, with its own peak RSS, in the report):
1. frames → preprocessed calibration / held-out tensors, one frame at a time;
2. every layer's weight quantised once, into the scratch folder (`workspace`);
3. one FP32 session: activation statistics on the calibration frames (one pass) and the
   reference embeddings of the held-out frames; then it is closed;
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

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..encoders.onnxruntime import session
from ..models import onnx_files
from ..phases import PhaseLog
from . import calibrate, crossmodal, data, memory, partition, sensitivity
from .evaluate import Evaluator, GateSpec, Metrics, embed, gate_summary, worst
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
    partition_runtimes: tuple[str, ...] = ("onnxruntime",)  # the runtimes the partition's gate scores on


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
    """Median batch-1 latency of each session, interleaved round by round (indicative; bench is the reference).

    Iterations per round shrink for slow models so the check takes about `budget_s` in total.
    """
    name = {k: s.get_inputs()[0].name for k, s in sessions.items()}
    out_name = {k: s.get_outputs()[0].name for k, s in sessions.items()}
    first = {}
    for k, s in sessions.items():
        t = time.perf_counter()
        s.run([out_name[k]], {name[k]: x})
        first[k] = time.perf_counter() - t
    iters = int(np.clip(budget_s / rounds / max(sum(first.values()), 1e-3), 1, 5))
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(iters):
                t = time.perf_counter()
                s.run([out_name[k]], {name[k]: x})
                times[k].append((time.perf_counter() - t) * 1000)
    return {k: round(float(np.median(v)), 2) for k, v in times.items()}


@dataclass
class Calibration:
    """The one FP32 pass: activation ranges per calibration method, the held-out reference embeddings, its cost."""

    ranges: dict[str, dict]
    reference: dict[str, np.ndarray]
    images_per_run: int
    fp32_s_per_image: float


def calibration_phase(ws: Workspace, layers, qdata, opts: QuantOptions, progress) -> Calibration:
    """Activation statistics on the calibration frames and reference embeddings in one FP32 session, then closed."""
    tensors = sorted({layer.activation for layer in layers})
    observe = ws.write(calibrate.observation_model(ws.graph, tensors), "observe")
    obs = session(observe, opts.threads, level="basic", quiet=True)
    batch = calibrate.observe_batch(obs, tensors)
    t = time.perf_counter()
    stats = calibrate.collect_stats(obs, tensors, qdata.batches(batch), progress)
    per_image = (time.perf_counter() - t) / qdata.calibration_frames
    # same batch: ONNX Runtime keeps every graph output of a run alive until it ends, fetched or not
    reference = {res: embed(obs, x, batch) for res, x in qdata.heldout.items()}
    del obs
    ranges = {m: calibrate.compute_ranges(stats, m, opts.percentile) for m in calibrate.METHODS}
    return Calibration(ranges, reference, batch, per_image)


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
    rank.sweep_cost = len(layers) * min(sensitivity.SWEEP_FRAMES, len(qdata.native)) * cal.fp32_s_per_image * 1.5
    run_sweep = opts.sweep == "always" or (opts.sweep == "auto" and rank.sweep_cost <= opts.sweep_budget_s)
    if not needed:
        return rank
    ranges = cal.ranges[opts.method]
    with phases.phase("sensitivity, local (one pass)"):
        probe = build_probe_model(ws.graph, layers, ranges, opts.scheme, weights=ws.weights)
        probe_sess = session(ws.write(probe, "probe"), opts.threads, quiet=True)
        probe_x = data.spread(qdata.calibration, probe_n)
        # one image per run: ONNX Runtime schedules the probe branches late, so a run holds
        # nearly every activation of the network at once (ViT-L-14: +1.7 GB at batch 4, +0.4 GB at 1)
        rank.local = sensitivity.local(layers, probe_sess, (probe_x[i : i + 1] for i in range(len(probe_x))))
        del probe_sess
        rank.order = sensitivity.local_ranking(rank.local)
    if run_sweep:
        with phases.phase("sensitivity, end-to-end sweep"):
            switch = build_switch_model(ws.graph, layers, ranges, opts.scheme, ws.weights)
            native = next(iter(qdata.heldout))
            rank.sweep = sensitivity.sweep(layers, ws.write(switch, "switch"), evaluator, native, progress)
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


def quantize(opts: QuantOptions, frames=None) -> QuantResult:
    """Run the whole job and return its result (`report.write` saves it). See the module doc.

    `frames`: calibration frames already in memory (any iterable); `opts.calib` is then only their description.
    """
    if opts.scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {opts.scheme!r}; choose one of {', '.join(SCHEMES)}")
    if opts.method not in calibrate.METHODS:
        raise ValueError(f"unknown calibration method {opts.method!r}; choose one of {', '.join(calibrate.METHODS)}")
    if opts.sweep not in SWEEP_MODES:
        raise ValueError(f"unknown sweep mode {opts.sweep!r}; choose one of {', '.join(SWEEP_MODES)}")
    onnx_files.check_data_files(opts.fp32_model)
    t0 = time.perf_counter()
    progress = _progress()
    phases = PhaseLog()
    graph = onnx_files.load_graph(opts.fp32_model)
    meta = onnx_files.metadata_of(graph)
    if meta.get("precision", "fp32") != "fp32":
        raise ValueError(f"{opts.fp32_model} is a {meta['precision']} model; quantize the FP32 export")
    image_size = int(meta.get("image_size", 224))
    layers = quantisable_layers(graph)
    del graph
    max_float = len(layers) // 4 if opts.max_float < 0 else opts.max_float
    flops = _flops(meta)
    calib_cap = opts.calib_frames or _cap(CALIB_BUDGET_FLOP, flops, MIN_CALIB)
    held_cap = opts.heldout_frames or _cap(HELDOUT_BUDGET_FLOP, flops, MIN_HELDOUT)
    probe_n = opts.probe_frames or min(PROBE_FRAMES, _cap(PROBE_BUDGET_FLOP, flops, MIN_PROBE) or PROBE_FRAMES)

    with phases.phase("read and preprocess frames"):
        spread = opts.max_frames
        if calib_cap and held_cap and not opts.limit:  # read only what the caps keep, spread over the recording
            h = opts.holdout_every
            spread = min(spread or 1 << 30, max(-(-calib_cap * h // (h - 1)), held_cap * h))
        if frames is None:
            frames = data.iter_frames(opts.calib, opts.topic, opts.limit, spread)
        qdata = data.prepare(frames, image_size, str(opts.calib), opts.holdout_every, progress=progress)
        del frames
        qdata = qdata.capped(calib_cap, held_cap)
    log.info("%d calibration and %d held-out frames", qdata.calibration_frames, len(qdata.native))
    # A big model: the other calibration methods are scored at the native resolution only.
    big = bool(flops) and flops * len(qdata.native) * len(qdata.heldout) > HELDOUT_BUDGET_FLOP

    with Workspace(opts.fp32_model, opts.out.parent) as ws:
        with phases.phase("quantise weights"):
            ws.quantise_weights(layers, progress)

        with phases.phase("FP32: calibration pass and reference embeddings"):
            cal = calibration_phase(ws, layers, qdata, opts, progress)
        ranges, reference, batch, fp32_s_per_image = cal.ranges, cal.reference, cal.images_per_run, cal.fp32_s_per_image
        text_ref, text_note = (
            crossmodal.find_reference(meta.get("model_id", opts.fp32_model.stem), opts.text_model, opts.threads)
            if opts.text
            else (None, "not computed (--no-text)")
        )
        log.info("zero-shot text term: %s", text_note)
        evaluator = Evaluator(qdata.heldout, reference, opts.threads, text=text_ref, runtimes=opts.partition_runtimes)
        built = {"n": 0}

        def build(keep: frozenset[str], method: str = opts.method) -> Path:
            built["n"] += 1
            model = build_qdq_model(ws.graph, layers, ranges[method], opts.scheme, keep, weights=ws.weights)
            return ws.write(model, f"candidate{built['n']}")

        with phases.phase("calibration methods, every layer INT8"):
            methods = methods_phase(evaluator, build, opts, big)
        all_int8 = methods[opts.method].scores

        needed = opts.sensitivity or not worst(all_int8).passes(opts.gate)  # the partition needs a ranking
        rank = sensitivity_phase(ws, layers, qdata, cal, evaluator, opts, probe_n, needed, phases, progress)
        local, sens, order, sweep_cost = rank.local, rank.sweep, rank.order, rank.sweep_cost
        with phases.phase("partition"):
            part = partition.choose(order, build, evaluator, opts.gate, max_float, log.info, all_int8)

        w = worst(part.metrics)
        final = build_qdq_model(
            ws.graph,
            layers,
            ranges[opts.method],
            opts.scheme,
            frozenset(part.kept_float),
            metadata={
                "quant_calibration": json.dumps(
                    {
                        "method": opts.method,
                        "percentile": opts.percentile,
                        "frames": qdata.calibration_frames,
                        "source": str(opts.calib),
                    }
                ),
                "quant_gate": json.dumps({"passed": part.passed, **w.as_dict()}),
            },
            weights=ws.weights,
        )
        with phases.phase("gate on every installed runtime"):
            # as each runtime rounds it, through the node's encoder for it
            by_runtime = evaluator.by_runtime(ws.write(final, "final"), opts.gate, installed_runtimes())
            stamp(final, by_runtime)
        with onnx_files.Staged(opts.out) as stage:
            with phases.phase("write the INT8 model"):
                ws.finalize(ws.write(final, "final"), stage.path, opts.data_threshold)
            checks = checks_phase(stage.path, qdata, opts, big, phases)
            fp32_bytes = onnx_files.files_size(opts.fp32_model)
            int8_bytes = onnx_files.files_size(stage.path)
            int8_files = [p.name for p in onnx_files.model_files(stage.path)]
            if part.passed:
                stage.commit()
            elif opts.out.exists():
                onnx_files.remove_model(opts.out)  # a stale model from an earlier passing run must not look current

    sections = {
        "model_note": "random-init weights (no download): accuracy numbers describe this model, not real CLIP"
        if "random" in meta.get("model_id", "")
        else "checkpoint weights",
        "fp32_model": str(opts.fp32_model),
        "int8_files": int8_files if part.passed else [],
        "scheme": opts.scheme,
        "calibration": {
            "method": opts.method,
            "percentile": opts.percentile,
            "source": str(opts.calib),
            "frames": qdata.calibration_frames,
            "heldout_frames": len(qdata.native),
            "passes": 1,
            "images_per_run": batch,
            "frame_caps": {"calibration": calib_cap, "heldout": held_cap, "probe": probe_n},
            "flops_per_image": flops,
            "note": "frame counts cut to the FP32 compute budget (big model)"
            if (calib_cap or held_cap) and not (opts.calib_frames or opts.heldout_frames)
            else "",
        },
        "gate": {
            "mean_cosine": opts.gate.mean_cosine,
            "min_cosine": opts.gate.min_cosine,
            "nn_agreement": opts.gate.nn_agreement,
            "checks": [
                {**asdict(c), "requirement": c.requirement(), "value": getattr(w, c.metric)} for c in opts.gate.checks()
            ],
            "zero_shot_top1": opts.gate.zero_shot_top1 if text_ref else None,
            "rows": [r.name for r in evaluator.rows],
            "resolutions": list(qdata.heldout),
        },
        "collapse": {
            "image": float(f"{w.collapse:.4g}"),
            "text": crossmodal.text_term(),
            "cmcd": float(f"{w.collapse + crossmodal.text_term():.4g}"),
            "text_note": crossmodal.TEXT_TERM_NOTE,
        },
        "zero_shot": {
            "top1_agreement": w.zero_shot_top1,
            "kl": None if w.zero_shot_kl is None else float(f"{w.zero_shot_kl:.4g}"),
            "note": text_note,
            **(text_ref.describe() if text_ref else {}),
        },
        "per_resolution": {res: m.as_dict() for res, m in part.metrics.items()},
        "gate_by_runtime": by_runtime,
        "quantised": len(layers) - len(part.kept_float),
        "kept_float_labels": [next(x.label for x in layers if x.node == n) for n in part.kept_float],
        "float_by_construction": "LayerNormalization, Softmax, GELU, residual Add, attention QK^T and PV MatMuls",
        "max_float": max_float,
        "trials": [
            {"keep_float": t.keep_float, **worst(t.metrics).as_dict(), "passed": t.passed(opts.gate)}
            for t in part.trials
        ],
        "methods": {m: r.as_dict() for m, r in methods.items()},
        "ranking": "end-to-end sweep" if sens else ("local SQNR" if local else "graph order (no sensitivity run)"),
        "sweep": {
            "ran": bool(sens),
            "mode": opts.sweep,
            "estimated_s": round(sweep_cost, 1),
            "budget_s": opts.sweep_budget_s,
        },
        "sensitivity": [s.as_dict() for s in sens],
        "sensitivity_by_role": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "role").items()},
        "sensitivity_by_block": {k: float(f"{v:.4g}") for k, v in sensitivity.by_group(sens, "block").items()},
        "sensitivity_local": [r.as_dict() for r in local],
        "sensitivity_local_frames": len(data.spread(qdata.calibration, probe_n)) if local else 0,
        "sensitivity_blocks": sensitivity.block_table(local),
        "rank_agreement": round(
            sensitivity.rank_agreement(sensitivity.local_ranking(local), sensitivity.ranking(sens)), 3
        )
        if local and sens
        else None,
        "memory": checks.memory,
        "batch_invariance_max_abs": checks.batch_invariance_max_abs,
        "fp32_seconds_per_image": round(fp32_s_per_image, 3),
    }
    return QuantResult(
        passed=part.passed,
        model=meta.get("model_id", opts.fp32_model.stem),
        gate=opts.gate,
        worst=w,
        kept_float=part.kept_float,
        layers=len(layers),
        int8_model=str(opts.out) if part.passed else None,
        size_mb={
            "fp32": round(fp32_bytes / 1e6, 2),
            "int8": round(int8_bytes / 1e6, 2),
            "cut_percent": round(100 * (1 - int8_bytes / fp32_bytes), 1),
        },
        latency_b1_ms=checks.latency_b1_ms,
        phases=phases.as_list(),
        peak_rss_mb=phases.peak_rss_mb,
        seconds=round(time.perf_counter() - t0, 1),
        sections=sections,
    )
