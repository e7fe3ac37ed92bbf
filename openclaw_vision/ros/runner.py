"""What every node's `main` does the same way: config, ROS arguments, transport, parameters, run.

A node class provides `start()`, `stop()`, `stats()` and `reconfigure(changes)`; `node_main`
does the rest, so each node module keeps only what is its own (callbacks, worker, diagnostics).

Where a value comes from, later sources winning: the dataclass defaults ← the parameters file
(`--config`, default config/<node>.yaml) ← command-line flags ← ROS parameters on the command
line (`--ros-args --params-file F -p k:=v`, what `ros2 launch` passes). The ROS parameters are
read here, before the transport exists, so `transport` itself can come from them, and the
Cyclone path honours them too. With rclpy, every key is then declared as a ROS parameter with
its descriptor, and the node's `reconfigure` is called for `ros2 param set` (see rclpy_transport).
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
from .. import threads
from ..resources import share_path
from .ros_args import ros_parameters, split_ros_args
from .transport import create_transport

#: parameters rclpy declares on every node itself (Humble rclpy/time_source.py): not ours, not an error
RCLPY_OWN_PARAMETERS = ("use_sim_time",)


#: longest wait between two looks at a changed period (a shorter period is taken within this time)
PERIOD_POLL_S = 0.1


def every(period, stop: threading.Event, fn, log: logging.Logger) -> None:
    """Call `fn` every `period` seconds until `stop` is set; an exception is logged, not fatal.

    `period` is a number or a function giving it: a period changed at run time (the
    diagnostics_period parameter) counts from the last call, not after the old wait ends."""
    get = period if callable(period) else (lambda: period)
    last = time.monotonic()
    while not stop.wait(max(0.0, min(PERIOD_POLL_S, last + get() - time.monotonic()))):
        if time.monotonic() - last < get():
            continue
        last = time.monotonic()
        try:
            fn()
        except Exception:
            log.exception("periodic %s failed", getattr(fn, "__name__", "task"))


def strip_ros_args(argv: list[str]) -> list[str]:
    """The program's own arguments: `--ros-args ... [--]` (added by ros2 launch) removed."""
    return split_ros_args(argv)[0]


def build_config(argv: list[str], prog: str, node_name: str, cls, yaml_name: str):
    """(validated config, parsed args): defaults ← config/<yaml_name> (or --config) ← flags ← ROS parameters.

    `args.ignored_ros_parameters` lists ROS parameters on the command line that are not this
    node's keys (a robot-wide `/**` file, a typo): rclpy ignores undeclared overrides too."""
    parser = argparse.ArgumentParser(prog=prog, description=f"Run the {node_name}.")
    parser.add_argument(
        "--config", type=Path, default=None, help=f"ROS 2 parameters YAML (default: config/{yaml_name})"
    )
    parser.add_argument("--stats-json", type=Path, default=None, help="write final counters and stage times on exit")
    parser.add_argument("--log-level", default="INFO")
    cfgmod.add_arguments(parser, cls)
    args = parser.parse_args(strip_ros_args(argv))
    config_file = args.config or share_path("config", yaml_name)
    overrides = {k: v for k, v in vars(args).items() if k in cls.params() and v is not None}
    ros = ros_parameters(argv, node_name)
    args.ignored_ros_parameters = sorted(k for k in ros if k not in cls.params() and k not in RCLPY_OWN_PARAMETERS)
    overrides.update({k: v for k, v in ros.items() if k in cls.params()})
    return cfgmod.from_sources(config_file, node_name, overrides, cls), args


def ros_overrides(transport, cfg, log: logging.Logger):
    """With rclpy, declare every key as a ROS parameter (with its descriptor) and take the values in
    force; rclpy read the same `--ros-args` as build_config, so they normally agree. None on a bad
    value (logged as the same one-line configuration error)."""
    if not hasattr(transport, "declare_parameters"):
        return cfg
    try:
        return type(cfg).from_dict(transport.declare_parameters(cfg)).validate()
    except cfgmod.ConfigError as err:
        log.error("configuration error: %s", err)
        return None


def watch_parameters(transport, node, log: logging.Logger) -> None:
    """Route run-time parameter changes (`ros2 param set`, rclpy only) to `node.reconfigure`."""
    if hasattr(transport, "on_parameters_set") and hasattr(node, "reconfigure"):
        transport.on_parameters_set(node.reconfigure)
        log.info("parameters: %s change at run time", ", ".join(k for k, p in node.cfg.params().items() if p.runtime))


def run_until_signal(node, stats_json: Path | None, counts: tuple[str, ...], log: logging.Logger) -> dict:
    """Start the node, wait for SIGINT/SIGTERM, stop it, log and optionally save its final stats."""
    node.start()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    named = threads.ours()  # before stop(): the ids of the node's threads, for per-thread CPU (bench)
    node.stop()
    stats = node.stats()
    log.info("stopped: %s", json.dumps({k: stats[k] for k in counts if k in stats}))
    if stats_json:
        stats_json.parent.mkdir(parents=True, exist_ok=True)
        stats_json.write_text(json.dumps({**stats, "threads": {str(k): v for k, v in named.items()}}, indent=2))
    return stats


def node_main(argv: list[str], prog: str, node_name: str, cls, yaml_name: str, counts: tuple[str, ...],
              build, errors: tuple[type[BaseException], ...], log: logging.Logger) -> int:  # fmt: skip
    """A node's whole `main`: config → logging → transport → ROS parameters → `build(cfg, transport)`
    → run-time parameter changes → run until SIGINT/SIGTERM. A bad configuration or a `build`
    failure of one of `errors` (a missing model, a bad checkpoint) exits 2 with the reason, before
    any work starts."""
    try:
        cfg, args = build_config(argv, prog, node_name, cls, yaml_name)
    except cfgmod.ConfigError as err:
        print(f"{node_name}: configuration error: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    if args.ignored_ros_parameters:
        log.warning("ignoring ROS parameter(s) %s: not parameters of %s", ", ".join(args.ignored_ros_parameters),
                    node_name)  # fmt: skip
    transport = create_transport(cfg.transport, node_name, [prog, *argv])
    try:
        cfg = ros_overrides(transport, cfg, log)
        if cfg is None:
            return 2
        try:
            node = build(cfg, transport)
        except errors as err:
            log.error("%s", err)
            return 2
        watch_parameters(transport, node, log)
        run_until_signal(node, args.stats_json, counts, log)
        return 0
    finally:
        transport.close()
