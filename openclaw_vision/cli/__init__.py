"""`openclaw-vision`: one command for the tools (export, bag, encoder, replay, demo, text, label, index, search)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ..core.commands import Command

#: Every subcommand, in the order `--help` lists them: name ("group name" for a command under a group)
#: → (where it is defined, "module:ATTRIBUTE" in openclaw_vision; the one-line help). The attribute is a
#: commands.Command (its flags and its run function, beside the code it drives), or for a node a
#: `main(argv)` that parses its own command line (its --ros-args for rclpy). A command's module is
#: imported only when that command runs or shows its --help, so no tool loads another's dependencies.
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("build_tools.commands:EXPORT", "build a CLIP vision tower and export it to ONNX (checked vs PyTorch)"),
    "text": ("tools.label:TEXT", "unit-length CLIP text embeddings of strings, one JSON line each"),
    "label": ("tools.label:LABEL", "zero-shot label scores for every frame of a bag, one JSON line each"),
    "index": ("tools.memory:INDEX", "store the frames of a bag (images, encoded; or VisualFeatures) in visual memory"),
    "search": ("tools.memory:SEARCH", "the frames in visual memory nearest a text, one line each; a contact sheet"),
    "ingest": ("memory.ingest:COMMAND", "the fleet's ingest: one writer in front of a Chroma server, merging the "
               "robots' concurrent writes (robots pass its URL as --store)"),
    "bench-labels": ("bench.labels:COMMAND", "the labels node's latency per frame over DDS, by label-set size"),
    "tokenizer fetch": ("text.merges:COMMAND",
                        "take CLIP's BPE merges file from the open_clip_torch wheel (pip, --no-deps)"),
    "quantize": ("build_tools.commands:QUANTIZE", "INT8 Q/DQ model from calibration frames, gated on held-out frames"),
    "bag sample": ("tools.bag:SAMPLE", "write a bag of camera-like frames made from real photographs"),
    "encoder": ("ros.encoder_node:main", "run the encoder node (flags: see `openclaw-vision encoder --help`)"),
    "vlm": ("ros.vlm_node:main", "run the VLM node (flags: see `openclaw-vision vlm --help`)"),
    "labels": ("ros.labels_node:main", "run the labels node (flags: see `openclaw-vision labels --help`)"),
    "memory": ("ros.memory_node:main", "run the memory node: /visual_features into visual memory (flags: --help)"),
    "ask": ("tools.ask:COMMAND", "encoder + VLM in one process: answer a question about one frame of a bag"),
    "replay": ("tools.bag:REPLAY", "play a bag into a running encoder node and record /visual_features"),
    "bench": ("bench.run:COMMAND", "latency P50/P95/P99 per stage, side by side with the usual baselines"),
    "build-engine": ("build_tools.commands:BUILD_ENGINE",
                     "build (once) the cached TensorRT engine the tensorrt backend loads"),
    "serve": ("serving.serve:COMMAND", "a Triton server (PyTriton) hosting the image encoder; prints its gRPC URL "
              "(flags: see `openclaw-vision serve --help`)"),
    "triton-repo": ("serving.repo:COMMAND", "a Triton model repository (onnxruntime, openvino, tensorrt_plan)"),
    "ladder": ("bench.ladder:COMMAND",
               "ViT-B/32 to ViT-bigG-14 on this machine: export, INT8, memory, gate, 1080p latency"),
    "demo": ("tools.demo:COMMAND", "build the default model and a sample bag, replay it through the node"),
    "docs": ("cli.docs_tables:COMMAND", "write the docs' tables (parameters, flags, backends) from the code; --check"),
}  # fmt: skip
#: the groups' help and the attribute their chosen command is stored under
GROUPS = {"tokenizer": ("CLIP's tokenizer files", "tokcmd"), "bag": ("rosbag2 tools", "bagcmd")}

LOG_FORMAT = "[%(asctime)s] [%(name)s] %(levelname)s: %(message)s"


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: its module is imported, and its flags added, when it is the one being parsed.

    The namespace gets `command` (the Command, or a node's `main`) and `argv` (the command line after
    the command's name: what a node parses itself, what `serve` re-executes with)."""

    def __init__(self, *args, target: str | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.target, self._command = target, None

    def parse_known_args(self, args=None, namespace=None):
        if self.target is None:  # the top level or a group: its subcommands as argparse has them
            return super().parse_known_args(args, namespace)
        args = list(args or [])
        command = self._load()
        if isinstance(command, Command):
            namespace, rest = super().parse_known_args(args, namespace)
        else:
            namespace, rest = namespace or argparse.Namespace(), []
        namespace.command, namespace.argv = command, args
        return namespace, rest

    def _load(self):
        if self._command is None:
            module, attr = self.target.split(":")
            self._command = getattr(importlib.import_module(f"openclaw_vision.{module}"), attr)
            if isinstance(self._command, Command):
                self._command.add_arguments(self)
        return self._command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-vision", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    top = parser.add_subparsers(dest="cmd", required=True, parser_class=CommandParser)
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, (target, text) in COMMANDS.items():
        group, _, leaf = name.rpartition(" ")
        if group and group not in groups:
            help_text, dest = GROUPS[group]
            groups[group] = top.add_parser(group, help=help_text).add_subparsers(dest=dest, required=True)
        (groups[group] if group else top).add_parser(leaf, help=text, target=target)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if isinstance(args.command, Command):
        logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
        return args.command.run(args)
    return args.command(args.argv)  # a node: its own flags, logging and --ros-args
