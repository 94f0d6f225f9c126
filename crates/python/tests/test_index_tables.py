"""neardup.Index.check_table: the online index's batch check over a table's rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

import neardup
from conftest import sample_texts


def texts() -> list:
    """The sample corpus's texts with copies of some of them, an empty text and a null."""
    base = sample_texts()
    return base[:150] + ["", None] + base[150:] + base[:25] + [base[7] + " !"]


def as_tuples(decisions) -> list:
    return [(d.id, d.keep, d.reason, d.dup_of, d.similarity) for d in decisions]


def test_a_table_is_checked_as_its_texts_are_in_a_batch():
    rows = texts()
    ids = [f"u{i}" for i in range(len(rows))]
    want = as_tuples(neardup.Index().check_many(rows, ids=ids))
    table = pa.table({"url": ids, "text": rows})
    got = neardup.Index().check_table(table, column="text", id_column="url")
    assert as_tuples(got) == want
    assert {"unique", "exact", "empty", "error"} <= {d.reason for d in got}
    # Chunked, as a large string and dictionary-encoded, without ids, and from polars and pandas.
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=40))
    assert as_tuples(neardup.Index().check_table(chunked, id_column="url")) == want
    for column in (table.column("text").cast(pa.large_string()),
                   table.column("text").dictionary_encode()):
        other = table.set_column(1, "text", column)
        assert as_tuples(neardup.Index().check_table(other, id_column="url")) == want
    no_ids = [(keep, reason) for _, keep, reason, _, _ in want]
    got = neardup.Index().check_table(table)
    assert [(d.keep, d.reason) for d in got] == no_ids
    pl = pytest.importorskip("polars")
    got = neardup.Index().check_table(pl.from_arrow(table), id_column="url")
    assert as_tuples(got) == want
    got = neardup.Index().check_table(table.to_pandas(), id_column="url")
    assert as_tuples(got) == want


def test_rows_are_checked_against_what_the_index_kept_before():
    rows = texts()
    index = neardup.Index()
    index.insert_many(rows[:100])
    got = index.check_table(pa.table({"n": list(range(100, 200)), "text": rows[:100]}),
                            id_column="n")
    assert not any(d.keep for d in got if d.reason != "empty")
    assert all(isinstance(d.id, int) for d in got)
    # A null text is no text (decided `error` and kept, as `check(None)` decides it); a retried id
    # gets its first decision back.
    again = index.check_table(pa.table({"n": [100, 999], "text": ["anything at all", None]}),
                              id_column="n")
    assert (again[0].keep, again[0].reason) == (got[0].keep, got[0].reason)
    assert (again[1].keep, again[1].reason) == (True, "error")
    assert [(d.keep, d.reason) for d in index.check_many([None], ids=[998])] == [(True, "error")]


def test_bad_columns_are_named():
    table = pa.table({"text": ["a b c d e f"], "n": [1.5]})
    with pytest.raises(KeyError, match='no column "body"'):
        neardup.Index().check_table(table, column="body")
    with pytest.raises(TypeError, match="holds Float64"):
        neardup.Index().check_table(table, column="n")
    with pytest.raises(TypeError, match="not strings or integers"):
        neardup.Index().check_table(table, id_column="n")
