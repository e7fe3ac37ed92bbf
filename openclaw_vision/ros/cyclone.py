"""ROS 2 over Cyclone DDS without ROS installed: `rt/` topics, rmw type names, XCDR1.

A Humble node on rmw_cyclonedds (or Fast DDS, for topics) sees our publishers and
subscribers as ordinary ROS endpoints.

Python never runs on Cyclone's own threads: each subscription has a thread of ours that
waits on a WaitSet (which releases the GIL) and takes samples as they arrive. With listeners
instead, a receive thread can wait for the GIL while the GIL holder waits, inside a blocking
reliable write, for an acknowledgement that only that receive thread would process: a
deadlock we saw as 10 s write timeouts. Readers keep every sample until we take it (KEEP_ALL
within a resource limit), so no sample is overwritten unseen; what DDS could not keep is
reported by `lost()`. Each wake-up takes all the reader holds in one `dds_takecdr` (at most
TAKE_AT_MOST): one wake-up and one take for every sample a busy moment left waiting. While the
subscriber is busy (the encoder node's camera whose slot holds a frame the worker has not taken), its
samples are left waiting on purpose and taken a few at a time (`_Subscription`, "Paced").

Samples are taken serialized and handed to the subscription core both transports share
(subscription.py: decode, time, count, guard the callback): sensor_msgs/Image and CompressedImage
by `cdr`'s struct reader, whose `data` is a view of the sample's bytes, every other type by its
generated class. The bytes come from `dds_takecdr` (Cyclone's public C API, through ctypes on
the very libddsc the binding loaded): a reference to the sample Cyclone assembled from the
network, no copy at all; the reference is released when the last view of it is gone. Those
ctypes structs are declared by hand, so the first transport of a process checks them against
the library actually loaded (native_check.verify: versions, then a probe sample read back) and
refuses to start, with NativeSeamError naming the versions, where they do not fit. The public
`DataReader.take` (copy, then deserialise) took ~24 ms per 1080p rgb8 frame where this takes
~0.2 ms (~130x; ~170 ms without dds_types' block-copy table; scripts/bench_dds_take.py), so the
seam stays, checked. The binding's `ddspy_take` (what it calls before deserialising, one
bytes copy) stays as the reference path test_cdr runs the same images through. Either way no
Python code walks the pixels. A take that raises is logged once with its traceback, then as a
count per period (subscription.Throttle.failure).
Publishers take a message object or, like rclpy's, already serialized CDR bytes.

Services speak rmw_cyclonedds's wire format: requests on `rq/<name>Request`, replies on
`rr/<name>Reply`, types `pkg::srv::dds_::Svc_Request_` / `_Response_`, each sample led by
rmw_cyclonedds's request header (client guid, 8 bytes, and sequence number: dds_types.REQUEST_HEADER),
and the endpoints' user data that rmw_cyclonedds matches clients and services by. A service takes its
requests on a thread of its own and a client waits on the caller's thread, both on WaitSets.

The configuration (dds_config.for_cyclone: CYCLONEDDS_URI, else the shipped loopback file) is
given to Cyclone when a transport creates its domain, never written into the environment.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runtime import threads
from . import dds_config, native_check
from .dds_types import field_names, idl_type, service_wire_type
from .subscription import DdsQos, SampleIntake, Throttle, reader_qos, writer_qos
from .types import Callback, QoS

log = logging.getLogger(__name__)

_domains_lock = threading.Lock()
#: domain id → (the Domain our transports in this process share, its configuration); a transport holds
#: its Domain, so the last one closed deletes it and the next transport creates it anew
_domains: dict[int, tuple[weakref.ref, str]] = {}


def _domain(domain_id: int, uri: str):
    """The process's Domain for `domain_id`, created with `uri` as its configuration (what
    CYCLONEDDS_URI would hold: files and inline XML) by the first transport that needs it.

    Cyclone takes a domain's configuration when the domain is created, from CYCLONEDDS_URI unless it
    is given one: given here, this process's environment stays as it was (so a replay or a test that
    starts nodes as children never changes what they inherit)."""
    from cyclonedds.domain import Domain

    with _domains_lock:
        ref, in_force = _domains.get(domain_id, (lambda: None, uri))
        domain = ref()
        if domain is None:
            domain = Domain(domain_id, uri)
            _domains[domain_id] = (weakref.ref(domain), uri)
        elif in_force != uri:
            log.info("DDS: domain %d runs on %s already (asked for %s)", domain_id, in_force, uri)
        return domain


def dds_topic_name(topic: str) -> str:
    """'/visual_features' → 'rt/visual_features', as rmw maps ROS topics."""
    if not topic.startswith("/"):
        topic = "/" + topic
    return "rt" + topic


def dds_service_topics(name: str) -> tuple[str, str]:
    """'/query_memory' → ('rq/query_memoryRequest', 'rr/query_memoryReply'), as rmw_cyclonedds maps a service."""
    if not name.startswith("/"):
        name = "/" + name
    return f"rq{name}Request", f"rr{name}Reply"


def _qos(q: DdsQos, userdata: str = ""):
    from cyclonedds.core import Policy, Qos
    from cyclonedds.util import duration

    if q.reliability == "reliable":
        rel = Policy.Reliability.Reliable(duration(seconds=10))
    else:
        rel = Policy.Reliability.BestEffort
    policies = [rel, Policy.Durability.Volatile, Policy.DataRepresentation(use_cdrv0_representation=True)]
    if q.history == "keep_all":
        policies.append(Policy.History.KeepAll)
        if q.depth:
            policies.append(Policy.ResourceLimits(q.depth, -1, q.depth))
    else:
        policies.append(Policy.History.KeepLast(q.depth))
    if userdata:
        policies.append(Policy.Userdata(userdata.encode()))
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


def _ddsc():
    """The libddsc the binding runs on, typed for the zero-copy take (native_check.ddsc: version-checked; its
    structs proven on a probe sample by the first transport's native_check.verify)."""
    return native_check.ddsc()


def _release(lib, ref: int, iov: native_check.Iovec) -> None:
    lib.ddsi_serdata_to_ser_unref(ref, ctypes.byref(iov))


def _view(lib, sd: int) -> memoryview:
    """A read-only view of serdata `sd`'s CDR bytes that holds its own reference (ddsi_serdata_to_ser_ref),
    given back (ddsi_serdata_to_ser_unref) when the view's buffer object is collected, i.e. when no Frame
    or array uses those bytes any more. The caller still owns (and unrefs) the reference it passed in."""
    iov = native_check.Iovec()
    size = lib.ddsi_serdata_size(sd)
    ref = lib.ddsi_serdata_to_ser_ref(sd, 0, size, ctypes.byref(iov))
    buf = (ctypes.c_ubyte * iov.iov_len).from_address(iov.iov_base)
    weakref.finalize(buf, _release, lib, ref, iov).atexit = False  # at exit the process frees it all
    return memoryview(buf).cast("B").toreadonly()


@dataclass
class Taken:
    """What one take call gave: the samples with data, oldest first (views of Cyclone's own bytes, or
    the binding's copies); `count` is every sample taken, with data or not (0: the reader was empty)."""

    count: int
    samples: list = field(default_factory=list)


#: The most samples one take call takes; None: all the reader may hold (its resource limit). 1 is the path before
#: issue 38 (a take per sample), which bench/dropcost.py measures beside this one.
TAKE_AT_MOST: int | None = None


class Taker:
    """`dds_takecdr` of up to `most` samples into arrays made once (one take thread uses them): the
    reader's whole content in one call, one wake-up for all of it. Each sample is a view of Cyclone's own
    bytes (`_view`): no copy at all. Measured: `bench --mode capacity`'s
    drop-cost section."""

    def __init__(self, lib, reader: int, mask: int, most: int) -> None:
        self._lib, self._reader, self._mask = lib, reader, mask
        self._bufs = (ctypes.c_void_p * most)()
        self._infos = (native_check.SampleInfo * most)()
        self._most = most

    def take(self) -> Taken:
        from cyclonedds.core import DDSException

        lib, bufs = self._lib, self._bufs
        n = lib.dds_takecdr(self._reader, ctypes.byref(bufs), self._most, ctypes.byref(self._infos), self._mask)
        if n < 0:
            raise DDSException(n, "dds_takecdr")
        taken = Taken(n)
        try:
            taken.samples = [_view(lib, bufs[i]) for i in range(n) if self._infos[i].valid_data]  # else a writer left
        finally:
            for i in range(n):
                lib.ddsi_serdata_unref(bufs[i])  # the take's references; each view holds its own
        return taken


#: Seconds a take thread pauses after a failed take before it waits and takes again.
TAKE_RETRY_S = 0.1
#: The longest and shortest a paced reader is left to fill before its thread drains it (`drain_after`). The longest
#: bounds what a camera that was silent and starts again can fill: a reader of READER_BUFFER (32) samples holds 0.3 s
#: of a camera up to ~100 fps before it rejects (flow control on reliable, a counted loss on best effort).
DRAIN_MAX_S, DRAIN_MIN_S = 0.3, 0.005


def drain_after(most: int, depth: int, taken: int, seconds: float) -> float:
    """How long a paced reader of `depth` samples may fill before its thread drains it: `most` samples (what
    the subscriber lets wait there; at most half the depth, so a burst of twice the rate still fits) at the
    rate of the last fill (`taken` samples in `seconds`), within DRAIN_MIN_S..DRAIN_MAX_S. Nothing taken yet: the
    shortest, so a reader's first fill is measured before it is trusted."""
    if taken <= 0 or seconds <= 0:
        return DRAIN_MIN_S
    return min(DRAIN_MAX_S, max(DRAIN_MIN_S, min(most, depth // 2) * seconds / taken))


class _Subscription:
    """A reader and the thread that takes its samples and hands them to the intake (subscription.py).

    Each wake-up takes everything the reader holds in one call (at most its resource limit) and hands
    the samples on oldest first; it takes again only when that call was full, and otherwise waits: the
    read condition is a level (set while the reader holds a sample, and dds_waitset_wait checks it before
    it blocks: eclipse-cyclonedds/cyclonedds, src/core/ddsc/src/dds_waitset.c), so a sample that came
    meanwhile ends the wait at once. `takes` counts the calls that found samples (samples per take: how far
    behind the thread was).

    **Paced** (issue 38): while the subscriber is busy (`SampleIntake.paced`: the encoder node's camera whose
    slot holds a frame the worker has not taken; its `reader_samples` parameter), the samples wait in the
    reader, with no wake-up of this thread each: it waits for the subscriber to take (`SampleIntake.room`) or
    for the time `in_reader` samples take to come (`drain_after`), then takes them all in one call. The
    subscriber takes what waits itself when it wants the newest (`SampleIntake.pull`, on its thread). The thread
    asks `paced()` each time it wakes, from data too, so what comes after the subscriber turned busy waits even
    if the thread was already waiting for data; `room` only makes it ask again, and only the drain time drains
    (a busy subscriber's samples taken by this thread at once were a CI failure). Every
    sample still goes through the intake, in order; what pacing saves is the wake-ups, a wake-up of this thread
    cold from the frame Cyclone just assembled being most of what a dropped frame cost us (bench/dropcost.py).
    What waits when the node stops is pulled by its close (intake.Intake.stop_holding) and counted."""

    def __init__(self, participant, topic_obj, qos: QoS, intake: SampleIntake) -> None:
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
        from cyclonedds.sub import DataReader

        rq = reader_qos(qos, bounded_keep_all=True)
        self._reader = DataReader(participant, topic_obj, qos=_qos(rq))
        self._waitset = WaitSet(participant)
        self._mask = ViewState.Any | InstanceState.Any | SampleState.Any
        self._cond = ReadCondition(self._reader, self._mask)
        self._waitset.attach(self._cond)
        self.intake = intake
        self._lib = _ddsc()
        self.zero_copy = self._lib is not None  # else the binding's take, one copy
        self._depth = rq.depth  # the most samples the reader holds untaken
        self._most = min(rq.depth, TAKE_AT_MOST or rq.depth)
        self._taker = None
        if self.zero_copy:
            self._taker = Taker(self._lib, self._reader._ref, int(self._mask), self._most)
        self.takes = 0
        self._reliable = qos.reliability == "reliable"
        self.take_failures = Throttle()  # .total: takes that raised
        self._stop = threading.Event()
        self._take_lock = threading.Lock()  # one take and its samples' intake, whole: this thread's or a pull's
        self.drain_s = DRAIN_MIN_S  # paced: how long samples may wait in the reader (`drain_after`)
        self._emptied = time.monotonic()  # when a take last left the reader empty
        intake.pull = self._pull
        self._thread = threads.Thread(target=self._run, name=f"dds-take{intake.topic}", daemon=True)
        self._thread.start()

    def _take(self) -> Taken:
        """Everything the reader holds (Taken.count 0: it was empty)."""
        from cyclonedds._clayer import ddspy_take
        from cyclonedds.core import DDSException

        if self._taker is not None:
            return self._taker.take()
        ret = ddspy_take(self._reader._ref, self._mask, self._most)
        if isinstance(ret, int):
            raise DDSException(ret, f"taking a sample on {self.intake.topic}")
        return Taken(len(ret), [raw for raw, info in ret if info.valid_data])

    def _pull(self) -> None:
        """The subscriber wants the newest: what waits in the reader, handled on its thread (each at once)."""
        self._take_all(self.intake.now)

    def _take_all(self, hand) -> int:
        """Take everything the reader holds and `hand` it on, oldest first: how many samples were taken, or -1
        if a take failed (logged, throttled). Each time the reader is left empty, the samples since it last was
        set how long a paced reader may fill (`drain_after`)."""
        n = 0
        while True:
            with self._take_lock:
                if self._stop.is_set():  # closing: the reader goes, nothing more is taken
                    return n
                t0 = time.perf_counter()
                try:
                    taken = self._take()
                except Exception as err:
                    self.take_failures.failure(log, f"take on {self.intake.topic} failed", err)
                    return -1
                if taken.count:
                    self.takes += 1
                    n += taken.count
                    for raw in taken.samples:  # oldest first, each through the intake (subscription.py)
                        hand(raw, t0)
                drained = taken.count < self._most  # the reader had no more: one dds_takecdr, not two
                taken = raw = None  # keep no sample alive here: its bytes go back when its users are done
                if drained:
                    now = time.monotonic()
                    if n:
                        self.drain_s = drain_after(self.intake.in_reader, self._depth, n, now - self._emptied)
                        self._emptied = now
                    return n

    def _run(self) -> None:
        from cyclonedds.util import duration

        room = self.intake.room
        while not self._stop.is_set():
            if self.intake.paced():  # the subscriber is busy: samples wait in the reader (class doc)
                if room.wait(self.drain_s):  # it took, or asked anew (hold_while): look again; only time drains
                    room.clear()
                    continue
                if self.intake.paced():  # still busy: drain, every sample handled now, back to back
                    taken = self._take_all(self.intake.now)
                    if taken < 0:
                        self._stop.wait(TAKE_RETRY_S)
                    elif taken == 0:  # nothing came (a silent camera): wait twice as long before looking again
                        self.drain_s = min(DRAIN_MAX_S, 2 * self.drain_s)
                    continue
            self._waitset.wait(duration(milliseconds=100))
            if self.intake.paced():  # the subscriber turned busy while this thread waited: what came waits too
                continue
            if self._take_all(self.intake) < 0:  # the reader still signals data: without a pause, a hot loop
                self._stop.wait(TAKE_RETRY_S)

    def matched(self) -> int:
        reader = self._reader  # None once closed (a QoS change replaces a subscription while diagnostics read it)
        return 0 if reader is None else len(reader.get_matched_publications())

    def lost(self) -> int:
        """Samples DDS lost or could not keep before we took them, and samples that did not decode.

        A sample the reader rejects for want of room (its resource limit) is lost on best effort,
        but on a reliable subscription it is only flow control: the writer keeps it and sends it
        again (the reliability fuzz saw 340 such rejections for 10 000 samples, all delivered).
        """
        if self._reader is None:  # closed: the count it ended with
            return self._lost_at_close
        lost = int(self._reader.get_sample_lost_status().total_count) + self.intake.malformed
        if not self._reliable:
            lost += int(self._reader.get_sample_rejected_status().total_count)
        return lost

    def close(self) -> None:
        self._stop.set()
        self.intake.room.set()
        self._thread.join(timeout=2)
        with self._take_lock:  # a pull in flight ends first; later ones find the stop set
            if self._reader is not None:
                self._lost_at_close = self.lost()
                self._waitset = self._cond = self._reader = None  # the last references: DDS deletes the reader


#: QoS of both endpoints of a service: rclpy's qos_profile_services_default (reliable, keep_last 10, volatile)
SERVICE_QOS = QoS("reliable", 10)


def _endpoint_id(kind: str) -> tuple[int, str]:
    """A random 64-bit id and the user data rmw_cyclonedds gives a client's or service's endpoints
    ('clientid=…;' / 'serviceid=…;', rmw_node.cpp rmw_init_cs). A Humble client counts a service as
    available only once it sees one request reader and one reply writer with the same serviceid
    (check_for_service_reader_writer); a Humble server replies once the requesting client's reply reader
    (same clientid) is matched. Only equality of the strings matters."""
    ident = int.from_bytes(os.urandom(8), "little") or 1
    return ident, f"{kind}={ident:016x};"


class _ServiceEndpoints:
    """A service's request and reply topics, reader and writer (which side reads requests depends on the
    role), and the WaitSet our thread waits on: Python never runs on Cyclone's threads."""

    def __init__(self, participant, name: str, srv_type: str, server: bool) -> None:
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet
        from cyclonedds.pub import DataWriter
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        from .types import REQUEST, RESPONSE

        self.name, self.srv_type = name, srv_type
        rq, rr = dds_service_topics(name)
        self.request_type = service_wire_type(srv_type + REQUEST)
        self.reply_type = service_wire_type(srv_type + RESPONSE)
        self.id, userdata = _endpoint_id("serviceid" if server else "clientid")
        req_topic, rep_topic = Topic(participant, rq, self.request_type), Topic(participant, rr, self.reply_type)
        read_topic, write_topic = (req_topic, rep_topic) if server else (rep_topic, req_topic)
        self.reader = DataReader(participant, read_topic,
                                 qos=_qos(reader_qos(SERVICE_QOS, bounded_keep_all=True), userdata))  # fmt: skip
        self.writer = DataWriter(participant, write_topic, qos=_qos(writer_qos(SERVICE_QOS), userdata))
        self.waitset = WaitSet(participant)
        self.mask = ViewState.Any | InstanceState.Any | SampleState.Any
        self.cond = ReadCondition(self.reader, self.mask)
        self.waitset.attach(self.cond)

    def take(self) -> list:
        """The samples waiting (only those with data)."""
        return [s for s in self.reader.take(N=READ_BATCH) if s is not None and hasattr(s, "cdds_request_seq")]

    def wait(self, seconds: float) -> None:
        from cyclonedds.util import duration

        self.waitset.wait(duration(milliseconds=max(1, int(seconds * 1000))))

    def close(self) -> None:
        self.waitset = self.cond = self.reader = self.writer = None  # the last references: DDS deletes them


#: requests or replies taken per take call
READ_BATCH = 16


class _Service:
    """A server: a thread of ours takes requests, calls the handler and writes each reply with the request's
    header (client guid, sequence number) before the reply's fields, as rmw_cyclonedds does."""

    def __init__(self, participant, name: str, srv_type: str, handler) -> None:
        from .types import RESPONSE

        self._ep = _ServiceEndpoints(participant, name, srv_type, server=True)
        self._handler, self._fields = handler, field_names(srv_type + RESPONSE)
        self.failed = 0
        self.take_failures = Throttle()  # .total: takes that raised
        self._stop = threading.Event()
        self._thread = threads.Thread(target=self._run, name=f"dds-service{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._ep.wait(0.1)
            while not self._stop.is_set():
                try:
                    requests = self._ep.take()
                except Exception as err:
                    self.take_failures.failure(log, f"take on service {self._ep.name} failed", err)
                    self._stop.wait(TAKE_RETRY_S)
                    break
                if not requests:
                    break
                for req in requests:
                    self._answer(req)

    def _answer(self, req) -> None:
        try:
            resp = self._handler(req)
            wire = self._ep.reply_type(cdds_request_guid=req.cdds_request_guid, cdds_request_seq=req.cdds_request_seq,
                                       **{f: getattr(resp, f) for f in self._fields})  # fmt: skip
            self._ep.writer.write(wire)
        except Exception:  # a failing handler must not end the service thread
            self.failed += 1
            log.exception("service %s: request %d not answered", self._ep.name, req.cdds_request_seq)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._ep.close()


class _Client:
    """A client: a call writes the request with our guid and the next sequence number and waits, on the
    caller's thread (a WaitSet: Cyclone's threads never run Python), for the reply carrying both; replies
    for other clients or earlier, timed-out calls are dropped. One call at a time per client."""

    def __init__(self, participant, name: str, srv_type: str) -> None:
        from .types import REQUEST

        self._ep = _ServiceEndpoints(participant, name, srv_type, server=False)
        self._fields = field_names(srv_type + REQUEST)
        self._seq = 0
        self._lock = threading.Lock()

    def ready(self) -> bool:
        return bool(self._ep.writer.get_matched_subscriptions()) and bool(self._ep.reader.get_matched_publications())

    def call(self, request: Any, timeout: float = 10.0) -> Any:
        from .types import ServiceTimeout

        with self._lock:
            self._seq += 1
            seq = self._seq
            self._ep.writer.write(self._ep.request_type(cdds_request_guid=self._ep.id, cdds_request_seq=seq,
                                                        **{f: getattr(request, f) for f in self._fields}))  # fmt: skip
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                for reply in self._ep.take():
                    if reply.cdds_request_guid == self._ep.id and reply.cdds_request_seq == seq:
                        return reply
                self._ep.wait(min(left, 0.1))
        raise ServiceTimeout(f"service {self._ep.name}: no reply within {timeout:g} s "
                             f"({'a server is matched' if self.ready() else 'no server matched'})")  # fmt: skip

    def close(self) -> None:
        self._ep.close()


class CycloneTransport:
    name = "cyclonedds"

    def __init__(self, node_name: str, domain_id: int | None = None) -> None:
        from cyclonedds.domain import DomainParticipant

        self.node_name = node_name
        self.uri = dds_config.for_cyclone(os.environ)  # the configuration in force; the environment is not changed
        domain = int(os.environ.get("ROS_DOMAIN_ID", "0")) if domain_id is None else domain_id
        self._domain = _domain(domain, self.uri)
        self.participant = DomainParticipant(domain)
        try:  # once per process: a library our hand-declared seams do not fit is refused, never crashed on
            native_check.verify(self.participant)
        except native_check.NativeSeamError:
            self.participant = self._domain = None
            raise
        self._topics: dict[str, Any] = {}
        self._subs: list[_Subscription] = []
        self._services: list[_Service | _Client] = []

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

        return _Publisher(DataWriter(self.participant, self._topic(topic, ros_type), qos=_qos(writer_qos(qos))))

    def subscribe(self, topic: str, ros_type: str, qos: QoS, callback: Callback) -> _Subscription:
        """Images are read by cdr's struct reader, their `data` a view of Cyclone's own sample (module doc)."""
        intake = SampleIntake(topic, ros_type, callback, idl_type(ros_type).deserialize)
        sub = _Subscription(self.participant, self._topic(topic, ros_type), qos, intake)
        self._subs.append(sub)
        return sub

    def service(self, name: str, srv_type: str, handler) -> _Service:
        """Requests taken on a thread of the service's own (never a subscription's), one at a time."""
        srv = _Service(self.participant, name, srv_type, handler)
        self._services.append(srv)
        return srv

    def client(self, name: str, srv_type: str) -> _Client:
        cli = _Client(self.participant, name, srv_type)
        self._services.append(cli)
        return cli

    def deserialize(self, raw: bytes, ros_type: str) -> Any:
        return idl_type(ros_type).deserialize(raw)

    def serialize(self, msg: Any, ros_type: str) -> bytes:
        return msg.serialize()

    def close(self) -> None:
        for sub in self._subs:
            sub.close()
        self._subs.clear()
        for srv in self._services:
            srv.close()
        self._services.clear()
        self._topics.clear()
        self.participant = self._domain = None  # the last transport of its domain gone: DDS deletes the domain
