"""Type stubs of neardup's compiled module (``crates/python/src``). Use the ``neardup`` package,
which re-exports the classes and wraps the functions."""

from os import PathLike
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, final

import numpy
import numpy.typing
from typing_extensions import Unpack

from ._report_types import (
    CountStats,
    DecideManifest,
    DeduperStats,
    Report,
    SignManifest,
    Stage1Stats,
    Stage2Stats,
)
from ._settings import DeduperSettings, Settings, SketchSettings

_Path = Union[str, PathLike[str]]
_Inputs = Union[_Path, Iterable[_Path]]
# A list of str, a pyarrow Array / ChunkedArray of strings, or any object with the Arrow
# PyCapsule interface (__arrow_c_array__ / __arrow_c_stream__) holding strings.
_Texts = Union[Sequence[str], Any]

__version__: str
__all__ = [
    "__version__",
    "InputError",
    "TokenizerError",
    "CorruptFileError",
    "Sketcher",
    "Decision",
    "Deduper",
    "Index",
    "IndexDecision",
    "KeyTable",
    "HotKeys",
    "Signed",
    "Decided",
    "Run",
    "DecisionStream",
    "CorpusStream",
    "run_cli",
    "settings",
    "defaults",
    "start_dedup",
    "start_dedup_table",
    "start_dedup_stream",
    "table_result",
    "block_keys",
    "block_sign",
    "block_decisions",
    "stream",
    "step_value",
    "start_keys",
    "start_hot",
    "start_sign",
    "start_decide",
    "start_write",
    "process_corpus",
    "compute_bucket_keys",
]

class InputError(ValueError):
    """A bad record or unreadable input with on_error="fail", or inputs that changed between the
    stages; the message names the file and the record."""

class TokenizerError(RuntimeError):
    """A tokenizer= callable raised: the message names the tokenizer and the text (and where the
    text was, when known); __cause__ is the callable's own exception. The run stopped and
    published nothing."""

class CorruptFileError(OSError):
    """A key-table or hot-key file, or a step value's bytes, is damaged, truncated or not
    neardup's."""

@final
class Decision:
    """One decision about one sample: the row of a decisions file."""

    @property
    def file(self) -> Optional[str]:
        """Input file of the sample, as discovered (None for texts given to a Deduper)."""
    @property
    def record(self) -> int:
        """Record within the file, from 0; for a Deduper, the text's position."""
    @property
    def field(self) -> int:
        """Field slot within the record (0 unless fields_mode="expand")."""
    @property
    def id(self) -> Optional[str]:
        """The record's id, when id_field is set and the record has one."""
    @property
    def keep(self) -> bool:
        """Whether the sample (its record) is kept."""
    @property
    def reason(self) -> str:
        """"unique", "near", "exact", "empty" or "error"."""
    @property
    def dup_of_file(self) -> Optional[str]:
        """File of the sample this one duplicates."""
    @property
    def dup_of_record(self) -> Optional[int]:
        """Record of the sample this one duplicates."""
    @property
    def dup_of_field(self) -> Optional[int]:
        """Field slot of the sample this one duplicates."""
    @property
    def dup_of_id(self) -> Optional[str]:
        """Id of the sample this one duplicates."""
    @property
    def similarity(self) -> Optional[float]:
        """Similarity that decided (1.0 for exact copies; None when kept)."""
    @property
    def cluster_file(self) -> Optional[str]:
        """File of the kept sample this sample's duplicate set resolves to, whatever chain of
        dup_of led there (its own file when kept; None for texts given to a Deduper)."""
    @property
    def cluster_record(self) -> int:
        """Record of that kept sample (its own record when kept)."""
    def to_dict(self) -> Dict[str, Any]:
        """The decision as a decisions file's row (keys file, record, field, id, keep, reason,
        dup_of_file, dup_of_record, dup_of_id, similarity, cluster_file, cluster_record)."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class DecisionStream(Iterator[Decision]):
    """Decisions of a running pipeline in input order (see neardup.stream)."""

    def __iter__(self) -> "DecisionStream": ...
    def __next__(self) -> Decision: ...
    @property
    def report(self) -> Optional[Report]:
        """The run report once every decision was taken; None before."""

@final
class Sketcher:
    """Texts → MinHash signatures and LSH band keys, as stage 1 computes them."""

    def __new__(cls, **settings: Unpack[SketchSettings]) -> "Sketcher":
        """Sketch settings by name (num_perm, threshold and verify or bands + rows, hash,
        tokenize, shingle, step, normalisation, band_keys, seed, short_texts, threads)."""
    def signatures(self, texts: _Texts) -> numpy.typing.NDArray[numpy.uint32]:
        """MinHash signatures, shape (len(texts), num_perm); a text without shingles gets
        2**32 - 1 in every position."""
    def band_keys(self, texts: _Texts) -> numpy.typing.NDArray[numpy.uint64]:
        """Band keys, shape (len(texts), bands), equal to a key table's band columns; an empty
        text gets a row of zeros."""
    @property
    def num_perm(self) -> int:
        """Signature width."""
    @property
    def bands(self) -> int:
        """LSH bands."""
    @property
    def rows(self) -> int:
        """Signature positions per band."""
    @property
    def settings(self) -> Dict[str, Any]:
        """The sketch settings in force (a settings file's [sketch] section)."""

@final
class Deduper:
    """In-memory deduplication of texts given one by one (first seen kept)."""

    def __new__(
        cls,
        *,
        hot_keys: Union["HotKeys", numpy.typing.ArrayLike, None] = None,
        sign_blank: bool = False,
        **settings: Unpack[DeduperSettings],
    ) -> "Deduper":
        """Settings by name (sketch settings, threshold, max_reps, verify, exact, empty, …);
        hot_keys restricts the buckets to those keys; sign_blank signs whitespace-only texts
        instead of deciding them "empty"."""
    def __call__(self, text: str) -> bool:
        """Decides the next text: True when kept."""
    def decide(self, text: str) -> Decision:
        """Decides the next text and returns the whole Decision."""
    @property
    def seen(self) -> int:
        """Texts decided so far."""
    @property
    def num_bucket_keys(self) -> Optional[int]:
        """Number of hot_keys given (None when every key counts)."""
    @property
    def stats(self) -> DeduperStats:
        """The decision core's counters (checked, comparisons, near, exact, representatives,
        buckets, bytes)."""

_Id = Union[str, int]

@final
class IndexDecision:
    """The decision an Index made about one document."""

    @property
    def id(self) -> _Id:
        """The document's id (the one given, or the integer the index gave it)."""
    @property
    def keep(self) -> bool:
        """Whether the document is kept (and joined the index)."""
    @property
    def reason(self) -> str:
        """"unique", "near", "exact", "empty" or "error"."""
    @property
    def dup_of(self) -> Optional[_Id]:
        """The id of the earlier document it duplicates (None when kept)."""
    @property
    def similarity(self) -> Optional[float]:
        """The similarity that decided (1.0 for exact copies; None when kept)."""
    def to_dict(self) -> Dict[str, Any]:
        """id, keep, reason, dup_of and similarity as a dict."""

@final
class Index:
    """Online dedup: documents checked against everything kept before them, with the decisions
    of ``neardup dedup`` over the same texts in the same order."""

    def __new__(cls, store: Optional[_Path] = None, *, namespace: Optional[str] = None, **settings: Unpack[DeduperSettings]) -> "Index":
        """store=None: in memory; a path: a saved index file (``neardup dedup --index-out``'s
        format; created when missing, refused when made with other settings); a
        ``redis://HOST:PORT/DB`` URL: a Redis server, shared by every producer of ``namespace``.
        Settings by name as for Deduper."""
    def check(self, text: Optional[str], id: Optional[_Id] = None) -> IndexDecision:
        """Decides text and adds it when kept; an id checked before gets its first decision."""
    def check_many(self, texts: Iterable[Optional[str]], ids: Optional[Iterable[Optional[_Id]]] = None) -> List[IndexDecision]:
        """check() for each text in order, signed in parallel with the GIL released."""
    def check_table(self, data: Any, column: str = "text", id_column: Optional[str] = None) -> List[IndexDecision]:
        """check_many() over a table's rows (any type drop_duplicates takes), one decision per
        row; the column is read in place (a null is decided ``"error"`` and kept, as ``check(None)``)."""
    def query(self, text: str) -> List[Tuple[_Id, float]]:
        """The earlier documents text duplicates, with their similarity; adds nothing."""
    def query_many(self, texts: Iterable[Optional[str]]) -> List[List[Tuple[_Id, float]]]:
        """query() for each text, signed in parallel; adds nothing (None finds nothing)."""
    def insert(self, text: str, id: Optional[_Id] = None) -> _Id:
        """Adds text as a kept document without deciding it; returns its id."""
    def insert_many(self, texts: Iterable[str], ids: Optional[Iterable[Optional[_Id]]] = None) -> List[_Id]:
        """insert() for each text, signed in parallel."""
    def save(self, path: Optional[_Path] = None) -> int:
        """Saves the index at path (None: the file it was opened from) atomically, in the
        format ``neardup dedup --against`` reads; never over anything but a neardup index. An
        index in Redis is read in one atomic step and saved as ``neardup index pull`` saves it.
        Returns the bytes written."""
    @property
    def namespace(self) -> Optional[str]:
        """The namespace given."""
    @property
    def stats(self) -> Dict[str, int]:
        """The decision core's counters."""
    def __len__(self) -> int:
        """Documents checked or inserted (each id once)."""

@final
class KeyTable:
    """Stage 1's product for one shard: a row of uint64 keys per sample, and its files."""

    @property
    def keys(self) -> numpy.typing.NDArray[numpy.uint64]:
        """The rows, shape (rows, columns), a read-only view of the table's memory."""
    @property
    def rows(self) -> int:
        """Number of rows."""
    @property
    def columns(self) -> int:
        """Keys per row (bands, plus the content key unless exact=False)."""
    @property
    def bands(self) -> int:
        """Band-key columns."""
    @property
    def shard(self) -> int:
        """This table's shard number."""
    @property
    def files(self) -> List[Dict[str, Any]]:
        """The input files in row order: path, records, rows."""
    @property
    def stats(self) -> Optional[Stage1Stats]:
        """Stage 1's statistics for a computed table; None for one read back."""
    def save(self, path: _Path) -> None:
        """Writes the table file atomically (the format of `neardup keys --out`). An existing
        file at ``path`` is replaced only when it is a key table (or empty); any other raises
        ValueError."""
    @staticmethod
    def load(path: _Path) -> "KeyTable":
        """Reads a table file, verifying its checksum."""
    def to_bytes(self) -> bytes:
        """The bytes save() writes."""
    @staticmethod
    def from_bytes(data: bytes) -> "KeyTable":
        """Reads a table from to_bytes()'s bytes."""
    def __len__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> Tuple[Any, Tuple[str, bytes]]:
        """Pickles through to_bytes() (stats are not carried)."""

@final
class HotKeys:
    """The keys seen more than min_key_count times across all shards, sorted."""

    @property
    def keys(self) -> numpy.typing.NDArray[numpy.uint64]:
        """The hot keys, ascending, a read-only view."""
    @property
    def fingerprint(self) -> int:
        """Checksum of the hot-key file's bytes, recorded in the manifests of sign and decide."""
    @property
    def groups(self) -> int:
        """Groups of the plan of a distributed stage 2 (one decide each); 1 without a plan."""
    @property
    def min_key_count(self) -> int:
        """A key is hot when seen more than this many times."""
    @property
    def stats(self) -> Optional[CountStats]:
        """The merge's counts for computed hot keys; None for ones read back."""
    def save(self, path: _Path) -> None:
        """Writes the hot-key file atomically (the format of `neardup hot --out`). An existing
        file at ``path`` is replaced only when it is a hot-key file (or empty); any other raises
        ValueError."""
    @staticmethod
    def load(path: _Path) -> "HotKeys":
        """Reads a hot-key file, verifying its checksum and order."""
    def to_bytes(self) -> bytes:
        """The bytes save() writes."""
    @staticmethod
    def from_bytes(data: bytes) -> "HotKeys":
        """Reads hot keys from to_bytes()'s bytes."""
    def __len__(self) -> int: ...
    def __contains__(self, key: int, /) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> Tuple[Any, Tuple[str, bytes]]:
        """Pickles through to_bytes() (stats are not carried)."""

@final
class Signed:
    """One shard's sign output: what deciding each hot sample needs, one stream per group of
    the plan (or one group's only, for a part made by group())."""

    @property
    def shard(self) -> int:
        """The shard's number."""
    @property
    def place(self) -> int:
        """The shard's place in shard order."""
    @property
    def shards(self) -> int:
        """Shards the hot keys were counted from."""
    @property
    def groups(self) -> int:
        """Groups of the plan."""
    @property
    def groups_held(self) -> List[int]:
        """Groups whose streams this value holds (all, or one for a part)."""
    @property
    def samples(self) -> List[int]:
        """Hot samples signed, per group."""
    @property
    def copies_by_hash(self) -> int:
        """Of those, later exact copies sent as their content hash alone."""
    @property
    def stream_bytes(self) -> int:
        """Bytes of the streams held."""
    @property
    def files(self) -> List[str]:
        """The shard's input files, as decisions name them."""
    @property
    def fingerprint(self) -> int:
        """HotKeys.fingerprint of the hot keys it was signed with."""
    @property
    def manifest(self) -> SignManifest:
        """The manifest (the fields of manifest.json of the directory but its checksum)."""
    @property
    def stats(self) -> Optional[Stage2Stats]:
        """The pass's statistics for a value just signed; None for one read back."""
    def group(self, group: int) -> "Signed":
        """This shard's part for one group: what decide of that group needs."""
    def save(self, path: _Path) -> None:
        """Writes the directory `neardup sign -o` writes, all or nothing, into a directory that
        is missing, empty or holds an earlier sign output (replacing only what its manifest
        lists)."""
    @staticmethod
    def load(path: _Path) -> "Signed":
        """Reads a sign output directory."""
    def to_bytes(self) -> bytes:
        """The value as one checksummed buffer (docs/formats.md, "Step values")."""
    @staticmethod
    def from_bytes(data: bytes) -> "Signed":
        """Reads to_bytes()'s bytes; CorruptFileError when damaged or truncated."""
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> Tuple[Any, Tuple[str, bytes]]:
        """Pickles through to_bytes() (stats are not carried)."""

@final
class Decided:
    """One group's decide output: the decisions of its hot samples, one stream per shard (or
    one shard's only, for a part made by shard())."""

    @property
    def group(self) -> int:
        """The group decided."""
    @property
    def groups(self) -> int:
        """Groups of the plan."""
    @property
    def shards(self) -> int:
        """Shards."""
    @property
    def shards_held(self) -> List[int]:
        """Shards (by place) whose streams this value holds (all, or one for a part)."""
    @property
    def decided(self) -> List[int]:
        """Decisions per shard."""
    @property
    def stream_bytes(self) -> int:
        """Bytes of the streams held."""
    @property
    def fingerprint(self) -> int:
        """HotKeys.fingerprint of the hot keys it was decided with."""
    @property
    def manifest(self) -> DecideManifest:
        """The manifest (the fields of manifest.json of the directory but its checksum)."""
    def shard(self, place: int) -> "Decided":
        """This group's part for the shard at place `place`: what write of that shard needs."""
    def save(self, path: _Path) -> None:
        """Writes the directory `neardup decide -o` writes, all or nothing, into a directory
        that is missing, empty or holds an earlier decide output (replacing only what its
        manifest lists)."""
    @staticmethod
    def load(path: _Path) -> "Decided":
        """Reads a decide output directory."""
    def to_bytes(self) -> bytes:
        """The value as one checksummed buffer."""
    @staticmethod
    def from_bytes(data: bytes) -> "Decided":
        """Reads to_bytes()'s bytes; CorruptFileError when damaged or truncated."""
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> Tuple[Any, Tuple[str, bytes]]:
        """Pickles through to_bytes()."""

@final
class Run:
    """A neardup.dedup run on a background thread."""

    def wait(self, timeout: float) -> bool:
        """Waits up to timeout seconds; True once the run has ended."""
    def cancel(self) -> None:
        """Stops the run at its next block; nothing is published, what it wrote is removed."""
    def progress(self) -> Tuple[int, int, int, int]:
        """(stage, bytes done, bytes expected, samples done) of the stage running now."""
    def result(self) -> str:
        """The report as JSON once the run has ended; raises the run's error."""

@final
class CorpusStream(Iterator[Tuple[str, bool]]):
    """lshcurator's process_corpus pairs (text, keep)."""

    def has_hot_keys(self) -> bool:
        """Waits for stage 1; False when no bucket key is hot."""
    def __iter__(self) -> "CorpusStream": ...
    def __next__(self) -> Tuple[str, bool]: ...

def file_exists(path: _Path) -> bool:
    """Whether the file or object ``path`` exists."""

def read_file(path: _Path) -> Optional[bytes]:
    """The bytes of the file or object ``path``, or None when there is none."""

def write_file(path: _Path, data: bytes) -> None:
    """Writes ``data`` as the file or object ``path``, which appears whole or not at all."""

def concatenate(parts: Sequence[_Path], target: _Path) -> None:
    """Writes the files or objects ``parts`` one after the other as ``target``, which appears
    whole or not at all."""

def check_decisions_output(path: _Path) -> None:
    """Refuses (ValueError) a decisions file the run could not write at ``path``, or one that
    would replace a file neardup did not write."""

def publish_output(output: _Path, hot_fingerprint: int) -> Optional[str]:
    """Publishes a distributed run's ``_SUCCESS`` manifest in ``output`` once every shard's is
    there; returns its JSON, or None while a shard is missing."""

def run_cli(args: Sequence[str]) -> int:
    """Runs the ``neardup`` command line with ``args`` (the program's name first); returns its
    exit code."""

def settings() -> Dict[str, List[str]]:
    """Every setting's name, by section."""

def defaults() -> Dict[str, Any]:
    """Every setting's default value, by name."""

def start_dedup(
    inputs: _Inputs,
    output: Optional[_Path] = None,
    decisions: Optional[_Path] = None,
    report: Optional[_Path] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Run:
    """Starts neardup.dedup on a background thread."""

def stream(inputs: _Inputs, settings: Optional[Mapping[str, Any]] = None) -> DecisionStream:
    """Starts neardup.stream."""

def start_dedup_table(data: Any, settings: Optional[Mapping[str, Any]] = None) -> Run:
    """Starts neardup.dedup_table over an object with __arrow_c_stream__ (``settings["fields"]``:
    the text columns)."""

def start_dedup_stream(open: Callable[[], Any], settings: Optional[Mapping[str, Any]] = None) -> Run:
    """Starts neardup.dedup_table over a stream larger than memory: ``open()`` returns a fresh
    object with __arrow_c_stream__ for each stage, read batch by batch."""

_DecisionColumns = Tuple[
    numpy.typing.NDArray[numpy.bool_],
    numpy.typing.NDArray[numpy.uint8],
    List[str],
    numpy.typing.NDArray[numpy.int64],
    numpy.typing.NDArray[numpy.float64],
    numpy.typing.NDArray[numpy.int64],
    Optional[Tuple[List[Optional[str]], List[Optional[str]]]],
]
"""A table's decisions as columns: keep, reason codes, reason names, dup_of (-1: none),
similarity (NaN: none), cluster (-1: an indexed run's), the ids and dup_of ids (with an id
column)."""

def table_result(
    run: Run,
) -> Tuple[_DecisionColumns, List[Tuple[int, str, int]], str]:
    """The decisions of a dedup_table run: its columns, the duplicates of indexed runs' records
    (row, file, record), the report JSON."""

def block_keys(
    data: Any, name: str, shard: int, settings: Optional[Mapping[str, Any]] = None
) -> KeyTable:
    """Stage 1 of one block of a distributed dataset, registered as `name`."""

def block_sign(
    data: Any, name: str, table: KeyTable, hot: HotKeys,
    settings: Optional[Mapping[str, Any]] = None,
) -> Signed:
    """The sign step of one block, registered as `name` again."""

def block_decisions(
    data: Any, name: str, table: KeyTable, hot: HotKeys, decided: List[Decided],
    row_bases: List[int], settings: Optional[Mapping[str, Any]] = None,
) -> Tuple[_DecisionColumns, str]:
    """The write step of one block without outputs: its rows' decision columns, as table_result
    gives them (without the indexed runs' duplicates), dup_of and cluster as global rows, and the
    report JSON."""

def step_value(run: Run) -> Any:
    """The value a step run without output made (waits for it): a KeyTable, HotKeys, Signed or
    Decided; its error otherwise."""

def start_keys(
    inputs: _Inputs,
    shard: int,
    output: Optional[_Path] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Run:
    """Starts neardup.keys: one shard's KeyTable (no output), or its key-table file."""

def start_hot(
    tables: Sequence[Union[KeyTable, _Path]],
    min_key_count: int = 1,
    groups: int = 1,
    memory_limit: Optional[int] = None,
    spill_dir: Optional[_Path] = None,
    threads: int = 0,
    against: Sequence[_Path] = ...,
    output: Optional[_Path] = None,
) -> Run:
    """Starts neardup.hot_keys: shards' tables (objects or files) merged into the HotKeys (no
    output) or the hot-key file, planned in `groups` groups when more than one, the keys of the
    saved indexes `against` counting once more."""

def start_sign(
    table: Union[KeyTable, _Path],
    hot: Union[HotKeys, _Path],
    output: Optional[_Path] = None,
    settings: Optional[Mapping[str, Any]] = None,
    overwrite: bool = False,
) -> Run:
    """Starts neardup.sign: one shard's Signed value (no output), or its sign directory (with
    overwrite, replacing an earlier sign output there)."""

def start_decide(
    signed: List[Union[Signed, _Path]],
    hot: Union[HotKeys, _Path],
    group: int,
    output: Optional[_Path] = None,
    settings: Optional[Mapping[str, Any]] = None,
    overwrite: bool = False,
) -> Run:
    """Starts neardup.decide: one group's Decided value (no output), or its decide directory
    (with overwrite, replacing an earlier decide output there)."""

def start_write(
    table: Union[KeyTable, _Path],
    hot: Union[HotKeys, _Path],
    decided: List[Union[Decided, _Path]],
    output: Optional[_Path] = None,
    decisions: Optional[_Path] = None,
    report: Optional[_Path] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> Run:
    """Starts neardup.write: one shard's part of the dataset and its decisions."""

def process_corpus(settings: Mapping[str, Any]) -> CorpusStream:
    """lshcurator's Curator.process_corpus on the compat preset."""

def compute_bucket_keys(
    settings: Dict[str, Any],
) -> Tuple[numpy.typing.NDArray[numpy.uint64], List[Tuple[str, int]]]:
    """lshcurator's Curator.compute_bucket_keys: keys (samples, bands) and rows per file."""
