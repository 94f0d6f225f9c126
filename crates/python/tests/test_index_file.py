"""neardup.Index(store=PATH): the saved index shared by batch runs and the online index. A batch
run's --index-out opened as a store decides new documents as `neardup dedup --against` it does;
an index built online and saved serves `--against` with the online index's decisions; a retry
after reopening gets the first decision; a file of format 1 still works; what is not an index is
never written over."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import neardup
from conftest import DATA, REPO, read_jsonl, sample_texts

# Settings of an Index and the flags of `neardup dedup` that say the same.
MODES = [
    ({}, []),
    ({"verify": "estimate", "max_reps": 2, "threshold": 0.7}, ["--verify", "estimate", "--max-reps", "2", "--threshold", "0.7"]),
]


def write_jsonl(path: Path, texts: list, ids: list) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in zip(ids, texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")


def corpora() -> tuple:
    """An earlier corpus and a later one holding new texts, near and exact copies of earlier
    texts and of each other, a null and empty texts."""
    texts = sample_texts()
    earlier = texts[:220] + [None, ""] + texts[:10]
    later = texts[220:400] + [t + " and then some more words." for t in texts[:60:4]] + texts[30:40] + texts[230:240] + [None, "  "]
    return earlier, later


def batch_decisions(cli, tmp_path: Path, name: str, texts: list, ids: list, flags: list) -> list:
    src = tmp_path / f"{name}.jsonl"
    write_jsonl(src, texts, ids)
    dec = tmp_path / f"{name}-decisions.jsonl"
    cli("dedup", src, "-o", tmp_path / f"{name}-out", "--decisions", dec, "--id-field", "id", *flags)
    return sorted(read_jsonl(dec), key=lambda d: d["record"])


def assert_same(got: list, expected: list) -> int:
    """The online decisions equal a batch run's, record by record; returns the drops."""
    assert len(got) == len(expected)
    dropped = 0
    for g, e in zip(got, expected):
        assert (g.keep, g.reason) == (e["keep"], e["reason"]), (g, e)
        if e["reason"] in ("near", "exact"):
            dropped += 1
            assert str(g.dup_of) == e["dup_of_id"], (g, e)
            assert g.similarity == pytest.approx(e["similarity"])
        else:
            assert g.dup_of is None and g.similarity is None, (g, e)
    return dropped


@pytest.mark.parametrize("settings,flags", MODES)
def test_a_batch_index_opened_as_a_store_decides_as_against(tmp_path, cli, settings, flags):
    earlier, later = corpora()
    write_jsonl(tmp_path / "a.jsonl", earlier, [f"a{i}" for i in range(len(earlier))])
    cli("dedup", tmp_path / "a.jsonl", "-o", tmp_path / "a-out", "--id-field", "id", "--index-out", tmp_path / "a.idx", *flags)
    expected = batch_decisions(cli, tmp_path, "b", later, [f"b{i}" for i in range(len(later))], ["--against", tmp_path / "a.idx", *flags])

    before = (tmp_path / "a.idx").read_bytes()
    idx = neardup.Index(str(tmp_path / "a.idx"), **settings)
    got = idx.check_many(later[:100], ids=[f"b{i}" for i in range(100)]) + [idx.check(t, id=f"b{i}") for i, t in enumerate(later) if i >= 100]
    dropped = assert_same(got, expected)
    assert dropped > 30
    # Some of them duplicate the earlier run's documents, named by its ids.
    assert any(str(d.dup_of).startswith("a") for d in got)
    # Opening and checking write nothing until saved.
    assert (tmp_path / "a.idx").read_bytes() == before


@pytest.mark.parametrize("settings,flags", MODES)
def test_an_index_built_online_and_saved_serves_against(tmp_path, cli, settings, flags):
    earlier, later = corpora()
    path = tmp_path / "online.idx"
    idx = neardup.Index(path, **settings)
    assert path.exists() and len(idx) == 0
    # Ids of both kinds, and documents without one (numbered by the index).
    ids = [i if i % 3 == 0 else (f"o{i}" if i % 3 == 1 else None) for i in range(len(earlier))]
    idx.check_many(earlier, ids=ids)
    assert idx.save() > 0

    expected = batch_decisions(cli, tmp_path, "b", later, [f"b{i}" for i in range(len(later))], ["--against", path, *flags])
    got = idx.check_many(later, ids=[f"b{i}" for i in range(len(later))])
    assert assert_same(got, expected) > 30
    assert any(isinstance(d.dup_of, int) for d in got) and any(isinstance(d.dup_of, str) and d.dup_of.startswith("o") for d in got)
    # The batch run names the online documents as records of the index's online file.
    named = [e for e in expected if e["reason"] in ("near", "exact") and not e["dup_of_id"].startswith("b")]
    assert named and all(e["dup_of_file"] == "<online index>" for e in named)

    # A batch run against it that saves its own index: the online documents' sketches come
    # along, so the new index serves a third corpus as one over all of them.
    cli("dedup", tmp_path / "b.jsonl", "-o", tmp_path / "b2-out", "--id-field", "id", "--against", path, "--index-out", tmp_path / "ab.idx", *flags)
    third = [t + " Yet another closing sentence here." for t in sample_texts()[:80:2]] + sample_texts()[400:440]
    expected = batch_decisions(cli, tmp_path, "c", third, [f"c{i}" for i in range(len(third))], ["--against", tmp_path / "ab.idx", *flags])
    got = neardup.Index(tmp_path / "ab.idx", **settings).check_many(third, ids=[f"c{i}" for i in range(len(third))])
    assert assert_same(got, expected) > 10


@pytest.mark.parametrize("settings,flags", MODES)
def test_checks_over_reopened_sessions_decide_as_neardup_dedup(tmp_path, cli, settings, flags):
    """One producer's checks, split over three sessions of a file store (each reopening the
    file the last saved), get exactly `neardup dedup`'s decisions over the same texts."""
    earlier, later = corpora()
    texts = earlier + later
    ids = [f"r{i}" for i in range(len(texts))]
    expected = batch_decisions(cli, tmp_path, "all", texts, ids, flags)
    path = tmp_path / "sessions.idx"
    got = []
    for start, end in [(0, 100), (100, 300), (300, len(texts))]:
        idx = neardup.Index(path, **settings)
        assert len(idx) == start
        got += idx.check_many(texts[start:end], ids=ids[start:end])
        idx.save()
    assert assert_same(got, expected) > 40


def test_a_retry_after_reopening_gets_the_first_decision(tmp_path):
    texts = sample_texts()[:120]
    path = tmp_path / "retry.idx"
    idx = neardup.Index(path)
    first = idx.check_many(texts, ids=list(range(60)) + [f"s{i}" for i in range(60, 120)])
    auto = idx.check("a document without an id, about lighthouses and the sea at night")
    inserted = idx.insert("an inserted document about rivers, bridges and long summer evenings", id="ins")
    idx.save()
    size = path.stat().st_size

    again = neardup.Index(path)
    assert len(again) == 122
    retried = again.check_many(texts[::-1], ids=(list(range(60)) + [f"s{i}" for i in range(60, 120)])[::-1])
    assert retried == first[::-1]
    assert again.check("anything else", id=auto.id) == auto
    assert again.check("anything", id=inserted).reason == "unique"
    assert len(again) == 122
    # The next document without an id gets an integer no document has.
    fresh = again.check("one more document without an id, about mountains and snow")
    assert isinstance(fresh.id, int) and fresh.id not in range(60) and fresh.id != auto.id
    assert again.query("an inserted document about rivers, bridges and long summer evenings") == [("ins", 1.0)]
    # Nothing was saved: the file is as it was.
    assert path.stat().st_size == size


def test_other_settings_and_other_files_are_refused(tmp_path):
    path = tmp_path / "settings.idx"
    neardup.Index(path, threshold=0.8).check("a text long enough to have shingles and keys, surely")
    with pytest.raises(ValueError, match=r"threshold: 0\.8 vs 0\.7"):
        neardup.Index(path, threshold=0.7)
    with pytest.raises(ValueError, match=r"verify: exact vs estimate"):
        neardup.Index(path, verify="estimate")
    with pytest.raises(ValueError, match=r"empty: keep vs drop"):
        neardup.Index(path, empty="drop")
    with pytest.raises(ValueError, match="namespace"):
        neardup.Index(path, namespace="x")

    # Not an index: never read as one, never written over.
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    with pytest.raises(ValueError, match="not a neardup index"):
        neardup.Index(other)
    idx = neardup.Index()
    idx.check("a text long enough to have shingles and keys, surely")
    with pytest.raises(OSError, match="not a neardup index"):
        idx.save(other)
    assert other.read_text() == "my notes\n"
    with pytest.raises(OSError, match="a directory") as e:
        idx.save(tmp_path)
    # The message holds its causes' messages: none comes again as __cause__.
    assert e.value.__cause__ is None
    link = tmp_path / "link.idx"
    link.symlink_to(path)
    with pytest.raises(OSError, match="a symbolic link"):
        idx.save(link)
    with pytest.raises(ValueError, match="give the path"):
        idx.save()
    # An index is saved over an index.
    assert idx.save(path) > 0
    assert len(neardup.Index(path)) == 1
    assert not [p for p in tmp_path.iterdir() if ".neardup-" in p.name]
    # A damaged index is named with what is wrong with it, once.
    cut = tmp_path / "cut.idx"
    cut.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(neardup.CorruptFileError) as e:
        neardup.Index(cut)
    assert str(e.value).startswith(f"cannot open the index {cut}: "), str(e.value)
    assert str(e.value).count(str(cut)) <= 2, str(e.value)
    assert e.value.__cause__ is None


@pytest.mark.parametrize("verify", ["estimate", "exact"])
def test_an_index_of_format_1_still_opens(tmp_path, cli, verify, monkeypatch):
    """An index an earlier neardup wrote (format 1: its ids are strings, it holds no online
    decisions, and under exact verification no shingle sets: those are read back from its files
    once) decides as `--against` it does."""
    # The fixtures name their input relative to the repository's root, where they were made.
    monkeypatch.chdir(REPO)
    v1 = DATA / "index-v1"
    path = tmp_path / f"a-{verify}.idx"
    shutil.copy(v1 / f"a-{verify}.idx", path)
    assert path.read_bytes()[:8] == b"NDINDEX1" and b'"format":1' in path.read_bytes()[:200]
    later = read_jsonl(v1 / "b.jsonl")
    texts, ids = [r["text"] for r in later], [r["id"] for r in later]
    dec = tmp_path / "dec.jsonl"
    cli("dedup", v1 / "b.jsonl", "-o", tmp_path / "out", "--decisions", dec, "--id-field", "id", "--verify", verify, "--against", path)
    expected = sorted(read_jsonl(dec), key=lambda d: d["record"])
    got = neardup.Index(path, verify=verify).check_many(texts, ids=ids)
    assert assert_same(got, expected) > 10
    # The same run against an index of format 2 made now from the same records decides alike.
    cli("dedup", v1 / "a.jsonl", "--id-field", "id", "--verify", verify, "--decisions", tmp_path / "a-dec.jsonl", "--index-out", tmp_path / "v2.idx")
    assert b'"format":2' in (tmp_path / "v2.idx").read_bytes()[:200]
    cli("dedup", v1 / "b.jsonl", "-o", tmp_path / "out2", "--decisions", tmp_path / "dec2.jsonl", "--id-field", "id", "--verify", verify, "--against", tmp_path / "v2.idx")
    # (The indexes name a.jsonl as they were given it: relative and absolute.)
    fields = ("record", "keep", "reason", "dup_of_id", "dup_of_record", "similarity")
    def strip(rows):
        return [{k: r.get(k) for k in fields} for r in sorted(rows, key=lambda d: d["record"])]
    assert strip(read_jsonl(tmp_path / "dec2.jsonl")) == strip(read_jsonl(dec))
