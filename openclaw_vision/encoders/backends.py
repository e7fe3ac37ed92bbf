"""The one table of image encoder backends: what config, launch, `auto`, bench and quant all read.

Each row says how to tell whether the backend can run here (`usable`, cheap: no heavy import to
learn there is no GPU), how to build it (`build`, imports its module only then), and what kind it
is (`gpu`: under `auto` a GPU backend that probes usable but fails to start falls back to the next
row; `auto`: whether `backend: auto` may pick it at all; `cpu_runtime`: it runs our ONNX files on
this CPU, so the INT8 gate is measured on it). Rows are in `auto`'s order of preference:
tensorrt > torch (CUDA) > openvino > onnxruntime; triton, a remote server, is never picked by
`auto` (where the model runs is the user's decision). Adding a backend is its module plus one row.

Kept free of numpy and of the backends' modules: the launch file reads the names at launch time
with the standard library and PyYAML only (ros/launch_args.py). Every encoder is made through
`Backend.open`, which builds the row's encoder and applies the INT8 gate policy (gating.py): no
backend can skip the gate, and a backend's own code never sees the policy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import cpu
from .options import EncoderOptions

#: the configuration value that means "the first usable row of `auto` order"
AUTO = "auto"


@dataclass(frozen=True)
class Backend:
    name: str
    #: () -> (usable here, why): `auto` logs the reason of every row it skips
    usable: Callable[[], tuple[bool, str]]
    #: (model file, options) -> an ImageEncoder
    build: Callable[[Path, EncoderOptions], Any]
    gpu: bool = False
    auto: bool = True
    cpu_runtime: bool = False
    #: what to install when it is missing (the pip extra or package)
    install: str = ""
    description: str = ""
    #: () -> where an INT8 verdict of this runtime holds (`cpu.isa_record`: the ISA class its integer
    #: kernels run at); None: a verdict holds wherever the runtime runs (GPUs, a remote server)
    isa: Callable[[], dict] | None = None
    #: (the built encoder's ModelInfo) -> why `auto` should pass it on to the next row (a speed rule,
    #: not the gate: e.g. OpenVINO INT8 on a CPU without VNNI), or None; explicit choices ignore it
    auto_declines: Callable[[Any], str | None] | None = None

    def open(self, model: Path, options: EncoderOptions):
        """Build this backend's encoder for `model` and apply the INT8 gate policy to it: the one way
        every caller (the node, quant, bench, tools) gets an encoder of a table row (encoders/gating.py)."""
        from .gating import open_checked

        return open_checked(self, Path(model), options)


def _cuda_gpu() -> tuple[bool, str]:
    """Whether CuPy (the GPU preprocessing kernel's launcher) sees a GPU, and why (not)."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install .[gpu])"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # no driver, no device: CuPy raises its own CUDA errors
        return False, f"no usable CUDA device ({err})"
    return (True, f"{count} CUDA device(s)") if count > 0 else (False, "no CUDA device")


def _tensorrt_usable() -> tuple[bool, str]:
    if importlib.util.find_spec("tensorrt") is None and importlib.util.find_spec("tensorrt_bindings") is None:
        return False, "TensorRT is not installed"
    ok, why = _cuda_gpu()
    return ok, (f"TensorRT importable, {why}" if ok else why)


def _torch_usable() -> tuple[bool, str]:
    ok, why = _cuda_gpu()  # checked first: importing torch only to learn there is no GPU costs seconds
    if not ok:
        return False, why
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
        return False, "torch and onnx are needed"
    from .torch_cuda import cuda_usable

    reason = cuda_usable()
    return (True, f"torch sees CUDA, {why}") if reason is None else (False, reason)


def _openvino_usable() -> tuple[bool, str]:
    from .openvino import usable

    return usable()


def _triton_usable() -> tuple[bool, str]:
    if importlib.util.find_spec("tritonclient") is None:
        return False, "tritonclient is not installed (pip install openclaw_vision[triton])"
    return True, "tritonclient importable (the server is checked when the encoder starts)"


def _build_tensorrt(path: Path, o: EncoderOptions):
    from .tensorrt import TensorRTEncoder

    return TensorRTEncoder(path)


def _build_torch(path: Path, o: EncoderOptions):
    from .torch_cuda import TorchCudaEncoder

    return TorchCudaEncoder(path)


def _build_openvino(path: Path, o: EncoderOptions):
    from .openvino import OpenVinoEncoder

    return OpenVinoEncoder(path, threads=o.threads, performance_hint=o.performance_hint)


def _openvino_declines(info) -> str | None:
    from .openvino import declines

    return declines(info)


def _build_onnxruntime(path: Path, o: EncoderOptions):
    from .onnxruntime import OnnxRuntimeEncoder

    return OnnxRuntimeEncoder(path, threads=o.threads, lanes=o.encode_lanes)


def _build_triton(path: Path, o: EncoderOptions):
    from .triton import TritonEncoder

    return TritonEncoder(path, o)


#: in `auto` order (rows with auto=False are never picked by it)
TABLE: tuple[Backend, ...] = (
    Backend("tensorrt", _tensorrt_usable, _build_tensorrt, gpu=True, install="TensorRT (JetPack or pip tensorrt)",
            description="TensorRT engine on an NVIDIA GPU"),
    Backend("torch", _torch_usable, _build_torch, gpu=True, install="a CUDA build of torch",
            description="the ONNX graph run by torch on CUDA"),
    Backend("openvino", _openvino_usable, _build_openvino, cpu_runtime=True, install="openclaw_vision[openvino]",
            description="OpenVINO's CPU plugin (x86)", isa=lambda: cpu.isa_record(onednn=True),
            auto_declines=_openvino_declines),
    Backend("onnxruntime", lambda: (True, "the CPU default"), _build_onnxruntime, cpu_runtime=True,
            description="ONNX Runtime on the CPU", isa=cpu.isa_record),
    Backend("triton", _triton_usable, _build_triton, auto=False, install="openclaw_vision[triton]",
            description="a Triton Inference Server over gRPC (triton_url); never picked by auto"),
)  # fmt: skip


def names() -> tuple[str, ...]:
    """Every backend's name, in table order."""
    return tuple(b.name for b in TABLE)


def choices() -> tuple[str, ...]:
    """The values the `backend` key takes: auto and every row."""
    return (AUTO, *names())


def auto_order() -> tuple[Backend, ...]:
    """The rows `backend: auto` tries, best first."""
    return tuple(b for b in TABLE if b.auto)


def cpu_runtimes() -> tuple[str, ...]:
    """Backends that run our ONNX files on this CPU (the INT8 gate is measured on each)."""
    return tuple(b.name for b in TABLE if b.cpu_runtime)


def get(name: str) -> Backend:
    """The row called `name`; a KeyError naming the choices otherwise."""
    for b in TABLE:
        if b.name == name:
            return b
    raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(choices())}")
