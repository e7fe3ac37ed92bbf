"""`openclaw-vision ladder`: what each CLIP tower costs on this machine, from ViT-B/32 to ViT-bigG-14.

For each model, one after the other, every step in a fresh child process (so each peak RSS is
that step's own and nothing of one model stays in memory for the next):

1. export (`openclaw-vision export --force`): wall time and peak RSS (the largest phase peak);
2. quantise (`openclaw-vision quantize --calib BAG`): wall time, peak RSS per phase, FP32 and
   INT8 file sizes, session memory FP32 vs INT8 (fresh processes), the gate's numbers;
3. latency: one 1080p camera frame → preprocessing → embedding, FP32 and INT8 sessions side by
   side in one process, interleaved rounds; P50/P99 per precision and their ratio;
4. the `--output-dim` column (default 512; 0: none): `openclaw-vision export --output-dim 512 --calib BAG`,
   the projection's gate vs full width (retained variance, NN and zero-shot agreement); a tower already
   that wide says so (no projection: the same model).

Before a model's steps the ladder checks that the machine has the memory they need free
(MemAvailable ≥ the FP32 weights × 1.3 + 2 GB) and skips the model with the reason if not.
Each model's record is saved as soon as it is done (`<out>/<model>.json`; `--reuse` keeps
them), and `ladder.md` / `ladder.json` are rewritten after every model. Timings depend on
the other load on the machine: the load average before and after each step is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..core import children, cpu
from ..core.commands import Command

LADDER = ("ViT-B-32", "ViT-L-14", "ViT-H-14", "ViT-bigG-14")
#: Seconds each precision may spend in the latency step (at least MIN_SAMPLES frames each).
LATENCY_BUDGET_S = 120.0
MIN_SAMPLES, MAX_SAMPLES = 8, 60
#: the longest a step may take: ViT-bigG-14's quantisation on 2 cores took ~20 min; one that hangs is stopped
STEP_TIMEOUT_S = 4 * 3600.0


def _mem_available_mb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return float("inf")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _child(args: list[str], log: Path) -> tuple[float, str]:
    """Run `openclaw-vision ARGS` in a fresh interpreter, stderr to `log`; (seconds, stdout). Raises with
    the log's tail on failure (a step killed by the kernel's OOM killer says so: 'killed by SIGKILL')."""
    done = children.run(children.cli(*args), timeout=STEP_TIMEOUT_S, stderr_path=log)
    if not done.ok:
        raise RuntimeError(f"`openclaw-vision {' '.join(args)}` {done.how}:\n{done.stdout}\n{done.stderr[-2000:]}")
    return round(done.seconds, 1), done.stdout


def _export(model: str, out: Path) -> dict:
    from ..core.resources import default_model_path

    before = _load()
    seconds, stdout = _child(["export", "--model", model, "--force", "--json"], out / f"{model}.export.log")
    res = json.loads(stdout.strip().splitlines()[-1])
    return {
        "seconds": seconds,
        "peak_rss_mb": max(p["peak_rss_mb"] for p in res["phases"]),
        "phases": res["phases"],
        "check_images": res["check_images"],
        "min_cosine": res["min_cosine"],
        "files": res["files"],
        "path": str(default_model_path(model, "fp32")),
        "load_before": before,
        "load_after": _load(),
    }


def _quantize(model: str, calib: Path, out: Path) -> dict:
    before = _load()
    report = out / f"{model}.quant"
    seconds, _ = _child(
        ["quantize", "--model", model, "--calib", str(calib), "--report", str(report)], out / f"{model}.quant.log"
    )
    from ..quant.pipeline import QuantResult

    r = QuantResult.load(report / "report.json")
    w = r.worst
    return {
        "seconds": seconds,
        "peak_rss_mb": r.peak_rss_mb,
        "phases": r.phases,
        "passed": r.passed,
        "gate": {
            "mean_cosine": w.mean_cosine,
            "min_cosine": w.min_cosine,
            "nn_agreement": w.nn_agreement,
            "kl": w.kl,
            "zero_shot_top1": w.zero_shot_top1,  # the text tower `quantize --model` exports
        },
        "kept_float": len(r.kept_float),
        "layers": r.layers,
        "frames": {
            "calibration": r.sections["calibration"]["frames"],
            "heldout": r.sections["calibration"]["heldout_frames"],
        },
        "size_mb": r.size_mb,
        "memory": r.sections["memory"],
        "ranking": r.sections["ranking"],
        "int8_path": r.int8_model,
        "report": str(report / "report.md"),
        "load_before": before,
        "load_after": _load(),
    }


def measure_latency(fp32: Path, int8: Path, frames_bag: Path, budget_s: float = LATENCY_BUDGET_S) -> dict:
    """One 1080p frame → preprocess → encode, FP32 vs INT8 interleaved in this process (P50/P99 ms)."""
    from ..encoders.onnxruntime import OnnxRuntimeEncoder
    from ..quant.data import load_frames
    from ..runtime.pipeline import FramePipeline
    from .harness import Variant, first_call_s, run_interleaved, summarise

    frames = load_frames(frames_bag, spread=8)
    encoders = {k: FramePipeline(OnnxRuntimeEncoder(p)) for k, p in (("fp32", fp32), ("int8", int8))}
    it = {"i": 0}

    def one_frame(pipeline):
        it["i"] = (it["i"] + 1) % len(frames)
        return pipeline.encode(frames[it["i"]])

    variants = [Variant(f"1080p-frame/{k}", lambda e=e: one_frame(e), group="enc") for k, e in encoders.items()]
    variants[0].baseline = True
    n = int(np.clip(budget_s / max(first_call_s(variants).values()), MIN_SAMPLES, MAX_SAMPLES))
    rounds = min(4, n)
    run_interleaved(variants, rounds, max(1, n // rounds), warmup=1)
    recs = {r["name"].split("/")[1]: r for r in summarise(variants)}
    return {
        **{k: {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "n": r["n"]} for k, r in recs.items()},
        "int8_speedup_p50": recs["int8"].get("speedup_vs_baseline"),
        "frame": f"{frames[0].width}x{frames[0].height} {frames[0].encoding}",
    }


def _latency(model: str, fp32: Path, int8: Path, calib: Path, out: Path) -> dict:
    before = _load()
    _, stdout = _child(
        ["ladder", "--latency-only", str(fp32), str(int8), "--calib", str(calib)], out / f"{model}.latency.log"
    )
    return {**json.loads(stdout.strip().splitlines()[-1]), "load_before": before, "load_after": _load()}


def _projection(model: str, output_dim: int, calib: Path, out: Path) -> dict:
    """The `output_dim` projection's gate figures (build.ensure_projected, in a child like every step)."""
    from ..models.configs import get_config

    width = get_config(model).embed_dim
    if width <= output_dim:  # equal: the same model; narrower: nothing a projection could give
        return {"output_dim": output_dim, "none": f"none: the tower is {width}-d"}
    before = _load()
    args = ["export", "--model", model, "--output-dim", str(output_dim), "--calib", str(calib), "--force", "--json"]
    try:
        seconds, stdout = _child(args, out / f"{model}.projection.log")
    except RuntimeError as err:  # a projection below its gate fails its export: the column says so
        return {"output_dim": output_dim, "error": str(err).splitlines()[0]}
    res = json.loads(stdout.strip().splitlines()[-1])
    keep = ("model_id", "full_dim", "output_dim", "metrics", "passed", "heldout_frames", "alternatives")
    return {**{k: res[k] for k in keep}, "seconds": seconds, "load_before": before, "load_after": _load()}


def run_model(model: str, calib: Path, out: Path, output_dim: int = 512) -> dict:
    from ..models.configs import get_config

    cfg = get_config(model)
    params = _params(cfg)
    need_mb = params * 4 / 1e6 * 1.3 + 2000
    free_mb = _mem_available_mb()
    rec: dict = {"model": model, "params_m": round(params / 1e6, 1), "gflops": round(cfg.flops_per_image() / 1e9, 1)}
    if free_mb < need_mb:
        rec["skipped"] = f"needs ~{need_mb / 1e3:.1f} GB free, {free_mb / 1e3:.1f} GB available"
        return rec
    rec["export"] = _export(model, out)
    rec["quantize"] = _quantize(model, calib, out)
    if rec["quantize"]["passed"]:
        rec["latency"] = _latency(model, Path(rec["export"]["path"]), Path(rec["quantize"]["int8_path"]), calib, out)
    if output_dim:
        rec["projection"] = _projection(model, output_dim, calib, out)
    return rec


def _projection_cell(r: dict) -> str:
    """'99.9% / 100% / 100% pass' (retained variance / NN / zero-shot vs full width), or why there is none."""
    p = r.get("projection")
    if not p:
        return "—"
    if "none" in p or "error" in p:
        return p.get("none") or p["error"]
    m = p["metrics"]
    zs = f"{m['zero_shot_top1']:.0%}" if "zero_shot_top1" in m else "—"
    return f"{m['retained_variance']:.1%} / {m['nn_agreement']:.0%} / {zs} {'pass' if p['passed'] else 'FAIL'}"


def _params(cfg) -> int:
    w, t, p = cfg.width, cfg.tokens, cfg.patch_size
    block = 4 * w * w + 4 * w + 2 * w * cfg.mlp_dim + cfg.mlp_dim + w + 4 * w
    return 3 * p * p * w + w + t * w + 4 * w + cfg.layers * block + w * cfg.embed_dim


def markdown(result: dict) -> str:
    h = result["host"]
    lines = [
        "# Model ladder: CLIP vision towers on this machine",
        "",
        f"Host: {h['cpu']}, {h['cores']} cores, {h['memory_gb']} GB RAM, AVX-512 VNNI: {h['vnni']}. "
        f"ONNX Runtime {result['versions'].get('onnxruntime')}. Command: `{result['command']}` "
        f"({result['seconds']} s). Weights are random-init (no download): the gate numbers describe these "
        "towers, not real CLIP.",
        "",
        "| model | params | GFLOP/img | export s | export peak RSS GB (× FP32 weights) | FP32 MB | INT8 MB "
        "| session MB FP32 → INT8: peak (load + 1 run); steady | quantize s / peak GB "
        "| INT8 gate: mean cos / min cos / NN | kept float "
        "| 1080p P50 ms FP32 / INT8 | 1080p P99 ms FP32 / INT8 | INT8 speed-up (P50) "
        "| --output-dim projection (512) vs full width: retained variance / NN / zero-shot |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["models"]:
        if "skipped" in r or "error" in r:
            lines.append(f"| {r['model']} | {r['params_m']} M | {r['gflops']} | {r.get('skipped') or r['error']} |")
            continue
        e, q, lat = r["export"], r["quantize"], r.get("latency") or {}
        fp32_mb, int8_mb = q["size_mb"]["fp32"], q["size_mb"]["int8"]
        mem = q["memory"] or {}
        sess = (
            f"{_change(mem['fp32']['session_mb'], mem['int8']['session_mb'])}; "
            f"{_change(mem['fp32']['steady_mb'], mem['int8']['steady_mb'])}"
            if mem
            else "—"
        )
        g = q["gate"]
        lines.append(
            f"| {r['model']} | {r['params_m']} M | {r['gflops']} | {e['seconds']} "
            f"| {e['peak_rss_mb'] / 1e3:.2f} ({e['peak_rss_mb'] / fp32_mb:.2f}×) | {fp32_mb:.0f} | {int8_mb:.0f} "
            f"| {sess} | {q['seconds']} / {q['peak_rss_mb'] / 1e3:.2f} "
            f"| {g['mean_cosine']:.5f} / {g['min_cosine']:.5f} / {g['nn_agreement']:.0%} "
            f"{'pass' if q['passed'] else 'FAIL'} | {q['kept_float']}/{q['layers']} "
            f"| {_pair(lat, 'p50_ms')} | {_pair(lat, 'p99_ms')} | {lat.get('int8_speedup_p50', '—')}× "
            f"| {_projection_cell(r)} |"
        )
    lines += [
        "",
        "Load average (1 min) before → after each step, as the timings were taken:",
        "",
    ]
    for r in result["models"]:
        if "export" in r:
            steps = [("export", r["export"]), ("quantize", r["quantize"]), ("latency", r.get("latency"))]
            lines.append(
                f"- {r['model']}: "
                + ", ".join(f"{k} {v['load_before']} → {v['load_after']}" for k, v in steps if v)
                + f"; gate on {r['quantize']['frames']['heldout']} held-out frames per resolution"
                f" (1080p/720p/480p), {r['quantize']['frames']['calibration']} calibration frames,"
                f" ranking by {r['quantize']['ranking']}"
            )
    for r in result["models"]:
        if "export" not in r:
            continue
        e, q = r["export"], r["quantize"]
        lines += [
            "",
            f"### {r['model']}: time and peak RSS per phase",
            "",
            f"Export {e['seconds']} s (ONNX vs PyTorch checked on {e['check_images']} images, min cosine"
            f" {e['min_cosine']:.6f}); quantisation {q['seconds']} s, report: `{q['report']}`.",
            "",
            "| step | phase | seconds | peak RSS GB |",
            "|---|---|---|---|",
            *[f"| export | {p['name']} | {p['seconds']} | {p['peak_rss_mb'] / 1e3:.2f} |" for p in e["phases"]],
            *[f"| quantize | {p['name']} | {p['seconds']} | {p['peak_rss_mb'] / 1e3:.2f} |" for p in q["phases"]],
        ]
    return "\n".join(lines) + "\n"


def _change(a: float, b: float) -> str:
    return f"{a:.0f} → {b:.0f} ({100 * (b / a - 1):+.1f} %)"


def _pair(lat: dict, key: str) -> str:
    if not lat:
        return "—"
    return f"{lat['fp32'][key]:.0f} / {lat['int8'][key]:.0f}"


def host() -> dict:
    from .harness import host_info

    info = host_info()
    info["vnni"] = "yes" if {"avx512_vnni", "avx_vnni"} & set(cpu.int8_dot_units()) else "no"
    info["avx2"] = "avx2" in cpu.flags()
    info["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
    return info


def run_ladder(args: argparse.Namespace) -> dict:
    from .harness import versions

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = {
        "command": "openclaw-vision ladder " + " ".join(args.argv),
        "host": host(),
        "versions": versions(),
        "models": [],
    }
    for model in args.models:
        saved = out / f"{model}.json"
        if args.reuse and saved.exists():
            rec = json.loads(saved.read_text())
        else:
            print(f"[ladder] {model}: export, quantize, latency ...", flush=True)
            try:
                rec = run_model(model, args.calib, out, args.output_dim)
            except RuntimeError as err:
                rec = {"model": model, "params_m": None, "gflops": None, "error": str(err).splitlines()[0]}
                print(f"[ladder] {model} failed: {err}", file=sys.stderr, flush=True)
            saved.write_text(json.dumps(rec, indent=2))
        result["models"].append(rec)
        result["seconds"] = round(time.perf_counter() - t0, 1)
        (out / "ladder.json").write_text(json.dumps(result, indent=2))
        (out / "ladder.md").write_text(markdown(result))
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", type=lambda s: s.split(","), default=list(LADDER), help="comma-separated model names")
    p.add_argument("--calib", type=Path, default=Path("out/demo/frames"), help="the bag to calibrate and time on")
    p.add_argument("--out", type=Path, default=Path("out/ladder"))
    p.add_argument("--reuse", action="store_true", help="keep the records of models already in --out")
    p.add_argument("--output-dim", type=int, default=512,
                   help="the projection column's width (export --output-dim; 0: no column)")  # fmt: skip
    p.add_argument("--docs", default=None, metavar="NAME", help="also publish it as docs/figures/NAME.json and .md")
    p.add_argument("--latency-only", nargs=2, type=Path, metavar=("FP32", "INT8"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.latency_only:  # the ladder's own child step: one process with both sessions
        print(json.dumps(measure_latency(*args.latency_only, args.calib)))
        return 0
    result = run_ladder(args)
    print(markdown(result))
    print(f"wrote {args.out / 'ladder.md'} and {args.out / 'ladder.json'}")
    if args.docs:
        from . import figures

        print("published", *figures.publish(args.docs, result, markdown(result), result["command"]))
    return 0 if all("error" not in r for r in result["models"]) else 1


COMMAND = Command(add_arguments, run)
