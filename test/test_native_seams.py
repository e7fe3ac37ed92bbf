"""The Cyclone transport's native seams (ros/native_check.py): checked against the libraries actually loaded,
and a mismatch refused with an error naming the versions, never a crash.

The mismatches are made here by monkeypatching what the check reads (the versions, our ctypes struct, the
private table, the expected bytes): the real libraries stay as installed, and the canary-guarded probe
buffers are what keep a wrong struct from writing past its end."""

from __future__ import annotations

import configparser
import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from openclaw_vision.ros import native_check
from openclaw_vision.ros.native_check import NativeSeamError, SampleInfo, Versions

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_check(monkeypatch):
    """The process-wide check forgotten, so that this test's transport runs it again (and the next test too)."""
    monkeypatch.setattr(native_check, "_verified", None)
    native_check.ddsc.cache_clear()
    yield
    native_check.ddsc.cache_clear()


def transport():
    from openclaw_vision.ros.cyclone import CycloneTransport

    return CycloneTransport("seam_probe")


def test_the_supported_major_is_the_one_setup_cfg_pins():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    pins = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if "cyclonedds" in line]
    major = native_check.SUPPORTED_MAJOR
    assert pins == [f"cyclonedds>={major},<{major + 1}"]


def test_library_versions_are_read_from_the_file_name():
    assert native_check.library_version("/x/cyclonedds.libs/libddsc-ad12c33a.so.11.0.1") == "11.0.1"
    assert native_check.library_version("/opt/cyclone/lib/libddsc.so.0.10.5") == "0.10.5"
    assert native_check.library_version("/opt/cyclone/lib/libddsc.so") == "unknown"


@pytest.mark.dds
def test_the_check_passes_on_the_installed_library(dds_domain, fresh_check):
    found = native_check.versions()
    assert found.python.startswith("11.") and found.libddsc.startswith("11.") and "libddsc" in found.library
    t = transport()  # runs native_check.verify on its participant
    try:
        assert native_check._verified is True
        assert native_check.probe_take(native_check.ddsc(), t.participant) == []
    finally:
        t.close()


@pytest.mark.dds
def test_another_major_is_refused_before_any_hand_declared_call(dds_domain, fresh_check, monkeypatch):
    monkeypatch.setattr(native_check, "versions", lambda: Versions("12.0.0", "12.0.0", "/x/libddsc.so.12.0.0"))
    monkeypatch.setattr(native_check, "probe_take", lambda *a: pytest.fail("the probe ran on another major"))
    with pytest.raises(NativeSeamError) as refused:
        transport()
    text = str(refused.value)
    assert "cyclonedds-python and libddsc are not version 11.x" in text
    assert "Found cyclonedds-python 12.0.0 and libddsc 12.0.0 (/x/libddsc.so.12.0.0)" in text
    assert "expected 11.x of both (setup.cfg pins cyclonedds>=11,<12)" in text
    assert "refuses to start" in text
    with pytest.raises(NativeSeamError, match=r"not version 11\.x"):  # and every later transport of the process
        transport()


class _MissingLastField(ctypes.Structure):
    _fields_ = SampleInfo._fields_[:-1]  # 56 bytes: the library writes 64


class _FlagsSwapped(ctypes.Structure):
    _fields_ = [SampleInfo._fields_[i] for i in (0, 1, 3, 2, *range(4, len(SampleInfo._fields_)))]


class _StampNarrowed(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32 if n == "source_timestamp" else c) for n, c in SampleInfo._fields_]


@pytest.mark.dds
@pytest.mark.parametrize(
    ("struct", "reads_wrong"),
    [
        (_MissingLastField, "dds_sample_info_t bytes written 64, expected 56"),
        (_FlagsSwapped, "valid_data 16, expected 1"),  # it reads instance_state (ALIVE: 16)
        (_StampNarrowed, "source_timestamp"),
    ],
)
def test_a_sample_info_that_does_not_fit_the_library_is_refused_not_crashed_on(
    dds_domain, fresh_check, monkeypatch, struct, reads_wrong
):
    monkeypatch.setattr(native_check, "SampleInfo", struct)
    with pytest.raises(NativeSeamError) as refused:
        transport()
    text = str(refused.value)
    assert "does not read back through our ctypes structs" in text and reads_wrong in text
    found = native_check.versions()
    assert f"Found cyclonedds-python {found.python} and libddsc {found.libddsc}" in text


def test_the_private_table_gone_is_refused_naming_the_versions(monkeypatch):
    from cyclonedds.idl._builder import Builder

    monkeypatch.delattr(Builder, "easy_types")
    with pytest.raises(NativeSeamError) as refused:
        native_check.octet_sequences_block_copied.__wrapped__()
    text = str(refused.value)
    assert "block-copy machine for sequence<uint8> is not where it was" in text and "easy_types" in text
    assert f"Found cyclonedds-python {native_check.versions().python}" in text


def test_a_known_sample_encoding_differently_is_refused(monkeypatch):
    monkeypatch.setattr(native_check, "OCTET_PROBE_CDR", b"\x00\x01\x00\x00\x04\x00\x00\x00\x01\x02\x03\x04")
    with pytest.raises(NativeSeamError, match=r"sequence<uint8> encodes b'\\x00\\x01.*decodes as bytes"):
        native_check.octet_sequences_block_copied.__wrapped__()


@pytest.mark.dds
def test_a_node_on_a_mismatched_library_exits_with_the_error_not_a_signal(dds_domain):
    """The encoder node's own start, with the supported major set to one that is not installed: it stops at
    its transport with the seam error as its one error line and exit status 2, as for a bad configuration (a
    crash would be -11)."""
    code = (
        "import runpy, sys\n"
        "from openclaw_vision.ros import native_check\n"
        "native_check.SUPPORTED_MAJOR = 10\n"
        "sys.argv = ['encoder_node', '--transport', 'cyclonedds']\n"
        "runpy.run_path('scripts/encoder_node', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "ERROR: Cyclone DDS native seam check failed" in last and "Traceback" not in done.stderr
    assert "expected 10.x of both" in last and "libddsc 11." in last
