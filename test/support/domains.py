"""DDS domain ids of a process's own: one exclusive lock file per id, so runs in several checkouts at
once (or pytest-xdist workers, or a measurement script beside the suite) never hear each other."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

LOCK_DIR = Path(os.environ.get("OPENCLAW_DDS_LOCKS", "/tmp/openclaw-vision-dds-domains"))


def take_domain(order: Iterable[int]) -> tuple[int, IO] | None:
    """The first id of `order` whose lock this process gets, with the open lock file (held until it is
    closed), or None when every one is taken."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for domain in order:
        handle = open(LOCK_DIR / f"{domain}.lock", "w")  # noqa: SIM115 - the caller holds it
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return domain, handle
    return None
