"""`openclaw-vision index BAG` and `openclaw-vision search TEXT`: visual memory over recorded logs.

index: a bag of camera images (the camera `bags.camera_source` picks, or --topic) is encoded in batches
through `FramePipeline`, the encoder node's stages; a bag of VisualFeatures is stored as recorded. Rows go
to the store (`--store PATH|http://HOST:PORT`, default the data home's); a second run over the same bag
adds nothing (each row's id is bag, camera and stamp), and frames already stored are not encoded again.

search: the text tower (loaded once) embeds the query; one line per match (stamp ns, camera, frame_id,
score, and the robot that saw it where a row names one), best first; `--robot` keeps one robot's rows. On a
server store nothing is loaded: the server's index answers (memory/store.py). With --images BAG --sheet
out.png, a contact sheet of the matching frames read back from the image bag by stamp, each thumbnail
captioned with its stamp, camera and score.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..core.commands import Command
from ..core.errors import OpenclawError
from ..memory.store import Match, Rows, StoreError, VisualMemory
from ..runtime import bags
from .label import ToolError, add_image_model_arguments, add_text_model_arguments, iter_bag_frames, load_image_encoder

#: frames encoded per model call while indexing
INDEX_BATCH = 16
THUMB_WIDTH = 320


def _store_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None,
                   help="store folder, or http://HOST:PORT of a `chroma run` server or its ingest (default: memory/ "
                   "in the data home, $OPENCLAW_VISION_HOME)")  # fmt: skip


def _source_name(bag: Path) -> str:
    return str(Path(bag).resolve())


def _features_topics(bag: Path) -> list[str]:
    from rosbags.rosbag2 import Reader

    with Reader(Path(bag)) as reader:
        return sorted({c.topic for c in reader.connections if c.msgtype == bags.FEATURES_TYPE})


def _feature_batches(bag: Path, memory: VisualMemory, source: str, batch: int,
                     robot: str = "") -> Iterator[tuple[Rows, int]]:  # fmt: skip
    """Rows of a VisualFeatures bag as recorded (camera: the features topic), and how many were read."""
    from ..preprocess.frame import stamp_to_ns

    pending: list = []

    def flush():
        by_model: dict[str, list] = {}
        for item in pending:
            by_model.setdefault(item[0], []).append(item)
        for model, items in by_model.items():  # one model per batch: a mixed bag's other model is refused alone
            rows = Rows(np.stack([i[4] for i in items]), [i[1] for i in items], [i[2] for i in items],
                        [i[3] for i in items], model, source, robot=robot)  # fmt: skip
            yield rows, len(items)
        pending.clear()

    for msg in bags.read_messages(bag, bags.FEATURES_TYPE):
        m = bags.deserialize(msg.raw, bags.FEATURES_TYPE)
        stamp = stamp_to_ns(m.header.stamp)
        if memory.has(source, msg.topic, stamp, robot):
            yield Rows(np.zeros((0, 1), np.float32), [], [], [], str(m.model_id), source, robot=robot), 1
            continue
        pending.append((str(m.model_id), stamp, str(m.header.frame_id), msg.topic,
                        np.asarray(m.embedding, np.float32)))  # fmt: skip
        if len(pending) >= batch:
            yield from flush()
    yield from flush()


def _image_batches(args: argparse.Namespace, memory: VisualMemory, source: str) -> Iterator[tuple[Rows, int]]:
    """Rows of an image bag: frames not stored yet, encoded `--batch` at a time through FramePipeline."""
    from ..runtime.pipeline import FramePipeline

    camera = bags.camera_source(args.bag, args.topic).topic
    pipeline = FramePipeline(load_image_encoder(args), max_batch=0)
    batch = max(1, min(args.batch, pipeline.max_batch))
    pending: list = []
    seen = 0

    def encode() -> Rows:
        res = pipeline.run(pending)
        for i, err in res.rejected.items():
            print(f"index: {args.bag}: frame at {pending[i].stamp_ns} not encoded: {err}", file=sys.stderr)
        kept = [pending[i] for i in res.encoded]
        return Rows(res.vectors.reshape(len(kept), -1), [f.stamp_ns for f in kept], [f.frame_id for f in kept],
                    [camera] * len(kept), res.model_id, source, robot=args.robot)  # fmt: skip

    for frame in iter_bag_frames(args.bag, camera):
        seen += 1
        if memory.has(source, camera, frame.stamp_ns, args.robot):  # resumed: stored already, not encoded again
            continue
        pending.append(frame)
        if len(pending) >= batch:
            yield encode(), seen
            pending, seen = [], 0
    if pending or seen:
        yield (encode() if pending else Rows(np.zeros((0, 1), np.float32), [], [], [], pipeline.model_id, source)), seen


def index_bag(args: argparse.Namespace) -> dict:
    """Index the bag into the store; the counts (frames read, written, already there, refused)."""
    source = _source_name(args.bag)
    if not bags.is_bag(args.bag):
        raise ToolError(f"{args.bag}: not a rosbag2 folder (with metadata.yaml) nor a .mcap or .db3 file")
    with VisualMemory(args.store) as memory:
        features = _features_topics(args.bag)
        if features:
            batches, total = _feature_batches(args.bag, memory, source, args.batch, args.robot), None
        else:
            total = bags.camera_source(args.bag, args.topic).messages
            batches = _image_batches(args, memory, source)
        done = {"read": 0, "written": 0, "skipped": 0, "refused": 0, "rows": 0}
        for rows, read in batches:
            done["read"] += read
            if len(rows.vectors):
                try:
                    c = memory.add(rows)
                except StoreError as err:  # another model's vectors: refused, counted, the rest go on
                    done["refused"] += len(rows.vectors)
                    print(f"index: refused {len(rows.vectors)} rows: {err}", file=sys.stderr)
                    continue
                done["written"] += c.written
                done["skipped"] += c.skipped
            done["skipped"] += read - len(rows.vectors)  # stored already: not encoded (or not read) again
            of = f"/{total}" if total else ""
            print(f"\rindex: {done['read']}{of} messages, {done['written']} written, {done['skipped']} already "
                  "stored", end="", file=sys.stderr, flush=True)  # fmt: skip
        print(file=sys.stderr)
        done["rows"] = len(memory)  # a server store: its count, every robot's rows
        done["store"] = memory.spec
    return done


def _run_index(args: argparse.Namespace) -> int:
    try:
        done = index_bag(args)
    except OpenclawError as err:
        print(f"index: {err}", file=sys.stderr)
        return 2
    print(f"index: {args.bag}: {done['written']} rows written, {done['skipped']} already stored, "
          f"{done['refused']} refused; the store {done['store']} holds {done['rows']}")  # fmt: skip
    return 0


def _index_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bag", type=Path, help="rosbag2 of camera images, or of openclaw_vision/msg/VisualFeatures")
    p.add_argument("--topic", default=None, help="image topic (default: the bag's one camera)")
    p.add_argument("--batch", type=int, default=INDEX_BATCH, help="frames per model call")
    p.add_argument("--robot", default="", help="the robot that recorded the bag (each row names it; default: none)")
    _store_flag(p)
    add_image_model_arguments(p)
    add_text_model_arguments(p)  # --model, --threads (the text flags are unused here)


def contact_sheet(matches: Sequence[Match], image_bag: Path, out: Path, topic: str | None = None,
                  columns: int = 4) -> int:  # fmt: skip
    """A PNG grid of the matching frames of `image_bag` (found by stamp), captioned; returns how many were found."""
    import cv2

    wanted = {m.stamp_ns: m for m in matches}
    found: dict[int, np.ndarray] = {}
    for frame in iter_bag_frames(image_bag, topic):
        if frame.stamp_ns in wanted and frame.stamp_ns not in found:
            rgb = frame.decode().to_rgb() if hasattr(frame, "decode") else frame.to_rgb()
            h, w = rgb.shape[:2]
            thumb = cv2.resize(rgb, (THUMB_WIDTH, max(1, round(h * THUMB_WIDTH / w))), interpolation=cv2.INTER_AREA)
            found[frame.stamp_ns] = thumb
            if len(found) == len(wanted):
                break
    if not found:
        raise ToolError(f"{image_bag}: none of the {len(matches)} matching stamps is a frame of this bag")
    cells = []
    for m in matches:
        if m.stamp_ns not in found:
            continue
        thumb = cv2.cvtColor(found[m.stamp_ns], cv2.COLOR_RGB2BGR)
        caption = np.full((44, THUMB_WIDTH, 3), 255, np.uint8)
        cv2.putText(caption, f"{m.stamp_ns}", (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(caption, f"{m.camera}  {m.score:.3f}", (4, 36), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1,
                    cv2.LINE_AA)  # fmt: skip
        cells.append(np.vstack([thumb, caption]))
    height = max(c.shape[0] for c in cells)
    cells = [np.vstack([c, np.full((height - c.shape[0], THUMB_WIDTH, 3), 255, np.uint8)]) for c in cells]
    while len(cells) % columns:
        cells.append(np.full((height, THUMB_WIDTH, 3), 255, np.uint8))
    rows = [np.hstack(cells[i : i + columns]) for i in range(0, len(cells), columns)]
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), np.vstack(rows)):
        raise ToolError(f"{out}: could not write the contact sheet")
    return len(found)


def _run_search(args: argparse.Namespace) -> int:
    from .label import load_text_encoder

    try:
        with VisualMemory(args.store) as memory:
            if not len(memory):
                raise ToolError(f"{memory.spec}: the store is empty; `openclaw-vision index BAG` first")
            text = load_text_encoder(args)
            matches = memory.search_text(text, args.text, args.top_k, since_ns=args.since_ns,
                                         until_ns=args.until_ns, camera=args.camera, robot=args.robot)  # fmt: skip
        for m in matches:
            print(f"{m.stamp_ns} {m.camera} {m.frame_id} {m.score:.4f}" + (f" {m.robot}" if m.robot else ""))
        if args.sheet:
            if not args.images:
                raise ToolError("--sheet needs --images BAG (the bag the frames are read back from)")
            n = contact_sheet(matches, args.images, args.sheet, args.topic)
            print(f"search: wrote {args.sheet} ({n} of {len(matches)} frames)", file=sys.stderr)
    except OpenclawError as err:
        print(f"search: {err}", file=sys.stderr)
        return 2
    return 0


def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="what to look for, e.g. 'a forklift'")
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--camera", default=None, help="only this camera topic")
    p.add_argument("--robot", default=None, help="only rows this robot wrote (its memory node's `robot`)")
    p.add_argument("--since-ns", type=int, default=None, help="only frames stamped at or after this")
    p.add_argument("--until-ns", type=int, default=None, help="only frames stamped at or before this")
    p.add_argument("--images", type=Path, default=None, help="image bag to read the matching frames back from")
    p.add_argument("--topic", default=None, help="image topic of --images (default: its one camera)")
    p.add_argument("--sheet", type=Path, default=None, help="write a contact sheet PNG of the matches here")
    _store_flag(p)
    add_text_model_arguments(p)


INDEX = Command(_index_arguments, _run_index)
SEARCH = Command(_search_arguments, _run_search)
