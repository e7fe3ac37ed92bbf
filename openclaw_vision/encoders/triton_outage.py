"""The triton backend's outage state: whether the server is down, and when the next reconnect may try.

Apart from the encoder because it is a clock, not I/O: a failed request marks the server down; until the
backoff (doubling from BACKOFF_S to BACKOFF_MAX_S; gRPC's own channel backoff reaches two minutes) has
passed, frames fail at once without a network call, counted; then one frame's encode reconnects. The
loss and the recovery are logged once each, the recovery with how long the server was away, and
`status()` is the part of /diagnostics that says so.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .base import EncoderError

log = logging.getLogger(__package__ + ".triton")  # the backend's log lines keep one logger name

BACKOFF_S = 0.2
BACKOFF_MAX_S = 5.0


class Outage:
    """The server at `url`'s up/down state. `failed_while_down`: frames failed fast in this outage;
    `reconnects`: outages recovered from since the encoder started."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_since: float | None = None
        self.reason = ""
        self.retry_at = 0.0
        self.backoff = BACKOFF_S
        self.failed_while_down = 0
        self.reconnects = 0

    def mark_down(self, reason: str) -> None:
        """The server failed a call (`reason`): down from now (or still down, the backoff doubled)."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since, self.backoff = now, BACKOFF_S
            log.warning("triton: server at grpc://%s lost: %s; reconnecting with backoff", self.url, reason)
        else:
            self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
        self.reason = reason
        self.retry_at = now + self.backoff

    def retry_due(self) -> bool:
        """False while the server is up; True when it is down and a reconnect may try now. In between
        (down, backoff not yet passed) the frame fails fast: EncoderError, counted."""
        if self.down_since is None:
            return False
        if time.monotonic() < self.retry_at:
            self.failed_while_down += 1
            raise EncoderError(f"Triton at grpc://{self.url} unreachable ({self.reason}); next try in "
                               f"{self.retry_at - time.monotonic():.1f} s")  # fmt: skip
        return True

    def recovered(self) -> None:
        """A reconnect succeeded: up again, logged with the outage's length and its fast failures."""
        self.reconnects += 1
        log.warning("triton: server at grpc://%s back after %.1f s (%d frames failed fast meanwhile)", self.url,
                    time.monotonic() - self.down_since, self.failed_while_down)  # fmt: skip
        self.down_since, self.failed_while_down = None, 0

    def status(self) -> dict[str, Any]:
        """The server's state for /diagnostics: reachable or why not, for how long, reconnects so far."""
        down = self.down_since is not None
        return {
            "triton_server": f"unreachable: {self.reason}" if down else "connected",
            "triton_down_s": round(time.monotonic() - self.down_since, 1) if down else 0.0,
            "triton_reconnects": self.reconnects,
        }
