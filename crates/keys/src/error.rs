//! Errors of stage 1: what failed, with the values and the source error its message is built
//! from.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use neardup_corpus::UnreadableRange;
use serde::{Deserialize, Serialize};

/// Why stage 1 (or reading / merging its files) failed. Its message holds its causes', so
/// `source()` never returns one the message printed.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// An I/O error on a named file.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error (in the message).
        error: io::Error,
    },
    /// A key-table, hot-key or spill file (or the bytes of a table) is damaged or not ours.
    #[error("{}{damage}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Corrupt {
        /// The file, when known (a table assembled from parts has none).
        path: Option<PathBuf>,
        /// What is wrong with it.
        damage: Damage,
    },
    /// Tables or hot keys made with different settings were combined.
    #[error(transparent)]
    Incompatible(Incompatible),
    /// The settings are invalid, or the key tables and hot keys given do not go together.
    #[error(transparent)]
    Config(#[from] KeysSettingsError),
    /// Bad input with `on_error = fail` (the first problem, naming the file and record), or a
    /// run that read nothing usable (boxed: errors pass through every call of the hot loops'
    /// callers, and this one is rare and large).
    #[error(transparent)]
    Input(Box<InputFailure>),
    /// The run's [`neardup_exec::CancelToken`] was cancelled.
    #[error("interrupted")]
    Interrupted,
}

impl KeysError {
    pub(crate) fn io(path: &Path, error: io::Error) -> KeysError {
        KeysError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    /// A [`KeysError::Corrupt`] of the file `path`.
    pub(crate) fn corrupt(path: &Path, damage: Damage) -> KeysError {
        KeysError::Corrupt {
            path: Some(path.to_path_buf()),
            damage,
        }
    }

    /// This error, naming `path` as its file when it names none yet.
    pub(crate) fn in_file(self, path: &Path) -> KeysError {
        match self {
            KeysError::Corrupt { path: None, damage } => KeysError::corrupt(path, damage),
            other => other,
        }
    }
}

/// What is wrong with a damaged key-table, hot-key or spill file.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// It does not start with the magic bytes of its kind of file.
    #[error("not a neardup {kind} file (bad magic bytes)")]
    BadMagic {
        /// The kind named by the magic bytes ("NDKEYS", "NDHOTK").
        kind: String,
    },
    /// The header's declared length cannot be right.
    #[error("implausible header length {0}")]
    HeaderLength(u64),
    /// The header is not what neardup writes.
    #[error("unreadable header: {0}")]
    Header(serde_json::Error),
    /// The file is of a format version this build does not read.
    #[error(
        "{what} format version {found} is not supported (this build reads versions up to {supported}): \
         made by a newer neardup, it is read by that version"
    )]
    FormatVersion {
        /// "key table" or "hot-key".
        what: &'static str,
        /// The file's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The header's per-file row counts disagree with its total.
    #[error("the header's files hold {files_rows} rows but it declares {declared}")]
    DeclaredRows {
        /// The sum of the files' rows.
        files_rows: u64,
        /// The total it declares.
        declared: u64,
    },
    /// The declared rows × columns overflow.
    #[error("implausible size")]
    ImplausibleSize,
    /// The keys held disagree with the rows × columns declared; `written` when counted while
    /// writing the file rather than reading it.
    #[error(
        "{} {rows} rows × {columns} columns were declared",
        if *written { format!("{keys} keys were written, but") } else { format!("table holds {keys} keys, but") }
    )]
    KeyCount {
        /// Keys held or written.
        keys: u64,
        /// Rows declared.
        rows: u64,
        /// Columns per row.
        columns: usize,
        /// Counted while writing.
        written: bool,
    },
    /// The scratch file holding a table's rows while it is written holds another size.
    #[error("the scratch file of its rows holds {copied} bytes, {written} were written")]
    ScratchSize {
        /// Bytes it holds.
        copied: u64,
        /// Bytes written to it.
        written: u64,
    },
    /// Hot keys are not strictly ascending.
    #[error("hot keys are not strictly ascending")]
    NotAscending,
    /// The plan names a group outside its number of groups.
    #[error("the plan names a group outside its {groups} groups")]
    PlanGroup {
        /// The plan's groups.
        groups: u32,
    },
    /// The file ends early (the read's error, which the message does not print, as source).
    #[error("file is truncated")]
    Truncated(#[source] io::Error),
    /// A spill file ends early.
    #[error("spill file is truncated")]
    SpillTruncated,
    /// The end marker is missing.
    #[error("missing end marker (truncated?)")]
    MissingEndMarker,
    /// The checksum stored differs from the one computed.
    #[error("checksum mismatch (stored {stored:016x}, computed {computed:016x})")]
    Checksum {
        /// Stored in the file.
        stored: u64,
        /// Computed from its contents.
        computed: u64,
    },
    /// The places of a chunk's records, after the keys, are not what the header says of them.
    #[error(
        "the places of the records of chunk {chunk} of input {file} are not what the header \
         declares"
    )]
    Places {
        /// The input: its index in the header's files.
        file: u64,
        /// The chunk: its index in the input's chunks.
        chunk: u64,
    },
    /// Bytes follow the end marker.
    #[error("trailing bytes after end marker")]
    TrailingBytes,
}

/// One quoted input problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The input file.
    pub file: PathBuf,
    /// The record (0-based line or row within the file, as in the decisions), when known.
    pub record: Option<u64>,
    /// The field slot, when known.
    pub field: Option<u32>,
    /// Kind, e.g. `malformed_json` or `truncated`.
    pub kind: String,
    /// What is wrong, for people (names the field, or the records lost).
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(r) = self.record {
            write!(f, ": record {r}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Why stage 1 stopped on its input.
#[derive(Debug, thiserror::Error)]
pub enum InputFailure {
    /// A sample that could not be read, with `on_error = fail`.
    #[error("{0}")]
    Record(Problem),
    /// A part of an input that could not be read, with `on_error = fail` (or a failed storage
    /// request, which is never skipped).
    #[error("{0}")]
    Unreadable(UnreadableRange),
    /// No record has the selected fields `missing` (quoted as given); `seen` are fields the
    /// records do have (from their first records), when any.
    #[error("{}", fields_never_seen(missing, seen))]
    FieldsNeverSeen {
        /// The selected fields no record has.
        missing: Vec<String>,
        /// Fields the records have.
        seen: Vec<String>,
    },
    /// No text could be read at all.
    #[error("{}", nothing_read(*records, skipped, unreadable))]
    NothingRead {
        /// Records read.
        records: u64,
        /// Sample slots without a text, by reason.
        skipped: BTreeMap<String, u64>,
        /// The parts that could not be read (all of them: the message shows three).
        unreadable: Vec<UnreadableRange>,
    },
}

/// Fields quoted as a message lists them: "`a`, `b`".
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The message of [`InputFailure::FieldsNeverSeen`].
fn fields_never_seen(missing: &[String], seen: &[String]) -> String {
    let one = if missing.len() == 1 {
        "the field"
    } else {
        "the fields"
    };
    let mut m = format!(
        "no record of the inputs has {one} {} (chosen with --field)",
        quoted(missing)
    );
    if !seen.is_empty() {
        m += &format!("; the records have the fields {}", quoted(seen));
    }
    m
}

/// The message of [`InputFailure::NothingRead`].
fn nothing_read(
    records: u64,
    skipped: &BTreeMap<String, u64>,
    unreadable: &[UnreadableRange],
) -> String {
    let mut why = Vec::new();
    if skipped.values().sum::<u64>() > 0 {
        let describe = |kind: &str| match kind {
            "malformed_json" => "not valid JSON".to_string(),
            "invalid_utf8" => "not valid UTF-8".to_string(),
            "missing_field" => "without the text field".to_string(),
            "null_field" => "with a null text field".to_string(),
            "not_a_string" => "with a text field that is not a string".to_string(),
            other => other.to_string(),
        };
        let kinds: Vec<String> = skipped
            .iter()
            .map(|(kind, n)| format!("{n} {}", describe(kind)))
            .collect();
        why.push(format!(
            "none of the {records} records read has a text ({})",
            kinds.join(", ")
        ));
    }
    if !unreadable.is_empty() {
        let shown: Vec<String> = unreadable
            .iter()
            .take(3)
            .map(UnreadableRange::to_string)
            .collect();
        let more = unreadable.len().saturating_sub(shown.len());
        why.push(format!(
            "{}: {}{}",
            if records == 0 {
                "no record could be read"
            } else {
                "the rest is unreadable"
            },
            shown.join("; "),
            if more > 0 {
                format!("; and {more} more unreadable parts")
            } else {
                String::new()
            }
        ));
    }
    format!("nothing to deduplicate: {}", why.join("; "))
}

/// A key table as messages name it: its file when it has one, and its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The table's shard number.
    pub shard: u32,
    /// Its file, when it has one.
    pub path: Option<PathBuf>,
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{} (shard {})", p.display(), self.shard),
            None => write!(f, "the table of shard {}", self.shard),
        }
    }
}

/// How two key-table layouts (of two tables, or a table and hot keys) differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutDifference {
    /// A setting has two values.
    Setting {
        /// The setting, as messages name it.
        setting: &'static str,
        /// The value of the first (or this) layout.
        this: String,
        /// The value of the other.
        other: String,
    },
    /// Everything the layouts describe is equal, and their settings fingerprints differ: the
    /// text normalisation, which the description does not show, differs.
    Normalisation {
        /// The first layout's settings fingerprint.
        this: u64,
        /// The other's.
        other: u64,
    },
    /// The layouts differ in nothing this build can name.
    Unnamed,
}

impl fmt::Display for LayoutDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutDifference::Setting {
                setting,
                this,
                other,
            } => write!(f, "{setting}: {this} vs {other}"),
            LayoutDifference::Normalisation { this, other } => write!(
                f,
                "text normalisation (--lowercase, --nfkc, --strip-punctuation, --keep-chars, \
                 --collapse-whitespace, --no-trim): settings fingerprints {this:016x} vs \
                 {other:016x}"
            ),
            LayoutDifference::Unnamed => {
                f.write_str("the layouts differ in a way this build cannot name")
            }
        }
    }
}

/// `items` separated by "; ".
fn joined<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Key tables or hot keys made with different settings (a [`KeysError::Incompatible`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    /// A layout that differs from the one expected.
    #[error("made with different settings: {}", joined(differences))]
    Layout {
        /// The settings that differ, the expected layout's value first.
        differences: Vec<LayoutDifference>,
    },
    /// Two of the tables given differ.
    #[error(
        "key tables were made with different settings: {first} and {other}: {}; make every \
         table with the same settings",
        joined(differences)
    )]
    Tables {
        /// The first table given.
        first: TableName,
        /// The table that differs from it.
        other: TableName,
        /// The settings that differ, the first table's value first.
        differences: Vec<LayoutDifference>,
    },
}

/// How a table given to `apply` differs from the tables the hot keys were counted from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableProblem {
    /// The table was not counted.
    NotCounted {
        /// The table.
        table: TableName,
    },
    /// The table holds another number of rows than the one counted.
    Rows {
        /// The table.
        table: TableName,
        /// Its rows.
        rows: u64,
        /// The rows of the table counted.
        counted: u64,
    },
    /// The table's checksum differs from the one counted.
    Checksum {
        /// The table.
        table: TableName,
    },
    /// A table counted was not given.
    Missing {
        /// Its shard.
        shard: u32,
        /// Its rows.
        rows: u64,
    },
}

impl fmt::Display for TableProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableProblem::NotCounted { table } => write!(f, "{table} was not counted in them"),
            TableProblem::Rows {
                table,
                rows,
                counted,
            } => write!(
                f,
                "{table} holds {rows} rows, the table counted held {counted}: it was made again \
                 after `neardup hot` ran; run `neardup hot` again over the current tables"
            ),
            TableProblem::Checksum { table } => write!(
                f,
                "{table} is not the table that was counted (its checksum differs): it was made \
                 again after `neardup hot` ran; run `neardup hot` again over the current tables"
            ),
            TableProblem::Missing { shard, rows } => {
                write!(f, "shard {shard} ({rows} rows) is missing")
            }
        }
    }
}

/// Settings stage 1 cannot run with, or key tables and hot keys that do not go together (a
/// [`KeysError::Config`]).
#[derive(Debug, thiserror::Error)]
pub enum KeysSettingsError {
    /// The sketch settings are invalid.
    #[error(transparent)]
    Sketch(neardup_sketch::SketchError),
    /// The worker threads could not be started.
    #[error("cannot start {threads} threads: {error}")]
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not (in the message).
        error: rayon::ThreadPoolBuildError,
    },
    /// A plan was asked for no groups.
    #[error("--groups must be at least 1")]
    NoGroups,
    /// More hot keys than a plan numbers.
    #[error(
        "{hot_keys} hot keys: the plan numbers hot keys with 32 bits; split the corpus into runs \
         of fewer than 4,294,967,295 hot keys"
    )]
    TooManyHotKeys {
        /// The hot keys.
        hot_keys: usize,
    },
    /// A plan made for other hot keys.
    #[error("a plan for {plan_keys} hot keys in {groups} groups does not fit {hot_keys} hot keys")]
    PlanDoesNotFit {
        /// Hot keys the plan has a group for.
        plan_keys: usize,
        /// The plan's groups.
        groups: u32,
        /// The hot keys.
        hot_keys: usize,
    },
    /// A hot-key file of format version 1, which records no key tables.
    #[error(
        "{}: this hot-key file was written by an older neardup (format version 1), which did \
         not record the key tables it was counted from; run `neardup hot` again to rewrite it",
        path.display()
    )]
    HotFileVersion1 {
        /// The file.
        path: PathBuf,
    },
    /// Hot keys counted within one run were to be saved (they name no key tables).
    #[error(
        "{}: these hot keys were counted within one run and record no key tables, so they \
         cannot be saved for `apply`; count the saved tables (neardup hot, merge_table_files) \
         instead",
        path.display()
    )]
    UnsavedHotKeys {
        /// The file they were to be saved to.
        path: PathBuf,
    },
    /// Hot keys counted within one run were asked which tables they were counted from.
    #[error("these hot keys were counted within one run and name no key tables")]
    NoCountedTables,
    /// A table that is not one of those the hot keys were counted from.
    #[error(
        "{name} (shard {shard}) is not one of the key tables the hot keys were counted from \
         (shards {}): give the table `neardup hot` counted, or run `neardup hot` again over the \
         current tables",
        shard_list(counted)
    )]
    NotCountedTable {
        /// The table, as messages name it.
        name: String,
        /// Its shard.
        shard: u32,
        /// The shards the hot keys were counted from.
        counted: Vec<u32>,
    },
    /// The tables given to `apply` are not exactly those the hot keys were counted from.
    #[error(
        "the hot keys were counted from {} key table{plural} (shard{plural} {}), but {}: pass \
         `neardup apply` exactly the tables given to `neardup hot`",
        counted.len(),
        shard_list(counted),
        joined(problems),
        plural = if counted.len() == 1 { "" } else { "s" }
    )]
    OtherTables {
        /// The shards the hot keys were counted from.
        counted: Vec<u32>,
        /// What differs, in the order found.
        problems: Vec<TableProblem>,
    },
    /// Two tables claim one shard number.
    #[error("{first} and {other} claim the same shard number: give each shard its own --shard")]
    SameShard {
        /// The table given first.
        first: TableName,
        /// The other.
        other: TableName,
    },
    /// No key tables were given to merge.
    #[error("no key tables to merge")]
    NoTables,
    /// A table reader was finished before all of its keys were read.
    #[error("{}: finished reading with {left} keys left", path.display())]
    KeysLeft {
        /// The table's file.
        path: PathBuf,
        /// Keys not read.
        left: u64,
    },
}

/// Shard numbers as a message lists them: "0, 1, 2".
fn shard_list(shards: &[u32]) -> String {
    shards
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
