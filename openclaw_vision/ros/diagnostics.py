"""diagnostic_msgs/DiagnosticArray in diagnostic_updater's shape, and reading one back."""

from __future__ import annotations

import time
from typing import Any

from .convert import ns_to_stamp
from .transport import DIAGNOSTIC_ARRAY, DIAGNOSTIC_STATUS, HEADER, KEY_VALUE, Transport

OK, WARN, ERROR, STALE = 0, 1, 2, 3


def diagnostic_array(transport: Transport, name: str, level: int, message: str, values: dict[str, Any]) -> Any:
    kv = transport.msg(KEY_VALUE)
    status = transport.msg(DIAGNOSTIC_STATUS)(
        level=level if transport.name == "cyclonedds" else bytes([level]),
        name=name,
        message=message,
        hardware_id="none",
        values=[kv(key=str(k), value=str(v)) for k, v in values.items()],
    )
    header = transport.msg(HEADER)(stamp=ns_to_stamp(transport, time.time_ns()), frame_id="")
    return transport.msg(DIAGNOSTIC_ARRAY)(header=header, status=[status])


def status_values(msg: Any, name: str) -> dict[str, str] | None:
    """The key/values of the status called `name` in a DiagnosticArray, or None."""
    for st in msg.status:
        if st.name == name:
            return {kv.key: kv.value for kv in st.values}
    return None
