"""neardup.hojichar.NearDedup in real hojichar pipelines."""

from __future__ import annotations

import hojichar

import neardup
from conftest import sample_texts
from neardup.hojichar import NearDedup


def test_near_dedup_in_compose_rejects_what_the_index_drops():
    texts = sample_texts()
    compose = hojichar.Compose([hojichar.document_filters.DocumentNormalizer(), NearDedup(threshold=0.8)])
    docs = [compose.apply(hojichar.Document(t)) for t in texts]
    # The same decisions as an Index over the texts the filter saw.
    expected = neardup.Index(threshold=0.8).check_many([d.text for d in docs])
    assert [not d.is_rejected for d in docs] == [e.keep for e in expected]
    rejected = [d for d in docs if d.is_rejected]
    assert len(rejected) > 40
    for d, e in zip(docs, expected):
        assert d.extras["neardup"] == e.to_dict()
    assert all(d.extras["neardup"]["reason"] in ("near", "exact") for d in rejected)
    # hojichar's statistics count the filter's rejections, and name it as their reason.
    by_name = {s["name"]: s for s in compose.get_total_statistics_map()}
    assert by_name["1-NearDedup"]["discard_num"] == len(rejected)
    assert rejected[0].reject_reason["name"] == "1-NearDedup"


def test_batches_and_ids():
    texts = sample_texts()[:200]
    ids = [f"u{i}" for i in range(len(texts))]
    one = NearDedup(id_key="url")
    batched = NearDedup(id_key="url", use_batch=True, batch_size=32)
    docs_one = [one.apply(hojichar.Document(t, extras={"url": u})) for t, u in zip(texts, ids)]
    docs_batch = [hojichar.Document(t, extras={"url": u}) for t, u in zip(texts, ids)]
    for start in range(0, len(docs_batch), 32):
        batched.apply_batch(docs_batch[start : start + 32])
    assert [d.extras["neardup"] for d in docs_one] == [d.extras["neardup"] for d in docs_batch]
    dropped = [d for d in docs_one if d.is_rejected]
    assert dropped and all(d.extras["neardup"]["dup_of"].startswith("u") for d in dropped)
    # A document processed again (a retry) gets its first decision, not "exact copy of itself".
    again = one.apply(hojichar.Document(texts[0], extras={"url": "u0"}))
    assert (again.is_rejected, again.extras["neardup"]["reason"]) == (False, "unique")
    assert len(one.index) == len(texts)
    # Documents already rejected by an earlier filter are not checked (nor added).
    skipped = hojichar.Document("a text never seen before by this filter at all", is_rejected=True)
    one.apply_batch([skipped])
    assert "neardup" not in skipped.extras and len(one.index) == len(texts)


def test_near_dedup_shares_redis_state_between_pipelines(redis_url):
    """Two pipelines (two workers) with NearDedup on one Redis namespace: a document the second
    sees is rejected when the first already kept a near copy, as hojichar's RedisDeduplicator
    shares its keys, but by similarity."""
    texts = sample_texts()[:300]
    first = hojichar.Compose([NearDedup(store=redis_url, namespace="pipes", id_key="url")])
    second = hojichar.Compose([NearDedup(store=redis_url, namespace="pipes", id_key="url")])
    docs = []
    for i, t in enumerate(texts):
        pipeline = first if i % 2 == 0 else second
        docs.append(pipeline.apply(hojichar.Document(t, extras={"url": f"u{i}"})))
    expected = neardup.Index().check_many(texts, ids=[f"u{i}" for i in range(len(texts))])
    assert [d.extras["neardup"] for d in docs] == [e.to_dict() for e in expected]
    assert sum(d.is_rejected for d in docs) > 20


def test_a_file_store_is_saved_when_the_pipeline_shuts_down(tmp_path):
    """store=PATH: what the filter learned is saved back by hojichar's shutdown hook (the end of
    a `with Compose(...)` block), so the next pipeline over the file rejects copies of it."""
    texts = sample_texts()[:240]
    path = tmp_path / "seen.idx"
    with hojichar.Compose([NearDedup(store=path, id_key="url")]) as first:
        docs = [first.apply(hojichar.Document(t, extras={"url": f"u{i}"})) for i, t in enumerate(texts[:120])]
        assert len(neardup.Index(path)) == 0  # nothing is saved before the pipeline ends
    assert len(neardup.Index(path)) == 120
    expected = neardup.Index().check_many(texts, ids=[f"u{i}" for i in range(len(texts))])
    assert [d.extras["neardup"] for d in docs] == [e.to_dict() for e in expected[:120]]

    # A second pipeline (another process's, say) starts from the file: copies of what the first
    # kept are rejected, and its decisions are those of one index over all the texts.
    second = hojichar.Compose([NearDedup(store=str(path), id_key="url")])
    later = [second.apply(hojichar.Document(t, extras={"url": f"u{i}"})) for i, t in enumerate(texts) if i >= 120]
    assert [d.extras["neardup"] for d in later] == [e.to_dict() for e in expected[120:]]
    assert any(d.is_rejected and int(d.extras["neardup"]["dup_of"][1:]) < 120 for d in later)
    second.shutdown()
    assert len(neardup.Index(path)) == len(texts)

    # An explicit save writes elsewhere, at any time; memory and Redis stores save nothing at
    # shutdown (the first has nowhere to go, the second holds every decision already).
    in_memory = NearDedup()
    in_memory.apply(hojichar.Document(texts[0]))
    in_memory.shutdown()
    assert in_memory.save(tmp_path / "copy.idx") > 0 and len(neardup.Index(tmp_path / "copy.idx")) == 1
