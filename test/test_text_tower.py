"""CLIP text towers: configs, both checkpoint layouts, ONNX export checked against PyTorch, matching ids.

The Hugging Face checkpoint is written by transformers' own CLIPModel (a small random one), and
its text features are the reference our tower must reproduce: an independent implementation of
the causal mask, end-of-text pooling, final LayerNorm and projection.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file

from openclaw_vision.models.checkpoint import CheckpointError, build_model, build_text_model
from openclaw_vision.models.configs import TEXT_CONFIGS, get_text_config
from openclaw_vision.models.export import TEXT_INPUT_NAME, export_model
from openclaw_vision.text.encoder import TextEncoder
from openclaw_vision.text.tokenizer import ClipTokenizer

TEXTS = ["a photo of a door", "a forklift in a warehouse", "person", "stairs " * 60, ""]


def test_text_configs_have_open_clips_widths():
    b32 = get_text_config("ViT-B-32")
    assert (b32.width, b32.layers, b32.heads, b32.context_length, b32.vocab_size) == (512, 12, 8, 77, 49408)
    assert (get_text_config("vit-l-14").width, get_text_config("ViT-L-14").heads) == (768, 12)
    h = get_text_config("ViT-H-14")
    assert (h.width, h.layers, h.heads, h.embed_dim) == (1024, 24, 16, 1024)
    g = get_text_config("ViT-bigG-14")
    assert (g.width, g.layers, g.heads, g.embed_dim, g.mlp_dim) == (1280, 32, 20, 1280, 5120)
    from openclaw_vision.models.configs import MODEL_CONFIGS

    for name, cfg in TEXT_CONFIGS.items():  # both towers project into the same space
        assert cfg.embed_dim == MODEL_CONFIGS[name].embed_dim, name
        assert cfg.width % cfg.heads == 0, name


def test_random_text_tower_is_deterministic_and_causal():
    a, id_a = build_text_model("tiny", seed=0)
    b, _ = build_text_model("tiny", seed=0)
    c, _ = build_text_model("tiny", seed=1)
    ids = torch.from_numpy(ClipTokenizer()(TEXTS))
    with torch.no_grad():
        ya, yb, yc = a(ids), b(ids), c(ids)
    assert ya.shape == (5, 32) and torch.equal(ya, yb) and not torch.allclose(ya, yc)
    assert id_a == "tiny@random-seed0" and float(a.logit_scale.exp()) == pytest.approx(1 / 0.07)
    # causal + end-of-text pooling: tokens after the end token (padding) change nothing
    noisy = ids.clone()
    noisy[0, 8:] = 1234
    with torch.no_grad():
        torch.testing.assert_close(a(noisy)[0], ya[0])
        # ... while a token before it does
        changed = ids.clone()
        changed[0, 2] = 4321
        assert not torch.allclose(a(changed)[0], ya[0])


def _hf_clip(tmp_path, act: str = "quick_gelu"):
    """A small random transformers CLIPModel saved as a Hugging Face folder (config.json + model.safetensors)."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    text = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=49408,
                max_position_embeddings=77, hidden_act=act)  # fmt: skip
    vision = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, image_size=224,
                  patch_size=32, hidden_act=act)  # fmt: skip
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)).eval()
    with torch.no_grad():
        model.logit_scale.fill_(np.log(50.0))
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    return model, tmp_path / "hf"


def test_hugging_face_checkpoint_gives_transformers_text_features(tmp_path):
    hf, folder = _hf_clip(tmp_path)
    ours, text_id = build_text_model("tiny", folder)
    assert ours.cfg.act == "quick_gelu" and ours.cfg.width == 64  # the architecture came from config.json
    ids = torch.from_numpy(ClipTokenizer()(TEXTS))
    with torch.no_grad():
        ref = hf.get_text_features(input_ids=ids)
        ref = ref if torch.is_tensor(ref) else ref.pooler_output
        torch.testing.assert_close(ours(ids), ref, atol=1e-5, rtol=1e-5)
    assert float(ours.logit_scale.exp()) == pytest.approx(50.0)
    _, image_id = build_model("tiny", folder)
    assert text_id == image_id and "random" not in text_id  # one checkpoint, one id for both towers


def test_open_clip_checkpoint_holds_both_towers_and_the_logit_scale(tmp_path):
    text, _ = build_text_model("tiny", seed=5)
    image, _ = build_model("tiny", seed=6)
    with torch.no_grad():
        text.logit_scale.fill_(np.log(100.0))
    state = {k: v.clone().contiguous() for k, v in text.state_dict().items()}  # top-level names, as open_clip's CLIP
    state.update({f"visual.{k}": v.clone().contiguous() for k, v in image.state_dict().items()})
    state["attn_mask"] = torch.zeros(77, 77)  # older open_clip files keep the mask buffer: ignored
    save_file(state, tmp_path / "open_clip_model.safetensors")
    loaded, text_id = build_text_model("tiny", tmp_path / "open_clip_model.safetensors")
    _, image_id = build_model("tiny", tmp_path / "open_clip_model.safetensors")
    assert text_id == image_id
    ids = torch.from_numpy(ClipTokenizer()(TEXTS))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), text(ids))
    assert float(loaded.logit_scale.exp()) == pytest.approx(100.0)
    # open_clip's CustomTextCLIP layout: the same tower under `text.`
    custom = {("text." + k if k != "logit_scale" else k): v for k, v in text.state_dict().items()}
    save_file({k: v.clone().contiguous() for k, v in custom.items()}, tmp_path / "custom.safetensors")
    again, _ = build_text_model("tiny", tmp_path / "custom.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(again(ids), text(ids))


def test_text_checkpoint_for_another_architecture_fails_naming_the_parameter(tmp_path):
    text, _ = build_text_model("tiny", seed=0)
    state = {k: v.clone().contiguous() for k, v in text.state_dict().items()}
    state["text_projection"] = torch.zeros(64, 16)
    save_file(state, tmp_path / "bad.safetensors")
    with pytest.raises(CheckpointError, match=r"'text_projection': expected shape \(64, 32\), found \(64, 16\)"):
        build_text_model("tiny", tmp_path / "bad.safetensors")
    image, _ = build_model("tiny", seed=0)
    save_file(
        {f"visual.{k}": v.clone().contiguous() for k, v in image.state_dict().items()}, tmp_path / "v.safetensors"
    )
    with pytest.raises(CheckpointError, match="no text tower"):
        build_text_model("tiny", tmp_path / "v.safetensors")


def test_text_export_matches_torch_with_a_dynamic_batch(tiny_text_model):
    model, _ = build_text_model("tiny", seed=0)
    sess = ort.InferenceSession(str(tiny_text_model), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    assert inp.name == TEXT_INPUT_NAME and inp.type == "tensor(int64)" and inp.shape == ["batch", "tokens"]
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta["tower"] == "text" and meta["model_id"] == "tiny@random-seed0" and meta["embed_dim"] == "32"
    assert float(meta["logit_scale"]) == pytest.approx(1 / 0.07)
    ids = ClipTokenizer()(TEXTS)
    got = sess.run(None, {TEXT_INPUT_NAME: ids})[0]
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)).numpy()
    assert got.shape == (5, 32)
    cos = np.sum(got * ref, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() >= 0.9999
    single = np.concatenate([sess.run(None, {TEXT_INPUT_NAME: ids[i : i + 1]})[0] for i in range(5)])
    np.testing.assert_allclose(got, single, rtol=1e-4, atol=1e-5)
    # the padding after the last end token changes nothing: the runtime cuts it off
    short = ClipTokenizer()(TEXTS[:3])
    assert short.argmax(axis=1).max() < 10
    np.testing.assert_allclose(sess.run(None, {TEXT_INPUT_NAME: short[:, :10]})[0], got[:3], rtol=1e-4, atol=1e-5)
    enc = TextEncoder(tiny_text_model)
    assert enc.trim
    full = enc.encode(TEXTS[:3]).vectors
    enc.trim = False
    np.testing.assert_allclose(enc.encode(TEXTS[:3]).vectors, full, atol=1e-6)


def test_text_encoder_gives_unit_rows_and_refuses_an_image_model(tiny_text_model, tiny_model):
    enc = TextEncoder(tiny_text_model)
    emb = enc.encode(TEXTS)
    assert emb.vectors.shape == (5, 32) and emb.model_id == "tiny@random-seed0"
    np.testing.assert_allclose(np.linalg.norm(emb.vectors, axis=1), 1.0, rtol=1e-5)
    assert enc.logit_scale == pytest.approx(1 / 0.07)
    from openclaw_vision.encoders import EncoderError

    with pytest.raises(EncoderError, match="not a text tower"):
        TextEncoder(tiny_model)
    with pytest.raises(EncoderError, match=r"not found.*--tower text"):
        TextEncoder(tiny_model.parent / "missing.onnx")


def test_export_command_writes_the_text_tower_with_the_image_towers_id(tmp_path):
    out = tmp_path / "t.onnx"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "export", "--model", "tiny", "--tower", "text", "--seed", "4",
         "--out", str(out)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "text tower tiny@random-seed4, 32-d, ORT vs torch min cosine 1.0" in res.stdout
    assert TextEncoder(out).model_id == export_model("tiny", tmp_path / "i.onnx", seed=4).model_id


def test_text_command_prints_unit_embeddings_as_json_lines(tiny_text_model):
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "text", "a photo of a door", "a forklift!¢", "--text-model",
         str(tiny_text_model), "--ids"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["a photo of a door", "a forklift!¢"]
    assert rows[0]["token_ids"] == [49406, 320, 1125, 539, 320, 2489, 49407]
    assert rows[1]["token_ids"][-3:] == [0, 41359, 49407]  # "!" is token 0, like the padding: it is kept
    for r in rows:
        assert r["model_id"] == "tiny@random-seed0" and r["dim"] == 32
        assert np.linalg.norm(r["embedding"]) == pytest.approx(1.0, abs=1e-5)
    expected = TextEncoder(tiny_text_model).encode(["a forklift!¢"]).vectors[0]
    np.testing.assert_allclose(rows[1]["embedding"], expected, atol=1e-6)
    assert "random weights" in res.stderr and "noise" in res.stderr
