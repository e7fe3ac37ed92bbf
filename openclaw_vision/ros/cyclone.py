"""ROS 2 over Cyclone DDS without ROS installed: `rt/` topics, rmw type names, XCDR1.

A Humble node on rmw_cyclonedds (or Fast DDS, for topics) sees our publishers and
subscribers as ordinary ROS endpoints. Samples are taken in the listener, on Cyclone's
receive thread, the moment they arrive, so the DDS reader's history never overwrites a
sample we did not see: every message that reaches this process reaches the callback.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import numpy as np

from ..resources import share_path
from .dds_types import idl_type
from .transport import Callback, QoS

log = logging.getLogger(__name__)

_uri_lock = threading.Lock()


def ensure_loopback_config() -> str:
    """Point CYCLONEDDS_URI at the shipped loopback-only config unless the user chose one."""
    with _uri_lock:
        if not os.environ.get("CYCLONEDDS_URI"):
            os.environ["CYCLONEDDS_URI"] = share_path("config", "cyclonedds-loopback.xml").as_uri()
            log.info("DDS: loopback-only config %s", os.environ["CYCLONEDDS_URI"])
        else:
            log.info("DDS: CYCLONEDDS_URI=%s (set by the environment)", os.environ["CYCLONEDDS_URI"])
        return os.environ["CYCLONEDDS_URI"]


def dds_topic_name(topic: str) -> str:
    """'/visual_features' → 'rt/visual_features', as rmw maps ROS topics."""
    if not topic.startswith("/"):
        topic = "/" + topic
    return "rt" + topic


def _qos(q: QoS):
    from cyclonedds.core import Policy, Qos
    from cyclonedds.util import duration

    rel = (
        Policy.Reliability.Reliable(duration(seconds=10))
        if q.reliability == "reliable"
        else Policy.Reliability.BestEffort
    )
    hist = Policy.History.KeepAll if q.history == "keep_all" else Policy.History.KeepLast(q.depth)
    return Qos(rel, hist, Policy.Durability.Volatile, Policy.DataRepresentation(use_cdrv0_representation=True))


class _Publisher:
    def __init__(self, writer) -> None:
        self._writer = writer

    def publish(self, msg: Any) -> None:
        self._writer.write(msg)

    def matched(self) -> int:
        return len(self._writer.get_matched_subscriptions())


class _Subscription:
    def __init__(self, reader) -> None:
        self._reader = reader

    def matched(self) -> int:
        return len(self._reader.get_matched_publications())

    def lost(self) -> int:
        """Samples DDS knows were lost before reaching us (e.g. a best-effort fragment gap)."""
        return int(self._reader.get_sample_lost_status().total_count)


class CycloneTransport:
    name = "cyclonedds"

    def __init__(self, node_name: str, domain_id: int | None = None) -> None:
        from cyclonedds.domain import DomainParticipant

        ensure_loopback_config()
        self.node_name = node_name
        domain = int(os.environ.get("ROS_DOMAIN_ID", "0")) if domain_id is None else domain_id
        self.participant = DomainParticipant(domain)
        self._topics: dict[str, Any] = {}
        self._keep: list[Any] = []

    def msg(self, ros_type: str) -> type:
        return idl_type(ros_type)

    def float_array(self, values) -> Any:
        return np.asarray(values, np.float32).tolist()

    def _topic(self, topic: str, ros_type: str):
        from cyclonedds.topic import Topic

        name = dds_topic_name(topic)
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, idl_type(ros_type))
        return self._topics[name]

    def publisher(self, topic: str, ros_type: str, qos: QoS) -> _Publisher:
        from cyclonedds.pub import DataWriter

        return _Publisher(DataWriter(self.participant, self._topic(topic, ros_type), qos=_qos(qos)))

    def subscribe(self, topic: str, ros_type: str, qos: QoS, callback: Callback) -> _Subscription:
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader, InvalidSample

        def on_data(reader) -> None:
            while True:
                t0 = time.perf_counter()
                samples = reader.take(N=1)
                if not samples:
                    return
                dt = time.perf_counter() - t0
                if isinstance(samples[0], InvalidSample):  # a writer left: no data in it
                    continue
                try:
                    callback(samples[0], dt)
                except Exception:  # a failing callback must not kill Cyclone's receive thread
                    log.exception("callback for %s failed", topic)

        listener = Listener(on_data_available=on_data)
        reader = DataReader(self.participant, self._topic(topic, ros_type), qos=_qos(qos), listener=listener)
        self._keep.append((reader, listener, on_data))
        return _Subscription(reader)

    def deserialize(self, raw: bytes, ros_type: str) -> Any:
        return idl_type(ros_type).deserialize(raw)

    def serialize(self, msg: Any, ros_type: str) -> bytes:
        return msg.serialize()

    def close(self) -> None:
        for reader, *_ in self._keep:
            reader.set_listener(None)
        self._keep.clear()
        self._topics.clear()
        self.participant = None
