"""`openclaw-vision`: one command for the tools (export, bag, encoder, replay, demo, text, label)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
from pathlib import Path

from .resources import default_model_path

log = logging.getLogger("openclaw_vision")


def cmd_export(args: argparse.Namespace) -> int:
    from .models.configs import canonical_name
    from .models.export import ExportCheckError, export_model
    from .text.build import default_text_model_path

    try:
        name = canonical_name(args.model)
    except KeyError as err:
        print(f"export failed: {err.args[0]}", file=sys.stderr)
        return 1
    out = args.out or (default_text_model_path(name) if args.tower == "text" else default_model_path(name, "fp32"))
    if out.exists() and not args.force:
        print(f"{out} exists (use --force to rebuild)")
        return 0
    try:
        with _terminate_as_exit():
            res = export_model(name, out, args.checkpoint, args.seed, tower=args.tower)
    except (ExportCheckError, ValueError, KeyError) as err:
        print(f"export failed: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**vars(res), "path": str(res.path), "files": [str(p) for p in res.files]}))
        return 0
    files = " + ".join(str(p) for p in res.files)
    print(
        f"wrote {files} ({res.size_bytes / 1e6:.1f} MB; {args.tower} tower {res.model_id}, {res.embed_dim}-d,"
        f" ORT vs torch min cosine {res.min_cosine:.6f} on {res.check_images} inputs; {res.seconds} s)"
    )
    for ph in res.phases:
        print(f"  {ph['name']}: {ph['seconds']} s, peak RSS {ph['peak_rss_mb'] / 1e3:.2f} GB")
    return 0


def cmd_text(args: argparse.Namespace) -> int:
    from .text.tools import run_text

    return run_text(args)


def cmd_label(args: argparse.Namespace) -> int:
    from .text.tools import run_label

    return run_label(args)


def cmd_bench_labels(args: argparse.Namespace) -> int:
    from .ros.labels_bench import main

    return main(args)


def cmd_tokenizer_fetch(args: argparse.Namespace) -> int:
    from .text.merges import TokenizerError, fetch

    try:
        path = fetch(args.wheel, args.out)
    except TokenizerError as err:
        print(f"tokenizer fetch: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path} (CLIP's BPE merges, checked)")
    return 0


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM raises SystemExit here, so a killed export or quantisation still removes its temporary folder."""

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_quantize(args: argparse.Namespace) -> int:
    from .build import ensure_fp32, ensure_gate_text, int8_path_for
    from .errors import OpenclawError
    from .gate import GateSpec
    from .models.configs import canonical_name
    from .quant.pipeline import QuantOptions, quantize
    from .quant.report import write

    try:
        model = canonical_name(args.model) if not args.model_path else args.model
        fp32 = ensure_fp32(model, args.model_path, args.checkpoint)
        if not args.model_path and not args.no_text and not args.text_model:
            ensure_gate_text(model, args.checkpoint)  # the gate's text term, as every entry point has it
        opts = QuantOptions(
            fp32_model=fp32,
            calib=args.calib,
            out=args.out or (int8_path_for(fp32) if args.model_path else default_model_path(model, "int8")),
            topic=args.topic,
            limit=args.limit,
            max_frames=args.max_frames,
            method=args.method,
            percentile=args.percentile,
            scheme=args.scheme,
            gate=GateSpec(args.min_mean_cosine, args.min_cosine, args.min_nn_agreement, args.min_zero_shot_agreement),
            max_float=args.max_float_layers,
            holdout_every=args.holdout_every,
            threads=args.threads,
            sensitivity=not args.no_sensitivity,
            sweep=args.sweep,
            sweep_budget_s=args.sweep_budget_s,
            probe_frames=args.probe_frames,
            calib_frames=args.calib_frames,
            heldout_frames=args.heldout_frames,
            measure_memory=not args.no_memory,
            text_model=args.text_model,
            text=not args.no_text,
            report=args.report,
        )
        with _terminate_as_exit():
            result = quantize(opts)
    except (OpenclawError, KeyError, ValueError, FileNotFoundError) as err:
        print(f"quantize: {err}", file=sys.stderr)
        return 2
    written = write(result, args.report)
    report = ", ".join(str(p) for p in written)
    print(
        f"{result.seconds} s, peak RSS {result.peak_rss_mb / 1e3:.2f} GB; per phase: "
        + "; ".join(f"{p['name']} {p['seconds']} s / {p['peak_rss_mb'] / 1e3:.2f} GB" for p in result.phases)
    )
    if not result.passed:
        print(f"quantize: gate FAILED, no model written: {result.summary()}\nreport: {report}", file=sys.stderr)
        return 1
    size, lat = result.size_mb, result.latency_b1_ms
    print(
        f"wrote {result.int8_model} (gate passed: {result.summary()}; {size['fp32']} -> {size['int8']} MB; "
        f"batch-1 {lat['fp32']} -> {lat['int8']} ms)\nreport: {report}"
    )
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from .vlm.ask import AskError, ask

    try:
        result = ask(args)
    except AskError as err:
        print(f"ask: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        t = result["timings_ms"]
        print(
            f"frame {result['frame_index']} of {args.bag} ({result['stamp_ns']} ns), encoder {result['encoder']}, "
            f"llm {result['llm']}\nQ: {result['question']}\nA: {result['answer']}\n"
            f"({result['answer_tokens']} tokens, stop: {result['stop']}; encode {t['encode']} ms, prefix "
            f"{t['prefix']} ms, prefill {t['prefill']} ms, decode {t['decode']} ms)"
        )
        if "random" in result["llm"]:
            print("note: the language model has random weights (no download): the text is noise, the pipeline is real")
    return 0


def cmd_bag_sample(args: argparse.Namespace) -> int:
    from .bags import write_sample_bag

    if args.out.exists():
        print(f"{args.out} exists; remove it first", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    try:
        n = write_sample_bag(
            args.out,
            args.frames,
            args.fps,
            args.width,
            args.height,
            args.encoding,
            args.topic,
            args.storage,
            compressed=args.compressed,
        )
    except ValueError as err:
        print(f"bag sample: {err}", file=sys.stderr)
        return 2
    what = f"{args.compressed} CompressedImage on {args.topic.rstrip('/')}/compressed" if args.compressed else "Image"
    print(
        f"wrote {n} {args.width}x{args.height} {args.encoding} frames ({what}) at {args.fps} fps to {args.out} "
        f"({args.storage}, {time.perf_counter() - t0:.1f} s)"
    )
    return 0


def cmd_encoder(rest: list[str]) -> int:
    from .ros.encoder_node import main

    return main(rest)


def _replay_options(args: argparse.Namespace):
    from .ros.replay import ReplayOptions

    return ReplayOptions(
        bag=args.bag,
        out=args.out,
        bag_topic=args.bag_topic,
        image_topic=args.image_topic,
        features_topic=args.features_topic,
        rate=args.rate,
        lockstep=args.lockstep,
        reliability=args.reliability,
        limit=args.limit,
        storage=args.storage,
        restamp=not args.keep_stamps,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    from .ros.replay import ReplayError, replay
    from .ros.transport import create_transport

    transport = create_transport(args.transport, "openclaw_replay")
    try:
        summary = replay(_replay_options(args), transport)
    except ReplayError as err:
        print(f"replay failed: {err}", file=sys.stderr)
        return 1
    finally:
        transport.close()
    text = json.dumps(summary, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)
    return 0 if summary["accounted"] else 3


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bag-topic", default=None, help="image topic to read from the bag (default: its one camera)")
    p.add_argument("--image-topic", default=None, help="topic to publish on (default: the bag topic)")
    p.add_argument("--features-topic", default=None, help="default: <camera>/visual_features or /visual_features")
    p.add_argument("--rate", type=float, default=1.0, help="1 = the bag's timing, 2 = twice as fast, 0 = flat out")
    p.add_argument("--lockstep", action="store_true", help="send the next frame only after this one's features")
    p.add_argument("--reliability", choices=("reliable", "best_effort"), default="reliable")
    p.add_argument("--limit", type=int, default=0, help="send at most this many frames")
    p.add_argument(
        "--keep-stamps",
        action="store_true",
        help="keep the bag's header stamps, as `ros2 bag play` does (default: stamp each image with its send time)",
    )
    p.add_argument(
        "--storage",
        choices=("mcap", "sqlite3"),
        default="mcap",
        help="output bag storage (Humble reads sqlite3 out of the box; mcap needs ros-humble-rosbag2-storage-mcap)",
    )
    p.add_argument("--transport", default="auto", choices=("auto", "rclpy", "cyclonedds"))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def cmd_ladder(args: argparse.Namespace) -> int:
    from .ladder import markdown, measure_latency, run_ladder

    if args.latency_only:  # the ladder's own child step: one process with both sessions
        print(json.dumps(measure_latency(*args.latency_only, args.calib)))
        return 0
    args.argv = sys.argv[1:]
    result = run_ladder(args)
    print(markdown(result))
    print(f"wrote {args.out / 'ladder.md'} and {args.out / 'ladder.json'}")
    return 0 if all("error" not in r for r in result["models"]) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.report import markdown
    from .bench.run import run_bench

    result = run_bench(args)
    print(markdown(result))
    print(f"wrote {args.out / 'bench.json'}, {args.out / 'bench.md'} and plots ({result['seconds']} s)")
    return 0


def cmd_build_engine(args: argparse.Namespace) -> int:
    from .encoders.engine_cache import BuildOptions
    from .encoders.tensorrt import build_engine_cli

    path = args.model_path or default_model_path(args.model, args.precision)
    if not path.is_file():
        print(f"build-engine: {path} not found (make it with `openclaw-vision quantize` / `export`)", file=sys.stderr)
        return 2
    opts = BuildOptions(max_batch=args.max_batch, workspace_mb=args.workspace_mb, typing=args.typing)
    return build_engine_cli(path, opts, args.cache_dir, args.force)


def cmd_triton_repo(args: argparse.Namespace) -> int:
    from .build import ensure_fp32
    from .encoders import EncoderError
    from .serving.repo import RepoError, write_repo

    try:
        models = list(args.model_path) or [ensure_fp32(args.model)]
        int8 = default_model_path(args.model, "int8")
        if not args.model_path and int8.is_file():
            models.append(int8)
        result = write_repo(models, args.out, tuple(args.runtimes.split(",")), args.max_batch, args.queue_delay_us,
                            args.engine_cache)  # fmt: skip
    except (RepoError, EncoderError, FileNotFoundError) as err:
        print(f"triton-repo: {err}", file=sys.stderr)
        return 2
    for w in result["written"]:
        print(f"wrote {w['folder']} ({w['runtime']}, batch 1..{w['max_batch']})")
    for sk in result["skipped"]:
        print(f"skipped {sk['model']}: {sk['why']}")
    print(f"serve it: tritonserver --model-repository={args.out.resolve()} (gRPC on 8001)")
    return 0 if result["written"] else 1


def build_parser() -> argparse.ArgumentParser:
    from .gate import GateSpec

    parser = argparse.ArgumentParser(prog="openclaw-vision", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("export", help="build a CLIP vision tower and export it to ONNX (checked vs PyTorch)")
    p.add_argument("--model", default="ViT-B-32")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="open_clip or Hugging Face weights (.safetensors, .bin/.pt, or an HF folder); "
        "default: deterministic random init",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tower", choices=("image", "text"), default="image", help="which CLIP tower (same model id)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: ~/.cache/openclaw_vision/models/<model>.fp32.onnx (text: <model>.text.fp32.onnx)",
    )
    p.add_argument("--force", action="store_true")
    p.add_argument("--json", action="store_true", help="print the result (files, check, phases) as one JSON line")
    p.set_defaults(fn=cmd_export)

    from .text.tools import add_label_arguments, add_text_model_arguments

    p = sub.add_parser("text", help="unit-length CLIP text embeddings of strings, one JSON line each")
    p.add_argument("texts", nargs="+")
    p.add_argument("--ids", action="store_true", help="also print the token ids")
    add_text_model_arguments(p)
    p.set_defaults(fn=cmd_text)

    p = sub.add_parser("label", help="zero-shot label scores for every frame of a bag, one JSON line each")
    add_label_arguments(p)
    p.set_defaults(fn=cmd_label)

    from .ros.labels_bench import add_arguments as add_labels_bench_arguments

    p = sub.add_parser("bench-labels", help="the labels node's latency per frame over DDS, by label-set size")
    add_labels_bench_arguments(p)
    p.set_defaults(fn=cmd_bench_labels)

    tok = sub.add_parser("tokenizer", help="CLIP's tokenizer files").add_subparsers(dest="tokcmd", required=True)
    p = tok.add_parser("fetch", help="take CLIP's BPE merges file from the open_clip_torch wheel (pip, --no-deps)")
    p.add_argument("--wheel", type=Path, default=None, help="an open_clip_torch wheel already here (no download)")
    p.add_argument("--out", type=Path, default=None, help="default: <data home>/tokenizer/bpe_simple_vocab_16e6.txt.gz")
    p.set_defaults(fn=cmd_tokenizer_fetch)

    p = sub.add_parser("quantize", help="INT8 Q/DQ model from calibration frames, gated on held-out frames")
    p.add_argument("--model", default="ViT-B-32", help="model name; its FP32 export is built if missing")
    p.add_argument("--model-path", type=Path, default=None, help="an FP32 ONNX export to quantise instead")
    p.add_argument("--checkpoint", type=Path, default=None, help="weights for the FP32 export when it is built")
    p.add_argument("--calib", type=Path, required=True, help="rosbag2 folder, .mcap or .db3 file, or image folder")
    p.add_argument("--topic", default=None, help="image topic in the bag (default: its one camera)")
    p.add_argument("--limit", type=int, default=0, help="use the first N frames only")
    p.add_argument(
        "--max-frames", type=int, default=256, help="otherwise at most this many, spread over the recording (0: all)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: ~/.cache/openclaw_vision/models/<model>.int8.onnx, or beside --model-path",
    )
    p.add_argument("--report", type=Path, default=Path("out/quant"), help="folder for report.md/json and plots")
    p.add_argument("--method", choices=("minmax", "percentile", "entropy"), default="percentile")
    p.add_argument("--percentile", type=float, default=99.99)
    p.add_argument(
        "--scheme",
        choices=("s8s8", "u8s8"),
        default="s8s8",
        help="s8s8: signed symmetric, TensorRT and ONNX Runtime; u8s8: unsigned activations, ONNX Runtime only",
    )
    p.add_argument("--min-mean-cosine", type=float, default=GateSpec.mean_cosine)
    p.add_argument("--min-cosine", type=float, default=GateSpec.min_cosine)
    p.add_argument(
        "--min-nn-agreement", type=float, default=GateSpec.nn_agreement, help="ties judged by the FP32 margin"
    )
    p.add_argument(
        "--min-zero-shot-agreement",
        type=float,
        default=GateSpec.zero_shot_top1,
        help="zero-shot top-1 agreement INT8 vs FP32 on the gate's label set (when a text tower is at hand);"
        " ties judged by the FP32 margin",
    )
    p.add_argument(
        "--text-model", type=Path, default=None, help="FP32 text export of the same weights (default: the data home's)"
    )
    p.add_argument("--no-text", action="store_true", help="no zero-shot (text) term in the gate")
    p.add_argument("--max-float-layers", type=int, default=-1, help="most layers kept float (-1: a quarter)")
    p.add_argument("--holdout-every", type=int, default=4, help="every k-th frame is held out for the gate")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--no-sensitivity",
        action="store_true",
        help="skip the sensitivity measures when every layer passes as INT8 (the partition still runs them if needed)",
    )
    p.add_argument(
        "--sweep",
        choices=("auto", "always", "never"),
        default="auto",
        help="end-to-end sensitivity sweep (one run per layer): auto = when its estimate fits --sweep-budget-s;"
        " the one-pass local SQNR measure always runs",
    )
    p.add_argument("--sweep-budget-s", type=float, default=600.0)
    p.add_argument(
        "--probe-frames", type=int, default=0, help="frames of the local sensitivity pass (0: 16, fewer for big models)"
    )
    p.add_argument("--calib-frames", type=int, default=0, help="calibration frames used (0: all, fewer for big models)")
    p.add_argument(
        "--heldout-frames", type=int, default=0, help="held-out frames per resolution (0: all, fewer for big models)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the per-process memory measurement")
    p.set_defaults(fn=cmd_quantize)

    bag = sub.add_parser("bag", help="rosbag2 tools").add_subparsers(dest="bagcmd", required=True)
    p = bag.add_parser("sample", help="write a bag of camera-like frames made from real photographs")
    p.add_argument("out", type=Path)
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument(
        "--encoding",
        default="rgb8",
        help="rgb8 bgr8 rgba8 bgra8 mono8 mono16 16UC1 yuv422 yuyv nv12 nv21 bayer_rggb8 bayer_bggr8 bayer_gbrg8 "
        "bayer_grbg8 (compressed: rgb8 bgr8 rgba8 bgra8 mono8)",
    )
    p.add_argument(
        "--compressed",
        choices=("", "jpeg", "png"),
        default="",
        help="write sensor_msgs/CompressedImage on <topic>/compressed, as image_transport's compressed plugin does",
    )
    p.add_argument("--topic", default="/camera/image_raw")
    p.add_argument(
        "--storage",
        choices=("mcap", "sqlite3"),
        default="mcap",
        help="mcap (needs ros-humble-rosbag2-storage-mcap on Humble) or sqlite3 (Humble's default)",
    )
    p.set_defaults(fn=cmd_bag_sample)

    sub.add_parser("encoder", help="run the encoder node (flags: see `openclaw-vision encoder --help`)", add_help=False)
    sub.add_parser("vlm", help="run the VLM node (flags: see `openclaw-vision vlm --help`)", add_help=False)
    sub.add_parser("labels", help="run the labels node (flags: see `openclaw-vision labels --help`)", add_help=False)

    p = sub.add_parser("ask", help="encoder + VLM in one process: answer a question about one frame of a bag")
    p.add_argument("question")
    p.add_argument("--bag", type=Path, required=True, help="rosbag2 with images (any image topic)")
    p.add_argument("--topic", default=None, help="image topic (default: the bag's one camera)")
    p.add_argument("--index", type=int, default=0, help="which frame of the bag (0 = first)")
    p.add_argument("--model", default="ViT-B-32", help="encoder model (its INT8 build is made if missing)")
    p.add_argument("--model-path", type=Path, default=None, help="an encoder ONNX file instead")
    p.add_argument("--llm", default="tiny", help="tiny | tinyllama-1.1b (random) | a HF folder | a .gguf file")
    p.add_argument("--tokenizer", type=Path, default=None)
    p.add_argument("--projector", type=Path, default=None)
    p.add_argument("--visual-tokens", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.set_defaults(fn=cmd_ask)

    p = sub.add_parser("replay", help="play a bag into a running encoder node and record /visual_features")
    p.add_argument("bag", type=Path)
    p.add_argument("--out", type=Path, default=None, help="bag to record the features into")
    p.add_argument("--json", type=Path, default=None, help="write the summary here too")
    add_replay_arguments(p)
    p.set_defaults(fn=cmd_replay)

    from .bench.run import add_arguments as add_bench_arguments

    p = sub.add_parser("bench", help="latency P50/P95/P99 per stage, side by side with the usual baselines")
    add_bench_arguments(p)
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("build-engine", help="build (once) the cached TensorRT engine the tensorrt backend loads")
    p.add_argument("--model", default="ViT-B-32")
    p.add_argument("--precision", default="int8", help="which built model of --model (int8: the Q/DQ one)")
    p.add_argument("--model-path", type=Path, default=None, help="an ONNX file instead")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--workspace-mb", type=int, default=1024)
    p.add_argument("--typing", choices=("auto", "strong", "int8+fp16"), default="auto")
    p.add_argument("--cache-dir", type=Path, default=None, help="default: ~/.cache/openclaw_vision/engines")
    p.add_argument("--force", action="store_true", help="rebuild even if a valid engine is cached")
    p.set_defaults(fn=cmd_build_engine)

    sub.add_parser("serve", help="a Triton server (PyTriton) hosting the image encoder; prints its gRPC URL "
                   "(flags: see `openclaw-vision serve --help`)", add_help=False)  # fmt: skip

    p = sub.add_parser("triton-repo", help="a Triton model repository (onnxruntime, openvino, tensorrt_plan)")
    p.add_argument("--model", default="ViT-B-32", help="its FP32 export (built if missing) and INT8 model if built")
    p.add_argument("--model-path", type=Path, action="append", default=[], help="ONNX file(s) instead (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runtimes", default="onnxruntime,openvino,tensorrt")
    p.add_argument("--max-batch", type=int, default=8, help="the batch dimension's limit (Triton's max_batch_size)")
    p.add_argument("--queue-delay-us", type=int, default=500, help="how long the batcher waits for more requests")
    p.add_argument("--engine-cache", type=Path, default=None, help="build-engine's cache (default: the data home's)")
    p.set_defaults(fn=cmd_triton_repo)

    from .ladder import add_arguments as add_ladder_arguments

    p = sub.add_parser(
        "ladder", help="ViT-B/32 to ViT-bigG-14 on this machine: export, INT8, memory, gate, 1080p latency"
    )
    add_ladder_arguments(p)
    p.set_defaults(fn=cmd_ladder)

    p = sub.add_parser("demo", help="build the default model and a sample bag, replay it through the node")
    p.add_argument("--out", type=Path, default=Path("out/demo"))
    p.add_argument("--model", default="ViT-B-32")
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--fps", type=float, default=30.0)
    p.set_defaults(fn=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["encoder"]:  # the nodes parse their own flags (they mirror their config keys)
        return cmd_encoder(argv[1:])
    if argv[:1] == ["serve"]:  # parses its own flags: it may re-execute itself in the serve venv
        from .serving.serve import main as serve_main

        return serve_main(argv[1:])
    if argv[:1] == ["vlm"]:
        from .ros.vlm_node import main as vlm_main

        return vlm_main(argv[1:])
    if argv[:1] == ["labels"]:
        from .ros.labels_node import main as labels_main

        return labels_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
