#!/usr/bin/env python3
"""The prepared GPU check: run once on a lent NVIDIA machine (CuPy + PyTorch CUDA, no TensorRT).

    bash scripts/gpu_check.sh            # writes $OUT/gpu_check.json (or out/gpu_check.json)

Section "vision" (scripts/gpu_check_vision.py; runs first): the fused CUDA preprocessing kernel
against the CPU path on 1080p frames of every encoding, the GPU encoder's embeddings against ORT
FP32, 1080p latency per stage (H2D, kernel, encode, D2H) beside the CPU path, kernel time per
launch variant, and the TensorRT runner if TensorRT imports there (else it says so).

Section "vlm", each printed and saved:
1. the VLM decoder on CuPy gives NumPy's logits (tiny shape, prefill then decode through the
   paged cache; float32, max |difference|);
2. TinyLlama-1.1B shape on CuPy, float16 and float32 weights: prefill tokens/s (128 tokens) and
   decode tokens/s, beside transformers' LlamaForCausalLM on CUDA (float16), same weights and ids;
3. the decode roofline on this GPU: weight bytes per token ÷ measured device copy bandwidth.

`--dry-run` runs the same code with NumPy in place of CuPy at the tiny shape only (and the
kernel compiled for the CPU), so the script itself is tested on machines without a GPU
(test_gpu_check.py). The JSON is rewritten after each section: a run cut short keeps what it had.

The report records the machine it ran on (`measured_on`: CPU, GPU, driver, versions, date). Back in a
checkout, `scripts/gpu_check.py --publish gpu_check.json --docs gpu-check` turns it into the docs' figures
(bench/figures.py) under that machine's name: the lent machine has no checkout to publish into.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from openclaw_vision.vlm.config import get_llm_config
from openclaw_vision.vlm.decoder import LlamaDecoder, PagedKVCache
from openclaw_vision.vlm.weights import place, random_params


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.Stream.null.synchronize()


def logits_run(cfg, params, xp, dtype, ids: np.ndarray, split: int) -> list[np.ndarray]:
    """Prefill ids[:split], then decode the rest one by one; the logits of every step, on the host."""
    dec = LlamaDecoder(cfg, place(params, xp, dtype), xp, dtype)
    cache = PagedKVCache.for_tokens(cfg, len(ids) + 16, 16, xp, dtype)
    cache.manager.allocate("s", list(ids[:split]))
    out = [dec.forward(cache, "s", dec.embed(ids[:split]), 0)]
    for p in range(split, len(ids)):
        cache.manager.append("s", int(ids[p]))
        out.append(dec.forward(cache, "s", dec.embed(ids[p : p + 1]), p))
    return [o.get() if hasattr(o, "get") else np.asarray(o) for o in out]


def equality(xp) -> dict:
    cfg = get_llm_config("tiny")
    params = random_params(cfg, seed=0)
    ids = np.random.default_rng(0).integers(3, cfg.vocab_size, 40)
    ref = logits_run(cfg, params, np, np.float32, ids, 30)
    got = logits_run(cfg, params, xp, np.float32, ids, 30)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(ref, got, strict=True))
    return {"max_abs_logit_difference": diff, "passed": diff < 1e-3}


def speed(xp, shape: str, dtype, prompt: int, steps: int) -> dict:
    cfg = get_llm_config(shape)
    params = random_params(cfg, seed=0)
    dec = LlamaDecoder(cfg, place(params, xp, dtype), xp, dtype)
    cache = PagedKVCache.for_tokens(cfg, prompt + steps + 16, 16, xp, dtype)
    ids = np.random.default_rng(1).integers(3, cfg.vocab_size, prompt)
    best_prefill, best_decode = float("inf"), float("inf")
    for _ in range(3):
        cache.manager.allocate("s", [("k", i) for i in range(prompt)])
        _sync(xp)
        t0 = time.perf_counter()
        logits = dec.forward(cache, "s", dec.embed(ids), 0)
        _sync(xp)
        t1 = time.perf_counter()
        for p in range(prompt, prompt + steps):
            tok = int(logits.argmax())
            cache.manager.append("s", ("k", p))
            logits = dec.forward(cache, "s", dec.embed([tok]), p)
        _sync(xp)
        t2 = time.perf_counter()
        cache.manager.free("s")
        best_prefill, best_decode = min(best_prefill, t1 - t0), min(best_decode, t2 - t1)
    return {
        "shape": shape,
        "dtype": np.dtype(dtype).name,
        "prefill_tokens_per_s": round(prompt / best_prefill, 1),
        "decode_tokens_per_s": round(steps / best_decode, 2),
        "weight_bytes": cfg.param_count() * np.dtype(dtype).itemsize,
    }


def transformers_speed(shape: str, prompt: int, steps: int) -> dict:
    import torch
    import transformers

    from openclaw_vision.vlm.config import hf_config_dict

    cfg = get_llm_config(shape)
    conf = {k: v for k, v in hf_config_dict(cfg).items() if k not in ("architectures", "model_type")}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**conf)).to("cuda", torch.float16).eval()
    ids = torch.randint(3, cfg.vocab_size, (1, prompt), device="cuda")
    name = "cache" if "cache" in __import__("inspect").signature(model.forward).parameters else "past_key_values"
    best_prefill, best_decode = float("inf"), float("inf")
    with torch.inference_mode():
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            past, logits = getattr(out, name), out.logits[:, -1]
            for _ in range(steps):
                out = model(logits.argmax(-1, keepdim=True), use_cache=True, **{name: past})
                past, logits = getattr(out, name), out.logits[:, -1]
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            best_prefill, best_decode = min(best_prefill, t1 - t0), min(best_decode, t2 - t1)
    return {
        "prefill_tokens_per_s": round(prompt / best_prefill, 1),
        "decode_tokens_per_s": round(steps / best_decode, 2),
    }


def copy_bandwidth_gbs(xp, mb: int = 1024) -> float:
    a = xp.ones(mb * 1024 * 1024 // 4, xp.float32)
    b = xp.empty_like(a)
    best = float("inf")
    for _ in range(5):
        _sync(xp)
        t0 = time.perf_counter()
        b[...] = a
        _sync(xp)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best / 1e9


def gpu_line(xp) -> str | None:
    """The GPU as the figures' machine line names it (name, memory, driver's CUDA version, CuPy); None without one."""
    if xp is np:
        return None
    props = xp.cuda.runtime.getDeviceProperties(0)
    driver = xp.cuda.runtime.driverGetVersion()
    return (f"{props['name'].decode()} ({props['totalGlobalMem'] / 2**30:.0f} GiB; driver CUDA "
            f"{driver // 1000}.{driver % 1000 // 10}, CuPy {xp.__version__})")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="NumPy in place of CuPy, tiny shape only")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--sections", default="vision,vlm", help="comma-separated: vision, vlm")
    ap.add_argument("--vision-budget", type=float, default=240, help="seconds before optional vision parts are skipped")
    ap.add_argument("--publish", type=Path, default=None, metavar="JSON",
                    help="no check: publish a report this script wrote on a GPU machine as --docs NAME")  # fmt: skip
    ap.add_argument("--docs", default=None, metavar="NAME", help="with --publish: docs/figures/NAME.json and .md")
    args = ap.parse_args()
    if args.publish:
        if not args.docs:
            ap.error("--publish needs --docs NAME")
        print("published", *publish(args.publish, args.docs))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    from openclaw_vision.bench.figures import measured_on

    xp = np
    if not args.dry_run:
        import cupy as xp
    report: dict = {"measured_on": measured_on(gpu=gpu_line(xp))}
    passed = True

    def save() -> None:
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))

    sections = args.sections.split(",")
    if "vision" in sections:
        import gpu_check_vision

        report["vision"] = gpu_check_vision.run(args.dry_run, args.vision_budget)
        passed &= report["vision"]["passed"]
        save()
    if "vlm" in sections:
        report.update(vlm_check(args))
        passed &= report["equality"]["passed"]
        save()
    return 0 if passed else 1


def markdown(report: dict) -> str:
    """The report as the docs' tables: what a reader of docs/gpu.md needs, every number from the JSON."""
    out: list[str] = []
    v = report.get("vision")
    if v:
        k, e = v["kernel_vs_cpu_path"], v["gpu_encoder_vs_ort_fp32"]
        out += [f"Vision ({v['mode']}; check passed: {v['passed']}).", "",
                "| check | what | result |", "|---|---|---|",
                f"| fused kernel vs CPU path | {len(k['per_encoding'])} encodings at 1080p, padded rows; "
                f"{k['frames']} | max {k['max_levels']} levels apart; embeddings ({k['reference_model']}) cosine "
                f">= {k['min_cosine']} |",
                f"| GPU encoder vs ONNX Runtime FP32 | {e['backend']} backend, {e['precision']}, {e['model']}, "
                f"{e['frames']} frames, kernel vs CPU preprocessing | cosine min {e['min_cosine']}, mean "
                f"{e['mean_cosine']} |",
                f"| a batch vs each frame alone | FramePipeline, kernel into row k, one encode per batch | cosine "
                f">= {v['batches']['min_cosine_batch_vs_alone']} |",
                f"| TensorRT | {tensorrt_what(v['tensorrt'])} |", ""]  # fmt: skip
        lat = v["latency_1080p"]
        ms = lat["ms"]
        out += [f"One 1080p rgb8 frame, ms per stage ({lat['iters']} frames; GPU stages by CUDA events, walls by "
                f"the host clock; GPU: {lat['gpu_backend']}, CPU: {lat['cpu_backend']} on the same machine's CPU):",
                "", "| path | stage | P50 ms | P99 ms |", "|---|---|---|---|"]  # fmt: skip
        for path, stages in (("GPU", ("h2d", "kernel", "encode", "d2h", "gpu_wall")),
                             ("CPU", ("cpu_preprocess", "cpu_encode", "cpu_wall"))):  # fmt: skip
            out += [f"| {path} | {s} | {ms[s]['p50']} | {ms[s]['p99']} |" for s in stages if s in ms]
        out += ["", f"CPU wall over GPU wall, P50: {ms['ratio_cpu_over_gpu_wall_p50']}x; host-to-device copy "
                f"{ms['h2d_gbps_p50']} GB/s.", ""]  # fmt: skip
        b = v["batches"]["per_batch"]
        out += ["Frames per batch on the GPU (FramePipeline.run, host wall):", "",
                "| frames | wall ms P50 | per frame ms |", "|---|---|---|",
                *(f"| {n} | {r['wall_ms_p50']} | {r['per_frame_ms_p50']} |" for n, r in b.items()), ""]  # fmt: skip
        var = v["kernel_variants"].get("us_per_launch")
        if var:
            encs = list(dict.fromkeys(key.split("/")[0] for key in var))  # in the order measured
            rows = list(dict.fromkeys(key.split("/")[1] for key in var))
            out += [f"Kernel µs per launch, 1080p, fp16 out, by output rows per thread (default "
                    f"{v['kernel_variants']['default_rows_per_thread']}):", "",
                    "| encoding | " + " | ".join(rows) + " |", "|---|" + "---|" * len(rows),
                    *(f"| {enc} | " + " | ".join(str(var[f'{enc}/{r}']) for r in rows) + " |" for enc in encs),
                    ""]  # fmt: skip
    if "ours" in report:
        out += [f"VLM decoder ({report['array_module']}; logits against NumPy's: max difference "
                f"{report['equality']['max_abs_logit_difference']:.2g}):", "",
                "| decoder | shape | weights | prefill tokens/s | decode tokens/s |", "|---|---|---|---|---|",
                *(f"| ours | {o['shape']} | {o['dtype']} | {o['prefill_tokens_per_s']} | {o['decode_tokens_per_s']} |"
                  for o in report["ours"])]  # fmt: skip
        t = report.get("transformers_fp16")
        if t and "error" not in t:
            shape = report["ours"][0]["shape"]
            out.append(f"| transformers LlamaForCausalLM | {shape} | float16 | {t['prefill_tokens_per_s']} | "
                       f"{t['decode_tokens_per_s']} |")  # fmt: skip
        r = report["roofline"]
        out += ["", f"Decode roofline (weight bytes per token over the measured device copy, "
                f"{r['copy_bandwidth_gbs']} GB/s): {r['decode_roofline_tokens_per_s_fp16']} tokens/s at float16; "
                f"ours reached {r['fraction_fp16']:.1%} of it."]  # fmt: skip
    return "\n".join(out)


def tensorrt_what(t: dict) -> str:
    """The TensorRT row's "what | result" cells: its engine against ORT FP32, or why it did not run."""
    if "min_cosine_vs_ort_fp32" in t:
        return (f"TensorRT {t['version']}, {t['model']} ({t['typing']}), engine built in {t['engine_build_s']} s, "
                f"loaded in {t['engine_load_s']} s | cosine vs ORT FP32 >= {t['min_cosine_vs_ort_fp32']}, "
                f"{t['wall_ms_p50']} ms a frame P50")  # fmt: skip
    return f"| {t.get('reason') or t.get('skipped') or t.get('error')}"


def publish(report_path: Path, name: str, folder: Path | None = None) -> tuple[Path, Path]:
    """A report of this script as docs figures, under the machine that measured it (its `measured_on`)."""
    from openclaw_vision.bench import figures

    report = json.loads(report_path.read_text())
    return figures.publish(name, report, markdown(report), "bash scripts/gpu_check.sh", folder or figures.FOLDER,
                           measured=report["measured_on"])  # fmt: skip


def vlm_check(args: argparse.Namespace) -> dict:
    if args.dry_run:
        xp, shape, prompt, steps = np, "tiny", 32, 8
    else:
        import cupy as xp

        shape, prompt, steps = "tinyllama-1.1b", 128, 32
    result: dict = {"array_module": xp.__name__, "equality": equality(xp)}
    print("cupy vs numpy logits:", result["equality"], flush=True)
    result["ours"] = [speed(xp, shape, dt, prompt, steps) for dt in (np.float16, np.float32)]
    for r in result["ours"]:
        print("ours:", r, flush=True)
    bw = copy_bandwidth_gbs(xp, 64 if args.dry_run else 1024)
    fp16 = result["ours"][0]
    result["roofline"] = {
        "copy_bandwidth_gbs": round(bw, 1),
        "decode_roofline_tokens_per_s_fp16": round(bw * 1e9 / fp16["weight_bytes"], 1),
        "fraction_fp16": round(fp16["decode_tokens_per_s"] * fp16["weight_bytes"] / (bw * 1e9), 3),
    }
    print("roofline:", result["roofline"], flush=True)
    if not args.dry_run:
        try:
            result["transformers_fp16"] = transformers_speed(shape, prompt, steps)
            print("transformers fp16:", result["transformers_fp16"], flush=True)
        except Exception as err:  # report, keep the rest of the results
            result["transformers_fp16"] = {"error": repr(err)}
    return result


if __name__ == "__main__":
    sys.exit(main())
