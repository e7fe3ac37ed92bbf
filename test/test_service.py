"""Services on the pip path (Cyclone DDS) in rmw_cyclonedds's wire format: one server, one client, one process.

The real Humble side of the same format is tested in test/ros2/test_ros2_memory.py (an rclpy client calls
this server)."""

from __future__ import annotations

import struct

import pytest


@pytest.fixture()
def cyclone(dds_domain):
    from openclaw_vision.ros.cyclone import CycloneTransport

    server, client = CycloneTransport("test_server"), CycloneTransport("test_client")
    yield server, client
    client.close()
    server.close()


def _request(t, text: str):
    from openclaw_vision.ros.types import QUERY_MEMORY, REQUEST

    return t.msg(QUERY_MEMORY + REQUEST)(text=text, vector=[0.5], model_id="", top_k=2, since_ns=0, until_ns=0,
                                         camera="", robot="")  # fmt: skip


def test_a_request_is_answered_with_its_header_and_fields_and_a_failing_handler_is_counted(cyclone):
    from dds_helpers import wait_until

    from openclaw_vision.ros.cyclone import dds_service_topics
    from openclaw_vision.ros.dds_types import dds_type_name, service_wire_type
    from openclaw_vision.ros.types import QUERY_MEMORY, REQUEST, RESPONSE, ServiceTimeout

    server, client = cyclone
    resp_cls = server.msg(QUERY_MEMORY + RESPONSE)

    def handler(req):
        if req.text == "boom":
            raise RuntimeError("boom")
        return resp_cls(ok=True, error="", model_id=req.text, stamps_ns=[7, 3], frame_ids=["f7", "f3"],
                        cameras=["/a", "/b"], robots=["r", "r"], scores=[0.9, 0.1])  # fmt: skip

    srv = server.service("/query_memory", QUERY_MEMORY, handler)
    cli = client.client("/query_memory", QUERY_MEMORY)
    wait_until(cli.ready, 10, "the client matched the service")
    first = cli.call(_request(client, "one"), 5)
    second = cli.call(_request(client, "two"), 5)
    assert (first.model_id, list(first.stamps_ns), list(first.cameras)) == ("one", [7, 3], ["/a", "/b"])
    assert second.model_id == "two" and second.cdds_request_seq == first.cdds_request_seq + 1

    with pytest.raises(ServiceTimeout, match=r"no reply within 0\.5 s"):  # the handler raised: no reply, counted
        cli.call(_request(client, "boom"), 0.5)
    assert srv.failed == 1
    assert cli.call(_request(client, "three"), 5).model_id == "three"  # the service thread goes on

    # rmw_cyclonedds's names and layout: the 8-byte client guid and the int64 sequence number, then the fields
    assert dds_service_topics("/query_memory") == ("rq/query_memoryRequest", "rr/query_memoryReply")
    wire = service_wire_type(QUERY_MEMORY + REQUEST)
    assert wire.__idl_typename__ == dds_type_name(QUERY_MEMORY + REQUEST) == \
        "openclaw_vision::srv::dds_::QueryMemory_Request_"  # fmt: skip
    raw = wire(cdds_request_guid=0x1122334455667788, cdds_request_seq=9, text="ab", vector=[], model_id="",
               top_k=3, since_ns=0, until_ns=0, camera="", robot="").serialize()  # fmt: skip
    assert raw[:4] == b"\x00\x01\x00\x00" and struct.unpack_from("<Qq", raw, 4) == (0x1122334455667788, 9)
    assert struct.unpack_from("<I3s", raw, 20) == (3, b"ab\x00")


def test_a_call_without_a_server_times_out_saying_so(cyclone):
    from openclaw_vision.ros.types import QUERY_MEMORY, ServiceTimeout

    _, client = cyclone
    cli = client.client("/nobody_here", QUERY_MEMORY)
    with pytest.raises(ServiceTimeout, match="no server matched"):
        cli.call(_request(client, "x"), 0.3)
