"""ROS 2 message types as Cyclone DDS types, generated from their .msg definitions.

Every type comes from one place: Humble's definitions as the `rosbags` typestore holds them,
plus our msg/VisualFeatures.msg. From those we build `IdlStruct` classes with ROS 2's DDS
names (`pkg::msg::dds_::Msg_`), final and keyless, which cyclonedds-python encodes as XCDR1:
the bytes a Humble node sends and a rosbag2 stores.

`uint8[]`/`byte[]` fields: cyclonedds-python packs `sequence<uint8>` element by element
(measured here: ~0.9 s to encode a 1080p image), and a plain `bytes` annotation, which it
copies as one block, cannot be described in its XTypes type information (topic creation
fails). We keep the `sequence<uint8>` annotation, so discovery announces the right type, and
register the binding's block-copy machine for it (native_check.octet_sequences_block_copied,
run before the first type is built): identical bytes on the wire, Python `bytes` in and out,
~8 ms to encode and ~10 ms to decode a 1080p frame here. This touches one private table of
cyclonedds-python: the requirements pin its major version, and the registration is checked on a
known sample and refused (NativeSeamError, naming the versions) where the table is not as it
was. The Cyclone transport's image subscriptions and the replay do not go through these classes
at all (ros/cdr.py reads images with `struct`; the tests' writer is test/support/cdr_writer.py);
they serve every other type, topic creation and discovery.
"""

from __future__ import annotations

from functools import cache

from cyclonedds.idl import IdlStruct, make_idl_struct
from cyclonedds.idl import types as t

from ..runtime.bags import typestore
from .native_check import octet_sequences_block_copied

_BASE = {
    "bool": bool,
    "byte": t.byte,
    "char": t.uint8,
    "int8": t.int8,
    "uint8": t.uint8,
    "int16": t.int16,
    "uint16": t.uint16,
    "int32": t.int32,
    "uint32": t.uint32,
    "int64": t.int64,
    "uint64": t.uint64,
    "float32": t.float32,
    "float64": t.float64,
    "string": str,
}


def dds_type_name(ros_type: str) -> str:
    """'sensor_msgs/msg/Image' → 'sensor_msgs::msg::dds_::Image_' (rmw's naming)."""
    pkg, kind, name = ros_type.split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


def _field_type(desc):
    from rosbags.interfaces import Nodetype

    node, arg = desc
    if node == Nodetype.BASE:
        name, bound = arg
        if name == "string" and bound:
            return t.bounded_str[bound]
        return _BASE[name]
    if node == Nodetype.NAME:
        return idl_type(arg)
    inner, size = arg
    if node == Nodetype.SEQUENCE:
        return t.sequence[_field_type(inner), size] if size else t.sequence[_field_type(inner)]
    if node == Nodetype.ARRAY:
        return t.array[_field_type(inner), size]
    raise TypeError(f"unsupported field node {node}")


def _annotations(ros_type: str) -> dict:
    store = typestore()
    if ros_type not in store.fielddefs:
        raise KeyError(f"unknown message type {ros_type!r}")
    _consts, fields = store.fielddefs[ros_type]
    annotations = {name: _field_type(desc) for name, desc in fields}
    if not annotations:  # ROS gives empty messages one uint8 member on the wire
        annotations = {"structure_needs_at_least_one_member": t.uint8}
    return annotations


def field_names(ros_type: str) -> list[str]:
    """The ROS fields of a message (or service half), in wire order."""
    return list(_annotations(ros_type))


@cache
def idl_type(ros_type: str) -> type[IdlStruct]:
    """The Cyclone DDS class for a ROS 2 message type name, e.g. 'sensor_msgs/msg/Image'; for a service's
    halves ('openclaw_vision/srv/QueryMemory_Request') the message as ROS code sees it (no request header)."""
    octet_sequences_block_copied()
    return make_idl_struct(ros_type.replace("/", "__"), dds_type_name(ros_type), _annotations(ros_type))


#: rmw_cyclonedds's request header, which leads every service request and reply on the wire (Humble
#: rmw_cyclonedds_cpp/src/serdata.hpp, cdds_request_header_t {uint64_t guid; int64_t seq;}; serdata.cpp
#: writes it before the message's own fields). `guid` is the client's request writer's instance handle
#: (8 bytes, not a 16-byte GUID); the server copies both into its reply, and the client takes only the
#: replies with its own guid. 16 bytes: the fields after it keep their 8-byte alignment.
REQUEST_HEADER = {"cdds_request_guid": t.uint64, "cdds_request_seq": t.int64}


@cache
def service_wire_type(ros_type: str) -> type[IdlStruct]:
    """A service half as rmw_cyclonedds puts it on the wire: REQUEST_HEADER, then the ROS fields, under
    the half's DDS name ('openclaw_vision::srv::dds_::QueryMemory_Request_')."""
    annotations = _annotations(ros_type)
    if set(annotations) & set(REQUEST_HEADER):
        raise TypeError(f"{ros_type}: a field is named like the request header's {sorted(REQUEST_HEADER)}")
    octet_sequences_block_copied()
    return make_idl_struct(ros_type.replace("/", "__") + "__wire", dds_type_name(ros_type),
                           {**REQUEST_HEADER, **annotations})  # fmt: skip
