"""The Cyclone DDS configuration a node starts with: what CYCLONEDDS_URI asks for, checked at start.

Two facts of Humble and of Linux decide whether 1080p frames arrive, and neither is reported
by DDS when it goes wrong, so the nodes check them here and say the fix in one line:

- **The socket receive buffer.** A best-effort 1080p rgb8 frame is 6 MB of UDP datagrams sent
  back to back; whatever of it does not fit the receiving socket's buffer is dropped by the
  kernel and the whole frame is lost, without a DDS sample-lost report (docs/robot-and-dds.md,
  "Cyclone DDS on the robot"). Cyclone asks for `Internal/SocketReceiveBufferSize`, and the
  kernel grants at most `net.core.rmem_max`.
- **ROS_LOCALHOST_ONLY=1.** Humble's rmw_cyclonedds_cpp then puts
  `<NetworkInterface address="127.0.0.1"/>` ahead of CYCLONEDDS_URI itself; a configuration that
  also selects an interface (config/cyclonedds-loopback.xml names `lo`) makes Cyclone refuse to
  create the domain ("the same interface may not be selected twice"). cyclonedds-python (the pip
  path) knows nothing of ROS_LOCALHOST_ONLY. `for_rclpy` and `for_cyclone` make both paths do
  what the shipped files mean, with or without it, and keep our own configs on loopback. They
  only read an environment and return the configuration to use: the process that starts DDS
  applies it (cyclone.py gives it to its domain; rclpy's node process sets it before rclpy.init).

CYCLONEDDS_URI is a comma-separated list of files (`file://…` or paths) and inline `<CycloneDDS>`
XML fragments, later ones adding to earlier ones; the checks read all of them.
"""

from __future__ import annotations

import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..core.resources import share_path

log = logging.getLogger(__name__)

#: what Humble's rmw_cyclonedds_cpp adds ahead of CYCLONEDDS_URI under ROS_LOCALHOST_ONLY=1
LOCALHOST_FRAGMENT = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces></General></Domain></CycloneDDS>"
)
RMEM_MAX = Path("/proc/sys/net/core/rmem_max")
_UNITS = {"": 1, "b": 1, "kb": 1024, "kib": 1024, "mb": 1024**2, "mib": 1024**2, "gb": 1024**3, "gib": 1024**3}


def shipped_configs() -> tuple[Path, ...]:
    return tuple(sorted(share_path("config").glob("cyclonedds-*.xml")))


def _sources(uri: str) -> list[tuple[str, str]]:
    """[(where, XML text)] of each item of a CYCLONEDDS_URI value; an unreadable file is skipped."""
    out = []
    for item in (part.strip() for part in re.split(r",(?=\s*(?:<|file:|/))", uri)):
        if not item:
            continue
        if item.startswith("<"):
            out.append(("inline", item))
            continue
        path = unquote(urlparse(item).path) if item.startswith("file:") else item
        try:
            out.append((path, Path(path).read_text()))
        except OSError:
            log.warning("DDS: cannot read %s from CYCLONEDDS_URI", path)
    return out


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _size(text: str) -> int | None:
    """Cyclone's memory size ("16MB", "65500B", "1048576") in bytes; None for "default"."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class DdsConfig:
    """What a CYCLONEDDS_URI value asks for, as far as the nodes check it."""

    uri: str
    interfaces: tuple[str, ...]  # the NetworkInterface entries, by name or address
    #: bytes asked for the socket receive buffer (the larger of min/max); None: Cyclone's default
    receive_buffer: int | None

    @classmethod
    def read(cls, uri: str) -> DdsConfig:
        interfaces: list[str] = []
        buffer = None
        for _, text in _sources(uri):
            try:
                root = ET.fromstring(text)
            except ET.ParseError:
                continue
            for el in root.iter():
                name = _local(el.tag)
                if name == "NetworkInterface":
                    interfaces.append(el.get("name") or el.get("address") or "auto")
                elif name == "SocketReceiveBufferSize":
                    sizes = [s for s in (_size(el.get("min", "")), _size(el.get("max", ""))) if s]
                    buffer = max(sizes) if sizes else buffer
        return cls(uri, tuple(interfaces), buffer)


def rmem_max() -> int | None:
    try:
        return int(RMEM_MAX.read_text())
    except (OSError, ValueError):
        return None


def receive_buffer_warning(cfg: DdsConfig, kernel_max: int | None) -> str | None:
    """One line with the fix when the kernel caps the buffer the config asks for, or it asks for none."""
    robot = share_path("config", "cyclonedds-robot.xml")
    if cfg.receive_buffer is None:
        return (f"DDS: CYCLONEDDS_URI sets no SocketReceiveBufferSize: Cyclone's default loses most 1080p frames "
                f"in the socket, uncounted; use {robot} (or add <Internal><SocketReceiveBufferSize "
                f"max=\"32MB\"/></Internal>) with net.core.rmem_max >= 33554432")  # fmt: skip
    if kernel_max is not None and kernel_max < cfg.receive_buffer:
        return (f"DDS: net.core.rmem_max is {kernel_max} B, below the {cfg.receive_buffer} B socket receive buffer "
                f"CYCLONEDDS_URI asks for: large frames overflow it and are lost uncounted; fix: "
                f"sudo sysctl -w net.core.rmem_max={cfg.receive_buffer} (keep it in /etc/sysctl.d/)")  # fmt: skip
    return None


def raise_rmem_max(want: int) -> dict:
    """net.core.rmem_max at least `want` bytes, raised here where this process may (root), as a robot's admin
    does once (`sysctl -w`; config/cyclonedds-robot.xml says so). Without it the kernel caps every socket
    receive buffer below one 1080p frame's fragments, and a process receiving several cameras' frames at once
    on its one socket loses some of them, uncounted. What it was, what it is, and why not when it could not.
    The benches call it and print the result beside their figures: runs on machines whose cap differs are
    then comparable, and none depends on whether a test raised it earlier."""
    before = rmem_max()
    if before is not None and before >= want:
        return {"rmem_max_before": before, "rmem_max": before, "raised": False, "why_not": None}
    try:
        RMEM_MAX.write_text(str(want))
    except OSError as err:
        return {"rmem_max_before": before, "rmem_max": before, "raised": False, "why_not": str(err)}
    return {"rmem_max_before": before, "rmem_max": rmem_max(), "raised": True, "why_not": None}


def robot_receive_buffer() -> int:
    """The socket receive buffer the shipped robot config asks for (bytes)."""
    return DdsConfig.read(share_path("config", "cyclonedds-robot.xml").as_uri()).receive_buffer or 0


def check_receive_buffer(uri: str | None = None) -> str | None:
    """Log (once, as a warning) and return the receive-buffer problem of the config in force, if any."""
    uri = os.environ.get("CYCLONEDDS_URI", "") if uri is None else uri
    line = receive_buffer_warning(DdsConfig.read(uri), rmem_max())
    if line:
        log.warning("%s", line)
    return line


def _without_interfaces(text: str) -> str:
    """The XML without its <Interfaces>, comments and declaration: one inline item of CYCLONEDDS_URI
    (whose items are separated by commas, which comments may hold)."""
    text = re.sub(r"<!--.*?-->|<\?xml.*?\?>", "", text, flags=re.S)
    return re.sub(r"\s*<Interfaces>.*?</Interfaces>", "", text, flags=re.S)


def _is_shipped(where: str) -> bool:
    """One of the configs this package ships, installed or in a checkout (the same bytes)."""
    try:
        text = Path(where).read_bytes()
        return any(text == p.read_bytes() for p in shipped_configs())
    except OSError:
        return False


def chosen_uri(environ: Mapping[str, str]) -> str:
    """CYCLONEDDS_URI, or the shipped loopback-only config when it is unset: what a node of ours (or a
    child started for one) runs on."""
    return environ.get("CYCLONEDDS_URI", "") or share_path("config", "cyclonedds-loopback.xml").as_uri()


def for_rclpy(environ: Mapping[str, str]) -> str | None:
    """The CYCLONEDDS_URI to hand rmw at rclpy.init, or None to leave it as it is.

    Under ROS_LOCALHOST_ONLY=1 rmw_cyclonedds selects 127.0.0.1 itself, so a config of ours that names
    lo is given to it inline without its <Interfaces> (the same file otherwise, still loopback only); a
    config of the user's that selects an interface is left as it is and one line says why the node is
    about to fail and what to do. Nothing is changed here: rmw reads the variable from the environment
    of the process that starts it, which applies the value itself (RclpyTransport)."""
    uri = environ.get("CYCLONEDDS_URI", "")
    if not (uri and environ.get("ROS_LOCALHOST_ONLY", "") == "1"):  # rmw reads exactly "1" (rmw/localhost.c)
        return None
    sources = _sources(uri)
    if not DdsConfig.read(uri).interfaces:
        return None
    if all(_is_shipped(where) or where == "inline" for where, _ in sources) and any(
        _is_shipped(where) for where, _ in sources
    ):
        log.info("DDS: ROS_LOCALHOST_ONLY=1 selects 127.0.0.1 (lo) already: %s given to rmw without its "
                 "<Interfaces>", uri)  # fmt: skip
        return ",".join(_without_interfaces(text).strip() for _, text in sources)
    log.error("DDS: CYCLONEDDS_URI (%s) selects network interface(s) %s and ROS_LOCALHOST_ONLY=1 makes "
              "rmw_cyclonedds add 127.0.0.1 as well (\"the same interface may not be selected twice\"): "
              "unset ROS_LOCALHOST_ONLY, or use %s", uri, ", ".join(DdsConfig.read(uri).interfaces),
              share_path("config", "cyclonedds-robot.xml"))  # fmt: skip
    return None


def for_cyclone(environ: Mapping[str, str]) -> str:
    """The configuration the pip path's domain is created with (cyclone.py gives it to Cyclone; the
    environment is not changed): `chosen_uri`, and with ROS_LOCALHOST_ONLY=1 and a config that selects
    no interface, 127.0.0.1 added ahead of it, as rmw_cyclonedds does (cyclonedds-python would
    otherwise pick the machine's default interface)."""
    uri = chosen_uri(environ)
    if environ.get("CYCLONEDDS_URI", ""):
        log.info("DDS: CYCLONEDDS_URI=%s (set by the environment)", uri)
    else:
        log.info("DDS: loopback-only config %s", uri)
    if environ.get("ROS_LOCALHOST_ONLY", "") == "1" and not DdsConfig.read(uri).interfaces:
        log.info("DDS: ROS_LOCALHOST_ONLY=1: interface 127.0.0.1 added, as rmw_cyclonedds does")
        return f"{LOCALHOST_FRAGMENT},{uri}"
    return uri
