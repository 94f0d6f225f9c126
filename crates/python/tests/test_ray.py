"""neardup.ray on a real Ray cluster on 127.0.0.1: a head and two worker nodes of one CPU each,
each started in a session of its own (setsid) and stopped by killing exactly the processes of
those sessions."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'neardup[ray]')")

RAY = Path(sys.executable).parent / "ray"
# Node failures are noticed within a few seconds rather than the default half minute.
RAY_ENV = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "4",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid: int) -> list:
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


def start_node(*args: str) -> int:
    """Runs `ray start ARGS` in a new session; returns the session id (its daemons stay in it)."""
    proc = subprocess.Popen(
        [str(RAY), "start", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **RAY_ENV},
    )
    out, _ = proc.communicate(timeout=180)
    if proc.returncode != 0:
        kill_session(proc.pid)
        pytest.fail(f"ray start {' '.join(args)} failed:\n{out}")
    return proc.pid


class Cluster:
    def __init__(self):
        # A short temporary directory: Ray's socket paths must stay under 107 bytes.
        self.temp = Path(tempfile.mkdtemp(prefix="ndray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.sessions = {}

    def start(self):
        self.sessions["head"] = start_node(
            "--head", f"--port={self.port}", f"--temp-dir={self.temp}", "--include-dashboard=false"
        )
        for name in ("worker-1", "worker-2"):
            self.sessions[name] = start_node(f"--address={self.address}")
        deadline = time.monotonic() + 120
        while self.alive_nodes() < 3:
            if time.monotonic() > deadline:
                pytest.fail("the cluster's three nodes never all came up")
            time.sleep(0.5)

    def alive_nodes(self) -> int:
        out = subprocess.run(
            [sys.executable, "-c", NODES, self.address], capture_output=True, text=True, timeout=120,
            env={**os.environ, **RAY_ENV},
        )
        return int(out.stdout.strip() or 0)

    def kill(self, name: str) -> None:
        kill_session(self.sessions.pop(name))

    def stop(self):
        for name in list(self.sessions):
            self.kill(name)
        shutil.rmtree(self.temp, ignore_errors=True)


NODES = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""

DRIVER = """
import json, sys, neardup.ray
args = json.loads(sys.argv[1])
report = neardup.ray.dedup(**args)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.stop()


def drive(cluster, cwd: Path, **args) -> subprocess.Popen:
    """Starts a driver process running neardup.ray.dedup(**args) from `cwd`."""
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps({"address": cluster.address, **args})],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **RAY_ENV},
    )


def finish(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def data_files(directory: Path) -> dict:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.startswith(("_SUCCESS", "."))
    }


def test_ray_runs_are_the_clis_and_resume(tmp_path, cluster, cli, monkeypatch):
    # Relative inputs from the driver's working directory: decisions name them as given.
    monkeypatch.chdir(REPO)
    shards = [[f"tests/data/sample/{p.name}"] for p in sorted(SAMPLE.iterdir())]
    inputs = [s[0] for s in shards]
    cli("dedup", *inputs, "-o", tmp_path / "one", "--decisions", tmp_path / "one.jsonl", "--threshold", "0.7")
    args = dict(
        inputs=inputs,
        output=str(tmp_path / "out"),
        decisions=str(tmp_path / "d.jsonl"),
        work_dir=str(tmp_path / "work"),
        groups=2,
        threshold=0.7,
    )
    report = finish(drive(cluster, REPO, **args))
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")
    assert json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])["file"] == inputs[0]
    assert report["shards"] == 3 and report["groups"] == 2
    assert report["tasks"] == 3 + 1 + 3 + 2 + 3 and report["tasks_reused"] == 0
    assert len(report["nodes"]) >= 2, report["nodes"]

    # Everything found complete: nothing runs again, the result is the same.
    (tmp_path / "d.jsonl").unlink()
    again = finish(drive(cluster, REPO, **args))
    assert again["tasks_reused"] == again["tasks"]
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()

    # Lost intermediate outputs (a sign and a decide step's) are made again; the rest is reused.
    shutil.rmtree(tmp_path / "work" / "sign" / "sig-00001")
    shutil.rmtree(tmp_path / "work" / "decide" / "decided-00000")
    partial = finish(drive(cluster, REPO, **args))
    assert partial["tasks_reused"] == partial["tasks"] - 2
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")

    # The work directory belongs to its run: other settings are refused.
    other = drive(cluster, REPO, **{**args, "threshold": 0.8})
    out, err = other.communicate(timeout=120)
    kill_session(other.pid)
    assert other.returncode != 0 and "holds the intermediate files of another run" in err


def synthetic_corpus(root: Path, shards: int, docs: int) -> list:
    """Shards of JSONL with near duplicates within and across shards."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(4000)]
    bases = [[rng.choice(words) for _ in range(150)] for _ in range(docs // 3)]
    paths = []
    for s in range(shards):
        path = root / f"shard-{s:02d}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for i in range(docs):
                if rng.random() < 0.3:
                    text = list(rng.choice(bases))
                    text[rng.randrange(len(text))] = rng.choice(words)
                else:
                    text = [rng.choice(words) for _ in range(150)]
                f.write(json.dumps({"id": f"{s}-{i}", "text": " ".join(text)}) + "\n")
        paths.append(path)
    return paths


def test_a_worker_node_killed_mid_run_changes_nothing(tmp_path, cluster, cli):
    corpus = tmp_path / "in"
    corpus.mkdir()
    paths = synthetic_corpus(corpus, shards=8, docs=4000)
    cli("dedup", *paths, "-o", tmp_path / "one", "--decisions", tmp_path / "one.jsonl")
    work = tmp_path / "work"
    proc = drive(
        cluster,
        tmp_path,
        inputs=[str(p) for p in paths],
        output=str(tmp_path / "out"),
        decisions=str(tmp_path / "d.jsonl"),
        work_dir=str(work),
        groups=3,
        max_retries=5,
    )
    # Kill a worker node while the keys tasks run (the first table is out, more are going).
    deadline = time.monotonic() + 180
    while not (work / "keys").exists() or not any((work / "keys").glob("*.ndk")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no task finished"
        time.sleep(0.02)
    cluster.kill("worker-1")
    report = finish(proc)
    assert (tmp_path / "d.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert data_files(tmp_path / "out") == data_files(tmp_path / "one")
    assert report["tasks_reused"] == 0
