"""Zero-shot labels without ROS: label sets, scores, the model-id check, `openclaw-vision label`, the INT8
gate's text term, and the labels node's package plumbing (msg, launch, config, CMake, setup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from openclaw_vision.core import gate
from openclaw_vision.core.gate import GateSpec
from openclaw_vision.quant import crossmodal
from openclaw_vision.quant.evaluate import compare, worst
from openclaw_vision.text.encoder import TextEncoder
from openclaw_vision.text.zero_shot import (
    LabelError,
    LabelSet,
    ModelMismatch,
    check_same_model,
    parse_labels,
    prompts,
    read_labels_file,
)

ROOT = Path(__file__).resolve().parents[1]


def test_label_sets_from_text_and_files(tmp_path):
    assert parse_labels(" door, forklift ,person,,") == ["door", "forklift", "person"]
    assert parse_labels("door\nfire exit, stairs\n") == ["door", "fire exit", "stairs"]
    f = tmp_path / "labels.txt"
    f.write_text("# what the robot looks for\ndoor\n\n  forklift\n# person\npallet, box\n")
    assert read_labels_file(f) == ["door", "forklift", "pallet", "box"]
    with pytest.raises(LabelError, match="empty"):
        parse_labels(" , ,")
    with pytest.raises(LabelError, match=r"duplicated label.*door"):
        parse_labels("door,person,door")
    with pytest.raises(LabelError, match="cannot read labels file"):
        read_labels_file(tmp_path / "missing.txt")
    assert prompts(["door"], "a photo of a {}.") == ["a photo of a door."] and prompts(["door"], "{}") == ["door"]
    with pytest.raises(LabelError, match="exactly once"):
        prompts(["door"], "a photo")


def test_scores_are_clips_softmax_over_logit_scale_times_cosine(tiny_text_model):
    enc = TextEncoder(tiny_text_model)
    labels = LabelSet.build(enc, ["door", "forklift", "person"])
    assert labels.model_id == "tiny@random-seed0" and labels.embeddings.shape == (3, 32)
    text = enc.encode(["a photo of a door.", "a photo of a forklift.", "a photo of a person."]).vectors
    image = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    scores, cos = labels.score(image * 7.0)  # any length: features are normalised before scoring
    unit = image / np.linalg.norm(image, axis=1, keepdims=True)
    want_cos = unit @ text.T
    want = np.exp(enc.logit_scale * want_cos)
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(cos, want_cos, atol=1e-5)
    np.testing.assert_allclose(scores, want, atol=1e-5)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-6)
    one, _ = labels.score(image[0])
    np.testing.assert_allclose(one, scores[0], atol=1e-6)
    with pytest.raises(ValueError, match="has 7 values"):
        labels.score(np.ones(7, np.float32))


def test_embeddings_of_different_models_are_refused():
    check_same_model("ViT-B-32@abc123", "ViT-B-32@abc123")
    with pytest.raises(ModelMismatch, match=r"not comparable.*--tower text --checkpoint"):
        check_same_model("ViT-B-32@abc123", "ViT-B-32@random-seed0")


def test_label_command_scores_every_frame_of_a_bag(tiny_model, tiny_text_model, sample_bag, tmp_path):
    summary = tmp_path / "summary.json"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "label", "--bag", str(sample_bag), "--labels",
         "door,forklift,person", "--model-path", str(tiny_model), "--text-model", str(tiny_text_model),
         "--limit", "5", "--json", str(summary)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["frame"] for r in rows] == [0, 1, 2, 3, 4]
    for r in rows:
        assert list(r["scores"]) == ["door", "forklift", "person"]
        assert sum(r["scores"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["top"] == max(r["scores"], key=r["scores"].get)
    # the same frame through the node's stages by hand gives the same scores
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
    from openclaw_vision.preprocess.cpu import CpuPreprocessor
    from openclaw_vision.preprocess.spec import PreprocessSpec
    from openclaw_vision.quant.data import load_frames

    image = OnnxRuntimeEncoder(tiny_model)
    frame = load_frames(sample_bag, limit=3)[2]
    vec = image.encode(CpuPreprocessor(PreprocessSpec(size=image.image_size))(frame)[None]).vectors[0]
    scores, _ = LabelSet.build(TextEncoder(tiny_text_model), ["door", "forklift", "person"]).score(vec)
    assert rows[2]["stamp_ns"] == frame.stamp_ns
    np.testing.assert_allclose(list(rows[2]["scores"].values()), scores, atol=1e-5)
    s = json.loads(summary.read_text())
    assert s["frames"] == 5 and s["model"] == "tiny@random-seed0" and s["stages_ms"]["score"]["p50"] > 0
    assert "the labels are noise; the pipeline is real" in res.stderr


def test_label_reads_a_bag_file_and_names_the_cameras_when_it_cannot_choose(sample_bag, tmp_path):
    """label's bag reading is bags.camera_source: a single .mcap file is a bag; two cameras and no --topic
    is a clear error naming them."""
    import shutil

    from openclaw_vision.runtime import bags
    from openclaw_vision.tools.label import ToolError, iter_bag_frames

    [mcap] = sample_bag.glob("*.mcap")
    alone = shutil.copy(mcap, tmp_path / "alone.mcap")
    assert [f.stamp_ns for f in iter_bag_frames(alone, None, limit=2)] == [
        f.stamp_ns for f in iter_bag_frames(sample_bag, None, limit=2)
    ]
    two = tmp_path / "two"
    with bags.BagWriter(two) as bag:
        for topic in ("/front/image_raw", "/rear/image_raw"):
            bag.write(topic, bags.IMAGE_TYPE, 1, bags.serialize_image(np.zeros((4, 4, 3), np.uint8), "rgb8", 1))
    with pytest.raises(ToolError, match=r"2 cameras \(/front/image_raw .*/rear/image_raw .*name the topic"):
        list(iter_bag_frames(two, None))
    assert len(list(iter_bag_frames(two, "/rear/image_raw"))) == 1


def test_label_command_refuses_a_text_model_of_other_weights(tiny_text_model, sample_bag, tmp_path):
    from openclaw_vision.models.export import export_model

    other = export_model("tiny", tmp_path / "tiny-seed9.onnx", seed=9).path
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "label", "--bag", str(sample_bag), "--labels", "door",
         "--model-path", str(other), "--text-model", str(tiny_text_model)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2
    assert "tiny@random-seed9" in res.stderr and "not comparable" in res.stderr and not res.stdout


# --- the INT8 gate's text term ----------------------------------------------------------------


def test_zero_shot_gate_metrics_agree_with_their_definitions(tiny_text_model):
    text = crossmodal.load_reference(tiny_text_model, "tiny@random-seed0")
    assert text.embeddings.shape == (len(crossmodal.GATE_LABELS), 32)
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((12, 32))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    same = compare(ref, ref, text)
    assert same.zero_shot_top1 == 1.0 and same.zero_shot_kl == pytest.approx(0, abs=1e-9)
    # moving every frame onto another label's text embedding: a perturbation this size widens the tie band
    # too (the tiny tower's labels are near one another), so the cosine checks are what fail it
    moved = text.embeddings[(np.argmax(ref @ text.embeddings.T, axis=1) + 1) % len(text.labels)]
    m = compare(moved, ref, text)
    assert m.zero_shot_top1 < 1.0 and m.zero_shot_kl > 0
    assert not m.passes(GateSpec()) and compare(ref, ref).zero_shot_top1 is None  # no text tower, no text term
    w = worst({"a": same, "b": m})
    assert w.zero_shot_top1 == m.zero_shot_top1 and w.zero_shot_kl == m.zero_shot_kl
    assert crossmodal.text_term() == 0.0  # the text tower stays FP32
    assert crossmodal.text_term(text.embeddings + 0.1, text.embeddings) == pytest.approx(32 * 0.01, rel=1e-5)
    with pytest.raises(ModelMismatch):
        crossmodal.load_reference(tiny_text_model, "tiny@random-seed9")


def _frames(*cosines: list[float]) -> np.ndarray:
    """Unit frames in 8 dimensions whose cosines with the labels (the first 5 axes) are exactly `cosines`."""
    rows = np.zeros((len(cosines), 8))
    rows[:, :5] = cosines
    rows[:, 7] = np.sqrt(1 - np.sum(rows[:, :5] ** 2, axis=1))
    return rows


def test_the_zero_shot_term_judges_ties_by_the_fp32_margin():
    """A frame agrees when INT8 picks FP32's label, or another one FP32 scored within INT8's perturbation of
    the frame's other labels (the tie rule, `numerics.top1_agreement`)."""
    text = crossmodal.TextReference(("a", "b", "c", "d", "e"), np.eye(5, 8), 100.0, "m@1", path="")
    cases = {  # FP32 cosines with a..e, INT8 cosines, agreement
        "exact tie": ([0.5, 0.5, 0.1, 0.2, 0.3], [0.499, 0.501, 0.1005, 0.1995, 0.3], 1.0),
        "near-tie flip": ([0.5, 0.499, 0.1, 0.2, 0.3], [0.4985, 0.5005, 0.103, 0.197, 0.302], 1.0),
        "clear-margin flip": ([0.6, 0.4, 0.1, 0.2, 0.3], [0.45, 0.55, 0.1005, 0.1995, 0.3], 0.0),
        "no flip, moved": ([0.6, 0.4, 0.1, 0.2, 0.3], [0.58, 0.41, 0.12, 0.2, 0.29], 1.0),
    }
    for name, (fp32, int8, agrees) in cases.items():
        m = compare(_frames(int8), _frames(fp32), text)
        assert m.zero_shot_top1 == agrees, name
        assert m.zero_shot_kl > 0, name  # the score KL has no tie rule: it is reported as measured
    flip = compare(_frames(*[cases["clear-margin flip"][1]] * 2), _frames(*[cases["clear-margin flip"][0]] * 2), text)
    assert not any(c.passes(flip) for c in GateSpec().checks() if c.metric == "zero_shot_top1")
    # the same rule makes an exact FP32 tie agree whichever way it falls, and an identical model agree
    same = _frames([0.5, 0.5, 0.1, 0.2, 0.3])
    assert compare(same, same, text).zero_shot_top1 == 1.0


def test_quantize_reports_the_text_term_and_the_cmcd(tiny_model, tiny_text_model, sample_bag, tmp_path, data_home):
    out, report = tmp_path / "tiny.int8.onnx", tmp_path / "report"
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "quantize", "--model-path", str(tiny_model), "--calib",
         str(sample_bag), "--out", str(out), "--report", str(report), "--text-model", str(tiny_text_model),
         "--no-sensitivity", "--no-memory"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "zero-shot agreement" in res.stdout
    r = json.loads((report / "report.json").read_text())
    zs = r["zero_shot"]
    assert zs["top1_agreement"] >= r["gate"]["zero_shot_top1"] and zs["kl"] >= 0
    assert zs["labels"] == list(crossmodal.GATE_LABELS) and zs["logit_scale"] == pytest.approx(14.2857, abs=1e-3)
    native = {k: m for k, m in r["per_resolution"].items() if k != gate.SHIFT_ROW}  # the shift row: no text term
    assert native and all("zero_shot_top1" in m for m in native.values())
    c = r["collapse"]
    assert c["text"] == 0.0 and c["cmcd"] == pytest.approx(c["image"]) and "stays FP32" in c["text_note"]
    md = (report / "report.md").read_text()
    assert "zero-shot top-1 agreement" in md and "CMCD" in md
    # a text tower of other weights is refused, not used
    from openclaw_vision.models.export import export_model

    other = export_model("tiny", tmp_path / "other.text.onnx", seed=9, tower="text").path
    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "quantize", "--model-path", str(tiny_model), "--calib",
         str(sample_bag), "--out", str(tmp_path / "x.onnx"), "--report", str(tmp_path / "r2"), "--text-model",
         str(other), "--no-sensitivity", "--no-memory"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2 and "not comparable" in res.stderr


# --- package plumbing for the labels node -------------------------------------------------------


def test_visual_labels_cdr_matches_rosbags():
    from openclaw_vision.ros.dds_types import idl_type
    from openclaw_vision.runtime import bags

    store = bags.typestore()
    T, H = store.types["builtin_interfaces/msg/Time"], store.types["std_msgs/msg/Header"]
    kind = "openclaw_vision/msg/VisualLabels"
    fields = dict(model_id="m@1", labels=["door", "person"], prompt_template="a photo of a {}.", logit_scale=100.0,
                  top_label="person", top_score=0.75)  # fmt: skip
    ref = store.serialize_cdr(
        store.types[kind](header=H(stamp=T(sec=3, nanosec=4), frame_id="cam"),
                          scores=np.array([0.25, 0.75], np.float32), similarities=np.array([0.1, 0.2], np.float32),
                          **fields), kind,
    )  # fmt: skip
    Ti, Hi = idl_type("builtin_interfaces/msg/Time"), idl_type("std_msgs/msg/Header")
    ours = idl_type(kind)(header=Hi(stamp=Ti(sec=3, nanosec=4), frame_id="cam"), scores=[0.25, 0.75],
                          similarities=[0.1, 0.2], **fields)  # fmt: skip
    assert idl_type(kind).__idl_typename__ == "openclaw_vision::msg::dds_::VisualLabels_"
    assert ours.serialize() == bytes(ref)


def test_labels_node_is_built_installed_and_launched_like_the_others():
    from openclaw_vision.runtime.config import LabelsConfig, read_params_file

    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert '"msg/VisualLabels.msg"' in cmake and "scripts/labels_node" in cmake
    assert (ROOT / "scripts" / "labels_node").stat().st_mode & 0o111
    setup_cfg = (ROOT / "setup.cfg").read_text()
    assert "labels_node = openclaw_vision.ros.labels_node:main" in setup_cfg
    assert read_params_file(ROOT / "config" / "labels.yaml", "labels_node") == LabelsConfig().as_dict()
    # started by vision.launch.py with enable_labels:=true and the encoder's `model` (test_launch.py runs it)
    launch = (ROOT / "launch" / "vision.launch.py").read_text()
    assert 'DeclareLaunchArgument("enable_labels", default_value="false"' in launch
    assert '_node("labels_node", given["labels_config"], labels_params, respawn)' in launch
