"""The triton backend's shared-memory region: the pixels and the embeddings of a request on one host.

Apart from the encoder because the region outlives connections: it is created once per encoder (grown
if a reconnect finds a larger max_batch), registered with the server on every connection (a restarted
server knows none of its predecessor's registrations), and removed only when the encoder closes. A
server that cannot map it (another container without /dev/shm shared) gets plain gRPC, with a log line.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import numpy as np

from .base import one_line

log = logging.getLogger(__package__ + ".triton")  # the backend's log lines keep one logger name


class Region:
    """One system shared-memory region: a request's pixels, then (from `out_offset`) its float32 output.

    `registered`: the current server maps it, so requests go through it; else pixels travel over gRPC.
    `server_error` is tritonclient's exception type, the one a refused registration raises."""

    def __init__(self, server_error: type[Exception]) -> None:
        self.server_error = server_error
        self.registered = False
        self._region: dict[str, Any] | None = None  # created on the first registration

    def register(self, client: Any, in_bytes: int, out_bytes: int, timeout: float) -> None:
        """Register with the server of `client` a region for the largest request's pixels (`in_bytes`)
        and output (`out_bytes`), made (or remade larger) first."""
        from tritonclient.utils import shared_memory as shm

        size = in_bytes + out_bytes
        if self._region is None or self._region["size"] < size:
            if self._region is not None:
                shm.destroy_shared_memory_region(self._region["handle"])
            name = f"openclaw_{os.getpid()}_{id(self):x}"
            handle = shm.create_shared_memory_region(name, "/" + name, size)
            self._region = {"name": name, "handle": handle, "size": size, "out_offset": in_bytes}
        try:
            client.register_system_shared_memory(self._region["name"], "/" + self._region["name"], size,
                                                 client_timeout=timeout)  # fmt: skip
            self.registered = True
        except self.server_error as err:
            self.registered = False
            log.warning("triton: the server cannot map shared memory (%s); sending pixels over gRPC", one_line(err))

    def attach(self, x: np.ndarray, inp: Any, out: Any, out_bytes: int) -> None:
        """Copy pixels `x` into the region and point the request's input and requested output (of
        `out_bytes`) at it."""
        from tritonclient.utils import shared_memory as shm

        shm.set_shared_memory_region(self._region["handle"], [x])
        inp.set_shared_memory(self._region["name"], x.nbytes)
        out.set_shared_memory(self._region["name"], out_bytes, offset=self._region["out_offset"])

    def read(self, shape: list[int]) -> np.ndarray:
        """The output the server wrote into the region, copied out (the next request overwrites it)."""
        from tritonclient.utils import shared_memory as shm

        return shm.get_contents_as_numpy(self._region["handle"], np.float32, list(shape),
                                         offset=self._region["out_offset"]).copy()  # fmt: skip

    def close(self, client: Any, timeout: float) -> None:
        """Unregister from the server of `client` (if registered and connected) and remove the region
        (idempotent)."""
        if self.registered and client is not None:
            try:
                client.unregister_system_shared_memory(self._region["name"], client_timeout=timeout)
            except Exception as err:  # the server is gone: its registrations went with it
                log.info("triton: unregistering shared memory: %s", one_line(err))
        self.registered = False
        if self._region is not None:
            from tritonclient.utils import shared_memory as shm

            with contextlib.suppress(FileNotFoundError):  # someone removed /dev/shm's entry already
                shm.destroy_shared_memory_region(self._region["handle"])
            self._region = None
