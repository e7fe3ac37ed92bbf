"""First-use builds of the default models in the data home: the FP32 export, then the gated INT8 model,
and the commands that build them by hand (`openclaw-vision export`, `quantize`, `build-engine`).

The node only loads files; the demo, the bench and the CLI call these so a fresh machine gets
the same models a user would build by hand with `openclaw-vision export` and `quantize`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from .commands import Command, field_flag, from_args
from .errors import OpenclawError
from .gate import ProjectionSpec, gate_summary
from .models.configs import DEFAULT_MODEL, canonical_name
from .resources import default_model_path

log = logging.getLogger(__name__)

#: Frames of the built-in panning camera used to calibrate when no bag is given.
SAMPLE_CALIBRATION_FRAMES = 64


class BuildError(OpenclawError, RuntimeError):
    """A default model could not be built (e.g. the INT8 model failed its accuracy gate)."""


def output_width(model: str, output_dim: int) -> int:
    """The projection width of `model` at `output_dim`: 0 for none (0, or the tower's own width: the same model,
    the same files); models.projection.ProjectionError above the tower's width."""
    from .models.configs import get_config
    from .models.projection import check_output_dim

    return check_output_dim(output_dim, get_config(model).embed_dim, canonical_name(model)) if output_dim else 0


def projected_name(model: str, output_dim: int = 0) -> str:
    """The data-home stem of `model`'s builds at `output_dim`: `ViT-bigG-14-512` (`ViT-B-32` at 0 or 512)."""
    dim = output_width(model, output_dim)
    return f"{canonical_name(model)}-{dim}" if dim else model  # no projection: the name as every path had it


def sample_calibration_frames() -> list:
    """The built-in panning camera's frames: calibration (INT8 and the projection's fit) when no bag is given."""
    from .preprocess.frame import Frame
    from .sample_frames import pan_frames

    return [Frame.from_rgb(f) for f in pan_frames(SAMPLE_CALIBRATION_FRAMES)]


def calibration_frames(calib: Path | None, topic: str | None = None) -> list:
    """Frames from `calib` (a bag or image folder, spread over it as the quantiser reads it), else the sample ones."""
    if calib is None:
        return sample_calibration_frames()
    from .quant.data import load_frames

    return load_frames(Path(calib), topic)


def ensure_projected(
    model: str, output_dim: int = 0, calib: Path | None = None, checkpoint: Path | None = None, seed: int = 0,
    image_out: Path | None = None, text_out: Path | None = None,
) -> Path:  # fmt: skip
    """The FP32 image export of `model` projected to `output_dim` (and its text tower beside it), built now if
    missing: the full-width towers first (the data home's, or exported for `checkpoint`/`seed` into a scratch
    folder), then the fit on `calib`'s frames (else the sample frames) and the gate (quant/projection.py).

    Raises ProjectionGateFailed with the figures when the projection fails its gate (nothing written)."""
    from .quant.projection import project_model
    from .text.build import default_text_model_path, ensure_text_fp32

    name, dim = canonical_name(model), output_width(model, output_dim)
    if not dim:
        return ensure_fp32(name, None, checkpoint)
    image_out = Path(image_out or default_model_path(projected_name(name, dim), "fp32"))
    text_out = Path(text_out or default_text_model_path(projected_name(name, dim)))
    if image_out.exists() and text_out.exists():
        return image_out
    frames = calibration_frames(calib)
    log.info("building %s projected to %d-d -> %s, %s (fit on %s)", name, dim, image_out, text_out,
             calib or "built-in sample frames")  # fmt: skip
    if checkpoint is None and seed == 0:
        full, full_text = ensure_fp32(name), ensure_text_fp32(name)
        project_model(full, full_text, dim, frames, image_out, text_out)
        return image_out
    from .models import onnx_files
    from .models.export import export_model

    scratch = onnx_files.scratch_dir(image_out.parent, image_out.name + ".full")
    try:
        full, full_text = scratch / "image.onnx", scratch / "text.onnx"
        export_model(name, full, checkpoint, seed)
        export_model(name, full_text, checkpoint, seed, tower="text")
        project_model(full, full_text, dim, frames, image_out, text_out)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return image_out


def ensure_fp32(
    model: str, model_path: Path | None = None, checkpoint: Path | None = None, output_dim: int = 0,
    calib: Path | None = None,
) -> Path:  # fmt: skip
    """`model_path` if given, else the data-home FP32 export of `model` (exported now if missing); at an
    `output_dim` below the tower's width, its projected export (`ensure_projected`, fitted on `calib`)."""
    if model_path:
        return Path(model_path)
    model = canonical_name(model)
    if output_width(model, output_dim):
        return ensure_projected(model, output_dim, calib, checkpoint)
    path = default_model_path(model, "fp32")
    if not path.exists():
        from .models.export import export_model

        log.info("building %s (FP32 export) -> %s", model, path)
        res = export_model(model, path, checkpoint)
        log.info("export checked: ONNX Runtime vs PyTorch min cosine %.6f", res.min_cosine)
    return path


def ensure_gate_text(model: str, checkpoint: Path | None = None, output_dim: int = 0) -> Path:
    """The FP32 text export of a named model in the data home (made now if missing, as the FP32 export is).

    Every entry point that quantises a named model (`quantize --model`, the ladder, and
    `ensure_int8`: the demo, first use, `ask`) calls this first, so the INT8 gate has the same
    checks everywhere, its zero-shot term included: the pipeline finds the text tower there by the
    image model's id. An FP32 file given by path gets the term only if a text export of its model
    id is already there (nothing says which weights to export). At an `output_dim` the projected text
    tower is the one `ensure_projected` wrote beside the projected image export."""
    from .text.build import default_text_model_path, ensure_text_fp32

    if output_width(model, output_dim):
        return default_text_model_path(projected_name(model, output_dim))
    return ensure_text_fp32(model, None, checkpoint)


def int8_path_for(fp32: Path) -> Path:
    """Where the INT8 model made from a given FP32 file goes: beside it (`x.fp32.onnx` → `x.int8.onnx`)."""
    stem = fp32.name.removesuffix(".onnx").removesuffix(".fp32")
    return fp32.with_name(f"{stem}.int8.onnx")


def ensure_int8(model: str, calib: Path | None = None, fp32_path: Path | None = None, output_dim: int = 0) -> Path:
    """The INT8 model of `model` (or of `fp32_path`), quantised now if missing; at an `output_dim` below the
    tower's width, of its projected FP32 export (projected INT8 vs projected FP32 is the INT8 gate).

    Calibrates on `calib` (a bag or image folder) or on the built-in sample frames. Raises
    BuildError with the gate's numbers when the quantised model (or the projection) does not pass.
    """
    if not fp32_path:
        model = canonical_name(model)
    path = (
        int8_path_for(Path(fp32_path)) if fp32_path else default_model_path(projected_name(model, output_dim), "int8")
    )
    if path.exists():
        return path
    from .quant.pipeline import QuantOptions, quantize
    from .quant.projection import ProjectionGateFailed
    from .quant.report import write

    try:
        fp32 = ensure_fp32(model, fp32_path, output_dim=output_dim, calib=calib)
    except ProjectionGateFailed as err:
        raise BuildError(str(err)) from err
    if not fp32_path:
        ensure_gate_text(model, output_dim=output_dim)  # the gate's text term, as `quantize --model` has it
    frames = None if calib is not None else sample_calibration_frames()
    report = path.with_suffix(".report")
    log.info("building %s INT8 -> %s (calibration: %s)", model, path, calib or "built-in sample frames")
    result = quantize(
        QuantOptions(
            fp32_model=fp32,
            calib=calib or Path("<sample frames>"),
            out=path,
            sensitivity=False,
            measure_memory=False,
            report=report,
        ),
        frames=frames,
    )
    write(result, report)
    if not result.passed:
        raise BuildError(f"INT8 {model} failed its accuracy gate ({result.summary()}); report in {report}")
    log.info("INT8 gate passed: %s; report in %s", result.summary(), report)
    return path


# --- the commands that build by hand: export, quantize, build-engine --------------------------------


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
    from .models.export import TOWERS

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
    from .models.export import ExportCheckError
    from .quant.projection import ProjectionGateFailed, stored_result
    from .text.build import default_text_model_path

    stem = projected_name(name, args.output_dim)
    image = args.out or default_model_path(stem, "fp32")
    text = image.with_name(image.name.removesuffix(".onnx").removesuffix(".fp32") + ".text.fp32.onnx")
    text = text if args.out else default_text_model_path(stem)
    if image.exists() and text.exists() and not args.force:
        print(f"{image} and {text} exist (use --force to rebuild)")
        return 0
    from .models.onnx_files import remove_model

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
    from .models.export import ExportCheckError, export_model
    from .text.build import default_text_model_path

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
    from .gate import GateSpec
    from .quant.calibrate import METHODS
    from .quant.pipeline import SWEEP_MODES, QuantOptions
    from .quant.qdq import SCHEMES

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
    from .gate import GateSpec
    from .quant.pipeline import QuantOptions, quantize
    from .quant.report import write

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
    from .encoders.engine_cache import BuildOptions

    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--precision", default="int8", help="which built model of --model (int8: the Q/DQ one)")
    p.add_argument("--model-path", type=Path, default=None, help="an ONNX file instead")
    field_flag(p, "--max-batch", BuildOptions)
    field_flag(p, "--workspace-mb", BuildOptions)
    field_flag(p, "--typing", BuildOptions, choices=("auto", "strong", "int8+fp16"))
    p.add_argument("--cache-dir", type=Path, default=None, help="default: ~/.cache/openclaw_vision/engines")
    p.add_argument("--force", action="store_true", help="rebuild even if a valid engine is cached")


def _build_engine(args: argparse.Namespace) -> int:
    from .encoders.engine_cache import BuildOptions
    from .encoders.tensorrt import build_engine_cli

    path = args.model_path or default_model_path(args.model, args.precision)
    if not path.is_file():
        print(f"build-engine: {path} not found (make it with `openclaw-vision quantize` / `export`)", file=sys.stderr)
        return 2
    return build_engine_cli(path, from_args(BuildOptions, args), args.cache_dir, args.force)


BUILD_ENGINE = Command(_build_engine_arguments, _build_engine)
