"""FramePipeline's two stages: a batch's frames prepared in parallel give the batch they give one
after another, bit for bit, and a bad frame among them is rejected alone with the others in order."""

from __future__ import annotations

import threading

import compressed_fuzz
import numpy as np
import pytest

from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.preprocess.compressed import CompressedFrame
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import compress_rgb, convert_rgb, pan_frames
from openclaw_vision.runtime.pipeline import PREP_THREAD_PREFIX, FramePipeline


def _frames() -> list:
    """Four frames of one cross-camera batch: raw 1080p, JPEG 1080p, nv12, a small bgr8."""
    rgb = [np.ascontiguousarray(f) for f in pan_frames(4, 1920, 1080)]
    fmt, jpeg = compress_rgb(rgb[1], "rgb8", "jpeg")
    nv12 = convert_rgb(np.ascontiguousarray(rgb[2][:480, :640]), "nv12")
    bgr = convert_rgb(np.ascontiguousarray(rgb[3][:150, :97]), "bgr8")
    return [
        Frame.from_rgb(rgb[0]),
        CompressedFrame.from_buffer(jpeg, fmt),
        Frame.from_buffer(nv12.tobytes(), 480, 640, 640, "nv12"),
        Frame.from_buffer(bgr.tobytes(), 150, 97, 97 * 3, "bgr8"),
    ]


class Recording(CpuPreprocessor):
    """The CPU preprocessor, noting which thread preprocessed each frame."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def __call__(self, frame, out=None):
        self.threads.add(threading.current_thread().name)
        return super().__call__(frame, out)


@pytest.fixture
def encoder(tiny_model):
    return OnnxRuntimeEncoder(tiny_model, threads=1)


def test_a_batch_prepared_in_parallel_is_the_batch_prepared_one_frame_after_another(encoder):
    frames = _frames()
    serial = FramePipeline(encoder, max_batch=4, prep_threads=1)
    pre = Recording()
    parallel = FramePipeline(encoder, max_batch=4, preprocessor=pre, prep_threads=4)
    try:
        assert (serial.prep_threads, parallel.prep_threads) == (1, 4)
        a, b = serial.prepare(frames), parallel.prepare(frames)
        assert a.encoded == b.encoded == [0, 1, 2, 3] and not a.rejected and not b.rejected
        assert a.pixels.shape == (4, 3, 224, 224) and np.array_equal(a.pixels, b.pixels)
        assert set(b.decode_s) == {1} and set(b.preprocess_s) == {0, 1, 2, 3}
        assert pre.threads and all(t.startswith(PREP_THREAD_PREFIX + "_") for t in pre.threads), pre.threads
        np.testing.assert_array_equal(serial.run(frames).vectors, parallel.run(frames).vectors)
    finally:
        parallel.close()
    assert parallel.prep_threads == 1 and np.array_equal(parallel.prepare(frames).pixels, a.pixels)  # closed: serial


@pytest.mark.parametrize("bad_at", [0, 2])
def test_a_bad_frame_in_a_parallel_batch_of_four_is_rejected_alone_and_the_others_encoded_in_order(encoder, bad_at):
    good = _frames()[:3]
    bad = compressed_fuzz.by_decoding(per_kind=1, seed=3)[0]  # passes the checks on arrival, no decoder takes it
    frames = list(good)
    frames.insert(bad_at, CompressedFrame.from_buffer(bad.data, bad.format))
    pipe = FramePipeline(encoder, max_batch=4, prep_threads=4)
    try:
        res = pipe.run(frames)
    finally:
        pipe.close()
    want = [i for i in range(4) if i != bad_at]
    assert res.encoded == want and list(res.rejected) == [bad_at] and set(res.preprocess_s) == set(want)
    alone = FramePipeline(encoder, max_batch=4, prep_threads=1).run(good)
    assert res.vectors.shape == (3, 32)
    np.testing.assert_allclose(res.vectors, alone.vectors, atol=1e-6)  # each row is its frame's, in input order


def test_a_preprocessor_that_writes_its_encoders_buffer_prepares_one_frame_at_a_time(encoder):
    class Shared(CpuPreprocessor):
        concurrent = False

    pipe = FramePipeline(encoder, max_batch=4, preprocessor=Shared(), prep_threads=4)
    assert not pipe.concurrent and pipe.prep_threads == 1
