"""The INT8 gate as every backend obeys it: policies, verdicts per ISA class, and the re-gate from the
held-out set kept in the report folder (core/gate.py, core/cpu.py, encoders/gating.py).

What a user would notice: an INT8 model runs on a runtime only where it passed its accuracy gate on
this runtime and this kind of CPU; an unknown policy stops the node at start; a model quantised on
one CPU and started on another re-gates itself once there (no bag needed) and runs or is refused by
that result, with both figures in the message.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from openclaw_vision.core import children, cpu, gate
from openclaw_vision.core.gate import GateRefused, GateSpec, Verdict
from openclaw_vision.encoders import BackendUnsuitable, backends, create_encoder
from openclaw_vision.encoders.options import EncoderOptions

# --- the policy, as data -------------------------------------------------------------------------


def _verdict(passed: bool = True, klass: str | None = "avx512_vnni", **values) -> Verdict:
    isa = None if klass is None else {"class": klass, "cpu": klass, "onednn_max_isa": None}
    return Verdict("openvino", passed, {"mean_cosine": 0.9995, "min_cosine": 0.998, **values}, isa)


def test_require_refuses_a_missing_verdict_and_warn_runs_it_with_a_warning():
    with pytest.raises(
        GateRefused,
        match=r"m \(INT8\) has no accuracy-gate verdict for openvino on avx2.*"
        r"re-run `openclaw-vision quantize` here",
    ):  # the refusal says the way out
        gate.judge("m", None, "require", "openvino", "avx2")
    warning = gate.judge("m", None, "warn", "openvino", "avx2")
    assert warning and "no accuracy-gate verdict for openvino on avx2" in warning
    assert gate.judge("m", None, "ignore", "openvino", "avx2") is None
    assert gate.judge("m", _verdict(), "require", "openvino", "avx512_vnni") is None


def test_a_failed_verdict_is_refused_under_require_and_warn_and_names_both_figures():
    here = _verdict(False, "avx2", mean_cosine=0.99895)
    there = _verdict(True, "amx")
    for policy in ("require", "warn"):
        with pytest.raises(GateRefused) as err:
            gate.judge("m", here, policy, "openvino", "avx2", elsewhere=there)
        text = str(err.value)
        assert "failed its accuracy gate on openvino on avx2: mean cosine 0.998950" in text
        assert "on openvino on amx it passed: mean cosine 0.999500" in text


def test_an_unknown_policy_is_a_clear_error_when_the_options_are_made():
    with pytest.raises(ValueError, match="unknown INT8 gate policy 'strict'; choose one of require, warn, ignore"):
        EncoderOptions(gate="strict")
    assert EncoderOptions(gate="require").gate == "require"


def test_an_unknown_policy_in_the_node_config_stops_it_at_start():
    from openclaw_vision.runtime.config import ConfigError, EncoderConfig

    with pytest.raises(ConfigError, match=r"parameter gate='strict': choose one of auto, require, warn"):
        EncoderConfig(gate="strict").validate()


def test_verdicts_round_trip_through_the_models_metadata():
    rows = {"openvino": _verdict(), "onnxruntime": replace(_verdict(klass="amx"), runtime="onnxruntime")}
    back = gate.verdicts({gate.RUNTIMES_KEY: gate.encode_verdicts(rows)})
    assert back == rows
    old = gate.verdicts({gate.RUNTIMES_KEY: json.dumps({"openvino": {"passed": True, "mean_cosine": 0.9991}})})
    assert old["openvino"].isa is None and old["openvino"].where() == "openvino (ISA not recorded)"


# --- the ISA class -------------------------------------------------------------------------------

AVX2_EPYC = frozenset({"avx2", "fma", "f16c"})
VNNI_EPYC = AVX2_EPYC | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}
AMX_XEON = VNNI_EPYC | {"amx_tile", "amx_int8", "amx_bf16", "avx512_fp16"}


@pytest.mark.parametrize(("flags", "klass"), [(AVX2_EPYC, "avx2"), (VNNI_EPYC, "avx512_vnni"), (AMX_XEON, "amx")])
def test_each_cpu_kind_here_has_its_class(flags, klass):
    assert cpu.isa_class(flags) == klass


@pytest.mark.parametrize(
    ("flags", "cap", "klass"),
    [(AMX_XEON, "AVX2", "avx2"), (AMX_XEON, "AVX512_CORE_VNNI", "avx512_vnni"), (AMX_XEON, "AVX512_CORE_AMX", "amx"),
     (AVX2_EPYC, "AVX512_CORE_AMX", "avx2"), (VNNI_EPYC, "", "avx512_vnni")],
)  # fmt: skip
def test_onednns_cap_lowers_the_class_of_the_runtimes_that_honour_it(monkeypatch, flags, cap, klass):
    monkeypatch.setattr(cpu, "flags", lambda: flags)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert cpu.effective_class(onednn=True) == klass
    assert cpu.effective_class(onednn=False) == cpu.isa_class(flags)  # ONNX Runtime dispatches by the CPU
    record = cpu.isa_record(onednn=True)
    assert record == {"class": klass, "cpu": cpu.isa_class(flags), "onednn_max_isa": cap or None}


# --- the quantiser stamps each verdict with its ISA and keeps a re-gate set ----------------------


@pytest.fixture(scope="module")
def gated(tiny_model, tiny_text_model, tmp_path_factory) -> dict:
    """The tiny tower quantised here, its report folder beside it (as the first-use build puts it)."""
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import pan_frames
    from openclaw_vision.quant.pipeline import QuantOptions, quantize
    from openclaw_vision.quant.report import write

    folder = tmp_path_factory.mktemp("gated")
    out = folder / "tiny.int8.onnx"
    frames = [Frame.from_rgb(f) for f in pan_frames(16)]
    opts = QuantOptions(fp32_model=tiny_model, calib=out, out=out, sensitivity=False, measure_memory=False,
                        text_model=tiny_text_model)  # fmt: skip
    result = quantize(opts, frames)
    assert result.passed, result.summary()
    write(result, out.with_suffix(".report"))
    return {"model": out, "report": out.with_suffix(".report"), "result": result.as_dict()}


def _meta(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def test_every_verdict_in_the_model_and_the_report_says_which_isa_it_was_measured_on(gated):
    stamped = gate.verdicts(_meta(gated["model"]))
    report = gated["result"]["gate_by_runtime"]
    assert set(stamped) == set(report) >= {"onnxruntime"}
    for rt, v in stamped.items():
        row = backends.get(rt)
        assert v.isa == row.isa() == report[rt]["isa"], rt
        assert v.source == "quantisation" and v.bounds == GateSpec().as_dict()
    assert stamped["onnxruntime"].isa_class == cpu.isa_class()
    saved = json.loads((gated["report"] / "report.json").read_text())
    assert saved["gate_by_runtime"]["onnxruntime"]["isa"]["class"] == cpu.isa_class()


def test_the_regate_set_holds_the_held_out_pixels_whose_references_it_stores(gated, tiny_model):
    """The stored set reproduces what the quantiser measured: FP32 of the stored (float16) pixels is the
    stored reference, and the INT8 model's worst metrics on it pass the same bounds."""
    from openclaw_vision.encoders import gating
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder

    info = OnnxRuntimeEncoder(gated["model"], threads=1).info
    folder, run = gating.report_dir(info)
    assert folder == gated["report"] and (folder / gate.REGATE_SET).is_file()
    stored = gating.load_regate_set(folder, run)
    assert set(stored["rows"]) == set(gated["result"]["per_resolution"])
    assert stored["labels"] is not None and stored["labels"].shape[1] == 32
    fp32 = OnnxRuntimeEncoder(tiny_model, threads=1)
    for pixels, reference in stored["rows"].values():
        assert pixels.dtype == np.float32 and len(pixels) == len(reference) <= 16
        np.testing.assert_allclose(fp32.encode(pixels).vectors, reference, atol=1e-5)
    m = gating.measure(OnnxRuntimeEncoder(gated["model"], threads=1), stored)
    assert m.passes(GateSpec())
    assert m.mean_cosine == pytest.approx(gated["result"]["gate_by_runtime"]["onnxruntime"]["mean_cosine"], abs=2e-4)
    assert gating.load_regate_set(folder, "another-run") is None  # a re-quantised model's set is not this one's


def _restamp(src: Path, dst: Path, verdicts: dict[str, Verdict] | None) -> Path:
    """A copy of the gated model with other verdicts (its report folder, beside the original, stays)."""
    from openclaw_vision.encoders import gating

    model = onnx.load(str(src))
    meta = {p.key: p.value for p in model.metadata_props}
    meta.pop(gate.RUNTIMES_KEY)
    if verdicts is not None:
        meta[gate.RUNTIMES_KEY] = gate.encode_verdicts(verdicts)
    folder = json.loads(meta[gate.REPORT_KEY])
    meta[gate.REPORT_KEY] = gating.report_entry(src.parent / folder["dir"], dst, folder["run"])
    del model.metadata_props[:]
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(dst))
    return dst


def _here(runtime: str, passed: bool = True) -> Verdict:
    row = backends.get(runtime)
    return Verdict(runtime, passed, {"mean_cosine": 0.9 if not passed else 0.9999}, row.isa() if row.isa else None,
                   bounds=GateSpec().as_dict())  # fmt: skip


def _no_regate_set(tmp_path: Path, model: Path) -> Path:
    """The gated model, its report folder named but absent: nothing to re-gate from."""
    from openclaw_vision.encoders import gating

    dst = _restamp(model, tmp_path / "alone.int8.onnx", None)
    m = onnx.load(str(dst))
    for p in m.metadata_props:
        if p.key == gate.REPORT_KEY:
            p.value = gating.report_entry(tmp_path / "gone.report", dst, "x")
    onnx.save(m, str(dst))
    return dst


# --- one wrapper, every backend -------------------------------------------------------------------


def _open(runtime: str, model: Path, policy: str, build=None):
    row = backends.get(runtime)
    if build is not None:
        row = replace(row, build=build)
    return row.open(model, EncoderOptions(threads=1, gate=policy))


def _torch_on_the_host(path, options):
    from gpu_fakes import HostDevice

    from openclaw_vision.encoders.torch_cuda import TorchCudaEncoder

    return TorchCudaEncoder(path, device=HostDevice(), max_batch=2)  # torch_cuda's build step, device stand-in


CPU_AND_TORCH = [("onnxruntime", None), ("openvino", None), ("torch", _torch_on_the_host)]


@pytest.mark.parametrize(("runtime", "build"), CPU_AND_TORCH, ids=[r for r, _ in CPU_AND_TORCH])
def test_an_int8_model_without_a_verdict_here_is_refused_under_require_and_warned_under_warn(
    gated, tmp_path, caplog, runtime, build
):
    if runtime == "openvino" and not backends.get("openvino").usable()[0]:
        pytest.skip(f"openvino not usable here: {backends.get('openvino').usable()[1]}")
    bare = _no_regate_set(tmp_path, gated["model"])
    with pytest.raises(BackendUnsuitable, match=rf"has no accuracy-gate verdict for {runtime}"):
        _open(runtime, bare, "require", build)
    with caplog.at_level(logging.WARNING, logger="openclaw_vision.encoders.gating"):
        enc = _open(runtime, bare, "warn", build)
    assert enc.precision.startswith("int8") and f"no accuracy-gate verdict for {runtime}" in caplog.text
    passed = _restamp(gated["model"], tmp_path / "passed.int8.onnx", {runtime: _here(runtime)})
    assert _open(runtime, passed, "require", build).model_id == "tiny@random-seed0"
    failed = _restamp(gated["model"], tmp_path / "failed.int8.onnx", {runtime: _here(runtime, passed=False)})
    with pytest.raises(BackendUnsuitable, match=rf"failed its accuracy gate on {runtime}"):
        _open(runtime, failed, "warn", build)
    assert _open(runtime, failed, "ignore", build).model_id == "tiny@random-seed0"  # the quantiser's own use


def test_auto_moves_on_to_the_next_backend_where_the_model_passed(gated, tmp_path, caplog):
    ov = backends.get("openvino")
    if not ov.usable()[0] or not cpu.int8_dot_units():
        pytest.skip("auto takes OpenVINO for INT8 only on a CPU with VNNI/AMX and openvino installed")
    failed = _restamp(gated["model"], tmp_path / "ov-failed.int8.onnx",
                      {"openvino": _here("openvino", passed=False), "onnxruntime": _here("onnxruntime")})  # fmt: skip
    with caplog.at_level(logging.INFO, logger="openclaw_vision.encoders"):
        assert create_encoder("auto", failed, threads=1).backend == "onnxruntime"
    assert "openvino: tiny@random-seed0 (INT8) failed its accuracy gate on openvino on" in caplog.text


# --- the re-gate on another ISA class ------------------------------------------------------------

_OPEN_IN_A_CHILD = """
import json, logging, sys
import numpy as np
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from openclaw_vision.encoders import create_encoder, BackendUnsuitable
from openclaw_vision.preprocess.sample_frames import pan_frames
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.frame import Frame
try:
    enc = create_encoder(sys.argv[2], sys.argv[1], threads=1)
except BackendUnsuitable as err:
    print(json.dumps({"refused": str(err)}))
    sys.exit(0)
pre = CpuPreprocessor()
x = np.stack([pre(Frame.from_rgb(f)) for f in pan_frames(5, 640, 360)])
batch, alone = enc.encode(x).vectors, np.concatenate([enc.encode(x[i : i + 1]).vectors for i in range(len(x))])
print(json.dumps({"backend": enc.backend, "batch_vs_alone": float((batch * alone).sum(1).min())}))
"""


def _open_in_a_child(model: Path, backend: str, onednn_isa: str = "") -> tuple[dict, str]:
    """create_encoder in a fresh interpreter (oneDNN fixes its ISA when it loads): (result, its log)."""
    env = {"ONEDNN_MAX_CPU_ISA": onednn_isa} if onednn_isa else {}
    res = children.run(children.python("-c", _OPEN_IN_A_CHILD, str(model), backend), timeout=300, env=env)
    assert res.ok, f"{res.how}: {res.tail(40)}"
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


def _model_from_another_cpu(gated, tmp_path, runtime: str) -> Path:
    """The gated model as if quantised on a CPU of another class (an Arm board: a class none of the
    levels forced here can match), the quantiser's figures kept."""
    other = "aarch64"
    stamped = gate.verdicts(_meta(gated["model"]))
    moved = {rt: replace(v, isa={"class": other, "cpu": other, "onednn_max_isa": None}) for rt, v in stamped.items()}
    model = _restamp(gated["model"], tmp_path / "elsewhere.int8.onnx", moved)
    (gated["report"] / gate.REGATE_FILE).unlink(missing_ok=True)  # no earlier re-gate
    return model


def test_a_model_from_another_cpu_is_regated_once_here_and_the_result_is_kept(gated, tmp_path):
    model = _model_from_another_cpu(gated, tmp_path, "onnxruntime")
    result, log = _open_in_a_child(model, "onnxruntime")
    assert result["backend"] == "onnxruntime", log
    assert f"re-gated on onnxruntime on {cpu.isa_class()}" in log and "quantised on onnxruntime on" in log
    kept = json.loads((gated["report"] / gate.REGATE_FILE).read_text())
    verdict = gate.Verdict.from_dict("onnxruntime", kept["verdicts"]["onnxruntime"][cpu.isa_class()])
    assert verdict.passed and verdict.source == "re-gate" and verdict.isa == cpu.isa_record()
    again, log2 = _open_in_a_child(model, "onnxruntime")
    assert again["backend"] == "onnxruntime" and "re-gated" not in log2  # once: the next start reads it


def test_a_regate_that_fails_follows_the_policy_and_names_both_figures(gated, tmp_path):
    """Bounds no INT8 model can meet (kept in the verdicts, as a stricter quantisation would have them):
    the re-gate here fails, auto refuses onnxruntime with both figures and there is no other backend."""
    stamped = gate.verdicts(_meta(gated["model"]))
    strict = {**GateSpec().as_dict(), "mean_cosine": 0.9999999}
    moved = {rt: replace(v, isa={"class": "elsewhere", "cpu": "elsewhere", "onednn_max_isa": None}, bounds=strict)
             for rt, v in stamped.items()}  # fmt: skip
    model = _restamp(gated["model"], tmp_path / "strict.int8.onnx", moved)
    (gated["report"] / gate.REGATE_FILE).unlink(missing_ok=True)
    result, log = _open_in_a_child(model, "onnxruntime")
    assert "failed its accuracy gate on onnxruntime on" in result["refused"], (result, log)
    assert "(>= 0.9999999)" in result["refused"] and "on onnxruntime on elsewhere it passed" in result["refused"]
    (gated["report"] / gate.REGATE_FILE).unlink(missing_ok=True)


def _forcible() -> list:
    """OpenVINO's oneDNN levels to force here; those this CPU cannot be held to are skipped by name."""
    have = dict(cpu.onednn_forcible())
    return [pytest.param(value, marks=() if value in have else pytest.mark.skip(
        reason=f"ONEDNN_MAX_CPU_ISA={value} cannot be forced on this CPU ({cpu.isa_class()}: needs {flag})"))
        for value, flag in cpu.ONEDNN_FORCIBLE]  # fmt: skip


@pytest.mark.parametrize("onednn_isa", _forcible())
def test_openvino_regates_under_each_forced_onednn_isa(gated, tmp_path, onednn_isa):
    """OpenVINO honours ONEDNN_MAX_CPU_ISA; its verdict on each forced level is that level's own, and what
    must hold on every kernel set are the bounds the gate states (min cosine, zero-shot: near-ties are
    ties). The mean-cosine bar is the level's own verdict: last round, AVX2 gave 0.99895 on VNNI."""
    if not backends.get("openvino").usable()[0]:
        pytest.skip("openvino not usable here")
    model = _model_from_another_cpu(gated, tmp_path, "openvino")
    result, log = _open_in_a_child(model, "openvino", onednn_isa)
    klass = cpu.ONEDNN_ISAS[onednn_isa]
    assert f"re-gated on openvino on {klass} (ONEDNN_MAX_CPU_ISA={onednn_isa})" in log, log
    kept = json.loads((gated["report"] / gate.REGATE_FILE).read_text())["verdicts"]["openvino"][klass]
    assert kept["isa"] == {"class": klass, "cpu": cpu.isa_class(), "onednn_max_isa": onednn_isa}
    assert kept["min_cosine"] >= GateSpec().min_cosine and kept["zero_shot_top1"] >= GateSpec().zero_shot_top1
    assert ("backend" in result) == kept["passed"]  # runs exactly where its verdict passed (explicit: warn)
    if kept["passed"]:  # a batch of five gives what each frame gives alone, on this level's kernels too
        assert result["batch_vs_alone"] >= GateSpec().min_cosine, result
    shown = {k: kept[k] for k in ("passed", "mean_cosine", "min_cosine", "nn_agreement", "zero_shot_top1")}
    print(f"openvino re-gate at {onednn_isa}: {json.dumps(shown)}")
