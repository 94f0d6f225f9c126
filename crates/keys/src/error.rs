//! Errors of stage 1: what failed, with the values and the source error its message is built
//! from.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::stage::{Problem, UnreadableRange};

/// Why stage 1 (or reading / merging its files) failed.
#[derive(Debug)]
pub enum KeysError {
    /// An I/O error on a named file.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A key-table, hot-key or spill file (or the bytes of a table) is damaged or not ours.
    Corrupt {
        /// The file, when known (a table assembled from parts has none).
        path: Option<PathBuf>,
        /// What is wrong with it.
        damage: Damage,
    },
    /// Tables or hot keys made with different settings were combined.
    Incompatible(Incompatible),
    /// The settings are invalid, or the key tables and hot keys given do not go together.
    Config(KeysSettingsError),
    /// Bad input with `on_error = fail` (the first problem, naming the file and record), or a
    /// run that read nothing usable (boxed: errors pass through every call of the hot loops'
    /// callers, and this one is rare and large).
    Input(Box<InputFailure>),
    /// The run's [`neardup_exec::CancelToken`] was cancelled.
    Interrupted,
}

impl KeysError {
    pub(crate) fn io(path: &Path, source: io::Error) -> KeysError {
        KeysError::Io {
            path: path.to_path_buf(),
            source,
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
#[derive(Debug)]
pub enum Damage {
    /// It does not start with the magic bytes of its kind of file.
    BadMagic {
        /// The kind named by the magic bytes ("NDKEYS", "NDHOTK").
        kind: String,
    },
    /// The header's declared length cannot be right.
    HeaderLength(u64),
    /// The header is not what neardup writes.
    Header(serde_json::Error),
    /// The file is of a format version this build does not read.
    FormatVersion {
        /// "key table" or "hot-key".
        what: &'static str,
        /// The file's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The header's per-file row counts disagree with its total.
    DeclaredRows {
        /// The sum of the files' rows.
        files_rows: u64,
        /// The total it declares.
        declared: u64,
    },
    /// The declared rows × columns overflow.
    ImplausibleSize,
    /// The keys held disagree with the rows × columns declared; `written` when counted while
    /// writing the file rather than reading it.
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
    ScratchSize {
        /// Bytes it holds.
        copied: u64,
        /// Bytes written to it.
        written: u64,
    },
    /// Hot keys are not strictly ascending.
    NotAscending,
    /// The plan names a group outside its number of groups.
    PlanGroup {
        /// The plan's groups.
        groups: u32,
    },
    /// The file ends early (the read's error as source).
    Truncated(io::Error),
    /// A spill file ends early.
    SpillTruncated,
    /// The end marker is missing.
    MissingEndMarker,
    /// The checksum stored differs from the one computed.
    Checksum {
        /// Stored in the file.
        stored: u64,
        /// Computed from its contents.
        computed: u64,
    },
    /// Bytes follow the end marker.
    TrailingBytes,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::BadMagic { kind } => write!(f, "not a neardup {kind} file (bad magic bytes)"),
            Damage::HeaderLength(len) => write!(f, "implausible header length {len}"),
            Damage::Header(e) => write!(f, "unreadable header: {e}"),
            Damage::FormatVersion {
                what,
                found,
                supported,
            } => write!(
                f,
                "{what} format version {found} is not supported (this build reads version \
                 {supported})"
            ),
            Damage::DeclaredRows {
                files_rows,
                declared,
            } => write!(
                f,
                "the header's files hold {files_rows} rows but it declares {declared}"
            ),
            Damage::ImplausibleSize => f.write_str("implausible size"),
            Damage::KeyCount {
                keys,
                rows,
                columns,
                written: false,
            } => write!(
                f,
                "table holds {keys} keys, but {rows} rows × {columns} columns were declared"
            ),
            Damage::KeyCount {
                keys,
                rows,
                columns,
                written: true,
            } => write!(
                f,
                "{keys} keys were written, but {rows} rows × {columns} columns were declared"
            ),
            Damage::ScratchSize { copied, written } => write!(
                f,
                "the scratch file of its rows holds {copied} bytes, {written} were written"
            ),
            Damage::NotAscending => f.write_str("hot keys are not strictly ascending"),
            Damage::PlanGroup { groups } => {
                write!(f, "the plan names a group outside its {groups} groups")
            }
            Damage::Truncated(_) => f.write_str("file is truncated"),
            Damage::SpillTruncated => f.write_str("spill file is truncated"),
            Damage::MissingEndMarker => f.write_str("missing end marker (truncated?)"),
            Damage::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:016x}, computed {computed:016x})"
            ),
            Damage::TrailingBytes => f.write_str("trailing bytes after end marker"),
        }
    }
}

/// Why stage 1 stopped on its input.
#[derive(Debug)]
pub enum InputFailure {
    /// A sample that could not be read, with `on_error = fail`.
    Record(Problem),
    /// A part of an input that could not be read, with `on_error = fail` (or a failed storage
    /// request, which is never skipped).
    Unreadable(UnreadableRange),
    /// No record has the selected fields `missing` (quoted as given); `seen` are fields the
    /// records do have (from their first records), when any.
    FieldsNeverSeen {
        /// The selected fields no record has.
        missing: Vec<String>,
        /// Fields the records have.
        seen: Vec<String>,
    },
    /// No text could be read at all.
    NothingRead {
        /// Records read.
        records: u64,
        /// Sample slots without a text, by reason.
        skipped: BTreeMap<String, u64>,
        /// The parts that could not be read (all of them: the message shows three).
        unreadable: Vec<UnreadableRange>,
    },
}

impl fmt::Display for InputFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote = |names: &[String]| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            InputFailure::Record(problem) => problem.fmt(f),
            InputFailure::Unreadable(range) => range.fmt(f),
            InputFailure::FieldsNeverSeen { missing, seen } => {
                let one = if missing.len() == 1 {
                    "the field"
                } else {
                    "the fields"
                };
                write!(
                    f,
                    "no record of the inputs has {one} {} (chosen with --field)",
                    quote(missing)
                )?;
                if !seen.is_empty() {
                    write!(f, "; the records have the fields {}", quote(seen))?;
                }
                Ok(())
            }
            InputFailure::NothingRead {
                records,
                skipped,
                unreadable,
            } => {
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
                        if *records == 0 {
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
                write!(f, "nothing to deduplicate: {}", why.join("; "))
            }
        }
    }
}

impl fmt::Display for KeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeysError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            KeysError::Corrupt {
                path: Some(path),
                damage,
            } => write!(f, "{}: {damage}", path.display()),
            KeysError::Corrupt { path: None, damage } => damage.fmt(f),
            KeysError::Input(failure) => failure.fmt(f),
            KeysError::Incompatible(e) => e.fmt(f),
            KeysError::Config(e) => e.fmt(f),
            KeysError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for KeysError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeysError::Io { source, .. } => Some(source),
            KeysError::Corrupt {
                damage: Damage::Header(e),
                ..
            } => Some(e),
            KeysError::Corrupt {
                damage: Damage::Truncated(e),
                ..
            } => Some(e),
            KeysError::Config(KeysSettingsError::Threads { source, .. }) => Some(source),
            _ => None,
        }
    }
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

/// Writes `items` separated by `sep`.
fn joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        item.fmt(f)?;
    }
    Ok(())
}

/// Key tables or hot keys made with different settings (a [`KeysError::Incompatible`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incompatible {
    /// A layout that differs from the one expected.
    Layout {
        /// The settings that differ, the expected layout's value first.
        differences: Vec<LayoutDifference>,
    },
    /// Two of the tables given differ.
    Tables {
        /// The first table given.
        first: TableName,
        /// The table that differs from it.
        other: TableName,
        /// The settings that differ, the first table's value first.
        differences: Vec<LayoutDifference>,
    },
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatible::Layout { differences } => {
                f.write_str("made with different settings: ")?;
                joined(f, differences, "; ")
            }
            Incompatible::Tables {
                first,
                other,
                differences,
            } => {
                write!(
                    f,
                    "key tables were made with different settings: {first} and {other}: "
                )?;
                joined(f, differences, "; ")?;
                f.write_str("; make every table with the same settings")
            }
        }
    }
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
#[derive(Debug)]
pub enum KeysSettingsError {
    /// The sketch settings are invalid.
    Sketch(neardup_sketch::SketchError),
    /// The worker threads could not be started.
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not.
        source: rayon::ThreadPoolBuildError,
    },
    /// A plan was asked for no groups.
    NoGroups,
    /// More hot keys than a plan numbers.
    TooManyHotKeys {
        /// The hot keys.
        hot_keys: usize,
    },
    /// A plan made for other hot keys.
    PlanDoesNotFit {
        /// Hot keys the plan has a group for.
        plan_keys: usize,
        /// The plan's groups.
        groups: u32,
        /// The hot keys.
        hot_keys: usize,
    },
    /// A hot-key file of format version 1, which records no key tables.
    HotFileVersion1 {
        /// The file.
        path: PathBuf,
    },
    /// Hot keys counted within one run were to be saved (they name no key tables).
    UnsavedHotKeys {
        /// The file they were to be saved to.
        path: PathBuf,
    },
    /// Hot keys counted within one run were asked which tables they were counted from.
    NoCountedTables,
    /// A table that is not one of those the hot keys were counted from.
    NotCountedTable {
        /// The table, as messages name it.
        name: String,
        /// Its shard.
        shard: u32,
        /// The shards the hot keys were counted from.
        counted: Vec<u32>,
    },
    /// The tables given to `apply` are not exactly those the hot keys were counted from.
    OtherTables {
        /// The shards the hot keys were counted from.
        counted: Vec<u32>,
        /// What differs, in the order found.
        problems: Vec<TableProblem>,
    },
    /// Two tables claim one shard number.
    SameShard {
        /// The table given first.
        first: TableName,
        /// The other.
        other: TableName,
    },
    /// No key tables were given to merge.
    NoTables,
    /// A table reader was finished before all of its keys were read.
    KeysLeft {
        /// The table's file.
        path: PathBuf,
        /// Keys not read.
        left: u64,
    },
}

impl fmt::Display for KeysSettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shard_list = |shards: &[u32]| {
            shards
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            KeysSettingsError::Sketch(e) => e.fmt(f),
            KeysSettingsError::Threads { threads, source } => {
                write!(f, "cannot start {threads} threads: {source}")
            }
            KeysSettingsError::NoGroups => f.write_str("--groups must be at least 1"),
            KeysSettingsError::TooManyHotKeys { hot_keys } => write!(
                f,
                "{hot_keys} hot keys: the plan numbers hot keys with 32 bits; split the corpus \
                 into runs of fewer than 4,294,967,295 hot keys"
            ),
            KeysSettingsError::PlanDoesNotFit {
                plan_keys,
                groups,
                hot_keys,
            } => write!(
                f,
                "a plan for {plan_keys} hot keys in {groups} groups does not fit {hot_keys} hot \
                 keys"
            ),
            KeysSettingsError::HotFileVersion1 { path } => write!(
                f,
                "{}: this hot-key file was written by an older neardup (format version 1), \
                 which did not record the key tables it was counted from; run `neardup hot` \
                 again to rewrite it",
                path.display()
            ),
            KeysSettingsError::UnsavedHotKeys { path } => write!(
                f,
                "{}: these hot keys were counted within one run and record no key tables, so \
                 they cannot be saved for `apply`; count the saved tables (neardup hot, \
                 merge_table_files) instead",
                path.display()
            ),
            KeysSettingsError::NoCountedTables => {
                f.write_str("these hot keys were counted within one run and name no key tables")
            }
            KeysSettingsError::NotCountedTable {
                name,
                shard,
                counted,
            } => write!(
                f,
                "{name} (shard {shard}) is not one of the key tables the hot keys were counted \
                 from (shards {}): give the table `neardup hot` counted, or run `neardup hot` \
                 again over the current tables",
                shard_list(counted)
            ),
            KeysSettingsError::OtherTables { counted, problems } => {
                let plural = if counted.len() == 1 { "" } else { "s" };
                write!(
                    f,
                    "the hot keys were counted from {} key table{plural} (shard{plural} {}), but ",
                    counted.len(),
                    shard_list(counted)
                )?;
                joined(f, problems, "; ")?;
                f.write_str(": pass `neardup apply` exactly the tables given to `neardup hot`")
            }
            KeysSettingsError::SameShard { first, other } => write!(
                f,
                "{first} and {other} claim the same shard number: give each shard its own \
                 --shard"
            ),
            KeysSettingsError::NoTables => f.write_str("no key tables to merge"),
            KeysSettingsError::KeysLeft { path, left } => write!(
                f,
                "{}: finished reading with {left} keys left",
                path.display()
            ),
        }
    }
}

impl From<KeysSettingsError> for KeysError {
    fn from(e: KeysSettingsError) -> Self {
        KeysError::Config(e)
    }
}
