"""`output_dim`: fit a k-d projection of a CLIP model's image and text space, gate it, write both towers with it.

The fit. Calibration frames (a bag, else the built-in panning frames) go through the FP32 image
tower, the gate's label prompts (crossmodal.GATE_LABELS through CLIP's template) through the FP32
text tower of the same weights; both as unit rows. The projection is the top k eigenvectors of
the pooled, modality-balanced, *uncentred* second moment

    C = ½ · mean_i(v_i v_iᵀ) + ½ · mean_j(t_j t_jᵀ)

i.e. an uncentred PCA (SVD) of images and labels together, each side weighted equally whatever
the count. Why this fit: CLIP answers with inner products (cosines between frames, between a
frame and a label), and the top-k eigenspace of the pooled second moment is the k-d subspace that
keeps the most of those inner products in the least-squares sense, across modalities as well as
within them. Centring (ordinary PCA) would need a bias (a subtraction) in the graph and would move
the image–text cosines by the modality gap; fitting on one side only would keep that side's
geometry and let the other fall where it may. One matrix projects both towers, so image and text
stay in one space; the graph normalises after it (models/projection.py).

The gate (gate.ProjectionSpec, bounds as data): on frames *not* used in the fit (every 4th
frame, as the INT8 gate holds out), the projected FP32 against the full-width FP32: retained
variance (the share of the unit rows' variance about their mean that the k directions keep, the
held-out frames' and the labels' shares averaged), nearest-neighbour agreement (each frame's
nearest other frame) and zero-shot top-1 agreement on the label set, both with the INT8 gate's
FP32-margin tie rule (`_agreement` says why; plain argmax agreement is reported beside them).
A projection below a bound fails the build (ProjectionGateFailed, the figures named) and nothing
is written. Projected INT8 vs projected FP32 is the INT8 gate, as for any FP32 model.

With fewer fit rows than k the fit's rank is below k: the directions past it are eigenvectors of
a zero eigenvalue (LAPACK's, deterministic) and keep none of the fit data's energy; the held-out
figures say what that costs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import OpenclawError
from ..core.gate import ProjectionMetrics, ProjectionSpec, gate_summary
from ..core.numerics import l2_normalise, top1_agreement
from ..models import onnx_files
from ..models.projection import add_projection, check_output_dim, projected_id
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.frame import Frame
from ..preprocess.spec import PreprocessSpec
from ..text.zero_shot import DEFAULT_TEMPLATE, check_same_model
from .crossmodal import GATE_LABELS
from .data import split

log = logging.getLogger(__name__)

FIT = "uncentred PCA of unit image and label-prompt embeddings, modality-balanced"


class ProjectionGateFailed(OpenclawError, RuntimeError):
    """The fitted projection keeps too little of the full width's geometry (the figures are in the message)."""


def fit(image: np.ndarray, text: np.ndarray, dim: int) -> np.ndarray:
    """(D, dim) orthonormal columns: the top-`dim` eigenvectors of ½·E[v vᵀ] + ½·E[t tᵀ] over unit rows (module doc).

    Deterministic: eigenvalues in descending order, each column's sign set so its largest entry is positive."""
    v, t = l2_normalise(image, dtype=np.float64), l2_normalise(text, dtype=np.float64)
    moment = 0.5 * (v.T @ v) / len(v) + 0.5 * (t.T @ t) / len(t)
    values, vectors = np.linalg.eigh(moment)
    top = vectors[:, np.argsort(values)[::-1][:dim]]
    signs = np.sign(top[np.abs(top).argmax(axis=0), np.arange(dim)])
    return (top * np.where(signs == 0, 1.0, signs)).astype(np.float32)


def retained_variance(rows: np.ndarray, matrix: np.ndarray) -> float:
    """Share of the unit rows' variance about their mean that the projection's columns keep (1: nothing lost).

    Centred on purpose, although the fit is not: random-init (and real) CLIP embeddings of one scene share a
    large common direction, and the uncentred share counts it. Tiny, 32->2 kept 94.5 % of the rows' energy
    but 5 % of their variance, and its frames' plain-argmax nearest neighbours were right in 7 of 16: the
    centred share is the one that sees that."""
    u = l2_normalise(rows, dtype=np.float64)
    c = u - u.mean(axis=0)
    total = float(np.sum(c**2))
    return float(np.sum((c @ matrix.astype(np.float64)) ** 2) / total) if total > 0 else 1.0


def _off_diagonal(sims: np.ndarray) -> np.ndarray:
    """(N, N) → (N, N-1): each frame's similarities to the *other* frames."""
    n = len(sims)
    return sims[~np.eye(n, dtype=bool)].reshape(n, n - 1)


def _agreement(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    """(share of rows with the same top item under the FP32-margin tie rule, the same by plain argmax).

    The tie rule (numerics.top1_agreement, as the INT8 gate judges) forgives a flip whose full-width margin
    is within what the projection does to that row's other scores anyway: a panning camera's consecutive
    frames are near-ties, and plain argmax flips on them at 99.8 % retained variance (tiny, 32->16: one of
    8 held-out frames). Its band grows with the distortion, so it means something only beside the retained
    variance, which bounds the distortion: the gate enforces both; plain argmax is reported beside them."""
    ruled = float(top1_agreement(reference, candidate).mean())
    return ruled, float(np.mean(reference.argmax(axis=1) == candidate.argmax(axis=1)))


def measure(image: np.ndarray, matrix: np.ndarray, text: np.ndarray | None = None) -> ProjectionMetrics:
    """The projection's gate figures: unit full-width rows of held-out frames (and the labels) against their
    projection by `matrix`, renormalised, as the projected graph computes them."""
    image, proj_image = l2_normalise(image), l2_normalise(image @ matrix)
    kept = retained_variance(image, matrix)
    if text is not None:
        kept = 0.5 * kept + 0.5 * retained_variance(text, matrix)
    nn, nn_argmax = _agreement(_off_diagonal(image @ image.T), _off_diagonal(proj_image @ proj_image.T))
    zero_shot = zero_shot_argmax = None
    if text is not None:
        text, proj_text = l2_normalise(text), l2_normalise(text @ matrix)
        zero_shot, zero_shot_argmax = _agreement(image @ text.T, proj_image @ proj_text.T)
    return ProjectionMetrics(kept, nn, zero_shot, nn_argmax, zero_shot_argmax)


@dataclass
class ProjectionResult:
    """What `project_model` built and measured (also stored, as JSON, in both models' metadata)."""

    image_model: str
    text_model: str
    model_id: str
    full_model_id: str
    output_dim: int
    full_dim: int
    fit: str
    fit_frames: int
    heldout_frames: int
    labels: int
    metrics: dict[str, float]
    passed: bool
    bounds: dict[str, float] = field(default_factory=dict)
    #: the same held-out figures for the fits not chosen (image-only, text-only uncentred PCA): why this one
    alternatives: dict[str, dict[str, float]] = field(default_factory=dict)

    def summary(self) -> str:
        return gate_summary(self.metrics, ProjectionSpec(**self.bounds))


def preprocess(frames: Sequence[Frame], image_size: int) -> np.ndarray:
    """The frames as the node's CPU preprocessor gives them (N, 3, S, S)."""
    pre = CpuPreprocessor(PreprocessSpec(size=image_size))
    return np.stack([pre(f) for f in frames])


def embed_all(image_model: Path, text_model: Path, pixels: np.ndarray, threads: int = 0) -> tuple:
    """(unit image rows, unit label-prompt rows, logit scale, model id) through the two FP32 towers."""
    from ..text.encoder import TextEncoder
    from ..text.zero_shot import LabelSet
    from .runtimes import embedder

    meta = onnx_files.read_metadata(image_model)
    enc = TextEncoder(text_model, threads)
    check_same_model(meta["model_id"], enc.model_id)
    labels = LabelSet.build(enc, GATE_LABELS, DEFAULT_TEMPLATE)
    image = embedder("onnxruntime", image_model, threads)(pixels)
    return image, labels.embeddings, labels.logit_scale, meta["model_id"]


def project_model(
    image_model: Path,
    text_model: Path,
    output_dim: int,
    frames: Sequence[Frame],
    image_out: Path,
    text_out: Path,
    spec: ProjectionSpec | None = None,
    threads: int = 0,
    holdout_every: int = 4,
) -> ProjectionResult:
    """Fit the `output_dim` projection on the full-width FP32 towers, gate it, write both projected towers.

    Raises ProjectionGateFailed (nothing written) when the held-out figures are below `spec`'s bounds, and
    models.projection.ProjectionError when `output_dim` is above the tower's width or names no projection
    (0 or the tower's own width: there is nothing to build; the caller uses the full-width files)."""
    spec = spec or ProjectionSpec()
    meta = onnx_files.read_metadata(image_model)
    full_dim = int(meta["embed_dim"])
    dim = check_output_dim(output_dim, full_dim, meta.get("model_id", str(image_model)))
    if not dim:
        raise ValueError(f"output_dim {output_dim} is {meta['model_id']}'s own width: no projection to build")
    image_size = int(meta.get("image_size", 224))
    fit_frames, held_frames = split(list(frames), holdout_every)
    pixels = preprocess([*fit_frames, *held_frames], image_size)
    image, text, _, model_id = embed_all(image_model, text_model, pixels, threads)
    fit_rows, held_rows = image[: len(fit_frames)], image[len(fit_frames) :]
    matrix = fit(fit_rows, text, dim)
    metrics = measure(held_rows, matrix, text)
    passed = metrics.passes(spec)
    others = {"image-only": fit(fit_rows, fit_rows, dim), "text-only": fit(text, text, dim)}
    result = ProjectionResult(
        str(image_out), str(text_out), projected_id(model_id, dim), model_id, dim, full_dim, FIT,
        len(fit_frames), len(held_frames), len(text), metrics.as_dict(), passed, spec.as_dict(),
        {name: measure(held_rows, m, text).as_dict() for name, m in others.items()},
    )  # fmt: skip
    if not passed:
        raise ProjectionGateFailed(
            f"the {full_dim}->{dim} projection of {model_id} failed its gate on {len(held_frames)} held-out frames"
            f" and {len(text)} labels: {result.summary()}; nothing written (a larger output_dim, or more varied"
            " calibration frames)"
        )
    info = {k: v for k, v in asdict(result).items() if k not in ("image_model", "text_model")}
    add_projection(image_model, image_out, matrix, info)
    add_projection(text_model, text_out, matrix, info)
    log.info("projection %s: %s", result.model_id, result.summary())
    return result


def stored_result(path: Path) -> dict:
    """The projection record in a projected export's metadata ({} for a full-width one)."""
    from ..models.projection import PROJECTION_KEY

    return json.loads(onnx_files.read_metadata(path).get(PROJECTION_KEY, "") or "{}")
