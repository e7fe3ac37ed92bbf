"""glibc malloc, where the package tells it what to do: hand freed memory back, keep frame buffers, share arenas.

A 1080p rgb8 frame is a 6 MB block: Cyclone's receive thread allocates one per sample it reassembles, and under
rclpy each sample becomes a 6 MB Python `bytes`. By default glibc serves blocks that large from fresh mappings
at first, and when one is freed it raises its mmap threshold and trims its heap once more than twice that is
free at the top. Either way, a node that receives more frames than it encodes keeps paying for pages: the
munmap or trim when a camera's newer frame replaces the one it held (in our intake), and the page faults and
zeroing when the next frame's block is allocated (in the transport's receive). `keep_freed_frames` makes frame
buffers heap blocks for good and lets the heap keep some freed megabytes for the next frames. The encoder
node does so by default (`frame_heap_mb` 64): under rclpy it halved our share of a dropped frame and a
4-camera node encoded more frames with it in seven of eight paired trials. Once the node's process shared one
arena (`share_arenas`) it also lowered our share on the pip path and cost no memory there; with an arena per
thread each arena kept its own freed megabytes, and a 4-camera node's resident memory peaked at 1.35x one
one-camera node's (issue 38: docs/cameras-and-capacity.md has the figures).

All three are process-wide, and a no-op where the C library is not glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: mallopt's parameter numbers (glibc malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
#: blocks below this come from the heap: a 4K rgb8 frame (25 MB) still does. 32 MB is glibc's own ceiling for
#: the threshold it adjusts itself (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), so every glibc accepts it
FRAME_BLOCKS_BELOW = 32 << 20


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def release_free_memory() -> None:
    """Give freed heap memory back to the system (glibc `malloc_trim`); a no-op elsewhere.

    Sessions and activation arrays of one phase are freed when it ends, but glibc keeps freed
    blocks below its mmap threshold (32 MB) in its arenas: without this, the next phase would
    start — and be measured — on top of memory nobody uses any more.
    """
    libc = _libc()
    if libc is not None:
        with contextlib.suppress(AttributeError):
            libc.malloc_trim(0)


def keep_freed_frames(megabytes: int) -> bool:
    """Frame-sized blocks from the heap, and up to `megabytes` of freed heap kept for the next ones (glibc's trim
    threshold); 0 leaves glibc's own adaptive thresholds. True when glibc took both settings."""
    if megabytes <= 0:
        return False
    libc = _libc()
    if libc is None:
        log.info("frame_heap_mb: not glibc here, malloc left as it is")
        return False
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, FRAME_BLOCKS_BELOW)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, megabytes << 20)
    )
    if not ok:
        log.warning("frame_heap_mb=%d: glibc refused the setting, malloc left at its defaults", megabytes)
    return ok


def share_arenas(most: int) -> bool:
    """No new malloc arenas once `most` exist (glibc's M_ARENA_MAX); True when glibc took the setting. A no-op
    where MALLOC_ARENA_MAX is set (the user's choice stands) or the C library is not glibc.

    glibc gives each thread an arena of its own at its first malloc while there are fewer than 8 per core, and
    each arena keeps the blocks freed into it for itself. A frame is allocated on one thread (the transport's
    receive, rclpy's take) and freed on another (our intake, the worker), so with several arenas each can hold
    freed frames apart from the others. The limit counts only arenas made after it: call this first in a process's main,
    while it has (almost) no threads, and threads started later share the arenas that exist."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _libc()
    return bool(libc.mallopt(M_ARENA_MAX, most)) if libc is not None else False
