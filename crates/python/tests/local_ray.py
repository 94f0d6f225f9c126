"""A real Ray cluster on 127.0.0.1 for the tests and the benchmarks: a head and worker nodes of
one CPU each, each started by ``ray start`` in a session of its own (setsid) and stopped by
killing exactly the processes of those sessions, by pid.

Only inside a network namespace of its own with nothing but loopback (``unshare -n``, then
``ip link set lo up``): Ray turns a ``127.0.0.1`` address into the machine's own network address
when a node or a driver connects, so on the machine's network a test cluster would talk over its
interface. :func:`run_in_private_network` re-runs a process there (the tests' conftest re-runs
pytest, the benchmark itself), and :class:`LocalCluster` refuses to start anywhere else. Each
cluster has a ``HOME`` and temporary directory of its own: a Ray token left in ``~/.ray`` by an
unrelated Ray switches on token authentication, and the workers then fail to join.

``ray.cluster_utils.Cluster`` binds the machine's non-loopback address on the machines this runs
on and hangs, and ``ray stop`` would stop every Ray process of the machine (other users' too):
neither is used.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

RAY = Path(sys.executable).parent / "ray"

#: Node failures are noticed within a few seconds rather than the default half minute; no usage
#: statistics are sent.
RAY_ENV: Dict[str, str] = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "4",
    "RAY_USAGE_STATS_ENABLED": "0",
}

_ALIVE_NODES = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""


#: Set in a process :func:`run_in_private_network` started, so that it never starts another.
PRIVATE_NETWORK_ENV = "NEARDUP_PRIVATE_NETWORK"


def in_private_network() -> bool:
    """Whether this process's network namespace has loopback, up, and no other interface."""
    try:
        names = [name for _, name in socket.if_nameindex()]
        with open("/sys/class/net/lo/flags", encoding="ascii") as f:
            up = int(f.read().strip(), 16) & 1
    except OSError:
        return False
    return names == ["lo"] and bool(up)


def private_network_command(argv: Sequence[str]) -> Optional[List[str]]:
    """`argv` run in a new network namespace with only loopback, up (``unshare -n``, then
    ``ip link set lo up``; as root, or elsewhere in a user namespace of its own where the system
    allows them), or None when this machine cannot make one."""
    unshare = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--net"]
    setup = "ip link set lo up"
    try:
        probe = subprocess.run(
            [*unshare, "--", "sh", "-c", setup], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode != 0:
        return None
    return [*unshare, "--", "sh", "-c", f'{setup} && exec "$@"', "sh", *argv]


def run_in_private_network(argv: Sequence[str]) -> None:
    """Replaces this process by `argv` in a private network namespace (see
    :func:`private_network_command`), unless it is in one already or cannot make one (then
    :class:`LocalCluster` refuses to start, saying why). Call it before anything else starts."""
    if in_private_network():
        return
    if os.environ.get(PRIVATE_NETWORK_ENV):
        raise RuntimeError(
            "started in a private network namespace, but it has interfaces other than lo, or lo "
            "is down"
        )
    command = private_network_command(argv)
    if command is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, {**os.environ, PRIVATE_NETWORK_ENV: "1"})


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid: int) -> List[int]:
    """Pids of every live process whose session id is `sid` (field 6 of /proc/PID/stat)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces: split after its closing parenthesis.
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[0] is the state: a zombie is already dead, waiting for its parent to reap it.
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def kill_session(sid: int) -> None:
    """Kills every process of session `sid`, by pid: SIGTERM, then SIGKILL for what remains."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        for pid in session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not session_pids(sid):
            return


def start_node(env: Dict[str, str], *args: str) -> int:
    """Runs `ray start ARGS` (one CPU, 127.0.0.1) in a new session, in the environment `env`, and
    returns the session id: the node's daemons stay in it. Raises RuntimeError with Ray's output
    when it fails."""
    proc = subprocess.Popen(
        [str(RAY), "start", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    out, _ = proc.communicate(timeout=180)
    if proc.returncode != 0:
        kill_session(proc.pid)
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out}")
    return proc.pid


class LocalCluster:
    """A head node and `workers` worker nodes on 127.0.0.1, one CPU each.

    ``start()`` brings them up and waits until all are alive; ``kill(name)`` kills one node
    (``"head"``, ``"worker-1"``, …); ``stop()`` kills the rest and removes the temporary
    directory. Use it as a context manager to stop it whatever happens."""

    def __init__(self, workers: int = 2):
        # A short temporary directory: Ray's socket paths must stay under 107 bytes.
        self.temp = Path(tempfile.mkdtemp(prefix="ndray-", dir="/tmp"))
        self.home = self.temp / "home"
        self.tmp = self.temp / "tmp"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.workers = workers
        self.sessions: Dict[str, int] = {}

    def env(self) -> Dict[str, str]:
        """The environment of the cluster's nodes, and of a driver of it: this process's, with
        the cluster's own ``HOME`` and ``TMPDIR`` and :data:`RAY_ENV`."""
        return {**os.environ, **RAY_ENV, "HOME": str(self.home), "TMPDIR": str(self.tmp)}

    def start(self) -> "LocalCluster":
        if not in_private_network():
            raise RuntimeError(
                "a test Ray cluster runs only in a network namespace of its own with nothing but "
                "loopback (unshare -n; as root, or where user namespaces are allowed): this "
                "process is on the machine's network (the tests' conftest re-runs pytest in such "
                "a namespace when it can; it could not here)"
            )
        self.home.mkdir(exist_ok=True)
        self.tmp.mkdir(exist_ok=True)
        temp_dir = f"--temp-dir={self.temp / 'ray'}"
        self.sessions["head"] = start_node(
            self.env(), "--head", f"--port={self.port}", temp_dir, "--include-dashboard=false"
        )
        for i in range(1, self.workers + 1):
            self.sessions[f"worker-{i}"] = start_node(
                self.env(), f"--address={self.address}", temp_dir
            )
        deadline = time.monotonic() + 120
        while self.alive_nodes() < self.workers + 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster's {self.workers + 1} nodes never all came up")
            time.sleep(0.5)
        return self

    def alive_nodes(self) -> int:
        """The number of nodes the head sees alive."""
        out = subprocess.run(
            [sys.executable, "-c", _ALIVE_NODES, self.address],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env(),
        )
        return int(out.stdout.strip() or 0)

    def pids(self) -> List[int]:
        """Every live process of the cluster's nodes (daemons and workers)."""
        return [pid for sid in self.sessions.values() for pid in session_pids(sid)]

    def kill(self, name: str) -> None:
        kill_session(self.sessions.pop(name))

    def stop(self) -> None:
        for name in list(self.sessions):
            self.kill(name)
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
