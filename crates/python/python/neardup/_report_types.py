"""A run's report, typed: what :func:`neardup.dedup`, :func:`neardup.ray.dedup`,
:attr:`neardup.DecisionStream.report` and :func:`neardup.report_of` return, and ``--report``
writes (``docs/formats.md``, "Report"); and the reports of the steps that write their value
(:func:`neardup.keys`, :func:`neardup.hot_keys`, :func:`neardup.sign`, :func:`neardup.decide`
with ``output``, as ``neardup keys/hot/sign/decide --report`` writes them), with the manifests
of the sign and decide directories (:attr:`neardup.Signed.manifest`).

The reports are plain dicts (they are the report file's JSON); these ``TypedDict`` classes tell
an editor and a type checker what each key holds. ``tests/test_report_types.py`` checks real
reports of several kinds of run against them, so a field added to the library's report without
its entry here fails that test.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

__all__ = [
    "Report",
    "ReportPaths",
    "Stage1Stats",
    "Stage2Stats",
    "Totals",
    "UnreadableRange",
    "Problem",
    "CountStats",
    "DeduperStats",
    "ClusterStats",
    "ClusterSize",
    "ClusterHead",
    "OutputFileStats",
    "AgainstStats",
    "IndexStats",
    "MemoryPlan",
    "KeysReport",
    "HotReport",
    "PlanSummary",
    "SignReport",
    "SignManifest",
    "DecideReport",
    "DecideManifest",
    "DecideSettings",
    "ShardPlace",
    "SignedCounts",
    "AgainstId",
]


class UnreadableRange(TypedDict):
    """A part of an input that could not be read."""

    file: str
    #: The first record of the part (0-based).
    first_record: int
    #: How many records the part holds; None when it cannot be known.
    records: Optional[int]
    #: The kind of failure (``corrupt_row_group``, ``truncated_stream``, …).
    kind: str
    reason: str
    row_group: Optional[int]
    byte_offset: Optional[int]


class Problem(TypedDict):
    """One quoted bad record (the first few of each kind)."""

    file: str
    record: Optional[int]
    field: Optional[int]
    kind: str
    message: str


class CountStats(TypedDict):
    """Stage 1's key count."""

    keys: int
    distinct_keys: int
    hot_keys: int
    partitions: int
    spilled: bool


class Stage1Stats(TypedDict):
    """Stage 1: every sample's keys and the count of the hot ones."""

    files: int
    records: int
    records_unreadable: int
    unreadable: List[UnreadableRange]
    samples: int
    blank_samples: int
    short_samples: int
    #: Samples skipped, by why (``null_field``, ``missing_field``, …).
    skipped: Dict[str, int]
    #: Records that could not be parsed, by kind.
    read_errors: Dict[str, int]
    problems: List[Problem]
    bytes: int
    columns: int
    bytes_per_sample: int
    hot_samples: int
    hot_share: float
    count: CountStats
    sketch_seconds: float
    count_seconds: float
    mb_per_second: float


class DeduperStats(TypedDict):
    """The decision core's counters."""

    checked: int
    comparisons: int
    verifications: int
    rejected_by_verification: int
    near: int
    exact: int
    representatives: int
    buckets: int
    bytes_per_representative: int
    bucket_index_bytes: int
    shingle_set_bytes: int
    representative_memory_bytes: int
    bookkeeping_releases: int
    spilled_bytes: int


class ClusterSize(TypedDict):
    """How many duplicate sets have this many samples."""

    size: int
    clusters: int


class ClusterHead(TypedDict):
    """The kept sample of one of the largest duplicate sets."""

    file: str
    record: int
    field: int
    size: int


class ClusterStats(TypedDict):
    """The duplicate sets' sizes."""

    sizes: List[ClusterSize]
    largest: List[ClusterHead]


class OutputFileStats(TypedDict):
    """One input's output: its parts, records and bytes."""

    paths: List[str]
    records: int
    bytes: int


class _Stage2Stats(TypedDict):
    records: int
    records_unreadable: int
    unreadable: List[UnreadableRange]
    files_unreadable: List[str]
    records_kept: int
    records_dropped: int
    samples: int
    unique: int
    #: Samples with no hot key: decided unique without being compared.
    cold: int
    near: int
    exact: int
    empty: int
    errors: int
    skipped: Dict[str, int]
    deduper: DeduperStats
    outputs: List[OutputFileStats]
    seconds: float
    mb_per_second: float
    bytes: int
    #: Bytes of input stage 2 read (compressed bytes as stored).
    bytes_read: int


class Stage2Stats(_Stage2Stats, total=False):
    """Stage 2: the hot samples decided, the outputs written."""

    #: The duplicate sets' sizes, when the run counted them.
    clusters: ClusterStats


class Totals(TypedDict):
    """The accounting every user checks first: ``records_in = records_kept + records_dropped +
    records_unreadable`` and ``samples = unique + near + exact + empty + errors``."""

    records_in: int
    records_kept: int
    records_dropped: int
    records_unreadable: int
    samples: int
    unique: int
    near: int
    exact: int
    empty: int
    errors: int
    unreadable: List[UnreadableRange]
    files_unreadable: List[str]


class ReportPaths(TypedDict):
    """Where the run read and wrote, as it was given."""

    inputs: List[str]
    output: Optional[str]
    decisions: Optional[str]
    report: Optional[str]
    index_out: Optional[str]
    spill_dir: Optional[str]
    overwrite: bool


class AgainstStats(TypedDict):
    """What a run against saved indexes read of them."""

    indexes: List[str]
    indexed_samples: int
    entries: int
    kept: int
    representatives: int
    copies: int
    records_read: int
    self_contained: bool


class IndexStats(TypedDict):
    """The index the run saved (``index_out``)."""

    path: str
    files: int
    samples: int
    entries: int
    kept: int
    bytes: int
    self_contained: bool
    records_read: int


class MemoryPlan(TypedDict):
    """How a run under ``memory_limit`` held it."""

    limit: int
    threads_asked: int
    threads: int
    block_bytes: int
    block_memory: int
    decision_memory: int
    above_limit: int


class _Report(TypedDict):
    version: str
    #: The settings that decide (a settings file's sections; no paths): fed back as
    #: ``config=`` it repeats the decisions.
    config: Dict[str, Dict[str, Any]]
    paths: ReportPaths
    #: The input files read, in order.
    files: List[str]
    #: Inputs that could not be used (missing paths, unknown extensions, …).
    input_problems: List[str]
    #: None for runs that reuse stage 1's tables.
    stage1: Optional[Stage1Stats]
    stage2: Stage2Stats
    totals: Totals


class Report(_Report, total=False):
    """Everything a run did, as ``--report`` writes it."""

    #: Present for runs against saved indexes.
    against: AgainstStats
    #: Present when the run saved an index.
    index: IndexStats
    #: Present under ``memory_limit``.
    memory: MemoryPlan


class KeysReport(TypedDict):
    """What :func:`neardup.keys` with ``output`` did (``neardup keys --report``)."""

    #: The version of neardup that made the table.
    neardup: str
    shard: int
    #: The key-table file written.
    table: str
    #: The shard's input files, in order.
    inputs: List[str]
    #: Inputs that could not be used (unreadable paths met while listing directories).
    input_problems: List[str]
    stage1: Stage1Stats


class PlanSummary(TypedDict):
    """The plan of a distributed stage 2's groups."""

    groups: int
    #: Hot rows per group.
    group_rows: List[int]
    #: Connected components of hot rows.
    components: int
    #: Hot rows of the largest component (the smallest possible largest group).
    largest_component: int
    hot_rows: int


class HotReport(TypedDict):
    """What :func:`neardup.hot_keys` with ``output`` did (``neardup hot --report``)."""

    neardup: str
    #: The key tables merged.
    tables: List[str]
    #: The hot-key file written.
    hot_keys_file: str
    min_key_count: int
    count: CountStats
    #: Samples in the tables.
    samples: int
    #: Samples with at least one hot key.
    hot_samples: int
    #: The plan, when more than one group was asked for.
    plan: Optional[PlanSummary]
    seconds: float


class ShardPlace(TypedDict):
    """Where one shard's table sits among the tables the hot keys were counted from."""

    shard: int
    #: Its place in shard order (0 for the lowest shard number counted).
    index: int
    shards: int
    #: Its first row's number in the global row order.
    row_base: int
    #: Its first file's number in the global file order.
    file_base: int
    rows: int
    files: int


class AgainstId(TypedDict):
    """Which saved indexes a distributed run was made against."""

    #: Input files of the indexed runs (numbered before this run's).
    files: int
    fingerprint: int


class _DecideSettings(TypedDict):
    threshold: float
    #: None: unbounded.
    max_reps: Optional[int]
    #: ``"estimate"`` or ``"jaccard"``.
    verify: str


class DecideSettings(_DecideSettings, total=False):
    """The settings the decisions depend on, recorded by each step for the next."""

    #: Absent in input order.
    prefer: str
    #: Absent without saved indexes.
    against: AgainstId


class SignedCounts(TypedDict):
    """Signed samples per group, and copies sent by hash alone."""

    samples: List[int]
    copies_by_hash: int


class SignManifest(TypedDict):
    """A sign directory's ``manifest.json`` (its checksum aside)."""

    #: ``"neardup-sign"``.
    format: str
    format_version: int
    #: :attr:`neardup.HotKeys.fingerprint` of the hot keys it was made with.
    hot: int
    place: ShardPlace
    #: The shard's input files, as decisions name them.
    files: List[str]
    groups: int
    num_perm: int
    columns: int
    #: Whether the samples carry their texts (for exact verification).
    shingles: bool
    settings: DecideSettings
    signed: SignedCounts
    #: Bytes of each group's stream.
    bytes: List[int]


class SignReport(TypedDict):
    """What :func:`neardup.sign` with ``output`` did (``neardup sign --report``)."""

    manifest: SignManifest
    #: The pass's statistics (records read, hot and cold samples).
    stage2: Stage2Stats


class DecideManifest(TypedDict):
    """A decide directory's ``manifest.json`` (its checksum aside)."""

    #: ``"neardup-decide"``.
    format: str
    format_version: int
    hot: int
    group: int
    groups: int
    shards: int
    #: Every shard's input files, in global order, as decisions name them.
    files: List[str]
    settings: DecideSettings
    #: Decisions per shard.
    decided: List[int]
    deduper: DeduperStats
    clusters: ClusterStats


class DecideReport(TypedDict):
    """What :func:`neardup.decide` with ``output`` did (``neardup decide --report``)."""

    manifest: DecideManifest
