"""Preprocessing: exact on analytic inputs, faithful to the standard CLIP preprocessing on real frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from openclaw_vision.models.checkpoint import build_model
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.encodings import FrameError
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.reference import reference_preprocess
from openclaw_vision.preprocess.sample_frames import convert_rgb, pan_frames
from openclaw_vision.preprocess.spec import PreprocessSpec, crop_box, resized_size

RGB = (200, 90, 30)  # three different values: a swapped channel cannot go unnoticed
SPEC = PreprocessSpec()


def _frame(rgb_img: np.ndarray, encoding: str, pad: int = 0) -> Frame:
    packed = convert_rgb(rgb_img, encoding)
    h, w, c = packed.shape
    step = w * c + pad
    buf = np.zeros((h, step), np.uint8)
    buf[:, : w * c] = packed.reshape(h, w * c)
    return Frame.from_buffer(buf.tobytes(), h, w, step, encoding)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
@pytest.mark.parametrize("size", [(1080, 1920), (480, 854), (300, 200)])
def test_uniform_frame_gives_exact_normalised_channels(encoding, size):
    img = np.empty((*size, 3), np.uint8)
    img[:] = RGB
    out = CpuPreprocessor()(_frame(img, encoding, pad=7))
    expected = SPEC.normalise(np.array(RGB, np.uint8))
    assert out.shape == (3, 224, 224) and out.dtype == np.float32
    for c in range(3):
        np.testing.assert_allclose(out[c], expected[c], atol=1e-5)


def test_mono8_replicates_the_grey_level():
    img = np.full((720, 1280, 3), 77, np.uint8)
    out = CpuPreprocessor()(_frame(img, "mono8"))
    np.testing.assert_allclose(
        out, SPEC.normalise(np.array([77, 77, 77], np.uint8))[:, None, None] * np.ones((3, 224, 224)), atol=1e-5
    )


@pytest.mark.parametrize("encoding", ["yuv422", "yuyv"])
def test_yuv422_uniform_frame_matches_bt601_within_one_level(encoding):
    img = np.empty((1080, 1920, 3), np.uint8)
    img[:] = RGB
    out = CpuPreprocessor()(_frame(img, encoding))
    one_level = 1 / (255 * min(SPEC.std))
    for c in range(3):
        assert abs(float(out[c].mean()) - float(SPEC.normalise(np.array(RGB, np.uint8))[c])) <= 1.5 * one_level


def test_channel_order_follows_the_encoding():
    img = np.zeros((480, 640, 3), np.uint8)
    img[..., 0] = 255  # pure red
    for enc in ("rgb8", "bgr8", "rgba8", "bgra8"):
        out = CpuPreprocessor()(_frame(img, enc))
        means = out.reshape(3, -1).mean(1)
        assert means[0] > 1.5 and means[1] < -1.5 and means[2] < -1.4, enc


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"\0" * 100, 10, 10, 30, "rgb8"), "needs 300"),
        ((b"\0" * 300, 10, 10, 20, "rgb8"), "step 20 < width"),
        ((b"\0" * 300, 10, 10, 30, "rgb16"), "unsupported encoding 'rgb16'"),
        ((b"\0" * 300, 10, 15, 30, "yuv422"), "even width"),
        ((b"", 0, 10, 30, "rgb8"), "empty image"),
    ],
)
def test_bad_images_raise_a_clear_error(args, message):
    with pytest.raises(FrameError, match=message):
        Frame.from_buffer(*args)


@pytest.mark.parametrize("hw", [(1080, 1920), (720, 1280), (480, 854), (1920, 1080), (224, 224), (200, 300)])
def test_crop_box_matches_the_reference_geometry(hw):
    h, w = hw
    rh, rw = resized_size(h, w, 224)
    assert min(rh, rw) == 224
    box = crop_box(h, w, 224)
    # the box is centred and covers 224/resized of the source along each axis
    assert box.x0 + box.width / 2 == pytest.approx(w / 2, abs=w / rw)
    assert box.y0 + box.height / 2 == pytest.approx(h / 2, abs=h / rh)
    assert box.width == pytest.approx(224 * w / rw) and box.height == pytest.approx(224 * h / rh)


@pytest.fixture(scope="module")
def vit_b32():
    model, _ = build_model("ViT-B-32", seed=0)
    return model


def _grass(h: int, w: int) -> np.ndarray:
    """A robot's-eye view of grass at native resolution: the fine texture that aliasing ruins."""
    import skimage.data

    g = np.stack([skimage.data.grass()] * 3, axis=-1)
    return np.ascontiguousarray(np.tile(g, (h // g.shape[0] + 1, w // g.shape[1] + 1, 1))[:h, :w])


@pytest.mark.parametrize("size", [(1080, 1920), (720, 1280), (480, 854)])
def test_embedding_of_our_tensor_matches_the_reference_tensor(vit_b32, size):
    """What matters is the embedding: ours vs the standard CLIP preprocessing, on real photographs."""
    import cv2

    frames = [cv2.resize(f, (size[1], size[0]), interpolation=cv2.INTER_AREA) for f in pan_frames(6)]
    frames.append(_grass(*size))
    ours = np.stack([CpuPreprocessor()(Frame.from_rgb(f)) for f in frames])
    ref = np.stack([reference_preprocess(Frame.from_rgb(f)) for f in frames])
    with torch.no_grad():
        a = vit_b32(torch.from_numpy(ours)).numpy()
        b = vit_b32(torch.from_numpy(ref)).numpy()
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.999, cos


def test_plain_bilinear_would_fail_the_same_check(vit_b32):
    """The check above has teeth: the aliasing shortcut it guards against is caught by it."""
    import cv2

    frames = [_grass(1080, 1920)]
    spec = PreprocessSpec()

    def bilinear(f):
        b = crop_box(*f.shape[:2], 224)
        crop = f[int(b.y0) : int(b.y0 + b.height), int(b.x0) : int(b.x0 + b.width)]
        return spec.normalise(cv2.resize(crop, (224, 224), interpolation=cv2.INTER_LINEAR)).transpose(2, 0, 1)

    fast = np.stack([bilinear(f) for f in frames])
    ref = np.stack([reference_preprocess(Frame.from_rgb(f)) for f in frames])
    with torch.no_grad():
        a = vit_b32(torch.from_numpy(fast)).numpy()
        b = vit_b32(torch.from_numpy(ref)).numpy()
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() < 0.999


def test_batch_equals_frame_by_frame():
    frames = [Frame.from_rgb(f) for f in pan_frames(3, 640, 480)]
    pre = CpuPreprocessor()
    np.testing.assert_array_equal(pre.batch(frames), np.stack([pre(f) for f in frames]))
