//! Errors of stage 2: what failed, with the value or the error it failed on; the messages are
//! built from them.

use std::fmt;
use std::io;
use std::path::PathBuf;

use neardup_corpus::WriteError;
use neardup_keys::UnreadableRange;

/// Why stage 2 failed.
#[derive(Debug)]
pub enum DedupError {
    /// Invalid settings.
    Config(SettingsError),
    /// Bad input with `on_error = fail`, or a part of an input that could not be read from
    /// storage: where, how many records, and why.
    Input(Box<UnreadableRange>),
    /// Stage 2 saw different inputs than stage 1 (files changed in between, or a mismatched table).
    Mismatch(Mismatch),
    /// Writing the filtered dataset or the decisions failed (the error names the file).
    Output(WriteError),
    /// Writing the streams of a distributed step failed.
    StepOutput {
        /// What was being written, e.g. "the signed samples".
        what: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The thread writing the filtered dataset stopped; the error it stopped with is the run's.
    WriterStopped,
    /// The exact-verification spill file could not be written or read.
    Spill(io::Error),
    /// The run's [`neardup_exec::CancelToken`] was cancelled; nothing was published.
    Interrupted,
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (another hot-key file, group or shard).
    Step(StepInputError),
    /// A hot sample's record holds something other than a number in the field its rank is read
    /// from (`Prefer::Field`).
    BadRank(Box<BadRank>),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A part of an input (a chunk) holds other numbers of records or samples than stage 1 read.
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
    SizeDuringStage2 {
        /// The input file.
        file: PathBuf,
        /// Its size when stage 1 found it (the bytes stage 2 read).
        stage1: u64,
        /// Its size when stage 2 ended.
        now: u64,
    },
    /// The hot mask covers another number of rows than the inputs' table rows.
    MaskRows {
        /// Rows of the mask.
        mask: u64,
        /// Rows of the inputs.
        inputs: u64,
    },
    /// A hot sample came to a route that cannot take it (`what` it was): the inputs, key table
    /// and hot-key file do not go together.
    Route {
        /// What the sample was, e.g. "a hot sample without its signature".
        what: &'static str,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::ChunkCounts {
                file,
                stage1,
                stage2,
            } => write!(
                f,
                "{}: stage 1 read {} records / {} samples from this part of the file, stage 2 \
                 read {} / {}; did the input change between the stages?",
                file.display(),
                stage1.0,
                stage1.1,
                stage2.0,
                stage2.1
            ),
            Mismatch::Size { file, stage1, now } => write!(
                f,
                "{}: {now} bytes now, {stage1} bytes when stage 1 read it; the input changed \
                 between the stages: run stage 1 again on the inputs as they are",
                file.display()
            ),
            Mismatch::SizeDuringStage2 { file, stage1, now } => write!(
                f,
                "{}: {now} bytes when stage 2 ended, {stage1} bytes when the run read it; the \
                 input changed while the run read it, so what changed is in no output and no \
                 total: nothing was published; run again once the input is complete",
                file.display()
            ),
            Mismatch::MaskRows { mask, inputs } => write!(
                f,
                "the hot mask covers {mask} rows but the inputs have {inputs}"
            ),
            Mismatch::Route { what } => write!(
                f,
                "{what}: the inputs, key table and hot-key file do not go together"
            ),
        }
    }
}

/// What is wrong with the outputs of an earlier distributed step (`sign`'s signed streams,
/// `decide`'s decided streams) given to this one. `stream` names the stream for people (the
/// directory or value it came from); rows are in the global row order.
#[derive(Debug)]
pub enum StepInputError {
    /// A stream could not be read or decoded.
    Read {
        /// The stream.
        stream: String,
        /// The error.
        source: io::Error,
    },
    /// A decided stream's rows are not ascending.
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
    NotHotRow {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// Found while merging rather than at the end.
        before_end: bool,
    },
    /// No decided stream holds the decision of a hot row (a group's stream is missing).
    NoDecision {
        /// The row.
        row: u64,
    },
    /// The sign outputs were made with other sketch settings than the hot keys'.
    Shape {
        /// Permutations and keys per row the sign outputs hold.
        signed: (usize, usize),
        /// Permutations and keys per row of the hot keys' settings.
        expected: (usize, usize),
    },
    /// A signed stream's rows are not after those of the streams before it.
    SignedOutOfOrder {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// The row before it.
        after: u64,
    },
    /// A ranked stream (`--prefer`) is not in (rank, row) order.
    RankOutOfOrder {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
        /// The row before it in the stream, which ranks after it.
        after: u64,
    },
    /// A sample sent as an exact copy has no earlier sample of its content in the group.
    CopyWithoutOriginal {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
    },
    /// A sample's text does not hash to the content hash its sign step sent.
    ContentHash {
        /// The stream.
        stream: String,
        /// The row.
        row: u64,
    },
}

impl fmt::Display for StepInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepInputError::Read { stream, source } => write!(f, "{stream}: {source}"),
            StepInputError::DecidedOutOfOrder { stream, row, after } => write!(
                f,
                "{stream}: decided rows are out of order ({row} after {after}); the file is not \
                 what `neardup decide` wrote"
            ),
            StepInputError::NotHotRow {
                stream,
                row,
                before_end: true,
            } => write!(
                f,
                "{stream}: holds a decision for row {row}, which is not a hot row of this shard \
                 as this table and hot-key file see it; give `write` the decided directories \
                 made from this shard's sign output"
            ),
            StepInputError::NotHotRow {
                stream,
                row,
                before_end: false,
            } => write!(
                f,
                "{stream}: holds a decision for row {row}, which is not a hot row of this shard; \
                 give `write` the decided directories made from this shard's sign output"
            ),
            StepInputError::NoDecision { row } => write!(
                f,
                "no decided directory holds the decision of hot row {row}: pass `write` the \
                 decided directories of every group (--decided decided-0 … decided-(G-1))"
            ),
            StepInputError::Shape { signed, expected } => write!(
                f,
                "the sign outputs hold {} permutations and {} keys per row, the hot keys' \
                 settings {} and {}: they were made with other settings",
                signed.0, signed.1, expected.0, expected.1
            ),
            StepInputError::SignedOutOfOrder { stream, row, after } => write!(
                f,
                "{stream}: row {row} comes after row {after}: sign outputs must be given in \
                 shard order, each shard once"
            ),
            StepInputError::RankOutOfOrder { stream, row, after } => write!(
                f,
                "{stream}: row {row} comes after row {after} but ranks before it: a sign output \
                 made with --prefer is sorted by rank; this one is damaged, sign the shard again"
            ),
            StepInputError::CopyWithoutOriginal { stream, row } => write!(
                f,
                "{stream}: row {row} is sent as an exact copy, but no earlier sample of this \
                 group has its content; the sign outputs are incomplete or from another group"
            ),
            StepInputError::ContentHash { stream, row } => write!(
                f,
                "{stream}: row {row} does not hash to the content hash its sign step sent; the \
                 sign output was made with other sketch settings or is damaged"
            ),
        }
    }
}

impl std::error::Error for StepInputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StepInputError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Settings stage 2 cannot run with.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingsError {
    /// The similarity threshold is outside [0, 1] or not a number.
    Threshold(f64),
    /// A bound of 0 representatives per bucket (no bound is `None`).
    NoRepresentatives,
    /// The hot keys were made with other sketch settings or another row rule than the deduper's.
    OtherSketch,
    /// Exact verification was asked of a decide step whose sign outputs carry no texts (they
    /// were made under `--verify estimate`).
    SignedWithoutTexts,
    /// A sign step was given outputs to write (the dataset and decisions are the write step's).
    SignWritesNothing,
    /// More input files than a sample address can number.
    TooManyFiles,
    /// A preference other than input order with a saved index: ranking B's records together
    /// with the earlier runs' could change the earlier runs' decisions.
    PreferAgainstIndex,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::Threshold(t) => write!(f, "threshold must be in [0, 1], got {t}"),
            SettingsError::NoRepresentatives => {
                f.write_str("max_reps must be at least 1 (or unset for no bound)")
            }
            SettingsError::OtherSketch => {
                f.write_str("the hot keys were made with different sketch settings")
            }
            SettingsError::SignedWithoutTexts => f.write_str(
                "exact verification needs the samples' texts, and these sign outputs were made \
                 without them (with --verify estimate): run `neardup sign` with the same --verify \
                 as `decide`",
            ),
            SettingsError::SignWritesNothing => f.write_str(
                "`sign` writes only its signed samples: the dataset and the decisions are written \
                 by `write`",
            ),
            SettingsError::TooManyFiles => f.write_str("more than 4,294,967,295 input files"),
            SettingsError::PreferAgainstIndex => f.write_str(
                "a run against a saved index keeps the first copy: the earlier runs' decisions \
                 are final, and a preference (prefer) would rank this run's records before \
                 theirs; leave prefer at `first`",
            ),
        }
    }
}

impl std::error::Error for SettingsError {}

impl From<SettingsError> for DedupError {
    fn from(e: SettingsError) -> Self {
        DedupError::Config(e)
    }
}

impl fmt::Display for DedupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupError::Config(e) => write!(f, "invalid settings: {e}"),
            DedupError::Input(range) => write!(f, "input error: {range}"),
            DedupError::Mismatch(m) => write!(f, "inputs changed since stage 1: {m}"),
            DedupError::Output(e) => write!(f, "output error: {e}"),
            DedupError::StepOutput { what, source } => {
                write!(f, "output error: writing {what}: {source}")
            }
            DedupError::WriterStopped => f.write_str("output error: the output writer stopped"),
            DedupError::Spill(e) => write!(f, "spill error: {e}"),
            DedupError::Interrupted => f.write_str("interrupted"),
            DedupError::Step(e) => e.fmt(f),
            DedupError::BadRank(b) => {
                let field = b.prefer.rsplit_once(':').map_or(b.prefer.as_str(), |p| p.0);
                write!(
                    f,
                    "input error: {}: record {}: the field `{field}` holds {}, and the preference \
                     `{}` ranks records by it as a number: fix the value, or remove it (a record \
                     without the field, or with null, ranks after every number), or choose \
                     another preference",
                    b.file.display(),
                    b.record,
                    b.found,
                    b.prefer
                )
            }
        }
    }
}

impl std::error::Error for DedupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DedupError::Config(e) => Some(e),
            DedupError::Output(e) => Some(e),
            DedupError::StepOutput { source, .. } | DedupError::Spill(source) => Some(source),
            DedupError::Step(e) => e.source(),
            _ => None,
        }
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
