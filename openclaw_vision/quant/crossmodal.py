"""The text term of the INT8 gate: does the INT8 image tower still pick the labels the FP32 one picks?

A fixed label set goes through the FP32 text tower once. Each held-out frame's FP32 embedding v_i
and INT8 embedding u_i are scored against it as the labels node scores frames,
p = softmax(logit_scale · cosine(image, text of each label)), and compared:

- zero-shot top-1 agreement: the share of frames whose most likely label is the same under INT8
  as under FP32;
- score KL: KL(p_FP32 ‖ p_INT8) over the label set, mean over frames;
- the cross-modal collapse degree (CMCD) with both terms: mean ‖u_i − v_i‖² over frames (the image
  term, `evaluate.compare`'s `collapse`) plus mean ‖s_j − t_j‖² over labels, the INT8 text
  tower's embeddings s_j against the FP32 ones t_j. The text tower stays FP32 (it runs once per
  label set, not per frame), so s_j = t_j and the text term is exactly 0.

The text model must be the text export of the same weights (same model id) as the image model;
anything else is refused, as the labels node refuses it. With random-init weights (the default
here) the labels mean nothing, but the agreement still measures what INT8 does to the scores.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..text.zero_shot import LabelSet, ModelMismatch, check_same_model

log = logging.getLogger(__name__)

#: The fixed label set of the gate: things a robot's camera meets indoors and out.
GATE_LABELS = (
    "door", "window", "wall", "floor", "stairs", "person", "chair", "table", "shelf", "box",
    "pallet", "forklift", "car", "truck", "bicycle", "tree", "road", "sky", "dog", "cat",
    "cup", "laptop", "plant", "sign", "ladder", "cable", "robot", "hand", "face", "rock",
)  # fmt: skip
#: The text tower is not quantised: its term of the collapse degree is 0 by construction.
TEXT_TERM_NOTE = "0: the text tower stays FP32 (it runs once per label set, not per frame)"


@dataclass(frozen=True)
class TextReference(LabelSet):
    """The gate's label set through the FP32 text tower (a `LabelSet`, as the labels node scores with) and its file."""

    path: str = ""

    def describe(self) -> dict:
        return {"text_model": self.path, "labels": list(self.labels), "template": self.template,
                "logit_scale": round(self.logit_scale, 4)}  # fmt: skip


def load_reference(text_model: Path, image_model_id: str, threads: int = 0) -> TextReference:
    """Embed GATE_LABELS with the FP32 text export; refuse a text model of other weights (ModelMismatch)."""
    from ..text.encoder import TextEncoder

    enc = TextEncoder(text_model, threads)
    check_same_model(image_model_id, enc.model_id)
    return TextReference(**vars(LabelSet.build(enc, GATE_LABELS)), path=str(text_model))


def find_reference(image_model_id: str, text_model: Path | None, threads: int = 0) -> tuple[TextReference | None, str]:
    """(reference, note): `text_model`, else the data home's text export of the image model's name.

    Without a text tower of the same weights the text term is not computed and the note says why
    (the gate then has no text term). A `text_model` the user named that is of other weights is
    an error (ValueError), not a silent skip."""
    from ..text.build import text_model_path_for

    path = Path(text_model) if text_model else text_model_path_for(image_model_id)
    if not path.is_file():
        if text_model:
            raise ValueError(f"--text-model {path}: no such file")
        return None, f"not computed: no text tower at {path} (openclaw-vision export --tower text, or --text-model)"
    try:
        ref = load_reference(path, image_model_id, threads)
    except ModelMismatch as err:
        if text_model:
            raise ValueError(f"--text-model: {err}") from None
        return None, f"not computed: {path} is another model's text tower ({err})"
    return ref, f"{len(ref.labels)} labels through the FP32 text tower {ref.model_id}"


def text_term(int8_text: np.ndarray | None = None, fp32_text: np.ndarray | None = None) -> float:
    """Mean ‖s_j − t_j‖² of the INT8 vs FP32 text embeddings; 0 while the text tower stays FP32 (no INT8 one)."""
    if int8_text is None or fp32_text is None:
        return 0.0
    return float(np.mean(np.sum((int8_text - fp32_text) ** 2, axis=1)))
