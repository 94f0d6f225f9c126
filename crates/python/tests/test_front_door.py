"""What a new user meets around a run, the same in the CLI and in Python: standard output for
`-`, a dry run with only a report, a preference field no record has, the settings named as the
caller spelled them, exit codes as the README states them, plain text (no colours, no bar
frames) in a pipe, progress lines in a log, honest rates on a terminal, and a tidy namespace."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

import neardup
from conftest import REPO, SAMPLE, cli_binary, read_jsonl


def cli(*args: object, cwd: Path = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(cli_binary()), *map(str, args)], capture_output=True, cwd=cwd, timeout=600, **kwargs
    )


def in_a_terminal(args: List[str], cwd: Path) -> Tuple[int, bytes]:
    """Runs the CLI with stderr (and stdout) on a pseudo-terminal; returns its exit code and
    everything it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(cli_binary()), *args], stdout=follower, stderr=follower, cwd=cwd,
        env={**os.environ, "COLUMNS": "160"},
    )
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=600), seen


# --- `-` is standard output --------------------------------------------------------------


def test_decisions_to_stdout_are_the_decisions_file_byte_for_byte(tmp_path):
    to_file = cli("dedup", SAMPLE, "--decisions", tmp_path / "d.jsonl", "--quiet")
    assert to_file.returncode == 0, to_file.stderr
    to_stdout = cli("dedup", SAMPLE, "--decisions", "-", "--quiet", cwd=tmp_path)
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stdout == (tmp_path / "d.jsonl").read_bytes()
    # No file named `-`, nothing left behind.
    assert sorted(os.listdir(tmp_path)) == ["d.jsonl"]


def test_the_report_to_stdout_is_the_report(tmp_path):
    done = cli("dedup", SAMPLE, "--decisions", tmp_path / "d.jsonl", "--report", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["totals"]["records_in"] == 500
    # The summary stays on stderr.
    assert b"500 records in 3 files" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["d.jsonl"]


def test_a_report_names_decisions_sent_to_stdout_as_stdout(tmp_path):
    done = cli("dedup", SAMPLE, "--decisions", "-", "--report", tmp_path / "r.json", "--quiet",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "r.json").read_text()
    report = json.loads(text)
    assert report["paths"]["decisions"] == "-", report["paths"]
    # Not the stand-in file the decisions were staged in (gone once sent).
    assert ".neardup-stdout" not in text
    assert report["config"]["output"]["decisions"] is None
    assert len(done.stdout.splitlines()) == report["totals"]["samples"]


def test_the_output_manifest_names_decisions_sent_to_stdout_as_stdout(tmp_path):
    done = cli("dedup", SAMPLE, "-o", tmp_path / "out", "--decisions", "-", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "_SUCCESS").read_text())
    # What a consumer of the dataset can find the decisions by, with their size.
    assert manifest["decisions"] == {"path": "-", "bytes": len(done.stdout)}
    # And a report sent to stdout names itself so.
    done = cli("dedup", SAMPLE, "--decisions", tmp_path / "d.jsonl", "--report", "-", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["paths"]["report"] == "-"


def test_decisions_and_report_cannot_both_take_stdout(tmp_path):
    done = cli("dedup", SAMPLE, "--decisions", "-", "--report", "-", cwd=tmp_path)
    assert done.returncode == 2
    assert b"--decisions - and --report - both ask for standard output" in done.stderr
    assert done.stdout == b""


def test_a_failed_run_writes_nothing_to_stdout(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    done = cli("dedup", SAMPLE, "-o", tmp_path / "out", "--decisions", "-")
    assert done.returncode == 1, done.stderr
    assert done.stdout == b""


# --- a dry run: only a report, in both -----------------------------------------------------


def test_a_run_with_only_a_report_is_a_dry_run_in_the_cli_as_in_python(tmp_path):
    done = cli("dedup", SAMPLE, "--report", tmp_path / "cli.json", "--quiet")
    assert done.returncode == 0, done.stderr
    from_python = neardup.dedup(SAMPLE, report=tmp_path / "py.json", progress=False)
    from_cli = json.loads((tmp_path / "cli.json").read_text())
    assert from_cli["totals"] == from_python["totals"]
    assert from_python["totals"]["records_dropped"] > 0
    assert sorted(os.listdir(tmp_path)) == ["cli.json", "py.json"]


def test_a_run_with_no_output_at_all_is_still_refused_naming_the_dry_run(tmp_path):
    done = cli("dedup", SAMPLE, cwd=tmp_path)
    assert done.returncode == 2
    assert b"--report FILE alone for a dry run" in done.stderr


# --- a report's settings given back ----------------------------------------------------------


def test_a_reports_config_given_back_repeats_the_decisions_and_not_the_outputs(tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    done = cli("dedup", SAMPLE, "-o", first / "out", "--decisions", first / "d.jsonl",
               "--report", first / "r.json", "--index-out", first / "index.ndx", "--overwrite",
               "--spill-dir", first / "spill", "--threshold", "0.6", "--id-field", "id",
               "--quiet")
    assert done.returncode == 0, done.stderr
    report = json.loads((first / "r.json").read_text())
    # Where it read and wrote is kept apart from the settings.
    paths = report["paths"]
    assert paths["inputs"] == [str(SAMPLE)]
    assert paths["output"] == str(first / "out")
    assert paths["decisions"] == str(first / "d.jsonl")
    assert paths["report"] == str(first / "r.json")
    assert paths["index_out"] == str(first / "index.ndx")
    assert paths["spill_dir"] == str(first / "spill")
    assert paths["overwrite"] is True
    config = report["config"]
    assert config["input"]["inputs"] == []
    assert config["keys"]["spill_dir"] is None
    assert config["output"] == {"dir": None, "decisions": None, "report": None,
                                "overwrite": False, "max_output_bytes": None, "index_out": None}
    assert (config["dedup"]["threshold"], config["input"]["id_field"]) == (0.6, "id")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(config))
    before = {p: p.read_bytes() for p in sorted(first.rglob("*")) if p.is_file()}

    # Given back with other outputs: the same decisions, and nothing of the first run touched.
    second = tmp_path / "second"
    second.mkdir()
    done = cli("dedup", "--config", settings, SAMPLE, "--decisions", second / "d.jsonl",
               "--quiet")
    assert done.returncode == 0, done.stderr
    assert (second / "d.jsonl").read_bytes() == (first / "d.jsonl").read_bytes()
    assert {p: p.read_bytes() for p in sorted(first.rglob("*")) if p.is_file()} == before
    assert os.listdir(second) == ["d.jsonl"]
    # Given back alone, it names no output: the run is refused, as any run without one.
    done = cli("dedup", "--config", settings, SAMPLE, cwd=second)
    assert done.returncode == 2, done.stderr
    assert b"give --output DIR" in done.stderr
    # An output directory named anew is not replaced: the report's overwrite does not come back.
    done = cli("dedup", "--config", settings, SAMPLE, "-o", first / "out", "--quiet")
    assert done.returncode == 1, done.stderr
    assert {p: p.read_bytes() for p in sorted(first.rglob("*")) if p.is_file()} == before
    # Python takes it the same way.
    from_python = neardup.dedup(SAMPLE, config=settings, decisions=second / "py.jsonl",
                                progress=False)
    assert (second / "py.jsonl").read_bytes() == (first / "d.jsonl").read_bytes()
    assert from_python["config"] == config


# --- --prefer on a field no record has -------------------------------------------------------


def test_a_preference_field_no_record_has_is_refused_in_both(tmp_path):
    done = cli("dedup", SAMPLE, "--prefer", "quality:desc", "--decisions", tmp_path / "d.jsonl")
    assert done.returncode == 2, done.stderr
    err = done.stderr.decode()
    assert "the preference `quality:desc`: none of the " in err, err
    assert "the field `quality`" in err and "(--prefer quality:desc)" in err, err
    assert not (tmp_path / "d.jsonl").exists()
    with pytest.raises(ValueError) as raised:
        neardup.dedup(SAMPLE, decisions=tmp_path / "d.jsonl", prefer="quality:desc",
                      progress=False)
    assert "the preference `quality:desc`: none of the " in str(raised.value)
    assert "--" not in str(raised.value)


def test_a_preference_field_some_records_have_runs(tmp_path):
    corpus = tmp_path / "in"
    corpus.mkdir()
    rows = read_jsonl(SAMPLE / "part-0.jsonl")
    with open(corpus / "a.jsonl", "w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            if i % 3 == 0:
                r["quality"] = i
            f.write(json.dumps(r) + "\n")
    done = cli("dedup", corpus, "--prefer", "quality:desc", "--decisions", tmp_path / "d.jsonl")
    assert done.returncode == 0, done.stderr


# --- exit codes, words, and names as the caller spelled them --------------------------------


def test_a_non_empty_output_directory_exits_1_as_the_readme_says(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    done = cli("dedup", SAMPLE, "-o", tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert b"pass --overwrite" in done.stderr
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    assert "that is not empty (without `--overwrite`)" in readme and "with exit code 1" in readme
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep me"


README = Path(__file__).resolve().parents[3] / "README.md"


def readme_blocks(language: str) -> List[str]:
    """The README's code blocks in `language`, in order."""
    return re.findall(r"```" + re.escape(language) + r"\n(.*?)```", README.read_text(), re.S)


def as_shell(line: str, tmp_path: Path) -> str:
    """A README command line as a shell runs it here: its comment left out, the CLI under test
    as `neardup`, and /tmp/ (where the README writes) this test's own directory."""
    command = re.split(r"\s+# ", line, maxsplit=1)[0].strip()
    return command.replace("/tmp/", f"{tmp_path}/")


def test_the_readmes_set_up_run_prints_what_the_readme_shows(tmp_path):
    set_up = readme_blocks("sh")[0]
    [run] = [line for line in set_up.splitlines() if line.startswith("neardup dedup")]
    env = {**os.environ, "PATH": f"{cli_binary().parent}:{os.environ['PATH']}"}
    done = subprocess.run(as_shell(run, tmp_path), shell=True, cwd=REPO, env=env,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr
    [summary] = readme_blocks("text")[:1]
    assert summary.strip() in done.stderr.decode(), (summary, done.stderr[-2000:])
    for name in ("part-0.jsonl", "part-1.jsonl", "part-2.parquet", "_SUCCESS"):
        assert (tmp_path / "neardup-sample" / name).is_file(), name
    assert (tmp_path / "neardup-sample.decisions.jsonl").is_file()


def test_the_readmes_30_second_commands_run_as_written_on_the_sample(tmp_path):
    """Every command of "In 30 seconds" that names only `crawl/` and files of its own runs as
    written, in order (so `eval` reads the decisions the first run wrote), with the sample corpus
    as `crawl/`; the rest need object storage, other corpora or fields the sample has not."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "crawl")
    env = {**os.environ, "PATH": f"{cli_binary().parent}:{os.environ['PATH']}"}
    block = readme_blocks("sh")[1]
    ran = []
    for line in block.splitlines():
        command = as_shell(line, tmp_path)
        if not command or re.search(r"s3://|data/|dump-|\bin/|--prefer", command):
            continue
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              timeout=600)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        ran.append(command.split()[:2])
        if "--decisions - |" in command:
            assert b'"keep":false' in done.stdout, command
        if "--report -" in command:
            assert json.loads(done.stdout)["totals"]["records_in"] == 500
    assert ["neardup", "eval"] in ran and ["neardup", "params"] in ran and len(ran) >= 5, ran
    assert (tmp_path / "crawl-dedup" / "_SUCCESS").is_file()


def test_python_messages_name_settings_as_keyword_arguments(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    with pytest.raises(OSError) as raised:
        neardup.dedup(SAMPLE, output=tmp_path / "out", progress=False)
    message = str(raised.value)
    assert "pass overwrite=True" in message and "--overwrite" not in message, message
    with pytest.raises(Exception) as raised:
        neardup.dedup(SAMPLE, decisions=tmp_path / "d.jsonl", fields=["txt"], progress=False)
    message = str(raised.value)
    assert "fields=" in message and "--field" not in message, message


def test_one_file_is_one_file(tmp_path):
    done = cli("dedup", SAMPLE / "part-0.jsonl", "--decisions", tmp_path / "d.jsonl")
    assert done.returncode == 0, done.stderr
    assert b" records in 1 file: kept " in done.stderr, done.stderr


def test_the_write_steps_summary_says_what_it_did(tmp_path):
    def step(*args):
        done = cli(*args, "--quiet", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done

    step("keys", SAMPLE, "-o", "k.ndk")
    step("hot", "k.ndk", "-o", "hot.ndh")
    step("sign", "k.ndk", "--hot", "hot.ndh", "-o", "sig")
    step("decide", "sig", "--hot", "hot.ndh", "--group", "0", "-o", "dec")
    done = cli("write", "k.ndk", "--hot", "hot.ndh", "--decided", "dec", "--decisions", "d.jsonl",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert "0 hot samples checked" not in err, err
    assert "stage 2: the decide steps' decisions applied" in err, err


# --- text in a pipe, progress in a log and on a terminal -------------------------------------


def big_corpus(root: Path, docs: int = 40_000) -> Path:
    import random

    rng = random.Random(5)
    words = [f"w{i}" for i in range(5000)]
    root.mkdir()
    with open(root / "a.jsonl", "w", encoding="utf-8") as f:
        for i in range(docs):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(150))}) + "\n")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return big_corpus(tmp_path_factory.mktemp("progress") / "in")


def test_in_a_pipe_the_cli_writes_lines_without_colours_or_bar_frames(tmp_path, corpus):
    done = cli("dedup", corpus, "--decisions", tmp_path / "d.jsonl", "--threads", "1")
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert "\x1b" not in err and "\r" not in err, repr(err[:2000])
    # A batch job's log says when each stage started, and how far it has gone every 10 s.
    assert re.search(r"stage 1 keys: started, ~\d+ MB to read", err), err
    evaluated = cli("eval", corpus, "--decisions", tmp_path / "d.jsonl", "--samples", "20")
    assert evaluated.returncode == 0, evaluated.stderr
    assert b"\x1b" not in evaluated.stderr + evaluated.stdout


def test_on_a_terminal_the_bars_show_honest_rates(tmp_path, corpus):
    code, seen = in_a_terminal(["dedup", str(corpus), "--decisions", "d.jsonl", "--threads", "1"],
                               tmp_path)
    text = seen.decode(errors="replace")
    assert code == 0, text[-3000:]
    assert "stage 1 keys" in text, text[-3000:]
    units = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20,
             "GiB": 2**30, "TiB": 2**40}
    rates = [float(n) * units[u] for n, u in re.findall(r"([\d.]+) ?([KMGT]?i?B)/s", text)]
    # One core reads a few hundred MB/s at most: a first tick over the blocks read before the
    # bar appeared showed hundreds of GiB/s.
    assert rates, text[-2000:]
    assert all(r < 5e9 for r in rates), sorted(rates)[-5:]


def packed_corpus(root: Path, docs: int = 40_000) -> Path:
    """Half the texts gzip-compressed JSONL, half a Parquet file of many row groups: inputs that
    decode to more bytes than they take on disk."""
    import gzip
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(9)
    words = [f"w{i}" for i in range(5000)]
    texts = [" ".join(rng.choice(words) for _ in range(150)) for _ in range(docs)]
    root.mkdir()
    with gzip.open(root / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        for t in texts[: docs // 2]:
            f.write(json.dumps({"text": t, "meta": "x" * 200}) + "\n")
    table = pa.table({"text": texts[docs // 2 :], "meta": ["x" * 200] * (docs - docs // 2)})
    pq.write_table(table, root / "b.parquet", row_group_size=1000)
    return root


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    return packed_corpus(tmp_path_factory.mktemp("packed") / "in")


def on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.iterdir())


def mb(n: int) -> str:
    return neardup._mb(n)


def test_on_a_terminal_a_bar_fills_to_a_total_that_never_changes(tmp_path, packed):
    """Progress is counted in bytes on disk, as the total is: on gzip and Parquet inputs the
    bar's total stayed put, its count never passed it, and a full bar never fell back."""
    code, seen = in_a_terminal(["dedup", str(packed), "--decisions", "d.jsonl", "--threads", "1"],
                               tmp_path)
    text = seen.decode(errors="replace")
    assert code == 0, text[-3000:]
    drawn = 0
    for stage in ("stage 1 keys", "stage 2 dedup"):
        frames = re.findall(re.escape(stage) + r" *\[[=> ]*\] ([\d.]+) MB of ~([\d.]+ MB) \((\d+) %\)",
                            text)
        # On a quiet machine a stage shorter than a refresh may draw once or, stage 2, not at
        # all; the total of any frame is the inputs' size on disk (the old count in decoded
        # bytes grew it, 17 -> 28 -> 39 MB). A full bar is never drawn at 0 %.
        drawn += len(frames)
        assert not re.search(re.escape(stage) + r" *\[=+\] 0\.0 MB", text), text[-3000:]
        assert {total for _, total, _ in frames} <= {mb(on_disk(packed))}, frames
        done = [float(d) for d, _, _ in frames]
        percent = [int(p) for _, _, p in frames]
        assert done == sorted(done) and percent == sorted(percent), frames
        assert all(d * 1e6 <= on_disk(packed) * 1.0001 for d in done), frames
    assert drawn >= 1, text[-3000:]
    # In a pipe, each stage's line names the same total.
    done = cli("dedup", packed, "--decisions", tmp_path / "d2.jsonl", "--threads", "1")
    assert done.returncode == 0, done.stderr
    # (A stage shorter than the log's refresh at the end of a run may log no line of its own.)
    started = re.findall(r"(stage \d \w+): started, ~([\d.]+ MB) to read", done.stderr.decode())
    assert started and {total for _, total in started} == {mb(on_disk(packed))}, started


def test_python_sees_progress_in_bytes_on_disk_up_to_its_total(tmp_path, packed):
    """What Python's bars draw (a run's progress()): the count never passes the total, which is
    the inputs' size on disk in both stages, and each stage's count only grows, to the total."""
    import time

    run = neardup._native.start_dedup(str(packed), None, str(tmp_path / "d.jsonl"), None,
                                      {"threads": 1})
    seen = []
    while not run.wait(0.01):
        seen.append(run.progress())
    seen.append(run.progress())
    run.result()
    total = on_disk(packed)
    for stage in (1, 2):
        looks = [(done, of) for s, done, of, _ in seen if s == stage]
        assert looks, seen[-5:]
        assert {of for _, of in looks} == {total}, looks[-3:]
        counts = [done for done, _ in looks]
        assert counts == sorted(counts) and counts[-1] <= total, looks[-3:]
    # The run ended with stage 2's count on its total.
    assert seen[-1][:3] == (2, total, total), seen[-1]


def test_python_progress_in_a_log_is_lines_and_on_a_terminal_stays(tmp_path, corpus):
    tqdm = pytest.importorskip("tqdm")
    log = io.StringIO()
    bars = neardup._Bars(tqdm.tqdm, 0.0, stream=log)

    class Run:
        def __init__(self):
            self.steps = [(1, 0, 1000, 0), (1, 500, 1000, 10), (2, 100, 1000, 20)]

        def progress(self):
            return self.steps.pop(0)

    run = Run()
    for _ in range(3):
        bars.update(run)
    bars.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines == [
        "neardup: stage 1 keys: started, ~0.0 MB to read",
        "neardup: stage 2 dedup: started, ~0.0 MB to read",
    ], lines

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    bars = neardup._Bars(tqdm.tqdm, 0.0, stream=screen)
    run = Run()
    for _ in range(3):
        bars.update(run)
    bars.close()
    # The bars were drawn, and the last stays on the screen when the run ends.
    shown = screen.getvalue()
    assert "\r" in shown
    assert "stage 2 dedup" in shown.rstrip("\n").split("\r")[-1], repr(shown[-300:])


# --- the namespace ----------------------------------------------------------------------------


def test_dir_lists_the_package_not_its_imports():
    names = dir(neardup)
    for imported in ("Any", "Dict", "List", "Optional", "os", "sys", "time", "json"):
        assert imported not in names, names
    for public in neardup.__all__:
        assert public in names
    assert "__version__" in names
