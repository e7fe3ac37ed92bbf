"""The gate's distribution-shift row: held-out frames that do not come from the calibration source.

Calibration ranges are fitted to the calibration frames, and the held-out frames the gate scores
are usually every k-th frame of the *same* recording: a range that clips what the robot sees
elsewhere (another room, night, a close-up of a label) passes that gate unnoticed. So the gate
scores a second held-out set from another source too, held to the same image-embedding bounds (mean
and min cosine, NN agreement; the zero-shot term stays on the native rows: its label set is the
calibration camera's world, and on the tiny random tower one out-of-domain near-tie in 16 frames
flipped), and the report gives the gap between it and the native row (gate.shift_gap).

The source is `--shift` (another bag or image folder), else `scenes`: a scene generator of its own,
deliberately unlike the panning camera of preprocess/sample_frames.py: other photographs (scikit-image's
greyscale and texture images, tinted), a different camera (1280×720), zoomed crops with an inset,
dimmer or harsher light (gamma 0.7–1.6, gain 0.6–1.2), sensor noise and motion blur — deterministic by seed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import cv2
import numpy as np

from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.frame import Frame
from ..preprocess.spec import PreprocessSpec

#: scikit-image photographs none of which is in sample_frames.PHOTOS (the calibration camera's panorama)
SCENES = ("camera", "moon", "coins", "page", "text", "brick", "grass", "gravel", "retina", "colorwheel", "clock",
          "cell")  # fmt: skip


def _photo(name: str) -> np.ndarray:
    import skimage.data

    img = np.asarray(getattr(skimage.data, name)())
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[:, :, :3])


def scenes(count: int, width: int = 1280, height: int = 720, seed: int = 0) -> Iterator[np.ndarray]:
    """`count` RGB frames of other scenes under other light (see the module doc)."""
    rng = np.random.default_rng(seed)
    photos = [_photo(n) for n in SCENES]
    for i in range(count):
        bg = photos[i % len(photos)].astype(np.float32)
        zoom = rng.uniform(1.0, 2.5)
        h, w = bg.shape[:2]
        ch, cw = int(h / zoom), int(w / zoom)
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        frame = cv2.resize(bg[y : y + ch, x : x + cw], (width, height), interpolation=cv2.INTER_CUBIC)
        frame *= rng.uniform(0.6, 1.4, 3).astype(np.float32)  # tint (white balance of another camera)
        inset = photos[int(rng.integers(len(photos)))].astype(np.float32)
        ih, iw = height // 3, width // 4
        oy, ox = int(rng.integers(0, height - ih)), int(rng.integers(0, width - iw))
        frame[oy : oy + ih, ox : ox + iw] = cv2.resize(inset, (iw, ih), interpolation=cv2.INTER_AREA)
        gamma, gain = rng.uniform(0.7, 1.6), rng.uniform(0.6, 1.2)
        frame = 255.0 * gain * (np.clip(frame, 0, 255) / 255.0) ** gamma
        k = int(rng.integers(1, 4)) * 2 + 1
        frame = cv2.blur(frame, (k, 1))  # motion blur along the pan
        frame += rng.normal(0, rng.uniform(2, 10), frame.shape).astype(np.float32)
        yield np.clip(frame, 0, 255).astype(np.uint8)


def tensors(frames: Iterable[Frame], image_size: int) -> np.ndarray:
    """The frames through the node's preprocessor (as quant/data.py prepares the native held-out rows)."""
    pre = CpuPreprocessor(PreprocessSpec(size=image_size))
    return np.stack([pre(f) for f in frames])


def heldout(source: Path | None, count: int, image_size: int) -> tuple[str, np.ndarray]:
    """(description, (N, 3, S, S) tensors) of the shift row: `source`'s frames spread over it, else `scenes`."""
    if source is not None:
        from .data import iter_frames

        return str(source), tensors(iter_frames(Path(source), spread=count), image_size)
    return f"scenes (other photographs and light, seed 0), {count} frames", tensors(
        (Frame.from_rgb(f) for f in scenes(count)), image_size
    )
