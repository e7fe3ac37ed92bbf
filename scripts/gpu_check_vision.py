"""The vision half of the prepared GPU check: the fused preprocessing kernel and the GPU encoders.

Run by scripts/gpu_check.py (section "vision"); on a lent NVIDIA machine it measures what the
gpu_static tests cannot:

1. kernel: the CUDA kernel (CuPy, NVRTC at run time) against the CPU path on a 1080p frame of
   every encoding: max/mean difference in uint8 levels, embedding cosine (ViT-B/32, ORT FP32);
   fp16 output against fp32; kernel time per ROWS_PER_THREAD variant (CUDA events).
2. encoders: the torch CUDA FP16 encoder fed by the kernel, against ORT FP32 on the CPU path
   (cosine per frame); TensorRT the same way if `tensorrt` imports (it says why not otherwise).
3. latency: 1080p rgb8 per stage, P50/P99 over many frames — H2D of the raw bytes, kernel,
   encode, D2H (CUDA events on the one stream) and the wall time per frame — beside the CPU
   path (OpenCV preprocessing + ORT FP32 on every core), measured in the same run.
4. batches (the multi-camera node's path): FramePipeline with the GPU encoder's own
   preprocessor, frame k of a batch written by the kernel into row k of the input buffer (one
   launch per frame), one encode per batch of 1, 2, 4, 8 frames: cosine of each batch row
   against that frame alone, and wall time per batch and per frame at each size.

`--dry-run` runs the same functions with the kernel built for the CPU by g++ (shim.h), the
torch encoder on the CPU and host timers, so the script itself is tested without a GPU.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from openclaw_vision.preprocess import kernel_plan
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.frame import Frame
from openclaw_vision.preprocess.sample_frames import cpu_reference, every_encoding, pack, with_pitch
from openclaw_vision.preprocess.spec import PreprocessSpec
from openclaw_vision.runtime.stats import percentiles

SPEC = PreprocessSpec()


# --- dry-run stand-ins ------------------------------------------------------------------------


class ShimKernel:
    """CudaPreprocessor's upload/launch with the kernel compiled for the CPU (g++ through shim.h)."""

    name = "shim"

    def __init__(self, half: bool, rows_per_thread: int, build_dir: Path) -> None:
        from openclaw_vision.preprocess.cuda import shim

        self.shim, self.half = shim, half
        self.exe = shim.build(build_dir, rows_per_thread, sanitize=False, opt="-O2")
        self.rows_per_thread = rows_per_thread

    def upload(self, data, height, width, step, encoding):
        job = kernel_plan.plan_job(height, width, step, encoding, SPEC, len(data), self.rows_per_thread)
        return job, np.asarray(data)

    def __call__(self, frame, out=None):
        """CudaPreprocessor.__call__: a Frame's bytes in place, with their row step."""
        from openclaw_vision.preprocess.gpu import raw_bytes

        data, step = raw_bytes(frame)
        return self.launch(self.upload(data, frame.height, frame.width, step, frame.encoding), frame.big_endian, out)

    def launch(self, plan, big_endian=False, out=None):
        job, raw = plan
        res = self.shim.preprocess(self.exe, job, raw, big_endian, self.half)
        if out is not None:
            out[...] = res
            return out
        return res


class HostDevice:
    """CudaDevice's interface on host memory (dry run)."""

    name, compute_capability, stream_handle = "host (dry run)", "0.0", 0

    def empty(self, shape, dtype):
        return np.zeros(shape, dtype)

    pinned = empty

    def upload(self, dst, host):
        dst[...] = host

    def copy(self, dst, src):
        dst[...] = src

    def download(self, src, host):
        host[...] = src

    def synchronize(self):
        pass


class HostClock:
    def __init__(self, stream=None) -> None:
        self.t = 0.0

    def record(self) -> float:
        return time.perf_counter()

    def ms(self, a, b) -> float:
        return (b - a) * 1e3


class CudaClock:
    """CUDA events on one stream: what the GPU spent between two points of the queue."""

    def __init__(self, stream) -> None:
        import cupy

        self.cp, self.stream = cupy, stream

    def record(self):
        e = self.cp.cuda.Event()
        e.record(self.stream)
        return e

    def ms(self, a, b) -> float:
        b.synchronize()
        return float(self.cp.cuda.get_elapsed_time(a, b))


# --- inputs -------------------------------------------------------------------------------------


def frames_1080(n: int) -> tuple[list[np.ndarray], str]:
    """n camera-like 1080p frames: the photographs' pan if scikit-image's data is there, else a synthetic scene."""
    try:
        from openclaw_vision.preprocess.sample_frames import pan_frames

        return [np.ascontiguousarray(f) for f in pan_frames(n)], "photographs (sample_frames.pan_frames)"
    except Exception as err:  # e.g. an image of skimage.data that would have to be downloaded
        rng = np.random.default_rng(0)
        yy, xx = np.mgrid[0:1080, 0:1920].astype(np.float32)
        out = []
        for i in range(n):
            base = np.stack([np.sin(xx / (37 + i)) + np.cos(yy / 23), np.sin((xx + yy) / 51), np.cos(xx / 17 - i)], -1)
            img = (base - base.min()) / np.ptp(base) * 200 + rng.normal(0, 12, base.shape)
            out.append(np.clip(img, 0, 255).astype(np.uint8))
        return out, f"synthetic ({err!r})"


def export_models(dry: bool, workdir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The towers the checks run (exported here: no model files travel), and the errors of any that failed."""
    from openclaw_vision.models.export import export_model

    models, errors = {}, {}
    for n in ["tiny"] if dry else ["tiny", "ViT-B-32"]:
        try:
            models[n] = export_model(n, workdir / f"{n}.fp32.onnx").path
        except Exception as err:  # e.g. this machine's torch cannot export: the kernel checks still run
            errors[n] = repr(err)
    return models, errors


def ort_encoder(path: Path):
    from openclaw_vision.encoders.onnxruntime import OnnxRuntimeEncoder

    return OnnxRuntimeEncoder(path, threads=os.cpu_count() or 1)


def levels(t: np.ndarray) -> np.ndarray:
    scale, shift = SPEC.scale_shift()
    return (t.astype(np.float64) - shift[:, None, None]) / scale[:, None, None]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


# --- the checks ------------------------------------------------------------------------------------


def make_kernel(dry: bool, half: bool, rows_per_thread: int, build_dir: Path, stream=None):
    if dry:
        return ShimKernel(half, rows_per_thread, build_dir)
    from openclaw_vision.preprocess.gpu import CudaPreprocessor

    return CudaPreprocessor(SPEC, half=half, stream=stream, rows_per_thread=rows_per_thread)


def to_host(kernel, x) -> np.ndarray:
    """The kernel's output on the host, once the kernel's stream has finished it."""
    stream = getattr(kernel, "stream", None)
    if stream is not None:
        stream.synchronize()
    return x.get() if hasattr(x, "get") else np.asarray(x)


def check_kernel(dry: bool, reference_model: Path | None, build_dir: Path) -> dict:
    """Every encoding at 1080p (padded pitch): kernel vs CPU path, in levels and in embedding cosine."""
    encs = every_encoding()
    frames, source = frames_1080(len(encs))
    k32 = make_kernel(dry, False, kernel_plan.ROWS_PER_THREAD, build_dir)
    k16 = make_kernel(dry, True, kernel_plan.ROWS_PER_THREAD, build_dir)
    rng = np.random.default_rng(0)
    ours, refs, half_err = [], [], []
    for enc, rgb in zip(encs, frames, strict=True):
        rows, big = pack(rgb, enc, rng)
        raw, step = with_pitch(rows, 7)
        out = to_host(k32, k32.launch(k32.upload(raw, 1080, 1920, step, enc), big))
        out16 = to_host(k16, k16.launch(k16.upload(raw, 1080, 1920, step, enc), big)).astype(np.float32)
        ours.append(out)
        refs.append(cpu_reference(raw, 1080, 1920, step, enc, big, SPEC))
        half_err.append(float(np.abs(out16 - out).max()))
    if reference_model is not None:
        enc_model = ort_encoder(reference_model)
        cos = cosine(enc_model.encode(np.stack(ours)).vectors, enc_model.encode(np.stack(refs)).vectors)
    else:  # no model could be exported: the pixel comparison alone
        cos = np.ones(len(encs))
    per = {}
    for i, enc in enumerate(encs):
        d = np.abs(levels(ours[i]) - levels(refs[i]))
        per[enc] = {"max_levels": round(float(d.max()), 3), "mean_levels": round(float(d.mean()), 4),
                    "cosine": round(float(cos[i]), 7), "fp16_vs_fp32_max_abs": round(half_err[i], 5)}  # fmt: skip
    worst = max(v["max_levels"] for v in per.values())
    return {
        "frames": source,
        "reference_model": reference_model.name if reference_model else None,
        "per_encoding": per,
        "max_levels": worst,
        "min_cosine": round(float(cos.min()), 7),
        "passed": bool(worst <= 3 and cos.min() >= 0.9999),
    }


def gpu_encoder(dry: bool, model: Path, stream_device=None):
    from openclaw_vision.encoders.torch_cuda import TorchCudaEncoder

    return TorchCudaEncoder(model, device=HostDevice() if dry else stream_device, max_batch=1)


def check_encoder(dry: bool, model: Path, build_dir: Path, n: int = 12) -> dict:
    """The torch encoder fed by the kernel (its own input buffer) vs ORT FP32 fed by the CPU path."""
    from openclaw_vision.encoders.gpu_common import CudaDevice

    dev = None if dry else CudaDevice()
    enc = gpu_encoder(dry, model, dev)
    half = np.dtype(enc.input.dtype) == np.float16
    k = make_kernel(dry, half, kernel_plan.ROWS_PER_THREAD, build_dir, None if dry else dev.stream)
    frames, _ = frames_1080(n)
    ort = ort_encoder(model)
    gpu, cpu = [], []
    for rgb in frames:
        k.launch(k.upload(rgb.reshape(-1), 1080, 1920, 1920 * 3, "rgb8"), out=enc.input[0])
        gpu.append(enc.encode(enc.input[0][None]).vectors[0])
        cpu.append(ort.encode(CpuPreprocessor(SPEC)(Frame.from_rgb(rgb))[None]).vectors[0])
    cos = cosine(np.stack(gpu), np.stack(cpu))
    return {"backend": enc.backend, "precision": enc.precision, "model": model.name, "frames": n,
            "min_cosine": round(float(cos.min()), 6), "mean_cosine": round(float(cos.mean()), 6)}  # fmt: skip


def stage_latency(dry: bool, model: Path, build_dir: Path, iters: int, warmup: int = 10) -> dict:
    """1080p rgb8 per frame: H2D, kernel, encode, D2H (and wall) on the GPU; preprocess and encode on the CPU."""
    from openclaw_vision.encoders.gpu_common import CudaDevice

    dev = None if dry else CudaDevice()
    enc = gpu_encoder(dry, model, dev)
    half = np.dtype(enc.input.dtype) == np.float16
    k = make_kernel(dry, half, kernel_plan.ROWS_PER_THREAD, build_dir, None if dry else dev.stream)
    clock = HostClock() if dry else CudaClock(dev.stream)
    device = enc.device
    rgb = frames_1080(1)[0][0]
    raw = rgb.reshape(-1)
    stages: dict[str, list[float]] = {"h2d": [], "kernel": [], "encode": [], "d2h": [], "gpu_wall": []}
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        e0 = clock.record()
        plan = k.upload(raw, 1080, 1920, 1920 * 3, "rgb8")
        e1 = clock.record()
        k.launch(plan, out=enc.input[0])
        e2 = clock.record()
        enc.enqueue(1)
        e3 = clock.record()
        device.download(enc.output[:1], enc.host_output[:1])
        e4 = clock.record()
        device.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            for name, (a, b) in zip(
                ("h2d", "kernel", "encode", "d2h"), ((e0, e1), (e1, e2), (e2, e3), (e3, e4)), strict=True
            ):
                stages[name].append(clock.ms(a, b))
            stages["gpu_wall"].append(wall)
    ort = ort_encoder(model)
    pre = CpuPreprocessor(SPEC)
    frame = Frame.from_rgb(rgb)
    # the CPU's stages by names of their own: a CPU "encode" would overwrite the GPU's in the summary below
    cpu: dict[str, list[float]] = {"cpu_preprocess": [], "cpu_encode": [], "cpu_wall": []}
    for i in range(max(iters // 4, 5) + 3):
        t0 = time.perf_counter()
        x = pre(frame)[None]
        t1 = time.perf_counter()
        ort.encode(x)
        t2 = time.perf_counter()
        if i >= 3:
            cpu["cpu_preprocess"].append((t1 - t0) * 1e3)
            cpu["cpu_encode"].append((t2 - t1) * 1e3)
            cpu["cpu_wall"].append((t2 - t0) * 1e3)
    summary = {k2: {q: round(v, 4) for q, v in percentiles(vals, (50, 99)).items() if q != "n"} for k2, vals in
               {**stages, **cpu}.items()}  # fmt: skip
    summary["ratio_cpu_over_gpu_wall_p50"] = round(
        summary["cpu_wall"]["p50"] / max(summary["gpu_wall"]["p50"], 1e-9), 2
    )
    summary["h2d_gbps_p50"] = (
        round(raw.nbytes / (summary["h2d"]["p50"] * 1e-3) / 1e9, 2) if summary["h2d"]["p50"] else 0
    )
    return {"model": model.name, "gpu_backend": enc.backend, "cpu_backend": f"onnxruntime fp32, {ort.threads} threads",
            "iters": iters, "ms": summary}  # fmt: skip


def kernel_variants(dry: bool, build_dir: Path, iters: int) -> dict:
    """Kernel time (CUDA events, fp16 out) per rows-per-thread variant and encoding, 1080p."""
    if dry:
        return {"skipped": "dry run: no GPU timing"}
    import cupy

    out = {}
    rgb = frames_1080(1)[0][0]
    for enc in ("rgb8", "yuyv", "bayer_rggb8", "nv12"):
        rows, big = pack(rgb, enc, np.random.default_rng(0))
        raw, step = with_pitch(rows, 0)
        for r in (1, 2, 4, 8):
            k = make_kernel(False, True, r, build_dir)
            plan = k.upload(raw, 1080, 1920, step, enc)
            dst = k.output()
            clock = CudaClock(k.stream)
            for _ in range(5):
                k.launch(plan, big, dst)
            a = clock.record()
            for _ in range(iters):
                k.launch(plan, big, dst)
            b = clock.record()
            out[f"{enc}/rows{r}"] = round(clock.ms(a, b) / iters * 1e3, 2)  # microseconds per launch
            cupy.cuda.runtime.deviceSynchronize()
    return {"us_per_launch": out, "default_rows_per_thread": kernel_plan.ROWS_PER_THREAD}


def check_batches(dry: bool, model: Path, build_dir: Path, sizes: tuple[int, ...], iters: int) -> dict:
    """Batches of 1080p frames through FramePipeline on the GPU encoder (kernel into row k, one encode)."""
    from openclaw_vision.encoders.gpu_common import BoundPreprocessor, CudaDevice
    from openclaw_vision.encoders.torch_cuda import TorchCudaEncoder
    from openclaw_vision.runtime.pipeline import FramePipeline

    dev = None if dry else CudaDevice()
    enc = TorchCudaEncoder(model, device=HostDevice() if dry else dev, max_batch=max(sizes))
    half = np.dtype(enc.input.dtype) == np.float16
    kernel = make_kernel(dry, half, kernel_plan.ROWS_PER_THREAD, build_dir, None if dry else dev.stream)
    pipe = FramePipeline(enc, preprocessor=BoundPreprocessor(kernel, enc.input))
    frames = [Frame.from_rgb(f) for f in frames_1080(max(sizes))[0]]
    alone = np.stack([pipe.encode(f).vectors[0] for f in frames])
    res: dict[str, Any] = {"backend": enc.backend, "launches": "one per frame", "per_batch": {}}
    worst = 1.0
    for n in sizes:
        worst = min(worst, float(cosine(pipe.run(frames[:n]).vectors, alone[:n]).min()))
        walls = []
        for _ in range(iters + 2):
            t0 = time.perf_counter()
            pipe.run(frames[:n])  # ends with the D2H copy and a stream sync: the wall time is the batch's
            walls.append((time.perf_counter() - t0) * 1e3)
        wall = float(np.median(walls[2:] or walls))
        res["per_batch"][str(n)] = {"wall_ms_p50": round(wall, 3), "per_frame_ms_p50": round(wall / n, 3)}
    res["min_cosine_batch_vs_alone"] = round(worst, 6)
    one = res["per_batch"][str(sizes[0])]["per_frame_ms_p50"]
    res["per_frame_speedup_at_largest"] = round(
        one / max(res["per_batch"][str(sizes[-1])]["per_frame_ms_p50"], 1e-9), 2
    )
    return res


def check_tensorrt(dry: bool, models: dict[str, Path], workdir: Path, build_dir: Path, budget_s: float) -> dict:
    from openclaw_vision.encoders import tensorrt as trtmod

    if trtmod.trt is None:
        return {"available": False, "reason": "TensorRT is not importable here (no `tensorrt` module)"}
    if budget_s < 120:
        return {"available": True, "skipped": f"only {budget_s:.0f} s left of the check's budget"}
    from openclaw_vision.build_tools.first_use import ensure_int8

    res: dict[str, Any] = {"available": True, "version": str(trtmod.trt.__version__)}
    name = "ViT-B-32" if "ViT-B-32" in models else "tiny"
    t0 = time.perf_counter()
    int8 = ensure_int8(name, fp32_path=models[name])
    res["quantize_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    enc = trtmod.TensorRTEncoder(int8, cache=trtmod.EngineCache(workdir / "engines"))
    res["engine_build_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    trtmod.TensorRTEncoder(int8, cache=trtmod.EngineCache(workdir / "engines"), allow_build=False)
    res["engine_load_s"] = round(time.perf_counter() - t0, 2)
    half = np.dtype(enc.input.dtype) == np.float16
    k = make_kernel(dry, half, kernel_plan.ROWS_PER_THREAD, build_dir, enc.device.stream)
    frames, _ = frames_1080(8)
    ort = ort_encoder(models[name])
    gpu, cpu, walls = [], [], []
    for rgb in frames:
        t0 = time.perf_counter()
        k.launch(k.upload(rgb.reshape(-1), 1080, 1920, 1920 * 3, "rgb8"), out=enc.input[0])
        gpu.append(enc.encode(enc.input[0][None]).vectors[0])
        walls.append((time.perf_counter() - t0) * 1e3)
        cpu.append(ort.encode(CpuPreprocessor(SPEC)(Frame.from_rgb(rgb))[None]).vectors[0])
    cos = cosine(np.stack(gpu), np.stack(cpu))
    res.update({"model": int8.name, "typing": enc.options.typing, "min_cosine_vs_ort_fp32": round(float(cos.min()), 6),
                "wall_ms_p50": round(float(np.median(walls[2:])), 3)})  # fmt: skip
    return res


def run(dry: bool, budget_s: float = 300) -> dict:
    """All vision checks; each section's failure is recorded, the others still run."""
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="ocv_gpu_check_"))
    os.environ.setdefault("OPENCLAW_VISION_HOME", str(workdir / "home"))
    result: dict[str, Any] = {"mode": "dry-run (g++ shim, torch on the CPU)" if dry else "gpu"}
    models, errors = export_models(dry, workdir)
    if errors:
        result["export_errors"] = errors
    ref = models.get("ViT-B-32", models.get("tiny"))
    build_dir = workdir / "shim"
    sections = [
        ("kernel_vs_cpu_path", lambda: check_kernel(dry, ref, build_dir)),
        ("gpu_encoder_vs_ort_fp32", lambda: check_encoder(dry, ref, build_dir, n=4 if dry else 12)),
        ("latency_1080p", lambda: stage_latency(dry, ref, build_dir, iters=6 if dry else 300)),
        ("kernel_variants", lambda: kernel_variants(dry, build_dir, iters=200)),
        ("batches", lambda: check_batches(dry, ref, build_dir, (1, 2, 4) if dry else (1, 2, 4, 8), 1 if dry else 50)),
        ("tensorrt", lambda: check_tensorrt(dry, models, workdir, build_dir, budget_s - (time.perf_counter() - start))),
    ]
    for name, fn in sections:
        t0 = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as err:  # keep the other sections' numbers
            import traceback

            result[name] = {"error": repr(err), "traceback": traceback.format_exc()[-3000:]}
        result[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"vision/{name}:", {k: v for k, v in result[name].items() if k not in ("per_encoding", "traceback")},
              flush=True)  # fmt: skip
    result["passed"] = bool(
        result["kernel_vs_cpu_path"].get("passed")
        and result["gpu_encoder_vs_ort_fp32"].get("min_cosine", 0) >= (0.9999 if dry else 0.999)
        and "error" not in result["latency_1080p"]
        and result["batches"].get("min_cosine_batch_vs_alone", 0) >= (0.99999 if dry else 0.999)
        and "error" not in result["tensorrt"]
    )
    return result
