"""core/children.py: the one way the package runs other programs (groups, signals, timeouts)."""

from __future__ import annotations

import os
import signal
import sys
import time

from openclaw_vision.core import children


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0): read its state
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1].startswith("Z")


def test_run_reports_a_signal_by_name_and_never_raises():
    res = children.run(children.python("-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"), timeout=30)
    assert not res.ok and res.returncode == -signal.SIGILL
    assert res.how == "killed by SIGILL"


def test_run_returns_output_and_exit_code():
    res = children.run(children.python("-c", "import sys; print('hi'); print('err', file=sys.stderr); sys.exit(3)"),
                       timeout=30)  # fmt: skip
    assert (res.returncode, res.stdout.strip(), res.stderr.strip(), res.how) == (3, "hi", "err", "exit 3")
    assert "hi" in res.tail() and "err" in res.tail()


def test_run_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "grandchild"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    res = children.run(children.python("-c", code), timeout=3)
    assert res.timed_out and res.how == "timed out"
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the child's own child outlived the timeout"


def test_child_stop_signals_the_group_and_logs(tmp_path):
    log = tmp_path / "child.log"
    code = (
        "import signal, sys, time\nprint('up', flush=True)\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\ntime.sleep(600)\n"
    )
    with children.Child(children.python("-c", code), log_path=log) as child:
        assert child.wait_for_line("up", 20) == "up" and child.alive()
    assert child.proc.returncode == 7 and child.how == "exit 7"
    assert child.stop() == 7  # a second stop only answers


def test_child_that_ignores_sigint_is_killed_after_the_timeout():
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)\n"
    child = children.Child([sys.executable, "-c", code])
    time.sleep(0.5)
    assert child.stop(timeout=1) == -signal.SIGKILL


def test_wait_for_line_finds_a_late_line_among_others_and_gives_up_when_the_child_exits(tmp_path, monkeypatch):
    """A server's URL comes after its log lines; a child that has exited is answered at once, without waiting
    for the timeout (not a single poll); a quiet live child gets "" at the timeout and stays up."""
    code = (
        "import sys, time\nprint('[log] loading', file=sys.stderr, flush=True)\ntime.sleep(1)\n"
        "print('grpc://127.0.0.1:1 ', flush=True)\ntime.sleep(600)\n"
    )
    with children.Child(children.python("-c", code), log_path=tmp_path / "late.log") as child:
        assert child.wait_for_line("grpc://", 30) == "grpc://127.0.0.1:1"
    quiet = children.Child(children.python("-c", "import time; time.sleep(600)"), log_path=tmp_path / "quiet.log")
    try:
        assert quiet.wait_for_line("ready", 0.5) == "" and quiet.alive()
    finally:
        quiet.stop()
    dead = children.Child(children.python("-c", "print('no node', flush=True)"), log_path=tmp_path / "dead.log")
    assert dead.wait(60) == 0

    def no_polling(_seconds: float) -> None:
        raise AssertionError("wait_for_line polled a child that had already exited")

    monkeypatch.setattr(children.time, "sleep", no_polling)
    assert dead.wait_for_line("ready", 600) == "" and dead.how == "exit 0"


def test_an_environment_given_whole_is_all_the_child_sees(tmp_path, monkeypatch):
    """`inherit_env=False` (a sourced Humble, the pip path's env): nothing of the test run's environment leaks in,
    e.g. its ROS_LOCALHOST_ONLY or PYTHONPATH, which made Humble's rmw fail to create a domain."""
    monkeypatch.setenv("OPENCLAW_LEAK_CHECK", "1")
    show = "import os, sys; sys.stdout.write(os.environ.get('OPENCLAW_LEAK_CHECK', '-') + os.environ['ONLY'])"
    whole = children.run(children.python("-c", show), timeout=60, env={"ONLY": "x"}, inherit_env=False)
    added = children.run(children.python("-c", show), timeout=60, env={"ONLY": "x"})
    assert (whole.stdout, added.stdout) == ("-x", "1x")
    with children.Child(children.python("-c", f"{show}; print(flush=True)"), tmp_path / "c.log", {"ONLY": "y"},
                        inherit_env=False) as child:  # fmt: skip
        assert child.wait(60) == 0
    assert child.log_text().strip() == "-y"


def test_a_child_reads_dev_null_not_the_terminal(tmp_path):
    """A child has its own session and no business with a terminal (`ros2 bag play` would put one in raw mode)."""
    with children.Child(children.python("-c", "import os; print(os.readlink('/proc/self/fd/0'))"),
                        tmp_path / "c.log") as child:  # fmt: skip
        assert child.wait(60) == 0
    assert child.log_text().strip() == "/dev/null"
