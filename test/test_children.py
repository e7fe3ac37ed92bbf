"""children.py: the one way the package runs other programs (groups, signals, timeouts)."""

from __future__ import annotations

import os
import signal
import sys
import time

from openclaw_vision import children


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
        deadline = time.monotonic() + 20
        while "up" not in child.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.alive()
    assert child.proc.returncode == 7 and child.how == "exit 7"
    assert child.stop() == 7  # a second stop only answers


def test_child_that_ignores_sigint_is_killed_after_the_timeout():
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)\n"
    child = children.Child([sys.executable, "-c", code])
    time.sleep(0.5)
    assert child.stop(timeout=1) == -signal.SIGKILL
