"""`openclaw-vision text` and `openclaw-vision label`: the text tower and zero-shot labels without ROS.

`text`: strings → unit-length text embeddings, one JSON line each.
`label`: every frame of a bag → the encoder node's preprocessing and image encoder → scores
against the label set, one JSON line per frame, then one summary line (stderr) with the time
per frame of each stage. The same stages as the encoder node followed by the labels node.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..core.commands import Command
from ..core.errors import OpenclawError
from ..core.resources import PRECISIONS
from ..encoders.base import EncoderError
from ..models.configs import DEFAULT_MODEL
from ..preprocess.encodings import FrameError
from ..text.merges import TokenizerError
from ..text.zero_shot import (
    DEFAULT_TEMPLATE,
    LabelError,
    LabelSet,
    ModelMismatch,
    check_same_model,
    parse_labels,
    read_labels_file,
)

RANDOM_NOTE = "note: {model} has random weights (no download): {what}; the pipeline is real"


class ToolError(OpenclawError, RuntimeError):
    """Something the user gave (bag, labels, models) cannot be used; the message says what."""


def add_text_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=DEFAULT_MODEL, help="model name; its text export is built if missing (needs torch)"
    )
    p.add_argument("--text-model", type=Path, default=None, help="a text tower ONNX export instead")
    p.add_argument("--checkpoint", type=Path, default=None, help="weights for the text export when it is built")
    p.add_argument("--bpe", type=Path, default=None, help="CLIP's merges file (default: data home or open_clip)")
    p.add_argument("--threads", type=int, default=0)


def load_text_encoder(args: argparse.Namespace):
    from ..models.configs import canonical_name
    from ..text.build import ensure_text_fp32
    from ..text.encoder import TextEncoder

    try:
        model = args.model if args.text_model else canonical_name(args.model)
        return TextEncoder(ensure_text_fp32(model, args.text_model, args.checkpoint), args.threads, args.bpe)
    except (EncoderError, TokenizerError, KeyError, ValueError) as err:
        raise ToolError(str(err)) from err


def add_image_model_arguments(p: argparse.ArgumentParser) -> None:
    """The image tower's flags (beside add_text_model_arguments' --model, --threads)."""
    p.add_argument("--model-path", type=Path, default=None, help="an image encoder ONNX file instead of --model's")
    p.add_argument("--precision", choices=PRECISIONS, default="int8", help="image tower built for --model")


def load_image_encoder(args: argparse.Namespace):
    """The image encoder of --model-path, else --model's build at --precision (built if missing)."""
    from ..build_tools.first_use import BuildError, ensure_fp32, ensure_int8
    from ..encoders import create_encoder
    from ..models.configs import canonical_name

    try:
        if args.model_path:
            image_path = args.model_path
        else:
            build = ensure_int8 if args.precision == "int8" else ensure_fp32
            image_path = build(canonical_name(args.model))
        return create_encoder("auto", image_path, args.threads)
    except (EncoderError, BuildError, KeyError) as err:
        raise ToolError(str(err)) from err


def text_embeddings(args: argparse.Namespace) -> Iterator[dict]:
    """One dict per string: the text, the model id and the unit-length embedding."""
    encoder = load_text_encoder(args)
    emb = encoder.encode(args.texts)
    ids = encoder.tokenizer(args.texts) if args.ids else None
    for i, text in enumerate(args.texts):
        row = {"text": text, "model_id": emb.model_id, "dim": emb.dim}
        if ids is not None:
            end = int(np.argmax(ids[i] == encoder.tokenizer.eot_id))  # padding is 0, and so is the token "!"
            row["token_ids"] = [int(t) for t in ids[i][: end + 1]]
        row["embedding"] = [round(float(v), 7) for v in emb.vectors[i]]
        yield row


def iter_bag_frames(bag: Path, topic: str | None, limit: int = 0) -> Iterator:
    """Frames of a bag's camera (folder or file; which topic: bags.camera_source), one at a time."""
    from ..runtime.bags import iter_frames

    try:
        yield from iter_frames(bag, topic, limit)
    except (ValueError, FrameError) as err:  # no such topic; a message that is not an image
        raise ToolError(str(err)) from err


def label_set_from(args: argparse.Namespace, encoder) -> LabelSet:
    try:
        labels = read_labels_file(args.labels_file) if args.labels_file else parse_labels(args.labels or "")
        return LabelSet.build(encoder, labels, args.template)
    except (LabelError, EncoderError) as err:
        raise ToolError(str(err)) from err


def label_bag(args: argparse.Namespace) -> Iterator[dict]:
    """Per frame: frame index, stamp, top label and the scores; a last item with `summary` (timings)."""
    from ..runtime.pipeline import FramePipeline
    from ..runtime.stats import StageTimes

    text = load_text_encoder(args)
    labels = label_set_from(args, text)
    image = load_image_encoder(args)
    try:
        check_same_model(image.model_id, labels.model_id)
    except ModelMismatch as err:
        raise ToolError(str(err)) from err
    pipeline = FramePipeline(image)
    times = StageTimes(("preprocess", "encode", "score"))
    frames = 0
    for i, frame in enumerate(iter_bag_frames(args.bag, args.topic, args.limit)):
        res = pipeline.run([frame])
        if res.rejected:
            raise ToolError(f"{args.bag}: frame {i}: {res.rejected[0]}")
        t0 = time.perf_counter()
        scores, cos = labels.score(res.vectors[0])
        times.add("preprocess", res.decode_s.get(0, 0.0) + res.preprocess_s[0])
        times.add("encode", res.encode_s)
        times.add("score", time.perf_counter() - t0)
        top = int(np.argmax(scores))
        frames += 1
        yield {
            "frame": i,
            "stamp_ns": frame.stamp_ns,
            "top": labels.labels[top],
            "top_score": round(float(scores[top]), 6),
            "scores": {label: round(float(s), 6) for label, s in zip(labels.labels, scores, strict=True)},
            "cosines": {label: round(float(c), 6) for label, c in zip(labels.labels, cos, strict=True)},
        }
    if not frames:
        raise ToolError(f"{args.bag}: no frames")
    yield {
        "summary": {
            "frames": frames,
            "model": labels.model_id,
            "image_model": f"{image.model_id} ({image.backend}, {image.precision})",
            "labels": list(labels.labels),
            "template": labels.template,
            "logit_scale": labels.logit_scale,
            "stages_ms": times.summary(),
        }
    }


def run_text(args: argparse.Namespace) -> int:
    try:
        rows = list(text_embeddings(args))
    except ToolError as err:
        print(f"text: {err}", file=sys.stderr)
        return 2
    for row in rows:
        print(json.dumps(row))
    if rows and "random" in rows[0]["model_id"]:
        print(RANDOM_NOTE.format(model=rows[0]["model_id"], what="the embeddings are noise"), file=sys.stderr)
    return 0


def run_label(args: argparse.Namespace) -> int:
    try:
        for row in label_bag(args):
            if "summary" in row:
                s = row["summary"]
                st = s["stages_ms"]
                print(
                    f"{s['frames']} frames, model {s['model']}, image {s['image_model']}; per frame P50: preprocess "
                    f"{st['preprocess']['p50']:.2f} ms, encode {st['encode']['p50']:.2f} ms, score "
                    f"{st['score']['p50'] * 1e3:.1f} µs",
                    file=sys.stderr,
                )
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(s, indent=2))
                if "random" in s["model"]:
                    print(RANDOM_NOTE.format(model=s["model"], what="the labels are noise"), file=sys.stderr)
            else:
                print(json.dumps(row), flush=True)
    except ToolError as err:
        print(f"label: {err}", file=sys.stderr)
        return 2
    return 0


def add_label_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bag", type=Path, required=True, help="rosbag2 with images (any image topic)")
    p.add_argument("--topic", default=None, help="image topic (default: the bag's one camera)")
    p.add_argument("--labels", default=None, help="comma-separated labels, e.g. 'door,forklift,person'")
    p.add_argument("--labels-file", type=Path, default=None, help="one label per line ('#' comments)")
    p.add_argument("--template", default=DEFAULT_TEMPLATE, help="prompt per label ('{}' = the label alone)")
    add_image_model_arguments(p)
    p.add_argument("--limit", type=int, default=0, help="label at most this many frames (0: all)")
    p.add_argument("--json", type=Path, default=None, help="write the summary (timings) here too")
    add_text_model_arguments(p)


def add_text_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("texts", nargs="+")
    p.add_argument("--ids", action="store_true", help="also print the token ids")
    add_text_model_arguments(p)


TEXT = Command(add_text_arguments, run_text)
LABEL = Command(add_label_arguments, run_label)
