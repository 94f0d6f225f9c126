"""Middle level: compute_keys → KeyTable, hot_keys → HotKeys; their numpy views, files and bytes."""

from __future__ import annotations

import numpy as np
import pytest

import neardup
from conftest import SAMPLE


@pytest.fixture(scope="module")
def table():
    return neardup.compute_keys(SAMPLE, shard=0, threads=2)


def test_key_table_view_shares_the_tables_memory(table):
    keys = table.keys
    assert keys.dtype == np.uint64 and keys.shape == (500, 21)
    assert (table.rows, table.columns, table.bands, len(table)) == (500, 21, 20, 500)
    again = table.keys
    assert np.shares_memory(keys, again)
    assert keys.ctypes.data == again.ctypes.data
    assert keys.base is table or keys.base.base is table
    assert not keys.flags.writeable
    with pytest.raises(ValueError):
        keys[0, 0] = 1
    # Reading the bytes back makes a new table with equal rows.
    copy = neardup.KeyTable.from_bytes(table.to_bytes())
    assert copy == table
    assert not np.shares_memory(copy.keys, keys)
    assert np.array_equal(copy.keys, keys)


def test_key_table_files_are_the_clis(tmp_path, cli, table):
    cli("keys", SAMPLE, "--shard", "0", "--out", tmp_path / "cli.ndk")
    assert table.to_bytes() == (tmp_path / "cli.ndk").read_bytes()
    table.save(tmp_path / "py.ndk")
    assert (tmp_path / "py.ndk").read_bytes() == table.to_bytes()
    assert neardup.KeyTable.load(tmp_path / "cli.ndk") == table
    assert [f["records"] for f in table.files] == [200, 200, 100]
    assert table.stats["samples"] == 500
    assert neardup.KeyTable.load(tmp_path / "py.ndk").stats is None


def test_hot_keys_are_the_clis(tmp_path, cli, table):
    cli("keys", SAMPLE, "--shard", "0", "--out", tmp_path / "k.ndk")
    cli("hot", tmp_path / "k.ndk", "--out", tmp_path / "cli.ndh")
    hot = neardup.hot_keys([table])
    assert hot.to_bytes() == (tmp_path / "cli.ndh").read_bytes()
    assert neardup.HotKeys.from_bytes(hot.to_bytes()) == hot
    hot.save(tmp_path / "py.ndh")
    assert neardup.HotKeys.load(tmp_path / "py.ndh") == hot
    keys = hot.keys
    assert keys.dtype == np.uint64 and len(hot) == keys.size > 0
    assert np.all(keys[1:] > keys[:-1])
    assert np.shares_memory(keys, hot.keys) and not keys.flags.writeable
    assert int(keys[0]) in hot and 12345 not in hot
    assert hot.min_key_count == 1 and hot.stats["hot_keys"] == len(hot)
    # Every hot key appears in the table more than once.
    values, counts = np.unique(table.keys, return_counts=True)
    assert np.array_equal(np.sort(values[(counts > 1) & (values != 0)]), keys)


def test_sharded_tables_count_like_one(tmp_path, table):
    parts = [SAMPLE / "part-0.jsonl", SAMPLE / "part-1.jsonl", SAMPLE / "part-2.parquet"]
    shards = [neardup.compute_keys(p, shard=i) for i, p in enumerate(parts)]
    assert np.array_equal(np.concatenate([s.keys for s in shards]), table.keys)
    merged = neardup.hot_keys(reversed(shards))
    assert merged.keys.tolist() == neardup.hot_keys([table]).keys.tolist()
    with pytest.raises(ValueError, match="same shard number"):
        neardup.hot_keys([shards[0], shards[0]])
    other = neardup.compute_keys(parts[0], shard=5, threshold=0.5)
    with pytest.raises(ValueError, match="different settings"):
        neardup.hot_keys([shards[1], other])


def test_damaged_bytes_and_missing_files(tmp_path, table):
    data = table.to_bytes()
    with pytest.raises(neardup.CorruptFileError, match="truncated"):
        neardup.KeyTable.from_bytes(data[:-3])
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    with pytest.raises(neardup.CorruptFileError, match="checksum"):
        neardup.KeyTable.from_bytes(bytes(damaged))
    with pytest.raises(neardup.CorruptFileError, match="bad magic") as e:
        neardup.HotKeys.from_bytes(data)
    assert str(e.value) == "<bytes>: not a neardup NDHOTK file (bad magic bytes)"
    assert e.value.__cause__ is None
    with pytest.raises(FileNotFoundError, match="missing.ndk") as e:
        neardup.KeyTable.load(tmp_path / "missing.ndk")
    assert e.value.errno == 2
    # Refused before anything is written, as the step's output= is (exit code 2's ValueError).
    with pytest.raises(ValueError, match="is a directory: name a file"):
        table.save(tmp_path)
    assert issubclass(neardup.CorruptFileError, OSError)
