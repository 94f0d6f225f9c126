"""The `neardup` command pip installs and `python -m neardup` are the binary's program: the same
outputs byte for byte, the same answers, messages and exit codes, the same clean stop on a
signal."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import SAMPLE, cli_binary


def script() -> Path:
    """The `neardup` script installed beside this interpreter (pip and `maturin develop` put
    console scripts in the environment's bin directory)."""
    found = shutil.which("neardup", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"no `neardup` command beside {sys.executable}: the package installs none")
    return Path(found)


# The three ways to the command line, each given the arguments after the program's name.
ENTRY_POINTS = {
    "binary": lambda: [str(cli_binary())],
    "script": lambda: [str(script())],
    "module": lambda: [sys.executable, "-m", "neardup"],
}


def run(entry: str, *args: object, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ENTRY_POINTS[entry](), *map(str, args)],
        capture_output=True,
        timeout=600,
        **kwargs,
    )


def tree(root: Path) -> Dict[str, bytes]:
    """Every file under `root` by its relative path, with its bytes; a manifest (`_SUCCESS`,
    which names its run) only by its name."""
    return {
        str(p.relative_to(root)): b"" if p.name == "_SUCCESS" else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_dedup_writes_the_same_bytes_whichever_way_it_is_run(tmp_path):
    made: Dict[str, Dict[str, bytes]] = {}
    for entry in ENTRY_POINTS:
        # The same relative paths from a directory of each entry's own, so that whatever an
        # output records of its paths is the same too.
        cwd = tmp_path / entry
        cwd.mkdir()
        done = run(
            entry,
            "dedup",
            SAMPLE,
            "--output",
            "out",
            "--decisions",
            "decisions.jsonl",
            "--index-out",
            "index.ndi",
            "--threads",
            "2",
            cwd=cwd,
        )
        assert done.returncode == 0, (entry, done.stderr.decode())
        assert done.stdout == b""
        assert b"500 records in 3 files: kept " in done.stderr, (entry, done.stderr.decode())
        made[entry] = tree(cwd)
    assert sorted(made["binary"]) == [
        "decisions.jsonl",
        "index.ndi",
        "out/_SUCCESS",
        "out/part-0.jsonl",
        "out/part-1.jsonl",
        "out/part-2.parquet",
    ]
    assert made["script"] == made["binary"]
    assert made["module"] == made["binary"]


@pytest.mark.parametrize(
    "args",
    [
        ["params", "--threshold", "0.8", "--num-perm", "128"],
        ["--help"],
        ["dedup", "--help"],
        ["--version"],
    ],
    ids=["params", "help", "dedup-help", "version"],
)
def test_answers_are_the_binarys(args: List[str]):
    answers = {entry: run(entry, *args) for entry in ENTRY_POINTS}
    binary = answers["binary"]
    assert binary.returncode == 0 and binary.stdout, binary
    for entry in ("script", "module"):
        assert answers[entry].returncode == 0, answers[entry]
        assert answers[entry].stdout == binary.stdout, entry
        assert answers[entry].stderr == binary.stderr, entry


@pytest.mark.parametrize(
    "args, code",
    [
        # The library's usage error: a run that would write nothing.
        (["dedup", str(SAMPLE)], 2),
        # clap's: an unknown flag.
        (["dedup", str(SAMPLE), "--no-such-flag"], 2),
        # A failed run: an input that does not exist.
        (["dedup", "no-such-input.jsonl", "-o", "out"], 1),
    ],
    ids=["no-outputs", "unknown-flag", "missing-input"],
)
def test_refusals_read_and_exit_as_the_binarys(tmp_path, args: List[str], code: int):
    answers = {entry: run(entry, *args, cwd=tmp_path) for entry in ENTRY_POINTS}
    binary = answers["binary"]
    assert binary.returncode == code, binary
    assert binary.stderr.startswith(b"error: ") or binary.stderr.startswith(b"neardup: error: ")
    for entry in ("script", "module"):
        assert answers[entry].returncode == binary.returncode, answers[entry]
        assert answers[entry].stderr == binary.stderr, entry
        assert answers[entry].stdout == binary.stdout, entry
    assert sorted(os.listdir(tmp_path)) == []


# Enough text that stage 1 alone takes far longer than a signal takes to arrive.
DOCS = 60_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("command") / "in"
    root.mkdir()
    rng = random.Random(11)
    words = [f"w{i}" for i in range(5000)]
    for shard in range(2):
        with open(root / f"part-{shard}.jsonl", "w", encoding="utf-8") as f:
            for i in range(DOCS // 2):
                text = " ".join(rng.choice(words) for _ in range(120))
                f.write(json.dumps({"id": f"{shard}-{i}", "text": text}) + "\n")
    return root


def _default_signals() -> None:
    """A test run in the background by a shell without job control starts with SIGINT ignored,
    and the command leaves an ignored signal ignored (as `nohup` wants)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("entry", ["script", "module"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_command_and_removes_what_it_wrote(tmp_path, corpus, entry, sig):
    out, decisions = tmp_path / "out", tmp_path / "d.jsonl"
    proc = subprocess.Popen(
        [*ENTRY_POINTS[entry](), "dedup", str(corpus), "-o", str(out), "--decisions",
         str(decisions), "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_signals,
    )
    deadline = time.monotonic() + 120
    # The staging directory exists from the start of stage 1 on: signal while it works.
    while not (out.exists() and any(p.name.startswith(".neardup-") for p in out.iterdir())):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.01)
    started = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20, "the command did not stop promptly"
    assert proc.returncode == 128 + sig, stderr.decode()
    name = signal.Signals(sig).name
    assert (
        f"neardup: interrupted by {name}; nothing was published and the files this run had "
        "written were removed"
    ) in stderr.decode()
    assert b"Traceback" not in stderr
    assert stdout == b""
    assert not out.exists(), sorted(os.listdir(out))
    assert sorted(os.listdir(tmp_path)) == []


IN_PROCESS = """
import os, signal, sys
from neardup.__main__ import main
codes = [main(["params", "--threshold", "0.8"]), main(["dedup", sys.argv[1], "-o", sys.argv[2]]),
         main(["dedup", sys.argv[1], "-o", sys.argv[3], "--quiet"])]
print(codes, flush=True)
# Python's own SIGINT handler is back: Ctrl-C after the command is a KeyboardInterrupt.
try:
    os.kill(os.getpid(), signal.SIGINT)
    import time
    time.sleep(10)
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


def test_the_command_runs_again_in_the_same_interpreter_and_gives_python_its_signals_back(
    tmp_path,
):
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(SAMPLE), str(tmp_path / "a"), str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_default_signals,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("threshold 0.8, num_perm ")
    assert lines[-2:] == ["[0, 0, 0]", "KeyboardInterrupt"]
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
