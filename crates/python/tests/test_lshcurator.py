"""neardup.lshcurator against lshcurator 0.2.3: its fixtures always, lshcurator itself when it is
importable (the peers' environment)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import COMPAT
from neardup import lshcurator as nd

INPUTS = [COMPAT / f"input-{i}.jsonl" for i in range(3)]
DECISIONS = json.loads((COMPAT / "decisions.json").read_text())["settings"]
BUCKET_KEYS = json.loads((COMPAT / "bucket_keys.json").read_text())["settings"]


def curator_config(setting, module=nd, **extra):
    return module.CuratorConfig(
        shingle_k=setting["shingle_k"],
        shingle_step=setting["shingle_step"],
        bands=setting["bands"],
        rows_per_band=setting["rows"],
        compute_mode=setting["compute_mode"],
        similarity_threshold=setting.get("threshold"),
        max_representatives_per_bucket=setting.get("max_representatives_per_bucket"),
        **extra,
    )


def label(setting):
    return "{bands}x{rows}-{compute_mode}-{threshold}".format(**setting)


@pytest.mark.parametrize("setting", DECISIONS, ids=label)
@pytest.mark.parametrize("workers", [1, 2])
def test_process_corpus_yields_lshcurators_pairs(setting, workers):
    curator = nd.Curator(curator_config(setting, max_workers=workers))
    got = list(
        curator.process_corpus(
            [str(p) for p in INPUTS],
            fields="text",
            filter_low_freq_bucket_keys=setting["filter_low_freq_bucket_keys"],
        )
    )
    expected = [(r["text"], r["keep"]) for r in setting["results"]]
    assert len(got) == len(expected) == 185
    assert got == expected


@pytest.mark.parametrize("setting", BUCKET_KEYS, ids=lambda s: f"{s['bands']}x{s['rows']}")
def test_bucket_keys_are_lshcurators(setting):
    curator = nd.Curator(curator_config({**setting, "threshold": 0.8}))
    keys, mapping = curator.compute_bucket_keys(INPUTS, fields="text")
    expected = np.array([[int(k) for k in row] for row in setting["keys"]], dtype=np.uint64)
    assert keys.dtype == np.uint64 and np.array_equal(keys, expected)
    assert list(mapping) == INPUTS
    starts = [c[0].start_position for c in mapping.values()]
    sizes = [c[0].size for c in mapping.values()]
    assert starts == [0, sizes[0], sizes[0] + sizes[1]] and sum(sizes) == len(keys)
    hot, mask = nd.Curator.select_deduper_bucket_keys(keys, filter_freq=1)
    assert mask.tolist() == setting["hot_row_mask"]
    assert hot.tolist() == [int(k) for k in setting["hot_keys"]]
    flat, flat_mapping = curator.compute_bucket_keys(INPUTS, fields="text", key_layout="flat")
    assert np.array_equal(flat, expected.reshape(-1))
    assert flat_mapping[INPUTS[1]][0].start_position == sizes[0] * setting["bands"]


def test_init_deduper_replays_process_corpus():
    """lshcurator's own two steps — keys, then a deduper over the hot ones — give its pairs."""
    setting = DECISIONS[1]
    curator = nd.Curator(curator_config(setting))
    keys, _ = curator.compute_bucket_keys(INPUTS, fields="text")
    hot, _ = curator.select_deduper_bucket_keys(keys, filter_freq=1)
    deduper = curator.init_deduper(hot)
    assert curator.deduper is deduper and deduper.num_bucket_keys == hot.size
    got = [deduper(r["text"]) for r in setting["results"]]
    assert got == [r["keep"] for r in setting["results"]]
    assert deduper.num_buckets > 0


def test_lshcurators_errors_and_no_hot_keys(tmp_path, capsys):
    curator = nd.Curator(nd.CuratorConfig(shingle_k=5, shingle_step=1, bands=4, rows_per_band=4))
    run = curator.process_corpus(INPUTS, fields="text")
    with pytest.raises(ValueError, match="similarity_threshold must be set"):
        next(run)
    config = nd.CuratorConfig(5, 1, 4, 4, similarity_threshold=0.8)
    assert config.compute_mode == "char" and config.max_workers == 1
    assert config.shm_chunk_nbytes == 8_000_000
    with pytest.raises(ValueError, match="non-negative integer"):
        next(nd.Curator(config).process_corpus(INPUTS, filter_low_freq_bucket_keys=-1))
    # Every text unique: lshcurator prints its notice and yields nothing.
    rng = random.Random(7)
    unique = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(60)) for _ in range(20)]
    (tmp_path / "u.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in unique))
    assert list(nd.Curator(config).process_corpus(tmp_path / "u.jsonl", fields="text")) == []
    assert "All bucket keys are low frequency" in capsys.readouterr().out
    with pytest.raises(ValueError, match="Invalid key_layout"):
        nd.Curator(config).compute_bucket_keys(INPUTS, key_layout="columns")


def test_fields_none_takes_the_first_records_fields(tmp_path):
    rows = [{"title": f"title {i % 3} of a document", "body": f"body text {i % 4} " * 5} for i in range(12)]
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = nd.CuratorConfig(3, 1, 4, 2, similarity_threshold=0.9)
    by_name = list(nd.Curator(config).process_corpus(path, fields=["title", "body"]))
    assert list(nd.Curator(config).process_corpus(path)) == by_name
    assert len(by_name) == 24 and by_name[0][0] == "title 0 of a document"


def make_corpus(directory: Path, seed: int) -> list:
    """JSONL files of texts with near and exact copies, blank values and missing fields."""
    rng = random.Random(seed)
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) for _ in range(60)]
    paths = []
    for f in range(3):
        lines = []
        for _ in range(120):
            r = rng.random()
            if r < 0.4:
                text = rng.choice(base)
            elif r < 0.7:
                t = rng.choice(base).split()
                t[rng.randrange(len(t))] = rng.choice(words)
                text = " ".join(t)
            elif r < 0.75:
                text = rng.choice(["", "   ", "\n\t", "ab"])
            else:
                text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            record = {"text": f"  {text} " if rng.random() < 0.1 else text, "n": len(lines)}
            if rng.random() < 0.03:
                del record["text"]
            lines.append(json.dumps(record))
        path = directory / f"part-{f}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


SETTINGS = [
    dict(shingle_k=5, shingle_step=1, bands=8, rows_per_band=4, similarity_threshold=0.7),
    dict(shingle_k=3, shingle_step=2, bands=4, rows_per_band=4, compute_mode="byte",
         similarity_threshold=0.8, max_representatives_per_bucket=1),
    dict(shingle_k=4, shingle_step=1, bands=16, rows_per_band=2, similarity_threshold=0.5,
         max_representatives_per_bucket=0),
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_equal_to_lshcurator_itself(tmp_path, settings):
    real = pytest.importorskip("lshcurator")
    paths = make_corpus(tmp_path, seed=len(str(settings)))
    for filter_freq in (0, 1, 3):
        ours = list(
            nd.Curator(nd.CuratorConfig(**settings)).process_corpus(
                paths, fields="text", filter_low_freq_bucket_keys=filter_freq
            )
        )
        theirs = list(
            real.Curator(real.CuratorConfig(**settings)).process_corpus(
                paths, fields="text", filter_low_freq_bucket_keys=filter_freq
            )
        )
        assert ours == theirs
        assert not all(keep for _, keep in ours)
    our_keys, our_map = nd.Curator(nd.CuratorConfig(**settings)).compute_bucket_keys(paths, "text")
    their_keys, their_map = real.Curator(real.CuratorConfig(**settings)).compute_bucket_keys(
        paths, "text"
    )
    assert np.array_equal(our_keys, their_keys)
    assert {p: sum(c.size for c in cs) for p, cs in our_map.items()} == {
        p: sum(c.size for c in cs) for p, cs in their_map.items()
    }
    # Their deduper and ours over every key, on texts as given (unstripped, blank ones too).
    texts = ["", "  ", "ab", "ab", "lorem ipsum dolor", " lorem ipsum dolor ", "lorem ipsum dolor"]
    texts += [json.loads(line).get("text", "") for line in paths[0].read_text().splitlines()]
    config = real.CuratorConfig(**settings)
    theirs = real.Curator(config).init_deduper(their_keys.copy())
    ours = nd.Curator(nd.CuratorConfig(**settings)).init_deduper(our_keys.copy())
    assert [ours(t) for t in texts] == [theirs(t) for t in texts]
