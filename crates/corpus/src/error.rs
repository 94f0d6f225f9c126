//! Error types for reading and writing.

use std::fmt;
use std::path::{Path, PathBuf};

/// A failure to read part of an input. Its `Display` names the file and where it happened
/// (chunk-local record, byte offset or row group).
#[derive(Debug)]
pub struct ReadError {
    path: PathBuf,
    kind: &'static str,
    location: Option<String>,
    message: String,
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
        }
    }

    /// Classifies an I/O error raised while decompressing or reading bytes.
    pub(crate) fn from_io(path: &Path, location: Option<String>, e: &std::io::Error) -> ReadError {
        let kind = match e.kind() {
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
    /// requested), `"invalid_chunk"` (a chunk that does not fit the file).
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
}

impl WriteError {
    pub(crate) fn new(path: &Path, kind: &'static str, message: impl Into<String>) -> WriteError {
        WriteError {
            path: path.to_path_buf(),
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &Path, e: std::io::Error) -> WriteError {
        WriteError::new(path, "io", e.to_string())
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

impl std::error::Error for WriteError {}
