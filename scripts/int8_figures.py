#!/usr/bin/env python3
"""Real CLIP's outliers and INT8 (issue 35): profiles × {plain, ours, NNCF} × {cosine, zero-shot, INT8 share,
latency}, measured side by side in one run, printed as JSON and markdown.

    flock /tmp/openclaw-cpu.lock .venv/bin/python scripts/int8_figures.py --models ViT-B-32 [--frames 48]
        [--profiles none clip-like ...] [--heldout 0] [--out /tmp/int8-figures] [--json figures.json]
        [--no-latency | --latency-only figures.json] [--variants plain nncf] [--batches 1 8]

A big tower's accuracy columns take about 15 minutes per profile on two cores (ViT-L/14) and do not depend on
what else runs; latency does. `--no-latency` skips it, `--latency-only` redoes it later from the models the run
left in `--out`, on quiet cores (only the groups of `--profiles`). ViT-bigG/14 takes 45 minutes for ours alone
(`--variants` with nothing: no plain, no NNCF), and `--batches 1` times it against its FP32 in a few minutes.

For each architecture and each outlier profile (quant/profiles.py; `none` is the random-init export):

- plain: `quantize` with migration, split and centring off, every GEMM INT8 (max_float 0), today's calibration
  (percentile); written whatever its verdict (the gate's bounds relaxed for the write only) and judged here by the
  real GateSpec, so its latency can be measured too;
- ours: `quantize` as `openclaw-vision quantize` runs it (migration, split, sensitivity, partition), with the
  default scheme s8s8 (signed symmetric activations: the one model TensorRT, OpenVINO and ONNX Runtime all run);
- ours u8 (`--u8`): the same with `--scheme u8s8` (unsigned asymmetric activations: OpenVINO and ONNX Runtime
  only, as NNCF's model is OpenVINO only). On VNNI CPUs oneDNN's INT8 GEMM reads u8 × s8 natively (vpdpbusd),
  and NNCF gives most FCs u8 inputs: this row is the like-for-like one for the CPU columns;
- NNCF: `nncf.quantize(model_type=TRANSFORMER)` (SmoothQuant on, matmul alpha 0.95: its default for
  transformers, written out) on the same FP32 ONNX read by OpenVINO, with the same calibration tensors.

All three are scored by the one scoring path (quant/evaluate.Evaluator) on OpenVINO, against the same
FP32 reference embeddings of the same held-out frames (three camera resolutions) and the gate's label
set through the base text tower (the profiles keep the base model id). Latency: OpenVINO encoders
(the node's class), batch 1 and 8, interleaved round by round (stats.run_interleaved) with the FP32
model and the architecture's own INT8 model without outliers (`none`, ours) in the same group, so
every speed is a ratio measured side by side. nncf is a tools/bench extra, never imported at run time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from openclaw_vision.bench import figures
from openclaw_vision.bench.harness import Variant, first_call_s, run_interleaved
from openclaw_vision.core.gate import GateSpec
from openclaw_vision.models import onnx_files
from openclaw_vision.models.configs import canonical_name
from openclaw_vision.models.export import export_model
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import pan_frames
from openclaw_vision.quant import crossmodal, data, profiles
from openclaw_vision.quant.evaluate import Evaluator, worst
from openclaw_vision.quant.pipeline import QuantOptions, quantize

log = logging.getLogger("int8_figures")
#: bounds that let the plain model be written whatever it measures (it is judged by GateSpec() here)
WRITE_ANYWAY = GateSpec(mean_cosine=-1.0, min_cosine=-1.0, nn_agreement=0.0, zero_shot_top1=0.0)


def fp32_model(name: str, profile: str, path: Path) -> Path:
    """The group's FP32 export, made once; a profile export made by other profile code is made again."""
    if profile != "none" and path.exists():
        made_by = onnx_files.read_metadata(path).get(profiles.DIGEST_KEY)
        if made_by != profiles.source_digest():
            log.info("%s: made by other profile code (%s): exported again", path.name, made_by)
            onnx_files.remove_model(path)
    if not path.exists():
        if profile == "none":
            export_model(name, path)
        else:
            profiles.export_profile(name, profile, path)
    return path


def text_model(name: str, folder: Path) -> Path:
    path = folder / f"{name}.text.fp32.onnx"
    if not path.exists():
        export_model(name, path, tower="text")
    return path


def nncf_model(fp32: Path, calib: np.ndarray, out: Path) -> Path:
    """NNCF's INT8 OpenVINO IR of `fp32`, calibrated on exactly `calib` (the quantiser's calibration tensors)."""
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    model = ov.Core().read_model(str(fp32))
    dataset = nncf.Dataset([calib[i : i + 1] for i in range(len(calib))])
    q = nncf.quantize(model, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib),
                      advanced_parameters=AdvancedQuantizationParameters(
                          smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=0.95)))  # fmt: skip
    ov.save_model(q, str(out))
    return out


def nncf_int8_share(xml: Path) -> float:
    """Share of the weight GEMMs' K·N (tokens alike) whose activation input NNCF quantised (a FakeQuantize)."""
    import openvino as ov

    total = int8 = 0.0
    for op in ov.Core().read_model(str(xml)).get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        w = op.input_value(1).get_node()
        if w.get_type_name() not in ("Multiply", "Constant", "Convert", "Subtract"):
            continue  # two activations (QKᵀ, PV): not a weight GEMM
        kn = float(np.prod(op.input_value(1).get_partial_shape().to_shape()))
        total += kn
        int8 += kn if op.input_value(0).get_node().get_type_name() == "FakeQuantize" else 0.0
    return int8 / total if total else 0.0


def latency(
    models: dict[str, Path], image_size: int, threads: int, budget_s: float, batches: tuple[int, ...] = (1, 8)
) -> dict[str, dict[str, float]]:
    """P50 ms of each model on OpenVINO at each batch, all interleaved call by call (one group per batch)."""
    from openclaw_vision.encoders.openvino import OpenVinoEncoder

    encoders = {k: OpenVinoEncoder(p, threads) for k, p in models.items()}
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, float]] = {k: {} for k in models}
    for batch in batches:
        x = rng.standard_normal((batch, 3, image_size, image_size)).astype(np.float32)
        variants = [Variant(k, lambda e=e, x=x: e.encode(x), batch) for k, e in encoders.items()]
        first = first_call_s(variants)
        # one call per model per round, in a shuffled order, as many rounds as the budget holds: a slow spell of
        # the machine (these cores are shared and drift by ±15 % over minutes) lands on every model alike
        rounds = int(np.clip(budget_s / max(sum(first.values()), 1e-3), 5, 60))
        run_interleaved(variants, rounds, 1, warmup=1)
        for v in variants:
            out[v.name][f"b{batch}_ms"] = round(float(np.median(v.samples_ms)), 2)
    return out


def model_files(folder: Path, name: str, profile: str) -> dict[str, Path]:
    """Where `run_arch` writes one profile's models: FP32, the INT8 variants and, beside a profile, the
    architecture's own INT8 model without outliers (`none`, ours)."""
    stem = folder / f"{name}.{profile}"
    files = {"fp32": Path(f"{stem}.fp32.onnx"), "ours": Path(f"{stem}.ours.int8.onnx"),
             "plain": Path(f"{stem}.plain.int8.onnx"), "nncf": Path(f"{stem}.nncf.int8.xml"),
             "ours u8": Path(f"{stem}.ours-u8.int8.onnx")}  # fmt: skip
    if profile != "none":
        files["ours, no outliers"] = folder / f"{name}.none.ours.int8.onnx"
    return files


def group_models(folder: Path, name: str, profile: str) -> dict[str, Path]:
    """The models one profile's latency group times: FP32, ours, and each of the others that has a file in the
    folder, from this run or an earlier one (one that no run made, as `none` for bigG, is not timed)."""
    files = model_files(folder, name, profile)
    return {k: p for k, p in files.items() if k in ("fp32", "ours") or p.exists()}


def measure_group(folder: Path, name: str, profile: str, image_size: int, args) -> dict[str, dict[str, float]]:
    return latency(group_models(folder, name, profile), image_size, args.threads, args.latency_budget_s,
                   tuple(args.batches))  # fmt: skip


def latency_fields(lat: dict[str, dict[str, float]], profile: str, variant: str) -> dict[str, float]:
    """A row's latency columns, every one a ratio within its group at batch 1 (`none`: its own INT8 is the
    no-outlier base). A group without the no-outlier model or without NNCF's has no such ratio."""
    if variant not in lat:
        return {}
    own = lat[variant]
    out = {**own, "speed_vs_fp32": round(lat["fp32"]["b1_ms"] / own["b1_ms"], 3)}
    base = lat["ours"] if profile == "none" else lat.get("ours, no outliers")
    if base:
        out["speed_vs_no_outliers"] = round(base["b1_ms"] / own["b1_ms"], 3)
    for batch in ("b1", "b8"):
        if "nncf" in lat and f"{batch}_ms" in own:
            out[f"latency_vs_nncf_{batch}"] = round(own[f"{batch}_ms"] / lat["nncf"][f"{batch}_ms"], 3)
    return out


def remeasure(rows: list[dict], args) -> list[dict]:
    """The latency columns again, from the models an earlier run left in `--out`: accuracy and INT8 share take
    an hour per big tower and do not depend on what else runs, latency does, so it can be redone alone on quiet
    cores (the accuracy columns are kept as they were)."""
    out = []
    for (name, profile), group in itertools.groupby(rows, key=lambda r: (r["model"], r["profile"])):
        group = list(group)
        if profile not in args.profiles:  # not asked to be timed again: its columns stay as they were
            out += group
            continue
        if not group_models(args.out / name, name, profile)["ours"].exists():  # ours failed its gate: no model
            out += group
            continue
        lat = measure_group(args.out / name, name, profile, int(group[0].get("image_size", 224)), args)
        for r in group:
            r = {**r, **latency_fields(lat, profile, r["variant"])}
            out.append(r)
            print(json.dumps(r), flush=True)
    return out


def _metrics(rows: dict) -> dict:
    w = worst(rows)
    return {"mean_cosine": round(w.mean_cosine, 6), "min_cosine": round(w.min_cosine, 6),
            "nn_agreement": round(w.nn_agreement, 4),
            "zero_shot_top1": None if w.zero_shot_top1 is None else round(w.zero_shot_top1, 4),
            "gate": w.passes(GateSpec())}  # fmt: skip


def run_arch(name: str, profile_names: list[str], frames: list, args, folder: Path) -> list[dict]:
    text = text_model(name, folder)
    rows: list[dict] = []
    for profile in profile_names:  # `none` first where it is asked for: the others' latency baseline is its file
        t0 = time.perf_counter()
        paths = model_files(folder, name, profile)
        fp32 = fp32_model(name, profile, paths["fp32"])
        common = dict(calib=Path("<sample frames: pan>"), measure_memory=False, text_model=text,
                      heldout_frames=args.heldout, calib_frames=args.calib_frames, sweep=args.sweep)  # fmt: skip
        plain_path, ours_path = paths["plain"], paths["ours"]
        plain = None
        if "plain" in args.variants:
            plain = quantize(QuantOptions(fp32, out=plain_path, smooth=False, split=False, centre=False, max_float=0,
                                          sensitivity=False, gate=WRITE_ANYWAY, **common), frames)  # fmt: skip
        ours = quantize(QuantOptions(fp32, out=ours_path, **common), frames)
        ours_u8, u8_path = None, folder / f"{name}.{profile}.ours-u8.int8.onnx"
        if args.u8:
            ours_u8 = quantize(QuantOptions(fp32, out=u8_path, scheme="u8s8", **common), frames)
        # the same frames, split and capped as quantize did them: the evaluator's held-out set and the calibration
        image_size = int(onnx_files.read_metadata(fp32).get("image_size", 224))
        caps = ours.sections["calibration"]["frame_caps"]
        qdata = data.prepare(frames, image_size, "sample").capped(caps["calibration"], caps["heldout"])
        heldout = {k: v.astype(np.float16).astype(np.float32) for k, v in qdata.heldout.items()}
        text_ref, _ = crossmodal.find_reference(ours.model, text)
        ev = Evaluator.from_model(fp32, heldout, text=text_ref)
        nncf_path = nncf_model(fp32, qdata.calibration, paths["nncf"]) if "nncf" in args.variants else None
        written = {k: p for k, p in (("plain", plain_path if plain else None), ("ours", ours_path),
                                     ("nncf", nncf_path), ("ours u8", u8_path if ours_u8 else None))
                   if p and p.exists()}  # fmt: skip
        scored = {k: _metrics(ev.score(p, "openvino")) for k, p in written.items()}
        if "ours" not in written:  # its gate failed, so `quantize` wrote nothing (as a user gets it): ORT's figures
            log.warning("%s %s: ours failed the gate: %s", name, profile, ours.summary())
            scored["ours"] = {**_metrics({"onnxruntime": ours.worst}), "gate": False}
        lat = {} if args.no_latency or "ours" not in written else measure_group(folder, name, profile, image_size, args)
        runs = {"ours": ours, "ours u8": ours_u8}
        shares = {"plain": 1.0, "nncf": round(nncf_int8_share(nncf_path), 4) if nncf_path else None,
                  **{k: r.sections["int8_flop_share"] for k, r in runs.items() if r}}  # fmt: skip
        asked = ("plain" if plain else None, "ours", "ours u8" if ours_u8 else None, "nncf" if nncf_path else None)
        for variant in filter(None, asked):
            if variant not in scored:  # ours u8 failed its gate
                scored[variant] = {**_metrics({"onnxruntime": runs[variant].worst}), "gate": False}
            row = {"model": name, "profile": profile, "variant": variant, **scored[variant],
                   "int8_share": shares[variant], "image_size": image_size,
                   **latency_fields(lat, profile, variant)}  # fmt: skip
            if variant in runs:
                run = runs[variant]
                row["gate_onnxruntime"] = run.passed
                row["kept_float"] = run.sections["kept_float_labels"]
                row["migrated"] = run.sections["migration"]["migrated"]
                row["split"] = run.sections["split"]["layers"]  # FC2s whose outlier units run apart in FP32
                row["centred"] = len(run.sections["centre"]["layers"])  # FC2 inputs shifted to a symmetric range
                row["trials"] = run.sections["trials"]  # the partition's tries: what each kept float gave
            if variant == "plain":
                row["gate_onnxruntime"] = plain.worst.passes(GateSpec())
            rows.append(row)
            print(json.dumps(row), flush=True)
        log.info("%s %s done in %.0f s", name, profile, time.perf_counter() - t0)
    return rows


def _lat(r: dict) -> str:
    def cell(key: str, fmt: str = "{}") -> str:
        return fmt.format(r[key]) if key in r else "—"

    return (f"{cell('b1_ms')} | {cell('b8_ms')} | {cell('speed_vs_fp32', '{:.2f}x')} |"
            f" {cell('speed_vs_no_outliers', '{:.2f}x')} |"
            f" {cell('latency_vs_nncf_b1', '{:.2f}')} / {cell('latency_vs_nncf_b8', '{:.2f}')}")  # fmt: skip


def markdown(rows: list[dict]) -> str:
    head = ("| model | profile | variant | gate (OV) | mean cos | min cos | zero-shot | INT8 share | b1 ms | b8 ms |"
            " speed vs FP32 | speed vs no-outlier INT8 | latency vs NNCF b1 / b8 |")  # fmt: skip
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        zs = "—" if r["zero_shot_top1"] is None else f"{100 * r['zero_shot_top1']:.1f} %"
        lines.append(f"| {r['model']} | {r['profile']} | {r['variant']} | {'pass' if r['gate'] else 'FAIL'} |"
                     f" {r['mean_cosine']:.6f} | {r['min_cosine']:.6f} | {zs} | {100 * r['int8_share']:.1f} % |"
                     f" {_lat(r)} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["ViT-B-32"])
    p.add_argument("--profiles", nargs="+", default=["none", *profiles.PROFILES],
                   help="`none` first: the baseline (with --latency-only: the profiles to time again)")  # fmt: skip
    p.add_argument("--frames", type=int, default=48, help="sample (pan) frames: 3 of 4 calibrate, 1 of 4 held out")
    p.add_argument("--calib-frames", type=int, default=0)
    p.add_argument("--heldout", type=int, default=0, help="held-out frames per resolution (0: all)")
    p.add_argument("--sweep", default="auto", choices=("auto", "always", "never"))
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--u8", action="store_true", help="also ours with --scheme u8s8 (CPU runtimes only, as NNCF's)")
    p.add_argument("--variants", nargs="*", default=["plain", "nncf"], choices=("plain", "nncf"),
                   help="beside ours: the plain path and NNCF (bigG: ours alone takes most of an hour)")  # fmt: skip
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8], help="latency batches")
    p.add_argument("--latency-budget-s", type=float, default=12.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/int8-figures"))
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--docs", default=None, metavar="NAME",
                   help="also publish the rows as docs/figures/NAME.json and .md (bench/figures.py)")  # fmt: skip
    p.add_argument("--no-latency", action="store_true", help="accuracy and INT8 share only (cores shared)")
    p.add_argument("--latency-only", type=Path, default=None, metavar="JSON",
                   help="the latency columns again, from the models an earlier run left in --out")  # fmt: skip
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)  # each profile's wall time: the big towers take an hour or more
    if args.latency_only:
        rows = remeasure(json.loads(args.latency_only.read_text()), args)
        return report(rows, args)
    frames = [Frame.from_rgb(f) for f in pan_frames(args.frames)]
    rows = []
    for name in args.models:
        name = canonical_name(name)
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        rows += run_arch(name, args.profiles, frames, args, folder)
    return report(rows, args)


def report(rows: list[dict], args) -> int:
    print(json.dumps(rows, indent=1))
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.docs:
        paths = figures.publish(args.docs, rows, markdown(rows), "scripts/int8_figures.py " + " ".join(sys.argv[1:]))
        print("published", *paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
