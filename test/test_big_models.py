"""Models past the 2 GB protobuf limit, on small towers: external data, staging, streaming, scaling pieces.

The ViT-L/H/bigG runs themselves are in `openclaw-vision ladder` and the closing note; here the
external-data path is forced by lowering the threshold, and each scaling piece (one-pass
calibration, the local sensitivity probe, checkpoint mapping at the big widths) is checked
against its definition on the tiny tower.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import external_data_helper, numpy_helper
from safetensors.torch import save_file

from openclaw_vision.core.gate import GateSpec
from openclaw_vision.core.ortsession import session_options
from openclaw_vision.encoders import EncoderError
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.models import export as export_mod
from openclaw_vision.models import onnx_files
from openclaw_vision.models.checkpoint import load_into
from openclaw_vision.models.configs import get_config
from openclaw_vision.models.export import ExportCheckError, export_model, finish_export, torch_export
from openclaw_vision.models.vit import VisionTransformer
from openclaw_vision.quant import calibrate, sensitivity
from openclaw_vision.quant.calibrate import Range
from openclaw_vision.quant.evaluate import Evaluator, worst
from openclaw_vision.quant.graph import quantisable_layers
from openclaw_vision.quant.qdq import activation_qparams, build_probe_model, probe_outputs, quantise_weight

X = np.random.default_rng(0).standard_normal((3, 3, 224, 224)).astype(np.float32)


def _run(path, x=X) -> np.ndarray:
    sess = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"pixel_values": x})[0]


@pytest.fixture(scope="module")
def external_tiny(tmp_path_factory):
    """The tiny tower exported with the external-data threshold at 0: the path every >2 GB model takes."""
    out = tmp_path_factory.mktemp("ext") / "tiny.fp32.onnx"
    return export_model("tiny", out, threshold=0)


# --- export -------------------------------------------------------------------------------------


def test_export_past_the_threshold_is_one_onnx_and_one_data_file_and_runs_the_same(external_tiny, tiny_model):
    res = external_tiny
    assert [p.name for p in res.files] == ["tiny.fp32.onnx", "tiny.fp32.onnx.data"]
    assert sorted(p.name for p in res.path.parent.iterdir()) == ["tiny.fp32.onnx", "tiny.fp32.onnx.data"]
    graph = onnx_files.load_graph(res.path)
    locations = {e.value for t in graph.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"tiny.fp32.onnx.data"}  # every weight, one file
    assert res.path.stat().st_size < 100_000  # the graph only
    assert onnx_files.read_metadata(res.path)["external_data"] == "tiny.fp32.onnx.data"
    assert res.min_cosine >= 0.9999 and res.check_images == 4
    np.testing.assert_allclose(_run(res.path), _run(tiny_model), atol=1e-5)
    assert {p["name"] for p in res.phases} >= {"trace (torch.onnx, graph only)", "check: ONNX Runtime vs PyTorch"}


def test_exported_weights_are_folded_so_every_linear_is_quantisable(external_tiny):
    graph = onnx_files.load_graph(external_tiny.path)
    inits = {t.name for t in graph.graph.initializer}
    for node in graph.graph.node:  # no Transpose/Reshape/Cast left working on a weight at run time
        if node.op_type in onnx_files.FOLDABLE:
            assert not set(node.input) & inits, node.name
    layers = quantisable_layers(graph)
    assert len(layers) == 10 and layers[1].weight == "transformer.resblocks.0.attn.in_proj_weight.T"


def test_a_failed_export_leaves_nothing_behind_and_keeps_the_older_model(tmp_path, monkeypatch):
    out = tmp_path / "tiny.fp32.onnx"
    export_model("tiny", out, threshold=0)
    before = out.read_bytes()

    def disagree(*args, **kwargs):
        raise ExportCheckError("ONNX Runtime vs PyTorch cosine 0.5 < 0.9999")

    monkeypatch.setattr(export_mod, "compare_onnx", disagree)
    with pytest.raises(ExportCheckError):
        export_model("tiny", out, seed=5, threshold=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.fp32.onnx", "tiny.fp32.onnx.data"]
    assert out.read_bytes() == before


def test_a_smaller_model_replacing_a_bigger_one_takes_its_data_file_away(tmp_path):
    out = tmp_path / "tiny.fp32.onnx"
    export_model("tiny", out, threshold=0)
    export_model("tiny", out)  # now under the threshold: embedded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.fp32.onnx"]
    assert onnx_files.model_files(out) == [out]


class _TextLike(torch.nn.Module):
    """Not a vision tower: token embedding, a Linear and a tied output projection (what a text tower has)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(300, 48)
        self.fc = torch.nn.Linear(48, 48)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embed(ids)).mean(1) @ self.embed.weight.t()


def test_any_torch_module_exports_through_the_external_data_path(tmp_path):
    module = _TextLike().eval()
    ids = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(0))
    raw = torch_export(module, (ids,), tmp_path / "raw" / "m.onnx", ["ids"], ["out"], {"ids": {0: "b"}})
    assert raw.stat().st_size < 20_000  # the graph only: the weights stay in the module until written
    out = finish_export(raw, tmp_path / "text.onnx", {"model_id": "text-like"}, 0, module.state_dict())
    assert onnx_files.read_metadata(out) == {"model_id": "text-like", "external_data": "text.onnx.data"}
    got = ort.InferenceSession(str(out)).run(None, {"ids": ids.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, module(ids).numpy(), atol=1e-5)
    # the tied weight: as is for the lookup, transposed for the projection (a MatMul weight), nothing else
    names = sorted(t.name for t in onnx_files.load_graph(out).graph.initializer)
    assert names == ["embed.weight", "embed.weight.T", "fc.bias", "fc.weight.T"]


def test_per_tensor_data_files_are_gathered_into_one(tmp_path, tiny_model):
    # the exporter's own format above 2 GB: one file per weight beside the graph
    model = onnx.load(str(tiny_model))
    external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=False, size_threshold=0)
    (tmp_path / "raw").mkdir()
    onnx.save(model, str(tmp_path / "raw" / "model.onnx"))
    assert len(list((tmp_path / "raw").iterdir())) > 10
    out = finish_export(tmp_path / "raw" / "model.onnx", tmp_path / "one.onnx", {}, threshold=0)
    assert [p.name for p in onnx_files.model_files(out)] == ["one.onnx", "one.onnx.data"]
    np.testing.assert_allclose(_run(out), _run(tiny_model), atol=1e-6)


# --- runtime consumers ------------------------------------------------------------------------------


def test_the_encoder_runs_an_external_data_model_and_names_a_missing_data_file(external_tiny, tiny_model, tmp_path):
    a, b = OnnxRuntimeEncoder(external_tiny.path), OnnxRuntimeEncoder(tiny_model)
    assert a.model_id == b.model_id == "tiny@random-seed0" and a.embed_dim == 32
    np.testing.assert_allclose(a.encode(X).vectors, b.encode(X).vectors, atol=1e-5)
    lonely = tmp_path / "lonely.onnx"
    lonely.write_bytes(external_tiny.path.read_bytes())
    with pytest.raises(EncoderError, match=r"keep lonely\.onnx\.data beside it"):
        OnnxRuntimeEncoder(lonely)


def test_quantize_streams_an_external_data_model_into_an_external_data_int8_model(
    external_tiny, sample_bag, tmp_path, data_home
):
    from openclaw_vision.quant.pipeline import QuantOptions, quantize

    out = tmp_path / "models" / "tiny.int8.onnx"
    result = quantize(
        QuantOptions(external_tiny.path, sample_bag, out, data_threshold=0, measure_memory=False, sweep="never")
    )
    r = result.as_dict()  # report.json's keys
    assert result.passed and r["int8_files"] == ["tiny.int8.onnx", "tiny.int8.onnx.data"]
    # no scratch left; the report folder beside the model holds the re-gate set (gate.REGATE_SET)
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.int8.onnx", "tiny.int8.onnx.data", "tiny.int8.report"]
    assert [p.name for p in (out.parent / "tiny.int8.report").iterdir()] == ["regate.npz"]
    assert onnx_files.read_metadata(out)["external_data"] == "tiny.int8.onnx.data"
    enc = OnnxRuntimeEncoder(out)
    assert enc.precision == "int8" and json.loads(enc.session.get_modelmeta().custom_metadata_map["quant_gate"])
    assert r["ranking"] == "local SQNR" and not r["sweep"]["ran"]
    assert len(r["sensitivity_local"]) == 10 and [b["block"] for b in r["sensitivity_blocks"]] == [-1, 0, 1]
    names = [p["name"] for p in r["phases"]]
    # the migration needs the FP32 pass's per-channel ranges, and the weights are quantised once migrated
    assert names[:4] == ["read and preprocess frames", "FP32: calibration pass and reference embeddings",
                         "outliers: migration (LayerNorm → GEMM), FC2 split, FC2 centring",
                         "quantise weights"]  # fmt: skip
    assert all(p["peak_rss_mb"] > 0 and p["seconds"] >= 0 for p in r["phases"])
    assert r["calibration"]["passes"] == 1


# --- scaling pieces, against their definitions ---------------------------------------------------------


def test_one_pass_histogram_equals_a_histogram_over_the_final_range():
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal(5000) * s for s in (0.5, 0.2, 3.0, 1.0)]  # the range grows twice over
    stats = calibrate.TensorStats(0.0, 0.0)
    for b in batches:
        stats.update(b)
    everything = np.concatenate(batches)
    assert stats.limit >= np.abs(everything).max() and stats.limit < 2 * np.abs(everything).max()
    direct = np.histogram(everything, bins=2 * calibrate.HIST_BINS, range=(-stats.limit, stats.limit))[0]
    np.testing.assert_array_equal(stats.hist, direct)
    assert (stats.lo, stats.hi) == (everything.min(), everything.max())


def test_the_probe_measures_each_layers_own_output_error(tiny_model):
    model = onnx.load(str(tiny_model))
    layers = quantisable_layers(model)
    ranges = {layer.activation: Range(-2.5, 2.5) for layer in layers}
    probe = build_probe_model(model, layers, ranges)
    i = 3  # block0.mlp_fc
    layer = layers[i]
    node = next(n for n in model.graph.node if n.name == layer.node)
    outs = [*probe_outputs(i), layer.activation, node.output[0]]
    for name in outs[2:]:
        probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = ort.InferenceSession(probe.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    err, sig, x, y = sess.run(outs, {"pixel_values": X})
    # by hand: fake-quantise the input with its scale, dequantise the INT8 weight, multiply
    scale, _ = activation_qparams(ranges[layer.activation], "s8s8")
    xq = np.clip(np.rint(x / scale), -128, 127) * scale
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == layer.weight))
    q, ws = quantise_weight(w, layer.channel_axis)
    yq = xq @ (q * ws[None, :])
    assert float(err) == pytest.approx(np.sum((yq - y) ** 2), rel=1e-3)
    assert float(sig) == pytest.approx(np.sum(y**2), rel=1e-5)
    assert 20 < 10 * np.log10(sig / err) < 60


def test_local_sensitivity_finds_the_layer_reading_an_outlier_channel(tmp_path):
    from openclaw_vision.core.ortsession import session
    from openclaw_vision.models.checkpoint import build_model
    from openclaw_vision.models.export import export_onnx

    model, model_id = build_model("tiny", seed=0)
    with torch.no_grad():
        model.transformer.resblocks[1].ln_2.weight[5] *= 100.0
    path = export_onnx(model, model_id, tmp_path / "outlier.onnx")
    proto = onnx.load(str(path))
    layers = quantisable_layers(proto)
    acts = sorted({layer.activation for layer in layers})
    obs = session(calibrate.observation_model(proto, acts).SerializeToString(), level="basic")
    stats = calibrate.collect_stats(obs, acts, [X[:2], X[2:]])
    ranges = calibrate.compute_ranges(stats, "minmax")
    probe = session(build_probe_model(proto, layers, ranges).SerializeToString())
    local = sensitivity.local(layers, probe, [X])
    assert sensitivity.local_ranking(local)[0] == next(la.node for la in layers if la.label == "block1.mlp_fc")
    table = sensitivity.block_table(local)
    assert table[2]["block"] == 1 and table[2]["worst_db"] == table[2]["mlp_fc"]


def test_rank_agreement_is_spearman():
    assert sensitivity.rank_agreement(list("abcd"), list("abcd")) == 1.0
    assert sensitivity.rank_agreement(list("abcd"), list("dcba")) == -1.0


def test_a_new_runtime_is_one_entry_and_scores_every_row(tiny_model, monkeypatch):
    """What the OpenVINO row is: another runtime's encoder scored on the same held-out frames and checks."""
    from openclaw_vision.quant import runtimes

    calls = []

    def one_thread(model, threads):
        calls.append(model)
        return OnnxRuntimeEncoder(model, threads=1)

    monkeypatch.setitem(runtimes.RUNTIMES, "ort-1-thread", one_thread)
    heldout = {"1920x1080": X, "854x480": X[::-1].copy()}
    ev = Evaluator.from_model(tiny_model, heldout)
    ev.runtimes = ("onnxruntime", "ort-1-thread")
    scores = ev.gate_rows(tiny_model)
    assert list(scores) == ["1920x1080", "854x480", "ort-1-thread 1920x1080", "ort-1-thread 854x480"]
    assert calls == [tiny_model] and worst(scores).mean_cosine == pytest.approx(1.0, abs=1e-6)
    rows = ev.by_runtime(tiny_model, GateSpec(), ["onnxruntime", "ort-1-thread"])
    assert all(r["passed"] and set(r["per_resolution"]) == set(heldout) for r in rows.values())
    with pytest.raises(ValueError, match="unknown runtime 'nope'"):
        ev.score(tiny_model, "nope")


# --- checkpoints at the big widths ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ViT-L-14", "ViT-H-14", "ViT-bigG-14"])
def test_open_clip_and_hf_layouts_map_at_the_big_widths(name, tmp_path):
    """One block at the real width, heads, MLP and embedding size: the key mapping and q/k/v split are what vary."""
    from test_models import _hf_state, _open_clip_state

    cfg = dataclasses.replace(get_config(name), layers=1)
    src = VisionTransformer(cfg).init_random(3).eval()
    save_file(_open_clip_state(src), tmp_path / "oc.safetensors")
    save_file(_hf_state(src), tmp_path / "hf.safetensors")
    x = torch.from_numpy(X[:1])
    with torch.no_grad():
        ref = src(x)
        for file in ("oc.safetensors", "hf.safetensors"):
            dst = VisionTransformer(cfg)
            load_into(dst, _read(tmp_path / file))
            assert torch.equal(dst.eval()(x), ref), file
            del dst


def _read(path):
    from openclaw_vision.models.checkpoint import read_state_dict

    return read_state_dict(path)


# --- the tools ------------------------------------------------------------------------------------------


def test_the_demo_says_how_the_newest_frame_policy_bounds_latency():
    from openclaw_vision.tools.demo import policy_line

    slow = {
        "received": 90,
        "encoded": 2,
        "dropped": 88,
        "latency_ms": {"p50": 9000.0, "p95": 15000.0, "p99": 15800.0},
        "stages_ms": {"encode": {"p50": 8000.0, "p99": 8200.0}},
    }
    line = policy_line(slow)
    assert "2 of 90 frames" in line and "88 were replaced by a newer one" in line
    assert "2.0x one encode" in line and "FIFO queue would have made the last frame wait ~720.0 s" in line
    assert policy_line({**slow, "dropped": 0}) is None  # nothing to explain when every frame was encoded


def test_ladder_command_runs_a_model_through_every_step(sample_bag, tmp_path, data_home):
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "openclaw_vision.cli", "ladder", "--models", "tiny", "--calib", str(sample_bag),
         "--out", str(tmp_path), "--output-dim", "16"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    rec = json.loads((tmp_path / "tiny.json").read_text())
    assert rec["export"]["peak_rss_mb"] > 0 and rec["export"]["check_images"] == 4
    assert rec["quantize"]["passed"] and rec["quantize"]["memory"]["int8"]["session_mb"] > 0
    assert rec["quantize"]["gate"]["zero_shot_top1"] >= 0.99  # the same gate as every entry point: text term in
    assert rec["latency"]["fp32"]["n"] >= 8 and rec["latency"]["frame"] == "1920x1080 rgb8"
    assert rec["projection"]["model_id"] == "tiny@random-seed0/16" and rec["projection"]["passed"]
    md = (tmp_path / "ladder.md").read_text()
    assert "| tiny |" in md and "ladder --models tiny" in md and "AVX-512 VNNI" in md
    assert f"| {rec['projection']['metrics']['retained_variance']:.1%} / " in md


def test_an_export_stopped_by_sigterm_leaves_nothing_behind(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "b.onnx"
    proc = subprocess.Popen(
        [sys.executable, "-m", "openclaw_vision.cli", "export", "--model", "ViT-B-32", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not any(tmp_path.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the staging folder appears once the tower is built
    assert any(tmp_path.iterdir()), "the export never started writing"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_an_embedded_model_written_tensor_by_tensor_parses_as_the_whole_model(tiny_model, tmp_path):
    whole = onnx.load(str(tiny_model))
    graph = onnx.load(str(tiny_model))
    reader = onnx_files.TensorReader(graph, tiny_model.parent)
    tensors = [onnx_files.pending_from(reader, t.name) for t in graph.graph.initializer]
    out = onnx_files.write_model(graph, tensors, tmp_path / "streamed.onnx")
    back = onnx.load(str(out))
    assert [t.name for t in back.graph.initializer] == [t.name for t in whole.graph.initializer]
    for a, b in zip(back.graph.initializer, whole.graph.initializer, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    assert back.graph.node == whole.graph.node and onnx_files.metadata_of(back) == onnx_files.metadata_of(whole)
    np.testing.assert_array_equal(_run(out), _run(tiny_model))


def test_a_scratch_folder_left_by_a_killed_run_is_removed_by_the_next(tmp_path):
    """SIGKILL cannot clean up: the next run on this host removes folders whose process is gone, and only those."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = os.uname().nodename.replace(".", "_")
    left = tmp_path / f".quantize.{host}.{dead.pid}.abc123.tmp"
    running = tmp_path / f".quantize.{host}.{os.getpid()}.def456.tmp"
    elsewhere = tmp_path / f".quantize.other_host.{dead.pid}.ghi789.tmp"
    export = tmp_path / f".model.onnx.{host}.{dead.pid}.jkl012.tmp"  # another kind of scratch: not this one's
    for d in (left, running, elsewhere, export):
        d.mkdir()
        (d / "int8-weights.data").write_bytes(b"x" * 10)
    new = onnx_files.scratch_dir(tmp_path, "quantize")
    assert not left.exists() and running.exists() and elsewhere.exists() and export.exists()
    assert new.is_dir() and new.name.startswith(f".quantize.{host}.{os.getpid()}.")
