"""bench/dropcost.py in its quick form: the node with its encoder paused drops every frame after its first batch,
and the section reports, per intake path, the transport's floor beside our share. No figure is judged here (tests
do not time); what is asserted is that every frame the window saw is accounted for and each part was measured."""

from __future__ import annotations

import pytest

from openclaw_vision.bench import dropcost


@pytest.mark.dds
def test_drop_cost_section_counts_every_frame_and_splits_the_cpu(tmp_path, dds_domain):
    res = dropcost.run_dropcost(quick=True, work=tmp_path)
    rows = {(r["transport"], r["path"]): r for r in res["rows"]}
    assert {("cyclonedds", "one"), ("cyclonedds", "all")} <= set(rows)
    for r in rows.values():
        assert r["received"] > 0 and r["dropped"] == r["received"], r  # the paused encoder: all dropped
        assert r["transport_floor_ms"] > 0 and r["our_share_ms"] > 0 and r["our_intake_ms"] > 0, r
        assert r["sent_fps_per_camera"] > 0 and r["received_fps_per_camera"] > 0, r
    table = "\n".join(dropcost.markdown(res))
    assert "| cyclonedds | all | idle |" in table and "| cyclonedds | one | idle |" in table
    assert rows[("cyclonedds", "one")]["samples_per_take"] <= 1.05  # a take per sample (the window cuts one)
    [goal] = [g for g in dropcost.goals(res) if g["goal"].startswith("cyclonedds")]
    assert "transport floor" in goal["measured"]  # the floor is reported beside our share


def test_a_runtime_pool_started_while_the_model_loaded_is_not_counted_as_cyclone():
    """The model loads on "node-build", which has ended by the time the CPU is read (so it is not among the
    live threads the node names); OpenVINO's pool threads keep that name. They were counted as Cyclone's
    receive threads: 29 core-ms of a raw frame's encode put on the transport."""
    from openclaw_vision.bench.roles import thread_role

    named = {11: "encoder-worker", 12: "dds-take/front"}
    role = thread_role(20, "node-build", 10, "python3", named)
    assert role == "runtime pool (started at load)"
    assert thread_role(21, "encoder-worker", 10, "python3", named) == "runtime pool (started by encoder-worker)"
    assert thread_role(11, "encoder-worker", 10, "python3", named).startswith("worker")
    assert thread_role(22, "recvUC", 10, "python3", named).startswith("cyclone threads")
