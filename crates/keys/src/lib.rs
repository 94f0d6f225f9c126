//! Stage 1 of neardup: every bucket key of every sample, in one compact table, and the hot keys.
//!
//! This crate owns:
//! - the **row rule** ([`RowRule`]): how one sample becomes one row of `u64` keys — a bucket key per
//!   LSH band and, optionally, a content key for exact duplicates. Stage 2 calls the same rule, so
//!   both passes agree on every row;
//! - the **key table** ([`KeyTable`]): `rows × columns` keys, row-major, plus the per-file row counts
//!   that map rows back to sample addresses, and its versioned, checksummed file format;
//! - the **pipeline** ([`run_keys`]): worker threads read input chunks (from `neardup-corpus`) and
//!   sketch them block by block (with `neardup-sketch`) on the ordered executor of
//!   `neardup-exec`, which hands the blocks back in input order whatever the thread count, with
//!   bounded look-ahead; the rows are assembled chunk by chunk. An exact copy of a text signed
//!   lately takes that text's row from a small shared table instead of being signed again (the
//!   rows are the same; `reused_samples` in [`KeysStats`] counts them). Every record is accounted for: read, or in a listed
//!   [`UnreadableRange`](neardup_corpus::UnreadableRange); a run that could read no text at all (or a selected field that no record
//!   has) fails before anything is written. Where each record of a JSONL chunk lies (and where
//!   the members of a compressed one start), and whether stage 2 can decide it unread, is noted
//!   with the chunk's counts ([`RecordPlaces`] in [`ChunkRows`]) and saved with a table. For one shard of a distributed run, [`write_keys`] streams
//!   the rows straight into a table file ([`KeyTableWriter`]) and [`collect_keys`] keeps them as a
//!   [`KeyTable`] value, both without counting;
//! - the **exact key-frequency filter** ([`count_in_memory`], [`SpillCounter`]): radix partitioning
//!   by high key bits, then per partition an exact count (an open-addressing table in memory, a
//!   sort and run scan for spilled partitions), in parallel in memory or partition by partition
//!   from spill files under a memory limit; it yields the sorted [`HotKeys`] and the
//!   per-(row, column) [`HotMask`] (spilled, a mask too large for the budget goes to a scratch
//!   file's mapping, marked in row order with the pages behind handed back); against a saved
//!   index, the keys of earlier runs count once more each ([`PriorKeys`], given in
//!   [`KeysConfig::prior`] or to [`merge_table_files`]);
//! - merging the tables of several shards ([`merge_tables`]) and the hot-key file format.
//!
//! It does not read or parse files itself (that is `neardup-corpus`), compute hashes (that is
//! `neardup-sketch`), schedule threads (that is `neardup-exec`), keep arrays in scratch mappings
//! (that is `neardup-scratch`), or decide duplicates (that is stage 2, `neardup-dedup`).
#![warn(missing_docs)]

mod error;
mod index;
mod places;
mod plan;
mod prior;
mod row;
mod row_cache;
mod table;
mod hot;
mod count;
mod stage;

pub use count::{CountStats, Counted, SpillCounter, count_in_memory};
pub use error::{
    Damage, Incompatible, InputFailure, KeysError, KeysSettingsError, LayoutDifference, Problem,
    TableName, TableProblem,
};
pub use hot::{
    HotKeys, HotMask, HotRowGroups, HotSummary, MaskMemory, RowGrouping, ShardPlace,
    plan_from_tables,
};
/// Re-exported for compatibility: [`Progress`] and [`OnError`] were stage 1's before every step
/// ran on `neardup-exec`, and `neardup::keys::{Progress, OnError}` is public API.
pub use neardup_exec::{OnError, Progress};
pub use places::{RecordPlace, RecordPlaces, places_budget};
pub use plan::{Plan, PlanBuilder};
pub use prior::PriorKeys;
pub use row::{RowKind, RowRule, RowSketch, ShortTextPolicy, content_key};
pub use stage::{
    DEFAULT_CHUNK_BYTES, DEFAULT_MIN_COUNT, KeysConfig, KeysOutput, KeysStats, QUOTED_PROBLEMS,
    TableStore, collect_keys, merge_table_files, merge_tables, run_keys, write_keys,
};
pub use table::{
    ChunkRows, FileRows, KeyTable, KeyTableWriter, ShardTables, TableIdentity, TableLayout,
    TableParts, TableReader,
};
