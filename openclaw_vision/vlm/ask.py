"""`openclaw-vision ask --bag frames.bag "question"`: one bag frame through encoder and VLM in one process.

The same stages as the two nodes, without DDS: the frame is preprocessed and encoded exactly
as the encoder node does, its embedding goes through the projector and the decoder as the VLM
node does. Used to try a model on a recording before deploying it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


class AskError(RuntimeError):
    """The bag, the models or the question could not be used."""


def ask(args: argparse.Namespace) -> dict:
    from ..bags import iter_frames
    from ..build import BuildError, ensure_int8
    from ..encoders import EncoderError, create_encoder
    from ..pipeline import FramePipeline
    from ..preprocess.encodings import FrameError
    from .pipeline import VlmPipeline, load_vlm
    from .sampling import Sampling

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
