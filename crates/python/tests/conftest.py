"""Shared paths and helpers of the Python tests."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
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
