#!/usr/bin/env python3
"""Stage 1 past its memory limit: a corpus whose key table is about twice the limit, run with
and without `--memory-limit`, reporting wall time and peak RSS of each run and checking that the
decisions (and the sharded path's hot-key files) are byte-identical.

    python3 benches/memory_limit.py WORK_DIR [--docs 3000000] [--files 4] [--limit 200MB]
                                    [--neardup target/release/neardup]

The corpus: DOCS one-line JSONL documents of 6-14 random words (a seeded generator, so every run
builds the same bytes), every 5th a copy of an earlier one with one word changed, in FILES files.
With 16 x 8 bands and the content key a document costs 136 bytes of table, so 3,000,000 documents
make a 408 MB table: twice the default 200 MB limit.

Runs, in this order and alternated once more (wall times drift on a shared machine):
  dedup, no limit          (table and counting partitions in memory)
  dedup, --memory-limit    (rows spilled to partition files, counted one partition at a time)
  keys + hot, no limit / with --memory-limit on `hot` (the sharded path's counting)
Prints one JSON line per run and a summary table.
"""
import argparse
import filecmp
import json
import os
import random
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("work")
p.add_argument("--docs", type=int, default=3_000_000)
p.add_argument("--files", type=int, default=4)
p.add_argument("--limit", default="200MB")
p.add_argument("--rounds", type=int, default=2)
p.add_argument(
    "--neardup",
    default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "neardup"))
a = p.parse_args()

corpus = os.path.join(a.work, "corpus")
stamp = os.path.join(corpus, f".built-{a.docs}-{a.files}")
if not os.path.exists(stamp):
    os.makedirs(corpus, exist_ok=True)
    rng = random.Random(7)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(20000)]
    outs = [open(os.path.join(corpus, f"part-{i}.jsonl"), "w", encoding="utf-8")
            for i in range(a.files)]
    made = []
    for n in range(a.docs):
        if made and n % 5 == 0:
            words = list(rng.choice(made))
            words[rng.randrange(len(words))] = rng.choice(vocab)
        else:
            words = rng.choices(vocab, k=rng.randint(6, 14))
            if len(made) < 100000:
                made.append(words)
            else:
                made[rng.randrange(100000)] = words
        outs[n * a.files // a.docs].write(json.dumps({"id": n, "text": " ".join(words)}) + "\n")
    for f in outs:
        f.close()
    open(stamp, "w").close()
inputs = sorted(os.path.join(corpus, f) for f in os.listdir(corpus) if f.endswith(".jsonl"))
size_mb = sum(os.path.getsize(f) for f in inputs) / 1e6


def run(name, cmd):
    """Runs CMD, returns wall seconds and peak RSS in MB (wait4's rusage of that child alone)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{name} failed ({status}): {' '.join(cmd)}\n{err.decode(errors='replace')}")
    return wall, usage.ru_maxrss / 1024


nd = a.neardup
spill = os.path.join(a.work, "spill")
os.makedirs(spill, exist_ok=True)
runs = {
    "dedup, in memory": lambda r: [
        nd, "dedup", *inputs, "-q", "--decisions", os.path.join(a.work, f"mem-{r}.jsonl")],
    f"dedup, --memory-limit {a.limit}": lambda r: [
        nd, "dedup", *inputs, "-q", "--decisions", os.path.join(a.work, f"lim-{r}.jsonl"),
        "--memory-limit", a.limit, "--spill-dir", spill],
}
results = {name: [] for name in runs}
for r in range(a.rounds):
    for name, cmd in runs.items():
        wall, rss = run(name, cmd(r))
        results[name].append((wall, rss))
        print(json.dumps({"run": name, "round": r, "wall_s": round(wall, 2),
                          "peak_rss_mb": round(rss)}), flush=True)
same = all(filecmp.cmp(os.path.join(a.work, f"mem-{r}.jsonl"),
                       os.path.join(a.work, f"lim-{r}.jsonl"), shallow=False)
           for r in range(a.rounds))

# The sharded path: one key table per file, then `hot` with and without the limit.
tables = []
for i, f in enumerate(inputs):
    out = os.path.join(a.work, f"keys-{i}.ndk")
    run("keys", [nd, "keys", f, "-q", "--shard", str(i), "--out", out])
    tables.append(out)
hot_runs = {
    "hot, in memory": [nd, "hot", *tables, "-q", "--out", os.path.join(a.work, "mem.ndh")],
    f"hot, --memory-limit {a.limit}": [
        nd, "hot", *tables, "-q", "--out", os.path.join(a.work, "lim.ndh"),
        "--memory-limit", a.limit, "--spill-dir", spill],
}
for name, cmd in hot_runs.items():
    results[name] = []
    for r in range(a.rounds):
        wall, rss = run(name, cmd)
        results[name].append((wall, rss))
        print(json.dumps({"run": name, "round": r, "wall_s": round(wall, 2),
                          "peak_rss_mb": round(rss)}), flush=True)
same_hot = filecmp.cmp(os.path.join(a.work, "mem.ndh"), os.path.join(a.work, "lim.ndh"),
                       shallow=False)
table_mb = sum(os.path.getsize(t) for t in tables) / 1e6

print(f"\n{a.docs:,} documents, {size_mb:.0f} MB JSONL in {len(inputs)} files; "
      f"key tables {table_mb:.0f} MB; limit {a.limit}")
print(f"{'run':<40} {'wall s (each round)':>22} {'peak RSS MB (max)':>18}")
for name, rs in results.items():
    walls = ", ".join(f"{w:.2f}" for w, _ in rs)
    print(f"{name:<40} {walls:>22} {max(m for _, m in rs):>18.0f}")
print(f"decisions byte-identical with and without the limit: {same}")
print(f"hot-key files byte-identical with and without the limit: {same_hot}")
sys.exit(0 if same and same_hot else 1)
