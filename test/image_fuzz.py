"""Generated sensor_msgs/Image messages for the reliability suite: each says whether it is a valid image.

The verdict comes from how the case was built (a step shorter than a row, data one byte short…),
never from the node's own validation code, so the suite checks the node against ROS's definition
of an Image: `data` holds exactly `step * height` bytes, each row `width * bytes-per-pixel` of
them (sensor_msgs/msg/Image.msg, common_interfaces humble: "uint8[] data # actual matrix data,
size is (step * rows)").

Adding an input: a new raw encoding is a row in the node's `ENCODINGS` (picked up here by
`good` cases, with its bytes per pixel, buffer rows and even-size rules); a new kind of bad
input is one function in `KINDS`; a new message type (e.g. CompressedImage) is a new table of
kinds with its own message builder (compressed_fuzz.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from openclaw_vision.preprocess.encodings import ENCODINGS

U32 = 2**32 - 1

#: Names a camera might send that the node does not take (filtered against ENCODINGS at import,
#: so an encoding added to the node leaves this list by itself).
_CANDIDATES = ("", "RGB8", "rgb8 ", " rgb8", "rgb8\x00", "bayer_rggb8", "rgb16", "16UC1", "32FC1", "jpeg", "nv12",
               "64FC4", "mono16", "кодировка", "rgb8😀", "x" * 300)  # fmt: skip
UNSUPPORTED = [e for e in _CANDIDATES if e not in ENCODINGS]

FRAME_IDS = ("", "camera", "カメラ/左 📷", "ø" * 1000, "tab\tand\nnewline")


@dataclass(frozen=True)
class ImageCase:
    kind: str
    height: int
    width: int
    step: int
    encoding: str
    data: bytes
    frame_id: str
    valid: bool  # True: the node must encode it or drop it for a newer frame; False: reject and count it
    is_bigendian: int = 0

    def fields(self) -> dict:
        return {
            "height": self.height,
            "width": self.width,
            "step": self.step,
            "encoding": self.encoding,
            "is_bigendian": self.is_bigendian,
            "data": self.data,
        }


def _bytes(rng: np.random.Generator, n: int) -> bytes:
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def _bpp(encoding: str) -> int:
    return ENCODINGS[encoding].bytes_per_pixel


def _rows(encoding: str, height: int) -> int:
    """Rows of `step` bytes the data holds (4:2:0 encodings add H/2 chroma rows)."""
    return ENCODINGS[encoding].buffer_rows(height)


def _fits(encoding: str, height: int | None, width: int | None) -> bool:
    """Whether the sizes meet the encoding's even-size rules (4:2:2 pairs, 4:2:0 blocks)."""
    enc = ENCODINGS[encoding]
    return not (
        (enc.even_width and width is not None and width % 2) or (enc.even_height and height is not None and height % 2)
    )


def _encoding(rng: np.random.Generator, width: int | None = None, height: int | None = None) -> str:
    """A supported encoding whose size rules `width` and `height` meet (each, if given)."""
    names = [e for e in ENCODINGS if _fits(e, height, width)]
    return names[int(rng.integers(len(names)))]


def _valid(rng, kind: str, height: int, width: int, encoding: str | None = None, pad: int | None = None) -> ImageCase:
    enc = encoding or _encoding(rng, width, height)
    step = width * _bpp(enc) + (int(rng.integers(0, 8)) if pad is None else pad)
    big = int(rng.integers(2))  # only 16-bit encodings read it; the others must ignore it
    return ImageCase(kind, height, width, step, enc, _bytes(rng, step * _rows(enc, height)), "", True, big)


def _even(rng, lo: int, hi: int) -> int:
    return 2 * int(rng.integers(lo // 2 or 1, hi // 2 + 1))


# --- valid images -----------------------------------------------------------------------------
def good(rng):
    return _valid(rng, "good", _even(rng, 2, 64) - int(rng.integers(2)), _even(rng, 2, 64))


def good_1x1(rng):
    return _valid(rng, "good_1x1", 1, 1)


def good_odd(rng):
    return _valid(rng, "good_odd", 2 * int(rng.integers(0, 40)) + 1, 2 * int(rng.integers(0, 40)) + 1)


def good_4k(rng):
    return _valid(rng, "good_4k", 2160, 3840, "rgb8", pad=0)


# --- invalid images ---------------------------------------------------------------------------
def _broken(case: ImageCase, kind: str, **changes) -> ImageCase:
    values = {**case.__dict__, **changes, "kind": kind, "valid": False}
    return ImageCase(**values)


def empty(rng):
    h, w = [(0, 0), (0, 16), (16, 0)][int(rng.integers(3))]
    enc = _encoding(rng, 2, 2)
    return ImageCase("empty", h, w, w * _bpp(enc), enc, b"", "", False)


def step_below_row(rng):
    c = _valid(rng, "", _even(rng, 2, 32), _even(rng, 2, 32), pad=0)
    return _broken(c, "step_below_row", step=int(rng.integers(0, c.step)))


def data_short(rng):
    c = good(rng)
    return _broken(c, "data_short", data=c.data[: -int(rng.integers(1, len(c.data) + 1))])


def data_long(rng):
    c = good(rng)
    return _broken(c, "data_long", data=c.data + _bytes(rng, int(rng.integers(1, 4096))))


def unknown_encoding(rng):
    return _broken(good(rng), "unknown_encoding", encoding=UNSUPPORTED[int(rng.integers(len(UNSUPPORTED)))])


def mismatched_encoding(rng):
    """Rows laid out for a 1- or 2-byte encoding, labelled as a 3- or 4-byte one (e.g. mono8 bytes as rgb8)."""
    small = [e for e in ENCODINGS if _bpp(e) <= 2]
    big = [e for e in ENCODINGS if _bpp(e) >= 3]
    c = _valid(rng, "", _even(rng, 2, 32), _even(rng, 2, 32), small[int(rng.integers(len(small)))], pad=0)
    return _broken(c, "mismatched_encoding", encoding=big[int(rng.integers(len(big)))])


def odd_width_packed(rng):
    """An odd width for an encoding whose pixels share chroma in pairs (4:2:2, 4:2:0), data otherwise right."""
    packed = [e for e in ENCODINGS if ENCODINGS[e].even_width]
    enc = packed[int(rng.integers(len(packed)))]
    w, h = 2 * int(rng.integers(0, 16)) + 1, _even(rng, 2, 16)
    step = w * _bpp(enc)
    return ImageCase("odd_width_packed", h, w, step, enc, _bytes(rng, step * _rows(enc, h)), "", False)


def odd_height_planar(rng):
    """An odd height for a 4:2:0 encoding (chroma in 2×2 blocks), data sized for the rows it claims."""
    planar = [e for e in ENCODINGS if ENCODINGS[e].even_height]
    enc = planar[int(rng.integers(len(planar)))]
    w, h = _even(rng, 2, 16), 2 * int(rng.integers(0, 16)) + 1
    step = w * _bpp(enc)
    return ImageCase("odd_height_planar", h, w, step, enc, _bytes(rng, step * _rows(enc, h)), "", False)


def huge_claim(rng):
    """Sizes up to 2^32 - 1 with a few bytes of data."""
    enc = _encoding(rng, 2)
    h = 2 * int(rng.integers(1 << 15, U32 // 2, endpoint=True))
    w = 2 * int(rng.integers(1 << 14, (U32 // _bpp(enc)) // 2))
    step = min(U32, w * _bpp(enc))
    return ImageCase("huge_claim", h, w, step, enc, _bytes(rng, int(rng.integers(0, 64))), "", False)


def step_overflow(rng):
    """step * height = 2^32 + len(data): in 32-bit arithmetic the size check passes and the rows
    (65 537+ bytes apart) run far past the data; in exact arithmetic it is plainly too short."""
    k = int(rng.integers(1, 9))
    return ImageCase("step_overflow", 256, 4, (1 << 24) + k, "mono8", _bytes(rng, 256 * k), "", False)


#: kind → (generator, weight). Weights favour the cheap cases; 4K frames are a few per run.
KINDS: dict[str, tuple[Callable[[np.random.Generator], ImageCase], float]] = {
    "good": (good, 30),
    "good_1x1": (good_1x1, 2),
    "good_odd": (good_odd, 4),
    "good_4k": (good_4k, 0.03),
    "empty": (empty, 4),
    "step_below_row": (step_below_row, 8),
    "data_short": (data_short, 8),
    "data_long": (data_long, 8),
    "unknown_encoding": (unknown_encoding, 8),
    "mismatched_encoding": (mismatched_encoding, 6),
    "odd_width_packed": (odd_width_packed, 4),
    "odd_height_planar": (odd_height_planar, 2),
    "huge_claim": (huge_claim, 6),
    "step_overflow": (step_overflow, 4),
}


def pick_kinds(kinds: dict, n: int, rng: np.random.Generator, last: str) -> list[str]:
    """`n` kind names from `kinds` (name → (generator, weight)): every kind once, the rest drawn by weight,
    shuffled; then `last` (a good kind, so the newest frame of a run is one the node must serve)."""
    names = list(kinds)
    weights = np.array([kinds[k][1] for k in names], np.float64)
    picks = list(names) + list(rng.choice(names, size=max(0, n - len(names) - 1), p=weights / weights.sum()))
    rng.shuffle(picks)
    return [*picks, last]


def generate(n: int, seed: int = 0) -> Iterator[ImageCase]:
    """`n` cases (made one at a time: a few are 25 MB), every kind at least once, the last one valid."""
    rng = np.random.default_rng(seed)
    for kind in pick_kinds(KINDS, n, rng, "good"):
        case = KINDS[kind][0](rng)
        yield ImageCase(**{**case.__dict__, "frame_id": FRAME_IDS[int(rng.integers(len(FRAME_IDS)))]})
