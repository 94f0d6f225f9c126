"""Makes this directory's fixtures: key tables in format 1 (before tables carried where each
record lies), made by the neardup of main 3ea5919 from the repository's root, of
tests/data/index-v1/a.jsonl (shard 0) and b.jsonl (shard 1), with default settings:

    NEARDUP=/path/to/neardup-3ea5919 python3 tests/data/keys-v1/make.py

The tables record their inputs by their paths relative to the root (where the tests run)."""

import os
import subprocess
from pathlib import Path

HERE = Path("tests/data/keys-v1")
INPUTS = Path("tests/data/index-v1")

neardup = os.environ["NEARDUP"]
for shard, name in enumerate(("a", "b")):
    subprocess.run([neardup, "--quiet", "keys", str(INPUTS / f"{name}.jsonl"), "--shard", str(shard),
                    "-o", str(HERE / f"{name}.v1.ndk")], check=True)
