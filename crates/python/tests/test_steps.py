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
    # In memory too: a cancelled sign makes no value.
    cancelled(_native.start_sign(neardup.KeyTable.load(work / "keys.ndk"), work / "hot.ndh", None, {"threads": 1}))
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


def saved_bytes(path: Path) -> dict:
    """What a step value is saved as: a file's bytes, or a directory's files by name."""
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if not p.name.startswith(".")}
    return {"": path.read_bytes()}


def test_every_step_has_one_shape_and_its_value_is_the_clis_bytes(tmp_path, cli):
    """Each step makes its value without output= and writes it with output= (the bytes the
    value saves, and the CLI's command writes), returning its report; the value round-trips
    through its file and its bytes."""
    py, sh = tmp_path / "py", tmp_path / "cli"
    py.mkdir()
    sh.mkdir()

    def same(value, written: Path, by_cli: Path, kind) -> None:
        value.save(py / f"saved-{written.name}")
        assert saved_bytes(py / f"saved-{written.name}") == saved_bytes(written) == saved_bytes(by_cli)
        assert kind.load(written).to_bytes() == value.to_bytes() == kind.load(by_cli).to_bytes()
        assert kind.from_bytes(value.to_bytes()) == value

    tables = []
    for i, shard in enumerate(SHARDS):
        table = neardup.keys([shard], i, **SETTINGS)
        assert isinstance(table, neardup.KeyTable) and table.stats["samples"] > 0
        report = neardup.keys([shard], i, py / f"keys-{i}.ndk", **SETTINGS)
        assert report["table"] == str(py / f"keys-{i}.ndk") and report["shard"] == i
        cli("keys", shard, "--shard", i, "-o", sh / f"keys-{i}.ndk", "--threshold", "0.7")
        same(table, py / f"keys-{i}.ndk", sh / f"keys-{i}.ndk", neardup.KeyTable)
        # compute_keys, the older name, is keys without output.
        assert neardup.compute_keys([shard], shard=i, **SETTINGS).to_bytes() == table.to_bytes()
        tables.append(table)

    paths = [sh / f"keys-{i}.ndk" for i in range(len(SHARDS))]
    hot = neardup.hot_keys(tables, 1, 2)
    assert isinstance(hot, neardup.HotKeys) and hot.stats["hot_keys"] > 0
    report = neardup.hot_keys(paths, 1, 2, py / "hot.ndh")
    assert report["hot_keys_file"] == str(py / "hot.ndh") and report["plan"]["groups"] == 2
    assert report["count"]["hot_keys"] == hot.stats["hot_keys"]
    cli("hot", *paths, "--groups", 2, "-o", sh / "hot.ndh")
    same(hot, py / "hot.ndh", sh / "hot.ndh", neardup.HotKeys)

    signed = []
    for i, table in enumerate(tables):
        value = neardup.sign(table, hot, **SETTINGS)
        report = neardup.sign(paths[i], py / "hot.ndh", py / f"sig-{i}", **SETTINGS)
        assert report["manifest"] == value.manifest
        cli("sign", paths[i], "--hot", sh / "hot.ndh", "-o", sh / f"sig-{i}", *FLAGS)
        same(value, py / f"sig-{i}", sh / f"sig-{i}", neardup.Signed)
        signed.append(value)

    for g in range(2):
        value = neardup.decide(signed, hot, g, **SETTINGS)
        report = neardup.decide(signed, py / "hot.ndh", g, py / f"decided-{g}", **SETTINGS)
        assert report["manifest"] == value.manifest
        cli("decide", *[sh / f"sig-{i}" for i in range(len(SHARDS))], "--hot", sh / "hot.ndh",
            "--group", g, "-o", sh / f"decided-{g}", *FLAGS)
        same(value, py / f"decided-{g}", sh / f"decided-{g}", neardup.Decided)


# --- The same steps over values: no sign or decide directory anywhere. ---


def _values_run(tmp: Path, groups: int, shards: list) -> tuple:
    """compute_keys → hot_keys → sign → decide → write over values only (as a scheduler with an
    object store runs them: each value through pickle, each task given only its part)."""
    import pickle

    tables = [neardup.compute_keys([s], shard=i, **SETTINGS) for i, s in enumerate(shards)]
    tables = [pickle.loads(pickle.dumps(t)) for t in tables]
    hot = pickle.loads(pickle.dumps(neardup.hot_keys(tables, groups=groups)))
    signed = [pickle.loads(pickle.dumps(neardup.sign(t, hot, **SETTINGS))) for t in tables]
    for i, s in enumerate(signed):
        assert isinstance(s, neardup.Signed)
        assert (s.shard, s.place, s.shards, s.groups) == (i, i, len(shards), groups)
        assert s.groups_held == list(range(groups))
        assert s.stats is None  # pickling carries the value, not the pass's statistics
    decided = []
    for g in range(groups):
        parts = [s.group(g) for s in reversed(signed)]
        assert all(p.groups_held == [g] for p in parts)
        d = neardup.decide(parts, hot, g, **SETTINGS)
        assert isinstance(d, neardup.Decided)
        assert (d.group, d.groups, d.shards, d.shards_held) == (g, groups, len(shards), list(range(len(shards))))
        decided.append(pickle.loads(pickle.dumps(d)))
    out = tmp / "out"
    decisions = b""
    for i, t in enumerate(tables):
        d = tmp / f"d-{i}.jsonl"
        neardup.write(t, hot, [x.shard(i) for x in decided], output=out, decisions=d, **SETTINGS)
        decisions += d.read_bytes()
    return decisions, data_files(out), signed, decided


@pytest.mark.parametrize("groups", [1, 3])
def test_the_steps_over_values_alone_make_one_runs_decisions(tmp_path, cli, groups):
    expected_decisions, expected_outputs = one_run(cli, tmp_path)
    decisions, outputs, signed, decided = _values_run(tmp_path, groups, SHARDS)
    assert decisions == expected_decisions
    assert outputs == expected_outputs
    assert sum(sum(s.samples) for s in signed) == sum(sum(d.decided) for d in decided) > 0
    # No step directory was written: only the dataset and the decisions.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["one", "one.jsonl", "out"] + [f"d-{i}.jsonl" for i in range(len(SHARDS))]
    )


def test_values_are_the_clis_directories_as_bytes(tmp_path, cli):
    import pickle

    sh = tmp_path / "cli"
    sh.mkdir()
    for i, shard in enumerate(SHARDS):
        cli("keys", shard, "--shard", i, "-o", sh / f"keys-{i}.ndk", "--threshold", "0.7")
    tables = [sh / f"keys-{i}.ndk" for i in range(len(SHARDS))]
    cli("hot", *tables, "--groups", 2, "-o", sh / "hot.ndh")
    hot = neardup.HotKeys.load(sh / "hot.ndh")
    for i, table in enumerate(tables):
        cli("sign", table, "--hot", sh / "hot.ndh", "-o", sh / f"sig-{i}", *FLAGS)
    signed = []
    for i, table in enumerate(tables):
        # From the table file and the hot-key path, or from the values: the same value.
        value = neardup.sign(table, sh / "hot.ndh", **SETTINGS)
        assert value == neardup.sign(neardup.KeyTable.load(table), hot, **SETTINGS)
        loaded = neardup.Signed.load(sh / f"sig-{i}")
        assert loaded == value and loaded.to_bytes() == value.to_bytes()
        assert neardup.Signed.from_bytes(value.to_bytes()) == value
        assert pickle.loads(pickle.dumps(value)) == value
        on_disk = json.loads((sh / f"sig-{i}" / "manifest.json").read_text())
        # The file adds the checksum the next step verifies before using any field.
        assert len(on_disk.pop("checksum")) == 16
        assert value.manifest == on_disk
        assert value.stats["records"] > 0 and value.stream_bytes == sum(value.manifest["bytes"])
        # save writes the CLI's directory, byte for byte.
        value.save(tmp_path / f"saved-{i}")
        assert {p.name: p.read_bytes() for p in (tmp_path / f"saved-{i}").iterdir()} == {
            p.name: p.read_bytes() for p in (sh / f"sig-{i}").iterdir()
        }
        signed.append(value)
    # decide over a mix of values and the CLI's directories, into a value and a directory.
    mixed = [signed[0], sh / "sig-1", str(sh / "sig-2")]
    cli("decide", *[sh / f"sig-{i}" for i in range(3)], "--hot", sh / "hot.ndh", "--group", 1,
        "-o", sh / "decided-1", *FLAGS)
    d1 = neardup.decide(mixed, hot, 1, **SETTINGS)
    assert d1.to_bytes() == neardup.Decided.load(sh / "decided-1").to_bytes()
    assert pickle.loads(pickle.dumps(d1)) == d1 == neardup.Decided.from_bytes(d1.to_bytes())
    report = neardup.decide(mixed, sh / "hot.ndh", 1, tmp_path / "decided-1", **SETTINGS)
    assert report["manifest"] == d1.manifest
    # Pickling of the stage-1 values too.
    table = neardup.KeyTable.load(tables[0])
    assert pickle.loads(pickle.dumps(table)) == table
    assert pickle.loads(pickle.dumps(hot)) == hot


def test_values_are_refused_as_directories_are(tmp_path):
    tables = [neardup.compute_keys([s], shard=i) for i, s in enumerate(SHARDS[:2])]
    hot = neardup.hot_keys(tables, groups=2)
    other = neardup.hot_keys(tables, groups=3)
    signed = [neardup.sign(t, hot) for t in tables]
    foreign = neardup.sign(tables[0], other)
    with pytest.raises(ValueError, match="the signed value of shard 0 was signed with another hot-key file"):
        neardup.decide([foreign, signed[1]], hot, 0)
    with pytest.raises(ValueError, match="other decision settings"):
        neardup.decide(signed, hot, 0, max_reps=1)
    with pytest.raises(ValueError, match="the sign outputs of shard 1 are missing"):
        neardup.decide(signed[:1], hot, 0)
    with pytest.raises(ValueError, match="holds the stream of group 0 only, and `decide --group 1` needs group 1's"):
        neardup.decide([s.group(0) for s in signed], hot, 1)
    with pytest.raises(ValueError, match="group 5 is out of range"):
        signed[0].group(5)
    with pytest.raises(TypeError, match="Signed values or the paths"):
        neardup.decide([signed[0], 3], hot, 0)
    decided = [neardup.decide(signed, hot, g) for g in range(2)]
    with pytest.raises(ValueError, match="the decided value of group 1 holds the stream of shard 1 only"):
        neardup.write(tables[0], hot, [decided[0], decided[1].shard(1)], decisions=tmp_path / "d.jsonl")
    with pytest.raises(ValueError, match="the decide outputs of group 1 are missing"):
        neardup.write(tables[0], hot, decided[:1], decisions=tmp_path / "d.jsonl")
    assert not (tmp_path / "d.jsonl").exists()
    # Damaged bytes are refused, not misread.
    data = signed[0].to_bytes()
    with pytest.raises(neardup.CorruptFileError, match="truncated"):
        neardup.Signed.from_bytes(data[:-3])
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 1
    with pytest.raises(neardup.CorruptFileError, match="checksum does not match"):
        neardup.Signed.from_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="a SignedShard, not a DecidedGroup"):
        neardup.Decided.from_bytes(data)


def _tree(root: Path) -> dict:
    """Every file under `root` with its bytes: what a refused step must leave as it found it."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_steps_write_over_nothing_the_run_reads(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for p in sorted(SAMPLE.iterdir()):
        (data / p.name).write_bytes(p.read_bytes())
    shards = sorted(data.iterdir())
    tables = [tmp_path / f"keys-{i}.ndk" for i in range(len(shards))]
    for i, (shard, table) in enumerate(zip(shards, tables)):
        neardup.keys([str(shard)], i, table)
    neardup.hot_keys(tables, 1, 2, tmp_path / "hot.ndh")
    hot = tmp_path / "hot.ndh"
    for i, table in enumerate(tables):
        neardup.sign(table, hot, tmp_path / f"sig-{i}")
    signed = [tmp_path / f"sig-{i}" for i in range(len(tables))]
    for g in range(2):
        neardup.decide(signed, hot, g, tmp_path / f"dec-{g}")
    decided = [tmp_path / "dec-0", tmp_path / "dec-1"]
    before = _tree(tmp_path)
    # An output that is a file a later step reads: exit code 2's ValueError, naming both paths.
    refused = [
        (lambda: neardup.hot_keys(tables, 1, 2, shards[0]), str(shards[0])),
        (lambda: neardup.decide(signed, hot, 0, tmp_path / "sig-0"), "sig-0"),
        (lambda: neardup.decide(signed, hot, 0, data), "input file"),
        (lambda: neardup.sign(tables[0], hot, data), "input file"),
        (
            lambda: neardup.write(tables[0], hot, decided, decisions=tmp_path / "dec-1" / "manifest.json"),
            "dec-1/manifest.json",
        ),
        (lambda: neardup.write(tables[0], hot, decided, decisions=shards[1]), str(shards[1])),
        (lambda: neardup.write(tables[0], hot, decided, tmp_path / "sig-1"), "earlier `sign` step"),
    ]
    for step, named in refused:
        with pytest.raises(ValueError, match=named.replace("(", r"\(")):
            step()
        assert _tree(tmp_path) == before
    # A directory that is not empty (OSError, exit code 1's): overwrite=True replaces only an
    # earlier output of the same step.
    with pytest.raises(OSError, match="not empty.*pass overwrite=True"):
        neardup.sign(tables[0], hot, tmp_path / "dec-0")
    with pytest.raises(OSError, match="overwrite=True replaces only an earlier `sign` output"):
        neardup.sign(tables[0], hot, tmp_path / "dec-0", overwrite=True)
    with pytest.raises(OSError, match="not empty"):
        neardup.decide(signed, hot, 1, tmp_path / "dec-1")
    with pytest.raises(OSError, match="earlier `sign` output"):
        neardup.Signed.load(tmp_path / "sig-0").save(tmp_path / "dec-0")
    assert _tree(tmp_path) == before
    neardup.sign(tables[0], hot, tmp_path / "sig-0", overwrite=True)
    neardup.decide(signed, hot, 1, tmp_path / "dec-1", overwrite=True)
    neardup.Signed.load(tmp_path / "sig-1").save(tmp_path / "sig-1")
    assert _tree(tmp_path) == before


# Files neardup did not write, each close to a shape it writes: text, JSON that is no report,
# JSONL that is no decisions, bytes that are no key file.
FOREIGN = {
    "notes.txt": b"precious\n",
    "package.json": b'{\n  "version": "1.0.0",\n  "name": "mine"\n}\n',
    "rows.jsonl": b'{"file": "a.jsonl", "record": 0, "note": "mine"}\n',
    "keys.bin": b"NDKEYX\x00\x01not neardup's",
}


def test_outputs_replace_only_neardup_files_of_their_kind(tmp_path):
    table = tmp_path / "keys-0.ndk"
    neardup.keys(SHARDS, 0, table)
    hot = neardup.hot_keys([table], groups=2)
    hot.save(tmp_path / "hot.ndh")
    neardup.sign(table, tmp_path / "hot.ndh", tmp_path / "sig-0")
    decided = [tmp_path / f"dec-{g}" for g in range(2)]
    for g, d in enumerate(decided):
        neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", g, d)
    value = neardup.KeyTable.load(table)
    # Each writer of one file, with the kind of file it replaces.
    writers = {
        "decisions": lambda p: neardup.dedup(SHARDS, decisions=p),
        "report": lambda p: neardup.dedup(SHARDS, decisions=tmp_path / "d.jsonl", report=p),
        "index": lambda p: neardup.dedup(SHARDS, decisions=tmp_path / "d.jsonl", index_out=p),
        "key table": lambda p: neardup.keys(SHARDS, 0, p),
        "KeyTable.save": value.save,
        "hot-key file": lambda p: neardup.hot_keys([table], groups=2, output=p),
        "HotKeys.save": hot.save,
        "write decisions": lambda p: neardup.write(table, tmp_path / "hot.ndh", decided, decisions=p),
        "write report": lambda p: neardup.write(
            table, tmp_path / "hot.ndh", decided, decisions=tmp_path / "w.jsonl", report=p
        ),
    }
    for name, body in FOREIGN.items():
        (tmp_path / name).write_bytes(body)
    before = _tree(tmp_path)
    for what, write in writers.items():
        # A foreign file is refused before any work (exit code 2's ValueError) and left as it was.
        for name in FOREIGN:
            with pytest.raises(ValueError, match=f"{name} is a file neardup did not write.*remove it first"):
                write(tmp_path / name)
            assert _tree(tmp_path) == before, what
        # An empty file, then the writer's own earlier output, is replaced.
        own = tmp_path / "own"
        own.write_bytes(b"")
        write(own)
        assert own.stat().st_size > 0, what
        write(own)
        assert own.stat().st_size > 0, what
        own.unlink()
        for extra in ("d.jsonl", "w.jsonl"):
            (tmp_path / extra).unlink(missing_ok=True)
