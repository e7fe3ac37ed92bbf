"""The OpenVINO backend: same ONNX files as ONNX Runtime, same metadata, same embeddings; `auto`'s
choice and its reasons; the INT8 gate measured per runtime and honoured by the encoders (the re-gate on
each forced oneDNN ISA is in test_gate.py)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from openclaw_vision.core import cpu, gate
from openclaw_vision.encoders import BackendUnsuitable, EncoderError, backends, create_encoder
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder

pytest.importorskip("openvino")
from openclaw_vision.encoders.openvino import OpenVinoEncoder, usable

pytestmark = pytest.mark.skipif(not usable()[0], reason=f"openvino not usable here: {usable()[1]}")


@pytest.fixture(scope="module")
def tiny_int8(tiny_model, tiny_text_model, tmp_path_factory):
    """The tiny tower quantised by the real pipeline, gated on every installed runtime, text term included
    (its text tower named here: not whatever an earlier test left in the shared data home)."""
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import pan_frames
    from openclaw_vision.quant.pipeline import QuantOptions, quantize

    out = tmp_path_factory.mktemp("int8") / "tiny.int8.onnx"
    frames = [Frame.from_rgb(f) for f in pan_frames(16)]
    result = quantize(
        QuantOptions(
            fp32_model=tiny_model,
            calib=out,
            out=out,
            sensitivity=False,
            measure_memory=False,
            text_model=tiny_text_model,
        ),
        frames,
    )
    assert result.passed, result.summary()
    return out, result.as_dict()


def _pixels(n: int = 4) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3, 224, 224)).astype(np.float32)


def test_fp32_embeddings_and_model_description_match_onnxruntime(tiny_model):
    ov, ort = OpenVinoEncoder(tiny_model, threads=1), OnnxRuntimeEncoder(tiny_model, threads=1)
    assert ov.info == ort.info  # model id, precision, size and width read one way from the same metadata
    assert (ov.backend, ov.model_id, ov.embed_dim, ov.image_size) == ("openvino", "tiny@random-seed0", 32, 224)
    x = _pixels()
    a, b = ov.encode(x).vectors, ort.encode(x).vectors
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    assert float(np.min(np.sum(a * b, axis=1))) >= 0.9999
    assert float(ov.encode(x[2:3]).vectors[0] @ a[2]) > 0.99999  # batch-independent
    with pytest.raises(EncoderError, match=r"expected pixels \(N, 3, 224, 224\)"):
        ov.encode(np.zeros((1, 3, 64, 64), np.float32))


def test_auto_picks_openvino_on_x86_and_says_why(tiny_model, caplog):
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        enc = create_encoder("auto", tiny_model, threads=1)
    assert enc.backend == "openvino"
    assert (
        "encoder backend openvino (auto, first usable of tensorrt > torch > openvino > onnxruntime: x86_64, openvino"
        in caplog.text
    )


def test_auto_falls_back_to_onnxruntime_with_the_reason_when_openvino_is_missing(tiny_model, monkeypatch, caplog):
    missing = lambda: (False, "not installed (test)")  # noqa: E731
    rows = tuple(replace(b, usable=missing) if b.name == "openvino" else b for b in backends.TABLE)
    monkeypatch.setattr(backends, "TABLE", rows)
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        enc = create_encoder("auto", tiny_model)
    assert enc.backend == "onnxruntime" and "openvino: not installed (test)" in caplog.text


def test_int8_gate_is_measured_on_each_runtime_and_written_into_the_model(tiny_int8):
    path, report = tiny_int8
    rows = report["gate_by_runtime"]
    assert set(rows) == {"onnxruntime", "openvino"}
    # the ONNX Runtime row re-measures, through the node's encoder, the gate the partition passed
    assert rows["onnxruntime"]["mean_cosine"] == pytest.approx(report["mean_cosine"], abs=1e-6)
    assert set(rows["openvino"]["per_resolution"]) == {"1920x1080", "1280x720", "854x480", "shift"}
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    stamped = json.loads(meta["quant_gate_runtimes"])
    assert {rt: r["passed"] for rt, r in stamped.items()} == {rt: r["passed"] for rt, r in rows.items()}
    enc = OpenVinoEncoder(path, threads=1)
    assert enc.precision == "int8"
    assert gate.verdicts(enc.info.metadata)["openvino"] == gate.Verdict.from_dict("openvino", stamped["openvino"])
    assert stamped["openvino"]["isa"] == cpu.isa_record(onednn=True)  # measured where, said where
    from openclaw_vision.quant.report import markdown

    md = markdown(report)
    assert "| runtime | mean cosine |" in md and "| openvino | " in md and "| onnxruntime | " in md
    # what the report promises: these embeddings are the ones the openvino row scored
    ort = OnnxRuntimeEncoder(path, threads=1)
    x = _pixels(2)
    # > 0.99: two runtimes' INT8 roundings of one Q/DQ model, each within the gate's min cosine (0.995) of FP32
    assert float(np.min(np.sum(enc.encode(x).vectors * ort.encode(x).vectors, axis=1))) > 0.99


def _with_gate(src, dst, verdicts: dict | None):
    """A copy of `src` with these verdicts, each stamped as measured on this CPU (so no re-gate runs)."""
    model = onnx.load(str(src))
    keep = [p for p in model.metadata_props if p.key != "quant_gate_runtimes"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    if verdicts is not None:
        here = {rt: {**v, "isa": backends.get(rt).isa()} for rt, v in verdicts.items()}
        model.metadata_props.add(key="quant_gate_runtimes", value=json.dumps(here))
    onnx.save(model, str(dst))
    return dst


def test_an_int8_model_runs_on_openvino_only_where_its_gate_passed(tiny_int8, tmp_path, caplog):
    path, _ = tiny_int8
    verdicts = {"openvino": {"passed": False, "mean_cosine": 0.99}, "onnxruntime": {"passed": True}}
    failed = _with_gate(path, tmp_path / "failed.onnx", verdicts)
    with pytest.raises(BackendUnsuitable, match=r"failed its accuracy gate on openvino on \w+: mean cosine 0\.99"):
        create_encoder("openvino", failed)
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        assert create_encoder("auto", failed).backend == "onnxruntime"
    assert "openvino: tiny@random-seed0 (INT8) failed its accuracy gate on openvino" in caplog.text

    passed = _with_gate(path, tmp_path / "passed.onnx", {"openvino": {"passed": True}})
    assert create_encoder("openvino", passed).backend == "openvino"


def test_auto_runs_a_gated_int8_model_on_openvino_only_with_int8_dot_product_units(
    tiny_int8, tmp_path, monkeypatch, caplog
):
    both = {"openvino": {"passed": True}, "onnxruntime": {"passed": True}}
    path = _with_gate(tiny_int8[0], tmp_path / "passed.onnx", both)
    monkeypatch.setattr(cpu, "int8_dot_units", lambda: ["avx512_vnni"])
    assert create_encoder("auto", path).backend == "openvino"
    monkeypatch.setattr(cpu, "int8_dot_units", lambda: [])
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        assert create_encoder("auto", path).backend == "onnxruntime"
    assert "openvino: INT8 on a CPU without VNNI/AMX" in caplog.text
    assert create_encoder("openvino", path).backend == "openvino"  # an explicit choice is obeyed


def _foreign_model(path):
    """A valid ONNX model that is no image encoder: a 10-vector in, its doubles out."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "not_clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_missing_truncated_and_foreign_models_are_clear_errors(backend, tiny_model, tmp_path):
    with pytest.raises(EncoderError, match="model file not found"):
        create_encoder(backend, tmp_path / "nope.onnx")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(tiny_model.read_bytes()[:5000])
    with pytest.raises(EncoderError, match="cannot load"):
        create_encoder(backend, cut)
    with pytest.raises(EncoderError, match=r"is not an image encoder: input \[.*10\]"):
        create_encoder(backend, _foreign_model(tmp_path / "foreign.onnx"))


def test_unknown_performance_hint_is_refused(tiny_model):
    with pytest.raises(EncoderError, match="unknown performance_hint 'fastest'"):
        OpenVinoEncoder(tiny_model, performance_hint="fastest")


def test_a_batch_on_throughput_streams_gives_each_frame_its_own_embedding_in_order(tiny_model):
    pixels = np.random.default_rng(3).standard_normal((5, 3, 224, 224)).astype(np.float32)
    reference = OpenVinoEncoder(tiny_model, threads=2, performance_hint="latency")  # the batch as one request
    enc = OpenVinoEncoder(tiny_model, threads=2, performance_hint="throughput")
    for batch in (pixels, pixels[::-1], pixels[:2], pixels[3:4]):  # every frame its own row, whatever the order
        got, want = enc.encode(batch).vectors, reference.encode(batch).vectors
        assert got.shape == want.shape and float(np.min(np.sum(got * want, axis=1))) >= 0.99999
