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
    Incompatible(String),
    /// The settings are invalid.
    Config(String),
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
            KeysError::Incompatible(m) | KeysError::Config(m) => f.write_str(m),
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
            _ => None,
        }
    }
}
