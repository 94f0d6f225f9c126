"""A new user's first tries at giving data in memory to calls that read files: each is refused
with a TypeError that says what was given and which call takes it, before anything is read or
written (no text taken for a path and printed back, no column names taken for files)."""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import pandas
import pyarrow
import pytest

import neardup
from conftest import SAMPLE, sample_texts

READS = "reads files: its inputs are paths (files, directories, glob patterns), but "


def texts():
    return sample_texts()[:20]


CASES = {
    "list-of-texts": (texts, "it was given texts: 'while while 关键字", "neardup.Deduper()"),
    "one-text": (lambda: texts()[0], "it was given texts: 'while while 关键字", "neardup.Deduper()"),
    "pandas": (lambda: pandas.DataFrame({"text": texts()}), "a pandas.DataFrame;",
               'neardup.drop_duplicates(data, column="text")'),
    "pyarrow": (lambda: pyarrow.table({"text": texts()}), "a pyarrow.Table;",
                'neardup.dedup_table(data, column="text")'),
    "hf-dataset": (lambda: datasets.Dataset.from_dict({"text": texts()}),
                   "a datasets.Dataset;", 'neardup.drop_duplicates(data, column="text")'),
    "hf-dataset-dict": (
        lambda: datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts()})}),
        "a datasets.DatasetDict (its split names would be taken for paths); pass one split",
        'neardup.drop_duplicates(data["train"], column="text")',
    ),
    "rows": (lambda: list(datasets.Dataset.from_dict({"text": texts()})), "rows (dicts",
             "neardup.drop_duplicates"),
    "numbers": (lambda: [str(SAMPLE), 3], "but input 1 is of type int", None),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda data, out: neardup.dedup(data, output=out / "out", progress=False), "neardup.dedup"),
        (lambda data, out: list(neardup.stream(data)), "neardup.stream"),
        (lambda data, out: neardup.compute_keys(data), "neardup.compute_keys"),
        (lambda data, out: neardup.keys(data, 0, out / "k.ndk", progress=False), "neardup.keys"),
    ],
    ids=["dedup", "stream", "compute_keys", "keys"],
)
def test_data_in_memory_is_refused_naming_what_was_given_and_the_call_that_takes_it(
    tmp_path: Path, case: str, call, name: str
):
    make, given, advice = CASES[case]
    with pytest.raises(TypeError) as raised:
        call(make(), tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{name}() {READS}"), message
    assert given in message, message
    if advice is not None:
        assert advice in message, message
    # No whole document printed back.
    assert len(message) < 600, message
    assert os.listdir(tmp_path) == []


def test_a_long_text_is_quoted_by_its_beginning_and_its_length(tmp_path: Path):
    text = texts()[0]
    with pytest.raises(TypeError) as raised:
        neardup.dedup([str(SAMPLE), text], output=tmp_path / "out")
    message = str(raised.value)
    assert f"texts: {text[:40].replace(chr(10), ' ')!r}… (input 1), {len(text):,} characters, is no path" in message, message
    assert text not in message


def test_paths_in_every_form_still_run(tmp_path: Path):
    files = sorted(SAMPLE.iterdir())
    expect = neardup.dedup(str(SAMPLE), decisions=tmp_path / "a.jsonl", progress=False)
    for n, given in enumerate([SAMPLE, [SAMPLE], (str(f) for f in files), tuple(files)]):
        report = neardup.dedup(given, decisions=tmp_path / f"d{n}.jsonl", progress=False)
        assert report["totals"] == expect["totals"]
