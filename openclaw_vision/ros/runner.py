"""What every node's `main` does the same way: parse config, strip ROS args, run until a signal.

A node class provides `start()`, `stop()` and `stats()`; `run_node` does the rest, so each
node module keeps only what is its own (its callbacks, worker and diagnostics).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from .. import config as cfgmod
from ..resources import share_path
from .transport import create_transport


class Throttle:
    """Log a repeated problem at most once per `period` seconds, with how often it happened."""

    def __init__(self, period: float = 2.0) -> None:
        self.period, self._last, self._n = period, 0.0, 0

    def __call__(self, fn, text: str, *args) -> None:
        self._n += 1
        now = time.monotonic()
        if now - self._last >= self.period:
            fn(text + " (%d such since last report)", *args, self._n)
            self._last, self._n = now, 0


def every(period: float, stop: threading.Event, fn, log: logging.Logger) -> None:
    """Call `fn` every `period` seconds until `stop` is set; an exception is logged, not fatal."""
    while not stop.wait(period):
        try:
            fn()
        except Exception:
            log.exception("periodic %s failed", getattr(fn, "__name__", "task"))


def strip_ros_args(argv: list[str]) -> list[str]:
    """Drop `--ros-args ...` (added by ros2 launch); rclpy reads those itself."""
    out, skipping = [], False
    for a in argv:
        if a == "--ros-args":
            skipping = True
        elif skipping and a == "--":
            skipping = False
        elif not skipping:
            out.append(a)
    return out


def build_config(argv: list[str], prog: str, node_name: str, cls, yaml_name: str):
    """(validated config, parsed args): defaults ← config/<yaml_name> (or --config) ← flags."""
    parser = argparse.ArgumentParser(prog=prog, description=f"Run the {node_name}.")
    parser.add_argument(
        "--config", type=Path, default=None, help=f"ROS 2 parameters YAML (default: config/{yaml_name})"
    )
    parser.add_argument("--stats-json", type=Path, default=None, help="write final counters and stage times on exit")
    parser.add_argument("--log-level", default="INFO")
    cfgmod.add_arguments(parser, cls)
    args = parser.parse_args(strip_ros_args(argv))
    config_file = args.config or share_path("config", yaml_name)
    overrides = {k: getattr(args, k) for k in cls().as_dict()}
    return cfgmod.from_sources(config_file, node_name, overrides, cls), args


def ros_overrides(transport, cfg, log: logging.Logger):
    """With rclpy, declared ROS parameters override the file and flags; None on a bad value (logged)."""
    if not hasattr(transport, "declare_parameters"):
        return cfg
    try:
        return type(cfg).from_dict(transport.declare_parameters(cfg.as_dict())).validate()
    except cfgmod.ConfigError as err:
        log.error("configuration error: %s", err)
        return None


def run_until_signal(node, stats_json: Path | None, counts: tuple[str, ...], log: logging.Logger) -> dict:
    """Start the node, wait for SIGINT/SIGTERM, stop it, log and optionally save its final stats."""
    node.start()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    node.stop()
    stats = node.stats()
    log.info("stopped: %s", json.dumps({k: stats[k] for k in counts if k in stats}))
    if stats_json:
        stats_json.parent.mkdir(parents=True, exist_ok=True)
        stats_json.write_text(json.dumps(stats, indent=2))
    return stats


def node_main(argv: list[str], prog: str, node_name: str, cls, yaml_name: str, counts: tuple[str, ...],
              build, errors: tuple[type[BaseException], ...], log: logging.Logger) -> int:  # fmt: skip
    """A node's whole `main`: config → logging → transport → ROS parameter overrides → `build(cfg,
    transport)` → run until SIGINT/SIGTERM. A bad configuration or a `build` failure of one of
    `errors` (a missing model, a bad checkpoint) exits 2 with the reason, before any work starts."""
    try:
        cfg, args = build_config(argv, prog, node_name, cls, yaml_name)
    except cfgmod.ConfigError as err:
        print(f"{node_name}: configuration error: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    transport = create_transport(cfg.transport, node_name)
    try:
        cfg = ros_overrides(transport, cfg, log)
        if cfg is None:
            return 2
        try:
            node = build(cfg, transport)
        except errors as err:
            log.error("%s", err)
            return 2
        run_until_signal(node, args.stats_json, counts, log)
        return 0
    finally:
        transport.close()
