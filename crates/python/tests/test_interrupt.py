"""Ctrl-C in Python stops a run and leaves what the CLI leaves on SIGINT: nothing of the run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Enough text that stage 1 alone takes far longer than the signal takes to arrive.
DOCS = 120_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("interrupt") / "in"
    root.mkdir()
    rng = random.Random(7)
    words = [f"w{i}" for i in range(5000)]
    for shard in range(4):
        with open(root / f"part-{shard}.jsonl", "w", encoding="utf-8") as f:
            for i in range(DOCS // 4):
                text = " ".join(rng.choice(words) for _ in range(120))
                f.write(json.dumps({"id": f"{shard}-{i}", "text": text}) + "\n")
    return root


def _default_sigint() -> None:
    """Python turns SIGINT into KeyboardInterrupt only when SIGINT is not ignored at start, and a
    test run in the background by a shell without job control starts with it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the run never reached the point to interrupt it at")
        time.sleep(0.01)


DEDUP = """
import sys, neardup
try:
    neardup.dedup([sys.argv[1]], output=sys.argv[2], decisions=sys.argv[3], report=sys.argv[4],
                  threads=1, progress=False)
except KeyboardInterrupt:
    print("KeyboardInterrupt")
    sys.exit(3)
print("finished")
"""


def test_ctrl_c_in_dedup_removes_what_the_run_wrote(tmp_path, corpus):
    out, decisions, report = tmp_path / "out", tmp_path / "d.jsonl", tmp_path / "r.json"
    proc = start(DEDUP, str(corpus), str(out), str(decisions), str(report))
    # The staging directory exists from the start of stage 1 on: interrupt while it works.
    wait_for(lambda: out.exists() and any(p.name.startswith(".neardup-") for p in out.iterdir()))
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, (stdout, stderr)
    assert stdout.strip() == "KeyboardInterrupt"
    assert time.monotonic() - started < 20, "the run did not stop promptly"
    # Nothing published, nothing left behind: no output directory (the run created it), no
    # decisions, report or their temporary files.
    assert not out.exists(), sorted(os.listdir(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == [], sorted(tmp_path.iterdir())


def test_the_run_after_an_interrupted_one_succeeds(tmp_path, corpus):
    out = tmp_path / "out"
    proc = start(DEDUP, str(corpus), str(out), str(tmp_path / "d.jsonl"), str(tmp_path / "r.json"))
    wait_for(lambda: out.exists() and any(p.name.startswith(".neardup-") for p in out.iterdir()))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    again = subprocess.run(
        [sys.executable, "-c", DEDUP, str(corpus), str(out), str(tmp_path / "d.jsonl"),
         str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "finished"
    assert (out / "_SUCCESS").exists()
    assert json.loads((tmp_path / "r.json").read_text())["totals"]["records_in"] == DOCS


STREAM = """
import sys, neardup
stream = neardup.stream([sys.argv[1]], threads=1)
print("iterating", flush=True)
try:
    for _ in stream:
        pass
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(3)
print("finished")
"""


def test_ctrl_c_while_waiting_for_a_decision_interrupts_the_stream(corpus):
    proc = start(STREAM, str(corpus))
    assert proc.stdout.readline().strip() == "iterating"
    # Stage 1 runs before the first decision (tens of megabytes on one thread: far longer than
    # this), so the interrupt arrives while the first __next__ waits.
    time.sleep(0.05)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, (stdout, stderr)
    assert stdout.strip() == "KeyboardInterrupt"
    assert time.monotonic() - started < 20


def test_a_run_dropped_unwaited_stops_and_removes_what_it_wrote(tmp_path, corpus):
    # A Ctrl-C between the start of a run and the wait for it drops the run object without
    # cancelling it: dropping it must stop the run and wait until it has removed what it wrote.
    from neardup import _native

    out, decisions = tmp_path / "out", tmp_path / "d.jsonl"
    run = _native.start_dedup([str(corpus)], str(out), str(decisions), None, {"threads": 1})
    wait_for(lambda: out.exists() and any(p.name.startswith(".neardup-") for p in out.iterdir()))
    started = time.monotonic()
    del run
    assert time.monotonic() - started < 20, "dropping the run did not stop it promptly"
    assert not out.exists(), sorted(os.listdir(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == [], sorted(tmp_path.iterdir())
