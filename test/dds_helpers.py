"""What the DDS tests share: an inbox that a subscription fills, waiting for a condition, and waiting until an
in-process node and the test's endpoints have matched each other.

Tests never sleep for a fixed time to let something happen: they wait, with a generous deadline,
until it has happened (a loaded CI machine can be slow, never wrong).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Inbox:
    """A subscription callback that keeps every message, and waits for them."""

    def __init__(self) -> None:
        self.items: list = []
        self.cond = threading.Condition()

    def __call__(self, msg, _deserialize_s: float) -> None:
        with self.cond:
            self.items.append(msg)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 60.0) -> list:
        """The messages so far, once there are at least `n`."""
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.items) >= n, timeout), f"got {len(self.items)} of {n}"
            return list(self.items)

    def holds(self, pred: Callable[[list], bool], timeout: float) -> bool:
        """Whether `pred(messages)` holds within `timeout` seconds (no failure: a test that paces on it)."""
        with self.cond:
            return self.cond.wait_for(lambda: pred(self.items), timeout)

    def wait_for(self, pred: Callable[[list], bool], timeout: float = 60.0, what: str = "message") -> list:
        """The messages so far, once `pred(messages)` holds."""
        with self.cond:
            assert self.holds(pred, timeout), f"timed out waiting for {what}"
            return list(self.items)


def wait_until(pred: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Poll `pred` until it holds; fail the test after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def node_matched(node, pubs, subs=()) -> bool:
    """Whether each camera publisher in `pubs` and the in-process encoder node's image subscriptions have matched
    each other, and so have the node's features publishers and the test's subscriptions `subs` (a test waits on
    it before it sends). A writer can match a reader before that reader has matched the writer, and a volatile
    reader drops a sample sent in between (the memory node's fleet test lost one that way: docs/memory.md,
    `publishers`): a test that waits on its writer alone can lose its first frame."""
    cams = list(node.cameras.values())
    writers = [*pubs, *(c.features for c in cams if subs)]
    readers = [*subs, *(c.images for c in cams)]
    return all(e.matched() for e in writers + readers)


def status_reached(name: str, key: str, n: int) -> Callable[[list], bool]:
    """A predicate for an Inbox of /diagnostics (`Inbox.wait_for`): a message in which the status `name` has the
    count `key` at `n` or more (a node's own counters, or its `publishers`)."""
    from openclaw_vision.ros.diagnostics import status_values

    return lambda msgs: any(int((status_values(m, name) or {}).get(key, 0)) >= n for m in msgs)


def cameras_connected(topics, subscribers: int = 1) -> Callable[[list], bool]:
    """A predicate for an Inbox of /diagnostics (`Inbox.wait_for`): one message in which an encoder node's status of
    each camera in `topics` says its subscription has matched a publisher and its features publisher at least
    `subscribers` subscriptions (node_counters: `publishers`, `subscribers`). For a node in another process: the
    node's side of `node_matched`."""
    from openclaw_vision.ros.diagnostics import status_values
    from openclaw_vision.ros.node_counters import CAMERA_STATUS

    def ok(msg) -> bool:
        got = [status_values(msg, CAMERA_STATUS.format(topic=t)) or {} for t in topics]
        return all(int(v.get("publishers", 0)) >= 1 and int(v.get("subscribers", 0)) >= subscribers for v in got)

    return lambda msgs: any(ok(m) for m in msgs)
