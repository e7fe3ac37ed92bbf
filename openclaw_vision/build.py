"""First-use builds of the default models in the data home: the FP32 export, then the gated INT8 model.

The node only loads files; the demo, the bench and the CLI call these so a fresh machine gets
the same models a user would build by hand with `openclaw-vision export` and `quantize`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .errors import OpenclawError
from .models.configs import canonical_name
from .resources import default_model_path

log = logging.getLogger(__name__)

#: Frames of the built-in panning camera used to calibrate when no bag is given.
SAMPLE_CALIBRATION_FRAMES = 64


class BuildError(OpenclawError, RuntimeError):
    """A default model could not be built (e.g. the INT8 model failed its accuracy gate)."""


def ensure_fp32(model: str, model_path: Path | None = None, checkpoint: Path | None = None) -> Path:
    """`model_path` if given, else the data-home FP32 export of `model` (exported now if missing)."""
    if model_path:
        return Path(model_path)
    model = canonical_name(model)
    path = default_model_path(model, "fp32")
    if not path.exists():
        from .models.export import export_model

        log.info("building %s (FP32 export) -> %s", model, path)
        res = export_model(model, path, checkpoint)
        log.info("export checked: ONNX Runtime vs PyTorch min cosine %.6f", res.min_cosine)
    return path


def ensure_gate_text(model: str, checkpoint: Path | None = None) -> Path:
    """The FP32 text export of a named model in the data home (made now if missing, as the FP32 export is).

    Every entry point that quantises a named model (`quantize --model`, the ladder, and
    `ensure_int8`: the demo, first use, `ask`) calls this first, so the INT8 gate has the same
    checks everywhere, its zero-shot term included: the pipeline finds the text tower there by the
    image model's id. An FP32 file given by path gets the term only if a text export of its model
    id is already there (nothing says which weights to export)."""
    from .text.build import ensure_text_fp32

    return ensure_text_fp32(model, None, checkpoint)


def int8_path_for(fp32: Path) -> Path:
    """Where the INT8 model made from a given FP32 file goes: beside it (`x.fp32.onnx` → `x.int8.onnx`)."""
    stem = fp32.name.removesuffix(".onnx").removesuffix(".fp32")
    return fp32.with_name(f"{stem}.int8.onnx")


def ensure_int8(model: str, calib: Path | None = None, fp32_path: Path | None = None) -> Path:
    """The INT8 model of `model` (or of `fp32_path`), quantised now if missing.

    Calibrates on `calib` (a bag or image folder) or on the built-in sample frames. Raises
    BuildError with the gate's numbers when the quantised model does not pass.
    """
    if not fp32_path:
        model = canonical_name(model)
    path = int8_path_for(Path(fp32_path)) if fp32_path else default_model_path(model, "int8")
    if path.exists():
        return path
    from .quant.pipeline import QuantOptions, quantize
    from .quant.report import write

    fp32 = ensure_fp32(model, fp32_path)
    if not fp32_path:
        ensure_gate_text(model)  # the gate's text term, as `quantize --model` has it
    frames = None
    if calib is None:
        from .preprocess.frame import Frame
        from .sample_frames import pan_frames

        frames = [Frame.from_rgb(f) for f in pan_frames(SAMPLE_CALIBRATION_FRAMES)]
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
