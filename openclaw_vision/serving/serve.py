"""`openclaw-vision serve`: a Triton Inference Server hosting our image encoder, through PyTriton.

For a companion box without the Triton container (and for the tests): PyTriton's wheel bundles
tritonserver with its Python backend; our process runs the encoder (the class the node would
use, picked by the backend table as the node picks it) and Triton's Python-backend stub hands it
each batch the dynamic batcher merged. The model has the name, tensors and `parameters` (model
id, precision, sizes) that `triton-repo` writes for the official container, so a robot's
`backend: triton` cannot tell the two servers apart.

Listens on loopback unless --address says otherwise; the HTTP endpoint PyTriton itself needs
stays on 127.0.0.1, metrics are off. Prints `grpc://HOST:PORT` once the model is ready.

Two traps, both handled here. PyTriton 0.7.0 pins numpy<2, and with NumPy 2 its Python-backend
stub answers every request with an empty output (measured: shape right, no bytes), while the
project's venv has NumPy 2 (OpenCV 5 needs it). So the server runs in a venv of its own
(`make setup` builds .venv/serve with the `serve` extra; or $OPENCLAW_VISION_SERVE_PYTHON), and
`openclaw-vision serve` re-executes itself there when this interpreter cannot host PyTriton.
And the Python-backend stub links libpython3.11.so.1.0 and loads it from
the library path; a venv made from another 3.11 build (pyenv's, here) then fails to load the
model ("'_thread.RLock' object has no attribute '_recursion_count'") unless LD_LIBRARY_PATH
starts with the running interpreter's own lib/ (sys.base_prefix/lib).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import sysconfig
from pathlib import Path

from ..core.children import free_port
from ..core.commands import Command
from ..core.resources import PRECISIONS, default_model_path
from ..models.configs import DEFAULT_MODEL
from .repo import DEFAULT_MAX_BATCH, DEFAULT_QUEUE_DELAY_US

log = logging.getLogger(__name__)


def interpreter_lib_dir() -> Path | None:
    """The folder holding this interpreter's libpython3.X.so.1.0, or None (a static build)."""
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    for d in (sysconfig.get_config_var("LIBDIR"), str(Path(sys.base_prefix) / "lib")):
        if d and (Path(d) / name).is_file():
            return Path(d)
    return None


def set_library_path() -> None:
    """Put this interpreter's lib/ first on LD_LIBRARY_PATH for the tritonserver child (see module doc)."""
    lib = interpreter_lib_dir()
    if lib is None:
        log.warning("no shared libpython beside %s: the Python-backend stub will use the system's", sys.executable)
        return
    parts = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != str(lib)]
    os.environ["LD_LIBRARY_PATH"] = ":".join([str(lib), *parts])


def split_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' → (host, port); a clear ValueError otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:8001)")
    return host.strip("[]") or "127.0.0.1", int(port)


def serve(model_path: Path, address: str = "127.0.0.1:8001", backend: str = "auto", threads: int = 0,
          max_batch: int = DEFAULT_MAX_BATCH, queue_delay_us: int = DEFAULT_QUEUE_DELAY_US, model: str = "",
          ready=None) -> None:  # fmt: skip
    """Serve `model_path` until SIGINT/SIGTERM. `ready(url)` is called once the model is loaded."""
    import numpy as np

    set_library_path()
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    from ..encoders import create_encoder
    from ..encoders.triton import LOOPBACK, model_name, model_parameters, read_local_info
    from .repo import io_of, preferred_sizes

    host, port = split_address(address)
    info = read_local_info(model_path)
    inp, out = io_of(model_path)
    enc = create_encoder(backend, model_path, threads=threads)
    max_batch = min(max_batch, enc.max_batch)  # a file with a static batch dimension allows no more
    dtype = np.float16 if inp.data_type == "TYPE_FP16" else np.float32

    @batch
    def infer(**inputs):
        return {out.name: enc.encode(inputs[inp.name]).vectors}

    config = TritonConfig(
        grpc_address=host, grpc_port=port, http_address="127.0.0.1", http_port=free_port(), allow_metrics=False,
        exit_timeout_secs=2,
    )  # fmt: skip
    name = model or model_name(model_path)
    batcher = DynamicBatcher(max_queue_delay_microseconds=queue_delay_us,
                             preferred_batch_size=preferred_sizes(max_batch) or None)  # fmt: skip
    # PyTriton restricts these endpoints to a random token by default; the node registers its shared
    # memory and the tests read the batcher's statistics. Shared memory is opened only on loopback:
    # a remote client could otherwise map any region of this host.
    restricted = ["model-repository", "trace", "logging"] + ([] if host in LOOPBACK else ["shared-memory"])
    # not `with`: that starts the server before the model has its parameters
    triton = Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=restricted))
    try:
        triton.bind(
            model_name=name,
            infer_func=infer,
            inputs=[Tensor(name=inp.name, dtype=dtype, shape=inp.dims)],
            outputs=[Tensor(name=out.name, dtype=np.float32, shape=out.dims)],
            config=ModelConfig(max_batch_size=max_batch, batcher=batcher),
            strict=True,
        )
        # the verdict the server's own gate ran this model by (a re-gate on this host's ISA included)
        _add_parameters(triton, name, model_parameters(info, enc.backend, getattr(enc, "gate_verdict", None)))
        triton.run()  # starts the server and loads the model
        url = f"grpc://{host}:{port}"
        log.info("serving %s (%s, %s on %s) as model %r at %s", info.model_id, info.precision, enc.backend,
                 model_path, name, url)  # fmt: skip
        if ready is not None:
            ready(url)
        triton.serve()  # until SIGINT/SIGTERM (or the server dies)
    finally:
        triton.stop()


def _add_parameters(triton, name: str, params: dict[str, str]) -> None:
    """Put the model id into the model config's `parameters`, as triton-repo writes them. PyTriton
    has no public field for it; its config object (built once per model, pinned nvidia-pytriton
    0.7.0) carries the backend parameters Triton reports in the model config."""
    model = next(m for m in triton._model_manager.models if m.model_name == name)
    model._get_triton_model_config().backend_parameters.update(params)


def requirements() -> list[str]:
    """The `serve` extra's requirements, from the installed package's metadata (setup.cfg is the one list)."""
    from importlib.metadata import requires

    out = []
    for req in requires("openclaw_vision") or []:
        spec, _, marker = req.partition(";")
        if 'extra == "serve"' in marker:
            out.append(spec.strip().replace(" ", ""))
    return out


def can_host_pytriton() -> str | None:
    """None if PyTriton can serve from this interpreter; else why not."""
    if importlib.util.find_spec("pytriton") is None:
        return "nvidia-pytriton is not installed here"
    from importlib.metadata import version

    if int(version("numpy").split(".")[0]) >= 2:
        return f"NumPy {version('numpy')} here; PyTriton 0.7.0's stub needs NumPy < 2"
    return None


def serve_python() -> Path:
    """The interpreter of the serve venv: $OPENCLAW_VISION_SERVE_PYTHON, else <this venv>/serve/bin/python."""
    return Path(os.environ.get("OPENCLAW_VISION_SERVE_PYTHON") or Path(sys.prefix) / "serve" / "bin" / "python")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..encoders import backends

    p.description = __doc__.split("\n\n")[0]
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--precision", choices=PRECISIONS, default=PRECISIONS[0])
    p.add_argument("--model-path", type=Path, default=None, help="an ONNX file instead of --model's built one")
    p.add_argument("--address", default="127.0.0.1:8001", help="gRPC HOST:PORT (0.0.0.0:8001: every interface)")
    p.add_argument("--backend", default="auto", choices=[b for b in backends.choices() if b != "triton"],
                   help="the runtime that runs the model in the server")  # fmt: skip
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH)
    p.add_argument("--queue-delay-us", type=int, default=DEFAULT_QUEUE_DELAY_US,
                   help="how long the batcher waits for more requests")  # fmt: skip
    p.add_argument("--triton-model", default="", help="model name on the server (default: <model>_<precision>)")
    p.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    """`openclaw-vision serve ...`: serve here, or re-execute in the serve venv (see module doc) with the
    same flags (`args.argv`, the command line after `serve`)."""
    why = can_host_pytriton()
    if why is not None:
        py = serve_python()
        if not py.is_file():
            print(f"serve: {why}, and no serve venv at {py} (make setup builds it; or set "
                  "OPENCLAW_VISION_SERVE_PYTHON to a python with `pip install openclaw_vision[serve]`)",
                  file=sys.stderr)  # fmt: skip
            return 2
        sys.stdout.flush()
        os.execv(str(py), [str(py), "-m", "openclaw_vision.serving.serve", *args.argv])
    path = args.model_path or default_model_path(args.model, args.precision)
    if not path.is_file():
        print(f"serve: {path} not found (make it with `openclaw-vision export` / `quantize`)", file=sys.stderr)
        return 2
    import signal

    from ..encoders.base import EncoderError

    def _stop(*_):
        raise KeyboardInterrupt  # SIGTERM stops the server as Ctrl+C does (tritonserver and stub with it)

    signal.signal(signal.SIGTERM, _stop)
    try:
        serve(path, args.address, args.backend, args.threads, args.max_batch, args.queue_delay_us,
              args.triton_model, ready=lambda url: print(url, flush=True))  # fmt: skip
    except (EncoderError, ValueError) as err:
        print(f"serve: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # how a server is stopped (Ctrl+C, or SIGTERM above)
        log.info("stopped")
    return 0


COMMAND = Command(add_arguments, run)


def main(argv: list[str]) -> int:
    """`python -m openclaw_vision.serving.serve ...`: what `serve` re-executes in the serve venv, with the
    same flags (the serve venv holds only what serving needs: not every command's dependencies)."""
    p = argparse.ArgumentParser(prog="openclaw-vision serve")
    add_arguments(p)
    args = p.parse_args(argv)
    args.argv = argv
    logging.basicConfig(level=args.log_level, format="[%(asctime)s] [%(name)s] %(levelname)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
