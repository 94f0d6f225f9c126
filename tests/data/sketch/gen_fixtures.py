#!/usr/bin/env python3
"""Regenerates the neardup-sketch fixtures in this directory from the Python peers.

    /work/peers-venv/bin/python tests/data/sketch/gen_fixtures.py

- permutations.json: datasketch 1.9 MinHash(num_perm, seed).permutations for more seeds/widths.
- optimal_params.json: datasketch.lsh._optimal_param(t, n, 0.5, 0.5) (scipy quad).
- fast_golden.json: the fast MinHash scheme (v1) computed by an independent Python
  implementation (xxhash package), frozen as the on-disk format.
signatures.json is a copy of shared/compat/lshcurator/signatures.json.
"""
import json, os
import xxhash
from datasketch import MinHash
from datasketch.lsh import _optimal_param

HERE = os.path.dirname(os.path.abspath(__file__))

perms = []
for seed in (0, 1, 7, 36, 42, 12345):
    for width in (16, 128, 256):
        a, b = MinHash(num_perm=width, seed=seed).permutations
        perms.append({"seed": seed, "num_perm": width, "a": [int(x) for x in a], "b": [int(x) for x in b]})
json.dump({"about": "datasketch 1.9 MinHash(num_perm, seed).permutations", "cases": perms},
          open(os.path.join(HERE, "permutations.json"), "w"))

opt = []
for width in (16, 32, 64, 128, 256, 512):
    for i in range(10):
        t = round(0.5 + 0.05 * i, 2)
        b, r = _optimal_param(t, width, 0.5, 0.5)
        opt.append({"threshold": t, "num_perm": width, "bands": b, "rows": r})
json.dump({"about": "datasketch 1.9 lsh._optimal_param(threshold, num_perm, 0.5, 0.5)", "cases": opt},
          open(os.path.join(HERE, "optimal_params.json"), "w"), indent=0)

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1

def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)

def fast_params(num_perm, seed):
    st, a, s = seed, [], []
    for _ in range(num_perm):
        st, x = splitmix(st); a.append((x & M32) | 1)
        st, x = splitmix(st); s.append(x & M32)
    return a, s

def char_shingles(t, k, step):
    return [t[i:i + k].encode() for i in range(0, len(t) - k + 1, step)] if len(t) >= k else []

def fast_signature(text, k, step, num_perm, seed):
    a, s = fast_params(num_perm, seed)
    hs = [xxhash.xxh3_64_intdigest(x) for x in char_shingles(text, k, step)]
    sig = []
    for ai, si in zip(a, s):
        m = M32
        for h in hs:
            m = min(m, ((((h & M32) ^ si) * ai) & M32) ^ (h >> 32))
        sig.append(m)
    return sig

def fast_band_keys(sig, bands, rows):
    keys = []
    for band in range(bands):
        data = b"".join(v.to_bytes(4, "little") for v in sig[band * rows:(band + 1) * rows])
        k = xxhash.xxh3_64_intdigest(data, seed=band)
        keys.append(k if k != 0 else 1)
    return keys

TEXTS = ["hello world, this is a test", "hello world, this is a test!", "Ünïcödé 文字 テキスト 🙂 mixed text",
         "abcd", "", "The quick brown fox jumps over the lazy dog. " * 5]
golden = []
for num_perm, seed, bands, rows in ((16, 1, 4, 4), (130, 42, 16, 8)):
    for text in TEXTS:
        sig = fast_signature(text, 5, 1, num_perm, seed)
        golden.append({"text": text, "k": 5, "step": 1, "num_perm": num_perm, "seed": seed, "bands": bands,
                       "rows": rows, "signature": sig, "band_keys": fast_band_keys(sig, bands, rows)})
json.dump({"about": "fast MinHash scheme v1 (docs/formats.md), independent Python implementation", "cases": golden},
          open(os.path.join(HERE, "fast_golden.json"), "w"), indent=0)

# oph scheme v1 (docs/formats.md, crates/sketch/src/minhash.rs): one-permutation hashing with
# optimal densification, independently of the Rust code.
def oph_signature(text, k, step, num_perm, seed):
    st, xor = splitmix(seed)
    st, mul = splitmix(st); mul |= 1
    st, dens = splitmix(st)
    bins = [None] * num_perm
    for x in char_shingles(text, k, step):
        h = xxhash.xxh3_64_intdigest(x)
        z = ((h ^ xor) * mul) & M64
        z ^= z >> 32
        pos = ((z >> 32) * num_perm) >> 32
        v = z & M32
        if bins[pos] is None or v < bins[pos]:
            bins[pos] = v
    if all(b is None for b in bins):
        return [M32] * num_perm
    sig = []
    for i in range(num_perm):
        if bins[i] is not None:
            sig.append(bins[i]); continue
        for attempt in range(1, 64 * num_perm + 1):
            _, r = splitmix(dens ^ ((i << 32) | attempt))
            j = ((r >> 32) * num_perm) >> 32
            if bins[j] is not None:
                sig.append(bins[j]); break
        else:
            sig.append(next(bins[(i + d) % num_perm] for d in range(num_perm) if bins[(i + d) % num_perm] is not None))
    return sig

golden = []
for num_perm, seed, bands, rows in ((16, 1, 4, 4), (130, 42, 16, 8), (128, 1, 16, 8)):
    for text in TEXTS:
        sig = oph_signature(text, 5, 1, num_perm, seed)
        golden.append({"text": text, "k": 5, "step": 1, "num_perm": num_perm, "seed": seed, "bands": bands,
                       "rows": rows, "signature": sig, "band_keys": fast_band_keys(sig, bands, rows)})
json.dump({"about": "oph MinHash scheme v1 (docs/formats.md), independent Python implementation", "cases": golden},
          open(os.path.join(HERE, "oph_golden.json"), "w"), indent=0)
