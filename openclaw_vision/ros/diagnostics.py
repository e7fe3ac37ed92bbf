"""diagnostic_msgs/DiagnosticArray in diagnostic_updater's shape, and reading one back."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from .convert import ns_to_stamp
from .types import DIAGNOSTIC_ARRAY, DIAGNOSTIC_STATUS, HEADER, KEY_VALUE, Subscription, Transport

OK, WARN, ERROR, STALE = 0, 1, 2, 3


def diagnostic_array(
    transport: Transport, name: str, level: int, message: str, values: dict[str, Any],
    more: Sequence[tuple[str, int, str, dict[str, Any]]] = (),
) -> Any:  # fmt: skip
    """One DiagnosticArray: the status `name`, then any `more` (name, level, message, values) after it."""
    kv = transport.msg(KEY_VALUE)
    statuses = [
        transport.msg(DIAGNOSTIC_STATUS)(
            level=lv if transport.name == "cyclonedds" else bytes([lv]),
            name=n,
            message=text,
            hardware_id="none",
            values=[kv(key=str(k), value=str(v)) for k, v in vals.items()],
        )
        for n, lv, text, vals in ((name, level, message, values), *more)
    ]
    header = transport.msg(HEADER)(stamp=ns_to_stamp(transport, time.time_ns()), frame_id="")
    return transport.msg(DIAGNOSTIC_ARRAY)(header=header, status=statuses)


def publishers(subscriptions: Iterable[Subscription]) -> int:
    """The publishers `subscriptions` have matched, summed: a node's `publishers` on /diagnostics (the encoder's
    per camera). It says who is connected (0: nothing sends here), and when a sender may start: a writer can
    match a reader before that reader has matched it, and a volatile reader does not get what comes in between,
    so a sender that must not lose its first message waits until the node's side counts it (the tests do)."""
    return sum(sub.matched() for sub in subscriptions)


def stage_values(stages_ms: dict[str, dict[str, float]]) -> dict[str, str]:
    """Per-stage percentiles as flat diagnostic key/values: `<stage>_ms_p50`, …_p95, …_p99, …_mean."""
    return {
        f"{stage}_ms_{key}": f"{summ[key]:.3f}"
        for stage, summ in stages_ms.items()
        for key in ("p50", "p95", "p99", "mean")
    }


def status_values(msg: Any, name: str) -> dict[str, str] | None:
    """The key/values of the status called `name` in a DiagnosticArray, or None."""
    for st in msg.status:
        if st.name == name:
            return {kv.key: kv.value for kv in st.values}
    return None
