"""The triton backend's channel: one gRPC connection to the server and what the server says of the model.

Apart from the encoder because this is what a (re)connection is: the encoder opens it at start and again
after every outage, and each open replaces the last one's view whole (a fresh channel, the model's names,
datatype and batch size read again), so nothing of a server that went away outlives its return. It is
also where the trust is checked: the served model must carry the local file's `model_id`, and the gate
judges it by the verdict the server's config parameters carry, not the local file's (gating.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import gate
from .base import EncoderError, ModelInfo, one_line

#: Triton's datatype names of the pixel inputs we send
DTYPES = {"FP32": np.float32, "FP16": np.float16}


def _unwrap(parameters: Mapping[str, Any]) -> dict[str, str]:
    """A model config's `parameters` map ({key: {string_value: v}}) as plain strings."""
    return {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in parameters.items()}


class Channel:
    """A channel to model `model` (version `version`, "" for the latest) at `url` (HOST:PORT); every call
    on it is bounded by `timeout` seconds. After `open`: `client`, the model's `input` and `output` names,
    its pixel `datatype` (a DTYPES key) and `max_batch` (its config's max_batch_size, at least 1)."""

    def __init__(self, url: str, model: str, version: str, timeout: float) -> None:
        try:
            import tritonclient.grpc as grpcclient
            from tritonclient.utils import InferenceServerException
        except ImportError as err:
            raise EncoderError(f"the triton backend needs `pip install openclaw_vision[triton]` ({err})") from err
        self.grpc, self.server_error = grpcclient, InferenceServerException
        self.url, self.model, self.version, self.timeout = url, model, version, timeout
        self.client: Any = None
        self.input = self.output = self.datatype = ""
        self.max_batch = 1

    def open(self, local: ModelInfo) -> ModelInfo:
        """A fresh channel and the served model checked against `local` (the local file's info); returns
        `local` with the served model's gate verdicts in place of the file's. EncoderError when the server
        does not answer, serves other weights, or takes pixels of another type than DTYPES."""
        self.close()
        try:
            self.client = self.grpc.InferenceServerClient(url=self.url)
            meta = self.client.get_model_metadata(self.model, self.version, as_json=True, client_timeout=self.timeout)
            config = self.client.get_model_config(self.model, self.version, as_json=True, client_timeout=self.timeout)
        except self.server_error as err:
            raise EncoderError(f"Triton at grpc://{self.url}: model {self.model!r}: {one_line(err)}") from err
        config = config.get("config", config)
        served = _unwrap(config.get("parameters", {}))
        if served.get("model_id") != local.model_id:
            raise EncoderError(
                f"Triton at grpc://{self.url} serves {self.model!r} with model id {served.get('model_id')!r}, but the "
                f"local model is {local.model_id!r}: other weights (refused; serve this model with `openclaw-vision "
                "serve` or `triton-repo`)"
            )
        inp, out = meta["inputs"][0], meta["outputs"][0]
        if inp["datatype"] not in DTYPES:
            raise EncoderError(f"Triton model {self.model!r} takes {inp['datatype']}; expected FP32 or FP16 pixels")
        self.input, self.output, self.datatype = inp["name"], out["name"], inp["datatype"]
        self.max_batch = max(1, int(config.get("max_batch_size", 0) or 1))
        metadata = {k: v for k, v in local.metadata.items() if k != gate.RUNTIMES_KEY}
        if gate.RUNTIMES_KEY in served:
            metadata[gate.RUNTIMES_KEY] = served[gate.RUNTIMES_KEY]
        return dataclasses.replace(local, metadata=metadata)

    def close(self) -> None:
        """Close the channel, if open (idempotent)."""
        if self.client is None:
            return
        with contextlib.suppress(Exception):  # a channel to a dead server: nothing left to close
            self.client.close()
        self.client = None
