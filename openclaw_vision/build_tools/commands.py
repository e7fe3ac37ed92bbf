"""`openclaw-vision export`, `quantize` and `build-engine`: the builds by hand.

They write the same files the first-use builds (build_tools/first_use.py) write on demand, with every option exposed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from pathlib import Path

from ..core.commands import Command, field_flag, from_args
from ..core.errors import OpenclawError
from ..core.gate import ProjectionSpec, gate_summary
from ..core.resources import default_model_path
from ..models.configs import DEFAULT_MODEL, canonical_name
from ..models.naming import output_width, projected_name
from .first_use import ensure_fp32, ensure_gate_text, ensure_projected, int8_path_for


@contextlib.contextmanager
def terminate_as_exit():
    """SIGTERM raises SystemExit here, so a killed export or quantisation still removes its temporary folder."""

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    from ..models.export import TOWERS

    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="open_clip or Hugging Face weights (.safetensors, .bin/.pt, or an HF folder); "
                   "default: deterministic random init")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tower", choices=TOWERS, default=TOWERS[0], help="which CLIP tower (same model id)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: ~/.cache/openclaw_vision/models/<model>.fp32.onnx (text: <model>.text.fp32.onnx)",
    )
    field_flag(p, "--output-dim", ensure_projected,
               help="embedding width: 0 = the tower's; below it, both towers get a projection fitted on --calib's"
               " frames (else the sample frames) and gated; written as <model>-<width>[.text].fp32.onnx")  # fmt: skip
    p.add_argument("--calib", type=Path, default=None, help="with --output-dim: bag or image folder the fit reads")
    p.add_argument("--force", action="store_true")
    p.add_argument("--json", action="store_true", help="print the result (files, check, phases) as one JSON line")


def _export_projected(args: argparse.Namespace, name: str) -> int:
    """`export --output-dim K`: both towers projected (build.ensure_projected), the fit's figures printed."""
    from ..models.export import ExportCheckError
    from ..quant.projection import ProjectionGateFailed, stored_result
    from ..text.build import default_text_model_path

    stem = projected_name(name, args.output_dim)
    image = args.out or default_model_path(stem, "fp32")
    text = image.with_name(image.name.removesuffix(".onnx").removesuffix(".fp32") + ".text.fp32.onnx")
    text = text if args.out else default_text_model_path(stem)
    if image.exists() and text.exists() and not args.force:
        print(f"{image} and {text} exist (use --force to rebuild)")
        return 0
    from ..models.onnx_files import remove_model

    for path in (image, text) if args.force else ():
        remove_model(path)  # and its data file: a big tower's weights
    try:
        with terminate_as_exit():
            ensure_projected(name, args.output_dim, args.calib, args.checkpoint, args.seed, image, text)
    except (ProjectionGateFailed, ExportCheckError, OpenclawError, ValueError, KeyError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 1
    res = stored_result(image)
    if args.json:
        print(json.dumps({**res, "image_model": str(image), "text_model": str(text)}))
        return 0
    print(f"wrote {image} + {text} ({res['model_id']}: {res['full_dim']} -> {res['output_dim']}-d, {res['fit']};"
          f" fit on {res['fit_frames']} frames + {res['labels']} label prompts; gate on {res['heldout_frames']}"
          f" held-out frames: {gate_summary(res['metrics'], ProjectionSpec(**res['bounds']))})")  # fmt: skip
    return 0


def _export(args: argparse.Namespace) -> int:
    from ..models.export import ExportCheckError, export_model
    from ..text.build import default_text_model_path

    try:
        name = canonical_name(args.model)
        if output_width(name, args.output_dim):
            return _export_projected(args, name)
    except (KeyError, OpenclawError) as err:
        print(f"export failed: {err.args[0]}", file=sys.stderr)
        return 1
    out = args.out or (default_text_model_path(name) if args.tower == "text" else default_model_path(name, "fp32"))
    if out.exists() and not args.force:
        print(f"{out} exists (use --force to rebuild)")
        return 0
    try:
        with terminate_as_exit():
            res = export_model(name, out, args.checkpoint, args.seed, tower=args.tower)
    except (ExportCheckError, ValueError, KeyError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**vars(res), "path": str(res.path), "files": [str(p) for p in res.files]}))
        return 0
    files = " + ".join(str(p) for p in res.files)
    print(
        f"wrote {files} ({res.size_bytes / 1e6:.1f} MB; {args.tower} tower {res.model_id}, {res.embed_dim}-d,"
        f" ORT vs torch min cosine {res.min_cosine:.6f} on {res.check_images} inputs; {res.seconds} s)"
    )
    for ph in res.phases:
        print(f"  {ph['name']}: {ph['seconds']} s, peak RSS {ph['peak_rss_mb'] / 1e3:.2f} GB")
    return 0


EXPORT = Command(_export_arguments, _export)


def _quantize_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag that sets a QuantOptions or GateSpec field takes that field's default (commands.field_flag)."""
    from ..core.gate import GateSpec
    from ..quant.calibrate import METHODS
    from ..quant.pipeline import SWEEP_MODES, QuantOptions
    from ..quant.qdq import SCHEMES

    q = QuantOptions
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name; its FP32 export is built if missing")
    p.add_argument("--model-path", type=Path, default=None, help="an FP32 ONNX export to quantise instead")
    p.add_argument("--checkpoint", type=Path, default=None, help="weights for the FP32 export when it is built")
    field_flag(
        p,
        "--output-dim",
        ensure_projected,
        help="quantise the model projected to this width (built, fitted on --calib and gated if missing)",
    )
    p.add_argument("--calib", type=Path, required=True, help="rosbag2 folder, .mcap or .db3 file, or image folder")
    field_flag(p, "--topic", q, help="image topic in the bag (default: its one camera)")
    field_flag(p, "--limit", q, help="use the first N frames only")
    field_flag(p, "--max-frames", q, help="otherwise at most this many, spread over the recording (0: all)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: ~/.cache/openclaw_vision/models/<model>.int8.onnx, or beside --model-path",
    )
    field_flag(p, "--report", q, type=Path,
               help="folder for report.md/json, plots and the re-gate set (default: beside the model, "
               "<model>.report: keep it with the model)")  # fmt: skip
    field_flag(p, "--method", q, choices=METHODS)
    field_flag(p, "--percentile", q)
    field_flag(
        p,
        "--scheme",
        q,
        choices=SCHEMES,
        help="s8s8: signed symmetric, every runtime; u8s8: unsigned activations, CPU runtimes only (not TensorRT)",
    )
    field_flag(p, "--min-mean-cosine", GateSpec, "mean_cosine")
    field_flag(p, "--min-cosine", GateSpec, "min_cosine")
    field_flag(p, "--min-nn-agreement", GateSpec, "nn_agreement", help="ties judged by the FP32 margin")
    field_flag(p, "--min-zero-shot-agreement", GateSpec, "zero_shot_top1",
               help="zero-shot top-1 agreement INT8 vs FP32 on the gate's label set (when a text tower is at hand);"
               " ties judged by the FP32 margin")  # fmt: skip
    field_flag(p, "--text-model", q, type=Path,
               help="FP32 text export of the same weights (default: the data home's)")  # fmt: skip
    field_flag(p, "--no-text", q, "text", help="no zero-shot (text) term in the gate")
    field_flag(p, "--max-float-layers", q, "max_float", help="most layers kept float (-1: a quarter)")
    field_flag(p, "--holdout-every", q, help="every k-th frame is held out for the gate")
    field_flag(p, "--threads", q)
    field_flag(p, "--no-smooth", q, "smooth",
               help="no outlier migration into the LayerNorms (quant/smooth.py): the plain path")  # fmt: skip
    field_flag(p, "--no-split", q, "split",
               help="no FC2 outlier units in an FP32 side path (quant/split.py): the plain path")  # fmt: skip
    field_flag(
        p,
        "--no-centre",
        q,
        "centre",
        help="no shift of the FC2 inputs to a symmetric range under s8s8 (quant/centre.py): the plain path",
    )
    field_flag(p, "--no-sensitivity", q, "sensitivity",
               help="skip the sensitivity measures when every layer passes as INT8 (the partition still runs them if"
               " needed)")  # fmt: skip
    field_flag(p, "--sweep", q, choices=SWEEP_MODES,
               help="end-to-end sensitivity sweep (one run per layer): auto = when its estimate fits --sweep-budget-s;"
               " the one-pass local SQNR measure always runs")  # fmt: skip
    field_flag(p, "--sweep-budget-s", q)
    field_flag(p, "--probe-frames", q, help="frames of the local sensitivity pass (0: 16, fewer for big models)")
    field_flag(p, "--calib-frames", q, help="calibration frames used (0: all, fewer for big models)")
    field_flag(p, "--heldout-frames", q, help="held-out frames per resolution (0: all, fewer for big models)")
    field_flag(p, "--no-memory", q, "measure_memory", help="skip the per-process memory measurement")


def _quantize(args: argparse.Namespace) -> int:
    from ..core.gate import GateSpec
    from ..quant.pipeline import QuantOptions, quantize
    from ..quant.report import write

    try:
        model = canonical_name(args.model) if not args.model_path else args.model
        dim = 0 if args.model_path else args.output_dim
        fp32 = ensure_fp32(model, args.model_path, args.checkpoint, dim, args.calib)
        if not args.model_path and args.text and not args.text_model:
            ensure_gate_text(model, args.checkpoint, dim)  # the gate's text term, as every entry point has it
        out = args.out or (int8_path_for(fp32) if args.model_path else default_model_path(projected_name(model, dim),
                                                                                            "int8"))  # fmt: skip
        opts = from_args(QuantOptions, args, fp32_model=fp32, out=out, gate=from_args(GateSpec, args))
        with terminate_as_exit():
            result = quantize(opts)
    except (OpenclawError, KeyError, ValueError, FileNotFoundError) as err:
        print(f"quantize: {err}", file=sys.stderr)
        return 2
    written = write(result, opts.report_dir)
    report = ", ".join(str(p) for p in written)
    print(
        f"{result.seconds} s, peak RSS {result.peak_rss_mb / 1e3:.2f} GB; per phase: "
        + "; ".join(f"{p['name']} {p['seconds']} s / {p['peak_rss_mb'] / 1e3:.2f} GB" for p in result.phases)
    )
    if not result.passed:
        print(f"quantize: gate FAILED, no model written: {result.summary()}\nreport: {report}", file=sys.stderr)
        return 1
    size, lat = result.size_mb, result.latency_b1_ms
    print(
        f"wrote {result.int8_model} (gate passed: {result.summary()}; {size['fp32']} -> {size['int8']} MB; "
        f"batch-1 {lat['fp32']} -> {lat['int8']} ms)\nreport: {report}"
    )
    return 0


QUANTIZE = Command(_quantize_arguments, _quantize)


def _build_engine_arguments(p: argparse.ArgumentParser) -> None:
    from ..encoders.engine_cache import BuildOptions

    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--precision", default="int8", help="which built model of --model (int8: the Q/DQ one)")
    p.add_argument("--model-path", type=Path, default=None, help="an ONNX file instead")
    field_flag(p, "--max-batch", BuildOptions)
    field_flag(p, "--workspace-mb", BuildOptions)
    field_flag(p, "--typing", BuildOptions, choices=("auto", "strong", "int8+fp16"))
    p.add_argument("--cache-dir", type=Path, default=None, help="default: ~/.cache/openclaw_vision/engines")
    p.add_argument("--force", action="store_true", help="rebuild even if a valid engine is cached")


def _build_engine(args: argparse.Namespace) -> int:
    from ..encoders.engine_cache import BuildOptions
    from ..encoders.tensorrt import build_engine_cli

    path = args.model_path or default_model_path(args.model, args.precision)
    if not path.is_file():
        print(f"build-engine: {path} not found (make it with `openclaw-vision quantize` / `export`)", file=sys.stderr)
        return 2
    return build_engine_cli(path, from_args(BuildOptions, args), args.cache_dir, args.force)


BUILD_ENGINE = Command(_build_engine_arguments, _build_engine)
