"""`neardup index push/pull/stats` with a real redis-server (the `redis_url` fixture): an index
moved to Redis and back decides as the file did, in the file store and in Redis; a pulled index
pushed and pulled again is the same bytes; refusals name what is wrong and write nothing."""

from __future__ import annotations

import json
import socket

import pytest

import neardup
from conftest import sample_texts

MODES = [{}, {"verify": "estimate", "max_reps": 2, "threshold": 0.7}]


def corpora() -> tuple:
    texts = sample_texts()
    earlier = texts[:220] + [None, ""] + texts[:10]
    later = texts[220:360] + [t + " and then some more words." for t in texts[:60:4]] + texts[30:40] + ["  "]
    return earlier, later


def online_file(path, settings) -> None:
    earlier, _ = corpora()
    idx = neardup.Index(path, **settings)
    idx.check_many(earlier, ids=[i if i % 2 else f"e{i}" for i in range(len(earlier))])
    idx.insert("an inserted text about harbours, ships and the long grey winter sea", id="ins")
    idx.save()


@pytest.mark.parametrize("settings", MODES)
def test_push_then_pull_decides_as_the_file(tmp_path, cli, redis_url, settings):
    a = tmp_path / "a.idx"
    online_file(a, settings)
    pushed = cli("index", "push", a, redis_url, "--namespace", "crawl")
    assert pushed.returncode == 0
    cli("index", "pull", redis_url, "--namespace", "crawl", "-o", tmp_path / "b.idx")

    _, later = corpora()
    ids = [f"l{i}" for i in range(len(later))]
    expected = neardup.Index(a, **settings).check_many(later, ids=ids)
    assert sum(not d.keep for d in expected) > 20
    assert neardup.Index(tmp_path / "b.idx", **settings).check_many(later, ids=ids) == expected
    shared = neardup.Index(redis_url, namespace="crawl", **settings)
    assert len(shared) == len(neardup.Index(a, **settings))
    # Retries of the file's ids get their first decisions from the server.
    assert shared.check("anything", id="ins").reason == "unique"
    assert shared.check_many(later, ids=ids) == expected

    # A pulled index pushed and pulled again is the same bytes.
    cli("index", "push", tmp_path / "b.idx", redis_url, "--namespace", "again")
    cli("index", "pull", redis_url, "--namespace", "again", "-o", tmp_path / "c.idx")
    assert (tmp_path / "c.idx").read_bytes() == (tmp_path / "b.idx").read_bytes()

    stats = json.loads(cli("index", "stats", tmp_path / "b.idx").stdout)
    assert stats["store"] == "file" and stats["documents"] == stats["ids"] == len(neardup.Index(a, **settings))
    assert stats["representatives"] > 0 and stats["buckets"] > 0 and stats["bytes"] == (tmp_path / "b.idx").stat().st_size
    assert stats["settings"]["threshold"] == settings.get("threshold", 0.8)
    remote = json.loads(cli("index", "stats", redis_url, "--namespace", "again").stdout)
    assert remote["store"] == "redis" and remote["documents"] == stats["documents"]
    assert remote["kept"] == stats["kept"] == stats["ids"] - stats["decisions"].get("near", 0) - stats["decisions"].get("exact", 0)
    assert remote["representatives"] == stats["representatives"] and remote["bytes"] > 0


def test_save_of_a_redis_index_is_a_pull(tmp_path, cli, redis_url):
    earlier, later = corpora()
    shared = neardup.Index(redis_url, namespace="live")
    shared.check_many(earlier, ids=[i if i % 2 else f"e{i}" for i in range(len(earlier))])
    shared.insert("an inserted text about harbours, ships and the long grey winter sea", id="ins")
    written = shared.save(tmp_path / "saved.idx")
    cli("index", "pull", redis_url, "--namespace", "live", "-o", tmp_path / "pulled.idx")
    assert (tmp_path / "saved.idx").read_bytes() == (tmp_path / "pulled.idx").read_bytes()
    assert written == (tmp_path / "saved.idx").stat().st_size
    # The saved file decides later documents as the namespace does.
    ids = [f"l{i}" for i in range(len(later))]
    from_file = neardup.Index(tmp_path / "saved.idx").check_many(later, ids=ids)
    assert sum(not d.keep for d in from_file) > 20
    assert shared.check_many(later, ids=ids) == from_file

    # As every save: never over anything but an index, and a path is needed.
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    with pytest.raises(OSError, match="not a neardup index"):
        shared.save(notes)
    assert notes.read_text() == "keep me\n"
    with pytest.raises(ValueError, match="give the path"):
        shared.save()


def test_a_batch_index_is_pushed_and_decides_in_redis(tmp_path, cli, redis_url):
    earlier, later = corpora()
    src = tmp_path / "a.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for i, t in enumerate(earlier):
            f.write(json.dumps({"id": f"a{i}", "text": t}) + "\n")
    flags = ["--verify", "estimate"]
    cli("dedup", src, "-o", tmp_path / "out", "--id-field", "id", "--index-out", tmp_path / "a.idx", *flags)
    cli("index", "push", tmp_path / "a.idx", redis_url, "--namespace", "batch")
    ids = [f"l{i}" for i in range(len(later))]
    expected = neardup.Index(tmp_path / "a.idx", verify="estimate").check_many(later, ids=ids)
    got = neardup.Index(redis_url, namespace="batch", verify="estimate").check_many(later, ids=ids)
    assert got == expected and any(str(d.dup_of).startswith("a") for d in got)

    # Under exact verification a batch run's index stores no shingle sets: refused, saying how.
    cli("dedup", src, "-o", tmp_path / "out2", "--id-field", "id", "--index-out", tmp_path / "exact.idx")
    refused = cli("index", "push", tmp_path / "exact.idx", redis_url, "--namespace", "exact", check=False)
    assert refused.returncode == 2 and "shingle sets" in refused.stderr and "save it" in refused.stderr


def test_refusals_name_what_is_wrong(tmp_path, cli, redis_url):
    a = tmp_path / "a.idx"
    online_file(a, {})
    # Nothing listens on a port just freed.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = f"redis://127.0.0.1:{port}/0"
    for args in (["push", a, down], ["pull", down, "-o", tmp_path / "x.idx"], ["stats", down]):
        r = cli("index", *args, check=False)
        assert r.returncode == 1 and f"cannot reach the Redis server at {down}" in r.stderr, r.stderr
    assert not (tmp_path / "x.idx").exists()

    # A namespace no one made.
    r = cli("index", "pull", redis_url, "--namespace", "nothing", "-o", tmp_path / "x.idx", check=False)
    assert r.returncode == 2 and "holds no index" in r.stderr

    cli("index", "push", a, redis_url, "--namespace", "ns")
    # Pulling over something that is not an index.
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    r = cli("index", "pull", redis_url, "--namespace", "ns", "-o", notes, check=False)
    assert r.returncode == 2 and "not a neardup index" in r.stderr and notes.read_text() == "keep me\n"
    r = cli("index", "pull", redis_url, "--namespace", "ns", "-o", tmp_path, check=False)
    assert r.returncode == 2 and "a directory" in r.stderr
    # Pulling over an index replaces it.
    cli("index", "pull", redis_url, "--namespace", "ns", "-o", tmp_path / "p.idx")
    cli("index", "pull", redis_url, "--namespace", "ns", "-o", tmp_path / "p.idx")

    # A namespace holding an index: refused unless --replace.
    r = cli("index", "push", a, redis_url, "--namespace", "ns", check=False)
    assert r.returncode == 2 and "already holds an index" in r.stderr and "--replace" in r.stderr
    cli("index", "push", a, redis_url, "--namespace", "ns", "--replace")

    # A namespace made with other settings: refused naming them, even with --replace.
    neardup.Index(redis_url, namespace="other", threshold=0.7).check("a text long enough to be signed, about winter")
    for extra in ([], ["--replace"]):
        r = cli("index", "push", a, redis_url, "--namespace", "other", *extra, check=False)
        assert r.returncode == 2 and "threshold: 0.7 vs 0.8" in r.stderr, r.stderr
    assert len(neardup.Index(redis_url, namespace="other", threshold=0.7)) == 1
    # The staging keys of every push are gone.
    import redis as redis_client  # the Python client, as tests/run installs it

    keys = redis_client.Redis.from_url(redis_url).keys("*")
    assert not [k for k in keys if b".push-" in k], keys
