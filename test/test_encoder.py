"""The ONNX Runtime encoder backend."""

from __future__ import annotations

import numpy as np
import pytest

from openclaw_vision.encoders import EncoderError, create_encoder
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder


def test_embeddings_are_unit_length_and_batch_independent(tiny_model):
    enc = OnnxRuntimeEncoder(tiny_model, threads=1)
    assert (enc.model_id, enc.embed_dim, enc.image_size, enc.precision) == ("tiny@random-seed0", 32, 224, "fp32")
    x = np.random.default_rng(0).standard_normal((4, 3, 224, 224)).astype(np.float32)
    emb = enc.encode(x)
    assert emb.vectors.shape == (4, 32) and emb.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb.vectors, axis=1), 1.0, atol=1e-6)
    one = enc.encode(x[2:3]).vectors[0]
    assert float(one @ emb.vectors[2]) > 0.99999
    assert float(emb.vectors[0] @ emb.vectors[1]) < 0.999  # different inputs, different embeddings


def test_wrong_input_shape_and_missing_model_are_clear_errors(tiny_model, tmp_path):
    enc = create_encoder("auto", tiny_model)
    with pytest.raises(EncoderError, match=r"expected pixels \(N, 3, 224, 224\)"):
        enc.encode(np.zeros((1, 3, 100, 100), np.float32))
    with pytest.raises(EncoderError, match=r"model file not found.*openclaw-vision export"):
        create_encoder("onnxruntime", tmp_path / "nope.onnx")
    with pytest.raises(EncoderError, match="unknown backend"):
        create_encoder("cuda-magic", tiny_model)
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(EncoderError, match="cannot load"):
        create_encoder("onnxruntime", tmp_path / "junk.onnx")
