#!/usr/bin/env python3
"""Builds a corpus where few samples are hot (for stage 2's cost when almost nothing is a
near-copy): N texts of random words drawn from the rustdocs vocabulary (so real word lengths and
characters), of which a share DUP are near-copies of an earlier text (one word in 50 changed).

    python3 benches/few_hot.py OUT_DIR [--docs 50000] [--dup 0.02] [--files 4] [--seed 1]

Vocabulary: the words of the first rustdocs shard when present (NEARDUP_BENCH_CORPUS or
../corpora/rustdocs/jsonl/part-00000.jsonl), else a generated one.
"""
import argparse
import json
import os
import random
import re

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--docs", type=int, default=50000)
p.add_argument("--dup", type=float, default=0.02)
p.add_argument("--files", type=int, default=4)
p.add_argument("--seed", type=int, default=1)
a = p.parse_args()
rng = random.Random(a.seed)

src = os.environ.get("NEARDUP_BENCH_CORPUS") or os.path.join(
    os.path.dirname(__file__), "..", "..", "corpora", "rustdocs", "jsonl", "part-00000.jsonl")
words = []
if os.path.exists(src):
    with open(src, encoding="utf-8") as f:
        for i, line in enumerate(f):
            words.extend(re.findall(r"\w+", json.loads(line)["text"]))
            if i >= 3000:
                break
if not words:
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(50000)]

os.makedirs(a.out, exist_ok=True)
outs = [open(os.path.join(a.out, f"part-{i}.jsonl"), "w", encoding="utf-8") for i in range(a.files)]
made = []
for n in range(a.docs):
    if made and rng.random() < a.dup:
        toks = list(rng.choice(made))
        for _ in range(max(1, len(toks) // 50)):
            toks[rng.randrange(len(toks))] = rng.choice(words)
    else:
        toks = rng.choices(words, k=rng.randint(200, 800))
        if len(made) < 5000:
            made.append(toks)
        else:
            made[rng.randrange(5000)] = toks
    outs[n * a.files // a.docs].write(json.dumps({"id": n, "text": " ".join(toks)}) + "\n")
for f in outs:
    f.close()
