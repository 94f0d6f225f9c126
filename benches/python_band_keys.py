#!/usr/bin/env python3
"""Band keys from Python: neardup.Sketcher.band_keys against rensa and datasketch.

Every tool turns the same texts into 128-permutation MinHash signatures of character 5-grams and
16 band keys of 8 rows each, driven from Python the fastest way its API offers:

- neardup: ``Sketcher(bands=16, rows=8).band_keys(texts)`` on a list of str and on a pyarrow
  array (default ``oph`` scheme, and ``fast``), on all cores and on one thread;
- rensa: shingles built in Python, ``RMinHash.digest_matrix_from_token_sets`` (its bulk path),
  then ``RMinHashLSH.insert_matrix``, which computes the band keys (and files them in its
  tables: rensa has no call that only computes them);
- datasketch: ``MinHash.update_batch`` per text and ``MinHashLSH``'s own band key function over
  its hash ranges (on the first ``--datasketch-docs`` texts: it is slow).

Rounds alternate the tools so that a slow minute of the machine hits all of them; the median of
the rounds is reported, as texts per second.

    /work/peers-venv/bin/python benches/python_band_keys.py /work/corpus/rustdocs/jsonl --docs 20000

(with neardup importable in that environment: ``pip install ./crates/python``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

K, NUM_PERM, BANDS, ROWS = 5, 128, 16, 8


def load(directory: Path, docs: int) -> list:
    texts = []
    for path in sorted(directory.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                texts.append(json.loads(line)["text"])
                if len(texts) == docs:
                    return texts
    return texts


def shingles(text: str) -> list:
    return [text[i : i + K] for i in range(len(text) - K + 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--datasketch-docs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    import neardup
    import pyarrow as pa
    import rensa
    from datasketch import MinHash, MinHashLSH

    texts = load(a.corpus, a.docs)
    arrow = pa.array(texts)
    few = texts[: a.datasketch_docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts)} texts, {mb:.1f} MB; {os.cpu_count()} cores")

    sketchers = {
        "neardup oph, list of str": (neardup.Sketcher(bands=BANDS, rows=ROWS), texts),
        "neardup oph, pyarrow array": (neardup.Sketcher(bands=BANDS, rows=ROWS), arrow),
        "neardup fast, list of str": (neardup.Sketcher(bands=BANDS, rows=ROWS, hash="fast"), texts),
        "neardup oph, list of str, 1 thread": (
            neardup.Sketcher(bands=BANDS, rows=ROWS, threads=1),
            texts,
        ),
    }

    def run_neardup(name):
        sketcher, data = sketchers[name]
        keys = sketcher.band_keys(data)
        assert keys.shape == (len(texts), BANDS)
        return len(texts)

    def run_rensa():
        matrix = rensa.RMinHash.digest_matrix_from_token_sets(
            [shingles(t) for t in texts], NUM_PERM, 42
        )
        lsh = rensa.RMinHashLSH(threshold=0.8, num_perm=NUM_PERM, num_bands=BANDS)
        lsh.insert_matrix(matrix)
        return len(texts)

    lsh = MinHashLSH(num_perm=NUM_PERM, params=(BANDS, ROWS))

    def run_datasketch():
        for t in few:
            m = MinHash(num_perm=NUM_PERM)
            m.update_batch([s.encode("utf-8") for s in shingles(t)])
            keys = [lsh._H(m.hashvalues[start:end]) for start, end in lsh.hashranges]
            assert len(keys) == BANDS
        return len(few)

    tools = {name: (lambda n=name: run_neardup(n)) for name in sketchers}
    tools["rensa 0.5 digest matrix + insert_matrix"] = run_rensa
    tools[f"datasketch 1.9 (first {len(few)} texts)"] = run_datasketch
    rates = {name: [] for name in tools}
    for r in range(a.rounds):
        for name, run in tools.items():
            started = time.perf_counter()
            n = run()
            rates[name].append(n / (time.perf_counter() - started))
        print(f"round {r + 1} done")
    base = statistics.median(rates["neardup oph, list of str"])
    print("| tool | texts/s (median) | rounds | neardup oph / tool |")
    print("| --- | ---: | --- | ---: |")
    for name, rs in rates.items():
        med = statistics.median(rs)
        print(
            f"| {name} | {med:,.0f} | {', '.join(f'{x:,.0f}' for x in rs)} | {base / med:.1f}× |"
        )


if __name__ == "__main__":
    main()
