//! What can go wrong with a saved index.

use std::fmt;
use std::path::PathBuf;

/// An index that cannot be made, read or used.
#[derive(Debug)]
pub enum IndexError {
    /// Reading or writing the file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not an index.
    NotAnIndex {
        /// The file.
        path: PathBuf,
    },
    /// The file is an index of another format version.
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The file is damaged.
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The index was made with other settings than this run's.
    OtherSettings {
        /// The index.
        path: PathBuf,
        /// Each setting that differs: "name: the index's value vs this run's".
        differences: Vec<String>,
    },
    /// Two indexes given together hold the same file.
    Overlap {
        /// The file.
        file: String,
        /// The index listed first.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// No index was given.
    NoIndex,
    /// Indexes with `min_key_count` other than 1 are not supported.
    MinCount(u32),
    /// More files or entries than the format numbers.
    TooManyFiles,
    /// Decisions or rows that do not fit the run being indexed.
    Decisions(String),
    /// A file of an indexed run is not what the index recorded.
    Changed {
        /// The file.
        file: PathBuf,
        /// What changed.
        what: String,
    },
    /// A file of an indexed run cannot be opened (moved or deleted).
    Missing {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A record of an indexed run could not be read back.
    Unreadable {
        /// The file.
        file: PathBuf,
        /// Why.
        message: String,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            IndexError::NotAnIndex { path } => write!(
                f,
                "{}: not a neardup index (made by `neardup dedup --index-out` or `neardup index`)",
                path.display()
            ),
            IndexError::Version { path, found } => write!(
                f,
                "{}: an index of format {found}, and this neardup reads format {}: make it again \
                 with this version (`neardup index`)",
                path.display(),
                crate::FORMAT_VERSION
            ),
            IndexError::Damaged { path, what } => write!(
                f,
                "{}: the index is damaged: {what}; make it again (`neardup index`)",
                path.display()
            ),
            IndexError::OtherSettings { path, differences } => write!(
                f,
                "{}: the index was made with other settings than this run's ({}); a run against \
                 an index must use the settings the index was made with",
                path.display(),
                differences.join("; ")
            ),
            IndexError::Overlap {
                file,
                first,
                second,
            } => write!(
                f,
                "{file} is in two of the indexes given ({} and {}): an index made against \
                 another already holds that one's files, so give only the later one",
                first.display(),
                second.display()
            ),
            IndexError::NoIndex => f.write_str("no index was given"),
            IndexError::MinCount(n) => write!(
                f,
                "an index needs min_key_count = 1, and this run has {n}: with more, records of a \
                 later run could change this run's decisions"
            ),
            IndexError::TooManyFiles => f.write_str("more files or entries than an index numbers"),
            IndexError::Decisions(what) => write!(f, "cannot index these decisions: {what}"),
            IndexError::Changed { file, what } => write!(
                f,
                "{}: {what} since the index was made; the index needs its runs' files unchanged \
                 (make the index again from them, or restore the file)",
                file.display()
            ),
            IndexError::Missing { file, source } => write!(
                f,
                "{}: cannot be read back ({source}): a run against an index made with --verify \
                 exact reads back the records of the indexed runs that its hot keys reach (an \
                 index made with --verify estimate holds what it needs and reads nothing); \
                 restore the file at this path",
                file.display()
            ),
            IndexError::Unreadable { file, message } => write!(
                f,
                "{}: a record the index names cannot be read back: {message}",
                file.display()
            ),
        }
    }
}

impl std::error::Error for IndexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexError::Io { source, .. } | IndexError::Missing { source, .. } => Some(source),
            _ => None,
        }
    }
}
