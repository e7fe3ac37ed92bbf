"""Triton backend: the node preprocesses, a Triton Inference Server runs the model (gRPC).

What goes over the wire is the model's input, not the camera frame: (N, 3, S, S) FP32 or FP16
NCHW pixels (602 kB per ViT-B/32 frame in FP32, against 6.2 MB for a 1080p rgb8 image), and the
(N, D) output comes back. On one host the pixels go through one system shared-memory region per
encoder (`triton_shared_memory: auto`: a loopback or own-host URL), registered with the server
once per connection and unregistered when the encoder closes; only the request's small header
travels over the socket then.

Trust, then keep checking: at start the server's copy of the model must carry the local model
file's id (the `model_id` parameter of its config, written by `openclaw-vision triton-repo` and
`serve`); a server serving other weights is refused with the two ids, as the labels node
refuses a text tower of other weights. A server that cannot be reached at start is refused too.

Outages lose nothing silently: a request that fails (server gone, per-request deadline
`triton_timeout` passed) raises EncoderError, which the node counts as a failed frame with the
reason in its throttled log. The encoder then marks the server down and, with a backoff that
doubles from BACKOFF_S to BACKOFF_MAX_S, reconnects on a fresh channel (gRPC's own channel backoff
reaches two minutes), re-checks the model id and re-registers the region; frames in between fail
at once without a network call. The recovery is logged with how long the server was away.
`status()` is the state /diagnostics shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core import gate
from .base import (
    Embedding,
    EncoderError,
    HostInput,
    ModelInfo,
    check_model_file,
    checked_output,
    l2_normalise,
    one_line,
)
from .options import EncoderOptions

log = logging.getLogger(__name__)

#: the model config parameters that say what the server's model is (written by triton-repo and serve)
PARAMETER_KEYS = ("model_id", "precision", "image_size", "embed_dim")
#: Triton's datatype names of the pixel inputs we send
DTYPES = {"FP32": np.float32, "FP16": np.float16}
BACKOFF_S = 0.2
BACKOFF_MAX_S = 5.0
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def model_name(path: str | Path) -> str:
    """The Triton model name of an ONNX file: its stem with dots as underscores (ViT-B-32.fp32.onnx →
    ViT-B-32_fp32), the same for the repository writer, `serve` and the client's default."""
    return Path(path).name.removesuffix(".onnx").replace(".", "_")


def model_parameters(info: ModelInfo, served_by: str, verdict: gate.Verdict | None = None) -> dict[str, str]:
    """What the server's model config carries about the weights (PARAMETER_KEYS), and for an INT8 model
    the accuracy-gate verdict of `served_by` (the runtime the server runs it on: `verdict`, else the
    model's own for that runtime) as the `triton` backend's, which the client's gate judges it by."""
    params = {"model_id": info.model_id, "precision": info.precision, "image_size": str(info.image_size),
              "embed_dim": str(info.embed_dim)}  # fmt: skip
    verdict = verdict or gate.verdicts(info.metadata).get(served_by)
    if info.precision == "int8" and verdict is not None:
        params[gate.RUNTIMES_KEY] = gate.encode_verdicts({"triton": verdict})
        params["served_by"] = served_by
    return params


def read_local_info(path: Path) -> ModelInfo:
    """The local model file's id, precision and sizes from its ONNX metadata, without its weights
    (only the .onnx file is read: a big model's .onnx.data need not be on the robot at all)."""
    try:
        from ..models.onnx_files import load_graph
    except ImportError as err:
        raise EncoderError(f"the triton backend reads the model's metadata with onnx: pip install onnx ({err})") from (
            err
        )
    try:
        model = load_graph(path)
    except Exception as err:
        raise EncoderError(f"cannot read {path}: {one_line(err)}") from err

    def dims(value_info) -> list[int | None]:
        return [d.dim_value or None for d in value_info.type.tensor_type.shape.dim]

    meta = {p.key: p.value for p in model.metadata_props}
    return ModelInfo.from_metadata(meta, path, dims(model.graph.input[0]), dims(model.graph.output[0]))


def same_host(url: str) -> bool:
    """Whether `url` (HOST:PORT) names this machine: loopback, or this host's name or one of its addresses."""
    host = url.rsplit(":", 1)[0].strip("[]") if ":" in url else url
    if host in LOOPBACK or host in ("", socket.gethostname()):
        return True
    try:
        mine = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)}
        theirs = {a[4][0] for a in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(mine & theirs)


def _unwrap(parameters: Mapping[str, Any]) -> dict[str, str]:
    """A model config's `parameters` map ({key: {string_value: v}}) as plain strings."""
    return {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in parameters.items()}


class TritonEncoder(HostInput):
    """`max_batch` is the server model's max_batch_size (larger batches are sent in parts)."""

    backend = "triton"

    def __init__(self, model_path: str | Path, options: EncoderOptions | None = None) -> None:
        try:
            import tritonclient.grpc as grpcclient
            from tritonclient.utils import InferenceServerException
        except ImportError as err:
            raise EncoderError(f"the triton backend needs `pip install openclaw_vision[triton]` ({err})") from err
        self._grpc, self._server_error = grpcclient, InferenceServerException
        o = options or EncoderOptions()
        if o.triton_shared_memory not in ("auto", "off"):
            raise EncoderError(f"triton_shared_memory={o.triton_shared_memory!r}: choose auto or off")
        self.options = o
        path = check_model_file(model_path)
        self.info = read_local_info(path)
        self.model_id, self.precision = self.info.model_id, self.info.precision
        self.image_size, self.embed_dim = self.info.image_size, self.info.embed_dim
        self.url, self.timeout = o.triton_url, o.triton_timeout
        self.model = o.triton_model or model_name(path)
        self.version = o.triton_model_version
        self._lock = threading.Lock()  # one request at a time per encoder, as for every backend
        self._client = None
        self._region: dict[str, Any] | None = None  # the local shared-memory region (created once)
        self._registered = False
        self._down_since: float | None = None
        self._down_reason = ""
        self._retry_at = 0.0
        self._backoff = BACKOFF_S
        self.failed_while_down = 0
        self.reconnects = 0
        self.use_shm = o.triton_shared_memory == "auto" and same_host(self.url)
        try:
            self._connect()
        except EncoderError:
            self.close()
            raise
        log.info(
            "triton: %s version %s at grpc://%s, model %s (%s), input %s %s, max batch %d, shared memory %s",
            self.model, self.version or "latest", self.url, self.model_id, self.precision, self._input,
            self._datatype, self.max_batch, "on" if self._registered else "off",
        )  # fmt: skip

    # connection -------------------------------------------------------------------------
    def _connect(self) -> None:
        """A fresh channel, the server's model checked against the local id, the region registered."""
        if self._client is not None:
            self._close_client()
        try:
            self._client = self._grpc.InferenceServerClient(url=self.url)
            meta = self._client.get_model_metadata(self.model, self.version, as_json=True, client_timeout=self.timeout)
            config = self._client.get_model_config(self.model, self.version, as_json=True, client_timeout=self.timeout)
        except self._server_error as err:
            raise EncoderError(f"Triton at grpc://{self.url}: model {self.model!r}: {one_line(err)}") from err
        config = config.get("config", config)
        served = _unwrap(config.get("parameters", {}))
        # the gate judges the served model by the server's verdict, not the local file's (gating.py)
        local = {k: v for k, v in self.info.metadata.items() if k != gate.RUNTIMES_KEY}
        if gate.RUNTIMES_KEY in served:
            local[gate.RUNTIMES_KEY] = served[gate.RUNTIMES_KEY]
        self.info = dataclasses.replace(self.info, metadata=local)
        if served.get("model_id") != self.model_id:
            raise EncoderError(
                f"Triton at grpc://{self.url} serves {self.model!r} with model id {served.get('model_id')!r}, but the "
                f"local model is {self.model_id!r}: other weights (refused; serve this model with `openclaw-vision "
                "serve` or `triton-repo`)"
            )
        inp, out = meta["inputs"][0], meta["outputs"][0]
        if inp["datatype"] not in DTYPES:
            raise EncoderError(f"Triton model {self.model!r} takes {inp['datatype']}; expected FP32 or FP16 pixels")
        self._input, self._output, self._datatype = inp["name"], out["name"], inp["datatype"]
        self.max_batch = max(1, int(config.get("max_batch_size", 0) or 1))
        if self.use_shm:
            self._register()

    def _register(self) -> None:
        """One region per encoder: the largest request's pixels, then its output. A server that cannot
        open it (another container without /dev/shm shared) gets plain gRPC, with a log line."""
        from tritonclient.utils import shared_memory as shm

        s, item = self.image_size, np.dtype(DTYPES[self._datatype]).itemsize
        in_bytes = self.max_batch * 3 * s * s * item
        size = in_bytes + self.max_batch * self.embed_dim * 4
        if self._region is None or self._region["size"] < size:
            if self._region is not None:
                shm.destroy_shared_memory_region(self._region["handle"])
            name = f"openclaw_{os.getpid()}_{id(self):x}"
            handle = shm.create_shared_memory_region(name, "/" + name, size)
            self._region = {"name": name, "handle": handle, "size": size, "out_offset": in_bytes}
        try:
            self._client.register_system_shared_memory(self._region["name"], "/" + self._region["name"], size,
                                                       client_timeout=self.timeout)  # fmt: skip
            self._registered = True
        except self._server_error as err:
            self._registered = False
            log.warning("triton: the server cannot map shared memory (%s); sending pixels over gRPC", one_line(err))

    def _close_client(self) -> None:
        with contextlib.suppress(Exception):  # a channel to a dead server: nothing left to close
            self._client.close()
        self._client = None

    def _mark_down(self, reason: str) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since, self._backoff = now, BACKOFF_S
            log.warning("triton: server at grpc://%s lost: %s; reconnecting with backoff", self.url, reason)
        else:
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        self._down_reason, self._registered = reason, False
        self._retry_at = now + self._backoff

    def _ensure_up(self) -> None:
        if self._down_since is None:
            return
        if time.monotonic() < self._retry_at:
            self.failed_while_down += 1
            raise EncoderError(f"Triton at grpc://{self.url} unreachable ({self._down_reason}); next try in "
                               f"{self._retry_at - time.monotonic():.1f} s")  # fmt: skip
        try:
            self._connect()
        except EncoderError as err:
            self._mark_down(one_line(err))
            raise
        self.reconnects += 1
        log.warning("triton: server at grpc://%s back after %.1f s (%d frames failed fast meanwhile)", self.url,
                    time.monotonic() - self._down_since, self.failed_while_down)  # fmt: skip
        self._down_since, self.failed_while_down = None, 0

    # inference --------------------------------------------------------------------------
    def encode(self, pixels: np.ndarray) -> Embedding:
        s = self.image_size
        if pixels.ndim != 4 or pixels.shape[1:] != (3, s, s):
            raise EncoderError(f"expected pixels (N, 3, {s}, {s}), got {pixels.shape}")
        with self._lock:
            self._ensure_up()
            x = np.ascontiguousarray(pixels, DTYPES[self._datatype])
            parts = [self._infer(x[i : i + self.max_batch]) for i in range(0, len(x), self.max_batch)]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return Embedding(l2_normalise(checked_output(out, len(pixels), self.embed_dim, self.backend)), self.model_id)

    def _request(self, x: np.ndarray):
        """The request's input and requested output: the pixels in the region (shared memory) or inline."""
        g = self._grpc
        inp = g.InferInput(self._input, list(x.shape), self._datatype)
        out = g.InferRequestedOutput(self._output)
        if self._registered:
            from tritonclient.utils import shared_memory as shm

            shm.set_shared_memory_region(self._region["handle"], [x])
            inp.set_shared_memory(self._region["name"], x.nbytes)
            out.set_shared_memory(self._region["name"], len(x) * self.embed_dim * 4, offset=self._region["out_offset"])
        else:
            inp.set_data_from_numpy(x)
        return inp, out

    def request_bytes(self, n: int = 1) -> int | None:
        """Bytes of the gRPC request for `n` frames as this encoder sends it (the benchmark's figure), or
        None where this tritonclient builds requests differently."""
        try:
            from tritonclient.grpc._utils import _get_inference_request

            with self._lock:
                inp, out = self._request(np.zeros((n, 3, self.image_size, self.image_size), DTYPES[self._datatype]))
                req = _get_inference_request(self.model, [inp], self.version, "", [out], 0, False, False, 0, None, None)
            return int(req.ByteSize())
        except Exception:  # a private helper of tritonclient: the figure is optional
            return None

    def _infer(self, x: np.ndarray) -> np.ndarray:
        inp, out = self._request(x)
        try:
            res = self._client.infer(self.model, [inp], model_version=self.version, outputs=[out],
                                     client_timeout=self.timeout)  # fmt: skip
        except self._server_error as err:
            reason = one_line(err)
            self._mark_down(reason)
            raise EncoderError(f"Triton request to grpc://{self.url} failed: {reason}") from err
        if self._registered:
            from tritonclient.utils import shared_memory as shm

            shape = res.get_output(self._output).shape
            return shm.get_contents_as_numpy(self._region["handle"], np.float32, list(shape),
                                             offset=self._region["out_offset"]).copy()  # fmt: skip
        return res.as_numpy(self._output).astype(np.float32, copy=False)

    # state and shutdown -----------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The server state /diagnostics shows (encoder_node reads it when the encoder has it)."""
        down = self._down_since is not None
        return {
            "triton_url": f"grpc://{self.url}",
            "triton_model": f"{self.model}/{self.version or 'latest'}",
            "triton_server": f"unreachable: {self._down_reason}" if down else "connected",
            "triton_down_s": round(time.monotonic() - self._down_since, 1) if down else 0.0,
            "triton_reconnects": self.reconnects,
            "triton_shared_memory": "on" if self._registered else "off",
        }

    def close(self) -> None:
        """Unregister and remove the shared-memory region, close the channel (idempotent)."""
        with self._lock:
            if self._registered and self._client is not None:
                try:
                    self._client.unregister_system_shared_memory(self._region["name"], client_timeout=self.timeout)
                except Exception as err:  # the server is gone: its registrations went with it
                    log.info("triton: unregistering shared memory: %s", one_line(err))
            self._registered = False
            if self._region is not None:
                from tritonclient.utils import shared_memory as shm

                with contextlib.suppress(FileNotFoundError):  # someone removed /dev/shm's entry already
                    shm.destroy_shared_memory_region(self._region["handle"])
                self._region = None
            if self._client is not None:
                self._close_client()
