"""Shared fixtures: built tiny models, sample bags, and DDS isolation.

Every DDS participant started by a test uses the shipped loopback-only Cyclone config and a
domain id of its own, so tests never touch the external network nor each other.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ["CYCLONEDDS_URI"] = (ROOT / "config" / "cyclonedds-loopback.xml").as_uri()


@pytest.fixture(scope="session", autouse=True)
def _data_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("ovhome")
    os.environ["OPENCLAW_VISION_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from openclaw_vision.models.export import export_model

    out = tmp_path_factory.mktemp("models") / "tiny.fp32.onnx"
    export_model("tiny", out)
    return out


@pytest.fixture(scope="session")
def sample_bag(tmp_path_factory) -> Path:
    """12 panning 1080p rgb8 frames at 30 fps (mcap)."""
    from openclaw_vision.bags import write_sample_bag

    path = tmp_path_factory.mktemp("bags") / "frames"
    write_sample_bag(path, frames=12, fps=30)
    return path


@pytest.fixture()
def dds_domain(monkeypatch) -> int:
    """A ROS domain id of this test's own (ports 7400 + 250·id) for in-process and child participants."""
    domain = random.Random(os.getpid() ^ id(monkeypatch)).randrange(20, 200)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    return domain
