//! Error types for reading and writing.

use std::fmt;
use std::path::{Path, PathBuf};

/// Records of a chunk that a read could not deliver, and why: what a [`ReadError`] of
/// [`read_chunk`](crate::read_chunk) cost. Stored with a chunk's counts in a key table, so a later
/// read of the same chunk knows where the first one stopped.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unreadable {
    /// Index of the first record not delivered (chunk-local as the reader yields it; file-level
    /// once a stage has added the records of the file's earlier chunks).
    pub first_record: u64,
    /// How many records were lost; `None` when it cannot be known: the rest of a compressed
    /// stream after it breaks, a JSONL file that cannot be opened, a Parquet file whose footer
    /// cannot be read.
    pub records: Option<u64>,
    /// Stable class, as [`ReadError::kind`].
    pub kind: String,
    /// Why, for people.
    pub reason: String,
    /// Parquet: the row group the records belong to (each loss lies within one row group, or is
    /// the whole chunk).
    pub row_group: Option<usize>,
    /// JSONL: the decompressed byte offset where the first lost record starts.
    pub byte_offset: Option<u64>,
}

impl Unreadable {
    /// The same loss with its first record moved by `base` records (chunk-local to file-level).
    pub fn shifted(&self, base: u64) -> Unreadable {
        Unreadable {
            first_record: base + self.first_record,
            ..self.clone()
        }
    }
}

/// A failure to read part of an input. Its `Display` names the file and where it happened
/// (chunk-local record, byte offset or row group).
#[derive(Debug)]
pub struct ReadError {
    path: PathBuf,
    kind: &'static str,
    location: Option<String>,
    message: String,
    /// Boxed: errors travel in every `Result` of a read, and are rare.
    lost: Option<Box<Unreadable>>,
}

impl ReadError {
    pub(crate) fn new(
        path: &Path,
        kind: &'static str,
        location: Option<String>,
        message: impl Into<String>,
    ) -> ReadError {
        ReadError {
            path: path.to_path_buf(),
            kind,
            location,
            message: message.into(),
            lost: None,
        }
    }

    /// Says which records this error cost (the reason is the error's message).
    pub(crate) fn losing(
        mut self,
        first_record: u64,
        records: Option<u64>,
        row_group: Option<usize>,
        byte_offset: Option<u64>,
    ) -> ReadError {
        self.lost = Some(Box::new(Unreadable {
            first_record,
            records,
            kind: self.kind.to_string(),
            reason: self.message.clone(),
            row_group,
            byte_offset,
        }));
        self
    }

    /// An error for records a stage before this read found unreadable (see
    /// [`reread_chunk`](crate::reread_chunk)).
    pub(crate) fn known(path: &Path, lost: &Unreadable) -> ReadError {
        ReadError {
            path: path.to_path_buf(),
            kind: known_kind(&lost.kind),
            location: lost.row_group.map(|g| format!("row group {g}")),
            message: lost.reason.clone(),
            lost: Some(Box::new(lost.clone())),
        }
    }

    /// Classifies an I/O error raised while decompressing or reading bytes.
    pub(crate) fn from_io(path: &Path, location: Option<String>, e: &std::io::Error) -> ReadError {
        let kind = match e.kind() {
            _ if neardup_storage::is_storage_failure(e) => "storage",
            std::io::ErrorKind::UnexpectedEof => "truncated",
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => "corrupt",
            _ => "io",
        };
        ReadError::new(path, kind, location, e.to_string())
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stable snake_case class: `"io"` (open/read failure), `"truncated"` (compressed stream ends
    /// early), `"corrupt"` (invalid compressed data), `"corrupt_parquet"` (unreadable footer,
    /// page or column chunk), `"schema_mismatch"` (Parquet schema that cannot be read as
    /// requested), `"invalid_chunk"` (a chunk that does not fit the file), `"storage"` (an
    /// object storage request that failed after every retry: a fault of the service or the
    /// network, not of the data, which stages do not skip whatever their error policy).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Where in the file it happened, if known (e.g. `"record 12 (byte 4096)"`, `"row group 3"`).
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }

    /// The underlying message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The records this error cost. Errors of [`read_chunk`](crate::read_chunk) always say; for
    /// others (reading a decisions file) it is everything from the first record, how many unknown.
    pub fn unreadable(&self) -> Unreadable {
        self.lost.as_deref().cloned().unwrap_or_else(|| Unreadable {
            first_record: 0,
            records: None,
            kind: self.kind.to_string(),
            reason: self.message.clone(),
            row_group: None,
            byte_offset: None,
        })
    }
}

/// The `&'static str` kind of a stored loss (kinds are a closed set; anything else is `io`).
fn known_kind(kind: &str) -> &'static str {
    [
        "io",
        "truncated",
        "corrupt",
        "corrupt_parquet",
        "schema_mismatch",
        "invalid_chunk",
    ]
    .into_iter()
    .find(|k| *k == kind)
    .unwrap_or("io")
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(loc) = &self.location {
            write!(f, " at {loc}")?;
        }
        write!(f, ": {} ({})", self.message, self.kind)
    }
}

impl std::error::Error for ReadError {}

/// A failure to write an output, a decisions file or an atomic file.
#[derive(Debug)]
pub struct WriteError {
    path: PathBuf,
    kind: &'static str,
    message: String,
    /// The system's error, for kind `"io"`.
    source: Option<std::io::Error>,
}

impl WriteError {
    pub(crate) fn new(path: &Path, kind: &'static str, message: impl Into<String>) -> WriteError {
        WriteError {
            path: path.to_path_buf(),
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(path: &Path, e: std::io::Error) -> WriteError {
        WriteError {
            source: Some(e),
            ..WriteError::new(path, "io", String::new())
        }
        .with_source_message()
    }

    fn with_source_message(mut self) -> WriteError {
        if let Some(e) = &self.source {
            self.message = e.to_string();
        }
        self
    }

    /// The system's error, when the kind is `"io"` (its kind and OS error code say what failed:
    /// no space, permission denied, …).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.source.as_ref()
    }

    /// [`WriteError::io_error`], taken.
    pub fn into_io_error(self) -> Option<std::io::Error> {
        self.source
    }

    /// The file or directory concerned.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What went wrong, without the path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Stable snake_case class: `"io"` (the message is the system's error), `"exists"` (output
    /// directory not empty, no overwrite), `"in_use"` (another live run writes to the output
    /// directory), `"not_ours"` (an output would replace a file no manifest lists),
    /// `"changed"` (a listed file changed since it was written), `"foreign_manifest"`,
    /// `"not_a_regular_file"` (an output's path is a FIFO, a device, a link: see
    /// [`crate::special_node`]),
    /// `"interrupted"` (cancelled before the commit), `"unfinished"` (an output was not
    /// finished), `"duplicate_output"` (two inputs map to the same output path),
    /// `"invalid_block"` (block not read with full records, wrong mask length, schema differs),
    /// `"parquet"` (encoder error), `"read_input"` (input metadata needed for the output could
    /// not be read).
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            "io" => write!(f, "cannot write {}: {}", self.path.display(), self.message),
            _ => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
