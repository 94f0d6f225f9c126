"""High level: neardup.dedup and neardup.stream against the CLI, errors, settings, progress."""

from __future__ import annotations

import io

import errno
import json

import pytest

import neardup
from conftest import DATA, SAMPLE, read_jsonl

# Settings that leave the defaults, and the CLI flags that say the same.
VARIANTS = [
    ({}, []),
    (
        {"threshold": 0.7, "id_field": "id", "lowercase": True, "max_reps": 4, "threads": 1},
        ["--threshold", "0.7", "--id-field", "id", "--lowercase", "--max-reps", "4", "-j", "1"],
    ),
    ({"prefer": "longest", "threshold": 0.7}, ["--prefer", "longest", "--threshold", "0.7"]),
    (
        {"compat": "lshcurator", "bands": 16, "rows": 8, "threshold": 0.7},
        ["--compat", "lshcurator", "--bands", "16", "--rows", "8", "--threshold", "0.7"],
    ),
]

# What differs between two runs of the same work: clocks and the paths they were told to write.
VOLATILE = {"seconds", "mb_per_second", "sketch_seconds", "count_seconds"}


def without_volatile(value):
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def tree(root):
    """The data files under root (the manifest `_SUCCESS` names its run and time: checked apart)."""
    assert (root / "_SUCCESS").is_file()
    return {
        p.relative_to(root): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "_SUCCESS"
    }


@pytest.mark.parametrize("settings,flags", VARIANTS)
@pytest.mark.parametrize("decisions_name", ["d.jsonl", "d.parquet"])
def test_dedup_writes_what_the_cli_writes(tmp_path, cli, settings, flags, decisions_name):
    cli_dir, py_dir = tmp_path / "cli", tmp_path / "py"
    cli_dir.mkdir()
    py_dir.mkdir()
    cli(
        "dedup", SAMPLE, "-o", cli_dir / "out", "--decisions", cli_dir / decisions_name,
        "--report", cli_dir / "report.json", *flags,
    )
    report = neardup.dedup(
        str(SAMPLE),
        output=py_dir / "out",
        decisions=py_dir / decisions_name,
        report=py_dir / "report.json",
        **settings,
    )
    assert tree(py_dir / "out") == tree(cli_dir / "out")
    assert (py_dir / decisions_name).read_bytes() == (cli_dir / decisions_name).read_bytes()
    cli_report = json.loads((cli_dir / "report.json").read_text())
    assert report == json.loads((py_dir / "report.json").read_text())
    # The reports differ in the output paths they name and in timings only.
    text = json.dumps(without_volatile(report)).replace(str(py_dir), "DIR")
    expected = json.dumps(without_volatile(cli_report)).replace(str(cli_dir), "DIR")
    assert json.loads(text) == json.loads(expected)
    assert report["totals"]["records_in"] == 500


def test_stream_yields_the_decisions_file(tmp_path):
    neardup.dedup(SAMPLE, decisions=tmp_path / "d.jsonl", id_field="id")
    stream = neardup.stream(SAMPLE, id_field="id")
    assert stream.report is None
    got = [d.to_dict() for d in stream]
    assert got == read_jsonl(tmp_path / "d.jsonl")
    assert stream.report["totals"]["samples"] == len(got) == 500
    assert list(stream) == []
    assert not any(tmp_path.glob("*.tmp*"))


def test_stream_decisions_name_what_they_duplicate():
    decisions = list(neardup.stream([SAMPLE / "part-0.jsonl", SAMPLE / "part-1.jsonl"]))
    drops = [d for d in decisions if not d.keep]
    assert drops and all(d.reason in ("near", "exact") for d in drops)
    by_address = {(d.file, d.record): d for d in decisions}
    for d in drops:
        first = by_address[(d.dup_of_file, d.dup_of_record)]
        assert (first.file, first.record) < (d.file, d.record)
        assert d.dup_of_field == 0 and 0.0 < d.similarity <= 1.0
        # A near duplicate names a kept representative; an exact copy the first sample with its
        # text, kept or not.
        if d.reason == "near":
            assert first.keep
        else:
            assert d.similarity == 1.0
    assert decisions[0] == decisions[0] and decisions[0] != decisions[1]


def test_stream_writes_nothing_and_refuses_outputs(tmp_path):
    for name in ["dir", "decisions", "report", "overwrite"]:
        with pytest.raises(TypeError, match=f"{name} is not taken here: this writes nothing"):
            neardup.stream(SAMPLE, **{name: str(tmp_path / "x")})


def test_unknown_settings_are_named_with_the_valid_ones():
    with pytest.raises(TypeError) as e:
        neardup.dedup(SAMPLE, treshold=0.9)
    message = str(e.value)
    assert "unknown setting treshold (did you mean threshold?)" in message
    assert "valid settings: " in message and "num_perm" in message and "id_field" in message
    with pytest.raises(TypeError, match="given as output="):
        neardup.dedup(SAMPLE, dir="out")
    with pytest.raises(TypeError, match="unknown setting"):
        neardup.compute_keys(SAMPLE, colour="red")


def test_bad_setting_values_are_value_errors():
    with pytest.raises(ValueError, match="setting num_perm: invalid type"):
        neardup.dedup(SAMPLE, num_perm="many")
    with pytest.raises(ValueError, match="setting hash: unknown variant `sha`"):
        neardup.dedup(SAMPLE, hash="sha")
    with pytest.raises(ValueError, match=r"--threshold must be within \[0, 1\], got 1.5"):
        neardup.dedup(SAMPLE, threshold=1.5)
    with pytest.raises(ValueError, match="--bands and --rows go together"):
        neardup.stream(SAMPLE, bands=4)
    with pytest.raises(ValueError, match="unknown compat preset"):
        neardup.dedup(SAMPLE, compat="datatrove")


def test_settings_file_then_keywords(tmp_path):
    (tmp_path / "s.toml").write_text('[dedup]\nthreshold = 0.95\n[input]\nid_field = "id"\n')
    report = neardup.dedup(SAMPLE, config=tmp_path / "s.toml", threads=1)
    assert report["config"]["dedup"]["threshold"] == 0.95
    assert report["config"]["input"]["id_field"] == "id"
    report = neardup.dedup(SAMPLE, config=tmp_path / "s.toml", threshold=0.6)
    assert report["config"]["dedup"]["threshold"] == 0.6
    assert neardup.defaults()["threshold"] == 0.8
    assert "threshold" in neardup.settings()["dedup"]


def test_missing_inputs_are_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere: no such file or directory"):
        neardup.dedup(tmp_path / "nowhere", output=tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        neardup.stream(tmp_path / "nowhere")
    assert not (tmp_path / "out").exists()


def test_output_errors_are_os_errors(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.jsonl").write_text("{}\n")
    with pytest.raises(OSError, match="out"):
        neardup.dedup(SAMPLE, output=tmp_path / "out")
    assert (tmp_path / "out" / "old.jsonl").read_text() == "{}\n"
    (tmp_path / "file").write_text("")
    # Paths that cannot be written are refused before any work, as the CLI's usage errors.
    with pytest.raises(ValueError, match="file is not a directory"):
        neardup.dedup(SAMPLE, decisions=tmp_path / "file" / "d.jsonl")
    # The system's error keeps its errno.
    with pytest.raises(OSError, match="File name too long") as caught:
        neardup.dedup(SAMPLE, decisions=tmp_path / ("n" * 300 + ".jsonl"))
    assert caught.value.errno == errno.ENAMETOOLONG


def test_prefer_keeps_the_preferred_copy_and_bad_ranks_are_input_errors(tmp_path):
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron"
    rows = [
        {"text": base, "score": 1},
        {"text": base + " pi rho", "score": 5},
        {"text": base + " pi", "score": None},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def kept(**settings) -> list:
        return [d.record for d in neardup.stream(str(path), threshold=0.7, **settings) if d.keep]

    assert kept() == [0]
    assert kept(prefer="longest") == [1]
    assert kept(prefer="shortest") == [0]
    assert kept(prefer="score:desc") == [1]
    # A null score ranks after every number.
    assert kept(prefer="score:asc") == [0]
    with pytest.raises(ValueError, match="FIELD:desc"):
        kept(prefer="score")
    rows[2]["score"] = "high"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(neardup.InputError, match="record 2: the field `score` holds a string"):
        kept(prefer="score:desc")
    # The in-memory deduper decides texts as they come: it has no preference.
    with pytest.raises(TypeError, match="prefer is not taken here"):
        neardup.Deduper(prefer="longest")


def test_bad_records_with_on_error_fail_are_input_errors():
    with pytest.raises(neardup.InputError, match="malformed.jsonl"):
        neardup.dedup(DATA / "bad" / "malformed.jsonl", on_error="fail")
    # Skipped and counted by default.
    report = neardup.dedup(DATA / "bad" / "malformed.jsonl")
    assert report["totals"]["errors"] > 0


def test_runs_print_nothing_but_bars(capfd, monkeypatch):
    # However slow the machine, this run ends before its bar is due.
    monkeypatch.setattr(neardup, "PROGRESS_AFTER_SECONDS", 600.0)
    neardup.dedup(SAMPLE)
    list(neardup.stream(SAMPLE))
    neardup.Deduper()("a text")
    assert capfd.readouterr() == ("", "")


class _FakeRun:
    """Progress of a run going through stage 1 then stage 2."""

    def __init__(self):
        self.steps = [(1, 10, 100, 1), (1, 100, 100, 9), (2, 50, 100, 5)]

    def progress(self):
        return self.steps.pop(0)


def test_progress_bars_follow_the_stages():
    made = []

    class Bar:
        def __init__(self, total, desc, **_):
            self.total, self.desc, self.n, self.closed = total, desc, 0, False
            made.append(self)

        def set_postfix_str(self, s, refresh):
            self.postfix = s

        def refresh(self):
            pass

        def close(self):
            self.closed = True

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    # On a terminal (elsewhere: lines, test_front_door.py).
    bars = neardup._Bars(Bar, show_at=0.0, stream=Terminal())
    run = _FakeRun()
    for _ in range(3):
        bars.update(run)
    bars.close()
    assert [b.desc.strip() for b in made] == ["stage 1 keys", "stage 2 dedup"]
    assert made[0].n == 100 and made[0].closed and made[1].n == 50 and made[1].closed
    assert made[1].postfix == "5 samples"
    # Before its time, nothing is shown.
    late = neardup._Bars(Bar, show_at=float("inf"), stream=Terminal())
    late.update(_FakeRun())
    assert len(made) == 2


def test_runs_against_a_saved_index_get_the_decisions_of_one_joint_run(tmp_path, cli):
    """dedup(A, index_out=) then dedup(B, against=) and stream(B, against=) give B's records
    exactly the decisions they get in one run over A then B (the CLI's joint run)."""
    a, b = [SAMPLE / "part-0.jsonl"], [SAMPLE / "part-1.jsonl", SAMPLE / "part-2.parquet"]
    cli("dedup", *a, *b, "--decisions", tmp_path / "joint.jsonl", "--id-field", "id")
    joint = read_jsonl(tmp_path / "joint.jsonl")
    in_b = [r for r in joint if r["file"] != str(a[0])]
    neardup.dedup(
        [str(p) for p in a], decisions=tmp_path / "a.jsonl", index_out=str(tmp_path / "idx-a"),
        id_field="id",
    )
    assert read_jsonl(tmp_path / "a.jsonl") == [r for r in joint if r["file"] == str(a[0])]
    report = neardup.dedup(
        [str(p) for p in b], decisions=tmp_path / "b.jsonl", against=[str(tmp_path / "idx-a")],
        id_field="id",
    )
    assert read_jsonl(tmp_path / "b.jsonl") == in_b
    assert report["against"]["representatives"] > 0
    assert any(r["dup_of_file"] == str(a[0]) for r in in_b), "no drop across the runs"
    streamed = list(neardup.stream(b, against=[str(tmp_path / "idx-a")], id_field="id"))
    assert [(d.file, d.record, d.keep, d.reason, d.dup_of_file, d.dup_of_record, d.dup_of_id)
            for d in streamed] == [
        (r["file"], r["record"], r["keep"], r["reason"], r.get("dup_of_file"),
         r.get("dup_of_record"), r.get("dup_of_id"))
        for r in in_b
    ]
    with pytest.raises(ValueError, match="threshold: 0.8 vs 0.7"):
        neardup.dedup(b, decisions=tmp_path / "x.jsonl", against=[str(tmp_path / "idx-a")],
                      id_field="id", threshold=0.7)
    with pytest.raises(FileNotFoundError):
        neardup.dedup(b, decisions=tmp_path / "x.jsonl", against=[str(tmp_path / "missing")],
                      id_field="id")
    with pytest.raises(TypeError, match="index_out is not taken here"):
        neardup.stream(b, index_out=str(tmp_path / "idx-b"))
