"""Low level: Sketcher (signatures, band keys) and the in-memory Deduper."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import neardup
from conftest import DATA, SAMPLE, sample_texts

SETTINGS = [
    {},
    {"hash": "fast", "threshold": 0.7, "lowercase": True, "shingle": 3, "threads": 1},
    {"hash": "datasketch", "seed": 36, "bands": 8, "rows": 4, "tokenize": "byte", "step": 2},
    {"tokenize": "word", "shingle": 2, "short_texts": "empty_signature", "num_perm": 64},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_band_keys_are_the_key_tables_band_columns(settings):
    table = neardup.compute_keys(SAMPLE, **settings)
    sketcher = neardup.Sketcher(**settings)
    texts = sample_texts()
    keys = sketcher.band_keys(texts)
    assert keys.dtype == np.uint64 and keys.shape == (len(texts), sketcher.bands)
    assert np.array_equal(keys, table.keys[:, : table.bands])
    # The same texts as Arrow arrays, read in place.
    assert np.array_equal(sketcher.band_keys(pa.array(texts)), keys)
    assert np.array_equal(sketcher.band_keys(pa.array(texts, pa.large_string())), keys)
    chunked = pa.chunked_array([texts[:123], texts[123:400], texts[400:]])
    assert np.array_equal(sketcher.band_keys(chunked), keys)


def test_blank_and_short_texts():
    sketcher = neardup.Sketcher()
    keys = sketcher.band_keys(["", "   \n", "abc", None and "x" or "a" * 40])
    assert not keys[:3].any()
    assert keys[3].all()
    with_short = neardup.Sketcher(short_texts="empty_signature").band_keys(["abc", "xy"])
    assert with_short.all() and np.array_equal(with_short[0], with_short[1])
    assert np.array_equal(sketcher.band_keys(pa.array(["", None])), np.zeros((2, 20), np.uint64))
    assert sketcher.band_keys([]).shape == (0, 20)
    assert sketcher.signatures([]).shape == (0, 128)


def test_signatures_and_band_keys_are_datasketchs_and_lshcurators():
    """With hash="datasketch" and band_keys="lshcurator", signatures and band keys equal the
    fixture that datasketch 1.9 and lshcurator 0.2.3 made."""
    fixture = json.loads((DATA / "sketch" / "signatures.json").read_text())
    checked = 0
    for case in fixture["cases"]:
        for doc in case["docs"]:
            sketcher = neardup.Sketcher(
                hash="datasketch",
                band_keys="lshcurator",
                num_perm=case["num_perm"],
                seed=case["seed"],
                bands=case["bands"],
                rows=case["rows"],
                shingle=doc["shingle_k"],
                step=doc["step"],
                tokenize=doc["mode"],
                trim=False,
                short_texts="empty_signature",
            )
            sig = sketcher.signatures([doc["text"]])
            assert sig.dtype == np.uint32 and sig.shape == (1, case["num_perm"])
            assert sig[0].tolist() == doc["signature"], doc["text"]
            if doc["text"].strip():
                keys = sketcher.band_keys([doc["text"]])
                assert keys[0].tolist() == doc["band_keys"], doc["text"]
            checked += 1
    assert checked > 20


def test_texts_must_be_strings():
    sketcher = neardup.Sketcher()
    with pytest.raises(TypeError, match=r"texts\[1\] is a int, not a str"):
        sketcher.band_keys(["a", 3])
    with pytest.raises(TypeError, match="not one str"):
        sketcher.band_keys("a text")
    with pytest.raises(TypeError, match="holds Int64"):
        sketcher.band_keys(pa.array([1, 2]))
    with pytest.raises(TypeError, match="not a sketch setting"):
        neardup.Sketcher(max_reps=3)


def test_sketcher_settings():
    s = neardup.Sketcher(threshold=0.7)
    assert (s.bands, s.rows, s.num_perm) == (25, 5, 128)
    assert s.settings["bands"] == 25 and s.settings["hash"] == "oph"
    assert "bands=25" in repr(s)
    # Bands and rows follow verify, as a run's do.
    estimate = neardup.Sketcher(threshold=0.7, verify="estimate")
    assert (estimate.bands, estimate.rows) == (21, 6)


@pytest.mark.parametrize("settings", [{}, {"verify": "estimate", "max_reps": 2, "threshold": 0.7}])
def test_deduper_decides_as_a_run(settings):
    """Texts given one by one get the decisions of a run over the same texts."""
    texts = sample_texts()
    decisions = list(neardup.stream(SAMPLE, **settings))
    index = {(d.file, d.record): i for i, d in enumerate(decisions)}
    deduper = neardup.Deduper(**settings)
    for text, expected in zip(texts, decisions):
        got = deduper.decide(text)
        assert (got.keep, got.reason) == (expected.keep, expected.reason)
        if not expected.keep:
            assert got.dup_of_record == index[(expected.dup_of_file, expected.dup_of_record)]
            assert got.similarity == pytest.approx(expected.similarity)
        assert got.cluster_record == index[(expected.cluster_file, expected.cluster_record)]
    assert deduper.seen == len(texts) == 500
    stats = deduper.stats
    assert stats["near"] + stats["exact"] == sum(not d.keep for d in decisions)
    # Restricted to the run's hot keys, it decides the same.
    hot = neardup.hot_keys([neardup.compute_keys(SAMPLE, **settings)])
    restricted = neardup.Deduper(hot_keys=hot, **settings)
    assert [restricted(t) for t in texts] == [d.keep for d in decisions]
    assert restricted.num_bucket_keys == len(hot)


def test_deduper_basics():
    d = neardup.Deduper()
    text = "the quick brown fox jumps over the lazy dog " * 3
    assert d(text) is True
    copy = d.decide(text)
    assert (copy.keep, copy.reason, copy.dup_of_record, copy.similarity) == (False, "exact", 0, 1.0)
    near = d.decide(text + "!")
    assert (near.keep, near.reason, near.dup_of_record) == (False, "near", 0)
    assert near.file is None and near.record == 2
    # A copy of the near duplicate names it as dup_of, and the kept text as its cluster.
    copy_of_near = d.decide(text + "!")
    assert (copy_of_near.reason, copy_of_near.dup_of_record, copy_of_near.cluster_record) == ("exact", 2, 0)
    assert copy_of_near.to_dict()["cluster_record"] == 0 and d.decide("other text").cluster_record == 4
    empty = d.decide("  ")
    assert (empty.keep, empty.reason) == (True, "empty")
    assert neardup.Deduper(empty="drop").decide("").keep is False
    with pytest.raises(TypeError, match="a text must be a str"):
        d(b"bytes")
    with pytest.raises(ValueError, match="different settings"):
        neardup.Deduper(hot_keys=neardup.hot_keys([neardup.compute_keys(SAMPLE)]), threshold=0.5)
    for name in ["fields", "threads", "overwrite"]:
        with pytest.raises(TypeError, match=f"{name} is not taken here: not a setting of an in-memory deduper"):
            neardup.Deduper(**{name: None})
