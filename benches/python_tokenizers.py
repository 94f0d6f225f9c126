#!/usr/bin/env python3
"""A Python tokenizer in a whole run: documents per second of ``neardup.dedup`` with character
5-grams, with a native segmenter and with a Python tokenizer (hojichar's
``japanese_word_splitter``: fugashi over MeCab with unidic-lite, or Python's jieba), against the
tokenizer's own time over the corpus (the floor: Python runs one call at a time) and against
hojichar's ``GenerateDedupLSH`` + ``InlineDeduplicator`` with the same tokenizer; and each run's
precision and recall against exact Jaccard over the same shingle sets (every pair, no LSH; the
ideal keep set is greedy first-seen at the threshold).

Each round runs every variant once, in turn, so that a slow minute of the machine hits all of
them; the median of the rounds is reported. The corpus is what benches/build_gettext_corpus.py
makes.

Needs ``pip install neardup 'hojichar[dedup]' fugashi unidic-lite jieba``.

    python benches/build_gettext_corpus.py /tmp/ja
    python benches/python_tokenizers.py /tmp/ja/jsonl --rounds 3            # Japanese, fugashi
    python benches/python_tokenizers.py /tmp/zh/jsonl --language zh         # Chinese, jieba
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Set


def ngram_sets(token_lists: Sequence[Sequence[str]], n: int) -> List[Set[str]]:
    """hojichar's shingles: windows of n tokens joined by one space (a shorter text: all its
    tokens as one shingle, as neardup shingles it)."""
    sets = []
    for tokens in token_lists:
        if len(tokens) < n:
            sets.append({" ".join(tokens)} if tokens else set())
        else:
            sets.append({" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)})
    return sets


def exact_pairs(sets: List[Set[str]], low: float) -> Dict[int, List[tuple]]:
    """For each sample y, the earlier samples x with Jaccard(x, y) >= low: all pairs, exactly,
    with prefix and length filtering (as ../shared/bench/exact_pairs.py finds them)."""
    freq: Dict[str, int] = defaultdict(int)
    for s in sets:
        for g in s:
            freq[g] += 1
    order = {g: i for i, g in enumerate(sorted(freq, key=lambda g: (freq[g], g)))}
    ids = [sorted(order[g] for g in s) for s in sets]
    index: Dict[int, List[int]] = defaultdict(list)
    earlier: Dict[int, List[tuple]] = defaultdict(list)
    for x in sorted(range(len(sets)), key=lambda i: (len(ids[i]), i)):
        xs = ids[x]
        if not xs:
            continue
        prefix = len(xs) - math.ceil(low * len(xs)) + 1
        candidates = {y for tok in xs[:prefix] for y in index[tok]}
        for y in candidates:
            if len(ids[y]) < low * len(xs):
                continue
            inter = len(sets[x] & sets[y])
            j = inter / (len(xs) + len(ids[y]) - inter)
            if j >= low:
                a, b = min(x, y), max(x, y)
                earlier[b].append((a, j))
        for tok in xs[:prefix]:
            index[tok].append(x)
    return earlier


def ideal_keep(n: int, earlier: Dict[int, List[tuple]], threshold: float) -> List[bool]:
    keep = [True] * n
    for y in range(n):
        if any(keep[x] and j >= threshold for x, j in earlier.get(y, ())):
            keep[y] = False
    return keep


def score(keep: Sequence[bool], ideal: Sequence[bool]) -> str:
    drop = {i for i, k in enumerate(keep) if not k}
    idrop = {i for i, k in enumerate(ideal) if not k}
    tp = len(drop & idrop)
    p = tp / len(drop) if drop else 1.0
    r = tp / len(idrop) if idrop else 1.0
    return f"{p:.4f} / {r:.4f} ({len(drop)} dropped, ideal {len(idrop)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path, help="a directory of JSONL files with a text field")
    ap.add_argument("--language", choices=["ja", "zh"], default="ja")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shingle", type=int, default=5, help="tokens per shingle (hojichar's n_grams)")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--no-hojichar", action="store_true")
    ap.add_argument("--no-truth", action="store_true")
    args = ap.parse_args()

    import neardup

    files = sorted(str(f) for f in args.corpus.glob("*.jsonl"))
    texts: List[str] = []
    for f in files:
        with open(f, encoding="utf-8") as src:
            texts.extend(json.loads(line)["text"] for line in src)
    n = len(texts)
    chars = sum(map(len, texts))

    if args.language == "ja":
        from hojichar.filters.deduplication import japanese_word_splitter as tokenizer

        native = None
    else:
        import jieba

        jieba.setLogLevel(60)

        def tokenizer(text: str) -> List[str]:
            """Python's jieba, whitespace tokens left out (as the native jieba leaves them)."""
            return [w for w in jieba.lcut(text) if w.strip()]

        native = "jieba"
    tokenizer(texts[0])  # loads the analyser's dictionary before anything is timed

    tmp = Path(tempfile.mkdtemp(prefix="neardup-tokenizers-"))
    common = {"threshold": args.threshold, "progress": False}

    def neardup_run(name: str, **settings) -> Callable[[], List[bool]]:
        out = tmp / f"{name}.jsonl"

        def run() -> List[bool]:
            if out.exists():
                out.unlink()
            neardup.dedup(files, decisions=str(out), **common, **settings)
            with open(out, encoding="utf-8") as f:
                return [json.loads(line)["keep"] for line in f]

        return run

    def tokenizer_alone() -> None:
        for t in texts:
            tokenizer(t)

    def hojichar_run() -> List[bool]:
        from hojichar import Compose, Document
        from hojichar.filters.deduplication import GenerateDedupLSH, InlineDeduplicator

        pipeline = Compose([
            GenerateDedupLSH(tokenizer=tokenizer, n_grams=args.shingle,
                             threshold=args.threshold),
            InlineDeduplicator(),
        ])
        return [not pipeline.apply(Document(t)).is_rejected for t in texts]

    word = f"{args.language} words"
    variants: Dict[str, Callable] = {
        "tokenizer alone (the floor)": tokenizer_alone,
        "neardup, char 5-grams": neardup_run("char", shingle=5),
        f"neardup, Python tokenizer, {word} {args.shingle}-grams": neardup_run(
            "python", tokenizer=tokenizer, tokenizer_name=f"bench-{args.language}",
            shingle=args.shingle),
    }
    if native:
        variants[f"neardup, native {native}, {word} {args.shingle}-grams"] = neardup_run(
            "native", tokenizer=native, shingle=args.shingle)
    if not args.no_hojichar:
        variants[f"hojichar GenerateDedupLSH + InlineDeduplicator, {word}"] = hojichar_run

    times: Dict[str, List[float]] = {name: [] for name in variants}
    keeps: Dict[str, List[bool]] = {}
    for _ in range(args.rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            result = run()
            times[name].append(time.perf_counter() - start)
            print(f"{name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
            if result is not None:
                keeps[name] = result

    truth = {}
    if not args.no_truth:
        tokens = [tokenizer(t) for t in texts]
        truth["word"] = ideal_keep(n, exact_pairs(ngram_sets(tokens, args.shingle), 0.5),
                                   args.threshold)
        truth["char"] = ideal_keep(n, exact_pairs(ngram_sets([list(t) for t in texts], 5), 0.5),
                                   args.threshold)

    floor = statistics.median(times["tokenizer alone (the floor)"])
    print(f"{n} documents, {chars:,} characters; threshold {args.threshold}; median of "
          f"{args.rounds} rounds; {os.cpu_count()} cores")
    print("| run | s | documents/s | vs tokenizer alone | precision / recall |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, t in times.items():
        m = statistics.median(t)
        pr = ""
        if name in keeps and truth:
            pr = score(keeps[name], truth["char" if "char 5-grams" in name else "word"])
        print(f"| {name} | {m:.2f} | {n / m:,.0f} | {m / floor:.2f}x | {pr} |")
    print(json.dumps(times))


if __name__ == "__main__":
    main()
