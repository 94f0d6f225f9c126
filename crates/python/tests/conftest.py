"""Shared paths and helpers of the Python tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def pytest_configure(config: pytest.Config) -> None:
    """Runs the whole session again inside a network namespace with only loopback, where the
    Ray tests' clusters and their drivers stay on 127.0.0.1 (see local_ray.py); the other tests
    need no more than loopback either. Where no such namespace can be made, the session goes on
    here and the Ray tests refuse to start a cluster."""
    from local_ray import in_private_network, private_network_command, PRIVATE_NETWORK_ENV

    if in_private_network():
        return
    if os.environ.get(PRIVATE_NETWORK_ENV):
        raise pytest.UsageError("the private network namespace has interfaces other than lo")
    command = private_network_command(
        [sys.executable, "-m", "pytest", *config.invocation_params.args]
    )
    if command is None:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(config.invocation_params.dir)
    os.execvpe(command[0], command, {**os.environ, PRIVATE_NETWORK_ENV: "1"})
DATA = REPO / "tests" / "data"
SAMPLE = DATA / "sample"
COMPAT = DATA / "compat"


def cli_binary() -> Path:
    """The neardup CLI built from this checkout: $NEARDUP_BIN, else the newest of
    target/{debug,release}/neardup."""
    given = os.environ.get("NEARDUP_BIN")
    if given:
        return Path(given)
    built = [p for p in (REPO / "target" / d / "neardup" for d in ("debug", "release")) if p.exists()]
    if not built:
        pytest.fail("the neardup CLI is not built: run `cargo build` (tests/run does)")
    return max(built, key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="session")
def cli():
    """Runs the CLI with the given arguments (quietly) and returns the completed process."""
    binary = cli_binary()

    def run(*args, check=True):
        return subprocess.run(
            [str(binary), "--quiet", *map(str, args)],
            check=check,
            capture_output=True,
            text=True,
        )

    return run


def read_jsonl(path: Path) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sample_texts() -> list:
    """The sample corpus's `text` values, in the order neardup reads them (files in name order,
    records in file order)."""
    import pyarrow.parquet as pq

    texts = []
    for path in sorted(SAMPLE.iterdir()):
        if path.suffix == ".jsonl":
            texts += [r["text"] for r in read_jsonl(path)]
        elif path.suffix == ".parquet":
            texts += pq.read_table(path, columns=["text"]).column("text").to_pylist()
    return texts


def _redis_answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url(tmp_path):
    """A real `redis-server` (Debian's package; $NEARDUP_REDIS_SERVER names another) on a free
    127.0.0.1 port, in a directory of its own, stopped by its pid after the test. Yields its URL
    (database 0)."""
    import shutil
    import socket
    import time

    program = os.environ.get("NEARDUP_REDIS_SERVER") or shutil.which("redis-server")
    if program is None:
        pytest.fail("redis-server is missing: apt-get install redis-server (.ci/run does)")
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _redis_answers(port):
            time.sleep(0.02)
        if proc.poll() is None and _redis_answers(port):
            try:
                yield f"redis://127.0.0.1:{port}/0"
            finally:
                proc.kill()
                proc.wait()
            return
        proc.kill()
        proc.wait()
    pytest.fail("redis-server did not start")
