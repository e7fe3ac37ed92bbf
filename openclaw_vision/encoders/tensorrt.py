"""TensorRT backend: an explicitly quantised engine, built once from the Q/DQ ONNX and cached.

Build (first start, or `openclaw-vision build-engine`):
    ONNX parser → network → builder config → serialised engine → EngineCache
    - TensorRT 10: the network is weakly typed; the INT8 flag lets the Q/DQ layers run in INT8
      and the FP16 flag lets TensorRT pick FP16 for the rest.
    - TensorRT 11 removed those flags (and EXPLICIT_BATCH, the calibrators, execute_async_v2):
      a Q/DQ network is built STRONGLY_TYPED, every tensor keeps the type the ONNX gives it.
    One optimisation profile: batch 1 up to `max_batch` (BuildOptions, part of the cache key), so
    the multi-camera node's batches of one frame per camera run on one engine; a batch smaller
    than `max_batch` runs at its own size (`set_input_shape`), never padded.

Run: the engine's input and output tensors are CuPy buffers whose addresses are set once;
`execute_async_v3` is queued on the encoder's one stream, behind the preprocessing kernel that
wrote the input binding (`GpuEncoder.frame_preprocessor`); the embeddings come back through a
pinned host buffer.

`tensorrt` is imported where it is installed (JetPack, or pip's `tensorrt`; the bare
`tensorrt_bindings` wheel works too); this module imports without it. For static checks the
code is typed against the real bindings' stubs (mypy, see the gpu_static tests).
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsInt, TextIO, cast

import numpy as np

from .base import EncoderError
from .engine_cache import BuildOptions, EngineCache, EngineKey, file_sha256
from .gpu_common import CudaDevice, GpuEncoder

log = logging.getLogger(__name__)


def import_tensorrt() -> Any:
    """The TensorRT Python module, or None where it is not installed (or its libraries are not)."""
    for name in ("tensorrt", "tensorrt_bindings"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
        except OSError as err:  # bindings present, libnvinfer missing
            log.debug("importing %s failed: %s", name, err)
    return None


if TYPE_CHECKING:
    import tensorrt as trt
else:
    trt = import_tensorrt()


class EngineBuildError(EncoderError):
    """TensorRT could not parse the ONNX model or build an engine from it."""


def major_version() -> int:
    return int(str(trt.__version__).split(".")[0])


_DTYPES = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32}


def numpy_dtype(dtype: trt.DataType) -> type:
    if dtype.name not in _DTYPES:
        raise EncoderError(f"engine tensor of type {dtype.name}: expected FLOAT or HALF")
    return _DTYPES[dtype.name]


_SEVERITY = {
    "INTERNAL_ERROR": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "VERBOSE": logging.DEBUG,
}
_classes: dict[str, type] = {}


def make_logger(level: int = logging.WARNING) -> trt.ILogger:
    """A trt.ILogger that forwards TensorRT's messages to Python logging (class made on first use)."""
    if "logger" not in _classes:

        class TrtLogger(trt.ILogger):
            def __init__(self, level: int) -> None:
                trt.ILogger.__init__(self)
                self.level = level

            def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
                py = _SEVERITY.get(severity.name, logging.INFO)
                if py >= self.level:
                    log.log(py, "TensorRT: %s", msg)

        _classes["logger"] = TrtLogger
    return _classes["logger"](level)


def make_progress(stream: TextIO | None = None) -> trt.IProgressMonitor:
    """A trt.IProgressMonitor printing the builder's phases and steps (the `build-engine` display)."""
    if "progress" not in _classes:

        class Progress(trt.IProgressMonitor):
            def __init__(self, stream: TextIO) -> None:
                trt.IProgressMonitor.__init__(self)
                self.stream = stream
                self.tty = stream.isatty()
                self.depth: dict[str, int] = {}
                self.steps: dict[str, int] = {}
                self.started: dict[str, float] = {}

            def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: SupportsInt) -> None:
                self.depth[phase_name] = self.depth.get(parent_phase or "", -1) + 1
                self.steps[phase_name] = int(num_steps)
                self.started[phase_name] = time.perf_counter()
                self._line(phase_name, 0, final=False)

            def step_complete(self, phase_name: str, step: SupportsInt) -> bool:
                if self.tty:
                    self._line(phase_name, int(step) + 1, final=False)
                return True  # False would cancel the build

            def phase_finish(self, phase_name: str) -> None:
                self._line(phase_name, self.steps.get(phase_name, 0), final=True)

            def _line(self, phase: str, step: int, final: bool) -> None:
                indent = "  " * self.depth.get(phase, 0)
                total = self.steps.get(phase, 0)
                text = f"{indent}{phase} [{step}/{total}]"
                if final:
                    text += f" {time.perf_counter() - self.started.get(phase, time.perf_counter()):.1f} s"
                if self.tty:
                    self.stream.write("\r\033[K" + text + ("\n" if final or step == 0 else ""))
                elif final:
                    self.stream.write(text + "\n")
                self.stream.flush()

        _classes["progress"] = Progress
    return _classes["progress"](stream or sys.stderr)


def build_serialized(
    onnx_path: Path,
    options: BuildOptions,
    progress: trt.IProgressMonitor | None = None,
    logger: trt.ILogger | None = None,
) -> bytes:
    """Parse the Q/DQ ONNX and build a serialised engine (raises EngineBuildError with TensorRT's reasons)."""
    logger = logger or make_logger()
    opts = options.resolved(major_version())
    builder = trt.Builder(logger)
    flags = 0
    if opts.typing == "strong":
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(f"TensorRT cannot parse {onnx_path}: " + "; ".join(errors or ["no reason given"]))
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, opts.workspace_mb << 20)
    if opts.typing == "int8+fp16":
        # TensorRT 10: the flags exist (deprecated since 10.12); looked up by name so this module
        # also type-checks against TensorRT 11's bindings, which no longer have them
        for name in ("INT8", "FP16"):
            config.set_flag(trt.BuilderFlag.__members__[name])
    inp = network.get_input(0)
    c, h, w = inp.shape[1], inp.shape[2], inp.shape[3]
    profile = builder.create_optimization_profile()
    one = trt.Dims((1, c, h, w))
    profile.set_shape(inp.name, one, one, trt.Dims((opts.max_batch, c, h, w)))
    config.add_optimization_profile(profile)
    if progress is not None:
        config.progress_monitor = progress
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"TensorRT could not build an engine from {onnx_path} (see the log above)")
    # IHostMemory exposes the buffer protocol (the bindings' stubs do not declare it)
    return bytes(memoryview(cast(Any, serialized)))


def engine_key(model_path: Path, device: Any, options: BuildOptions) -> EngineKey:
    """The cache key of the engine for this ONNX file on this GPU with this TensorRT and these options."""
    resolved = options.resolved(major_version())
    return EngineKey(file_sha256(model_path), device.name, device.compute_capability, str(trt.__version__), resolved)


class TensorRTEncoder(GpuEncoder):
    """An INT8 TensorRT engine behind ImageEncoder; input and output live on the GPU."""

    backend = "tensorrt"

    def __init__(
        self,
        model_path: str | Path,
        options: BuildOptions | None = None,
        cache: EngineCache | None = None,
        device: Any = None,
        allow_build: bool = True,
        progress: trt.IProgressMonitor | None = None,
    ) -> None:
        if trt is None:
            raise EncoderError("TensorRT is not installed (JetPack's python3-libnvinfer, or pip install tensorrt)")
        path = Path(model_path)
        self._read_metadata(path)
        self.device = device or CudaDevice()
        self.logger = make_logger()
        self.key = engine_key(path, self.device, options or BuildOptions())
        self.options = self.key.options
        self.cache = cache or EngineCache()
        self.model_name = path.name.removesuffix(".onnx")
        self.engine_path, _ = self.cache.paths(self.model_name, self.key)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self._load_or_build(path, allow_build, progress)
        self._bind()

    def _load_or_build(self, path: Path, allow_build: bool, progress: trt.IProgressMonitor | None) -> trt.ICudaEngine:
        data = self.cache.load(self.model_name, self.key)
        if data is not None:
            engine = self.runtime.deserialize_cuda_engine(data)
            if engine is not None:
                log.info("TensorRT engine %s loaded (%d MB)", self.engine_path, len(data) >> 20)
                return engine
            log.warning(
                "TensorRT %s could not deserialise %s (corrupt, or built by another version): rebuilding",
                trt.__version__,
                self.engine_path,
            )
            self.cache.invalidate(self.model_name, self.key)
        if not allow_build:
            raise EncoderError(f"no usable TensorRT engine for {path}; build it with `openclaw-vision build-engine`")
        log.info(
            "building TensorRT engine for %s (%s, TensorRT %s, %s; takes minutes, once)",
            path,
            self.device.name,
            trt.__version__,
            self.options.typing,
        )
        t0 = time.perf_counter()
        data = build_serialized(path, self.options, progress, self.logger)
        self.cache.store(
            self.model_name, self.key, data, onnx_path=str(path), build_seconds=round(time.perf_counter() - t0, 1)
        )
        engine = self.runtime.deserialize_cuda_engine(data)
        if engine is None:
            raise EngineBuildError(f"TensorRT built an engine for {path} but cannot deserialise it")
        log.info("TensorRT engine built in %.0f s -> %s", time.perf_counter() - t0, self.engine_path)
        return engine

    def _bind(self) -> None:
        engine = self.engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        if len(inputs) != 1 or len(outputs) != 1:
            raise EncoderError(f"engine has inputs {inputs} and outputs {outputs}; expected one of each")
        self._in, self._out = inputs[0], outputs[0]
        if numpy_dtype(engine.get_tensor_dtype(self._out)) != np.float32:
            raise EncoderError(
                f"engine output {self._out} is {engine.get_tensor_dtype(self._out).name}, expected FLOAT"
            )
        self._allocate(self.device, self.options.max_batch, numpy_dtype(engine.get_tensor_dtype(self._in)))
        self.context = engine.create_execution_context()
        if self.context is None:
            raise EncoderError("TensorRT could not create an execution context (out of GPU memory?)")
        self.context.set_tensor_address(self._in, self.device_ptr(self.input))
        self.context.set_tensor_address(self._out, self.device_ptr(self.output))
        self._batch = 0

    @staticmethod
    def device_ptr(array: Any) -> int:
        return int(array.__cuda_array_interface__["data"][0])

    def enqueue(self, n: int) -> None:
        s = self.image_size
        if n != self._batch:
            if not self.context.set_input_shape(self._in, (n, 3, s, s)):
                raise EncoderError(f"engine rejects batch {n} (profile 1..{self.options.max_batch})")
            self._batch = n
        if not self.context.execute_async_v3(self.device.stream_handle):
            raise EncoderError("TensorRT execute_async_v3 failed (see the log)")


def build_engine_cli(
    model_path: Path, options: BuildOptions, cache_root: Path | None, force: bool, out: TextIO | None = None
) -> int:
    """`openclaw-vision build-engine`: build (or find) the cached engine, with a progress display."""
    out = out or sys.stdout
    if trt is None:
        print(
            "build-engine: TensorRT is not installed here (JetPack's python3-libnvinfer, or pip install tensorrt)",
            file=sys.stderr,
        )
        return 2
    from .trt_rules import explicit_quantisation_problems

    problems = explicit_quantisation_problems(model_path)
    if problems:
        print(f"build-engine: {model_path} breaks TensorRT's explicit-quantisation rules:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    cache = EngineCache(cache_root)
    device = CudaDevice()
    if force:
        cache.invalidate(model_path.name.removesuffix(".onnx"), engine_key(model_path, device, options))
    t0 = time.perf_counter()
    try:
        enc = TensorRTEncoder(model_path, options, cache, device, progress=make_progress())
    except EncoderError as err:
        print(f"build-engine: {err}", file=sys.stderr)
        return 1
    print(
        f"engine {enc.engine_path} ready for {enc.model_id} on {enc.device.name} "
        f"(TensorRT {trt.__version__}, {enc.options.typing}, batch 1..{enc.options.max_batch}; "
        f"{time.perf_counter() - t0:.1f} s)",
        file=out,
    )
    return 0
