"""neardup.Index in a real Redis server (the `redis_url` fixture starts one on a free loopback
port): the in-memory decisions for one producer, several producer processes sharing one
namespace, settings refused, an unreachable server named."""

from __future__ import annotations

import multiprocessing

import pytest

import neardup
from conftest import sample_texts

SETTINGS = {"threshold": 0.8, "max_reps": None}


def corpus() -> list:
    texts = sample_texts()
    return texts[:200] + [None, "", "   "] + texts[200:] + texts[:20] + [texts[5] + " !"]


def test_one_producer_gets_the_in_memory_decisions(redis_url):
    texts = corpus()
    ids = [i if i % 2 else f"d{i}" for i in range(len(texts))]
    memory = neardup.Index(**SETTINGS)
    shared = neardup.Index(redis_url, namespace="one", **SETTINGS)
    assert shared.namespace == "one"
    half = len(texts) // 2
    expected = memory.check_many(texts[:half], ids=ids[:half]) + [memory.check(t, id=i) for t, i in zip(texts[half:], ids[half:])]
    got = shared.check_many(texts[:half], ids=ids[:half]) + [shared.check(t, id=i) for t, i in zip(texts[half:], ids[half:])]
    assert got == expected
    assert sum(not d.keep for d in got) > 40
    # A retry against the server gets the first decisions back.
    assert shared.check_many(texts[:50], ids=ids[:50]) == expected[:50]
    # Another producer opening the namespace sees everything, and queries find what checks name.
    other = neardup.Index(redis_url, namespace="one", **SETTINGS)
    assert len(other) == len(memory) == len(texts)
    probe = [t + " more" for t in sample_texts()[:60:3]]
    for t in probe:
        assert other.query(t) == memory.query(t)
    assert other.query_many(probe) == memory.query_many(probe) and any(memory.query_many(probe))
    assert other.insert("a text about lanterns and the sea, inserted without a decision", id="ins") == "ins"
    assert other.query("a text about lanterns and the sea, inserted without a decision") == [("ins", 1.0)]
    stats = other.stats
    assert stats["ids"] == len(texts) + 1 and stats["decisions"]["inserted"] == 1
    assert stats["memory_bytes"] > 0 and stats["representatives"] > 0


def producer(url: str, texts: list, ids: list) -> None:
    idx = neardup.Index(url, namespace="crowd", **SETTINGS)
    for start in range(0, len(texts), 16):
        idx.check_many(texts[start : start + 16], ids=ids[start : start + 16])


def test_producer_processes_share_one_namespace(redis_url):
    texts = sample_texts()
    ids = [f"t{i}" for i in range(len(texts))]
    # Three producers; the third retries the first one's documents, in reverse.
    shares = [list(range(0, len(texts), 2)), list(range(1, len(texts), 2)), list(range(0, len(texts), 2))[::-1]]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=producer, args=(redis_url, [texts[i] for i in s], [ids[i] for i in s])) for s in shares]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    idx = neardup.Index(redis_url, namespace="crowd", **SETTINGS)
    assert len(idx) == len(texts)
    decisions = idx.check_many(texts, ids=ids)  # all retries: each gets its one decision
    assert len(idx) == len(texts)
    by_id = {d.id: d for d in decisions}
    kept = [t for t, d in zip(texts, decisions) if d.keep]
    # No two kept documents are near duplicates (an index of the kept texts alone keeps them all).
    assert all(d.keep for d in neardup.Index(**SETTINGS).check_many(kept))
    dropped = [d for d in decisions if not d.keep]
    assert len(dropped) > 40
    for d in dropped:
        assert by_id[d.dup_of].keep or d.reason == "exact"
        assert d.similarity >= 0.8


def test_settings_and_servers_refused_with_a_reason(redis_url):
    neardup.Index(redis_url, namespace="made", threshold=0.8)
    with pytest.raises(ValueError, match=r'namespace "made" .* threshold: 0.8 vs 0.7'):
        neardup.Index(redis_url, namespace="made", threshold=0.7)
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    dead = f"redis://127.0.0.1:{port + 1 if port < 65535 else port - 1}/0"
    with pytest.raises(ConnectionError, match=f"cannot reach the Redis server at {dead}"):
        neardup.Index(dead, namespace="x")
    # Neither a Redis URL nor a local path (the file store is test_index_file.py's).
    with pytest.raises(ValueError, match="the path of a local index file"):
        neardup.Index("http://127.0.0.1/index")
