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

Samples are taken serialized and decoded by us: sensor_msgs/Image and CompressedImage by
`cdr`'s struct reader, whose `data` is a view of the sample's bytes, every other type by its
generated class. The bytes come from `dds_takecdr` (Cyclone's public C API, through ctypes on
the very libddsc the binding loaded): a reference to the sample Cyclone assembled from the
network, no copy at all; the reference is released when the last view of it is gone. Where
that library cannot be found, the binding's `ddspy_take` (what `DataReader.take` calls before
deserialising) hands over a bytes copy instead. Either way no Python code walks the pixels.
Publishers take a message object or, like rclpy's, already serialized CDR bytes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
import weakref
from functools import cache
from typing import Any

import numpy as np

from . import cdr, dds_config
from .dds_types import idl_type
from .types import Callback, QoS

log = logging.getLogger(__name__)

_uri_lock = threading.Lock()


def ensure_loopback_config() -> str:
    """Point CYCLONEDDS_URI at the shipped loopback-only config unless the user chose one, and honour
    ROS_LOCALHOST_ONLY as rmw_cyclonedds does (dds_config.for_cyclone)."""
    with _uri_lock:
        return dds_config.for_cyclone()


#: Samples a reader may hold before we take them (the taking thread normally keeps it near 0).
READER_BUFFER = 32


def dds_topic_name(topic: str) -> str:
    """'/visual_features' → 'rt/visual_features', as rmw maps ROS topics."""
    if not topic.startswith("/"):
        topic = "/" + topic
    return "rt" + topic


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
    """bytes → message: cdr's zero-copy struct reader for images (headers as this transport's own
    Header type), the generated class for the rest."""
    header_cls, time_cls = idl_type("std_msgs/msg/Header"), idl_type("builtin_interfaces/msg/Time")

    def make_header(sec: int, nanosec: int, frame_id: str):
        return header_cls(stamp=time_cls(sec=sec, nanosec=nanosec), frame_id=frame_id)

    return cdr.sample_decoder(ros_type, idl_type(ros_type).deserialize, make_header)


class _SampleInfo(ctypes.Structure):
    """dds_sample_info_t (cyclonedds 11, src/core/ddsc/include/dds/dds.h)."""

    _fields_ = [
        ("sample_state", ctypes.c_int),
        ("view_state", ctypes.c_int),
        ("instance_state", ctypes.c_int),
        ("valid_data", ctypes.c_bool),
        ("source_timestamp", ctypes.c_int64),
        ("instance_handle", ctypes.c_uint64),
        ("publication_handle", ctypes.c_uint64),
        ("disposed_generation_count", ctypes.c_uint32),
        ("no_writers_generation_count", ctypes.c_uint32),
        ("sample_rank", ctypes.c_uint32),
        ("generation_rank", ctypes.c_uint32),
        ("absolute_generation_rank", ctypes.c_uint32),
    ]


class _Iovec(ctypes.Structure):
    """ddsrt_iovec_t on POSIX: struct iovec."""

    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@cache
def _ddsc():
    """The libddsc that cyclonedds' binding runs on, with the serdata calls typed; None if not found."""
    import cyclonedds._clayer  # noqa: F401  (loads libddsc into this process)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libddsc" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    try:
        lib = ctypes.CDLL(paths.pop())  # already loaded: the same instance, the same entities
        lib.dds_takecdr.argtypes = [
            ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint32, ctypes.POINTER(_SampleInfo),
            ctypes.c_uint32,
        ]  # fmt: skip
        lib.dds_takecdr.restype = ctypes.c_int32
        lib.ddsi_serdata_size.argtypes = [ctypes.c_void_p]
        lib.ddsi_serdata_size.restype = ctypes.c_uint32
        lib.ddsi_serdata_to_ser_ref.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.POINTER(_Iovec),
        ]
        lib.ddsi_serdata_to_ser_ref.restype = ctypes.c_void_p
        lib.ddsi_serdata_to_ser_unref.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Iovec)]
        lib.ddsi_serdata_to_ser_unref.restype = None
        lib.ddsi_serdata_unref.argtypes = [ctypes.c_void_p]
        lib.ddsi_serdata_unref.restype = None
    except (OSError, AttributeError):
        return None
    return lib


def _release(lib, ref: int, iov: _Iovec) -> None:
    lib.ddsi_serdata_to_ser_unref(ref, ctypes.byref(iov))


def take_serialized_ref(lib, reader: int, mask: int) -> tuple[Any, bool] | None:
    """(a read-only memoryview of one sample's CDR bytes, valid_data), or None when empty.

    The view points into Cyclone's own copy of the sample: a serdata reference taken with
    ddsi_serdata_to_ser_ref and given back (ddsi_serdata_to_ser_unref) when the view's buffer
    object is collected, i.e. when no Frame or array uses those bytes any more.
    """
    from cyclonedds.core import DDSException

    sd = ctypes.c_void_p()
    info = _SampleInfo()
    n = lib.dds_takecdr(reader, ctypes.byref(sd), 1, ctypes.byref(info), mask)
    if n < 0:
        raise DDSException(n, "dds_takecdr")
    if n == 0:
        return None
    try:
        if not info.valid_data:
            return b"", False
        iov = _Iovec()
        size = lib.ddsi_serdata_size(sd)
        ref = lib.ddsi_serdata_to_ser_ref(sd, 0, size, ctypes.byref(iov))
    finally:
        lib.ddsi_serdata_unref(sd)  # the take's reference; to_ser_ref holds its own
    buf = (ctypes.c_ubyte * iov.iov_len).from_address(iov.iov_base)
    weakref.finalize(buf, _release, lib, ref, iov).atexit = False  # at exit the process frees it all
    return memoryview(buf).cast("B").toreadonly(), True


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
        self._lib = _ddsc()
        self.zero_copy = self._lib is not None  # else the binding's take, one copy
        self.malformed = 0  # samples whose bytes did not decode (logged; counted in lost())
        self._reliable = qos.reliability == "reliable"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dds-take{topic}", daemon=True)
        self._thread.start()

    def _take(self) -> tuple[Any, bool] | None:
        """One serialized sample and whether it holds data, or None when the reader is empty."""
        from cyclonedds._clayer import ddspy_take
        from cyclonedds.core import DDSException

        if self.zero_copy:
            return take_serialized_ref(self._lib, self._reader._ref, int(self._mask))
        ret = ddspy_take(self._reader._ref, self._mask, 1)
        if isinstance(ret, int):
            raise DDSException(ret, f"taking a sample on {self._topic}")
        return (ret[0][0], ret[0][1].valid_data) if ret else None

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
                raw, valid = taken
                if not valid:  # a writer left: no data in it
                    continue
                try:
                    msg = self._decode(raw)
                except Exception as err:  # malformed bytes must not end the subscription
                    self.malformed += 1
                    log.warning("undecodable sample on %s (%d bytes): %s", self._topic, len(raw), err)
                    taken = raw = None
                    continue
                dt = time.perf_counter() - t0
                try:
                    self._callback(msg, dt)
                except Exception:  # a failing callback must not end the subscription
                    log.exception("callback for %s failed", self._topic)
                taken = raw = msg = None  # keep no sample alive here: its bytes go back when its users are done

    def matched(self) -> int:
        return len(self._reader.get_matched_publications())

    def lost(self) -> int:
        """Samples DDS lost or could not keep before we took them, and samples that did not decode.

        A sample the reader rejects for want of room (its resource limit) is lost on best effort,
        but on a reliable subscription it is only flow control: the writer keeps it and sends it
        again (the reliability fuzz saw 340 such rejections for 10 000 samples, all delivered).
        """
        if self._reader is None:  # closed: the count it ended with
            return self._lost_at_close
        lost = int(self._reader.get_sample_lost_status().total_count) + self.malformed
        if not self._reliable:
            lost += int(self._reader.get_sample_rejected_status().total_count)
        return lost

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self._reader is not None:
            self._lost_at_close = self.lost()
            self._waitset = self._cond = self._reader = None  # the last references: DDS deletes the reader


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
