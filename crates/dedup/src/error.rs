//! Errors of stage 2: what failed, with the value or the error it failed on; the messages are
//! built from them.

use std::io;
use std::path::PathBuf;

use neardup_corpus::UnreadableRange;
use neardup_corpus::WriteError;

/// Why stage 2 failed. Its message holds its causes', so `source()` never returns one the
/// message printed.
#[derive(Debug, thiserror::Error)]
pub enum DedupError {
    /// Invalid settings.
    #[error("invalid settings: {0}")]
    Config(SettingsError),
    /// Bad input with `on_error = fail`, or a part of an input that could not be read from
    /// storage: where, how many records, and why.
    #[error("input error: {0}")]
    Input(Box<UnreadableRange>),
    /// Stage 2 saw different inputs than stage 1 (files changed in between, or a mismatched table).
    #[error("inputs changed since stage 1: {0}")]
    Mismatch(Mismatch),
    /// Writing the filtered dataset or the decisions failed (the error names the file).
    #[error("output error: {0}")]
    Output(WriteError),
    /// Writing the streams of a distributed step failed.
    #[error("output error: writing {what}: {error}")]
    StepOutput {
        /// What was being written, e.g. "the signed samples".
        what: &'static str,
        /// The system's error (in the message).
        error: io::Error,
    },
    /// The thread writing the filtered dataset stopped; the error it stopped with is the run's.
    #[error("output error: the output writer stopped")]
    WriterStopped,
    /// The exact-verification spill file could not be written or read.
    #[error("spill error: {0}")]
    Spill(io::Error),
    /// The run's [`neardup_exec::CancelToken`] was cancelled; nothing was published.
    #[error("interrupted")]
    Interrupted,
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (another hot-key file, group or shard).
    #[error(transparent)]
    Step(StepInputError),
    /// A hot sample's record holds something other than a number in the field its rank is read
    /// from (`Prefer::Field`).
    #[error("{}", bad_rank(.0))]
    BadRank(Box<BadRank>),
}

/// The message of a [`DedupError::BadRank`].
fn bad_rank(b: &BadRank) -> String {
    let field = b.prefer.rsplit_once(':').map_or(b.prefer.as_str(), |p| p.0);
    format!(
        "input error: {}: record {}: the field `{field}` holds {}, and the preference `{}` ranks \
         records by it as a number: fix the value, or remove it (a record without the field, or \
         with null, ranks after every number), or choose another preference",
        b.file.display(),
        b.record,
        b.found,
        b.prefer
    )
}

/// Where a rank field holds something other than a number (see [`DedupError::BadRank`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRank {
    /// The input file.
    pub file: PathBuf,
    /// The record (numbered from 0 in the file, as decisions number them).
    pub record: u64,
    /// The preference (`quality:desc`), the setting `dedup.prefer` (the CLI's `--prefer`,
    /// which its message adds).
    pub prefer: String,
    /// What the field holds ("a string", "a boolean", …).
    pub found: &'static str,
}

/// How the inputs stage 2 reads differ from what stage 1 recorded of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// A part of an input (a chunk) holds other numbers of records or samples than stage 1 read.
    #[error(
        "{}: stage 1 read {} records / {} samples from this part of the file, stage 2 read {} / \
         {}; did the input change between the stages?",
        file.display(),
        stage1.0,
        stage1.1,
        stage2.0,
        stage2.1
    )]
    ChunkCounts {
        /// The input file.
        file: PathBuf,
        /// Records and samples stage 1 read from the chunk.
        stage1: (u64, u64),
        /// Records and samples stage 2 read from it.
        stage2: (u64, u64),
    },
    /// An input's size is not what it was when stage 1 read it (a record appended past the
    /// last chunk stage 1 read would otherwise go unread).
    #[error(
        "{}: {now} bytes now, {stage1} bytes when stage 1 read it; the input changed between the \
         stages: run stage 1 again on the inputs as they are",
        file.display()
    )]
    Size {
        /// The input file.
        file: PathBuf,
        /// Its size when stage 1 found it.
        stage1: u64,
        /// Its size now.
        now: u64,
    },
    /// An input's size changed while stage 2 read it (records appended then would be in no
    /// output and no total).
    #[error(
        "{}: {now} bytes when stage 2 ended, {stage1} bytes when the run read it; the input \
         changed while the run read it, so what changed is in no output and no total: nothing \
         was published; run again once the input is complete",
        file.display()
    )]
    SizeDuringStage2 {
        /// The input file.
        file: PathBuf,
        /// Its size when stage 1 found it (the bytes stage 2 read).
        stage1: u64,
        /// Its size when stage 2 ended.
        now: u64,
    },
    /// The hot mask covers another number of rows than the inputs' table rows.
    #[error("the hot mask covers {mask} rows but the inputs have {inputs}")]
    MaskRows {
        /// Rows of the mask.
        mask: u64,
        /// Rows of the inputs.
        inputs: u64,
    },
    /// A hot sample came to a route that cannot take it (`what` it was): the inputs, key table
    /// and hot-key file do not go together.
    #[error("{what}: the inputs, key table and hot-key file do not go together")]
    Route {
        /// What the sample was, e.g. "a hot sample without its signature".
        what: &'static str,
    },
}

/// What is wrong with the outputs of an earlier distributed step (`sign`'s signed streams,
/// `decide`'s decided streams) given to this one. `stream` names the stream for people (the
/// directory or value it came from); rows are in the global row order.
#[derive(Debug, thiserror::Error)]
pub enum StepInputError {
    /// A stream could not be read or decoded.
    #[error("{stream}: {error}")]
    Read {
        /// The stream.
        stream: String,
        /// The error (in the message).
        error: io::Error,
    },
    /// A decided stream's rows are not ascending.
    #[error(
        "{stream}: decided rows are out of order ({row} after {after}); the file is not what \
         `neardup decide` wrote"
    )]
    DecidedOutOfOrder {
        /// The stream.
        stream: String,
        /// The row that came after `after`.
        row: u64,
        /// The row before it.
        after: u64,
    },
    /// A decided stream holds a decision for a row that is not a hot row of the shard;
    /// `before_end` when this was found among the rows asked for (not after the last).
    #[error(
        "{stream}: holds a decision for row {row}, which is not a hot row of this shard{}; give \
         `write` the decided directories made from this shard's sign output",
        if *before_end { " as this table and hot-key file see it" } else { "" }
    )]
    NotHotRow {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// Found while merging rather than at the end.
        before_end: bool,
    },
    /// No decided stream holds the decision of a hot row (a group's stream is missing).
    #[error(
        "no decided directory holds the decision of hot row {row}: pass `write` the decided \
         directories of every group (--decided decided-0 … decided-(G-1))"
    )]
    NoDecision {
        /// The row.
        row: u64,
    },
    /// The sign outputs were made with other sketch settings than the hot keys'.
    #[error(
        "the sign outputs hold {} permutations and {} keys per row, the hot keys' settings {} \
         and {}: they were made with other settings",
        signed.0, signed.1, expected.0, expected.1
    )]
    Shape {
        /// Permutations and keys per row the sign outputs hold.
        signed: (usize, usize),
        /// Permutations and keys per row of the hot keys' settings.
        expected: (usize, usize),
    },
    /// A signed stream's rows are not after those of the streams before it.
    #[error(
        "{stream}: row {row} comes after row {after}: sign outputs must be given in shard order, \
         each shard once"
    )]
    SignedOutOfOrder {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// The row before it.
        after: u64,
    },
    /// A ranked stream (`--prefer`) is not in (rank, row) order.
    #[error(
        "{stream}: row {row} comes after row {after} but ranks before it: a sign output made \
         with --prefer is sorted by rank; this one is damaged, sign the shard again"
    )]
    RankOutOfOrder {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// The row before it in the stream, which ranks after it.
        after: u64,
    },
    /// A sample sent as an exact copy has no earlier sample of its content in the group.
    #[error(
        "{stream}: row {row} is sent as an exact copy, but no earlier sample of this group has \
         its content; the sign outputs are incomplete or from another group"
    )]
    CopyWithoutOriginal {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
    },
    /// A sample's text does not hash to the content hash its sign step sent.
    #[error(
        "{stream}: row {row} does not hash to the content hash its sign step sent; the sign \
         output was made with other sketch settings or is damaged"
    )]
    ContentHash {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
    },
}

/// Settings stage 2 cannot run with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// The similarity threshold is outside [0, 1] or not a number.
    #[error("threshold must be in [0, 1], got {0}")]
    Threshold(f64),
    /// A bound of 0 representatives per bucket (no bound is `None`).
    #[error("max_reps must be at least 1 (or unset for no bound)")]
    NoRepresentatives,
    /// The hot keys were made with other sketch settings or another row rule than the deduper's.
    #[error(
        "the hot keys were made with different settings: {} (the hot keys' value first, this \
         deduper's second): pass the settings of the run that counted them",
        differences.join("; ")
    )]
    OtherSketch {
        /// Each setting that differs, as `setting: the hot keys' value vs the deduper's`.
        differences: Vec<String>,
    },
    /// Exact verification was asked of a decide step whose sign outputs carry no texts (they
    /// were made under `--verify estimate`).
    #[error(
        "exact verification needs the samples' texts, and these sign outputs were made without \
         them (with --verify estimate): run `neardup sign` with the same --verify as `decide`"
    )]
    SignedWithoutTexts,
    /// A sign step was given outputs to write (the dataset and decisions are the write step's).
    #[error(
        "`sign` writes only its signed samples: the dataset and the decisions are written by \
         `write`"
    )]
    SignWritesNothing,
    /// More input files than a sample address can number.
    #[error("more than 4,294,967,295 input files")]
    TooManyFiles,
    /// A preference other than input order with a saved index: ranking B's records together
    /// with the earlier runs' could change the earlier runs' decisions.
    #[error(
        "a run against a saved index keeps the first copy: the earlier runs' decisions are \
         final, and a preference (prefer) would rank this run's records before theirs; leave \
         prefer at `first`"
    )]
    PreferAgainstIndex,
    /// A field preference whose field none of the ranked samples holds a number in.
    #[error(
        "the preference `{prefer}`: none of the {ranked} samples with near-duplicate candidates \
         has a number in the field `{field}`, so every copy would rank alike and the first be \
         kept; check the field's name"
    )]
    PreferFieldEmpty {
        /// The preference (`quality:desc`).
        prefer: String,
        /// Its field.
        field: String,
        /// The samples it ranked.
        ranked: u64,
    },
}

impl From<SettingsError> for DedupError {
    fn from(e: SettingsError) -> Self {
        DedupError::Config(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library names the setting by what it is; the CLI adds its flag.
    #[test]
    fn a_bad_rank_names_the_preference_not_a_flag() {
        let e = DedupError::BadRank(Box::new(BadRank {
            file: PathBuf::from("in/a.jsonl"),
            record: 3,
            prefer: "score:desc".into(),
            found: "a string",
        }));
        let m = e.to_string();
        assert!(
            m.contains("in/a.jsonl: record 3: the field `score` holds a string")
                && m.contains("the preference `score:desc` ranks records by it as a number"),
            "{m}"
        );
        assert!(!m.contains("--"), "{m}");
    }
}
