"""The raw encodings cameras send, each against a conversion written here, independently of the code under test.

Bayer: mosaics made in this file from known colour images; the pattern names against cv_bridge's
table (ros-perception/vision_opencv, humble, cv_bridge/src/cv_bridge.cpp: BAYER_RGGB →
COLOR_BayerBG2RGB, BGGR → RG, GBRG → GR, GRBG → GB) and against a bilinear demosaic in NumPy.
nv12/nv21: a BT.601 limited-range conversion in float NumPy. mono16: round(v / 257) in integers.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from openclaw_vision.preprocess.cpu import CpuPreprocessor, crop_rgb
from openclaw_vision.preprocess.encodings import ENCODINGS, FrameError, gray16_to_gray8, to_rgb
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.spec import PreprocessSpec

SPEC = PreprocessSpec()
RGB = (200, 90, 30)

# Where R, G, B sit in each 2×2 cell, by the ROS name: the name reads the first row, then the second.
PATTERNS = {"bayer_rggb8": "RGGB", "bayer_bggr8": "BGGR", "bayer_gbrg8": "GBRG", "bayer_grbg8": "GRBG"}
CHANNEL = {"R": 0, "G": 1, "B": 2}


def mosaic(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """What a sensor with this colour filter array records: one channel per pixel."""
    names = PATTERNS[encoding]
    out = np.empty(rgb.shape[:2], np.uint8)
    for k, name in enumerate(names):
        dy, dx = divmod(k, 2)
        out[dy::2, dx::2] = rgb[dy::2, dx::2, CHANNEL[name]]
    return out


def numpy_bilinear_demosaic(m: np.ndarray, encoding: str) -> np.ndarray:
    """Textbook bilinear demosaic: each missing colour is the mean of its nearest same-colour neighbours."""
    h, w = m.shape
    names = PATTERNS[encoding]
    have = np.zeros((3, h, w), bool)
    for k, name in enumerate(names):
        dy, dx = divmod(k, 2)
        have[CHANNEL[name], dy::2, dx::2] = True
    p = np.pad(m.astype(np.float64), 1, mode="reflect")
    out = np.zeros((h, w, 3))
    for c in range(3):
        hp = np.pad(have[c], 1, mode="reflect")
        vals = np.zeros((h, w))
        cnt = np.zeros((h, w))
        # same-colour samples: the pixel itself, else its 4 edge neighbours, else its 4 diagonal ones
        for ring in ([(0, 0)], [(-1, 0), (1, 0), (0, -1), (0, 1)], [(-1, -1), (-1, 1), (1, -1), (1, 1)]):
            need = cnt == 0
            for dy, dx in ring:
                sel = hp[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] & need
                vals[sel] += p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w][sel]
                cnt += sel
        out[..., c] = vals / cnt
    return out


def _frame(raw: np.ndarray, encoding: str, pad: int = 0, height: int | None = None) -> Frame:
    rows, w = raw.shape[:2]
    row = raw.reshape(rows, -1)
    buf = np.zeros((rows, row.shape[1] + pad), np.uint8)
    buf[:, : row.shape[1]] = row
    h = rows if height is None else height
    return Frame.from_buffer(buf.tobytes(), h, w, row.shape[1] + pad, encoding)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    import skimage.data

    return np.ascontiguousarray(skimage.data.astronaut()[:200, :300])  # RGB, 200x300


# --- Bayer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", list(PATTERNS))
def test_bayer_of_a_uniform_colour_gives_that_colour_everywhere(encoding):
    img = np.empty((64, 96, 3), np.uint8)
    img[:] = RGB
    rgb = _frame(mosaic(img, encoding)[:, :, None], encoding, pad=5).to_rgb()
    assert rgb.shape == (64, 96, 3)
    assert (rgb == np.array(RGB, np.uint8)).all(), np.unique(rgb.reshape(-1, 3), axis=0)[:5]


@pytest.mark.parametrize("encoding", list(PATTERNS))
def test_bayer_pattern_names_follow_cv_bridge(encoding):
    """A wrong first-row/second-row mapping swaps red and blue: a red/blue ramp shows it at once."""
    yy, xx = np.mgrid[0:48, 0:64]
    img = np.stack([4 * xx % 256, np.full_like(xx, 128), 255 - 4 * yy % 256], axis=-1).astype(np.uint8)
    rgb = _frame(mosaic(img, encoding)[:, :, None], encoding).to_rgb().astype(int)
    inner = (slice(2, -2), slice(2, -2))
    assert np.abs(rgb[inner] - img[inner]).max() <= 1  # bilinear reproduces linear ramps in the interior
    cv_bridge = {"bayer_rggb8": "BG", "bayer_bggr8": "RG", "bayer_gbrg8": "GR", "bayer_grbg8": "GB"}
    import cv2

    ref = cv2.cvtColor(mosaic(img, encoding), getattr(cv2, f"COLOR_Bayer{cv_bridge[encoding]}2RGB"))
    assert np.array_equal(rgb, ref)


@pytest.mark.parametrize("encoding", list(PATTERNS))
def test_bayer_demosaic_is_bilinear_on_a_photograph(photo, encoding):
    ours = _frame(mosaic(photo, encoding)[:, :, None], encoding).to_rgb().astype(np.float64)
    ref = numpy_bilinear_demosaic(mosaic(photo, encoding), encoding)
    inner = (slice(1, -1), slice(1, -1))
    assert np.abs(ours[inner] - ref[inner]).max() <= 1.0  # OpenCV rounds its integer means


@pytest.mark.parametrize("encoding", ["bayer_rggb8", "bayer_gbrg8"])
@pytest.mark.parametrize(
    "box", [(0, 0, 300, 200), (37, 11, 251, 190), (1, 1, 2, 2), (50, 0, 250, 200), (299, 199, 300, 200)]
)
def test_bayer_crop_with_margin_equals_demosaicing_the_whole_frame(photo, encoding, box):
    frame = _frame(mosaic(photo, encoding)[:, :, None], encoding, pad=3)
    x0, y0, x1, y1 = box
    crop, layout = crop_rgb(frame, x0, y0, x1, y1)
    assert layout == "RGB"
    assert np.array_equal(crop, frame.to_rgb()[y0:y1, x0:x1])


# --- nv12 / nv21 --------------------------------------------------------------------------------


def bt601_rgb_to_yuv(rgb):
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255
    u = 128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255
    v = 128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255
    return y, u, v


def bt601_yuv_to_rgb(y, u, v):
    c, d, e = y - 16, u - 128, v - 128
    r = 255 / 219 * c + 255 / 224 * 1.402 * e
    g = 255 / 219 * c - 255 / 224 * (1.772 * 0.114 / 0.587) * d - 255 / 224 * (1.402 * 0.299 / 0.587) * e
    b = 255 / 219 * c + 255 / 224 * 1.772 * d
    return np.clip(np.stack([r, g, b], -1), 0, 255)


def make_nv(rgb: np.ndarray, uv_first: bool) -> np.ndarray:
    """(H*3/2, W) bytes: the Y plane, then per 2×2 block one (U,V) or (V,U) pair (the block's mean)."""
    y, u, v = bt601_rgb_to_yuv(rgb)
    h, w = y.shape
    ub = u.reshape(h // 2, 2, w // 2, 2).mean((1, 3))
    vb = v.reshape(h // 2, 2, w // 2, 2).mean((1, 3))
    pair = np.stack([ub, vb] if uv_first else [vb, ub], -1).reshape(h // 2, w)
    return np.clip(np.round(np.concatenate([y, pair])), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("encoding", ["nv12", "nv21"])
def test_nv_matches_a_float_bt601_limited_range_conversion(photo, encoding):
    nv = make_nv(photo, uv_first=encoding == "nv12")
    h, w = photo.shape[:2]
    frame = _frame(nv[:, :, None], encoding, pad=6, height=h)
    assert (frame.height, frame.width) == (h, w)
    ours = frame.to_rgb().astype(np.float64)
    # the reference: luma per pixel, chroma of the pixel's 2×2 block (nearest), BT.601 studio swing
    y = nv[:h].astype(np.float64)
    c = nv[h:].reshape(h // 2, w // 2, 2).astype(np.float64).repeat(2, 0).repeat(2, 1)
    u, v = (c[..., 0], c[..., 1]) if encoding == "nv12" else (c[..., 1], c[..., 0])
    ref = bt601_yuv_to_rgb(y, u, v)
    assert np.abs(ours - ref).max() <= 2.0  # OpenCV's fixed point vs float, plus rounding
    assert np.abs(ours - ref).mean() < 0.6


@pytest.mark.parametrize("encoding", ["nv12", "nv21"])
def test_nv_uniform_colour_round_trips_and_swapped_order_does_not(encoding):
    img = np.empty((32, 48, 3), np.uint8)
    img[:] = RGB
    right = _frame(make_nv(img, uv_first=encoding == "nv12")[:, :, None], encoding, height=32).to_rgb()
    wrong = _frame(make_nv(img, uv_first=encoding != "nv12")[:, :, None], encoding, height=32).to_rgb()
    assert np.abs(right.astype(int) - RGB).max() <= 2
    assert np.abs(wrong.astype(int) - RGB).max() > 40


@pytest.mark.parametrize("box", [(37, 11, 251, 190), (0, 0, 300, 200), (1, 1, 3, 3)])
def test_nv_crop_equals_converting_the_whole_frame(photo, box):
    frame = _frame(make_nv(photo, True)[:, :, None], "nv12", pad=2, height=200)
    crop, layout = crop_rgb(frame, *box)
    assert layout == "RGB"
    x0, y0, x1, y1 = box
    x0, y0, x1, y1 = x0 - x0 % 2, y0 - y0 % 2, x1 + x1 % 2, y1 + y1 % 2  # widened to 2×2 blocks
    assert np.array_equal(crop, frame.to_rgb()[y0:y1, x0:x1])


@pytest.mark.parametrize(
    ("h", "w", "step", "data", "message"),
    [
        (4, 5, 5, 60, "even width"),
        (5, 4, 4, 60, "even height"),
        # 4 luma + 2 chroma rows of step 5: exactly 6 * 5 bytes (sensor_msgs/Image: size is step * rows)
        (4, 4, 5, 29, r"4x4 nv12 with step 5 \(plus H/2 chroma rows\) needs 30"),
        (4, 4, 5, 31, r"4x4 nv12 with step 5 \(plus H/2 chroma rows\) needs 30"),
    ],
)
def test_nv_size_rules(h, w, step, data, message):
    with pytest.raises(FrameError, match=message):
        Frame.from_buffer(b"\0" * data, h, w, step, "nv12")
    if data == 29:
        assert Frame.from_buffer(b"\0" * 30, h, w, step, "nv12").pixels.shape == (6, 4, 1)


# --- mono16 / 16UC1 -----------------------------------------------------------------------------


def test_mono16_to_8_bits_is_round_v_over_257_for_every_value():
    v = np.arange(65536, dtype=np.uint32)
    expected = np.array([round(x / 257) for x in range(65536)], np.uint8)  # Python's exact rational rounding
    assert np.array_equal(((v + 128) // 257).astype(np.uint8), expected)
    le = v.astype("<u2").view(np.uint8).reshape(256, 256, 2)
    be = v.astype(">u2").view(np.uint8).reshape(256, 256, 2)
    assert np.array_equal(gray16_to_gray8(le, big_endian=False).reshape(-1), expected)
    assert np.array_equal(gray16_to_gray8(be, big_endian=True).reshape(-1), expected)


@pytest.mark.parametrize("encoding", ["mono16", "16UC1"])
@pytest.mark.parametrize("big_endian", [False, True])
def test_mono16_honours_is_bigendian(encoding, big_endian):
    values = [0, 1, 128, 129, 385, 386, 30000, 65407, 65408, 65535]
    data = b"".join(struct.pack(">H" if big_endian else "<H", x) for x in values) + b"\xee" * 3  # padding
    frame = Frame.from_buffer(data, 1, len(values), 2 * len(values) + 3, encoding, big_endian=big_endian)
    rgb = frame.to_rgb()
    assert rgb[0, :, 0].tolist() == [round(x / 257) for x in values]
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()


def test_mono16_uniform_frame_preprocesses_to_its_8_bit_grey():
    v = 40000
    raw = np.full((720, 1280), v, "<u2").view(np.uint8).reshape(720, 1280, 2)
    out = CpuPreprocessor()(_frame(raw, "mono16"))
    grey = SPEC.normalise(np.array([round(v / 257)] * 3, np.uint8))
    np.testing.assert_allclose(out, grey[:, None, None] * np.ones((3, 224, 224)), atol=1e-5)


# --- every encoding through the preprocessor ------------------------------------------------------


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_encoding_of_a_uniform_frame_preprocesses_to_that_colour(encoding):
    from openclaw_vision.preprocess.sample_frames import convert_rgb

    img = np.empty((480, 640, 3), np.uint8)
    img[:] = RGB
    raw = convert_rgb(img, encoding)
    frame = _frame(raw, encoding, pad=4, height=480)
    out = CpuPreprocessor()(frame)
    expected = to_rgb(frame.pixels, frame.encoding)[240, 320]  # the frame's own colour after conversion
    if ENCODINGS[encoding].layout in ("GRAY", "GRAY16"):
        assert expected[0] == expected[1] == expected[2]
    else:  # colour survives every conversion within the YUV rounding
        assert np.abs(expected.astype(int) - RGB).max() <= 2, expected
    target = SPEC.normalise(expected)
    for c in range(3):
        np.testing.assert_allclose(out[c], target[c], atol=1e-5)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("pad", [0, 7])
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "strided-array"])
def test_a_frame_is_a_read_only_view_of_the_message_bytes(encoding, pad, kind):
    """The node validates every frame it receives, dropped ones too: its pixels must stay the message's own
    bytes (no copy of 6 MB per frame), row padding cut off, and not writable through the frame."""
    enc = ENCODINGS[encoding]
    h, w = 4, 6
    step = w * enc.bytes_per_pixel + pad
    rows = enc.buffer_rows(h)
    flat = np.arange(step * rows, dtype=np.uint8)
    big = np.zeros(2 * flat.size, np.uint8)
    big[::2] = flat
    data = {"bytes": flat.tobytes(), "bytearray": bytearray(flat.tobytes()), "memoryview": memoryview(flat.tobytes()),
            "strided-array": big[::2]}[kind]  # fmt: skip
    frame = Frame.from_buffer(data, h, w, step, encoding)
    want = flat.reshape(rows, step)[:, : w * enc.bytes_per_pixel].reshape(rows, w, enc.bytes_per_pixel)
    np.testing.assert_array_equal(frame.pixels, want)
    source = data if kind == "strided-array" else np.frombuffer(data, np.uint8)
    assert np.shares_memory(frame.pixels, source)
    assert not frame.pixels.flags.writeable
