#!/usr/bin/env python3
"""Take + deserialize of one 1080p rgb8 sensor_msgs/Image on the Cyclone transport: our native seams beside
cyclonedds-python's public API, side by side in one run (issue 34: "checked, or gone").

    CYCLONEDDS_URI=file://$PWD/config/cyclonedds-loopback.xml .venv/bin/python scripts/bench_dds_take.py

Paths, each given the same frame (written on a local topic, then taken and decoded, round robin):

- `ctypes takecdr`: what the transport does (dds_takecdr through ctypes, cdr's struct reader; the data a
  view of Cyclone's sample, no copy);
- `ddspy_take copy`: the binding's own serialized take (one bytes copy), cdr's struct reader;
- `public take`: DataReader.take (copy and deserialise into the generated class), with dds_types' block-copy
  machine for sequence<uint8> (the private table);
- `public take, no table`: the same on a class built without that table entry: the public API alone.

Also the start time the seam check adds: CycloneTransport and its first publisher in fresh processes, with
native_check.verify and with it stubbed out, alternately. Prints medians and ratios; no test reads this.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from openclaw_vision.ros import cdr, cyclone
from openclaw_vision.ros.dds_types import idl_type
from openclaw_vision.ros.types import IMAGE, QoS
from openclaw_vision.runtime import bags

WIDTH, HEIGHT = 1920, 1080


def public_class_without_table() -> type:
    """sensor_msgs/Image as the public API alone builds it: the block-copy entries out of the table while
    its machine is built, then put back."""
    from cyclonedds.idl import make_idl_struct
    from cyclonedds.idl import types as t
    from cyclonedds.idl._builder import Builder

    from openclaw_vision.ros.dds_types import _annotations

    saved = {k: Builder.easy_types.pop(k) for k in (t.sequence(t.uint8), t.sequence(t.byte))}
    try:
        cls = make_idl_struct("bench_Image_public", "sensor_msgs::msg::dds_::Image_",
                              {**_annotations(IMAGE), "header": idl_type("std_msgs/msg/Header")})  # fmt: skip
        cls.__idl__.populate()
    finally:
        Builder.easy_types.update(saved)
    return cls


def take_times(rounds: int, slow_rounds: int) -> dict[str, list[float]]:
    from cyclonedds._clayer import ddspy_take
    from cyclonedds.core import InstanceState, SampleState, ViewState
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    transport = cyclone.CycloneTransport("bench_take")
    try:
        p = transport.participant
        qos = cyclone._qos(cyclone.reader_qos(QoS("reliable", 4), bounded_keep_all=True))
        decode = cdr.sample_decoder(IMAGE, idl_type(IMAGE).deserialize)
        lib, mask = cyclone._ddsc(), int(ViewState.Any | InstanceState.Any | SampleState.Any)
        pixels = np.resize(np.arange(256, dtype=np.uint8), (HEIGHT, WIDTH, 3))
        frame = bags.serialize_image(pixels, "rgb8", 1_000_000_002, "cam")  # stamp 1 s 2 ns
        plain = Topic(p, "bench/take", idl_type(IMAGE))
        bare = Topic(p, "bench/take_public", public_class_without_table())
        paths: dict[str, tuple[Any, Any, Callable[[Any], Any]]] = {}  # name → (topic, reader, take + decode)
        for name, topic in (("ctypes takecdr", plain), ("ddspy_take copy", plain), ("public take", plain),
                            ("public take, no table", bare)):  # fmt: skip
            reader = DataReader(p, topic, qos=qos)
            if name == "ctypes takecdr":
                taker = cyclone.Taker(lib, reader._ref, int(mask), 1)  # the node's take, one sample a call
                paths[name] = (topic, reader, lambda r, t=taker: decode(t.take().samples[0]))
            elif name == "ddspy_take copy":
                paths[name] = (topic, reader, lambda r: decode(ddspy_take(r._ref, mask, 1)[0][0]))
            else:
                paths[name] = (topic, reader, lambda r: r.take(N=1)[0])
        writers = {t: cyclone._Publisher(DataWriter(p, t, qos=cyclone._qos(cyclone.writer_qos(QoS("reliable", 4)))))
                   for t in (plain, bare)}  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in paths}
        for i in range(rounds):
            for name, (topic, reader, take) in paths.items():
                if name.endswith("no table") and i >= slow_rounds:
                    continue
                writers[topic].publish_raw(frame)  # every reader of the topic gets it: the others drop theirs
                t0 = time.perf_counter()
                msg = take(reader)
                times[name].append(time.perf_counter() - t0)
                assert msg.width == WIDTH and len(msg.data) == WIDTH * HEIGHT * 3, name
                del msg
                for other, (t, r, _) in paths.items():
                    if other != name and t is topic:
                        r.take(N=4)
        return times
    finally:
        transport.close()


START = """
import sys, time
from openclaw_vision.ros import cyclone, native_check
from openclaw_vision.ros.types import IMAGE, QoS
if sys.argv[1] == "off":
    native_check.verify = lambda participant: None
t0 = time.perf_counter()
transport = cyclone.CycloneTransport("bench_start")
transport.publisher("/bench/start", IMAGE, QoS())  # a node's first topic
print(time.perf_counter() - t0)
transport.close()
"""


def start_times(runs: int) -> dict[str, list[float]]:
    """CycloneTransport() and a node's first publisher in a fresh process (imports excluded: the first topic
    pays the binding's one-time XTypes set-up either way), with the check and without, alternately."""
    out: dict[str, list[float]] = {"with check": [], "without": []}
    for _ in range(runs):
        for key, arg in (("with check", "on"), ("without", "off")):
            done = subprocess.run([sys.executable, "-c", START, arg], capture_output=True, text=True, check=True)
            out[key].append(float(done.stdout.split()[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--slow-rounds", type=int, default=3, help="rounds of the public API without the table")
    parser.add_argument("--start-runs", type=int, default=5)
    args = parser.parse_args()
    times = take_times(args.rounds, args.slow_rounds)
    base = statistics.median(times["ctypes takecdr"])
    print(f"1080p rgb8 Image ({WIDTH * HEIGHT * 3 / 1e6:.1f} MB), take + deserialize, median of the rounds:")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:24s} {med * 1e3:9.3f} ms  x{med / base:8.1f}  (n={len(ts)})")
    starts = start_times(args.start_runs)
    on, off = (statistics.median(starts[k]) for k in ("with check", "without"))
    print(f"CycloneTransport() + first publisher in a fresh process, median of {args.start_runs}: with the seam check "
          f"{on * 1e3:.1f} ms, without {off * 1e3:.1f} ms: the check adds {(on - off) * 1e3:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
