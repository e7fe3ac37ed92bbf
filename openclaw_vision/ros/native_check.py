"""The two places where the Cyclone transport leans on the insides of its libraries, checked before use.

1. **libddsc through ctypes** (the zero-copy take, cyclone.py): `dds_takecdr` fills a
   `dds_sample_info_t` and `ddsi_serdata_to_ser_ref` an `iovec` that we declare here by hand. Neither
   size is exported by the library, and a layout that changed under us would be read wrong or written
   past (a crash, not an error).
2. **A private table of cyclonedds-python** (dds_types.py): `sequence<uint8>` is registered with the
   binding's block-copy machine (`Builder.easy_types`); the public element-by-element machine takes
   ~0.9 s to encode a 1080p image.

Only `cyclonedds>=11,<12` in setup.cfg guarded these. Now, at first use:

- the versions are read from what is loaded: cyclonedds-python's distribution and the libddsc file the
  binding opened (its name carries the version, e.g. `libddsc-ad12c33a.so.11.0.1`). Another major than
  SUPPORTED_MAJOR is refused before any hand-declared call is made;
- the private table must exist, and a known sample must encode to known bytes and decode as `bytes`;
- a probe sample written on a private topic of the transport's own participant is taken through our
  structs: the source timestamp we gave, valid_data, the sample/view/instance states, the writer's
  handle, and the instance handle the binding's own (compiled) take reports must all read back; the
  library must have written exactly sizeof(SampleInfo) bytes and the serdata reference must hold the
  bytes we wrote.

Any mismatch raises NativeSeamError naming the versions found and expected, and the transport refuses to
start. The probe runs in this process, not a child: the version gate runs first, so a hand-declared call
only ever meets the major it was written for, and the probe's structs sit in canary-filled buffers four
times their size, so even a larger struct in the library lands in our slack, where the check sees it,
rather than past it. Its cost is one topic, writer and reader, made and deleted: ~6 ms once the process has
made a topic (the first topic pays the binding's one-time XTypes set-up, ~0.1 s, which the node's own first
topic would pay otherwise); a transport plus its first publisher started in the noise of a fresh process
either way (scripts/bench_dds_take.py prints it).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from ..core.errors import OpenclawError

log = logging.getLogger(__name__)

#: The major version of cyclonedds-python and libddsc the hand-declared seams were written for; setup.cfg
#: pins `cyclonedds>=SUPPORTED_MAJOR,<SUPPORTED_MAJOR+1` (test_native_seams checks the two agree).
SUPPORTED_MAJOR = 11


class NativeSeamError(OpenclawError, RuntimeError):
    """The loaded cyclonedds-python or libddsc is not the one our hand-declared seams fit."""


@dataclass(frozen=True)
class Versions:
    """What is loaded: cyclonedds-python's version, libddsc's (from its file name) and that file."""

    python: str
    libddsc: str
    library: str

    def describe(self) -> str:
        return f"cyclonedds-python {self.python} and libddsc {self.libddsc} ({self.library})"


def refuse(problem: str, found: Versions) -> NoReturn:
    """Raise the one error every failed check gives: what is wrong, what was found, what is expected."""
    raise NativeSeamError(
        f"Cyclone DDS native seam check failed: {problem}. Found {found.describe()}; expected "
        f"{SUPPORTED_MAJOR}.x of both (setup.cfg pins cyclonedds>={SUPPORTED_MAJOR},<{SUPPORTED_MAJOR + 1}). "
        f"The cyclonedds transport refuses to start rather than risk a crash: install "
        f"'cyclonedds>={SUPPORTED_MAJOR},<{SUPPORTED_MAJOR + 1}', or use transport:=rclpy."
    )


def library_path() -> str:
    """The libddsc file cyclonedds-python opened (its ctypes handle, which its C extension shares), resolved
    through symlinks so that the name carries the version; 'unknown' if the binding keeps it elsewhere."""
    try:
        from cyclonedds.internal import DDS

        return os.path.realpath(DDS._dll_handle._name)
    except (ImportError, AttributeError, TypeError):
        return "unknown"


def library_version(path: str) -> str:
    """'…/libddsc-ad12c33a.so.11.0.1' or '…/libddsc.so.11.0.1' → '11.0.1'; 'unknown' when the name has none."""
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", Path(path).name)
    return m.group(1) if m else "unknown"


def versions() -> Versions:
    """The versions in this process (cyclonedds already imported or importable)."""
    path = library_path()
    try:
        python = importlib.metadata.version("cyclonedds")
    except importlib.metadata.PackageNotFoundError:
        python = "unknown"
    return Versions(python, library_version(path), path)


def _major(version: str) -> int | None:
    m = re.match(r"(\d+)\.", version + ".")
    return int(m.group(1)) if m else None


def check_versions(found: Versions) -> None:
    """Refuse any major but SUPPORTED_MAJOR for either library, before a hand-declared call is made."""
    wrong = [name for name, v in (("cyclonedds-python", found.python), ("libddsc", found.libddsc))
             if _major(v) != SUPPORTED_MAJOR]  # fmt: skip
    if wrong:
        refuse(f"{' and '.join(wrong)} {'are' if len(wrong) > 1 else 'is'} not version {SUPPORTED_MAJOR}.x", found)


# ---- 1. libddsc through ctypes ------------------------------------------------------------------------


class SampleInfo(ctypes.Structure):
    """dds_sample_info_t (cyclonedds 11, src/core/ddsc/include/dds/dds.h): 64 bytes on LP64."""

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


class Iovec(ctypes.Structure):
    """ddsrt_iovec_t on POSIX: struct iovec."""

    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@cache
def ddsc() -> ctypes.CDLL:
    """The libddsc cyclonedds-python runs on (the same instance, so the same entities), with the serdata calls
    typed. Refused (NativeSeamError) on another major version or a missing symbol; the layout of what the
    calls fill is checked by `verify` on a probe sample."""
    import cyclonedds._clayer  # noqa: F401  (loads libddsc into this process)

    found = versions()
    check_versions(found)
    try:
        lib = ctypes.CDLL(found.library)  # already loaded: dlopen hands back the same instance
        lib.dds_takecdr.argtypes = [
            ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32,
        ]  # fmt: skip
        lib.dds_takecdr.restype = ctypes.c_int32
        lib.ddsi_serdata_size.argtypes = [ctypes.c_void_p]
        lib.ddsi_serdata_size.restype = ctypes.c_uint32
        lib.ddsi_serdata_to_ser_ref.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
        lib.ddsi_serdata_to_ser_ref.restype = ctypes.c_void_p
        lib.ddsi_serdata_to_ser_unref.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.ddsi_serdata_to_ser_unref.restype = None
        lib.ddsi_serdata_unref.argtypes = [ctypes.c_void_p]
        lib.ddsi_serdata_unref.restype = None
    except (OSError, AttributeError) as err:
        refuse(f"libddsc cannot be opened with the calls the zero-copy take needs: {err}", found)
    return lib


#: what a probe byte holds until the library writes it
CANARY = 0xA5
#: the probe's source timestamp (ns): no clock gives it, so reading it back proves the field's offset
PROBE_STAMP = 1_234_567_890_123_456_789
PROBE_DATA = b"\x01\x02\x03"


def _guarded(struct: type[ctypes.Structure]) -> ctypes.Array:
    """A canary-filled buffer four times the struct's size: a library struct larger than ours is written
    into our slack (where `_written` sees it), not past it."""
    size = 4 * ctypes.sizeof(struct)
    return (ctypes.c_ubyte * size)(*([CANARY] * size))


def _written(buf: ctypes.Array) -> int:
    """How far the library wrote into a guarded buffer: one past its last byte that is not the canary (the
    probe makes the last field of each struct non-canary: zero ranks, a non-zero length)."""
    raw = bytes(buf)
    return len(raw.rstrip(bytes([CANARY])))


def probe_take(lib: ctypes.CDLL, participant: Any) -> list[str]:
    """Write two samples on a private topic of `participant`, take one through our structs and one through
    the binding's own take, and return what read back wrong (empty: the layouts fit)."""
    from cyclonedds._clayer import ddspy_take
    from cyclonedds.core import InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet
    from cyclonedds.idl import make_idl_struct
    from cyclonedds.idl import types as t
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic
    from cyclonedds.util import duration

    probe = make_idl_struct("openclaw_vision_NativeProbe", "openclaw_vision::native_check::Probe_",
                            {"data": t.sequence[t.uint8]})  # fmt: skip
    qos = Qos(Policy.Reliability.Reliable(0), Policy.History.KeepAll, Policy.Durability.Volatile,
              Policy.DataRepresentation(use_cdrv0_representation=True))  # fmt: skip
    # a name of this process's own and no `rt/` prefix: no other probe matches it, and ROS does not list it
    topic = Topic(participant, f"openclaw_vision/native_check/{os.getpid()}_{secrets.token_hex(4)}", probe, qos=qos)
    writer, reader = DataWriter(participant, topic, qos=qos), DataReader(participant, topic, qos=qos)
    sample = probe(data=PROBE_DATA)
    expected = sample.serialize()
    expected += b"\0" * (-len(expected) % 4)  # the binding pads what it writes to a multiple of 4
    writer.write(sample, timestamp=PROBE_STAMP)
    writer.write(sample, timestamp=PROBE_STAMP + 1)
    waitset = WaitSet(participant)  # local delivery is normally done when write returns; this only guards it
    condition = ReadCondition(reader, int(SampleState.Any | ViewState.Any | InstanceState.Any))
    waitset.attach(condition)
    waitset.wait(duration(seconds=5))

    wrong: list[str] = []

    def expect(what: str, got: Any, want: Any) -> None:
        if got != want:
            wrong.append(f"{what} {got!r}, expected {want!r}")

    info_buf, sd = _guarded(SampleInfo), ctypes.c_void_p()
    n = lib.dds_takecdr(reader._ref, ctypes.byref(sd), 1, info_buf, 0)
    expect("dds_takecdr returned", n, 1)
    if n == 1:
        try:
            expect("dds_sample_info_t bytes written", _written(info_buf), ctypes.sizeof(SampleInfo))
            info = SampleInfo.from_buffer(info_buf)
            theirs = ddspy_take(reader._ref, 0, 1)  # the binding's struct, compiled against the library's header
            theirs_info = theirs[0][1] if isinstance(theirs, list) and theirs else None
            expect("valid_data", bytes(info_buf)[SampleInfo.valid_data.offset], 1)
            expect("source_timestamp", info.source_timestamp, PROBE_STAMP)
            expect("sample_state", info.sample_state, int(SampleState.NotRead))
            expect("view_state", info.view_state, int(ViewState.New))
            expect("instance_state", info.instance_state, int(InstanceState.Alive))
            # the binding's get_instance_handle types the uint64 handle as int64: compare the same 64 bits
            expect("publication_handle", info.publication_handle, writer.get_instance_handle() % 2**64)
            expect("instance_handle", info.instance_handle, getattr(theirs_info, "instance_handle", None))
            expect("ddsi_serdata_size", lib.ddsi_serdata_size(sd), len(expected))
            if not wrong:  # only a size we trust is read
                iov_buf = _guarded(Iovec)
                ref = lib.ddsi_serdata_to_ser_ref(sd, 0, len(expected), iov_buf)
                try:
                    expect("iovec bytes written", _written(iov_buf), ctypes.sizeof(Iovec))
                    iov = Iovec.from_buffer(iov_buf)
                    expect("iov_len", iov.iov_len, len(expected))
                    if not wrong:
                        expect("sample bytes", ctypes.string_at(iov.iov_base, iov.iov_len), expected)
                finally:
                    lib.ddsi_serdata_to_ser_unref(ref, iov_buf)
        finally:
            lib.ddsi_serdata_unref(sd)
    waitset.detach(condition)
    del waitset, condition, reader, writer, topic  # the last references: DDS deletes the probe's entities
    return wrong


_verified_lock = threading.Lock()
#: None until the first transport's check; then True, or the NativeSeamError every later transport re-raises
_verified: bool | NativeSeamError | None = None


def verify(participant: Any) -> None:
    """Check both seams once per process, on the first transport's participant; raise NativeSeamError (the
    same one for every later caller) if either does not fit what is loaded."""
    global _verified
    with _verified_lock:
        if _verified is None:
            try:
                octet_sequences_block_copied()
                wrong = probe_take(ddsc(), participant)
                if wrong:
                    refuse("libddsc's sample info or serdata does not read back through our ctypes structs ("
                           + "; ".join(wrong) + ")", versions())  # fmt: skip
                _verified = True
            except NativeSeamError as err:
                _verified = err
        if isinstance(_verified, NativeSeamError):
            raise _verified


# ---- 2. cyclonedds-python's private machine table ------------------------------------------------------

#: XCDR1 of a struct {sequence<uint8> data} holding PROBE_DATA: encapsulation, count 3, the bytes
OCTET_PROBE_CDR = b"\x00\x01\x00\x00\x03\x00\x00\x00" + PROBE_DATA


@cache
def octet_sequences_block_copied() -> None:
    """Register the binding's block-copy machine for `sequence<uint8>` and `sequence<byte>` (identical bytes on
    the wire, Python `bytes` in and out) and prove it on a known sample; refused with NativeSeamError when the
    table or the machine is not where cyclonedds-python 11 keeps them, or the sample comes out different.
    Must run before any such type is built (dds_types.idl_type calls it first): the table is read then."""
    found = versions()
    check_versions(found)
    try:
        from cyclonedds.idl import make_idl_struct
        from cyclonedds.idl import types as t
        from cyclonedds.idl._builder import Builder
        from cyclonedds.idl._machinery import BytesMachine

        table = Builder.easy_types
        if not isinstance(table, dict):
            raise TypeError(f"Builder.easy_types is a {type(table).__name__}, not a dict")
        for octet in (t.uint8, t.byte):
            table[t.sequence(octet)] = BytesMachine
        for name, octet in (("uint8", t.uint8), ("byte", t.byte)):
            probe = make_idl_struct(f"openclaw_vision_OctetProbe_{name}", "openclaw_vision::OctetProbe_",
                                    {"data": t.sequence[octet]})  # fmt: skip
            raw = probe(data=PROBE_DATA).serialize()
            back = probe.deserialize(raw).data
            if raw != OCTET_PROBE_CDR or type(back) is not bytes or back != PROBE_DATA:
                raise ValueError(f"sequence<{name}> encodes {raw!r} (expected {OCTET_PROBE_CDR!r}) "
                                 f"and decodes as {type(back).__name__} {back!r}")  # fmt: skip
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        refuse(f"cyclonedds-python's block-copy machine for sequence<uint8> is not where it was: {err}", found)
