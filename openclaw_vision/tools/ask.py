"""`openclaw-vision ask --bag frames.bag "question"`: one bag frame through encoder and VLM in one process.

The same stages as the two nodes, without DDS: the frame is preprocessed and encoded exactly
as the encoder node does, its embedding goes through the projector and the decoder as the VLM
node does. Used to try a model on a recording before deploying it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core.commands import Command, field_flag
from ..core.errors import OpenclawError


class AskError(OpenclawError, RuntimeError):
    """The bag, the models or the question could not be used."""


def ask(args: argparse.Namespace) -> dict:
    from ..build_tools.first_use import BuildError, ensure_int8
    from ..encoders import EncoderError, create_encoder
    from ..preprocess.encodings import FrameError
    from ..runtime.bags import iter_frames
    from ..runtime.pipeline import FramePipeline
    from ..vlm.pipeline import VlmPipeline, load_vlm
    from ..vlm.sampling import Sampling

    try:  # a bag folder or file, its camera topic by bags.camera_source
        frames = list(iter_frames(args.bag, args.topic, limit=args.index + 1))
    except (ValueError, FrameError) as err:  # not a bag, no such topic (BagError); not an image
        raise AskError(str(err)) from err
    if len(frames) <= args.index:
        raise AskError(f"{args.bag} has {len(frames)} frames; no frame {args.index}")
    frame = frames[args.index]
    try:
        model_path = args.model_path or ensure_int8(args.model)
        encoder = create_encoder("auto", model_path)
    except (EncoderError, BuildError, KeyError) as err:
        raise AskError(str(err)) from err
    t0 = time.perf_counter()
    try:
        emb = FramePipeline(encoder).encode(frame)
    except FrameError as err:
        raise AskError(f"{args.bag}: frame {args.index}: {err}") from err
    encode_ms = (time.perf_counter() - t0) * 1e3
    try:
        model = load_vlm(args.llm, encoder.embed_dim, args.visual_tokens, args.tokenizer, args.projector, args.seed)
    except (ValueError, KeyError, FileNotFoundError) as err:
        raise AskError(f"cannot load the VLM: {err}") from err
    pipe = VlmPipeline(model, sampling=Sampling(args.temperature, args.top_p, args.seed),
                       max_new_tokens=args.max_new_tokens)  # fmt: skip
    try:
        ans = pipe.ask(emb.vectors[0], ("bag", str(Path(args.bag)), args.index), args.question)
    except ValueError as err:
        raise AskError(str(err)) from err
    return {
        "question": args.question,
        "answer": ans.text,
        "answer_tokens": len(ans.tokens),
        "prompt_tokens": ans.prompt_tokens,
        "stop": ans.stop,
        "frame_index": args.index,
        "stamp_ns": frame.stamp_ns,
        "encoder": f"{emb.model_id} ({encoder.backend}, {encoder.precision})",
        "llm": model.model_id,
        "timings_ms": {"encode": round(encode_ms, 2), **ans.timings_ms},
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..models.configs import DEFAULT_MODEL
    from ..vlm.sampling import Sampling

    p.add_argument("question")
    p.add_argument("--bag", type=Path, required=True, help="rosbag2 with images (any image topic)")
    p.add_argument("--topic", default=None, help="image topic (default: the bag's one camera)")
    p.add_argument("--index", type=int, default=0, help="which frame of the bag (0 = first)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="encoder model (its INT8 build is made if missing)")
    p.add_argument("--model-path", type=Path, default=None, help="an encoder ONNX file instead")
    p.add_argument("--llm", default="tiny", help="tiny | tinyllama-1.1b (random) | a HF folder | a .gguf file")
    p.add_argument("--tokenizer", type=Path, default=None)
    p.add_argument("--projector", type=Path, default=None)
    p.add_argument("--visual-tokens", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    field_flag(p, "--temperature", Sampling)
    field_flag(p, "--top-p", Sampling)
    field_flag(p, "--seed", Sampling)
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        result = ask(args)
    except AskError as err:
        print(f"ask: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
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


COMMAND = Command(add_arguments, run)
