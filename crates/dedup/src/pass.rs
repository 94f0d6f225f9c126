//! The base of a stage-2 pass, which every other part of the pass builds on: what it is given
//! (its settings, [`Stage2Config`], and how a shard's files and rows are numbered among all
//! shards, `Addressing`) and what it gives (each [`Decision`], the statistics
//! [`DedupStats`]).
//!
//! The pass reads top-down from here: `prepare` is what the worker threads make of a block,
//! `route` the deciding thread, `stage` the pass that runs them on the executor (and the
//! one-process stage 2), and `distributed` the sign and write steps, the same pass with other
//! routes for the hot samples.

use std::collections::BTreeMap;
use std::path::PathBuf;

use neardup_corpus::UnreadableRange;
use neardup_corpus::{OutputOptions, Reason, TextSelector, WrittenFile};
use neardup_exec::OnError;
use neardup_keys::RowRule;
use neardup_sketch::Sketcher;
use serde::{Deserialize, Serialize};

use crate::clusters::ClusterStats;
use crate::deduper::{DeduperConfig, DeduperStats, SampleAddr, Verify};
use crate::prefer::Prefer;

/// What happens to samples whose text is empty or whitespace only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyPolicy {
    /// Pass them through to the output (decision reason `empty`, kept).
    #[default]
    Keep,
    /// Drop them (decision reason `empty`, dropped).
    Drop,
}

/// Settings of a stage-2 run: what it computes and writes. The handles a caller watches and
/// stops one run by are passed beside them ([`neardup_exec::StepControl`]).
#[derive(Clone, Debug)]
pub struct Stage2Config {
    /// The sketch settings stage 1 used.
    pub sketcher: Sketcher,
    /// The row rule stage 1 used.
    pub rule: RowRule,
    /// The text selection stage 1 used.
    pub selector: TextSelector,
    /// Decision settings.
    pub deduper: DeduperConfig,
    /// Empty-text policy.
    pub empty: EmptyPolicy,
    /// Which copy of a duplicate set is kept (the selector's `rank_field` must be the field of a
    /// [`Prefer::Field`]). Any other than [`Prefer::First`] decides the hot samples in rank
    /// order: a sign step ranks them, and a one-process run goes through sign, decide and write
    /// itself ([`crate::run_dedup`]).
    pub prefer: Prefer,
    /// Bytes of ranked hot samples a sign step holds to sort before it spills sorted runs to
    /// `deduper.spill_dir` (only when ranking: see `prefer`).
    pub sort_memory: usize,
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Target size of one read block.
    pub block_bytes: usize,
    /// Bytes of blocks read and not yet decided at most (see
    /// [`neardup_exec::ExecOptions::block_memory`]); `None`: bounded by the look-ahead only.
    pub block_memory: Option<u64>,
    /// Bad input policy.
    pub on_error: OnError,
    /// Where the filtered dataset goes (none: decide only).
    pub output: Option<OutputOptions>,
    /// Where the decisions go (`.jsonl` or `.parquet`).
    pub decisions: Option<PathBuf>,
    /// The decision state earlier runs left (`--against` a saved index): decisions start from
    /// it, and this run's files are numbered after the earlier runs' files.
    pub prior: Option<std::sync::Arc<crate::prior::PriorState>>,
}

/// One decision, as handed to an observer (serialisable, for schedulers that pass decisions as
/// values; addresses number files in input order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The sample.
    pub addr: SampleAddr,
    /// Its id, when an id field is configured and present.
    pub id: Option<String>,
    /// Kept or dropped.
    pub keep: bool,
    /// Why.
    pub reason: Reason,
    /// The sample it duplicates.
    pub dup_of: Option<SampleAddr>,
    /// That sample's id.
    pub dup_of_id: Option<String>,
    /// The similarity that decided (1.0 for exact copies).
    pub similarity: Option<f64>,
    /// The kept sample its duplicate set resolves to, whatever chain of `dup_of` led there
    /// (`addr` itself when kept).
    pub cluster: SampleAddr,
}

/// What stage 2 did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DedupStats {
    /// Records read.
    pub records: u64,
    /// Records that could not be read, as far as their number is known (see `unreadable`):
    /// `records + records_unreadable` are the records the inputs hold.
    #[serde(default)]
    pub records_unreadable: u64,
    /// Every part of an input that could not be read, in input order.
    #[serde(default)]
    pub unreadable: Vec<UnreadableRange>,
    /// Inputs of which nothing could be read: no output file is written for them.
    #[serde(default)]
    pub files_unreadable: Vec<PathBuf>,
    /// Records written to the output.
    pub records_kept: u64,
    /// Records left out of the output.
    pub records_dropped: u64,
    /// Sample slots decided (= rows of the decisions file).
    pub samples: u64,
    /// Samples kept as unique (including cold ones).
    pub unique: u64,
    /// Samples that hit no hot key (kept without any signature work).
    pub cold: u64,
    /// Samples dropped as near duplicates.
    pub near: u64,
    /// Samples dropped as exact duplicates.
    pub exact: u64,
    /// Empty samples (kept or dropped per the policy).
    pub empty: u64,
    /// Sample slots that could not be read (passed through, reason `error`).
    pub errors: u64,
    /// Those sample slots by reason (`malformed_json`, `missing_field`, …).
    #[serde(default)]
    pub skipped: BTreeMap<String, u64>,
    /// The decision core's counters.
    pub deduper: DeduperStats,
    /// Duplicate clusters. Absent from a distributed `write` step, which sees only its shard's
    /// part of each cluster: the `decide` steps count them, a group each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterStats>,
    /// Output files written.
    pub outputs: Vec<OutputFile>,
    /// Wall seconds.
    pub seconds: f64,
    /// Input MB/s.
    pub mb_per_second: f64,
    /// Input bytes the pass went through (decompressed), for its MB/s: those of the records it
    /// decided unread included.
    pub bytes: u64,
    /// Bytes of input the pass read, as stored: compressed bytes for a compressed input, and for
    /// a chunk of a JSONL file read by its records' places only the byte ranges it read (the
    /// records it had to decide, and the short gaps read with them; of a compressed file, the
    /// members holding them).
    #[serde(default)]
    pub bytes_read: u64,
    /// Samples a field preference ranked, and those whose field held a number: a field none
    /// of them holds is refused rather than silently ranking every copy alike.
    #[serde(skip)]
    pub ranked: (u64, u64),
}

/// One output file (or its parts, when split by size).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// The files written.
    pub paths: Vec<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl From<WrittenFile> for OutputFile {
    fn from(w: WrittenFile) -> Self {
        OutputFile {
            paths: w.paths,
            records: w.records,
            bytes: w.bytes,
        }
    }
}

/// How a shard's files and rows are numbered among all shards of a distributed run (the
/// one-process run is its only shard).
pub(crate) struct Addressing<'a> {
    /// The number of the shard's first file.
    pub file_base: u32,
    /// The number of the shard's first row.
    pub row_base: u64,
    /// Every file's name as decisions print it, in global order.
    pub names: &'a [String],
}

/// Whether hot samples carry their shingle sets: under exact verification, when rows have band
/// keys (an exact-only run never compares sets).
pub(crate) fn needs_shingles(cfg: &Stage2Config) -> bool {
    cfg.deduper.verify == Verify::Jaccard && cfg.rule.band_keys
}

/// The settings the crate's unit tests start from.
#[cfg(test)]
pub(crate) mod test_settings {
    use neardup_corpus::{FieldPath, TextSelector};
    use neardup_exec::OnError;
    use neardup_keys::RowRule;
    use neardup_sketch::{LshParams, Shingler, SketchConfig, Sketcher};

    use super::{EmptyPolicy, Stage2Config};
    use crate::deduper::DeduperConfig;
    use crate::prefer::Prefer;

    /// Character 5-grams, 128 permutations in 16 bands of 8.
    pub(crate) fn sketcher() -> Sketcher {
        Sketcher::new(SketchConfig::new(
            Shingler::Chars { k: 5, step: 1 },
            128,
            LshParams::new(16, 8).unwrap(),
        ))
        .unwrap()
    }

    /// Stage 2 over the `text` field with [`sketcher`]: one thread, the first copy kept,
    /// empty texts kept, unreadable records skipped, nothing written.
    pub(crate) fn stage2() -> Stage2Config {
        Stage2Config {
            sketcher: sketcher(),
            rule: RowRule::default(),
            selector: TextSelector::single(FieldPath::top("text")),
            deduper: DeduperConfig::default(),
            empty: EmptyPolicy::Keep,
            prefer: Prefer::First,
            sort_memory: 1 << 20,
            threads: 1,
            block_bytes: 1 << 16,
            block_memory: None,
            on_error: OnError::Skip,
            output: None,
            decisions: None,
            prior: None,
        }
    }
}
