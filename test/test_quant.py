"""INT8 quantisation: the Q/DQ form, calibration maths, the gate, the hybrid partition, the CLI.

All on the tiny tower (two blocks, ten weight layers) so the whole flow runs in seconds; the
ViT-B/32 numbers come from running `openclaw-vision quantize` and are in the closing note.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from onnx import numpy_helper

from openclaw_vision.core.ortsession import session_options
from openclaw_vision.quant import calibrate
from openclaw_vision.quant.calibrate import Range
from openclaw_vision.quant.data import CalibrationDataError, load_frames, split
from openclaw_vision.quant.evaluate import compare
from openclaw_vision.quant.graph import quantisable_layers
from openclaw_vision.quant.qdq import SWITCH_INPUT, build_qdq_model, build_switch_model, quantise_weight

REPORT_KEYS = {"passed", "mean_cosine", "min_cosine", "nn_agreement", "kept_float", "size_mb"}


def _ranges(model: onnx.ModelProto, absmax: float = 4.0) -> dict[str, Range]:
    return {layer.activation: Range(-absmax, absmax) for layer in quantisable_layers(model)}


def _run(model, x: np.ndarray, **extra) -> np.ndarray:
    blob = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    # The node's own session options: exact integer GEMMs on CPUs without VNNI too.
    sess = ort.InferenceSession(blob, session_options(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"pixel_values": x, **extra})[0]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _quantize(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "quantize", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- graph and Q/DQ form -------------------------------------------------------------------


def test_only_weight_layers_are_quantisable_and_roles_are_named(tiny_model):
    layers = quantisable_layers(onnx.load(str(tiny_model)))
    labels = [layer.label for layer in layers]
    assert labels[0] == "patch_embed" and labels[-1] == "proj"
    assert labels[1:5] == ["block0.qkv", "block0.attn_out", "block0.mlp_fc", "block0.mlp_proj"]
    assert len(layers) == 2 + 4 * 2  # the attention QKᵀ / PV MatMuls (two activations) are not candidates


def test_qdq_model_has_tensorrt_explicit_quantisation_form(tiny_model):
    model = onnx.load(str(tiny_model))
    layers = quantisable_layers(model)
    keep = {layers[3].node}
    q = build_qdq_model(model, layers, _ranges(model), "s8s8", keep)
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    producer = {o: n for n in q.graph.node for o in n.output}
    nodes = {n.name: n for n in q.graph.node}
    for layer in layers:
        node = nodes[layer.node]
        act, weight = producer.get(node.input[0]), producer.get(node.input[1])
        if layer.node in keep:
            assert act is None or act.op_type != "DequantizeLinear"
            assert node.input[1] in inits and inits[node.input[1]].dtype == np.float32
            continue
        # activation: per-tensor signed INT8, zero point 0
        assert act.op_type == "DequantizeLinear" and producer[act.input[0]].op_type == "QuantizeLinear"
        assert inits[act.input[1]].shape == () and inits[act.input[2]].dtype == np.int8 and inits[act.input[2]] == 0
        # weight: INT8 initializer, per-output-channel scale, zero points 0
        assert weight.op_type == "DequantizeLinear"
        w, scale, zp = (inits[name] for name in weight.input)
        axis = next(a.i for a in weight.attribute if a.name == "axis")
        assert w.dtype == np.int8 and zp.dtype == np.int8 and not zp.any()
        assert scale.shape == (w.shape[axis],) and axis == layer.channel_axis
    # everything else stays float: no Q/DQ feeds LayerNorm, Softmax or Add
    for node in q.graph.node:
        if node.op_type in ("LayerNormalization", "Softmax", "Add"):
            assert all(getattr(producer.get(i), "op_type", "") != "DequantizeLinear" for i in node.input)
    meta = {p.key: p.value for p in q.metadata_props}
    assert meta["precision"] == "int8" and json.loads(meta["quant_kept_float"]) == [layers[3].node]


def test_u8s8_scheme_uses_unsigned_asymmetric_activations(tiny_model):
    model = onnx.load(str(tiny_model))
    layers = quantisable_layers(model)
    ranges = {layer.activation: Range(-1.0, 3.0) for layer in layers}
    q = build_qdq_model(model, layers, ranges, "u8s8")
    zps = [numpy_helper.to_array(i) for i in q.graph.initializer if i.name.endswith("_qdq_zp")]
    assert zps and all(z.dtype == np.uint8 and int(z) == 64 for z in zps)  # -lo / ((hi - lo) / 255) = 63.75


@settings(max_examples=40, deadline=None)
@example(np.array([[4.5e-44]], np.float32))  # a subnormal channel: its scale once underflowed to 0
@given(arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=st.floats(-50, 50, width=32)))
def test_weight_quantisation_error_is_at_most_half_a_step(w):
    q, scale = quantise_weight(w, axis=1)
    assert q.dtype == np.int8 and np.abs(q.astype(int)).max() <= 127
    assert np.all(np.abs(q * scale[None, :] - w) <= scale[None, :] / 2 + 1e-6 * np.abs(w).max())


def test_int8_results_do_not_depend_on_batch_size(tiny_model):
    model = onnx.load(str(tiny_model))
    q = build_qdq_model(model, quantisable_layers(model), _ranges(model))
    x = np.random.default_rng(0).standard_normal((5, 3, 224, 224)).astype(np.float32)
    batched = _run(q, x)
    single = np.concatenate([_run(q, x[i : i + 1]) for i in range(5)])
    # 1e-6: the integer GEMMs are exact, so only float rounding in the float ops may differ by batch
    # (measured 0 on this VNNI EPYC; the AVX2 EPYC's exact U8U8 kernels, forced by session_options, are exact too)
    np.testing.assert_allclose(batched, single, atol=1e-6)


def test_switch_model_equals_the_real_qdq_model_layer_by_layer(tiny_model):
    model = onnx.load(str(tiny_model))
    layers = quantisable_layers(model)
    ranges = _ranges(model, 2.0)
    switch = build_switch_model(model, layers, ranges)
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    fp32 = _run(model, x)
    for i in (0, 3, len(layers) - 1):
        on = np.zeros(len(layers), bool)
        on[i] = True
        emulated = _run(switch, x, **{SWITCH_INPUT: on})
        real = _run(
            build_qdq_model(model, layers, ranges, keep_float={lay.node for lay in layers} - {layers[i].node}), x
        )
        # 2e-5: measured 1.5e-7 here (VNNI) and ~2e-5 on the AVX2 EPYC with session_options' exact kernels
        # (2e-3 without them: ORT's default U8S8 GEMM saturates there — why the node forces them)
        np.testing.assert_allclose(emulated, real, atol=2e-5)
        assert np.sum(real * fp32, 1).min() < 1.0  # the switch really quantised something
    np.testing.assert_allclose(_run(switch, x, **{SWITCH_INPUT: np.zeros(len(layers), bool)}), fp32, atol=1e-6)


# --- calibration maths ------------------------------------------------------------------------


def _stats_of(samples: np.ndarray) -> calibrate.TensorStats:
    s = calibrate.TensorStats(float(samples.min()), float(samples.max()))
    a = s.absmax
    s.hist = np.histogram(samples, bins=2 * calibrate.HIST_BINS, range=(-a, a))[0]
    return s


def test_percentile_and_entropy_clip_outliers_that_minmax_keeps():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200_000), [80.0, -75.0]])  # two outliers, 80 sigma out
    ranges = {m: calibrate.compute_ranges({"t": _stats_of(x)}, m)["t"] for m in calibrate.METHODS}
    assert ranges["minmax"].absmax == pytest.approx(80.0)
    for method in ("percentile", "entropy"):
        assert 3.0 < ranges[method].absmax < 10.0, (method, ranges[method])


def test_entropy_keeps_the_full_range_of_a_uniform_tensor():
    x = np.random.default_rng(0).uniform(-1, 1, 200_000)
    r = calibrate.compute_ranges({"t": _stats_of(x)}, "entropy")["t"]
    assert r.absmax > 0.9  # nothing to clip: a uniform distribution has no tail


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of minmax, percentile, entropy"):
        calibrate.compute_ranges({}, "kl")


# --- gate metrics ---------------------------------------------------------------------------


def test_gate_metrics_agree_with_their_definitions():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((6, 16))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    same = compare(ref, ref)
    assert same.mean_cosine == pytest.approx(1.0) and same.nn_agreement == 1.0 and same.collapse == pytest.approx(0)
    assert same.kl == pytest.approx(0, abs=1e-9)
    swapped = ref[[1, 0, 2, 3, 4, 5]]
    m = compare(swapped, ref)
    assert m.nn_agreement == pytest.approx(4 / 6) and m.min_cosine < 0.9 and m.kl > 0.1
    assert m.collapse == pytest.approx(np.mean(np.sum((swapped - ref) ** 2, 1)))
    dup = np.vstack([ref[:3], ref[:3]])  # identical frames: a tie is not a disagreement
    assert compare(dup, dup).nn_agreement == 1.0


# --- calibration data -------------------------------------------------------------------------


def test_calibration_frames_from_bag_and_image_folder(sample_bag, tmp_path):
    frames = load_frames(sample_bag)
    assert len(frames) == 12 and frames[0].pixels.shape == (1080, 1920, 3)
    assert len(load_frames(sample_bag, "/camera/image_raw", limit=5)) == 5
    spread = load_frames(sample_bag, spread=5)  # a long recording is sampled across, not cut short
    assert [f.stamp_ns for f in spread] == [frames[i].stamp_ns for i in (0, 3, 6, 9)]
    calib, held = split(frames)
    assert len(held) == 3 and len(calib) == 9 and not {id(f) for f in held} & {id(f) for f in calib}
    folder = tmp_path / "images"
    folder.mkdir()
    for i, f in enumerate(frames[:4]):
        cv2.imwrite(str(folder / f"{i:03d}.png"), cv2.cvtColor(f.pixels[::4, ::4], cv2.COLOR_RGB2BGR))
    (folder / "notes.txt").write_text("not an image")
    imgs = load_frames(folder)
    assert len(imgs) == 4 and imgs[0].pixels.shape == (270, 480, 3)
    np.testing.assert_array_equal(load_frames(folder, spread=2)[1].pixels, imgs[2].pixels)
    np.testing.assert_array_equal(imgs[1].pixels, frames[1].pixels[::4, ::4])


def test_calibration_frames_from_a_single_bag_file(sample_bag, tmp_path):
    """A .mcap file on its own (as other tools write them) is a bag, as bags.read_messages takes it."""
    import shutil

    [mcap] = sample_bag.glob("*.mcap")
    alone = shutil.copy(mcap, tmp_path / "alone.mcap")
    frames = load_frames(alone, limit=3)
    assert [f.stamp_ns for f in frames] == [f.stamp_ns for f in load_frames(sample_bag, limit=3)]
    (tmp_path / "notes.txt").write_text("not a bag")
    with pytest.raises(CalibrationDataError, match=r"expected a rosbag2 folder, a \.mcap or \.db3 file, or a folder"):
        load_frames(tmp_path / "notes.txt")


def test_bad_calibration_sources_are_clear_errors(sample_bag, tmp_path):
    with pytest.raises(CalibrationDataError, match="no such bag or folder"):
        load_frames(tmp_path / "missing")
    with pytest.raises(CalibrationDataError, match="no image topic '/nope'"):
        load_frames(sample_bag, "/nope")
    with pytest.raises(CalibrationDataError, match="need at least 2 each"):
        split(load_frames(sample_bag, limit=3))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationDataError, match="no frames"):
        load_frames(tmp_path / "empty")


# --- the command ------------------------------------------------------------------------------


def test_quantize_command_writes_a_gated_model_and_its_report(tiny_model, sample_bag, tmp_path, home_with_text_tower):
    out, report = tmp_path / "tiny.int8.onnx", tmp_path / "report"
    res = _quantize(
        "--model-path", str(tiny_model), "--calib", str(sample_bag), "--out", str(out), "--report", str(report)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "gate passed" in res.stdout
    r = json.loads((report / "report.json").read_text())
    assert set(r) >= REPORT_KEYS and r["passed"] is True
    assert r["mean_cosine"] >= 0.999 and r["min_cosine"] >= 0.995 and r["nn_agreement"] >= 0.99
    assert set(r["per_resolution"]) == {"1920x1080", "1280x720", "854x480", "shift"}  # + the shift row (quant/shift.py)
    assert r["shift"]["frames"] > 0 and set(r["shift"]["gap_vs_native"]) >= {"mean_cosine", "min_cosine"}
    assert r["size_mb"]["int8"] < r["size_mb"]["fp32"] / 2
    assert len(r["sensitivity"]) == 10 and {s["role"] for s in r["sensitivity"]} >= {"qkv", "mlp_fc", "proj"}
    assert r["memory"]["int8"]["peak_rss_mb"] > 0 and r["collapse"]["image"] >= 0
    assert r["batch_invariance_max_abs"] <= 1e-6
    for f in ("report.md", "sensitivity.png"):
        assert (report / f).stat().st_size > 0
    assert "PASSED" in (report / "report.md").read_text()
    from openclaw_vision.quant.pipeline import QuantResult

    saved = QuantResult.load(report / "report.json")  # what the ladder reads back from its child
    assert saved.as_dict() == r and saved.passed and saved.summary() in res.stdout
    # the data home's text tower of the same model id gives the gate its text term, unasked
    assert r["zero_shot"]["top1_agreement"] >= r["gate"]["zero_shot_top1"] and "zero-shot agreement" in res.stdout
    # the model runs in the node's encoder and says what it is
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder

    enc = OnnxRuntimeEncoder(out)
    assert enc.precision == "int8" and enc.model_id.startswith("tiny@random-seed0")
    meta = enc.session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["quant_kept_float"]) == r["kept_float"]
    assert json.loads(meta["quant_gate"])["passed"] is True


def test_a_model_that_fails_the_gate_is_not_written(tiny_model, sample_bag, tmp_path, data_home):
    out = tmp_path / "strict.int8.onnx"
    out.write_bytes(b"stale model from an earlier run")
    res = _quantize(
        "--model-path", str(tiny_model), "--calib", str(sample_bag), "--out", str(out), "--report",
        str(tmp_path / "r"), "--min-mean-cosine", "0.9999999", "--max-float-layers", "0", "--no-sensitivity",
        "--no-memory",
    )  # fmt: skip
    assert res.returncode == 1
    assert "gate FAILED, no model written" in res.stderr and "mean cosine 0.99" in res.stderr
    assert not out.exists()
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["passed"] is False and r["int8_model"] is None
    assert "FAILED" in (tmp_path / "r" / "report.md").read_text()


def test_bad_calibration_input_exits_2_with_the_reason(tiny_model, tmp_path):
    res = _quantize("--model-path", str(tiny_model), "--calib", str(tmp_path / "nope"), "--report", str(tmp_path))
    assert res.returncode == 2 and "no such bag or folder" in res.stderr


@pytest.fixture(scope="module")
def outlier_model(tmp_path_factory) -> Path:
    """The tiny tower with one LayerNorm channel scaled 100×: the activation outlier real CLIP towers have."""
    import torch

    from openclaw_vision.models.checkpoint import build_model
    from openclaw_vision.models.export import export_onnx

    model, model_id = build_model("tiny", seed=0)
    with torch.no_grad():
        model.transformer.resblocks[1].ln_2.weight[5] *= 100.0
    return export_onnx(model, model_id + "+outlier", tmp_path_factory.mktemp("outlier") / "tiny.fp32.onnx")


def test_partition_keeps_the_outlier_layer_in_float_and_passes(outlier_model, sample_bag, tmp_path, data_home):
    res = _quantize(
        "--model-path", str(outlier_model), "--calib", str(sample_bag), "--method", "minmax",
        "--min-mean-cosine", "0.9997", "--out", str(tmp_path / "m.onnx"), "--report", str(tmp_path / "r"),
        "--no-memory", "--no-smooth",
    )  # fmt: skip
    # (a stricter mean-cosine bar than the default: 12 sample frames leave the all-INT8 outlier model
    # at ~0.9993 — the point is that the partition finds the one layer to keep, not the bar itself)
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    worst_alone = min(r["sensitivity"], key=lambda s: s["mean_cosine"])
    assert worst_alone["label"] == "block1.mlp_fc"  # the layer reading the outlier channel
    assert r["trials"][0]["keep_float"] == 0 and not r["trials"][0]["passed"]
    assert r["kept_float_labels"] == ["block1.mlp_fc"] and r["passed"]


def test_migration_makes_the_outlier_layer_int8_again(outlier_model, sample_bag, tmp_path, data_home):
    """The default path folds the outlier channel into its LayerNorm (quant/smooth.py): nothing stays float."""
    res = _quantize(
        "--model-path", str(outlier_model), "--calib", str(sample_bag), "--method", "minmax",
        "--min-mean-cosine", "0.9997", "--out", str(tmp_path / "m.onnx"), "--report", str(tmp_path / "r"),
        "--no-memory", "--sweep", "never",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    moved = {layer: m["alpha"] for m in r["migration"]["layers"] if m["alpha"] is not None for layer in m["layers"]}
    assert "block1.mlp_fc" in moved and r["kept_float"] == [] and r["int8_flop_share"] == 1.0
    assert "block1.mlp_fc" in (tmp_path / "r" / "report.md").read_text()  # named in the report, with its alpha


def test_default_output_goes_beside_the_given_fp32_model(tiny_model, sample_bag, tmp_path, data_home):
    import shutil

    from openclaw_vision.core.resources import default_model_path

    fp32 = shutil.copy(tiny_model, tmp_path / "mine.fp32.onnx")
    res = _quantize("--model-path", str(fp32), "--calib", str(sample_bag), "--report", str(tmp_path / "r"),
                    "--no-sensitivity", "--no-memory")  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "mine.int8.onnx").is_file()
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["zero_shot"]["top1_agreement"] is None and "no text tower" in r["zero_shot"]["note"]  # none in this home
    assert not default_model_path("ViT-B-32", "int8").exists()  # the data-home default is left alone


# --- the zero-shot term's tie rule on both ONNX Runtime kernel paths ----------------------------


@pytest.fixture(scope="module")
def int8_pair(tiny_model):
    """The tiny tower all INT8 (ranges calibrated on the sample pan), its FP32 rows and the frames' pixels."""
    from openclaw_vision.core.ortsession import session
    from openclaw_vision.preprocess.cpu import CpuPreprocessor
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import pan_frames
    from openclaw_vision.preprocess.spec import PreprocessSpec

    pre = CpuPreprocessor(PreprocessSpec(size=224))
    x = np.concatenate([pre(Frame.from_rgb(f))[None] for f in pan_frames(16, 640, 360)])
    model = onnx.load(str(tiny_model))
    layers = quantisable_layers(model)
    acts = sorted({layer.activation for layer in layers})
    obs = session(calibrate.observation_model(model, acts).SerializeToString(), level="basic")
    ranges = calibrate.compute_ranges(calibrate.collect_stats(obs, acts, [x[:8], x[8:]]), "percentile")
    return build_qdq_model(model, layers, ranges).SerializeToString(), _run(model, x), x


def _kernel_path_rows(int8_pair, exact_u8s8: bool) -> np.ndarray:
    from openclaw_vision.core.ortsession import session

    blob, _, x = int8_pair
    out = session(blob, exact_u8s8=exact_u8s8).run(None, {"pixel_values": x})[0]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _pair_labels(v: np.ndarray, u: np.ndarray, fp32_margin: float) -> tuple[np.ndarray, float]:
    """Label embeddings built on one frame's real INT8 error d = the part of u − v across v:

    t_b = unit(v + 2d) and t_a = unit(A·v − 2d), A set so FP32 scores t_a above t_b by `fp32_margin`
    (0: an exact tie) while the error pushes u toward t_b; and two labels t = unit(0.3·v ± d + 2w)
    (w across v and d) that INT8 moves by about ±|d|/2.3: the frame's own noise on other labels.
    Returns (labels, the pair's INT8 change (u − v)·(t_b − t_a))."""
    err = u - v
    perp = err - (err @ v) * v
    d = perp / np.linalg.norm(perp)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, v.size))
    for basis in (v, d):
        w -= np.outer(w @ basis, basis)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    c = 1 / np.sqrt(5) + fp32_margin  # FP32 cosine of t_a: t_b's plus the margin
    a = 2 * c / np.sqrt(1 - c * c)
    labels = np.stack([a * v - 2 * d, v + 2 * d, 0.3 * v + d + 2 * w[0], 0.3 * v - d + 2 * w[1]])
    labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    return labels, float(err @ (labels[1] - labels[0]))


@pytest.mark.parametrize("exact_u8s8", [True, False], ids=["x64quantprecision=1", "x64quantprecision=0"])
def test_zero_shot_ties_are_judged_by_the_fp32_margin_on_both_kernel_paths(int8_pair, tiny_text_model, exact_u8s8):
    """Each verdict on the real INT8 error of one kernel path: ORT's exact U8U8 kernels (the node's) and its
    default U8S8 ones (which saturate on AVX2-only CPUs; on VNNI both are exact and agree)."""
    from openclaw_vision.core.gate import GateSpec
    from openclaw_vision.core.numerics import top1_agreement
    from openclaw_vision.quant import crossmodal

    _, ref, _ = int8_pair
    rows = _kernel_path_rows(int8_pair, exact_u8s8)
    # the gate's own label set: whatever way this CPU's kernels break the tiny model's near-ties, it passes
    text = crossmodal.load_reference(tiny_text_model, "tiny@random-seed0")
    assert compare(rows, ref, text).zero_shot_top1 >= GateSpec().zero_shot_top1
    i = int(np.argmax(np.linalg.norm(rows - ref, axis=1)))  # the frame INT8 moved most
    v, u = ref[i], rows[i]
    assert np.linalg.norm(u - v) > 1e-4  # INT8 does change this frame: the cases below are real flips
    _, change = _pair_labels(v, u, 0.0)
    for name, margin, agrees in (("exact tie", 0.0, True), ("near-tie flip", 0.1 * change, True),
                                 ("clear-margin flip", 0.8 * change, False)):  # fmt: skip
        labels, _ = _pair_labels(v, u, margin)
        fp32, int8 = v @ labels.T, u @ labels.T
        assert np.argmax(int8) == 1 and (margin == 0 or np.argmax(fp32) == 0), name  # INT8 picks t_b
        assert top1_agreement(fp32[None], int8[None])[0] == agrees, name


def test_every_error_class_of_the_package_is_an_openclaw_error():
    """Callers (and the CLI's exit codes) catch OpenclawError for "an error this package explains"."""
    import importlib
    import inspect
    import pkgutil

    import openclaw_vision
    from openclaw_vision.core.errors import OpenclawError

    skip = ("openclaw_vision.preprocess.cuda.",)  # needs a CUDA toolchain to import
    found, missing = [], []
    for mod in pkgutil.walk_packages(openclaw_vision.__path__, "openclaw_vision."):
        if mod.name.startswith(skip):
            continue
        try:
            module = importlib.import_module(mod.name)
        except ImportError:
            continue  # an optional dependency (TensorRT, CuPy...) absent here
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == mod.name and issubclass(cls, Exception):
                (found if issubclass(cls, OpenclawError) else missing).append(f"{mod.name}.{name}")
    assert not missing and len(found) >= 10, (missing, found)
