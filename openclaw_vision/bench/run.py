"""Run the chosen bench modes in one process and write the report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..build_tools.first_use import ensure_fp32, ensure_int8
from ..core.commands import Command, field_default
from ..models.configs import DEFAULT_MODEL, canonical_name
from . import figures, report
from .harness import host_info, versions

#: "all" = the encoder modes; the others alone
MODES = ("stages", "node", "roofline", "all", "vlm", "cameras", "capacity", "triton", "memory", "overload", "stop",
         "soak")  # fmt: skip


def run_bench(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    modes = ("stages", "node", "roofline") if args.mode == "all" else (args.mode,)
    if set(modes) & {"stages", "node", "roofline", "cameras", "capacity"}:
        args.model = canonical_name(args.model)  # the node's `model` parameter takes the registered spelling
        model_path = ensure_fp32(args.model, args.model_path)
        int8_path = args.int8_model_path or ensure_int8(args.model, fp32_path=args.model_path)
    result: dict = {
        "mode": args.mode,
        "quick": args.quick,
        "host": host_info(),
        "versions": versions(),
        "model": args.model,
        "precision": "fp32 and int8 (stages); int8 (node, its default)",
        "backend": "onnxruntime and openvino (where installed)",
        "variants": [],
    }
    images_per_s = None
    if "stages" in modes:
        from .stages import run_stages

        st = run_stages(args.model, Path(model_path), Path(int8_path), args.quick)
        result["variants"] += st.pop("variants")
        result["stages"] = st
        result["model"] = st["model"]
        b8 = report._find(result["variants"], "encode/ort-fp32", 8)
        images_per_s = b8["throughput"] if b8 else None
    if "node" in modes:
        from .node import run_node

        nd = run_node(args.model, Path(int8_path), args.quick, args.out)
        result["variants"] += nd["variants"]
        result["node"] = nd["node"]
    if "roofline" in modes:
        from .roofline import run_roofline

        if images_per_s is None:  # roofline alone: one timed batch-8 call after a warm-up
            import numpy as np

            from ..encoders.onnxruntime import OnnxRuntimeEncoder
            from .harness import Variant, run_interleaved

            enc = OnnxRuntimeEncoder(model_path)
            x = np.zeros((8, 3, enc.image_size, enc.image_size), np.float32)
            v = Variant("encode/ort-fp32", lambda: enc.encode(x), batch=8)
            run_interleaved([v], rounds=1, iters=1, warmup=1)
            images_per_s = 8 / (v.samples_ms[0] / 1e3)
        result["roofline"] = run_roofline(args.model.split("@")[0], images_per_s, args.quick)
    if "cameras" in modes:
        from .cameras import run_cameras

        args.int8_model_path = Path(int8_path)
        result["cameras"] = run_cameras(args, args.out)
        result["precision"], result["backend"] = "int8", f"{args.backend} (node default)"
    if "capacity" in modes:
        from .capacity import run_capacity

        args.int8_model_path = Path(int8_path)
        result["capacity"] = run_capacity(args, args.out)
        result["precision"] = result["capacity"]["precision"]
        result["backend"] = f"{result['capacity']['backend']} (the node's, --backend {args.backend})"
    if "triton" in modes:
        from .triton import run_triton

        args.model = canonical_name(args.model)
        tr = run_triton(Path(ensure_fp32(args.model, args.model_path)), args.quick, args.out)
        result["variants"] += tr["variants"]
        result["triton"] = tr["triton"]
        result["model"], result["precision"] = tr["triton"]["model"], "fp32"
        result["backend"] = "onnxruntime, locally and inside the Triton server"
    if "overload" in modes:
        from .overload import run_overload

        args.model = canonical_name(args.model)
        fp32 = Path(ensure_fp32(args.model, args.model_path))
        result["overload"] = run_overload(args.model, fp32, args.quick, args.out)
        result["precision"], result["backend"] = "fp32 (+ zero-output MatMuls)", "onnxruntime"
    if "stop" in modes:
        from .stop import run_stop

        args.model = canonical_name(args.model)
        fp32 = Path(ensure_fp32(args.model, args.model_path))
        result["stop"] = run_stop(args.model, fp32, args.quick, args.out, args.stops)
        result["precision"], result["backend"] = "fp32", "onnxruntime"
    if "soak" in modes:
        from ..text.build import ensure_text_fp32
        from .soak import MODEL, run_soak

        args.model = canonical_name(args.model if args.model_path else MODEL)  # the tiny model unless one is given
        fp32 = Path(ensure_fp32(args.model, args.model_path))
        text = ensure_text_fp32(args.model)  # the labels node's text tower, same model id as the features
        result["soak"] = run_soak(args.model, fp32, text, args.quick, args.out, args.soak_seconds)
        result["model"], result["precision"] = args.model, "fp32"
        result["backend"] = "onnxruntime (encoder, labels), numpy (VLM)"
    if "memory" in modes:
        from .memory import run_memory

        mem = run_memory(args.quick, args.memory_rows)
        result["variants"] += mem["variants"]
        result["memory"] = mem["memory"]
        result["model"], result["precision"], result["backend"] = "none (512-d vectors)", "float32", "chromadb + numpy"
    if "vlm" in modes:
        from .vlm import run_vlm

        vlm = run_vlm(args.quick, args.llm_shape)
        result["variants"] += vlm.pop("variants")
        result.update(vlm)
        result["model"], result["precision"], result["backend"] = f"{args.llm_shape} and tiny", "float32", "numpy"
    result["goals"] = report.goals(result)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    report.write(result, args.out, args.json)
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..encoders.options import PERFORMANCE_HINTS
    from ..runtime.config import IMAGE_TRANSPORTS, EncoderConfig
    from .cameras import CAMERA_COUNTS
    from .vlm import run_vlm

    p.add_argument("--mode", choices=MODES, default="all")
    p.add_argument("--quick", action="store_true", help="fewer rounds and frames: under 90 s")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--model-path", type=Path, default=None, help="FP32 ONNX export (default: built for --model)")
    p.add_argument(
        "--int8-model-path", type=Path, default=None, help="INT8 model (default: quantised from sample frames)"
    )
    p.add_argument("--llm-shape", default=field_default(run_vlm, "real"),
                   help="vlm mode: the full-size language model shape (random weights)")  # fmt: skip
    p.add_argument(
        "--cameras", type=lambda s: tuple(int(n) for n in s.split(",")), default=CAMERA_COUNTS,
        help=f"cameras mode: camera counts, e.g. {','.join(map(str, CAMERA_COUNTS))}",
    )  # fmt: skip
    p.add_argument("--camera-transport", choices=IMAGE_TRANSPORTS, default=None,
                   help=f"cameras mode: Image or JPEG (default {IMAGE_TRANSPORTS[0]}); capacity mode: only this one "
                   "(default both)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=10.0, help="cameras mode: measured seconds per trial")
    p.add_argument("--warmup", type=float, default=2.0, help="cameras mode: seconds played before measuring")
    p.add_argument("--backend", default="auto", help="cameras and capacity modes: the nodes' backend")
    p.add_argument("--performance-hint", choices=PERFORMANCE_HINTS, default=EncoderConfig.performance_hint,
                   help="cameras and capacity modes: the nodes' performance_hint")  # fmt: skip
    p.add_argument("--memory-rows", type=lambda s: tuple(int(n) for n in s.split(",")), default=None,
                   help="memory mode: row counts (default 10000,100000,1000000; --quick: 10000)")  # fmt: skip
    p.add_argument("--stops", type=int, default=None, help="stop mode: SIGTERMs per phase (default 50, quick 3)")
    p.add_argument("--soak-seconds", type=float, default=None,
                   help="soak mode: seconds of the run (default 600, quick 60); on the tiny model unless "
                   "--model-path")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("out/bench"), help="folder for bench.json, bench.md and plots")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    p.add_argument("--docs", default=None, metavar="NAME", help="also publish it as docs/figures/NAME.json and .md")


def run(args: argparse.Namespace) -> int:
    result = run_bench(args)
    print(report.markdown(result))
    print(f"wrote {args.out / 'bench.json'}, {args.out / 'bench.md'} and plots ({result['seconds']} s)")
    if args.docs:
        command = "openclaw-vision bench " + " ".join(sys.argv[2:])
        print("published", *figures.publish(args.docs, result, report.markdown(result), command))
    return 0


COMMAND = Command(add_arguments, run)
