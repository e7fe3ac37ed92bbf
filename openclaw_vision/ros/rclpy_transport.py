"""ROS 2 through rclpy, for a robot with Humble sourced.

Written to rclpy's documented API (Humble branch). Subscriptions take raw CDR and deserialise
in the callback, so the node can time deserialisation the same way on both transports.

Parameters (Humble rclpy/rclpy/node.py): every config key is declared with a
ParameterDescriptor built from its `config.Param` (description, range, choices as additional
constraints, read_only unless it may change at run time). `dynamic_typing=True`, because with a
type inferred from the default, `declare_parameter` raises InvalidParameterTypeException for a
YAML `2` where 2.0 is declared (`_apply_descriptor`: "Wrong parameter type"): we check types
ourselves (config.coerce), the same way as the pip path, and say so in one line. Ranges apply
only to values of their own type (`_apply_descriptor`), so an int given for a float still meets
our own range check. Run-time changes go through `add_on_set_parameters_callback`: rclpy refuses
a read-only key itself ("Trying to set a read-only parameter"), our callback validates the rest
and hands them to the node.
"""

from __future__ import annotations

import array
import importlib
import logging
import math
import os
import threading
from collections.abc import Callable
from typing import Any

from ..runtime import threads
from ..runtime.config import ConfigError, NodeConfig, Param
from . import dds_config
from .subscription import DdsQos, SampleIntake, reader_qos, writer_qos
from .types import Callback, QoS

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
#: longest wait of one spin before the spin thread looks at its stop flag (close() also wakes it)
SPIN_POLL_S = 0.5
#: how long close() waits for callbacks still running (one frame's encode, one VLM answer's publish)
CALLBACK_WAIT_S = 1.0


def _profile(q: DdsQos):
    """The rclpy QoSProfile (subscription.reader_qos says what a reader's depth means here)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        reliability=ReliabilityPolicy.RELIABLE if q.reliability == "reliable" else ReliabilityPolicy.BEST_EFFORT,
        history=HistoryPolicy.KEEP_ALL if q.history == "keep_all" else HistoryPolicy.KEEP_LAST,
        depth=q.depth,
        durability=DurabilityPolicy.VOLATILE,
    )


class _Publisher:
    def __init__(self, pub) -> None:
        self._pub = pub

    def publish(self, msg: Any) -> None:
        self._pub.publish(msg)

    def matched(self) -> int:
        return int(self._pub.get_subscription_count())


class _Subscription:
    def __init__(self, node, intake: SampleIntake) -> None:
        self._node, self.intake, self._sub = node, intake, None
        self.message_lost = 0  # what the RMW reported lost (rmw_cyclonedds: Cyclone's sample-lost status)

    def on_message_lost(self, info) -> None:
        self.message_lost += int(info.total_count_change)

    def matched(self) -> int:
        return int(self._node.count_publishers(self.intake.topic))

    def lost(self) -> int:
        """Samples the RMW reported lost and samples that did not decode, as the Cyclone path counts them.

        What DDS drops without a report (fragments of a frame that overflowed the socket buffer on
        best effort) is not in it: README, "Frames DDS can lose without telling"."""
        return self.message_lost + self.intake.malformed

    def close(self) -> None:
        self._node.destroy_subscription(self._sub)


class _Service:
    """rclpy's service with a callback group of its own: the MultiThreadedExecutor runs a query beside the
    subscriptions' callbacks (the node's default group is mutually exclusive), never in their way."""

    def __init__(self, node, name: str, cls, handler) -> None:
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

        self._node, self._handler, self.failed = node, handler, 0
        self._srv = node.create_service(cls, name, self._callback, callback_group=MutuallyExclusiveCallbackGroup())

    def _callback(self, request, response):
        try:
            return self._handler(request)
        except Exception:  # as on Cyclone: logged and counted; rclpy then sends the empty response
            self.failed += 1
            log.exception("service %s: a request not answered", self._srv.srv_name)
            return response

    def close(self) -> None:
        self._node.destroy_service(self._srv)


class _Client:
    def __init__(self, node, name: str, cls) -> None:
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

        self._node, self._name = node, name
        self._cli = node.create_client(cls, name, callback_group=MutuallyExclusiveCallbackGroup())

    def ready(self) -> bool:
        return bool(self._cli.service_is_ready())

    def call(self, request: Any, timeout: float = 10.0) -> Any:
        """The spin thread (the transport's executor) completes the future; this thread only waits."""
        from .types import ServiceTimeout

        done = threading.Event()
        future = self._cli.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            self._cli.remove_pending_request(future)
            raise ServiceTimeout(f"service {self._name}: no reply within {timeout:g} s "
                                 f"({'a server is matched' if self.ready() else 'no server matched'})")  # fmt: skip
        return future.result()

    def close(self) -> None:
        self._node.destroy_client(self._cli)


def descriptor(name: str, default: Any, spec: Param):
    """The rcl_interfaces/ParameterDescriptor (Humble msg: name, type, description,
    additional_constraints, read_only, dynamic_typing, floating_point_range[<=1], integer_range[<=1])
    for one config key. A one-sided range gets the type's limit on the open side."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    d = ParameterDescriptor(
        name=name,
        description=spec.description,
        additional_constraints=spec.constraints(),
        read_only=not spec.runtime,
        dynamic_typing=True,
    )
    if spec.minimum is not None or spec.maximum is not None:
        if isinstance(default, float):
            lo = -math.inf if spec.minimum is None else float(spec.minimum)
            hi = math.inf if spec.maximum is None else float(spec.maximum)
            d.floating_point_range = [FloatingPointRange(from_value=lo, to_value=hi, step=0.0)]
        elif isinstance(default, int) and not isinstance(default, bool):
            lo = -INT64_MAX - 1 if spec.minimum is None else int(spec.minimum)
            hi = INT64_MAX if spec.maximum is None else int(spec.maximum)
            d.integer_range = [IntegerRange(from_value=lo, to_value=hi, step=0)]
    return d


class RclpyTransport:
    name = "rclpy"

    def __init__(self, node_name: str, args: list[str] | None = None) -> None:
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        if not rclpy.ok():
            uri = dds_config.for_rclpy(os.environ)  # ROS_LOCALHOST_ONLY=1 with our lo config: would not start otherwise
            if uri is not None:  # rmw reads it from this process's environment: the process starting DDS sets it
                os.environ["CYCLONEDDS_URI"] = uri
            # args None: sys.argv (rclpy/context.py); its --ros-args give the overrides. No signal handlers of
            # rclpy's: its SIGTERM handler swallows the signal when no Python handler is there to chain to
            # (threads.StopSignals, installed first, owns SIGINT and SIGTERM).
            rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(node_name)
        self._declared: tuple[str, ...] = ()
        self._executor = MultiThreadedExecutor()
        self._executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threads.Thread(target=self._spin, name="rclpy-spin")
        self._thread.start()

    def _spin(self) -> None:
        """Spin until close(): a loop of ours (not Executor.spin) so that close() can end it and join
        it before anything it waits on is destroyed (see close)."""
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=SPIN_POLL_S)

    def msg(self, ros_type: str) -> type:
        """The generated class; a service's halves ('pkg/srv/Svc_Request') are rosidl's Svc.Request/Response."""
        from .types import REQUEST, RESPONSE

        pkg, kind, name = ros_type.split("/")
        module = importlib.import_module(f"{pkg}.{kind}")
        for suffix, half in ((REQUEST, "Request"), (RESPONSE, "Response")):
            if kind == "srv" and name.endswith(suffix):
                return getattr(getattr(module, name[: -len(suffix)]), half)
        return getattr(module, name)

    def service(self, name: str, srv_type: str, handler) -> _Service:
        return _Service(self.node, name, self.msg(srv_type), handler)

    def client(self, name: str, srv_type: str) -> _Client:
        return _Client(self.node, name, self.msg(srv_type))

    def float_array(self, values) -> Any:
        import numpy as np

        return array.array("f", np.asarray(values, np.float32).tobytes())

    def publisher(self, topic: str, ros_type: str, qos: QoS) -> _Publisher:
        return _Publisher(self.node.create_publisher(self.msg(ros_type), topic, _profile(writer_qos(qos))))

    def subscribe(self, topic: str, ros_type: str, qos: QoS, callback: Callback) -> _Subscription:
        """Samples are taken raw and handed to the subscription core (subscription.py): images read by
        cdr's struct reader (their pixels a view of the taken bytes: rclpy's own deserialiser copies
        6 MB into an array per 1080p frame), a failing callback logged and counted, never the end of
        the spin thread."""
        from rclpy.qos_event import SubscriptionEventCallbacks
        from rclpy.serialization import deserialize_message

        cls = self.msg(ros_type)
        handle = _Subscription(
            self.node, SampleIntake(topic, ros_type, callback, lambda raw: deserialize_message(raw, cls))
        )
        events = SubscriptionEventCallbacks(message_lost=handle.on_message_lost)
        profile = _profile(reader_qos(qos, bounded_keep_all=False))
        handle._sub = self.node.create_subscription(
            cls, topic, handle.intake, profile, raw=True, event_callbacks=events
        )
        return handle

    def deserialize(self, raw: bytes, ros_type: str) -> Any:
        from rclpy.serialization import deserialize_message

        return deserialize_message(raw, self.msg(ros_type))

    def serialize(self, msg: Any, ros_type: str) -> bytes:
        from rclpy.serialization import serialize_message

        return bytes(serialize_message(msg))

    def declare_parameters(self, cfg: NodeConfig) -> dict[str, Any]:
        """Declare each key of `cfg` (its value as the default) with its descriptor; return the
        values in force (the `--ros-args` overrides rclpy read). A value rclpy itself refuses (out
        of a declared range) becomes a ConfigError, never a traceback."""
        from rclpy.exceptions import ParameterException

        values, defaults = {}, cfg.as_dict()  # as a parameters file holds them: a string array as a list
        for key, spec in cfg.params().items():
            default = defaults[key]
            try:
                values[key] = self.node.declare_parameter(key, default, descriptor(key, default, spec)).value
            except ParameterException as err:
                raise ConfigError(f"parameter {key}: {err}") from None
            if values[key] is None and isinstance(default, list):
                # An empty array has no type on ROS: rclpy declares [] as a byte array, `ros2 param
                # dump` writes it as `[]`, and rcl reads an empty YAML sequence back as not set.
                # For a list-valued key, not set can only have meant the empty list.
                values[key] = []
        self._declared = tuple(values)
        return values

    def on_parameters_set(self, apply: Callable[[dict[str, Any]], Any]) -> None:
        """Call `apply({name: value})` for each `ros2 param set` of our keys; a ConfigError it
        raises refuses the change with its message as the reason. Keys that are not ours
        (use_sim_time) pass untouched: rejecting unknown names is bad practice per
        add_on_set_parameters_callback's docstring."""
        from rcl_interfaces.msg import SetParametersResult

        ours = set(self._declared)

        def callback(params) -> SetParametersResult:
            changes = {p.name: p.value for p in params if p.name in ours}
            if changes:
                try:
                    apply(changes)
                except ConfigError as err:
                    return SetParametersResult(successful=False, reason=str(err))
            return SetParametersResult(successful=True)

        self.node.add_on_set_parameters_callback(callback)

    def set_parameters(self, values: dict) -> str | None:
        """Set declared parameters together, the callbacks run once for all; None, or why they were refused.

        rclpy (humble, rclpy/node.py): `Node.set_parameters_atomically(list[Parameter])` calls the
        on-set callbacks once with the whole list and returns one SetParametersResult."""
        from rclpy.parameter import Parameter

        result = self.node.set_parameters_atomically([Parameter(k, value=v) for k, v in values.items()])
        return None if result.successful else result.reason

    def close(self) -> None:
        """Stop in the order that lets the process exit cleanly: end the spin thread and join it, then
        shut the executor (waits for callbacks still running), destroy the node, shut the context.

        Why (issue 17 item 4): the spin thread used to be a daemon thread left inside rclpy's wait
        (C++, the GIL released) when main returned. At interpreter exit a daemon thread that tries to
        take the GIL again is ended with pthread_exit, whose forced unwinding through rclpy's C++
        frames calls std::terminate: "terminate called without an active exception", SIGABRT, after
        the final counts were logged (3 of 6 SIGINT stops of `ros2 run … encoder_node` on Humble)."""
        import rclpy

        self._stop.set()
        self._executor.wake()  # ends the wait now rather than after SPIN_POLL_S
        self._thread.join()
        self._executor.shutdown(timeout_sec=CALLBACK_WAIT_S)
        self.node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
