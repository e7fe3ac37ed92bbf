"""Start and stop a node (encoder, labels or VLM) as a child process (demo, benchmarks, tests)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..core import children
from . import dds_config


class NodeProcess(children.Child):
    """`openclaw-vision <node> ARGS` in a process group of its own (children.Child: stopped with SIGINT,
    then killed, the whole group), its output in `log_path`.

    The child runs on CYCLONEDDS_URI when set, else on the shipped loopback-only config: its own
    environment says so (this process's is not changed); `env` adds to or overrides it."""

    def __init__(self, args: list[str], log_path: Path | None = None, env: Mapping[str, str] | None = None,
                 node: str = "encoder") -> None:  # fmt: skip
        dds = {"CYCLONEDDS_URI": dds_config.chosen_uri(os.environ)}
        super().__init__(children.cli(node, *args), log_path, {**dds, **(env or {})})
