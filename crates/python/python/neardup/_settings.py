"""The settings each entry point takes, typed, for editors and type checkers.

Every entry point takes its settings as keyword arguments (``**settings``) named as in a settings
file (``docs/tuning.md``); these ``TypedDict`` classes say which names each one takes and what type
each value has, so that ``neardup.dedup("in/", threshold=0.9, verfy="exact")`` is flagged before it
runs (and still refused at run time, with the valid names). One class per family of entry points:

- :class:`SketchSettings`: :class:`neardup.Sketcher` (how texts become signatures and band keys).
- :class:`DeduperSettings`: :class:`neardup.Deduper`, :class:`neardup.Index`,
  :class:`neardup.hojichar.NearDedup` (texts decided in memory).
- :class:`Settings`: everything that reads a corpus and writes no files of its own:
  :func:`neardup.stream`, the stage steps, :func:`neardup.dedup_table`,
  :func:`neardup.drop_duplicates`, :func:`neardup.ray.drop_duplicates`.
- :class:`DedupSettings`: :func:`neardup.dedup`, :func:`neardup.write` and
  :func:`neardup.ray.dedup`, which also write outputs.

The names are the library's (``tests/test_settings_types.py`` checks them against what each entry
point accepts, and each ``Literal`` against the values the library takes), so a setting added in
Rust without its entry here fails that test.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Literal, Optional, Sequence, TypedDict, Union

__all__ = ["SketchSettings", "DeduperSettings", "Settings", "DedupSettings"]

_Path = Union[str, "os.PathLike[str]"]

#: A tokenizer by name (``"custom:NAME"`` names one handed in as ``tokenizer=``).
Tokenize = Union[Literal["char", "byte", "word", "ascii-word", "alnum", "jieba"], str]


class _Layers(TypedDict, total=False):
    """Where settings come from besides the keywords themselves."""

    #: A settings file (TOML or JSON), applied under the keywords.
    config: _Path
    #: A preset applied over everything (``"lshcurator"``: lshcurator 0.2.3's decisions).
    compat: Literal["lshcurator"]
    #: The setting ``tokenize`` by its name, or a callable ``str -> Iterable[str]`` (a hojichar
    #: splitter, fugashi, sudachi, jieba…) whose tokens are shingled (``docs/tokenizers.md``).
    tokenizer: Union[Tokenize, Callable[[str], Iterable[str]]]
    #: The name a ``tokenizer=`` callable is recorded under (reports, saved values, indexes).
    tokenizer_name: str


class _Sketch(_Layers, total=False):
    """A settings file's ``[sketch]`` section: how a text becomes a signature and band keys."""

    #: What a shingle is made of.
    tokenize: Tokenize
    #: Shingle size, in units of ``tokenize``.
    shingle: int
    #: Window step.
    step: int
    #: Trim leading and trailing whitespace.
    trim: bool
    #: Unicode NFKC before shingling.
    nfkc: bool
    #: Lowercase before shingling.
    lowercase: bool
    #: Remove punctuation before shingling.
    strip_punctuation: bool
    #: Keep only these characters (ranges like ``"0-9a-zA-Z"``).
    keep_chars: Optional[str]
    #: Collapse whitespace runs into one space.
    collapse_whitespace: bool
    #: MinHash scheme (``docs/tuning.md``, "Hash schemes").
    hash: Literal["oph", "fast", "datasketch"]
    #: Signature width.
    num_perm: int
    #: Seed of the permutations.
    seed: int
    #: LSH bands (with ``rows``; otherwise chosen from the threshold).
    bands: Optional[int]
    #: Rows per band.
    rows: Optional[int]
    #: Band-key encoding.
    band_keys: Literal["fast", "lshcurator"]


class SketchSettings(_Sketch, total=False):
    """What :class:`neardup.Sketcher` takes: the sketch settings and what picks bands and rows."""

    #: Similarity at which texts are duplicates (with ``verify``, picks bands and rows).
    threshold: float
    #: How candidates are confirmed (picks bands and rows).
    verify: Literal["exact", "estimate"]
    #: What texts shorter than one shingle get.
    short_texts: Literal["exact_only", "empty_signature"]
    #: Worker threads (0: all cores).
    threads: int


class DeduperSettings(_Sketch, total=False):
    """What the in-memory deciders take: :class:`neardup.Deduper`, :class:`neardup.Index`,
    :class:`neardup.hojichar.NearDedup`."""

    #: Similarity at which a text is a duplicate.
    threshold: float
    #: Representatives per bucket (0: unbounded).
    max_reps: Optional[int]
    #: How candidates are confirmed: exact Jaccard, or the signatures' estimate.
    verify: Literal["exact", "estimate"]
    #: Bytes of shingle sets held for exact verification before they spill.
    verify_memory: int
    #: Keep or drop empty texts.
    empty: Literal["keep", "drop"]
    #: Near-duplicate detection (off: exact copies only).
    near: bool
    #: Exact copies found by content hash.
    exact: bool
    #: What texts shorter than one shingle get.
    short_texts: Literal["exact_only", "empty_signature"]
    #: Where spill files go.
    spill_dir: Optional[_Path]


class Settings(_Sketch, total=False):
    """What runs over a corpus take (:func:`neardup.stream`, the stage steps, the table
    functions): every setting but the output paths."""

    # [input]
    #: Force a format instead of going by extension.
    format: Optional[Literal["jsonl", "parquet", "arrow"]]
    #: Text fields (dotted paths into JSON objects, or columns).
    fields: Sequence[str]
    #: Several fields: one text per record (``join``) or one sample per field (``expand``).
    fields_mode: Literal["join", "expand"]
    #: What ``join`` puts between fields.
    separator: str
    #: A field carried into every decision as the record's id.
    id_field: Optional[str]
    # [keys]
    #: Near-duplicate detection (off: exact copies only).
    near: bool
    #: A key is hot when seen more than this many times.
    min_key_count: int
    #: Exact copies found by content hash.
    exact: bool
    #: What texts shorter than one shingle get.
    short_texts: Literal["exact_only", "empty_signature"]
    #: Bytes the run may hold (stage 1's key table, stage 2's state) before it spills.
    memory_limit: Optional[int]
    #: Where spill files go.
    spill_dir: Optional[_Path]
    #: Largest unit of parallel work within a large file, in bytes.
    chunk_bytes: int
    # [dedup]
    #: Similarity at which a sample is a duplicate.
    threshold: float
    #: Representatives per hot bucket (0: unbounded).
    max_reps: Optional[int]
    #: How candidates are confirmed: exact Jaccard, or the signatures' estimate.
    verify: Literal["exact", "estimate"]
    #: Bytes of shingle sets held for exact verification before they spill.
    verify_memory: int
    #: Keep or drop empty texts.
    empty: Literal["keep", "drop"]
    #: Which copy is kept: ``first``, ``longest``, ``shortest``, ``FIELD:desc``, ``FIELD:asc``.
    prefer: Union[Literal["first", "longest", "shortest"], str]
    #: Bytes of ranked samples sorted in memory before they spill (with ``prefer``).
    sort_memory: int
    #: Saved indexes of earlier runs to deduplicate against, in order.
    against: Sequence[_Path]
    # [run]
    #: Worker threads (0: all cores).
    threads: int
    #: Skip bad records (counted and quoted) or stop at the first.
    on_error: Literal["skip", "fail"]


class DedupSettings(Settings, total=False):
    """What the runs that write outputs take (:func:`neardup.dedup`, :func:`neardup.write`,
    :func:`neardup.ray.dedup`): :class:`Settings` and the output settings."""

    #: Also save the run's index here (for later runs' ``against``, or an online index).
    index_out: Optional[_Path]
    #: Split every output into parts of at most this many bytes.
    max_output_bytes: Optional[int]
    #: Replace an output directory this tool wrote before.
    overwrite: bool
