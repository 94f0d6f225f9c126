#!/usr/bin/env python3
"""Online dedup on one local Redis: neardup.Index(store="redis://…") against hojichar's
GenerateDedupLSH + RedisDeduplicator, on the same server and texts, alternated in one run.

    python3 benches/online_redis.py [--docs 5000] [--producers 1 2 4] [--rounds 2] [--batch 256]
        [--corpus ../corpora/rustdocs/jsonl/part-00000.jsonl] [--pairs DIR] [--no-precision]

For each round and producer count P, each system runs P producer processes (spawned, each with an
interleaved share of the texts, started together) on a freshly emptied server (FLUSHALL):
- neardup batch: `check_many` over batches of --batch texts;
- neardup single: `check` per text (the per-call latency is the p50/p99 reported);
- hojichar: `Compose([GenerateDedupLSH(), RedisDeduplicator(...)])` applied per document.
Documents per second is all texts over the wall time from the common start to the last producer's
end. Memory per kept document is the server's `used_memory` after the run less before, over the
documents kept. Also reported: the server's CPU seconds over the run (`INFO cpu`), the producers'
(all their threads, summed) and, for neardup, the documents whose commit was refused because
another producer's came first (`conflicts`, each decided again).
Precision (one producer): the share of a system's drops that have an earlier text at or above
Jaccard 0.8 in character 5-grams of the stripped text, from ../shared/bench/exact_pairs.py
(--pairs: a directory where it already wrote pairs.csv for these texts).

Needs: the neardup package (a release build) and `hojichar[dedup]` (hojichar's LSH filters with
the redis client) in this Python; redis-server on the PATH. Prints one JSON line per
measurement. Results: docs/benchmarks.md, "Online dedup on Redis".
"""
import argparse
import csv
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THRESHOLD = 0.8


def texts_of(path, n):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            t = json.loads(line).get("text")
            if isinstance(t, str) and t.strip():
                out.append(t.strip())
                if len(out) == n:
                    break
    return out


def start_redis(workdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(500):
        try:
            client.ping()
            return proc, port, client
        except redis.ConnectionError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("redis-server did not start")


def producer(system, port, texts, ids, batch, start, out):
    """One producer process: waits for the common start, then checks its texts (`ids`: their
    places in the whole, which name them)."""
    lat = []
    kept = 0
    if system.startswith("neardup"):
        import neardup

        idx = neardup.Index(f"redis://127.0.0.1:{port}/0", namespace="bench", threshold=THRESHOLD)
        start.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        if system == "neardup-batch":
            for s in range(0, len(texts), batch):
                b0 = time.perf_counter()
                ds = idx.check_many(texts[s:s + batch], ids=[f"d{i}" for i in ids[s:s + batch]])
                lat.append(time.perf_counter() - b0)
                kept += sum(d.keep for d in ds)
                drops = [int(d.id[1:]) for d in ds if not d.keep]
                out.put(("drops", drops))
        else:
            for t, i in zip(texts, ids):
                b0 = time.perf_counter()
                d = idx.check(t, id=f"d{i}")
                lat.append(time.perf_counter() - b0)
                kept += d.keep
                if not d.keep:
                    out.put(("drops", [i]))
    else:
        from hojichar import Compose, Document
        from hojichar.filters.deduplication import GenerateDedupLSH, RedisDeduplicator

        pipe = Compose([GenerateDedupLSH(threshold=THRESHOLD),
                        RedisDeduplicator(host="127.0.0.1", port=port, key_prefix="bench")])
        start.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for k, t in enumerate(texts):
            b0 = time.perf_counter()
            d = pipe.apply(Document(t))
            lat.append(time.perf_counter() - b0)
            kept += not d.is_rejected
            if d.is_rejected:
                out.put(("drops", [ids[k]]))
    out.put(("done", (t0, time.perf_counter(), lat, kept, time.process_time() - c0)))


def run(system, port, client, texts, producers, batch):
    client.flushall()
    before = client.info("memory")["used_memory"]
    cpu_before = client.info("cpu")
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(producers + 1)
    out = ctx.Queue()
    # Interleaved shares, each producer's texts numbered by their place in the whole.
    shares = [[i for i in range(len(texts)) if i % producers == p] for p in range(producers)]
    procs = []
    for share in shares:
        procs.append(ctx.Process(target=producer, args=(system, port, [texts[i] for i in share], share, batch, start, out)))
    for pr in procs:
        pr.start()
    start.wait()
    done, drops = [], []
    import queue

    while len(done) < producers:
        try:
            kind, value = out.get(timeout=5)
        except queue.Empty:
            failed = [pr.exitcode for pr in procs if pr.exitcode not in (None, 0)]
            if failed:
                raise SystemExit(f"{system}: a producer failed (exit codes {failed})")
            continue
        (done if kind == "done" else drops).append(value)
    for pr in procs:
        pr.join()
    t0 = min(d[0] for d in done)
    t1 = max(d[1] for d in done)
    lat = sorted(x for d in done for x in d[2])
    kept = sum(d[3] for d in done)
    producer_cpu = sum(d[4] for d in done)
    used = client.info("memory")["used_memory"] - before
    # Documents whose commit another producer's refused (each decided again).
    conflicts = int(client.hget("neardup:bench:meta", "conflicts") or 0)
    cpu_after = client.info("cpu")
    server_cpu = sum(cpu_after[k] - cpu_before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    return {
        "system": system,
        "producers": producers,
        "docs": len(texts),
        "docs_per_s": round(len(texts) / (t1 - t0), 1),
        "mb_per_s": round(sum(len(t.encode()) for t in texts) / (t1 - t0) / 1e6, 2),
        "p50_ms": round(1000 * statistics.median(lat), 3),
        "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 3),
        "calls": len(lat),
        "kept": kept,
        "server_bytes_per_kept": round(used / max(kept, 1)),
        "server_cpu_s": round(server_cpu, 3),
        "producer_cpu_s": round(producer_cpu, 3),
        "conflicts": conflicts,
        "drops": sorted(i for d in drops for i in d),
    }


def true_drops(pairs_csv):
    """Per text, whether an earlier text reaches the threshold."""
    has_earlier = set()
    with open(pairs_csv) as f:
        for row in csv.DictReader(f):
            a, b, j = int(row["a"]), int(row["b"]), float(row["jaccard"])
            if j >= THRESHOLD:
                has_earlier.add(max(a, b))
    return has_earlier


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--producers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--corpus", default=os.environ.get("NEARDUP_BENCH_CORPUS") or os.path.join(
        HERE, "..", "..", "corpora", "rustdocs", "jsonl", "part-00000.jsonl"))
    ap.add_argument("--exact-pairs", default=os.path.join(HERE, "..", "..", "shared", "bench", "exact_pairs.py"),
                    help="../shared/bench/exact_pairs.py, for the precision")
    ap.add_argument("--pairs", help="a directory holding exact_pairs.py's pairs.csv for these texts")
    ap.add_argument("--no-precision", action="store_true", help="skip the precision (and exact_pairs.py)")
    ap.add_argument("--systems", nargs="+", default=["neardup-batch", "neardup-single", "hojichar"])
    a = ap.parse_args()
    texts = texts_of(a.corpus, a.docs)
    work = tempfile.mkdtemp(prefix="online-bench-")
    truth = None
    pairs = a.pairs
    if pairs is None and not a.no_precision:
        exact = a.exact_pairs
        if os.path.exists(exact):
            src = os.path.join(work, "texts.jsonl")
            with open(src, "w", encoding="utf-8") as f:
                for t in texts:
                    f.write(json.dumps({"text": t}) + "\n")
            pairs = os.path.join(work, "pairs")
            subprocess.run([sys.executable, exact, src, "--out", pairs, "--min", str(THRESHOLD)], check=True,
                           stdout=subprocess.DEVNULL)
    if pairs is not None:
        truth = true_drops(os.path.join(pairs, "pairs.csv"))
    proc, port, client = start_redis(work)
    try:
        for r in range(a.rounds):
            for p in a.producers:
                for system in a.systems:
                    res = run(system, port, client, texts, p, a.batch)
                    drops = res.pop("drops")
                    if truth is not None and p == 1:
                        res["precision"] = round(sum(i in truth for i in drops) / max(len(drops), 1), 4)
                        res["dropped"] = len(drops)
                    res["round"] = r
                    print(json.dumps(res), flush=True)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
