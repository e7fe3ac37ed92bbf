"""The one backend table: every list of backends (config choices, launch arguments, auto order, the
INT8 gate's runtimes) is read from it, and `auto` never leaves the machine."""

from __future__ import annotations

import subprocess
import sys

from openclaw_vision.encoders import backends
from openclaw_vision.ros.launch_args import argument_description
from openclaw_vision.runtime.config import EncoderConfig


def test_every_list_of_backends_is_the_tables():
    assert backends.names() == ("tensorrt", "torch", "openvino", "onnxruntime", "triton")
    assert EncoderConfig.params()["backend"].choices == ("auto", *backends.names())
    assert argument_description("backend").startswith("auto | tensorrt | torch | openvino | onnxruntime | triton;")
    assert [b.name for b in backends.auto_order()] == ["tensorrt", "torch", "openvino", "onnxruntime"]
    assert [b.name for b in backends.TABLE if b.gpu] == ["tensorrt", "torch"]
    assert backends.cpu_runtimes() == ("openvino", "onnxruntime")


def test_the_table_imports_without_numpy_or_a_runtime():
    code = (
        "import sys, openclaw_vision.encoders.backends as b; b.choices(); "
        "heavy = {'numpy', 'onnxruntime', 'openvino', 'tritonclient'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_triton_says_what_is_missing_when_its_client_is_not_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    missing = lambda name, *a: None if name == "tritonclient" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", missing)
    ok, why = backends.get("triton").usable()
    assert not ok and "pip install openclaw_vision[triton]" in why


def test_a_triton_url_launch_argument_stays_text():
    from openclaw_vision.ros.launch_args import node_overrides

    encoder, _, _ = node_overrides({"backend": "triton", "triton_url": "10:50"})
    assert encoder == {"backend": "triton", "triton_url": "10:50"}  # YAML 1.1 alone would make it 650
