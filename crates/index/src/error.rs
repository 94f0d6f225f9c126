//! What can go wrong with a saved index.

use std::fmt;
use std::path::PathBuf;

/// An index that cannot be made, read or used. Its message holds its causes', so `source()`
/// never returns one the message printed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Reading or writing the file failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (in the message).
        error: std::io::Error,
    },
    /// The file is not an index.
    #[error(
        "{}: not a neardup index (made by `neardup dedup --index-out` or `neardup index`)",
        path.display()
    )]
    NotAnIndex {
        /// The file.
        path: PathBuf,
    },
    /// The file is an index of another format version.
    #[error(
        "{}: an index of format {found}, and this neardup reads format {}: make it again with \
         this version (`neardup index`)",
        path.display(),
        crate::FORMAT_VERSION
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The file is damaged.
    #[error(
        "{}: the index is damaged: {damage}; make it again (`neardup index`)",
        path.display()
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        damage: IndexDamage,
    },
    /// The index was made with other settings than this run's.
    #[error(
        "{}: the index was made with other settings than this run's ({}); a run against an \
         index must use the settings the index was made with",
        path.display(),
        differences.join("; ")
    )]
    OtherSettings {
        /// The index.
        path: PathBuf,
        /// Each setting that differs: "name: the index's value vs this run's".
        differences: Vec<String>,
    },
    /// Two indexes given together hold the same file.
    #[error(
        "{file} is in two of the indexes given ({} and {}): an index made against another \
         already holds that one's files, so give only the later one",
        first.display(),
        second.display()
    )]
    Overlap {
        /// The file.
        file: String,
        /// The index listed first.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// No index was given.
    #[error("no index was given")]
    NoIndex,
    /// Indexes with `min_key_count` other than 1 are not supported.
    #[error(
        "an index needs min_key_count = 1, and this run has {0}: with more, records of a later \
         run could change this run's decisions"
    )]
    MinCount(u32),
    /// More files or entries than the format numbers.
    #[error("more files or entries than an index numbers")]
    TooManyFiles,
    /// Decisions or rows that do not fit the run being indexed.
    #[error(
        "{}cannot index these decisions: {mismatch}",
        path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default()
    )]
    Decisions {
        /// The decisions file, when they were read from one.
        path: Option<PathBuf>,
        /// What does not fit.
        mismatch: DecisionsMismatch,
    },
    /// A file of an indexed run is not what the index recorded.
    #[error(
        "{}: {change} since the index was made; the index needs its runs' files unchanged (make \
         the index again from them, or restore the file)",
        file.display()
    )]
    Changed {
        /// The file.
        file: PathBuf,
        /// What changed.
        change: FileChange,
    },
    /// A file of an indexed run cannot be opened (moved or deleted).
    #[error(
        "{}: cannot be read back ({error}): a run against an index made with --verify exact \
         reads back the records of the indexed runs that its hot keys reach (an index made with \
         --verify estimate holds what it needs and reads nothing); restore the file at this path",
        file.display()
    )]
    Missing {
        /// The file.
        file: PathBuf,
        /// Why (in the message).
        error: std::io::Error,
    },
    /// A record of an indexed run could not be read back.
    #[error("{}: a record the index names cannot be read back: {error}", file.display())]
    Unreadable {
        /// The file.
        file: PathBuf,
        /// Why (in the message).
        error: Box<neardup_corpus::ReadError>,
    },
}

/// What is wrong with a damaged index file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexDamage {
    /// It ends before its end marker.
    CutShort,
    /// Its checksum does not match its bytes.
    Checksum,
    /// Its header's length points past its end.
    HeaderLength,
    /// Its header is not the JSON an index has (the parser's message).
    Header(String),
    /// Its entries end before the header's count.
    EntriesShort,
    /// It holds more bytes than its entries.
    Trailing,
    /// An entry names a file the header does not list.
    UnknownFile,
    /// More entries than an index numbers.
    TooManyEntries,
    /// An id is not UTF-8.
    IdNotUtf8,
    /// A value of the online index's state is none this version writes (what it is).
    Unknown(&'static str),
}

impl fmt::Display for IndexDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexDamage::CutShort => f.write_str("it ends early (the file was cut short)"),
            IndexDamage::Checksum => f.write_str("its checksum does not match its contents"),
            IndexDamage::HeaderLength => f.write_str("its header length is out of range"),
            IndexDamage::Header(e) => write!(f, "its header cannot be read ({e})"),
            IndexDamage::EntriesShort => f.write_str("its entries end early"),
            IndexDamage::Trailing => f.write_str("it holds more than its header says"),
            IndexDamage::UnknownFile => {
                f.write_str("an entry names a file the index does not list")
            }
            IndexDamage::TooManyEntries => f.write_str("it holds too many entries"),
            IndexDamage::IdNotUtf8 => f.write_str("an id is not UTF-8"),
            IndexDamage::Unknown(what) => write!(f, "it holds an unknown {what}"),
        }
    }
}

/// How a file of an indexed run differs from what the index recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Its size.
    Size {
        /// When the index was made.
        was: u64,
        /// Now.
        now: u64,
    },
    /// A record the index names is no longer there.
    RecordGone {
        /// The record, from 0.
        record: u64,
        /// Its field slot.
        field: u32,
    },
    /// The text of a record the index names.
    Text {
        /// The record, from 0.
        record: u64,
    },
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileChange::Size { was, now } => {
                write!(f, "its size changed from {was} to {now} bytes")
            }
            // Records are numbered from 0, as in decisions and reports.
            FileChange::RecordGone { record, field } => {
                write!(f, "record {record} (field {field}) is no longer there")
            }
            FileChange::Text { record } => {
                write!(f, "the text of record {record} has changed")
            }
        }
    }
}

/// How decisions and key rows given to an index do not fit together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionsMismatch {
    /// A decision numbers a file outside the run being indexed.
    FileOutsideRun {
        /// The file number.
        file: u32,
    },
    /// A row of another width than the settings make.
    RowWidth {
        /// Keys in the row.
        found: usize,
        /// Keys the settings make.
        expected: usize,
    },
    /// More samples with a text than the tables have rows.
    MoreSamplesThanRows,
    /// Fewer samples with a text than the tables have rows.
    FewerSamplesThanRows {
        /// Samples with a text decided.
        samples: u64,
        /// Rows of the tables.
        rows: u64,
    },
    /// A decision names a file of neither the tables nor the indexes given.
    UnknownFile {
        /// The file as named.
        name: String,
    },
    /// A drop without its cluster (decisions of an older neardup).
    NoCluster {
        /// Its file.
        file: String,
        /// Its record.
        record: u64,
    },
    /// A file the tables list has no decision.
    NoDecisionsFor {
        /// The file.
        name: String,
    },
    /// A decision past the tables' last sample.
    PastTables {
        /// Its file.
        file: String,
        /// Its record.
        record: u64,
    },
}

impl fmt::Display for DecisionsMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecisionsMismatch::FileOutsideRun { file } => {
                write!(
                    f,
                    "a decision names file number {file}, outside this run's files"
                )
            }
            DecisionsMismatch::RowWidth { found, expected } => write!(
                f,
                "a row of {found} keys where the settings make {expected}: give the settings \
                 the run was made with"
            ),
            DecisionsMismatch::MoreSamplesThanRows => f.write_str(
                "more samples with a text than the tables have rows (give the tables of every \
                 shard, and the decisions of the run that made them)",
            ),
            DecisionsMismatch::FewerSamplesThanRows { samples, rows } => write!(
                f,
                "{samples} samples with a text were decided, and the tables have {rows} rows \
                 (give the decisions of the run that made these tables, whole)"
            ),
            DecisionsMismatch::UnknownFile { name } => write!(
                f,
                "a decision names {name}, a file of neither these tables nor the indexes given \
                 (give the indexes the run was made against)"
            ),
            DecisionsMismatch::NoCluster { file, record } => write!(
                f,
                "the drop of {file} record {record} names no cluster (decisions of an older \
                 neardup: make them again)"
            ),
            DecisionsMismatch::NoDecisionsFor { name } => write!(
                f,
                "there is no decision for {name}, which the tables list (give the decisions of \
                 the run that made these tables)"
            ),
            DecisionsMismatch::PastTables { file, record } => write!(
                f,
                "a decision for {file} record {record} where the tables have no more samples \
                 (give the tables of every shard, and the decisions of the run that made them)"
            ),
        }
    }
}
