"""A Python tokenizer is called once per distinct text in a run: stage 2 takes the tokens stage 1
made for the hot texts instead of calling it again."""

from __future__ import annotations

import json
import random

import neardup
from conftest import DATA, read_jsonl

CALLS = []


def counted_words(text: str) -> list:
    """Python's jieba, counting its calls."""
    import jieba

    jieba.setLogLevel(60)
    CALLS.append(text)
    return [w for w in jieba.lcut(text) if w.strip()]


def corpus(tmp_path):
    """Chinese documents of a few catalog sentences, a third of them with a near copy (one
    sentence replaced) and some exact copies."""
    sentences = [r["text"] for r in read_jsonl(DATA / "cjk" / "zh.jsonl")]
    rng = random.Random(5)
    docs = []
    for i in range(120):
        parts = rng.sample(sentences, rng.randint(5, 9))
        docs.append("".join(parts))
        if i % 3 == 0:
            parts[rng.randrange(len(parts))] = rng.choice(sentences)
            docs.append("".join(parts))
        if i % 10 == 0:
            docs.append(docs[-1])
    rng.shuffle(docs)
    path = tmp_path / "zh.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    return path, docs


def test_each_text_is_tokenized_once_per_run(tmp_path):
    path, docs = corpus(tmp_path)
    runs = []
    for threads in (1, 2):
        CALLS.clear()
        out = tmp_path / f"decisions-{threads}.jsonl"
        report = neardup.dedup(str(path), decisions=str(out), tokenizer=counted_words,
                               shingle=3, threads=threads, progress=False)
        assert report["stage1"]["hot_samples"] > len(docs) // 4
        assert report["totals"]["near"] > 0 and report["totals"]["exact"] > 0
        # One call to try the callable when the settings are read, then each distinct text once.
        assert len(CALLS) == 1 + len(set(docs)), (len(CALLS), len(set(docs)))
        runs.append([(d["keep"], d["reason"], d["dup_of_record"]) for d in read_jsonl(out)])
    assert runs[0] == runs[1]


def test_a_sketcher_keeps_no_tokens():
    _, docs = corpus_texts()
    sketcher = neardup.Sketcher(tokenizer=counted_words, shingle=3)
    CALLS.clear()
    first = sketcher.band_keys(docs[:50])
    second = sketcher.band_keys(docs[:50])
    assert (first == second).all()
    # Nothing is kept between calls: each call tokenizes its texts.
    assert len(CALLS) == 2 * len(set(docs[:50]))


def corpus_texts():
    sentences = [r["text"] for r in read_jsonl(DATA / "cjk" / "zh.jsonl")]
    return sentences, ["".join(sentences[i : i + 6]) for i in range(0, 300, 6)]
