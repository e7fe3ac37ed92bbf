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
import os
import sys
import threading
import time
from pathlib import Path

from ..core.errors import OpenclawError
from ..core.resources import share_path
from ..runtime import config as cfgmod
from ..runtime import threads
from .ros_args import ros_parameters, split_ros_args
from .transport import create_transport

#: parameters rclpy declares on every node itself (Humble rclpy/time_source.py): not ours, not an error
RCLPY_OWN_PARAMETERS = ("use_sim_time",)


#: longest wait between two looks at a changed period (a shorter period is taken within this time)
PERIOD_POLL_S = 0.1


def every(period, stop: threading.Event, fn) -> None:
    """Call `fn` every `period` seconds until `stop` is set. An exception ends the loop: it runs under the
    node's threads.Supervisor, which logs it once, counts it and runs the loop again after a backoff.

    `period` is a number or a function giving it: a period changed at run time (the
    diagnostics_period parameter) counts from the last call, not after the old wait ends."""
    get = period if callable(period) else (lambda: period)
    last = time.monotonic()
    while not stop.wait(max(0.0, min(PERIOD_POLL_S, last + get() - time.monotonic()))):
        if time.monotonic() - last < get():
            continue
        last = time.monotonic()
        fn()


def strip_ros_args(argv: list[str]) -> list[str]:
    """The program's own arguments: `--ros-args ... [--]` (added by ros2 launch) removed."""
    return split_ros_args(argv)[0]


def node_parser(prog: str, node_name: str, cls, yaml_name: str) -> argparse.ArgumentParser:
    """A node command's flags: --config, --stats-json, --log-level and one per key of its configuration
    (the docs' flag table reads them from here too)."""
    parser = argparse.ArgumentParser(prog=prog, description=f"Run the {node_name}.")
    parser.add_argument(
        "--config", type=Path, default=None, help=f"ROS 2 parameters YAML (default: config/{yaml_name})"
    )
    parser.add_argument("--stats-json", type=Path, default=None, help="write final counters and stage times on exit")
    parser.add_argument("--log-level", default="INFO")
    cfgmod.add_arguments(parser, cls)
    return parser


def build_config(argv: list[str], prog: str, node_name: str, cls, yaml_name: str):
    """(validated config, parsed args): defaults ← config/<yaml_name> (or --config) ← flags ← ROS parameters.

    `args.ignored_ros_parameters` lists ROS parameters on the command line that are not this
    node's keys (a robot-wide `/**` file, a typo): rclpy ignores undeclared overrides too."""
    args = node_parser(prog, node_name, cls, yaml_name).parse_args(strip_ros_args(argv))
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


def build_or_stop(build, cfg, transport, stop: threads.StopSignals):
    """`build(cfg, transport)` (the model load, an engine build, a remote server's first contact) on a
    thread of its own while this one waits for it or for a stop: None when the stop came first.

    A native load cannot be interrupted, so a node asked to stop while it loads does not wait for the
    load: the caller leaves at once with os._exit (no Python object of the half-built node is used)."""
    result: dict = {}

    def run() -> None:
        try:
            result["node"] = build(cfg, transport)
        except BaseException as err:  # handed to the main thread, which raises it
            result["error"] = err
        finally:
            loaded.set()

    loaded = threading.Event()
    threads.Thread(target=run, name="node-build", daemon=True).start()
    while not loaded.is_set() and not stop.wait(PERIOD_POLL_S):
        pass
    if not loaded.is_set():
        return None
    if "error" in result:
        raise result["error"]
    return result["node"]


def leave_now(code: int, log: logging.Logger, why: str) -> None:
    """Exit at once with `code`, the log flushed: for a stop while a native call still runs on another
    thread (joining it could take as long as the call; a daemon thread inside a C++ extension at
    interpreter exit can abort the process: DESIGN.md)."""
    log.info("%s: exiting without waiting for it", why)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def run_until_signal(node, stats_json: Path | None, counts: tuple[str, ...], log: logging.Logger,
                     stop: threads.StopSignals | None = None) -> dict:  # fmt: skip
    """Start the node, wait for a stop (a signal, or a fatal fault of its threads), stop it, log and
    optionally save its final stats."""
    stop = stop or threads.stop_signals()
    supervisor = getattr(node, "supervisor", None)
    if supervisor is not None:
        supervisor.on_fatal = stop.fail
    node.start()  # even when a stop already came: start only starts threads, and stop() then ends them
    stop.wait()
    log.info("stopping (%s)", stop.reason)
    named = threads.ours()  # before stop(): the ids of the node's threads, for per-thread CPU (bench)
    node.stop()
    stats = node.stats()
    log.info("stopped: %s", json.dumps({k: stats[k] for k in counts if k in stats}))
    if stats_json:
        stats_json.parent.mkdir(parents=True, exist_ok=True)
        stats_json.write_text(json.dumps({**stats, "threads": {str(k): v for k, v in named.items()}}, indent=2))
    if supervisor is not None and supervisor.alive():  # a thread inside a native call that does not return
        leave_now(stop.exit_code, log, f"thread(s) {', '.join(supervisor.alive())} still in a call")
    return stats


def node_main(argv: list[str], prog: str, node_name: str, cls, yaml_name: str, counts: tuple[str, ...],
              build, errors: tuple[type[BaseException], ...], log: logging.Logger) -> int:  # fmt: skip
    """A node's whole `main`: config → logging → transport → ROS parameters → `build(cfg, transport)`
    → run-time parameter changes → run until SIGINT/SIGTERM. A bad configuration or a `build`
    failure of one of `errors` (a missing model, a bad checkpoint) exits 2 with the reason, before
    any work starts. SIGINT/SIGTERM in any phase exits 0 (StopSignals); a node whose threads keep
    failing exits 1."""
    stop = threads.stop_signals()  # installed already by the ros2 run scripts, before their imports
    try:
        cfg, args = build_config(argv, prog, node_name, cls, yaml_name)
    except cfgmod.ConfigError as err:
        print(f"{node_name}: configuration error: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    if args.ignored_ros_parameters:
        log.warning("ignoring ROS parameter(s) %s: not parameters of %s", ", ".join(args.ignored_ros_parameters),
                    node_name)  # fmt: skip
    try:
        transport = create_transport(cfg.transport, node_name, [prog, *argv])
    except OpenclawError as err:  # a transport that refuses to start (native_check): one line, exit 2
        log.error("%s", err)
        return 2
    try:
        cfg = ros_overrides(transport, cfg, log)
        if cfg is None:
            return 2
        if stop.is_set():
            log.info("stopping (%s) before the model was loaded", stop.reason)
            return 0
        log.info("loading: the model and the node's endpoints (a stop now does not wait for the load)")
        try:
            node = build_or_stop(build, cfg, transport, stop)
        except errors as err:
            log.error("%s", err)
            return 2
        if node is None:
            leave_now(0, log, f"stopping ({stop.reason}) while the node loads")
        watch_parameters(transport, node, log)
        run_until_signal(node, args.stats_json, counts, log, stop)
        return stop.exit_code
    finally:
        transport.close()
