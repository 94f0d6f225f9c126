"""Makes this directory's fixtures: a.jsonl and b.jsonl from the sample corpus (b holds near and
exact copies of a's texts), and a-estimate.idx / a-exact.idx, indexes of a.jsonl in format 1,
made by the neardup of main 3ea5919 (the last to write format 1) from the repository's root:

    python3 tests/data/index-v1/make.py
    NEARDUP=/path/to/neardup-3ea5919 python3 tests/data/index-v1/make.py --indexes

The indexes record a.jsonl by its path relative to the root (where the tests run)."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path("tests/data/index-v1")


def sample_texts() -> list:
    texts = []
    for path in sorted(Path("tests/data/sample").glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f if line.strip()]
    return texts


def write(path: Path, prefix: str, texts: list) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n")


if "--indexes" in sys.argv:
    neardup = os.environ["NEARDUP"]
    for verify in ("estimate", "exact"):
        out = HERE / f"out-{verify}"
        subprocess.run([neardup, "--quiet", "dedup", str(HERE / "a.jsonl"), "--id-field", "id", "--verify", verify,
                        "--decisions", str(out / "decisions.jsonl"), "--index-out", str(HERE / f"a-{verify}.idx")], check=True)
        for p in sorted(out.iterdir()):
            p.unlink()
        out.rmdir()
else:
    texts = sample_texts()
    a = texts[:150]
    b = texts[150:260] + [t + " and one more sentence." for t in a[:30:3]] + a[40:45] + [None, ""]
    write(HERE / "a.jsonl", "a", a)
    write(HERE / "b.jsonl", "b", b)
