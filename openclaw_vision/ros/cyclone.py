"""ROS 2 over Cyclone DDS without ROS installed: `rt/` topics, rmw type names, XCDR1.

A Humble node on rmw_cyclonedds (or Fast DDS, for topics) sees our publishers and
subscribers as ordinary ROS endpoints.

Python never runs on Cyclone's own threads: each subscription has a thread of ours that
waits on a WaitSet (which releases the GIL) and takes samples as they arrive. With listeners
instead, a receive thread can wait for the GIL while the GIL holder waits, inside a blocking
reliable write, for an acknowledgement that only that receive thread would process: a
deadlock we saw as 10 s write timeouts. Readers keep every sample until we take it (KEEP_ALL
within a resource limit), so no sample is overwritten unseen; what DDS could not keep is
reported by `lost()`.

Samples are taken as serialized bytes (the binding's `ddspy_take`, what `DataReader.take` does
before deserialising) and decoded by us: sensor_msgs/Image and CompressedImage by `cdr`'s
struct reader, whose `data` is a view of the taken bytes (the binding's take makes the only
copies, in C; no per-field Python pass over the pixels), every other type by its generated
class. Publishers take a message object or, like rclpy's, already serialized CDR bytes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import numpy as np

from ..resources import share_path
from . import cdr
from .dds_types import idl_type
from .transport import COMPRESSED_IMAGE, IMAGE, Callback, QoS

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


#: Samples a reader may hold before we take them (the taking thread normally keeps it near 0).
READER_BUFFER = 32


def _qos(q: QoS, reader: bool = False):
    from cyclonedds.core import Policy, Qos
    from cyclonedds.util import duration

    if q.reliability == "reliable":
        rel = Policy.Reliability.Reliable(duration(seconds=10))
    else:
        rel = Policy.Reliability.BestEffort
    policies = [rel, Policy.Durability.Volatile, Policy.DataRepresentation(use_cdrv0_representation=True)]
    if reader:  # history depth does not take part in QoS matching; keep everything until taken
        limit = max(q.depth, READER_BUFFER)
        policies += [Policy.History.KeepAll, Policy.ResourceLimits(limit, -1, limit)]
    else:
        policies.append(Policy.History.KeepAll if q.history == "keep_all" else Policy.History.KeepLast(q.depth))
    return Qos(*policies)


class _Publisher:
    def __init__(self, writer) -> None:
        self._writer = writer

    def publish(self, msg: Any) -> None:
        """Write a message object, or serialized CDR bytes as they are (as rclpy's publish accepts)."""
        if isinstance(msg, (bytes, bytearray, memoryview)):
            self.publish_raw(msg)
        else:
            self._writer.write(msg)

    def publish_raw(self, raw) -> None:
        from cyclonedds._clayer import ddspy_write
        from cyclonedds.core import DDSException

        if len(raw) % 4:  # the binding pads every sample it writes to a multiple of 4 bytes; so do we
            raw = bytes(raw).ljust(len(raw) + (-len(raw) % 4), b"\0")
        ret = ddspy_write(self._writer._ref, raw)
        if ret < 0:
            raise DDSException(ret, f"writing {len(raw)} serialized bytes")

    def matched(self) -> int:
        return len(self._writer.get_matched_subscriptions())


def sample_decoder(ros_type: str):
    """bytes → message: the zero-copy struct reader for images, the generated class for the rest.

    Image headers are made as this transport's own Header type, so a node can copy one into
    the message it publishes. A sample in another representation (XCDR2) goes the generic way.
    """
    generic = idl_type(ros_type).deserialize
    parse = {IMAGE: cdr.parse_image, COMPRESSED_IMAGE: cdr.parse_compressed_image}.get(ros_type)
    if parse is None:
        return generic
    header_cls, time_cls = idl_type("std_msgs/msg/Header"), idl_type("builtin_interfaces/msg/Time")

    def make_header(sec: int, nanosec: int, frame_id: str):
        return header_cls(stamp=time_cls(sec=sec, nanosec=nanosec), frame_id=frame_id)

    def decode(raw: bytes):
        try:
            return parse(raw, make_header)
        except cdr.CdrUnsupported:
            return generic(raw)

    return decode


class _Subscription:
    """A reader and the thread that takes its samples and hands them to the callback."""

    def __init__(self, participant, topic_obj, qos: QoS, topic: str, ros_type: str, callback: Callback) -> None:
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
        from cyclonedds.sub import DataReader

        self._reader = DataReader(participant, topic_obj, qos=_qos(qos, reader=True))
        self._waitset = WaitSet(participant)
        self._mask = ViewState.Any | InstanceState.Any | SampleState.Any
        self._cond = ReadCondition(self._reader, self._mask)
        self._waitset.attach(self._cond)
        self._topic, self._callback = topic, callback
        self._decode = sample_decoder(ros_type)
        self.malformed = 0  # samples whose bytes did not decode (logged; counted in lost())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dds-take{topic}", daemon=True)
        self._thread.start()

    def _take(self) -> tuple[bytes, Any] | None:
        """One serialized sample and its SampleInfo, or None when the reader is empty."""
        from cyclonedds._clayer import ddspy_take
        from cyclonedds.core import DDSException

        ret = ddspy_take(self._reader._ref, self._mask, 1)
        if isinstance(ret, int):
            raise DDSException(ret, f"taking a sample on {self._topic}")
        return ret[0] if ret else None

    def _run(self) -> None:
        from cyclonedds.util import duration

        while not self._stop.is_set():
            self._waitset.wait(duration(milliseconds=100))
            while not self._stop.is_set():
                t0 = time.perf_counter()
                try:
                    taken = self._take()
                except Exception:
                    log.exception("take on %s failed", self._topic)
                    break
                if taken is None:
                    break
                raw, info = taken
                if not info.valid_data:  # a writer left: no data in it
                    continue
                try:
                    msg = self._decode(raw)
                except Exception as err:  # malformed bytes must not end the subscription
                    self.malformed += 1
                    log.warning("undecodable sample on %s (%d bytes): %s", self._topic, len(raw), err)
                    continue
                dt = time.perf_counter() - t0
                try:
                    self._callback(msg, dt)
                except Exception:  # a failing callback must not end the subscription
                    log.exception("callback for %s failed", self._topic)

    def matched(self) -> int:
        return len(self._reader.get_matched_publications())

    def lost(self) -> int:
        """Samples DDS lost or could not keep before we took them."""
        return (
            int(self._reader.get_sample_lost_status().total_count)
            + int(self._reader.get_sample_rejected_status().total_count)
            + self.malformed
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


class CycloneTransport:
    name = "cyclonedds"

    def __init__(self, node_name: str, domain_id: int | None = None) -> None:
        from cyclonedds.domain import DomainParticipant

        ensure_loopback_config()
        self.node_name = node_name
        domain = int(os.environ.get("ROS_DOMAIN_ID", "0")) if domain_id is None else domain_id
        self.participant = DomainParticipant(domain)
        self._topics: dict[str, Any] = {}
        self._subs: list[_Subscription] = []

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
        sub = _Subscription(self.participant, self._topic(topic, ros_type), qos, topic, ros_type, callback)
        self._subs.append(sub)
        return sub

    def deserialize(self, raw: bytes, ros_type: str) -> Any:
        return idl_type(ros_type).deserialize(raw)

    def serialize(self, msg: Any, ros_type: str) -> bytes:
        return msg.serialize()

    def close(self) -> None:
        for sub in self._subs:
            sub.close()
        self._subs.clear()
        self._topics.clear()
        self.participant = None
