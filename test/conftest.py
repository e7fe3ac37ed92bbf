"""Shared fixtures: built tiny models, sample bags, and DDS isolation.

Every DDS participant started by a test uses the shipped loopback-only Cyclone config and a
domain id of its own, so tests never touch the external network nor each other.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
from support.domains import LOCK_DIR, take_domain

ROOT = Path(__file__).resolve().parents[1]
os.environ["CYCLONEDDS_URI"] = (ROOT / "config" / "cyclonedds-loopback.xml").as_uri()

# A suite run in the background by a non-interactive shell (`make test &`, a CI runner) starts with SIGINT ignored,
# and every child it starts inherits that across exec. A child that sets no handler of its own (a plain Python
# sleeper, a player) then ignores the SIGINT that children.Child.stop sends first, and sits out its timeout until
# SIGKILL: test_children's late-line test took 41 s that way instead of 1.7 (twice 20 s), the soak bench's test 70 s
# instead of 30 (its player). The tests' children get SIGINT as an interactive shell would give it. (Our nodes
# install their own handlers, runtime/threads.py; a tool run in the background waits for a plain child so.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
def int8_model(tiny_model, tmp_path_factory) -> Path:
    """A Q/DQ INT8 build of `tiny_model` with fixed ranges (no calibration run: fast, deterministic)."""
    import onnx

    from openclaw_vision.quant.calibrate import Range
    from openclaw_vision.quant.graph import quantisable_layers
    from openclaw_vision.quant.qdq import build_qdq_model

    model = onnx.load(str(tiny_model))
    ranges = {layer.activation: Range(-4.0, 4.0) for layer in quantisable_layers(model)}
    q = build_qdq_model(model, quantisable_layers(model), ranges, "s8s8", metadata={"precision": "int8"})
    path = tmp_path_factory.mktemp("int8") / "tiny.int8.onnx"
    onnx.save(q, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_text_model(tmp_path_factory) -> Path:
    """The text tower of the same random tiny model (same model id as `tiny_model`)."""
    from openclaw_vision.models.export import export_model

    out = tmp_path_factory.mktemp("models") / "tiny.text.fp32.onnx"
    export_model("tiny", out, tower="text")
    return out


@pytest.fixture()
def data_home(tmp_path, monkeypatch) -> Path:
    """An empty data home of this test's own (children inherit it): no text tower unless the test puts one there.

    Whether `quantize` finds a text tower beside the image model decides whether the gate has
    a text term; that must be the test's choice, not a side effect of whichever test ran first
    in the session's shared home.
    """
    home = tmp_path / "ovhome"
    home.mkdir()
    monkeypatch.setenv("OPENCLAW_VISION_HOME", str(home))
    return home


@pytest.fixture()
def home_with_text_tower(data_home, tiny_text_model) -> Path:
    """`data_home` holding the tiny model's text tower where `quantize` looks for it (same model id)."""
    import shutil

    from openclaw_vision.text.build import default_text_model_path

    dst = default_text_model_path("tiny")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_text_model, dst)
    return data_home


@pytest.fixture(scope="session")
def sample_bag(tmp_path_factory) -> Path:
    """12 panning 1080p rgb8 frames at 30 fps (mcap)."""
    from openclaw_vision.runtime.bags import write_sample_bag

    path = tmp_path_factory.mktemp("bags") / "frames"
    write_sample_bag(path, frames=12, fps=30)
    return path


DOMAINS = range(20, 200)  # ports 7400 + 250·id stay below 57 400


@pytest.fixture()
def dds_domain(monkeypatch):
    """A ROS domain id of this test's own (ports 7400 + 250·id) for in-process and child participants.

    Held with an exclusive file lock for the test's duration, so test runs in several checkouts
    at once (or pytest-xdist workers) never share a domain and hear each other's nodes.
    """
    order = list(DOMAINS)
    random.Random(os.getpid() ^ id(monkeypatch)).shuffle(order)
    got = take_domain(order)
    if got is None:
        pytest.fail(f"no free DDS domain in {DOMAINS} (locks in {LOCK_DIR})")
    domain, handle = got
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    try:
        yield domain
    finally:
        handle.close()
