"""A real ROS 2 Humble for the `ros2` test tier: find it, make the robot venv, colcon-build the package,
and run `ros2 …` commands in the sourced environment the way the README's robot section does.

Where Humble comes from, first found wins:
  1. $OPENCLAW_ROS2_PREFIX (an install prefix holding setup.bash);
  2. /opt/ros/humble (sourced already, or just installed there);
  3. ../shared/ros2-humble (the project's shared build), unpacked by its setup.sh into the cache
     folder (`cache_dir()`: inside the project's venv). setup.sh installs its apt packages, so this
     step needs root (as here and in CI) the first time.
None of them → `HumbleMissing` with one line saying what to install.

The robot venv is the README's: made from /usr/bin/python3 (the Python Humble's rclpy belongs to),
`--system-site-packages` (rclpy's deps, cv2, yaml from the system), requirements-humble.txt.
The python3-* rosdep keys of package.xml are installed with apt, standing in for `rosdep install`
(rosdep is not on this machine; on Debian those keys are apt packages of the same name).

DDS stays on this machine: CYCLONEDDS_URI is the project's loopback config, which names `lo`, so
ROS_LOCALHOST_ONLY is unset (Humble's rmw_cyclonedds_cpp adds 127.0.0.1 itself under
ROS_LOCALHOST_ONLY=1 and refuses a config that also names `lo`: ../shared/ros2-humble/README.md).
`Ros2.environ(localhost_only=True, cyclonedds_uri=…)` gives the other combination.

Processes are started by the package's one mechanism, children.Child (a session of its own: a background
process of a non-interactive shell ignores SIGINT, and so would its children; stopped by signalling the
whole group), in the sourced environment alone (`Ros2Process`); `Ros2.close` kills whatever a test left
behind.

Also a command line, so `make setup` prepares the same things the tier uses (one path):
    python test/support/humble.py prepare
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from openclaw_vision.core.children import Child, Finished
from openclaw_vision.core.children import run as run_to_end

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "ros2-humble"
SYSTEM_PREFIX = Path("/opt/ros/humble")
SYSTEM_PYTHON = "/usr/bin/python3"
PACKAGE = "openclaw_vision"
LOOPBACK_CONFIG = ROOT / "config" / "cyclonedds-loopback.xml"
ROBOT_CONFIG = ROOT / "config" / "cyclonedds-robot.xml"
#: one line, said when the tier is skipped
INSTALL_HINT = (
    "no ROS 2 Humble found: set OPENCLAW_ROS2_PREFIX to a Humble install, install /opt/ros/humble,"
    " or provide ../shared/ros2-humble (its setup.sh unpacks it; needs root for apt)"
)
#: setup.sh, apt and pip take this lock: two checkouts preparing at once must not run apt together
SETUP_LOCK = Path("/tmp/openclaw-vision-ros2-setup.lock")


class HumbleMissing(RuntimeError):
    """No ROS 2 Humble here (the message says what to install): the tier skips."""


class SetupFailed(RuntimeError):
    """A Humble is here but preparing it failed (apt, pip, unpacking): the tier fails, with the output."""


def cache_dir() -> Path:
    """Where the shared Humble is unpacked and the robot venv made: $OPENCLAW_ROS2_CACHE, else inside
    the running venv (the project's .venv under `make`), else ~/.cache/openclaw_vision."""
    if os.environ.get("OPENCLAW_ROS2_CACHE"):
        return Path(os.environ["OPENCLAW_ROS2_CACHE"])
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "ros2"
    return Path.home() / ".cache" / "openclaw_vision" / "ros2"


@contextmanager
def _setup_lock() -> Iterator[None]:
    with open(SETUP_LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], what: str, **kw) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise SetupFailed(f"{what} failed ({' '.join(cmd)}, exit {proc.returncode}):\n{tail}")


def find_humble(prepare: bool = True) -> tuple[Path, str]:
    """(install prefix, where it came from). With `prepare`, unpack ../shared's build if that is the one."""
    given = os.environ.get("OPENCLAW_ROS2_PREFIX")
    if given:
        prefix = Path(given)
        if not (prefix / "setup.bash").is_file():
            raise HumbleMissing(f"OPENCLAW_ROS2_PREFIX={given} has no setup.bash")
        return prefix, "OPENCLAW_ROS2_PREFIX"
    if (SYSTEM_PREFIX / "setup.bash").is_file():
        return SYSTEM_PREFIX, str(SYSTEM_PREFIX)
    setup = SHARED / "setup.sh"
    if setup.is_file():
        prefix = cache_dir() / "humble"
        if prepare:
            prefix.parent.mkdir(parents=True, exist_ok=True)
            with _setup_lock():
                _run(["bash", str(setup), str(prefix)], f"unpacking {SHARED}")
        elif not (prefix / "setup.bash").is_file():
            raise HumbleMissing(f"{SHARED} is not unpacked yet (run: python test/support/humble.py prepare)")
        return prefix, str(SHARED)
    raise HumbleMissing(INSTALL_HINT)


def apt_keys(package_xml: Path = ROOT / "package.xml") -> list[str]:
    """package.xml's python3-* dependencies: rosdep keys that are apt packages of that name on Debian/Ubuntu."""
    tags = ("depend", "exec_depend", "build_depend")
    root = ET.parse(package_xml).getroot()
    return sorted({e.text.strip() for t in tags for e in root.iter(t) if e.text and e.text.startswith("python3-")})


def install_apt_keys() -> None:
    """`rosdep install` for the python3-* keys, with apt (root only; otherwise say what is missing)."""
    keys = apt_keys()
    if subprocess.run(["dpkg", "-s", *keys], capture_output=True).returncode == 0:
        return
    if os.geteuid() != 0:
        raise SetupFailed(f"apt packages missing for the nodes: sudo apt-get install {' '.join(keys)}")
    with _setup_lock():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *keys], "apt-get install", env=env)


def robot_venv(requirements: Path = ROOT / "requirements-humble.txt") -> Path:
    """The README's venv: /usr/bin/python3 -m venv --system-site-packages, then requirements-humble.txt.
    Re-made when requirements-humble.txt changes."""
    venv = cache_dir() / "robot-venv"
    stamp = venv / f".installed-{hashlib.sha1(requirements.read_bytes()).hexdigest()[:10]}"
    if stamp.is_file():
        return venv
    with _setup_lock():
        if not stamp.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            _run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(venv)], "making the robot venv")
            _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(requirements)],
                 "pip install -r requirements-humble.txt")  # fmt: skip
            stamp.touch()
    return venv


def sourced(scripts: list[Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment after `source`-ing each script in bash, in order."""
    line = " && ".join(f"source {shlex.quote(str(s))}" for s in scripts)
    out = subprocess.run(["bash", "-c", f"{line} && env -0"], capture_output=True, env=base or dict(os.environ))
    if out.returncode:
        raise SetupFailed(f"sourcing {scripts} failed: {out.stderr.decode(errors='replace')[-2000:]}")
    pairs = (item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


def _clean_base() -> dict[str, str]:
    """This process's environment without the project venv, pyenv or an earlier ROS: /usr/bin first."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "COLCON_PREFIX_PATH",
            "LD_LIBRARY_PATH", "ROS_LOCALHOST_ONLY", "ROS_DOMAIN_ID", "PYTEST_CURRENT_TEST")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYENV")}
    keep = [p for p in env.get("PATH", "").split(":") if p and ".pyenv" not in p and not p.startswith(sys.prefix)]
    env["PATH"] = ":".join(["/usr/local/bin", "/usr/bin", "/bin", *[p for p in keep if p not in ("/usr/bin", "/bin")]])
    return env


def workspace_sources(dest: Path) -> Path:
    """A clean checkout of this tree at `dest`/src/openclaw_vision: the tracked and the untracked,
    not-ignored files (what a clone of this commit plus the working changes holds), no venv, no out/."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    )
    if listed.returncode == 0:
        files = listed.stdout.decode().split("\0")
    else:  # not a git checkout (an unpacked archive): everything but what builds and runs leave behind
        skip = {".git", ".venv", "out", "build", "install", "log", ".pytest_cache", ".ruff_cache", "__pycache__"}
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]  # fmt: skip
    src = dest / "src" / PACKAGE
    for name in filter(None, files):
        path = ROOT / name
        if path.is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    return src


def become_subreaper() -> None:
    """Make this process adopt its orphaned descendants (prctl PR_SET_CHILD_SUBREAPER), so that the exit
    status of a node whose parent died first (`ros2 run` killed by SIGTERM) can still be read."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def exit_status(pid: int, timeout: float) -> int | None:
    """The exit code of descendant `pid` (negative: killed by that signal), once it is this process's
    child (directly, or adopted: become_subreaper); None if it is still running after `timeout` s.
    ProcessLookupError if its own parent reaped it first (then only that parent knows the code)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # not (yet) ours: its parent still lives, or has reaped it
            if not Path(f"/proc/{pid}").exists():
                raise ProcessLookupError(pid) from None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (a process started with start_new_session leads its own)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session …
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


#: `ros2 <verb> <sub>` commands that would otherwise spawn the ros2 daemon (ros2cli/node/strategy.py:
#: NodeStrategy calls spawn_daemon, which daemonizes into a session of its own, outliving the test)
DAEMON_VERBS = ("param", "topic", "node", "service", "action")
#: of those, the ones that make a node of their own and take no --no-daemon
DIRECT_ONLY = (("topic", "pub"), ("topic", "hz"), ("service", "call"))


def no_daemon(cmd: tuple[str, ...]) -> list[str]:
    """`cmd` with --no-daemon after `ros2 <verb> <sub>` where that verb would start the daemon."""
    cmd = list(cmd)
    if (len(cmd) >= 3 and cmd[0] == "ros2" and cmd[1] in DAEMON_VERBS and "--no-daemon" not in cmd
            and tuple(cmd[1:3]) not in DIRECT_ONLY):  # fmt: skip
        cmd.insert(3, "--no-daemon")
    return cmd


class Ros2Process(Child):
    """A command started by children.Child (a session and group of its own, its output in a log file, stdin
    /dev/null) in exactly the environment given: a sourced Humble takes nothing of this process's. Adds what
    the tier asks of a ROS process: a wait for its output that fails the test, the members of its session,
    the leader's children (`ros2 run`'s node). `stop()` is Child's: SIGINT to the group, SIGKILL after
    `timeout`, the exit code."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
        super().__init__(cmd, log_path, env, cwd, inherit_env=False)

    def output(self) -> str:
        """What it has printed so far (stdout and stderr, one log)."""
        return self.log_text()

    def members(self) -> list[int]:
        return session_members(self.pid)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """Wait until `text` is in the output; the output so far. Fails if the process ends first."""
        self.wait_for_line(text, timeout, anywhere=True)
        out = self.output()  # read again: a line written just before the exit is in the log by now
        if text in out:
            return out
        if not self.alive():
            raise AssertionError(f"{list(self.argv)} ended ({self.how}) before printing {text!r}:\n{out[-4000:]}")
        raise AssertionError(f"{list(self.argv)}: no {text!r} within {timeout} s:\n{out[-4000:]}")

    def children(self) -> list[int]:
        """The leader's direct children (for `ros2 run`: the node process it started)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL to the group, reap the leader (Child.stop), then to anything left in the session: a member
        that made a group of its own."""
        self.stop(timeout=0, stop_signal=signal.SIGKILL)
        for pid in self.members():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Ros2:
    """Humble sourced, the package's install sourced, the robot venv active: run `ros2 …` there."""

    def __init__(self, prefix: Path, source: str, venv: Path, work: Path) -> None:
        self.prefix, self.source, self.venv, self.work = prefix, source, venv, work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.base = sourced([prefix / "setup.bash"], _clean_base())
        self.install: Path | None = None
        self.env = dict(self.base)
        self._started: list[Ros2Process] = []
        self._n = 0

    def build(self, workspace: Path, symlink: bool = False, timeout: float = 600) -> Finished:
        """`colcon build --packages-select openclaw_vision` in `workspace` (its src/ made from this
        checkout), with the venv *not* active, as the README says. By children.run: a build past `timeout`
        is killed with its whole group (colcon's cmake, make, compilers), and reported, not raised."""
        workspace_sources(workspace)
        cmd = ["colcon", "build", "--packages-select", PACKAGE, "--event-handlers", "console_direct-"]
        if symlink:
            cmd.append("--symlink-install")
        return run_to_end(cmd, timeout=timeout, cwd=workspace, env=self.base, inherit_env=False)

    def use(self, install: Path) -> None:
        """Run later commands with `install/setup.bash` sourced and the robot venv active."""
        self.install = install
        env = sourced([self.prefix / "setup.bash", install / "setup.bash"], _clean_base())
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}:{env['PATH']}"
        env["ROS_LOG_DIR"] = str(self.logs / "ros")
        env["PYTHONUNBUFFERED"] = "1"
        env["RCUTILS_LOGGING_BUFFERED_STREAM"] = "0"
        self.env = env

    def environ(self, localhost_only: bool = False, cyclonedds_uri: str | None = None, **extra: str) -> dict[str, str]:
        """The environment of one command: this test's ROS_DOMAIN_ID (the dds_domain fixture sets it in
        os.environ), Cyclone on loopback with the project's config, ROS_LOCALHOST_ONLY as it requires."""
        env = {**self.env, "RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}
        env["CYCLONEDDS_URI"] = cyclonedds_uri or LOOPBACK_CONFIG.as_uri()
        if localhost_only:
            env["ROS_LOCALHOST_ONLY"] = "1"
        else:
            env.pop("ROS_LOCALHOST_ONLY", None)
        if os.environ.get("ROS_DOMAIN_ID"):
            env["ROS_DOMAIN_ID"] = os.environ["ROS_DOMAIN_ID"]
        env.update(extra)
        return env

    def run(self, *cmd: str, timeout: float = 60, check: bool = True, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """Run a command to its end (its own session: nothing it leaves behind survives a timeout)."""
        proc = self.start(*cmd, env=env, cwd=cwd)
        code = proc.wait(timeout)
        if code is None:
            proc.kill()
            raise AssertionError(f"{' '.join(cmd)} still running after {timeout} s:\n{proc.output()[-4000:]}")
        for pid in proc.members():  # what the command left in its session (a daemon it spawned)
            os.kill(pid, signal.SIGKILL)
        result = subprocess.CompletedProcess(list(cmd), code, proc.output(), "")
        if check and code:
            raise AssertionError(f"{' '.join(cmd)} exited {code}:\n{result.stdout[-4000:]}")
        return result

    def start(self, *cmd: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Ros2Process:
        """Start a long-running command (`ros2 run`, `ros2 launch`); stop it with its `stop()`.
        It runs in the session's work folder unless `cwd` says otherwise: never in the checkout, whose
        openclaw_vision/ would shadow the installed package for `python3 -c`."""
        self._n += 1
        name = "-".join(c.replace("/", "_") for c in cmd[:3])[:60]
        proc = Ros2Process(
            no_daemon(cmd), env or self.environ(), self.logs / f"{self._n:03d}-{name}.log", cwd or self.work
        )
        self._started.append(proc)
        return proc

    def close(self) -> None:
        """Kill anything still running that a test started."""
        for proc in self._started:
            if proc.alive() or proc.members():
                proc.kill()


def pip_env(robot: bool = False) -> dict[str, str]:
    """The pip path's environment: this checkout's venv, no ROS sourced, this test's domain; the loopback
    config, or (`robot`) the robot config under ROS_LOCALHOST_ONLY=1, where the pip path adds 127.0.0.1
    itself as rmw does (else cyclonedds-python would pick the machine's interface)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "OPENCLAW_VISION_HOME", "ROS_DOMAIN_ID")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["CYCLONEDDS_URI"] = (ROBOT_CONFIG if robot else LOOPBACK_CONFIG).as_uri()
    if robot:
        env["ROS_LOCALHOST_ONLY"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def ros_args(params: dict[str, str]) -> list[str]:
    """`--ros-args -p k:=v …` (for `ros2 run`) from {key: value}."""
    return ["--ros-args", *[a for k, v in params.items() for a in ("-p", f"{k}:={v}")]]


def built(work: Path, rebuild: bool = False) -> Ros2:
    """Humble prepared, this checkout colcon-built in `work`/ws (kept between runs unless `rebuild`) and
    its install in use: what the measurement scripts (bag_loss.py, receive_cost.py) start from."""
    prefix, source, venv = prepare()
    ros2 = Ros2(prefix, source, venv, work / "run")
    ws = work / "ws"
    if rebuild or not (ws / "install" / "setup.bash").is_file():
        res = ros2.build(ws)
        if res.returncode:
            raise SystemExit(f"colcon build failed:\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}")
    ros2.use(ws / "install")
    return ros2


def prepare() -> tuple[Path, str, Path]:
    """Everything the tier needs before its first test: Humble, the apt keys, the robot venv."""
    prefix, source = find_humble(prepare=True)
    install_apt_keys()
    return prefix, source, robot_venv()


def main(argv: list[str]) -> int:
    if argv[:1] != ["prepare"]:
        print("usage: humble.py prepare", file=sys.stderr)
        return 2
    try:
        prefix, source, venv = prepare()
    except HumbleMissing as err:
        print(f"ros2 tier: {err}")
        return 0  # nothing to prepare here: the tier will skip (and fail under CI=true)
    except SetupFailed as err:
        print(f"ros2 tier: {err}", file=sys.stderr)
        return 1
    print(f"ros2 tier: Humble {prefix} (from {source}), robot venv {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
