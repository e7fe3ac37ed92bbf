"""First-use builds of the models in the data home: the FP32 export, the gated INT8 model and
the projected exports, made when a tool, the bench or the demo first needs them.

The node only loads files; the demo, the bench and the CLI call these so a fresh machine gets the same models a
user would build by hand with `openclaw-vision export` and `quantize` (build_tools/commands.py). What a build is
called and how wide it is: models/naming.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..core.errors import OpenclawError
from ..core.resources import default_model_path
from ..models.configs import canonical_name
from ..models.naming import output_width, projected_name

log = logging.getLogger(__name__)


#: Frames of the built-in panning camera used to calibrate when no bag is given.
SAMPLE_CALIBRATION_FRAMES = 64


class BuildError(OpenclawError, RuntimeError):
    """A default model could not be built (e.g. the INT8 model failed its accuracy gate)."""


def sample_calibration_frames() -> list:
    """The built-in panning camera's frames: calibration (INT8 and the projection's fit) when no bag is given."""
    from ..preprocess.frame import Frame
    from ..preprocess.sample_frames import pan_frames

    return [Frame.from_rgb(f) for f in pan_frames(SAMPLE_CALIBRATION_FRAMES)]


def calibration_frames(calib: Path | None, topic: str | None = None) -> list:
    """Frames from `calib` (a bag or image folder, spread over it as the quantiser reads it), else the sample ones."""
    if calib is None:
        return sample_calibration_frames()
    from ..quant.data import load_frames

    return load_frames(Path(calib), topic)


def ensure_projected(
    model: str, output_dim: int = 0, calib: Path | None = None, checkpoint: Path | None = None, seed: int = 0,
    image_out: Path | None = None, text_out: Path | None = None,
) -> Path:  # fmt: skip
    """The FP32 image export of `model` projected to `output_dim` (and its text tower beside it), built now if
    missing: the full-width towers first (the data home's, or exported for `checkpoint`/`seed` into a scratch
    folder), then the fit on `calib`'s frames (else the sample frames) and the gate (quant/projection.py).

    Raises ProjectionGateFailed with the figures when the projection fails its gate (nothing written)."""
    from ..quant.projection import project_model
    from ..text.build import default_text_model_path, ensure_text_fp32

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
    from ..models import onnx_files
    from ..models.export import export_model

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
        from ..models.export import export_model

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
    from ..text.build import default_text_model_path, ensure_text_fp32

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
    from ..quant.pipeline import QuantOptions, quantize
    from ..quant.projection import ProjectionGateFailed
    from ..quant.report import write

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
