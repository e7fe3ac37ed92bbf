"""Zero-shot labels: an image embedding scored against the text embeddings of a label set.

scores = softmax(logit_scale × cosine(image, text of each label)), CLIP's own classifier: the
scores of one frame sum to 1 over the label set, so they say which label fits best among these,
not whether any fits; the cosines (also returned) say how well.

Text embeddings are computed once per label set (`LabelSet.build`), never per frame; scoring a
frame is one (L × D) matrix–vector product. Features and label embeddings must come from the same
model: the image and text exports of one checkpoint carry the same model id, and
`check_same_model` refuses anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import OpenclawError
from ..core.numerics import l2_normalise, softmax

#: CLIP's usual zero-shot prompt; "{}" alone uses the labels as they are.
DEFAULT_TEMPLATE = "a photo of a {}."
MAX_LABELS = 1000


class LabelError(OpenclawError, ValueError):
    """A label set that cannot be used (empty, duplicated labels, unreadable file, bad template)."""


class ModelMismatch(OpenclawError, ValueError):
    """Features and text embeddings from different models: their embeddings are not comparable."""


def parse_labels(text: str) -> list[str]:
    """'door, forklift,person' (or one label per line) → ['door', 'forklift', 'person']."""
    labels = [part.strip() for line in text.splitlines() for part in line.split(",")]
    return check_labels([label for label in labels if label])


def read_labels_file(path: str | Path) -> list[str]:
    """One label per line (commas also separate); blank lines and lines starting with '#' are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise LabelError(f"cannot read labels file {path}: {err}") from None
    return parse_labels("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))


def check_labels(labels: Sequence[str]) -> list[str]:
    labels = [str(label).strip() for label in labels]
    if not labels or not all(labels):
        raise LabelError("the label set is empty (give at least one label, e.g. 'door,forklift,person')")
    seen: set[str] = set()
    dupes = sorted({label for label in labels if label in seen or seen.add(label)})
    if dupes:
        raise LabelError(f"duplicated label(s): {', '.join(dupes)}")
    if len(labels) > MAX_LABELS:
        raise LabelError(f"{len(labels)} labels; at most {MAX_LABELS}")
    return labels


def prompts(labels: Sequence[str], template: str = DEFAULT_TEMPLATE) -> list[str]:
    if template.count("{}") != 1:
        raise LabelError(f"template {template!r} must contain '{{}}' exactly once (where the label goes)")
    return [template.replace("{}", label) for label in labels]


def check_same_model(features_model: str, text_model: str) -> None:
    if features_model != text_model:
        raise ModelMismatch(
            f"features come from model {features_model!r} but the text model is {text_model!r}: embeddings of "
            "different models are not comparable. Export the text tower of the same weights "
            "(`openclaw-vision export --model <name> --tower text --checkpoint <the image model's checkpoint>`)"
        )


@dataclass(frozen=True)
class LabelSet:
    """Labels, their unit text embeddings (L × D) and the model's logit scale: what scoring a frame needs."""

    labels: tuple[str, ...]
    embeddings: np.ndarray
    logit_scale: float
    model_id: str
    template: str = DEFAULT_TEMPLATE

    @classmethod
    def build(cls, encoder, labels: Sequence[str], template: str = DEFAULT_TEMPLATE) -> LabelSet:
        """Embed each label through `template` with the text encoder (a `TextEncoder`)."""
        labels = check_labels(labels)
        emb = encoder.encode(prompts(labels, template))
        return cls(tuple(labels), emb.vectors, float(encoder.logit_scale), emb.model_id, template)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def score(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) or (D,) image embeddings → (scores, cosines), each (N, L) or (L,); scores sum to 1 per row."""
        x = np.asarray(image, np.float32)
        if x.shape[-1] != self.dim:
            raise ValueError(f"image embedding has {x.shape[-1]} values; the text model's have {self.dim}")
        x = l2_normalise(x)
        cos = x @ self.embeddings.T
        return softmax(self.logit_scale * cos), cos
