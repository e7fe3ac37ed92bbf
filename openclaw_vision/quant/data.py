"""Calibration and evaluation data: frames from a rosbag or an image folder, preprocessed as the node does.

Frames go through the node's own `CpuPreprocessor`, so the ranges the calibrator sees are the
ranges the encoder will see. The held-out split takes every k-th frame: spread over the whole
recording, never used for calibration. The gate also runs at lower camera resolutions (the
frame is resized before preprocessing, as a 720p or 480p camera would deliver it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..core.errors import OpenclawError
from ..preprocess.compressed import CompressedFrame
from ..preprocess.cpu import CpuPreprocessor
from ..preprocess.encodings import FrameError
from ..preprocess.frame import Frame
from ..preprocess.spec import PreprocessSpec
from ..runtime import bags

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
#: The camera resolutions the accuracy gate checks (width, height).
GATE_RESOLUTIONS = ((1920, 1080), (1280, 720), (854, 480))


class CalibrationDataError(OpenclawError, ValueError):
    """The calibration source cannot be read or holds too few frames."""


def _stride(count: int, limit: int, spread: int) -> tuple[int, int]:
    """(take every k-th, stop after n): the first `limit` items, or `spread` items spread over all."""
    if limit:
        return 1, min(limit, count)
    if spread and count > spread:
        return -(-count // spread), spread
    return 1, count


def _frames_from_bag(path: Path, topic: str | None, limit: int, spread: int) -> Iterator[Frame]:
    """The frames of the bag's camera (`bags.camera_source`: which topic, raw or compressed, folder or
    file) as the node reads them, the header's stamp and frame_id kept; compressed ones decoded here,
    since calibration resizes them."""
    try:
        source = bags.camera_source(path, topic)
    except bags.BagError as err:
        raise CalibrationDataError(str(err)) from err
    every, limit = _stride(source.messages, limit, spread)
    try:
        for frame in bags.iter_frames(path, source.topic, limit, every):
            yield frame.decode() if isinstance(frame, CompressedFrame) else frame
    except FrameError as err:
        raise CalibrationDataError(str(err)) from err


def _frames_from_folder(path: Path, limit: int, spread: int) -> Iterator[Frame]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    every, limit = _stride(len(files), limit, spread)
    for file in files[::every][:limit]:
        bgr = cv2.imread(str(file), cv2.IMREAD_COLOR)
        if bgr is None:
            raise CalibrationDataError(f"{file}: not a readable image")
        yield Frame.from_rgb(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


#: Frames kept from a long recording, evenly spread over it: 1080p frames are 6 MB each in
#: memory, and a robot's bag can hold tens of thousands.
MAX_FRAMES = 256


def iter_frames(source: Path, topic: str | None = None, limit: int = 0, spread: int = MAX_FRAMES) -> Iterator[Frame]:
    """Frames from a bag (a rosbag2 folder or a .mcap / .db3 file; its camera by `bags.camera_source`)
    or a folder of images, one at a time: a recording is never held in memory whole.

    `limit`: the first `limit` frames. Otherwise at most `spread` frames, evenly spread over the
    whole recording (0: every frame). The source is checked before the first frame is read.
    """
    source = Path(source)
    if not source.exists():
        raise CalibrationDataError(f"{source}: no such bag or folder")
    if bags.is_bag(source):
        frames = _frames_from_bag(source, topic, limit, spread)
    elif source.is_dir():
        frames = _frames_from_folder(source, limit, spread)
    else:
        raise CalibrationDataError(f"{source}: expected a rosbag2 folder, a .mcap or .db3 file, or a folder of images")
    first = next(frames, None)
    if first is None:
        raise CalibrationDataError(f"{source}: no frames")
    return itertools.chain([first], frames)


def load_frames(source: Path, topic: str | None = None, limit: int = 0, spread: int = MAX_FRAMES) -> list[Frame]:
    """`iter_frames` as a list (for small sets and tests)."""
    return list(iter_frames(source, topic, limit, spread))


def split(frames: list, holdout_every: int = 4) -> tuple[list, list]:
    """(calibration, held-out): every `holdout_every`-th item is held out, starting with the second."""
    if holdout_every < 2:
        raise ValueError("holdout_every must be >= 2")
    held = [f for i, f in enumerate(frames) if i % holdout_every == 1]
    calib = [f for i, f in enumerate(frames) if i % holdout_every != 1]
    if len(calib) < 2 or len(held) < 2:
        raise CalibrationDataError(
            f"{len(frames)} frames give {len(calib)} calibration and {len(held)} held-out frames; need at least 2 each"
        )
    return calib, held


def to_rgb_frame(frame: Frame) -> Frame:
    """The frame as packed RGB (any supported encoding), for resizing."""
    if frame.encoding == "rgb8":
        return frame
    return Frame.from_rgb(frame.to_rgb(), frame.stamp_ns)


def resized(frame: Frame, width: int, height: int) -> Frame:
    """The frame as a camera of `width`×`height` would deliver it (area-averaged downscale)."""
    rgb = to_rgb_frame(frame)
    if (rgb.width, rgb.height) == (width, height):
        return rgb
    interp = cv2.INTER_AREA if width < rgb.width else cv2.INTER_CUBIC
    return Frame.from_rgb(cv2.resize(rgb.pixels, (width, height), interpolation=interp), frame.stamp_ns)


def spread(x: np.ndarray, n: int) -> np.ndarray:
    """`n` rows spread evenly over `x` (all of them when n <= 0 or n >= len(x))."""
    if n <= 0 or n >= len(x):
        return x
    return x[np.linspace(0, len(x) - 1, n).round().astype(int)]


@dataclass
class QuantData:
    """Preprocessed tensors: calibration frames and held-out sets per gate resolution (224² each: small)."""

    calibration: np.ndarray  # (N, 3, S, S)
    heldout: dict[str, np.ndarray]  # "1920x1080" -> (M, 3, S, S); also gate.SHIFT_ROW (quant/shift.py)
    source: str
    shift_source: str = ""  # where the shift row's frames come from ("": no shift row)

    @property
    def calibration_frames(self) -> int:
        return len(self.calibration)

    @property
    def native(self) -> np.ndarray:
        """Held-out tensors at the first gate resolution (used for the sensitivity sweep)."""
        return next(iter(self.heldout.values()))

    def capped(self, calibration: int, heldout: int) -> QuantData:
        """At most `calibration` / `heldout` frames (0: all), spread evenly over each set."""
        return QuantData(
            spread(self.calibration, calibration),
            {k: spread(v, heldout) for k, v in self.heldout.items()},
            self.source,
            self.shift_source,
        )

    def batches(self, batch: int) -> Iterator[np.ndarray]:
        """The calibration tensors in batches of `batch`."""
        for i in range(0, len(self.calibration), batch):
            yield self.calibration[i : i + batch]


def prepare(
    frames: Iterable[Frame],
    image_size: int,
    source: str,
    holdout_every: int = 4,
    resolutions: tuple[tuple[int, int], ...] = GATE_RESOLUTIONS,
    progress=None,
) -> QuantData:
    """Split and preprocess with the node's preprocessor, one frame at a time (see `split` for the rule).

    Each camera frame is reduced to its 224² tensors as soon as it is read and then dropped, so a
    long recording at 1080p costs ~0.6 MB per kept frame, not 6 MB.
    """
    if holdout_every < 2:
        raise ValueError("holdout_every must be >= 2")
    wrap = progress or (lambda it, desc: it)
    pre = CpuPreprocessor(PreprocessSpec(size=image_size))
    calib: list[np.ndarray] = []
    held: dict[str, list[np.ndarray]] = {f"{w}x{h}": [] for w, h in resolutions}
    for i, frame in enumerate(wrap(frames, "reading and preprocessing frames")):
        if i % holdout_every != 1:
            calib.append(pre(frame))
            continue
        for (w, h), key in zip(resolutions, held, strict=True):
            held[key].append(pre(resized(frame, w, h)))
    n_held = len(next(iter(held.values()))) if held else 0
    if len(calib) < 2 or n_held < 2:
        raise CalibrationDataError(
            f"{len(calib) + n_held} frames give {len(calib)} calibration and {n_held} held-out frames;"
            " need at least 2 each"
        )
    return QuantData(np.stack(calib), {k: np.stack(v) for k, v in held.items()}, source)
