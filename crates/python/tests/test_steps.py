"""Middle level over files: keys → hot_keys(groups=…) → sign → decide → write, each the CLI's step
of the same name, and together the decisions and outputs of one `neardup dedup`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import neardup
from conftest import REPO, SAMPLE

# The sample's files, relative to the repository (the working directory of these tests), one
# shard each: decisions must name them as given.
SHARDS = [f"tests/data/sample/{p.name}" for p in sorted(SAMPLE.iterdir())]
SETTINGS = {"threshold": 0.7, "max_reps": 2}
FLAGS = ["--threshold", "0.7", "--max-reps", "2"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def data_files(directory: Path) -> dict:
    """The dataset files of an output directory (manifests and hidden files aside), by path."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.startswith(("_SUCCESS", "."))
    }


def one_run(cli, tmp: Path) -> tuple:
    """Decisions and outputs of one `neardup dedup` over the shards in order."""
    cli("dedup", *SHARDS, "-o", tmp / "one", "--decisions", tmp / "one.jsonl", *FLAGS)
    return (tmp / "one.jsonl").read_bytes(), data_files(tmp / "one")


@pytest.mark.parametrize("groups", [1, 3])
def test_the_steps_are_the_clis_and_make_one_runs_decisions(tmp_path, cli, groups):
    expected_decisions, expected_outputs = one_run(cli, tmp_path)
    py, sh = tmp_path / "py", tmp_path / "cli"
    py.mkdir()
    sh.mkdir()
    tables = []
    for i, shard in enumerate(SHARDS):
        report = neardup.keys([shard], i, py / f"keys-{i}.ndk", **SETTINGS)
        assert report["shard"] == i and report["inputs"] == [shard]
        assert report["stage1"]["samples"] > 0
        cli("keys", shard, "--shard", i, "-o", sh / f"keys-{i}.ndk", "--threshold", "0.7")
        assert (py / f"keys-{i}.ndk").read_bytes() == (sh / f"keys-{i}.ndk").read_bytes()
        tables.append(py / f"keys-{i}.ndk")

    hot = neardup.hot_keys(reversed(tables), groups=groups)
    assert hot.groups == groups
    hot.save(py / "hot.ndh")
    cli("hot", *tables, "--groups", groups, "-o", sh / "hot.ndh")
    assert (py / "hot.ndh").read_bytes() == (sh / "hot.ndh").read_bytes()
    # From tables in memory: the same hot keys and plan.
    in_memory = neardup.hot_keys([neardup.KeyTable.load(t) for t in tables], groups=groups)
    assert in_memory.to_bytes() == hot.to_bytes()
    assert in_memory.fingerprint == hot.fingerprint == neardup.HotKeys.load(sh / "hot.ndh").fingerprint

    signed = []
    for i, table in enumerate(tables):
        report = neardup.sign(table, py / "hot.ndh", py / f"sig-{i}", **SETTINGS)
        assert report["manifest"]["hot"] == hot.fingerprint
        assert report["manifest"]["groups"] == groups
        cli("sign", table, "--hot", sh / "hot.ndh", "-o", sh / f"sig-{i}", *FLAGS)
        assert data_files(py / f"sig-{i}") == data_files(sh / f"sig-{i}")
        signed.append(py / f"sig-{i}")

    decided = []
    for g in range(groups):
        report = neardup.decide(reversed(signed), py / "hot.ndh", g, py / f"decided-{g}", **SETTINGS)
        assert report["manifest"]["group"] == g
        cli("decide", *signed, "--hot", sh / "hot.ndh", "--group", g, "-o", sh / f"decided-{g}", *FLAGS)
        assert data_files(py / f"decided-{g}") == data_files(sh / f"decided-{g}")
        decided.append(py / f"decided-{g}")

    decisions = b""
    for i, table in enumerate(tables):
        report = neardup.write(
            table,
            py / "hot.ndh",
            decided,
            output=py / "out",
            decisions=py / f"d-{i}.jsonl",
            report=py / f"r-{i}.json",
            **SETTINGS,
        )
        assert report["totals"] == json.loads((py / f"r-{i}.json").read_text())["totals"]
        decisions += (py / f"d-{i}.jsonl").read_bytes()
    assert decisions == expected_decisions
    assert data_files(py / "out") == expected_outputs
    assert json.loads(expected_decisions.splitlines()[0])["file"] == SHARDS[0]


def test_steps_refuse_what_the_cli_refuses(tmp_path):
    table = tmp_path / "keys-0.ndk"
    neardup.keys(SHARDS, 0, table)
    hot = neardup.hot_keys([table], groups=2)
    hot.save(tmp_path / "hot.ndh")
    neardup.sign(table, tmp_path / "hot.ndh", tmp_path / "sig-0")
    with pytest.raises(ValueError, match="--group 2 is out of range"):
        neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", 2, tmp_path / "decided-2")
    with pytest.raises(ValueError, match="other decision settings"):
        neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", 0, tmp_path / "d", max_reps=1)
    neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", 0, tmp_path / "decided-0")
    with pytest.raises(ValueError, match="decide outputs of group 1 are missing"):
        neardup.write(table, tmp_path / "hot.ndh", [tmp_path / "decided-0"], decisions=tmp_path / "d.jsonl")
    with pytest.raises(ValueError, match="output= and/or decisions="):
        neardup.write(table, tmp_path / "hot.ndh", [tmp_path / "decided-0"])
    with pytest.raises(TypeError, match="unknown setting"):
        neardup.sign(table, tmp_path / "hot.ndh", tmp_path / "s", threshhold=0.7)
    with pytest.raises(FileNotFoundError):
        neardup.sign(tmp_path / "missing.ndk", tmp_path / "hot.ndh", tmp_path / "s")
    with pytest.raises(ValueError, match="groups must be at least 1"):
        neardup.hot_keys([table], groups=0)
    with pytest.raises(TypeError, match="not a mix"):
        neardup.hot_keys([table, 3])
    # Nothing of the refused steps was left behind.
    assert not (tmp_path / "decided-2").exists() and not (tmp_path / "d").exists()
    assert not (tmp_path / "d.jsonl").exists()


def test_a_cancelled_step_stops_and_removes_what_it_wrote(tmp_path):
    # What Ctrl-C does (neardup's wrappers call run.cancel() on KeyboardInterrupt and wait):
    # cancelled as it starts, each step stops and leaves nothing behind.
    import random

    from neardup import _native

    corpus = tmp_path / "in"
    corpus.mkdir()
    rng = random.Random(3)
    words = [f"w{i}" for i in range(3000)]
    with open(corpus / "big.jsonl", "w", encoding="utf-8") as f:
        for _ in range(60_000):
            f.write(json.dumps({"text": " ".join(rng.choices(words, k=60))}) + "\n")
    work = tmp_path / "work"
    work.mkdir()

    def cancelled(run):
        run.cancel()
        with pytest.raises(KeyboardInterrupt):
            run.result()

    cancelled(_native.start_keys([str(corpus)], 0, work / "keys.ndk", {"threads": 1}))
    assert sorted(work.iterdir()) == []
    neardup.keys([corpus], 0, work / "keys.ndk")
    neardup.hot_keys([work / "keys.ndk"]).save(work / "hot.ndh")
    cancelled(_native.start_sign(work / "keys.ndk", work / "hot.ndh", work / "sig", {"threads": 1}))
    assert not (work / "sig").exists() or sorted((work / "sig").iterdir()) == []
    neardup.sign(work / "keys.ndk", work / "hot.ndh", work / "sig")
    neardup.decide([work / "sig"], work / "hot.ndh", 0, work / "decided")
    out, decisions = tmp_path / "out", tmp_path / "d.jsonl"
    cancelled(
        _native.start_write(
            work / "keys.ndk", work / "hot.ndh", [str(work / "decided")], out, decisions, None,
            {"threads": 1},
        )
    )
    assert not decisions.exists()
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*")), sorted(out.rglob("*"))
