"""neardup.dedup_table and neardup.drop_duplicates: tables in memory (pyarrow, polars, pandas,
datasets) decided as the file runner decides the same rows written as JSONL."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import neardup
from conftest import SAMPLE, read_jsonl

# The datasets here are made locally; nothing may be fetched from the Hub.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def sample_rows() -> list:
    """The sample corpus's records (id, text), with near and exact copies of some of them mixed
    in, so that every reason occurs."""
    import pyarrow.parquet as pq

    rows = []
    for path in sorted(SAMPLE.iterdir()):
        if path.suffix == ".jsonl":
            rows += [{"id": r["id"], "text": r["text"]} for r in read_jsonl(path)]
        elif path.suffix == ".parquet":
            t = pq.read_table(path, columns=["id", "text"])
            rows += t.to_pylist()
    rng = random.Random(7)
    copies = []
    for i, r in enumerate(rows[:120]):
        text = r["text"]
        if i % 3 == 0:
            copies.append({"id": f"exact-{i}", "text": text})
        elif i % 3 == 1 and len(text) > 200:
            cut = rng.randrange(len(text) // 2, len(text))
            copies.append({"id": f"near-{i}", "text": text[:cut] + " edited " + text[cut:]})
    rows += copies
    rows.append({"id": "blank", "text": "   "})
    rng.shuffle(rows)
    return rows


ROWS = sample_rows()


def write_jsonl(path: Path, rows: list) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def file_decisions(cli, tmp_path: Path, rows: list, *args) -> list:
    """The decisions `neardup dedup` makes over `rows` written as one JSONL file."""
    src = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "decisions.jsonl"
    if out.exists():
        out.unlink()
    cli("dedup", src, "--decisions", out, *args)
    return read_jsonl(out)


def assert_same(table: pa.Table, want: list) -> None:
    """The table's decisions are the decisions file's, row by row."""
    assert table.num_rows == len(want)
    got = table.to_pylist()
    for row, (g, w) in enumerate(zip(got, want)):
        assert w["record"] == row
        assert g["keep"] == w["keep"], row
        assert g["reason"] == w["reason"], row
        assert g["dup_of"] == w["dup_of_record"], row
        if w["similarity"] is None:
            assert g["similarity"] is None, row
        else:
            assert math.isclose(g["similarity"], w["similarity"], rel_tol=1e-9), row
        assert g["cluster"] == w["cluster_record"], row
        if "id" in g:
            assert g["id"] == w["id"] and g["dup_of_id"] == w["dup_of_id"], row


def test_a_pyarrow_table_is_decided_as_its_rows_in_a_file(cli, tmp_path):
    table = pa.Table.from_pylist(ROWS)
    got = neardup.dedup_table(table, column="text", threads=2)
    assert got.column_names == ["keep", "reason", "dup_of", "similarity", "cluster"]
    assert got.schema.field("dup_of").type == pa.int64()
    reasons = set(got.column("reason").to_pylist())
    assert {"unique", "near", "exact", "empty"} <= reasons
    assert_same(got, file_decisions(cli, tmp_path, ROWS))
    report = neardup.report_of(got)
    assert report["totals"]["records_in"] == len(ROWS)


def test_decisions_do_not_depend_on_threads_batches_or_block_size():
    table = pa.Table.from_pylist(ROWS)
    one = neardup.dedup_table(table, threads=1)
    # Many small batches (a chunked column), read by several threads.
    batches = table.to_batches(max_chunksize=37)
    chunked = pa.Table.from_batches(batches)
    assert chunked.column("text").num_chunks > 10
    assert neardup.dedup_table(chunked, threads=3).equals(one)
    assert neardup.dedup_table(pa.RecordBatchReader.from_batches(table.schema, batches)).equals(one)


def test_string_encodings_are_all_read_alike():
    table = pa.Table.from_pylist(ROWS)
    want = neardup.dedup_table(table)
    text = table.column("text")
    for typ in (pa.large_string(), pa.string_view()):
        other = table.set_column(1, "text", text.cast(typ))
        assert other.schema.field("text").type == typ
        assert neardup.dedup_table(other).equals(want), typ
    encoded = table.set_column(1, "text", text.dictionary_encode())
    assert pa.types.is_dictionary(encoded.schema.field("text").type)
    assert neardup.dedup_table(encoded).equals(want)


def test_several_columns_are_joined_as_fields_are(cli, tmp_path):
    rows = [
        {"title": r["id"].rsplit("/", 1)[-1], "body": r["text"], "id": r["id"]} for r in ROWS
    ]
    table = pa.Table.from_pylist(rows)
    got = neardup.dedup_table(table, column=["title", "body"], id_field="id")
    assert got.column_names[-2:] == ["id", "dup_of_id"]
    want = file_decisions(cli, tmp_path, rows, "--field", "title", "--field", "body",
                          "--id-field", "id")
    assert_same(got, want)


def test_drop_duplicates_returns_the_kept_rows_as_the_type_given():
    table = pa.Table.from_pylist(ROWS)
    keep = neardup.dedup_table(table).column("keep").to_numpy(zero_copy_only=False)
    want = table.filter(pa.array(keep))
    assert want.num_rows < table.num_rows

    kept = neardup.drop_duplicates(table)
    assert isinstance(kept, pa.Table) and kept.equals(want)

    batch = table.combine_chunks().to_batches()[0]
    kept = neardup.drop_duplicates(batch)
    assert isinstance(kept, pa.RecordBatch) and pa.Table.from_batches([kept]).equals(want)

    kept = neardup.drop_duplicates(pa.RecordBatchReader.from_batches(table.schema,
                                                                     table.to_batches(50)))
    assert isinstance(kept, pa.Table) and kept.equals(want)

    kept, decisions = neardup.drop_duplicates(table, with_decisions=True)
    assert kept.equals(want) and decisions.num_rows == table.num_rows


def test_polars_dataframe():
    pl = pytest.importorskip("polars")
    table = pa.Table.from_pylist(ROWS)
    want = neardup.dedup_table(table)
    frame = pl.from_arrow(table)
    # polars exports its strings as string views.
    assert neardup.dedup_table(frame).equals(want)
    kept = neardup.drop_duplicates(frame, column="text")
    assert isinstance(kept, pl.DataFrame)
    keep = want.column("keep").to_pylist()
    assert kept["id"].to_list() == [r["id"] for r, k in zip(ROWS, keep) if k]


def test_pandas_dataframe_keeps_its_index():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(ROWS, index=[f"r{i}" for i in range(len(ROWS))])
    want = neardup.dedup_table(pa.Table.from_pylist(ROWS))
    assert neardup.dedup_table(frame).equals(want)
    kept = neardup.drop_duplicates(frame)
    assert isinstance(kept, pd.DataFrame)
    keep = want.column("keep").to_pylist()
    assert list(kept.index) == [f"r{i}" for i, k in enumerate(keep) if k]
    assert list(kept["id"]) == [r["id"] for r, k in zip(ROWS, keep) if k]


def test_hugging_face_dataset_through_its_arrow_table(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    want = neardup.dedup_table(pa.Table.from_pylist(ROWS))
    assert neardup.dedup_table(ds).equals(want)
    kept = neardup.drop_duplicates(ds)
    assert isinstance(kept, datasets.Dataset)
    keep = want.column("keep").to_pylist()
    assert kept["id"] == [r["id"] for r, k in zip(ROWS, keep) if k]

    # A dataset on disk (memory-mapped Arrow), and one whose rows an indices mapping reorders.
    ds.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    assert neardup.dedup_table(loaded).equals(want)
    order = list(reversed(range(len(ROWS))))
    shuffled = ds.select(order)
    rows = [ROWS[i] for i in order]
    assert neardup.dedup_table(shuffled).equals(neardup.dedup_table(pa.Table.from_pylist(rows)))


def test_a_missing_column_is_named_with_the_columns_there_are():
    table = pa.Table.from_pylist(ROWS)
    with pytest.raises(KeyError, match=r'no column "txt"; its columns: "id", "text"'):
        neardup.dedup_table(table, column="txt")
    with pytest.raises(KeyError, match="id_field"):
        neardup.dedup_table(table, id_field="url")


def test_a_column_that_is_not_strings_is_refused():
    table = pa.table({"text": pa.array([1, 2, 3])})
    with pytest.raises(TypeError, match=r'column "text" holds Int64, not strings'):
        neardup.dedup_table(table)
    with pytest.raises(TypeError, match="data must be"):
        neardup.dedup_table([{"text": "a"}])
    with pytest.raises(TypeError, match="column="):
        neardup.dedup_table(pa.table({"text": ["a"]}), fields=["text"])


def test_nulls_are_decided_as_the_file_runner_decides_null_fields(cli, tmp_path):
    texts = [r["text"] for r in ROWS[:60]]
    with_nulls = [None if i % 7 == 0 else t for i, t in enumerate(texts)]
    with_nulls[1] = ""
    table = pa.table({"text": with_nulls})
    got = neardup.dedup_table(table)
    # The same rows in a JSONL file, nulls as JSON nulls: the same decisions, row by row.
    want = file_decisions(cli, tmp_path, [{"text": t} for t in with_nulls])
    assert_same(got, want)
    reasons = got.column("reason").to_pylist()
    assert [r for r, t in zip(reasons, with_nulls) if t is None] == ["error"] * 9
    assert reasons[1] == "empty"
    report = neardup.report_of(got)
    assert report["totals"]["errors"] == 9
    assert report["stage2"]["skipped"] == {"null_field": 9}
    # A null is no empty text: empty="drop" drops the empty string and keeps the nulls, as the
    # file runner passes a null field's record through.
    dropped = neardup.dedup_table(table, empty="drop")
    keep = dropped.column("keep").to_pylist()
    assert all(k for k, t in zip(keep, with_nulls) if t is None)
    assert keep[1] is False
    want = file_decisions(cli, tmp_path, [{"text": t} for t in with_nulls], "--empty", "drop")
    assert_same(dropped, want)
    # drop_duplicates keeps the rows whose text is null.
    kept = neardup.drop_duplicates(table)
    assert kept.column("text").null_count == 9


def test_expand_mode_and_outputs_are_refused():
    table = pa.table({"a": ["x"], "b": ["y"]})
    with pytest.raises(ValueError, match="expand"):
        neardup.dedup_table(table, column=["a", "b"], fields_mode="expand")
    with pytest.raises(TypeError, match="unknown setting"):
        neardup.dedup_table(table, column="a", output="out")


def test_an_empty_table():
    got = neardup.dedup_table(pa.table({"text": pa.array([], pa.string())}))
    assert got.num_rows == 0 and got.column_names[0] == "keep"


def test_prefer_a_column_as_the_file_runner_does(cli, tmp_path):
    rng = random.Random(3)
    rows = [dict(r, score=rng.randrange(1000)) for r in ROWS]
    got = neardup.dedup_table(pa.Table.from_pylist(rows), prefer="score:desc")
    want = file_decisions(cli, tmp_path, rows, "--prefer", "score:desc")
    assert_same(got, want)
    # Some set keeps a later row than the one input order would keep.
    first = neardup.dedup_table(pa.Table.from_pylist(rows))
    assert got.column("keep").to_pylist() != first.column("keep").to_pylist()
    with pytest.raises(KeyError, match="prefer"):
        neardup.dedup_table(pa.Table.from_pylist(ROWS), prefer="score:desc")


def test_against_a_saved_index(cli, tmp_path):
    earlier, later = ROWS[: len(ROWS) // 2], ROWS[len(ROWS) // 2 :]
    base = write_jsonl(tmp_path / "earlier.jsonl", earlier)
    index = tmp_path / "earlier.ndx"
    cli("dedup", base, "--decisions", tmp_path / "earlier-decisions.jsonl", "--index-out", index)
    got = neardup.dedup_table(pa.Table.from_pylist(later), against=[str(index)])
    want = file_decisions(cli, tmp_path, later, "--against", index)
    assert got.num_rows == len(later)
    on_index = 0
    for row, (g, w) in enumerate(zip(got.to_pylist(), want)):
        assert (g["keep"], g["reason"]) == (w["keep"], w["reason"]), row
        if w["dup_of_file"] is not None and w["dup_of_file"].endswith("earlier.jsonl"):
            on_index += 1
            assert g["dup_of"] is None and g["cluster"] is None
            assert (g["dup_of_file"], g["dup_of_record"]) == (w["dup_of_file"], w["dup_of_record"])
        else:
            assert g["dup_of"] == w["dup_of_record"] and g["dup_of_file"] is None, row
    assert on_index > 0
