"""The standard CLIP preprocessing, written from its definition, as the yardstick.

This is what a user copies from open_clip / torchvision: PIL bicubic resize of the short side
(PIL antialiases when it shrinks), integer center crop, /255, mean/std. We never run it in the
node; tests and the benchmark compare our fast paths against it.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from .frame import Frame
from .spec import PreprocessSpec, resized_size


def reference_preprocess(frame: Frame, spec: PreprocessSpec | None = None) -> np.ndarray:
    spec = spec or PreprocessSpec()
    rgb = frame.to_rgb()
    h, w = rgb.shape[:2]
    rh, rw = resized_size(h, w, spec.size)
    img = Image.fromarray(rgb).resize((rw, rh), Image.Resampling.BICUBIC)
    top = round((rh - spec.size) / 2.0)
    left = round((rw - spec.size) / 2.0)
    img = img.crop((left, top, left + spec.size, top + spec.size))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = (arr - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))
