"""Regenerates the small fixtures of tests/data/corpus and tests/data/bad (neardup-corpus tests).

Run with any Python 3 that has pyarrow and zstandard-capable pyarrow:  python make_fixtures.py
The outputs are committed; the Rust tests never run this script.
"""
import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = HERE
BAD = os.path.join(os.path.dirname(HERE), "bad")


def write(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)


def zstd_compress(data: bytes) -> bytes:
    # pyarrow ships a zstd codec, so no extra module is needed.
    return pa.Codec("zstd").compress(data, asbytes=True)


# ---------------------------------------------------------------- good corpus (round trips)
lines = []
for i in range(120):
    rec = {"id": i, "text": f"document {i}\nline two \u00e9\u4e2d \"quoted\" {i * 7}", "meta": {"body": f"body {i}", "n": 1.50}}
    if i % 3 == 0:
        lines.append(json.dumps(rec, ensure_ascii=False))
    elif i % 3 == 1:
        # other key order, other spacing, escapes kept as written
        lines.append('{"text":"doc %d\\u00e9\\n\\ttab","id":%d.0,  "meta" : {"n":1e2,"body":"b%d"}}' % (i, i, i))
    else:
        lines.append(json.dumps(rec, ensure_ascii=True, separators=(",", ":")))
body = "\n".join(lines[:60]) + "\r\n" + "\n".join(lines[60:100]) + "\n\n   \n" + "\n".join(lines[100:])
# no trailing newline: the last line must survive byte for byte
raw = body.encode("utf-8")
write(os.path.join(CORPUS, "sample.jsonl"), raw)
write(os.path.join(CORPUS, "sample.jsonl.gz"), gzip.compress(raw, mtime=0))
write(os.path.join(CORPUS, "sample.jsonl.zst"), zstd_compress(raw))

n = 200
table = pa.table(
    {
        "id": pa.array(range(n), pa.int64()),
        "text": pa.array([None if i % 50 == 7 else f"parquet text {i} \u00e9" for i in range(n)], pa.string()),
        "meta": pa.array([None if i % 40 == 3 else {"body": f"nested {i}", "lang": "en"} for i in range(n)],
                         pa.struct([("body", pa.string()), ("lang", pa.string())])),
        "title": pa.array([f"title {i}" for i in range(n)], pa.large_string()),
        "view": pa.array([f"view {i}" for i in range(n)], pa.string_view()),
        "score": pa.array([i / 3 for i in range(n)], pa.float64()),
    }
).replace_schema_metadata({"origin": "neardup fixture"})
pq.write_table(table, os.path.join(CORPUS, "sample.parquet"), row_group_size=50, compression="zstd")

# ---------------------------------------------------------------- bad inputs
def rec(i, text="good"):
    return json.dumps({"id": i, "text": f"{text} {i}"})

write(os.path.join(BAD, "malformed.jsonl"), "\n".join([
    rec(0), '{"id": 1, "text": "unterminated}', rec(2), "[1, 2, 3]", rec(4), '{"id": 5, "text": "x",}', rec(6),
]).encode() + b"\n")

write(os.path.join(BAD, "fields.jsonl"), "\n".join([
    rec(0), '{"id": 1}', rec(2), '{"id": 3, "text": null}', rec(4), '{"id": 5, "text": 42}',
    '{"id": 6, "text": {"a": "b"}}', rec(7),
]).encode() + b"\n")

write(os.path.join(BAD, "invalid_utf8.jsonl"),
      rec(0).encode() + b"\n" + b'{"id": 1, "text": "bad \xff\xfe byte"}\n' + rec(2).encode() + b"\n")

write(os.path.join(BAD, "empty_text.jsonl"), "\n".join([
    rec(0), '{"id": 1, "text": ""}', '{"id": 2, "text": "  \\n\\t "}', "", "   \t", rec(5),
]).encode() + b"\n")

many = ("\n".join(rec(i, "truncated stream record " + "x" * 200) for i in range(1500)) + "\n").encode()
gz = gzip.compress(many, mtime=0)
write(os.path.join(BAD, "truncated.jsonl.gz"), gz[: len(gz) * 6 // 10])
zs = zstd_compress(many)
write(os.path.join(BAD, "truncated.jsonl.zst"), zs[: len(zs) * 6 // 10])
write(os.path.join(BAD, "not_gzip.jsonl.gz"), b"this is not gzip data at all\n")

good = pa.table({"id": pa.array(range(300), pa.int64()),
                 "text": pa.array([f"row {i} " + "words " * (i % 17) for i in range(300)], pa.string())})
path = os.path.join(BAD, "corrupt_footer.parquet")
pq.write_table(good, path, row_group_size=100, compression="zstd")
data = bytearray(open(path, "rb").read())
# Footer length field (4 bytes before the final magic) now points before the file start.
data[-8:-4] = (0x7FFFFFF0).to_bytes(4, "little")
write(path, bytes(data))

path = os.path.join(BAD, "corrupt_page.parquet")
pq.write_table(good, path, row_group_size=100, compression="zstd", use_dictionary=False)
md = pq.ParquetFile(path).metadata
col = md.row_group(1).column(1)  # the text column of the second row group
start = col.data_page_offset
data = bytearray(open(path, "rb").read())
data[start : start + 24] = b"\xff" * 24  # garbage page header
write(path, bytes(data))

pq.write_table(pa.table({"id": pa.array([0, 1, 2], pa.int64()),
                         "text": pa.array(["schema a 0", "schema a 1", "schema a 2"])}),
               os.path.join(BAD, "schema_a.parquet"))
pq.write_table(pa.table({"id": pa.array([0, 1], pa.int64()), "text": pa.array([10, 11], pa.int64())}),
               os.path.join(BAD, "schema_b.parquet"))
print("ok")
