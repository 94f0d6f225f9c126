"""neardup.dedup_table over a stream larger than memory: a callable that opens a fresh Arrow
stream for each stage, read batch by batch."""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import neardup
from conftest import DATA, REPO, SAMPLE, read_jsonl


@functools.lru_cache(maxsize=1)
def pieces() -> list:
    """Real text to build documents of: paragraphs of about 600 characters made of the sample
    corpus's sentences, and of the Japanese and Chinese sentences of tests/data/cjk."""
    sentences = []
    for path in sorted(SAMPLE.glob("*.jsonl")):
        for r in read_jsonl(path):
            sentences += [s.strip() + "." for s in r["text"].split(".") if len(s.strip()) > 30]
    for name in ("ja.jsonl", "zh.jsonl"):
        sentences += [r["text"] for r in read_jsonl(DATA / "cjk" / name)]
    found, paragraph = [], []
    for s in sentences:
        paragraph.append(s)
        if sum(map(len, paragraph)) >= 600:
            found.append(" ".join(paragraph))
            paragraph = []
    return found


def batches(seed: int, count: int, rows: int) -> "list[pa.RecordBatch]":
    """`count` batches of `rows` documents, the same for the same seed: each document eight to
    twenty random pieces, every seventh a near copy of an earlier one (one piece replaced)."""
    pool = pieces()
    out = []
    for b in range(count):
        rng = random.Random(seed * 1_000_003 + b)
        docs = []
        for i in range(rows):
            if i % 7 == 6:
                parts = list(docs[rng.randrange(i)][1])
                parts[rng.randrange(len(parts))] = rng.choice(pool)
            else:
                parts = rng.sample(pool, rng.randint(8, 20))
            docs.append((f"{b}-{i}", parts))
        out.append(pa.record_batch({
            "id": [d[0] for d in docs],
            "text": [" ".join(d[1]) for d in docs],
        }))
    return out


def test_a_reopened_stream_is_decided_as_the_same_table():
    parts = batches(1, 6, 400)
    table = pa.Table.from_batches(parts)
    opened = []

    def open_stream():
        opened.append(1)
        return pa.RecordBatchReader.from_batches(table.schema, iter(parts))

    want = neardup.dedup_table(table, threads=2)
    got = neardup.dedup_table(open_stream, threads=2)
    assert got.equals(want)
    assert {"unique", "near"} <= set(got.column("reason").to_pylist())
    # Once for each stage.
    assert len(opened) == 2
    kept = neardup.drop_duplicates(open_stream, threads=2)
    assert isinstance(kept, pa.RecordBatchReader)
    assert kept.read_all().equals(neardup.drop_duplicates(table, threads=2))
    # The ids and a preference work on a stream as on a table.
    with_ids = neardup.dedup_table(open_stream, id_field="id")
    assert with_ids.column("dup_of_id").to_pylist() == neardup.dedup_table(
        table, id_field="id").column("dup_of_id").to_pylist()


def test_an_empty_stream_is_an_empty_table():
    schema = pa.schema([("text", pa.string())])

    def open_stream():
        return pa.RecordBatchReader.from_batches(schema, iter([]))

    got = neardup.dedup_table(open_stream)
    want = neardup.dedup_table(pa.table({"text": pa.array([], pa.string())}))
    assert got.num_rows == 0 and got.schema == want.schema
    assert neardup.drop_duplicates(open_stream).read_all().num_rows == 0
    # Rows without any text are decided as the same rows in a table are.
    blank = pa.record_batch({"text": ["", "   "]})
    got = neardup.dedup_table(lambda: pa.RecordBatchReader.from_batches(schema, iter([blank])))
    assert got.equals(neardup.dedup_table(pa.Table.from_batches([blank])))


def test_a_stream_that_changes_between_passes_or_fails_is_an_error():
    parts = batches(2, 3, 300)
    calls = []

    def shorter_later():
        calls.append(1)
        given = parts if len(calls) == 1 else parts[:2]
        return pa.RecordBatchReader.from_batches(parts[0].schema, iter(given))

    with pytest.raises(Exception, match="record|row|count|chunk"):
        neardup.dedup_table(shorter_later)

    def failing():
        def gen():
            yield parts[0]
            raise OSError("the disk went away")

        return pa.RecordBatchReader.from_batches(parts[0].schema, gen())

    with pytest.raises(OSError, match="from row 300.*the disk went away"):
        neardup.dedup_table(failing)

    with pytest.raises(TypeError, match="Arrow stream"):
        neardup.dedup_table(lambda: [1, 2, 3])
    with pytest.raises(KeyError, match='no column "body"'):
        neardup.dedup_table(lambda: pa.RecordBatchReader.from_batches(
            parts[0].schema, iter(parts)), column="body")


# The child reads a stream of STREAM_BATCHES batches that it makes as it goes (nothing holds the
# whole stream), under memory_limit, and reports its peak memory and the decisions.
CHILD = textwrap.dedent(
    """
    import json, resource, sys
    sys.path.insert(0, {tests!r})
    import pyarrow as pa
    import pyarrow.parquet as pq
    import neardup
    from test_table_streams import batches

    schema = batches(3, 1, 10)[0].schema

    def open_stream():
        def gen():
            for b in range({count}):
                yield batches(3 + b, 1, {rows})[0]
        return pa.RecordBatchReader.from_batches(schema, gen())

    # The memory a process with pyarrow, neardup and one batch made holds, before the run.
    batches(3, 1, {rows})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    got = neardup.dedup_table(open_stream, threads=2, memory_limit={limit})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    pq.write_table(got.select(["keep", "reason", "dup_of"]), {out!r})
    print(json.dumps({{"before": before, "peak": peak}}))
    """
)


def test_a_stream_larger_than_the_memory_limit_is_read_batch_by_batch(tmp_path):
    count, rows, limit = 70, 500, 64 << 20
    out = tmp_path / "decisions.parquet"
    script = CHILD.format(tests=str(REPO / "crates" / "python" / "tests"), count=count,
                          rows=rows, limit=limit, out=str(out))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout.strip().splitlines()[-1])
    # The same rows held in this process: the stream's size, and the decisions to compare.
    table = pa.Table.from_batches([batches(3 + b, 1, rows)[0] for b in range(count)])
    text_bytes = pa.compute.sum(pa.compute.binary_length(table.column("text"))).as_py()
    assert text_bytes > 3 * limit
    # Held whole, the stream would take more than its text; read batch by batch, the process
    # grows by the batches in flight, the key table and the allocator's slack (the same at
    # twice the text: docs/benchmarks.md), not with the stream.
    grew = memory["peak"] - memory["before"]
    assert grew < text_bytes / 3, (grew, text_bytes)
    want = neardup.dedup_table(table, threads=2).select(["keep", "reason", "dup_of"])
    got = pq.read_table(out)
    assert got.num_rows == table.num_rows
    assert got.equals(want)
    assert got.column("keep").to_pylist().count(False) > 0


def test_a_duckdb_result_and_a_query_run_again():
    duckdb = pytest.importorskip("duckdb")
    parts = batches(4, 2, 300)
    table = pa.Table.from_batches(parts)
    con = duckdb.connect()
    con.register("docs", table)
    want = neardup.dedup_table(table)
    # A relation exports an Arrow stream: read once, as a table.
    relation = con.sql("SELECT id, text FROM docs ORDER BY id")
    ordered = table.sort_by("id")
    assert neardup.dedup_table(relation).equals(neardup.dedup_table(ordered))
    # A query run again for each stage: a stream read batch by batch.
    again = neardup.dedup_table(lambda: con.sql("SELECT * FROM docs"), id_field="id")
    assert again.select(want.column_names).equals(want)
    kept = neardup.drop_duplicates(lambda: con.sql("SELECT * FROM docs")).read_all()
    assert kept.num_rows == want.column("keep").to_pylist().count(True)
