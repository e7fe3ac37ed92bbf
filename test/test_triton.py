"""backend: triton against a real Triton server (PyTriton's, started by `openclaw-vision serve`), loopback
only; the model repository writer checked with Triton's own ModelConfig protobuf definition.

Every server is a process group that the fixtures stop (SIGTERM, then SIGKILL for the group);
every loop is bounded by a deadline.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from dds_helpers import Inbox, node_matched, wait_until

from openclaw_vision.core.children import free_port
from openclaw_vision.encoders import EncoderError, EncoderOptions, create_encoder
from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import pan_frames
from openclaw_vision.runtime.config import EncoderConfig
from openclaw_vision.serving.process import ServerProcess

pytest.importorskip("tritonclient.grpc", reason="the triton extra (make setup installs it)")
pytestmark = pytest.mark.triton

#: the batcher holds a request this long for others (µs): long enough that two lockstep nodes meet
QUEUE_DELAY_US = 30000


def serve(model: Path, port: int, log: Path) -> ServerProcess:
    extra = ["--backend", "onnxruntime", "--threads", "1", "--queue-delay-us", str(QUEUE_DELAY_US)]
    return ServerProcess(model, f"127.0.0.1:{port}", log, extra)


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    port = free_port()
    with serve(tiny_model, port, tmp_path_factory.mktemp("triton") / "serve.log") as srv:
        yield srv, port


def options(port: int, **kw) -> EncoderOptions:
    return EncoderOptions(threads=1, triton_url=f"127.0.0.1:{port}", **kw)


def pixels(n: int) -> np.ndarray:
    pre = CpuPreprocessor()
    return np.stack([pre(Frame.from_rgb(f)) for f in pan_frames(n, 320, 240)])


def test_triton_features_equal_the_local_backends_with_and_without_shared_memory(server, tiny_model):
    srv, port = server
    assert srv.url == f"grpc://127.0.0.1:{port}"
    x = pixels(5)
    local = OnnxRuntimeEncoder(tiny_model, threads=1).encode(x).vectors
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")

    def regions() -> list[str]:
        return [r["name"] for r in client.get_system_shared_memory_status(as_json=True).get("regions", {}).values()]

    results = {}
    for shm in ("auto", "off"):
        enc = create_encoder("triton", tiny_model, options=options(port, triton_shared_memory=shm))
        try:
            assert enc.status()["triton_shared_memory"] == ("on" if shm == "auto" else "off")
            assert (enc.model_id, enc.embed_dim) == ("tiny@random-seed0", 32)
            results[shm] = np.concatenate([enc.encode(x[:1]).vectors, enc.encode(x[1:]).vectors])  # batch 1 and 4
            assert len(regions()) == (1 if shm == "auto" else 0)  # one region per encoder, registered once
        finally:
            enc.close()
        assert regions() == []  # unregistered at exit
    client.close()
    for shm, got in results.items():
        assert float(np.min(np.sum(got * local, axis=1))) >= 0.99999, shm
    assert float(np.min(np.sum(results["auto"] * results["off"], axis=1))) >= 0.99999


def test_a_server_with_other_weights_is_refused_at_start(server, tmp_path):
    _, port = server
    from openclaw_vision.models.export import export_model

    other = tmp_path / "tiny.fp32.onnx"  # same architecture and name on the server, other seed
    export_model("tiny", other, seed=1)
    with pytest.raises(EncoderError, match=r"serves 'tiny_fp32' with model id 'tiny@random-seed0', but the local "
                                           r"model is 'tiny@random-seed1': other weights \(refused"):  # fmt: skip
        create_encoder("triton", other, options=options(port))
    with pytest.raises(EncoderError, match=r"Triton at grpc://127.0.0.1:1: model 'tiny_fp32'"):  # nobody there
        create_encoder("triton", other, options=EncoderOptions(triton_url="127.0.0.1:1", triton_timeout=1.0))


def test_the_served_models_verdict_decides_whether_an_int8_model_runs(tiny_model, tmp_path, caplog):
    """The gate wrapper judges a served INT8 model by the verdict the server put in its config parameters
    (the one its own gate ran it by): a passing one runs under require; none is refused under require and
    run with a warning when triton is named (warn)."""
    from openclaw_vision.encoders import BackendUnsuitable, backends

    here = {"passed": True, "mean_cosine": 0.9999, "isa": backends.get("onnxruntime").isa()}
    for name, gates in (("gated", {"onnxruntime": here}), ("ungated", {})):
        (tmp_path / name).mkdir()
        model = _int8_copy(tiny_model, tmp_path / name / "tiny.int8.onnx", gates)
        port = free_port()
        with serve(model, port, tmp_path / f"{name}.log"):
            if gates:
                enc = create_encoder("triton", model, options=options(port, gate="require"))
                assert enc.precision == "int8" and enc.gate_verdict.passed
                enc.close()
                continue
            with pytest.raises(BackendUnsuitable, match=r"has no accuracy-gate verdict for triton"):
                create_encoder("triton", model, options=options(port, gate="require"))
            with caplog.at_level(logging.WARNING, logger="openclaw_vision.encoders.gating"):
                create_encoder("triton", model, options=options(port)).close()
            assert "no accuracy-gate verdict for triton" in caplog.text


# --- the encoder node with backend triton, over loopback DDS ------------------------------------------
class Camera:
    """Sends small rgb8 frames to one node's image topic, one at a time (the test waits for each)."""

    def __init__(self, transport, topic: str) -> None:
        from openclaw_vision.ros.types import DEFAULT, IMAGE

        self.t, self.sent = transport, 0
        self.pub = transport.publisher(topic, IMAGE, DEFAULT)
        self.frames = [np.ascontiguousarray(f) for f in pan_frames(6, 64, 48)]

    def send(self) -> np.ndarray:
        from openclaw_vision.ros.types import IMAGE
        from openclaw_vision.runtime.bags import serialize_image

        rgb = self.frames[self.sent % len(self.frames)]
        self.sent += 1
        self.pub.publish(self.t.deserialize(serialize_image(rgb, "rgb8", 1_000_000_000 + self.sent), IMAGE))
        return rgb


def accounted(node) -> int:
    st = node.stats()
    return st["encoded"] + st["dropped"] + st["rejected"] + st["failed"]


def start_node(tiny_model, port: int, name: str, topic: str = "/camera/image_raw", features: str = "/visual_features",
               **kw):  # fmt: skip
    from openclaw_vision.ros import encoder_node
    from openclaw_vision.ros.cyclone import CycloneTransport

    cfg = EncoderConfig(model="tiny", model_path=str(tiny_model), backend="triton", triton_url=f"127.0.0.1:{port}",
                        reliability="reliable", depth=1, diagnostics_period=0.2, log_throttle_period=0.5,
                        transport="cyclonedds", image_topic=topic, features_topic=features, **kw)  # fmt: skip
    t = CycloneTransport(name)
    return encoder_node.EncoderNode(cfg, t, create_encoder("triton", tiny_model, options=encoder_node.encoder_options(
        cfg))).start(), t  # fmt: skip


@pytest.mark.dds
def test_two_nodes_share_one_server_and_its_batcher_merges_their_frames(server, tiny_model, dds_domain):
    import tritonclient.grpc as grpcclient

    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.types import DEFAULT, VISUAL_FEATURES

    _, port = server
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")

    def batches() -> dict[int, int]:
        stats = client.get_inference_statistics("tiny_fp32", as_json=True)["model_stats"][0]
        return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}

    before = batches()
    test_t = CycloneTransport("test_two_nodes")
    nodes = []
    try:
        for i in (0, 1):
            nodes.append(start_node(tiny_model, port, f"encoder_{i}", f"/cam{i}/image_raw", f"/cam{i}/features"))
        inboxes = [Inbox(), Inbox()]
        subs = [test_t.subscribe(f"/cam{i}/features", VISUAL_FEATURES, DEFAULT, box) for i, box in enumerate(inboxes)]
        cams = [Camera(test_t, f"/cam{i}/image_raw") for i in (0, 1)]
        ends = list(zip([n for n, _ in nodes], cams, subs, strict=True))
        wait_until(lambda: all(node_matched(n, [c.pub], [sub]) for n, c, sub in ends), what="both nodes subscribed")
        local = OnnxRuntimeEncoder(tiny_model, threads=1)
        pre = CpuPreprocessor()
        frames = 12
        for k in range(frames):  # both cameras at once, the next pair after both features came back
            sent = [c.send() for c in cams]
            for box in inboxes:
                box.wait(k + 1)
            for box, rgb in zip(inboxes, sent, strict=True):
                got = np.asarray(box.items[k].embedding, np.float32)
                want = local.encode(pre(Frame.from_rgb(rgb))[None]).vectors[0]
                assert float(got @ want) / float(np.linalg.norm(got)) >= 0.99999  # the node's features, FP32
    finally:
        for node, t in nodes:
            node.stop()
            t.close()
        test_t.close()
    for node, _ in nodes:
        st = node.stats()
        assert (st["received"], st["encoded"], st["failed"]) == (frames, frames, 0)
    after = batches()
    merged = {b: after.get(b, 0) - before.get(b, 0) for b in after if b > 1}
    assert sum(merged.values()) >= frames // 2, f"the batcher ran {after} (before: {before})"


@pytest.mark.dds
def test_a_server_killed_mid_stream_fails_frames_visibly_and_the_node_recovers(tiny_model, dds_domain, tmp_path,
                                                                               caplog):  # fmt: skip
    from openclaw_vision.ros.cyclone import CycloneTransport
    from openclaw_vision.ros.diagnostics import status_values
    from openclaw_vision.ros.node_counters import STATUS_NAME
    from openclaw_vision.ros.types import DEFAULT, DIAGNOSTIC_ARRAY

    port = free_port()
    servers = [serve(tiny_model, port, tmp_path / "serve.log").start()]
    test_t = CycloneTransport("test_outage")
    node = node_t = None
    try:
        node, node_t = start_node(tiny_model, port, "encoder_outage", triton_timeout=1.0)
        diags = Inbox()
        test_t.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, DEFAULT, diags)
        cam = Camera(test_t, "/camera/image_raw")
        wait_until(lambda: node_matched(node, [cam.pub]), what="the node subscribed")

        def one() -> None:  # a frame, and the node has classified it (encoded, failed, ...)
            cam.send()
            wait_until(lambda: accounted(node) == cam.sent, timeout=30, what=f"frame {cam.sent} accounted")

        with caplog.at_level(logging.INFO):
            for _ in range(3):
                one()
            assert node.stats()["encoded"] == 3
            servers[0].kill()  # the whole server group, SIGKILL: no goodbye
            for _ in range(4):
                one()
            assert node.stats()["failed"] == 4 and node.stats()["encoded"] == 3

            # the server's state and the counts are read at slightly different moments: wait for a
            # message showing both, then its reason must name Triton
            def down(msgs: list) -> bool:
                v = _triton_values(msgs, status_values, STATUS_NAME)
                return v.get("triton_server", "").startswith("unreachable") and int(v["failed"]) >= 1

            outage = diags.wait_for(down, what="/diagnostics showing the server unreachable and the failures")
            assert "Triton" in _triton_values(outage, status_values, STATUS_NAME)["last_failure"]
            servers.append(serve(tiny_model, port, tmp_path / "serve2.log"))  # back on the same port, while
            starting = threading.Thread(target=servers[-1].start, daemon=True)  # the camera goes on sending
            starting.start()
            deadline = time.monotonic() + 90
            while (starting.is_alive() or node.stats()["encoded"] == 3) and time.monotonic() < deadline:
                one()
                time.sleep(0.2)
            starting.join(timeout=1)
            for _ in range(3):
                one()
        st = node.stats()
        print("outage:", {k: st[k] for k in ("received", "encoded", "failed", "dropped", "rejected")},
              node.encoder.status())  # fmt: skip
        assert st["encoded"] >= 4, "the node never recovered"
        assert st["received"] == cam.sent == st["encoded"] + st["failed"] + st["dropped"] + st["rejected"]
        assert st["failed"] >= 4 and all(t.is_alive() for t in node.supervisor.threads)
        assert node.encoder.status()["triton_server"] == "connected" and node.encoder.status()["triton_reconnects"] >= 1
        text = caplog.text
        assert f"triton: server at grpc://127.0.0.1:{port} lost" in text
        assert f"triton: server at grpc://127.0.0.1:{port} back after" in text
        assert "encoding a frame failed (a batch of 1, each counted): Triton" in text
    finally:
        for srv in servers:
            srv.stop()
        if node is not None:
            node.stop()
            node_t.close()
        test_t.close()


@pytest.mark.dds
def test_a_node_whose_server_hangs_mid_encode_still_stops_with_every_frame_counted(server, tiny_model, dds_domain):
    """The stop with the remote backend gone: the server's processes are frozen (SIGSTOP: it takes the
    connection and never answers), a frame's encode is waiting on it, and the node is stopped. The stop
    ends (the call gives up at triton_timeout), no thread is left running, the frame counts as failed."""
    import signal

    from openclaw_vision.ros.cyclone import CycloneTransport

    srv, port = server
    test_t = CycloneTransport("test_hung_server")
    node, node_t = start_node(tiny_model, port, "encoder_hung", triton_timeout=1.0)
    frozen = stopped = False
    try:
        cam = Camera(test_t, "/camera/image_raw")
        wait_until(lambda: node_matched(node, [cam.pub]), what="the node subscribed")
        cam.send()
        wait_until(lambda: accounted(node) == 1, timeout=60, what="the first frame")
        srv.child.send(signal.SIGSTOP)
        frozen = True
        cam.send()
        wait_until(lambda: node.stats()["received"] == 2, timeout=60, what="the second frame received")
        node.stop()  # its encode is waiting on the frozen server
        stopped = True
        assert node.supervisor.alive() == []
        st = node.stats()
        assert st["received"] == 2 == st["encoded"] + st["failed"] + st["dropped"] + st["rejected"], st
        assert st["thread_failures"] == 0, st
    finally:
        if frozen:
            srv.child.send(signal.SIGCONT)
        if not stopped:
            node.stop()
        node_t.close()
        test_t.close()


def _triton_values(msgs, status_values, name) -> dict:
    """The node status of the latest /diagnostics message that carries the server's state."""
    for m in reversed(msgs):
        v = status_values(m, name)
        if v and "triton_server" in v:
            return v
    return {}


# --- triton-repo ----------------------------------------------------------------------------------
def _parse(path: Path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _int8_copy(src: Path, dst: Path, gates: dict) -> Path:
    """The tiny model re-labelled as a gated INT8 model (what the repository writer reads is the metadata)."""
    m = onnx.load(str(src))
    meta = {p.key: p.value for p in m.metadata_props}
    meta.update(precision="int8", quant_gate_runtimes=json.dumps(gates))
    del m.metadata_props[:]
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(dst))
    return dst


def test_triton_repo_writes_configs_that_tritons_own_definition_parses(tiny_model, tmp_path):
    from openclaw_vision.encoders.engine_cache import EngineCache, EngineKey, file_sha256
    from openclaw_vision.serving.repo import write_repo

    fp32 = shutil.copy(tiny_model, tmp_path / "tiny.fp32.onnx")
    int8 = _int8_copy(tiny_model, tmp_path / "tiny.int8.onnx",
                      {"onnxruntime": {"passed": True}, "openvino": {"passed": False}})  # fmt: skip
    cache = EngineCache(tmp_path / "engines")  # an engine record as build-engine writes it (bytes: not a plan)
    cache.store("tiny.fp32", EngineKey(file_sha256(Path(fp32)), "H100", "9.0", "10.16.1.11"), b"plan")
    res = write_repo([Path(fp32), int8], tmp_path / "repo", max_batch=8, engine_cache=tmp_path / "engines")

    written = {w["model"]: w for w in res["written"]}
    assert set(written) == {"tiny_fp32", "tiny_fp32_openvino", "tiny_fp32_tensorrt", "tiny_int8"}
    skipped = {s["model"]: s["why"] for s in res["skipped"]}
    failed = "tiny@random-seed0 (INT8) failed its accuracy gate on openvino (ISA not recorded)"
    assert skipped["tiny_int8_openvino"] == failed
    assert skipped["tiny_int8_tensorrt"] == "tiny@random-seed0 (INT8) was not gated on tensorrt"
    for name in written:
        cfg = _parse(tmp_path / "repo" / name / "config.pbtxt")
        assert cfg.name == name and cfg.max_batch_size == 8
        assert [(i.name, list(i.dims)) for i in cfg.input] == [("pixel_values", [3, 224, 224])]
        assert [(o.name, list(o.dims)) for o in cfg.output] == [("image_embeds", [32])]
        assert cfg.input[0].data_type == cfg.output[0].data_type == 11  # TYPE_FP32
        assert list(cfg.dynamic_batching.preferred_batch_size) == [2, 4, 8]
        assert cfg.parameters["model_id"].string_value == "tiny@random-seed0"
        assert (tmp_path / "repo" / name / "1" / cfg.default_model_filename).is_file()
    assert _parse(tmp_path / "repo" / "tiny_fp32" / "config.pbtxt").platform == "onnxruntime_onnx"
    assert _parse(tmp_path / "repo" / "tiny_fp32_openvino" / "config.pbtxt").backend == "openvino"
    plan = _parse(tmp_path / "repo" / "tiny_fp32_tensorrt" / "config.pbtxt")
    assert plan.platform == "tensorrt_plan" and plan.default_model_filename == "model.plan"
    assert plan.parameters["tensorrt"].string_value == "10.16.1.11"
    assert _parse(tmp_path / "repo" / "tiny_int8" / "config.pbtxt").parameters["precision"].string_value == "int8"


def test_the_triton_repo_command_says_what_it_wrote_and_skipped(tiny_model, tmp_path, capsys):
    from openclaw_vision.cli import main

    rc = main(["triton-repo", "--model-path", str(tiny_model), "--out", str(tmp_path / "repo"),
               "--engine-cache", str(tmp_path / "no-engines")])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert f"wrote {tmp_path / 'repo' / 'tiny_fp32'} (onnxruntime, batch 1..8)" in out
    assert "skipped tiny_fp32_tensorrt: no build-engine engine of tiny.fp32.onnx" in out
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["tiny_fp32", "tiny_fp32_openvino"]
