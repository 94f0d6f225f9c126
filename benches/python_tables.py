#!/usr/bin/env python3
"""Tables in memory: rows per second of ``neardup.dedup_table`` on a pyarrow Table, a polars
DataFrame, a pandas DataFrame and a ``datasets.Dataset`` built from a corpus, against the file run
of the same rows (``neardup.dedup`` over the corpus's JSONL files, decisions written), and against
the fastest way to do it today with rensa (``../shared/bench/peers/run_rensa_bulk.py``, its bulk
matrix pipeline) and datasketch (``run_datasketch.py``, on a slice: it is slow), run by the peers'
Python given with ``--peers-python``.

Each round runs every variant once, in turn, so that a slow minute of the machine hits all of
them; the median of the rounds is reported. The tables are built before timing (reading files
into a table is the caller's, in every variant), except pandas, whose conversion to Arrow is part
of its cost and is timed.

    python benches/python_tables.py /work/corpora/rustdocs --rounds 3 \\
        --peers-python /work/peers-venv/bin/python --peers ../shared/bench/peers \\
        --cli target/release/neardup
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", type=Path, help="directory with jsonl/ and parquet/ holding the same rows")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--peers-python", type=Path, help="python of the peers' venv (rensa, datasketch)")
    p.add_argument("--peers", type=Path, help="../shared/bench/peers")
    p.add_argument("--datasketch-docs", type=int, default=5000)
    p.add_argument("--peer-rounds", type=int, default=1, help="rounds the peers run in")
    p.add_argument("--cli", type=Path, help="a neardup binary: its file run is timed too")
    args = p.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq

    import neardup

    jsonl = sorted((args.corpus / "jsonl").glob("*.jsonl"))
    parquet = sorted((args.corpus / "parquet").glob("*.parquet"))
    table = pa.concat_tables(pq.read_table(f, columns=["text"]) for f in parquet)
    rows = table.num_rows
    settings = {"threads": args.threads}

    variants = {}
    tmp = Path(tempfile.mkdtemp(prefix="neardup-tables-"))

    def file_run() -> int:
        out = tmp / "decisions.jsonl"
        if out.exists():
            out.unlink()
        report = neardup.dedup([str(f) for f in jsonl], decisions=str(out), progress=False,
                               **settings)
        return report["totals"]["records_kept"]

    def parquet_run() -> int:
        out = tmp / "decisions-pq.jsonl"
        if out.exists():
            out.unlink()
        report = neardup.dedup([str(f) for f in parquet], decisions=str(out), progress=False,
                               **settings)
        return report["totals"]["records_kept"]

    def kept(decisions) -> int:
        return sum(decisions.column("keep").to_pylist())

    def cli_run() -> int:
        out = tmp / "decisions-cli.jsonl"
        cmd = [str(args.cli), "dedup", *map(str, jsonl), "--decisions", str(out), "-q",
               "--overwrite"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        subprocess.run(cmd, check=True)
        with open(out, encoding="utf-8") as f:
            return sum(json.loads(line)["keep"] for line in f)

    if args.cli:
        variants["CLI file run, JSONL (decisions written)"] = cli_run
    variants["file run, JSONL (decisions written)"] = file_run
    variants["file run, Parquet (decisions written)"] = parquet_run
    variants["dedup_table(pyarrow.Table)"] = lambda: kept(
        neardup.dedup_table(table, progress=False, **settings))
    try:
        import polars as pl

        frame = pl.from_arrow(table)
        variants["dedup_table(polars.DataFrame)"] = lambda: kept(
            neardup.dedup_table(frame, progress=False, **settings))
        variants["drop_duplicates(polars.DataFrame)"] = lambda: neardup.drop_duplicates(
            frame, progress=False, **settings).height
    except ImportError:
        pass
    try:
        import pandas as pd  # noqa: F401

        pframe = table.to_pandas()
        variants["dedup_table(pandas.DataFrame), conversion included"] = lambda: kept(
            neardup.dedup_table(pframe, progress=False, **settings))
    except ImportError:
        pass
    try:
        import datasets

        ds = datasets.Dataset(table)
        variants["dedup_table(datasets.Dataset)"] = lambda: kept(
            neardup.dedup_table(ds, progress=False, **settings))
        variants["drop_duplicates(datasets.Dataset)"] = lambda: len(
            neardup.drop_duplicates(ds, progress=False, **settings))
    except ImportError:
        pass

    peers = []
    if args.peers_python and args.peers:
        ds_slice = tmp / "slice.jsonl"
        with open(jsonl[0], encoding="utf-8") as src, open(ds_slice, "w", encoding="utf-8") as dst:
            for i, line in enumerate(src):
                if i >= args.datasketch_docs:
                    break
                dst.write(line)
        peers = [
            ("rensa bulk (run_rensa_bulk.py), full corpus", rows,
             [str(args.peers_python), str(args.peers / "run_rensa_bulk.py"), *map(str, jsonl),
              "--out", str(tmp / "rensa.jsonl")]),
            (f"datasketch MinHashLSH (run_datasketch.py), first {args.datasketch_docs} rows",
             args.datasketch_docs,
             [str(args.peers_python), str(args.peers / "run_datasketch.py"), str(ds_slice),
              "--out", str(tmp / "datasketch.jsonl")]),
        ]

    times = {name: [] for name in variants}
    peer_times = {name: [] for name, _, _ in peers}
    results = {}
    peer_output = {}
    for _ in range(args.rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - start)
            print(f"{name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
        # The peers are tens of times slower: once is enough for their rate, and keeps the
        # lock short on a shared machine (--peer-rounds).
        for name, _, cmd in peers if len(peer_times[peers[0][0]]) < args.peer_rounds else []:
            start = time.perf_counter()
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            peer_times[name].append(time.perf_counter() - start)
            peer_output[name] = done.stdout.strip().splitlines()[-1:]
            print(f"{name}: {peer_times[name][-1]:.2f} s", file=sys.stderr, flush=True)

    base = statistics.median(times["file run, JSONL (decisions written)"])
    print(f"{rows} rows; median of {args.rounds} rounds; threads={args.threads or os.cpu_count()}")
    print("| run | rows | s | rows/s | vs file run (JSONL) | kept |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"| {name} | {rows} | {m:.2f} | {rows / m:,.0f} | {m / base:.2f}x | {results[name]} |")
    for name, n, _ in peers:
        m = statistics.median(peer_times[name])
        print(f"| {name} | {n} | {m:.2f} | {n / m:,.0f} | {(m / n) / (base / rows):.1f}x per row | |")
    print(json.dumps({"times": times, "peers": peer_times, "peer_output": peer_output}))


if __name__ == "__main__":
    main()
