"""Real CLIP's outliers and INT8, on the tiny tower: the outlier profiles, the plain path's failure on each,
and the outlier-aware path (SmoothQuant-style migration, the FC2 split, partition) passing with most GEMM FLOPs
INT8.

The profiles (quant/profiles.py) stand in for real weights; what is asserted is what a user with real
weights would notice: the plain INT8 model is refused by the gate, ours is accepted and stays INT8.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from openclaw_vision.models.checkpoint import build_model
from openclaw_vision.quant import profiles


def _residuals(model, x: torch.Tensor) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda m, i, o: out.append(o.detach())) for b in model.transformer.resblocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return out


@pytest.fixture(scope="module")
def frames_x() -> torch.Tensor:
    """Preprocessed sample frames (not the profiles' own probe images)."""
    from openclaw_vision.preprocess.cpu import CpuPreprocessor
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import pan_frames
    from openclaw_vision.preprocess.spec import PreprocessSpec

    pre = CpuPreprocessor(PreprocessSpec(size=224))
    return torch.from_numpy(np.stack([pre(Frame.from_rgb(f)) for f in pan_frames(6)]))


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_profile_keeps_the_fp32_function_where_designed_and_is_deterministic(profile, frames_x):
    base, _ = build_model("tiny")
    a, _ = build_model("tiny")
    b, _ = build_model("tiny")
    info = profiles.apply(a, profile)
    profiles.apply(b, profile)
    with torch.no_grad():
        ya, yb, y0 = a(frames_x), b(frames_x), base(frames_x)
    assert torch.equal(ya, yb)  # same profile, same seed: the same weights
    cos = torch.nn.functional.cosine_similarity(ya, y0).min().item()
    assert info.function_kept == (profile in profiles.FUNCTION_KEPT)
    if info.function_kept:
        assert cos > 0.99999
    else:
        assert cos < 0.999  # its own FP32 reference: the function was changed on purpose
    # each LayerNorm has its own gamma now (the exporter shared one initializer among all of them)
    gammas = [m.weight.detach() for m in a.modules() if isinstance(m, torch.nn.LayerNorm)]
    if profile in ("ln-channels", "k-narrow", "clip-like"):
        assert max(float(g.max() / g.min()) for g in gammas) > 20


def test_ln_channels_widen_a_few_channels_twenty_to_a_hundred_fold(frames_x):
    model, _ = build_model("tiny")
    info = profiles.apply(model, "ln-channels")
    chans = info.notes["ln-channels"]["channels"]
    y = model.transformer.resblocks[1].ln_2.weight.detach().abs()
    others = np.delete(y.numpy(), chans)
    assert np.all((y[chans].numpy() >= 20 * others.max()) & (y[chans].numpy() <= 100 * others.max() + 1e-4))


def test_massive_activations_and_high_norm_tokens_have_the_published_magnitudes(frames_x):
    model, _ = build_model("tiny")
    info = profiles.apply(model, "clip-like")
    res = _residuals(model, frames_x)
    m = info.notes["massive"]
    for r in res[m["block"] :]:  # from the middle block on, on the same tokens and dimensions
        peak = r[:, m["tokens"]][..., m["dims"]].abs()
        assert peak.min() > 100 and peak.min() >= 1000 * r.abs().median()
    reg = info.notes["registers"]
    norms = res[reg["block"]].norm(dim=-1)
    on = torch.zeros(norms.shape[1], dtype=torch.bool)
    on[reg["tokens"]] = True
    assert norms[:, on].min() > 150 and norms[:, ~on].median() < 50  # >150 against tens


def test_unknown_profile_is_a_clear_error():
    model, _ = build_model("tiny")
    with pytest.raises(ValueError, match="clip-like"):
        profiles.apply(model, "realistic")


# --- teeth and the outlier-aware path -------------------------------------------------------------


@pytest.fixture(scope="module")
def profile_models(tmp_path_factory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("profiles")
    return {p: profiles.export_profile("tiny", p, folder / f"{p}.fp32.onnx") for p in profiles.PROFILES}


@pytest.fixture(scope="module")
def calib_frames() -> list:
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import pan_frames

    return [Frame.from_rgb(f) for f in pan_frames(24)]


def _quantize(model, frames, out, **kw):
    from pathlib import Path

    from openclaw_vision.quant.pipeline import QuantOptions, quantize

    opts = QuantOptions(model, Path("<sample frames>"), out, measure_memory=False, text=False, **kw)
    return quantize(opts, frames)


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_plain_int8_fails_the_gate_and_the_outlier_aware_default_passes(profile, profile_models, calib_frames,
                                                                        tmp_path):  # fmt: skip
    from openclaw_vision.encoders.trt_rules import explicit_quantisation_problems

    model = profile_models[profile]
    plain = _quantize(
        model,
        calib_frames,
        tmp_path / "plain.onnx",
        smooth=False,
        split=False,
        centre=False,
        max_float=0,
        sensitivity=False,
    )
    assert not plain.passed and not (tmp_path / "plain.onnx").exists()  # the gate refuses it: no model written
    # the default path; max_float 3: the tiny tower's default (a quarter of its 10 layers) is 2
    ours = _quantize(model, calib_frames, tmp_path / "ours.onnx", max_float=3)
    assert ours.passed, ours.summary()
    assert ours.worst.mean_cosine > plain.worst.mean_cosine
    r = ours.as_dict()
    assert r["int8_flop_share"] >= 0.9  # most GEMM FLOPs stay INT8 (the split's side paths count as float)
    migrated = [m for m in r["migration"]["layers"] if m["alpha"] is not None]
    assert migrated and all(0 < m["alpha"] < 1 for m in migrated)  # the report names each with its alpha
    if profile in ("massive", "registers", "clip-like"):
        # the FC2 input's outlier units (after a GELU: not migratable) run apart in FP32, and FC2 stays INT8
        split = r["split"]["layers"]
        assert split and all(s["layer"].endswith("mlp_proj") and s["units"] for s in split)
        assert not any(label.endswith("mlp_proj") for label in r["kept_float_labels"])
    # each FC2 input (a GELU's: [-0.17, hi]) is shifted to a symmetric range, half the s8 step (quant/centre.py)
    centred = r["centre"]["layers"]
    assert [c["layer"] for c in centred] == ["block0.mlp_proj", "block1.mlp_proj"]
    assert all(c["shift"] > 0 and c["step_ratio"] < 0.6 for c in centred)
    assert explicit_quantisation_problems(tmp_path / "ours.onnx") == []  # still TensorRT's Q/DQ form
    # the gate held frames of another source (quant/shift.py) to the same bounds, and reports the gap
    assert r["shift"]["frames"] > 0 and "shift" in r["per_resolution"]
    assert r["per_resolution"]["shift"]["mean_cosine"] >= r["gate"]["mean_cosine"]


def test_shift_scenes_are_another_source_and_the_gap_is_reported():
    from openclaw_vision.core.gate import Metrics, shift_gap
    from openclaw_vision.preprocess.sample_frames import pan_frames
    from openclaw_vision.quant import shift

    a, b = list(shift.scenes(3)), list(shift.scenes(3))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)) and a[0].shape == (720, 1280, 3)
    pan = np.stack([np.asarray(f, np.float32).mean(axis=(0, 1)) for f in pan_frames(3)])
    assert not np.allclose(np.stack([f.mean(axis=(0, 1)) for f in a]), pan, atol=5)
    native = Metrics(0.9999, 0.9995, 1.0, 0.001, 0.0)
    worse = Metrics(0.9990, 0.9950, 0.9, 0.004, 0.0)
    gap = shift_gap({"1920x1080": native, "shift": worse}, "1920x1080")
    assert gap["mean_cosine"] == pytest.approx(0.0009) and gap["nn_agreement"] == pytest.approx(0.1)
    assert gap["kl"] == pytest.approx(0.003) and shift_gap({"1920x1080": native}, "1920x1080") is None


def test_migration_keeps_the_fp32_function(profile_models, calib_frames, tmp_path):
    """The migrated, split and centred FP32 graph (before any INT8) computes what the export computes."""
    import onnx

    from openclaw_vision.core.ortsession import session
    from openclaw_vision.quant import calibrate, centre, smooth, split
    from openclaw_vision.quant.graph import quantisable_layers
    from openclaw_vision.quant.qdq import S8_MAX

    model = onnx.load(str(profile_models["clip-like"]))
    layers = quantisable_layers(model)
    groups = smooth.groups(model, layers)
    assert {g.layers[0].role for g in groups} == {"qkv", "mlp_fc", "proj"}
    x = np.random.default_rng(0).standard_normal((4, 3, 224, 224)).astype(np.float32)
    acts = [g.activation for g in groups]
    obs = session(calibrate.observation_model(model, acts).SerializeToString(), level="basic")
    stats = calibrate.collect_stats(obs, acts, [x], rows={a: smooth.ROWS for a in acts})
    inits = {i.name: i for i in model.graph.initializer}
    read = lambda name: onnx.numpy_helper.to_array(inits[name])  # noqa: E731
    plan = smooth.plan(model, layers, stats, read, "s8s8")
    assert any(m.alpha is not None and m.cosine > m.cosine_plain for m in plan)
    graph, weights = smooth.rewrite(model, plan, read)
    # and the FC2 split (quant/split.py) on top: the registers' and massive units' side paths
    fc2 = [layer.activation for layer in layers if layer.role == "mlp_proj"]
    obs = session(calibrate.observation_model(model, fc2).SerializeToString(), level="basic")
    splits = split.plan(layers, calibrate.collect_stats(obs, fc2, [x]))
    assert len(splits) == 2 and all(len(sp.units) >= 1 for sp in splits)
    graph, weights = split.rewrite(graph, splits, weights, read)
    for p in weights:
        i = next(k for k, t in enumerate(graph.graph.initializer) if t.name == p.name)
        graph.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(p.produce(), p.name))
    # and the FC2 inputs centred (quant/centre.py) on what the split left: a Sub each, FC2's bias corrected
    obs = session(calibrate.observation_model(graph, fc2).SerializeToString(), level="basic")
    split_ranges = calibrate.compute_ranges(calibrate.collect_stats(obs, fc2, [x]), "minmax")
    centres = centre.plan(layers, split_ranges, "s8s8")
    assert [c.layer.activation for c in centres] == fc2 and centre.plan(layers, split_ranges, "u8s8") == []
    inits = {i.name: i for i in graph.graph.initializer}
    graph = centre.rewrite(graph, centres, lambda name: onnx.numpy_helper.to_array(inits[name]))
    obs = session(calibrate.observation_model(graph, fc2).SerializeToString(), level="basic")
    shifted = calibrate.compute_ranges(calibrate.collect_stats(obs, fc2, [x]), "minmax")
    for c, a in zip(centres, fc2, strict=True):
        want, before = c.shifted(split_ranges[a]), split_ranges[a]
        step = want.hi / S8_MAX
        assert want.hi == pytest.approx(-want.lo) and step < 0.6 * before.absmax / S8_MAX  # symmetric: a finer step
        assert c.c / step == pytest.approx(round(c.c / step), abs=1e-6)  # whole steps: 0 stays a grid point
        assert abs(shifted[a].lo - want.lo) <= step and abs(shifted[a].hi - want.hi) <= step  # what it measures
    a = session(model.SerializeToString()).run(None, {"pixel_values": x})[0]
    b = session(graph.SerializeToString()).run(None, {"pixel_values": x})[0]
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99999


def test_split_leaves_a_tower_without_outlier_units_alone(tmp_path):
    """A random-init tower's FC2 inputs have no outlier unit: no side path (nothing float added, nothing to pay)."""
    import onnx

    from openclaw_vision.core.ortsession import session
    from openclaw_vision.models.export import export_model
    from openclaw_vision.quant import calibrate, split
    from openclaw_vision.quant.graph import quantisable_layers

    model = onnx.load(str(export_model("tiny", tmp_path / "tiny.fp32.onnx").path))
    layers = quantisable_layers(model)
    fc2 = [layer.activation for layer in layers if layer.role == "mlp_proj"]
    x = np.random.default_rng(1).standard_normal((4, 3, 224, 224)).astype(np.float32)
    obs = session(calibrate.observation_model(model, fc2).SerializeToString(), level="basic")
    assert split.plan(layers, calibrate.collect_stats(obs, fc2, [x])) == []
