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
doubles from BACKOFF_S to BACKOFF_MAX_S (triton_outage.py), reconnects on a fresh channel (gRPC's
own channel backoff reaches two minutes), re-checks the model id and re-registers the region; frames
in between fail at once without a network call. The recovery is logged with how long the server was
away. `status()` is the state /diagnostics shows.

The encoder here is the request, its batching and the order of the steps; each role it holds is a
module beside it: triton_channel.py (the connection and the served model's check), triton_region.py
(the shared-memory region), triton_outage.py (the down state and its backoff). The helpers above the
class (model name, config parameters, local metadata) are shared with serving/.
"""

from __future__ import annotations

import logging
import socket
import threading
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
from .triton_channel import DTYPES, Channel
from .triton_outage import Outage
from .triton_region import Region

log = logging.getLogger(__name__)

#: the model config parameters that say what the server's model is (written by triton-repo and serve)
PARAMETER_KEYS = ("model_id", "precision", "image_size", "embed_dim")
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


class TritonEncoder(HostInput):
    """`max_batch` is the server model's max_batch_size (larger batches are sent in parts).

    It holds its roles: the channel (connection and the served model's check), the shared-memory
    region, the outage state; what is left here is the request itself and the order of the steps."""

    backend = "triton"

    def __init__(self, model_path: str | Path, options: EncoderOptions | None = None) -> None:
        o = options or EncoderOptions()
        # the channel first: it says when tritonclient is missing, before any other check
        self.channel = Channel(o.triton_url, o.triton_model or model_name(model_path), o.triton_model_version,
                               o.triton_timeout)  # fmt: skip
        if o.triton_shared_memory not in ("auto", "off"):
            raise EncoderError(f"triton_shared_memory={o.triton_shared_memory!r}: choose auto or off")
        self.options = o
        self.info = read_local_info(check_model_file(model_path))
        self.model_id, self.precision = self.info.model_id, self.info.precision
        self.image_size, self.embed_dim = self.info.image_size, self.info.embed_dim
        self.url, self.timeout = o.triton_url, o.triton_timeout
        self.model, self.version = self.channel.model, self.channel.version
        self._lock = threading.Lock()  # one request at a time per encoder, as for every backend
        self.region = Region(self.channel.server_error)
        self.outage = Outage(self.url)
        self.use_shm = o.triton_shared_memory == "auto" and same_host(self.url)
        try:
            self._connect()
        except EncoderError:
            self.close()
            raise
        log.info(
            "triton: %s version %s at grpc://%s, model %s (%s), input %s %s, max batch %d, shared memory %s",
            self.model, self.version or "latest", self.url, self.model_id, self.precision, self.channel.input,
            self.channel.datatype, self.max_batch, "on" if self.region.registered else "off",
        )  # fmt: skip

    @property
    def max_batch(self) -> int:
        """The served model's max_batch_size, as the last connection read it."""
        return self.channel.max_batch

    # the outage's counters, still read as the encoder's attributes
    failed_while_down = property(lambda self: self.outage.failed_while_down, doc="frames failed fast in this outage")
    reconnects = property(lambda self: self.outage.reconnects, doc="outages recovered from since the start")

    # connection -------------------------------------------------------------------------
    def _connect(self) -> None:
        """A fresh channel, the server's model checked against the local id, the region registered."""
        self.info = self.channel.open(self.info)
        if self.use_shm:
            s, item = self.image_size, np.dtype(DTYPES[self.channel.datatype]).itemsize
            in_bytes, out_bytes = self.max_batch * 3 * s * s * item, self.max_batch * self.embed_dim * 4
            self.region.register(self.channel.client, in_bytes, out_bytes, self.timeout)

    def _mark_down(self, reason: str) -> None:
        self.outage.mark_down(reason)
        self.region.registered = False

    def _ensure_up(self) -> None:
        """Nothing while the server is up; while it is down, fail fast or (backoff passed) reconnect."""
        if not self.outage.retry_due():
            return
        try:
            self._connect()
        except EncoderError as err:
            self._mark_down(one_line(err))
            raise
        self.outage.recovered()

    # inference --------------------------------------------------------------------------
    def encode(self, pixels: np.ndarray) -> Embedding:
        s = self.image_size
        if pixels.ndim != 4 or pixels.shape[1:] != (3, s, s):
            raise EncoderError(f"expected pixels (N, 3, {s}, {s}), got {pixels.shape}")
        with self._lock:
            self._ensure_up()
            x = np.ascontiguousarray(pixels, DTYPES[self.channel.datatype])
            parts = [self._infer(x[i : i + self.max_batch]) for i in range(0, len(x), self.max_batch)]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return Embedding(l2_normalise(checked_output(out, len(pixels), self.embed_dim, self.backend)), self.model_id)

    def _request(self, x: np.ndarray):
        """The request's input and requested output: the pixels in the region (shared memory) or inline."""
        g, c = self.channel.grpc, self.channel
        inp = g.InferInput(c.input, list(x.shape), c.datatype)
        out = g.InferRequestedOutput(c.output)
        if self.region.registered:
            self.region.attach(x, inp, out, len(x) * self.embed_dim * 4)
        else:
            inp.set_data_from_numpy(x)
        return inp, out

    def request_bytes(self, n: int = 1) -> int | None:
        """Bytes of the gRPC request for `n` frames as this encoder sends it (the benchmark's figure), or
        None where this tritonclient builds requests differently."""
        try:
            from tritonclient.grpc._utils import _get_inference_request

            with self._lock:
                x = np.zeros((n, 3, self.image_size, self.image_size), DTYPES[self.channel.datatype])
                inp, out = self._request(x)
                req = _get_inference_request(self.model, [inp], self.version, "", [out], 0, False, False, 0, None, None)
            return int(req.ByteSize())
        except Exception:  # a private helper of tritonclient: the figure is optional
            return None

    def _infer(self, x: np.ndarray) -> np.ndarray:
        inp, out = self._request(x)
        try:
            res = self.channel.client.infer(self.model, [inp], model_version=self.version, outputs=[out],
                                            client_timeout=self.timeout)  # fmt: skip
        except self.channel.server_error as err:
            reason = one_line(err)
            self._mark_down(reason)
            raise EncoderError(f"Triton request to grpc://{self.url} failed: {reason}") from err
        if self.region.registered:
            return self.region.read(res.get_output(self.channel.output).shape)
        return res.as_numpy(self.channel.output).astype(np.float32, copy=False)

    # state and shutdown -----------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The server state /diagnostics shows (encoder_node reads it when the encoder has it)."""
        return {
            "triton_url": f"grpc://{self.url}",
            "triton_model": f"{self.model}/{self.version or 'latest'}",
            **self.outage.status(),
            "triton_shared_memory": "on" if self.region.registered else "off",
        }

    def close(self) -> None:
        """Unregister and remove the shared-memory region, close the channel (idempotent)."""
        with self._lock:
            self.region.close(self.channel.client, self.timeout)
            self.channel.close()
