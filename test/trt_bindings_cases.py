"""The TensorRT runner against TensorRT's real Python bindings, with autospecced objects.

Not collected by the main run (the name has no test_ prefix): test_gpu_static.py runs this file
in a process of its own per TensorRT version, with the version's bindings on PYTHONPATH and
no-op libnvinfer/libnvinfer_plugin/libnvonnxparser on LD_LIBRARY_PATH (OPENCLAW_TRT_MAJOR says
which). The bindings' enums and base classes are the real ones; every object TensorRT would
create (Builder, network, parser, config, runtime, engine, context) is an autospec of the real
class whose method calls are also checked against the signatures the bindings document, so a
method or flag that this version does not have, or a wrong argument list, fails here.
"""

from __future__ import annotations

import inspect
import io
import logging
import os
import re
import types
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import pytest
import tensorrt_bindings as real
from gpu_fakes import HostDevice, address
from onnx import TensorProto, helper, numpy_helper

MAJOR = int(os.environ.get("OPENCLAW_TRT_MAJOR", "0"))
S, D = 224, 32


def test_these_are_the_real_bindings_of_the_expected_version():
    assert real.__version__.split(".")[0] == str(MAJOR)
    assert hasattr(real.IExecutionContext, "execute_async_v3")
    assert ("INT8" in real.BuilderFlag.__members__) == (MAJOR == 10)
    assert ("EXPLICIT_BATCH" in real.NetworkDefinitionCreationFlag.__members__) == (MAJOR == 10)
    assert "STRONGLY_TYPED" in real.NetworkDefinitionCreationFlag.__members__
    import openclaw_vision.encoders.tensorrt as trtmod

    assert trtmod.trt is real and trtmod.major_version() == MAJOR


# --- autospecs whose calls are held to the documented signatures ---------------------------------


def _split(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        depth += (ch in "[(" and 1) or ((ch in "])" and -1) or 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in [*out, cur] if p.strip()]


def signatures(func, name: str) -> list[inspect.Signature]:
    """Every overload's signature from a pybind11 docstring (`name(self: T, a: int, b: X = ...) -> R`)."""
    P = inspect.Parameter
    sigs = []
    for m in re.finditer(rf"^\s*(?:\d+\. )?{re.escape(name)}\((.*?)\) ->", func.__doc__ or "", re.M):
        params, kind = [], P.POSITIONAL_OR_KEYWORD
        for p in _split(m.group(1))[1:]:  # without self
            pname = p.split(":")[0].split("=")[0].strip()
            if pname == "*":
                kind = P.KEYWORD_ONLY
            elif pname.startswith("**"):
                params.append(P(pname[2:], P.VAR_KEYWORD))
            elif pname.startswith("*"):
                params.append(P(pname[1:], P.VAR_POSITIONAL))
                kind = P.KEYWORD_ONLY
            else:  # pybind11 allows a required argument after defaults (add_scale_nd); bind leniently there
                seen = any(q.default is not P.empty for q in params)
                params.append(P(pname, kind, default=None if "=" in p or seen else P.empty))
        sigs.append(inspect.Signature(params))
    return sigs


def _checked(sigs: list[inspect.Signature], where: str):
    def check(*args, **kwargs):
        for sig in sigs:
            try:
                sig.bind(*args, **kwargs)
                return mock.DEFAULT
            except TypeError:
                continue
        raise TypeError(f"{where}{args, kwargs} matches none of {[str(s) for s in sigs]}")

    return check


def strict(cls) -> mock.NonCallableMagicMock:
    """create_autospec(cls, instance=True), each method call bound against its documented signatures."""
    inst = mock.create_autospec(cls, instance=True)
    for name in dir(cls):
        attr = getattr(cls, name, None)
        if name.startswith("_") or not callable(attr) or isinstance(attr, type):
            continue
        sigs = signatures(attr, name)
        if sigs:
            getattr(inst, name).side_effect = _checked(sigs, f"{cls.__name__}.{name}")
    return inst


def factory(cls, instance):
    """A stand-in for constructing `cls`: checks the constructor's arguments, returns `instance`."""
    check = _checked(signatures(cls.__init__, "__init__"), f"{cls.__name__}()")

    def make(*args, **kwargs):
        check(*args, **kwargs)
        return instance

    return mock.Mock(side_effect=make)


class Fake:
    """A `tensorrt` module: the real one, but every object TensorRT would create is a strict autospec."""

    def __init__(self, input_dtype=None, engines=None) -> None:
        self.builder = strict(real.Builder)
        self.network = strict(real.INetworkDefinition)
        self.parser = strict(real.OnnxParser)
        self.config = strict(real.IBuilderConfig)
        self.profile = strict(real.IOptimizationProfile)
        self.tensor = strict(real.ITensor)
        self.runtime = strict(real.Runtime)
        self.context = strict(real.IExecutionContext)
        self.builder.create_network.return_value = self.network
        self.builder.create_builder_config.return_value = self.config
        self.builder.create_optimization_profile.return_value = self.profile
        self.builder.build_serialized_network.return_value = b"serialised engine"
        self.parser.parse_from_file.return_value = True
        self.network.get_input.return_value = self.tensor
        self.tensor.name = "pixel_values"
        self.tensor.shape = (-1, 3, S, S)
        self.engines = list(engines) if engines is not None else None
        self.input_dtype = input_dtype or real.DataType.FLOAT
        self.runtime.deserialize_cuda_engine.side_effect = self._deserialise
        self.context.set_input_shape.return_value = True
        self.context.set_tensor_address.return_value = True
        self.context.execute_async_v3.return_value = True
        module = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
        module.__version__ = real.__version__
        module.Builder = factory(real.Builder, self.builder)
        module.OnnxParser = factory(real.OnnxParser, self.parser)
        module.Runtime = factory(real.Runtime, self.runtime)
        self.module = module

    def engine(self):
        e = strict(real.ICudaEngine)
        e.num_io_tensors = 2
        names = ["pixel_values", "image_embeds"]
        e.get_tensor_name.side_effect = lambda i: names[i]
        e.get_tensor_mode.side_effect = lambda n: real.TensorIOMode.INPUT if n == names[0] else real.TensorIOMode.OUTPUT
        e.get_tensor_dtype.side_effect = lambda n: self.input_dtype if n == names[0] else real.DataType.FLOAT
        e.create_execution_context.return_value = self.context
        return e

    def _deserialise(self, data):
        _checked(signatures(real.Runtime.deserialize_cuda_engine, "deserialize_cuda_engine"), "deserialize")(data)
        self.deserialised = bytes(data)
        if self.engines:
            return self.engines.pop(0)
        return self.engine()


@pytest.fixture()
def fake(monkeypatch):
    import openclaw_vision.encoders.tensorrt as trtmod

    f = Fake()
    monkeypatch.setattr(trtmod, "trt", f.module)
    return f


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory) -> Path:
    """A small explicitly quantised model with the metadata our exports carry (the parser is mocked)."""
    x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, S, S])
    y = helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["batch", D])
    w = np.random.default_rng(0).integers(-127, 128, (3, D)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(D, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(D, np.int8), "wz"),
        numpy_helper.from_array(np.array([2, 3]), "axes"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["pixel_values", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
        helper.make_node("ReduceMean", ["dq", "axes"], ["m"], keepdims=0),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
        helper.make_node("MatMul", ["m", "wf"], ["image_embeds"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 18)]
    )
    for k, v in {"model_id": "qdq-test@0", "embed_dim": str(D), "image_size": str(S), "precision": "int8"}.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("m") / "qdq-test.int8.onnx"
    onnx.save(model, str(path))
    return path


def _encoder(fake_trt, qdq_model, tmp_path, **kw):
    from openclaw_vision.encoders.engine_cache import BuildOptions, EngineCache
    from openclaw_vision.encoders.tensorrt import TensorRTEncoder

    dev = kw.pop("device", None) or HostDevice()
    opts = kw.pop("options", BuildOptions(max_batch=2))
    return TensorRTEncoder(qdq_model, opts, EngineCache(tmp_path / "engines"), dev, **kw), dev


# --- building --------------------------------------------------------------------------------------


def test_build_uses_this_versions_way_of_building_a_qdq_network(fake, qdq_model):
    from openclaw_vision.encoders.engine_cache import BuildOptions
    from openclaw_vision.encoders.tensorrt import build_serialized, make_progress

    progress = make_progress(io.StringIO())
    data = build_serialized(qdq_model, BuildOptions(max_batch=4, workspace_mb=512), progress)
    assert data == b"serialised engine"
    strong = 1 << int(real.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    if MAJOR >= 11:  # no INT8/FP16 flags exist: the Q/DQ network is strongly typed
        fake.builder.create_network.assert_called_once_with(strong)
        fake.config.set_flag.assert_not_called()
    else:
        fake.builder.create_network.assert_called_once_with(0)
        flags = {c.args[0] for c in fake.config.set_flag.call_args_list}
        assert flags == {real.BuilderFlag.INT8, real.BuilderFlag.FP16}
    fake.parser.parse_from_file.assert_called_once_with(str(qdq_model))
    fake.config.set_memory_pool_limit.assert_called_once_with(real.MemoryPoolType.WORKSPACE, 512 << 20)
    fake.profile.set_shape.assert_called_once_with("pixel_values", (1, 3, S, S), (1, 3, S, S), (4, 3, S, S))
    fake.config.add_optimization_profile.assert_called_once_with(fake.profile)
    assert fake.config.progress_monitor is progress
    assert isinstance(progress, real.IProgressMonitor)


def test_a_model_tensorrt_cannot_parse_is_a_clear_error(fake, qdq_model):
    from openclaw_vision.encoders.engine_cache import BuildOptions
    from openclaw_vision.encoders.tensorrt import EngineBuildError, build_serialized

    fake.parser.parse_from_file.return_value = False
    fake.parser.num_errors = 2
    fake.parser.get_error.side_effect = lambda i: f"node {i}: unsupported"
    with pytest.raises(EngineBuildError, match=r"cannot parse .*node 0: unsupported; node 1: unsupported"):
        build_serialized(qdq_model, BuildOptions())
    fake.parser.parse_from_file.return_value = True
    fake.builder.build_serialized_network.return_value = None
    with pytest.raises(EngineBuildError, match="could not build an engine"):
        build_serialized(qdq_model, BuildOptions())


# --- the cache at start ----------------------------------------------------------------------------


def test_an_engine_is_built_once_and_loaded_from_the_cache_after(fake, qdq_model, tmp_path):
    enc, _ = _encoder(fake, qdq_model, tmp_path)
    assert fake.module.Builder.call_count == 1 and enc.engine_path.exists()
    assert enc.key.tensorrt == real.__version__ and enc.key.gpu == "Fake GPU"
    enc2, _ = _encoder(fake, qdq_model, tmp_path)
    assert fake.module.Builder.call_count == 1  # a valid cached engine is never rebuilt
    assert fake.deserialised == b"serialised engine" and enc2.engine_path == enc.engine_path


def test_a_corrupt_engine_gets_one_log_line_and_a_rebuild(fake, qdq_model, tmp_path, caplog):
    enc, _ = _encoder(fake, qdq_model, tmp_path)
    enc.engine_path.write_bytes(b"serialised eng")  # truncated
    with caplog.at_level(logging.WARNING):
        _encoder(fake, qdq_model, tmp_path)
    assert fake.module.Builder.call_count == 2
    assert [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()] and len(caplog.records) == 1


def test_an_engine_this_tensorrt_refuses_is_rebuilt(monkeypatch, qdq_model, tmp_path, caplog):
    import openclaw_vision.encoders.tensorrt as trtmod

    first = Fake()
    monkeypatch.setattr(trtmod, "trt", first.module)
    _encoder(first, qdq_model, tmp_path)
    second = Fake(engines=[None, None])  # deserialisation fails, e.g. a plan from another TensorRT build
    second.engines[1] = second.engine()
    monkeypatch.setattr(trtmod, "trt", second.module)
    with caplog.at_level(logging.WARNING):
        _encoder(second, qdq_model, tmp_path)
    assert second.module.Builder.call_count == 1
    assert "could not deserialise" in caplog.text and len(caplog.records) == 1


def test_without_an_engine_and_without_building_the_start_fails_cleanly(fake, qdq_model, tmp_path):
    from openclaw_vision.encoders import EncoderError

    with pytest.raises(EncoderError, match="build-engine"):
        _encoder(fake, qdq_model, tmp_path, allow_build=False)
    fake.module.Builder.assert_not_called()


# --- running -------------------------------------------------------------------------------------


def test_tensor_addresses_are_the_buffers_and_inference_runs_on_the_encoders_stream(fake, qdq_model, tmp_path):
    enc, dev = _encoder(fake, qdq_model, tmp_path)
    calls = dict(c.args for c in fake.context.set_tensor_address.call_args_list)
    assert calls == {"pixel_values": address(enc.input), "image_embeds": address(enc.output)}
    assert enc.input.dtype == np.float32 and enc.input.shape == (2, 3, S, S)
    rows = np.random.default_rng(1).standard_normal((3, D)).astype(np.float32)
    done = []

    def run(stream):
        n = fake.context.set_input_shape.call_args.args[1][0]
        enc.output[:n] = rows[len(done) * 2 : len(done) * 2 + n]  # what the engine writes
        done.append(stream)
        return True

    fake.context.execute_async_v3.side_effect = run
    emb = enc.encode(np.zeros((3, 3, S, S), np.float32))  # max_batch 2: two launches
    assert done == [dev.stream_handle] * 2
    assert [c.args[1] for c in fake.context.set_input_shape.call_args_list] == [(2, 3, S, S), (1, 3, S, S)]
    np.testing.assert_allclose(emb.vectors, rows / np.linalg.norm(rows, axis=1, keepdims=True), rtol=1e-6)
    dev.calls.clear()
    fake.context.execute_async_v3.side_effect = None
    enc.encode(enc.input[0][None])  # the preprocessing kernel's output: no copy before inference
    assert dev.calls == ["download", "sync"]


def test_a_failed_launch_is_an_error_not_a_stale_result(fake, qdq_model, tmp_path):
    from openclaw_vision.encoders import EncoderError

    enc, _ = _encoder(fake, qdq_model, tmp_path)
    fake.context.execute_async_v3.return_value = False
    with pytest.raises(EncoderError, match="execute_async_v3 failed"):
        enc.encode(np.zeros((1, 3, S, S), np.float32))


def test_a_half_precision_input_binding_gets_a_half_precision_buffer(monkeypatch, qdq_model, tmp_path):
    import openclaw_vision.encoders.tensorrt as trtmod

    f = Fake(input_dtype=real.DataType.HALF)
    monkeypatch.setattr(trtmod, "trt", f.module)
    enc, _ = _encoder(f, qdq_model, tmp_path)
    assert enc.input.dtype == np.float16  # the kernel then writes fp16 (frame_preprocessor's half flag)


def test_tensorrt_messages_reach_python_logging_and_progress_is_shown(fake, caplog):
    from openclaw_vision.encoders.tensorrt import make_logger, make_progress

    logger = make_logger(logging.INFO)
    assert isinstance(logger, real.ILogger)
    with caplog.at_level(logging.INFO):
        logger.log(real.ILogger.Severity.ERROR, "engine plan version mismatch")
        logger.log(real.ILogger.Severity.VERBOSE, "chatter")
    assert "TensorRT: engine plan version mismatch" in caplog.text and "chatter" not in caplog.text
    out = io.StringIO()
    p = make_progress(out)
    p.phase_start("Building engine", None, 3)
    p.phase_start("Tactic search", "Building engine", 2)
    for i in range(2):
        assert p.step_complete("Tactic search", i) is True
    p.phase_finish("Tactic search")
    p.phase_finish("Building engine")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  Tactic search [2/2]") and lines[1].startswith("Building engine [3/3]")


def test_build_engine_command_checks_the_model_builds_and_reports(fake, qdq_model, tmp_path, monkeypatch, capsys):
    import openclaw_vision.encoders.tensorrt as trtmod
    from openclaw_vision.encoders.engine_cache import BuildOptions

    monkeypatch.setattr(trtmod, "CudaDevice", HostDevice)
    out = io.StringIO()
    assert trtmod.build_engine_cli(qdq_model, BuildOptions(max_batch=2), tmp_path, False, out) == 0
    assert "ready for qdq-test@0 on Fake GPU" in out.getvalue()
    assert trtmod.build_engine_cli(qdq_model, BuildOptions(max_batch=2), tmp_path, True, out) == 0
    assert fake.module.Builder.call_count == 2  # --force rebuilds
    bad = tmp_path / "fp.onnx"
    m = onnx.load(str(qdq_model))
    next(i for i in m.graph.initializer if i.name == "z").CopyFrom(numpy_helper.from_array(np.array(3, np.int8), "z"))
    onnx.save(m, str(bad))
    assert trtmod.build_engine_cli(bad, BuildOptions(), tmp_path, False, out) == 1
    assert "zero point [3] is not 0" in capsys.readouterr().err


# --- the INT8 gate through the tensorrt row's build step ---------------------------------------------


def test_the_gate_wrapper_refuses_an_int8_engine_never_gated_on_tensorrt(fake, qdq_model, tmp_path, caplog):
    """`backend: auto` (require) never runs an INT8 model on TensorRT that was not gated there; an explicit
    choice (warn) runs it with the reason logged; a passing tensorrt verdict runs under require."""
    import json
    from dataclasses import replace

    from openclaw_vision.core import gate
    from openclaw_vision.encoders import BackendUnsuitable, backends
    from openclaw_vision.encoders.options import EncoderOptions

    row = replace(backends.get("tensorrt"), build=lambda path, o: _encoder(fake, path, tmp_path)[0])
    with pytest.raises(BackendUnsuitable, match=r"qdq-test@0 \(INT8\) has no accuracy-gate verdict for tensorrt"):
        row.open(qdq_model, EncoderOptions(gate="require"))
    with caplog.at_level(logging.WARNING, logger="openclaw_vision.encoders.gating"):
        assert row.open(qdq_model, EncoderOptions(gate="warn")).precision == "int8"
    assert "no accuracy-gate verdict for tensorrt" in caplog.text
    model = onnx.load(str(qdq_model))
    model.metadata_props.add(key=gate.RUNTIMES_KEY, value=json.dumps({"tensorrt": {"passed": True, "mean_cosine": 1}}))
    gated = tmp_path / "gated.int8.onnx"
    onnx.save(model, str(gated))
    assert row.open(gated, EncoderOptions(gate="require")).model_id == "qdq-test@0"
