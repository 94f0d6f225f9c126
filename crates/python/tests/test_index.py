"""neardup.Index, the online dedup index: decisions against the CLI's, ids, retries, queries."""

from __future__ import annotations

import json

import pytest

import neardup
from conftest import read_jsonl, sample_texts

# Settings of an Index and the flags of `neardup dedup` that say the same.
MODES = [
    ({}, []),
    ({"verify": "estimate", "max_reps": 2, "threshold": 0.7}, ["--verify", "estimate", "--max-reps", "2", "--threshold", "0.7"]),
]


def corpus() -> list:
    """The sample corpus's texts with the shapes a producer meets: copies, a null, empty texts."""
    texts = sample_texts()
    return texts[:200] + [None, "", "   "] + texts[200:] + texts[:20] + [texts[5] + " !"]


def index_id(i: int):
    """Ids of both kinds: 7 and "d7" name different documents."""
    return i if i % 2 == 0 else f"d{i}"


@pytest.mark.parametrize("settings,flags", MODES)
def test_check_decides_as_neardup_dedup(tmp_path, cli, settings, flags):
    """One producer's checks, in order, get exactly the decisions of `neardup dedup` over the same
    texts in the same order with the same verify mode."""
    texts = corpus()
    src = tmp_path / "in.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"r{i}", "text": text}) + "\n")
    cli("dedup", src, "-o", tmp_path / "out", "--decisions", tmp_path / "dec.jsonl", "--id-field", "id", *flags)
    expected = sorted(read_jsonl(tmp_path / "dec.jsonl"), key=lambda d: d["record"])
    assert len(expected) == len(texts)
    position = {index_id(i): i for i in range(len(texts))}

    one_by_one = neardup.Index(**settings)
    got = [one_by_one.check(t, id=index_id(i)) for i, t in enumerate(texts)]
    batched = neardup.Index(**settings)
    half = len(texts) // 2
    ids = [index_id(i) for i in range(len(texts))]
    got_many = batched.check_many(texts[:half], ids=ids[:half]) + batched.check_many(texts[half:], ids=ids[half:])
    assert got == got_many

    dropped = 0
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.id == index_id(i)
        assert (g.keep, g.reason) == (e["keep"], e["reason"]), (i, g, e)
        if e["reason"] in ("near", "exact"):
            dropped += 1
            assert position[g.dup_of] == int(e["dup_of_id"][1:]) == e["dup_of_record"], (i, g, e)
            assert g.similarity == pytest.approx(e["similarity"])
        else:
            assert g.dup_of is None and g.similarity is None
    assert dropped > 40
    assert len(one_by_one) == len(batched) == len(texts)


def test_ids_retries_and_bad_input():
    idx = neardup.Index()
    text = "the quick brown fox jumps over the lazy dog and keeps running far away " * 3
    first = idx.check(text, id=7)
    assert (first.id, first.keep, first.reason) == (7, True, "unique")
    # "7" is another document than 7: an exact copy of it.
    other = idx.check(text, id="7")
    assert (other.id, other.keep, other.reason, other.dup_of, other.similarity) == ("7", False, "exact", 7, 1.0)
    # A retry gets the first decision back and inserts nothing, even with another text.
    assert idx.check("something else entirely, never seen before in this index", id="7") == other
    assert idx.check(text, id=7) == first
    assert len(idx) == 2
    near = idx.check(text + " and more", id="near")
    assert (near.keep, near.reason, near.dup_of) == (False, "near", 7)
    assert 0.8 <= near.similarity < 1.0
    # Without an id, the next integer no document has.
    auto = idx.check_many(["a first unrelated text about rivers and boats on the sea", text])
    assert [d.id for d in auto] == [0, 1] and [d.reason for d in auto] == ["unique", "exact"]
    # An id twice in one batch is decided once.
    twice = idx.check_many([text, "zzz"], ids=["x", "x"])
    assert twice[0] == twice[1] and twice[0].reason == "exact"
    # Bad input gets the batch engine's treatment, never an exception.
    bad = idx.check_many([None, b"bytes", 3, "", "  "], ids=["n", "b", "i", "e", "w"])
    assert [(d.keep, d.reason) for d in bad] == [(True, "error")] * 3 + [(True, "empty")] * 2
    assert neardup.Index(empty="drop").check("").keep is False
    with pytest.raises(TypeError, match="an id must be a str or an int, not float"):
        idx.check(text, id=1.5)
    with pytest.raises(TypeError, match="not bool"):
        idx.check(text, id=True)
    with pytest.raises(ValueError, match="2 ids for 1 texts"):
        idx.check_many([text], ids=[1, 2])
    with pytest.raises(TypeError, match="not a setting of an in-memory deduper"):
        neardup.Index(fields=["a"])
    assert first.to_dict() == {"id": 7, "keep": True, "reason": "unique", "dup_of": None, "similarity": None}


def test_query_and_insert():
    texts = sample_texts()
    idx = neardup.Index()
    ids = idx.insert_many(texts[:300], ids=[f"h{i}" for i in range(300)])
    assert ids[0] == "h0" and len(idx) == 300
    # Inserted without deciding: a copy inside the collection was inserted too.
    assert idx.stats["checked"] == 0
    # A query finds what a check would name, and inserts nothing.
    dropped = 0
    for i in range(300, 500):
        found = idx.query(texts[i])
        assert len(idx) == 300 + i - 300
        d = idx.check(texts[i], id=f"c{i}")
        assert d.keep == (not found), (i, d, found)
        if not d.keep:
            dropped += 1
            assert (d.dup_of, d.similarity) in found
            assert all(sim >= 0.8 for _, sim in found)
    assert dropped > 10
    # An inserted text is found as itself, and a checked near copy of it is dropped in its favour.
    fresh = "a collection text about lighthouses, tides and the keepers who watched them " * 2
    idx.insert(fresh, id=-5)
    assert idx.query(fresh) == [(-5, 1.0)]
    assert idx.query("") == [] and idx.query("a text nobody has written before, about nothing") == []
    d = idx.check(fresh + " appended words", id="new")
    assert (d.keep, d.reason, d.dup_of) == (False, "near", -5)
    # Inserting an id again changes nothing.
    assert idx.insert("another text", id="h3") == "h3" and len(idx) == 502
    assert idx.query("another text") == []
    # The batch form answers each text as query does, against the index before the call.
    probe = [t + " more" for t in texts[280:340]] + [None, "", fresh]
    answers = idx.query_many(probe)
    assert answers == [idx.query(t) if isinstance(t, str) else [] for t in probe]
    assert len(idx) == 502 and sum(bool(a) for a in answers) > 10
