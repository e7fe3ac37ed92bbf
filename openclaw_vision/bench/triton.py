"""`triton` mode: the image encoder run locally against the same model on a Triton server over loopback.

One `openclaw-vision serve` (PyTriton, ONNX Runtime inside, the same model file) on 127.0.0.1, and
three ways to encode a preprocessed 1080p frame: the local ONNX Runtime encoder the node would
otherwise use, backend triton with system shared memory, and backend triton with the pixels in
the gRPC message. First batch-1 latency, interleaved (harness.py: every variant in every round);
then 1, 2 and 4 clients at once, each with its own encoder as separate nodes would have, for a
fixed time: per-frame P50/P99 and frames per second. The local rows with N clients split the
cores between N sessions (N nodes on one robot); the triton rows share one server, whose
dynamic batcher merges what arrives together. Clients are threads of this process (the encoders
release the GIL in ONNX Runtime and in gRPC), not node processes: DDS is not part of this.

Also: bytes per frame on the socket (the pixels, or only the request header with shared memory)
against a 1080p rgb8 camera frame, and the server's own account of a request (queue, input,
infer, output) from its statistics, to say where the added time goes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from ..runtime.stats import percentiles
from .harness import Variant, run_interleaved, summarise

CLIENTS = (1, 2, 4)


def _pixels(size: int) -> np.ndarray:
    from ..preprocess.cpu import CpuPreprocessor
    from ..preprocess.frame import Frame
    from ..preprocess.sample_frames import pan_frames
    from ..preprocess.spec import PreprocessSpec

    return CpuPreprocessor(PreprocessSpec(size=size))(Frame.from_rgb(next(iter(pan_frames(1, 1920, 1080)))))[None]


def _concurrent(encoders: list, x: np.ndarray, seconds: float) -> dict:
    """Each encoder in its own thread, encoding `x` back to back for `seconds`: latency and frames/s."""
    lat: list[list[float]] = [[] for _ in encoders]
    start = threading.Barrier(len(encoders) + 1)
    stop_at: list[float] = []

    def run(i: int) -> None:
        enc = encoders[i]
        enc.encode(x)  # warm
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            enc.encode(x)
            lat[i].append((time.perf_counter() - t0) * 1e3)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(encoders))]
    for t in threads:
        t.start()
    stop_at.append(time.perf_counter() + 3600)  # set for real once every client is warm
    start.wait()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    every = [v for ms in lat for v in ms]
    p = percentiles(every)
    return {"p50_ms": round(p["p50"], 2), "p99_ms": round(p["p99"], 2), "frames": len(every),
            "frames_per_s": round(len(every) / wall, 1)}  # fmt: skip


def _server_account(url: str, model: str) -> dict:
    """Mean ms per request in the server's queue, input, infer and output phases (its statistics)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url.removeprefix("grpc://"))
    try:
        st = client.get_inference_statistics(model, as_json=True)["model_stats"][0]["inference_stats"]
    finally:
        client.close()
    n = max(int(st.get("success", {}).get("count", 0)), 1)
    return {k: round(int(st.get(k, {}).get("ns", 0)) / n / 1e6, 3)
            for k in ("queue", "compute_input", "compute_infer", "compute_output")}  # fmt: skip


def run_triton(model_path: Path, quick: bool, work: Path) -> dict:
    from ..core.children import free_port
    from ..encoders.backends import EncoderOptions
    from ..encoders.onnxruntime import OnnxRuntimeEncoder
    from ..encoders.triton import TritonEncoder, model_name
    from ..serving.process import ServerProcess

    cores = os.cpu_count() or 1
    address = f"127.0.0.1:{free_port()}"
    with ServerProcess(model_path, address, work / "bench_serve.log", ["--backend", "onnxruntime"]) as srv:
        local = OnnxRuntimeEncoder(model_path)
        remote = {
            shm: TritonEncoder(model_path, EncoderOptions(triton_url=address, triton_shared_memory=shm))
            for shm in ("auto", "off")
        }
        try:
            x = _pixels(local.image_size)
            variants = [
                Variant("triton/local-onnxruntime", lambda: local.encode(x), group="triton", baseline=True),
                Variant("triton/shm", lambda: remote["auto"].encode(x), group="triton"),
                Variant("triton/grpc", lambda: remote["off"].encode(x), group="triton"),
            ]
            run_interleaved(variants, rounds=3 if quick else 6, iters=10 if quick else 30)
            records = summarise(variants)
            account = _server_account(srv.url, model_name(model_path))
            seconds = 3.0 if quick else 8.0
            clients = []
            for n in CLIENTS:
                threads = max(1, cores // n)
                locals_ = [local] if n == 1 else [OnnxRuntimeEncoder(model_path, threads=threads) for _ in range(n)]
                row = {"clients": n, "local": _concurrent(locals_, x, seconds)}
                for shm, label in (("auto", "shm"), ("off", "grpc")):
                    encs = [remote[shm]] + [
                        TritonEncoder(model_path, EncoderOptions(triton_url=address, triton_shared_memory=shm))
                        for _ in range(n - 1)
                    ]
                    row[label] = _concurrent(encs, x, seconds)
                    for e in encs[1:]:
                        e.close()
                clients.append(row)
            sizes = {
                "model_input": int(x.nbytes),
                "frame_1080p_rgb8": 1920 * 1080 * 3,
                "grpc_request": remote["off"].request_bytes(),
                "grpc_request_with_shm": remote["auto"].request_bytes(),
                "shared_memory": remote["auto"].status()["triton_shared_memory"],
            }
        finally:
            for e in remote.values():
                e.close()
    base = next(r for r in records if r["name"] == "triton/local-onnxruntime")
    shm = next(r for r in records if r["name"] == "triton/shm")
    grpc = next(r for r in records if r["name"] == "triton/grpc")
    return {
        "variants": records,
        "triton": {
            "model": local.model_id,
            "server": "openclaw-vision serve (PyTriton 0.7.0, tritonserver's Python backend, ONNX Runtime inside)",
            "added_p50_ms_shm": round(shm["p50_ms"] - base["p50_ms"], 2),
            "added_p50_ms_grpc": round(grpc["p50_ms"] - base["p50_ms"], 2),
            "server_ms_per_request": account,
            "clients": clients,
            "bytes_per_frame": sizes,
        },
    }
