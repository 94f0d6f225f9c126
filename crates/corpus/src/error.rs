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
    /// Why, as a class ([`ReadError::kind`]).
    pub kind: ReadErrorKind,
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

/// The class of a [`ReadError`]: stable, and written in reports and key tables as its
/// snake_case name (`"corrupt_parquet"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadErrorKind {
    /// A compressed stream ends early.
    Truncated,
    /// Invalid compressed data.
    Corrupt,
    /// An unreadable Parquet footer, page or column chunk.
    CorruptParquet,
    /// A Parquet schema that cannot be read as requested.
    SchemaMismatch,
    /// A chunk that does not fit the file.
    InvalidChunk,
    /// A line of a decisions file that is not a decision.
    MalformedDecision,
    /// Records read by their places no longer lie there: the file changed since they were
    /// counted.
    Changed,
    /// An object storage request that failed after every retry: a fault of the service or the
    /// network, not of the data, which stages do not skip whatever their error policy.
    Storage,
    /// An open or read failure (and, read back from a stored loss, any class this version does
    /// not know: the last variant, as serde wants it).
    #[serde(other)]
    Io,
}

impl ReadErrorKind {
    /// The class of an I/O error raised while decompressing or reading bytes.
    pub(crate) fn of_io(e: &std::io::Error) -> ReadErrorKind {
        match e.kind() {
            _ if neardup_storage::is_storage_failure(e) => ReadErrorKind::Storage,
            std::io::ErrorKind::UnexpectedEof => ReadErrorKind::Truncated,
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
                ReadErrorKind::Corrupt
            }
            _ => ReadErrorKind::Io,
        }
    }

    /// The snake_case name, as reports and messages write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadErrorKind::Io => "io",
            ReadErrorKind::Truncated => "truncated",
            ReadErrorKind::Corrupt => "corrupt",
            ReadErrorKind::CorruptParquet => "corrupt_parquet",
            ReadErrorKind::SchemaMismatch => "schema_mismatch",
            ReadErrorKind::InvalidChunk => "invalid_chunk",
            ReadErrorKind::MalformedDecision => "malformed_decision",
            ReadErrorKind::Changed => "changed",
            ReadErrorKind::Storage => "storage",
        }
    }
}

impl fmt::Display for ReadErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Records of an input file that could not be read, as a run report lists them: a reader's
/// [`Unreadable`] (records numbered within the file) and the file it lies in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnreadableRange {
    /// The input file.
    pub file: PathBuf,
    /// What was lost, with its records numbered within the file (0-based line or row). A
    /// storage failure (`kind` storage) stops a run, and is never listed.
    #[serde(flatten)]
    pub lost: Unreadable,
}

impl UnreadableRange {
    /// A reader's loss (chunk-local) in `file`, whose chunk starts at file record `base`.
    pub fn new(file: &Path, base: u64, lost: &Unreadable) -> UnreadableRange {
        UnreadableRange {
            file: file.to_path_buf(),
            lost: lost.shifted(base),
        }
    }

    /// Which records were lost, without the file: "records 100 to 199 (row group 1)
    /// unreadable", "unreadable, how many records it holds is unknown", "unreadable from record
    /// 543 (decompressed byte 118000) on, how many records is unknown".
    pub fn what(&self) -> String {
        let lost = &self.lost;
        let first = lost.first_record;
        let place = match (lost.row_group, lost.byte_offset) {
            (Some(g), _) => format!(" (row group {g})"),
            (None, Some(b)) if first > 0 => format!(" (decompressed byte {b})"),
            _ => String::new(),
        };
        match lost.records {
            Some(0) => format!("no record{place} unreadable"),
            Some(1) => format!("record {first}{place} unreadable"),
            Some(n) => format!("records {first} to {}{place} unreadable", first + n - 1),
            None if first == 0 => "unreadable, how many records it holds is unknown".to_string(),
            None => {
                format!("unreadable from record {first}{place} on, how many records is unknown")
            }
        }
    }

    /// Whether the loss is a storage request that failed after its retries (kind `storage`):
    /// a fault of the service or the network, not of the data, which stops a run whatever its
    /// error policy (see `docs/formats.md`, "Object storage").
    pub fn is_storage_failure(&self) -> bool {
        self.lost.kind == ReadErrorKind::Storage
    }

    /// Whether the loss starts at the file's first record and its size is unknown: nothing of
    /// the file could be read, not even how many records it holds.
    pub fn whole_file_unknown(&self) -> bool {
        self.lost.first_record == 0 && self.lost.records.is_none()
    }
}

/// A storage failure reads as the error that stops the run: the object, what failed, and why
/// `--on-error skip` does not skip it; any other range as where and how many records were lost.
impl fmt::Display for UnreadableRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_storage_failure() {
            return write!(
                f,
                "{}: {}: the storage service or the network failed, not the data, and \
                 --on-error skip does not skip that (the dataset would lack records a later run \
                 reads); nothing was published: run again when the service answers",
                self.file.display(),
                self.lost.reason
            );
        }
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.what(),
            self.lost.reason
        )
    }
}

/// A failure to read part of an input. Its `Display` names the file and where it happened
/// (chunk-local record, byte offset or row group).
#[derive(Debug)]
pub struct ReadError {
    path: PathBuf,
    kind: ReadErrorKind,
    location: Option<String>,
    message: String,
    /// Boxed: errors travel in every `Result` of a read, and are rare.
    lost: Option<Box<Unreadable>>,
    /// The system's error the message was made from, if any.
    io: Option<Box<std::io::Error>>,
}

impl ReadError {
    pub(crate) fn new(
        path: &Path,
        kind: ReadErrorKind,
        location: Option<String>,
        message: impl Into<String>,
    ) -> ReadError {
        ReadError {
            path: path.to_path_buf(),
            kind,
            location,
            message: message.into(),
            lost: None,
            io: None,
        }
    }

    /// Keeps the system's error its message was made from (see [`ReadError::io_error`]).
    pub(crate) fn caused_by(mut self, e: std::io::Error) -> ReadError {
        self.io = Some(Box::new(e));
        self
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
            kind: self.kind,
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
            kind: lost.kind,
            location: lost.row_group.map(|g| format!("row group {g}")),
            message: lost.reason.clone(),
            lost: Some(Box::new(lost.clone())),
            io: None,
        }
    }

    /// Classifies an I/O error raised while decompressing or reading bytes.
    pub(crate) fn from_io(path: &Path, location: Option<String>, e: std::io::Error) -> ReadError {
        ReadError::new(path, ReadErrorKind::of_io(&e), location, e.to_string()).caused_by(e)
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its class.
    pub fn kind(&self) -> ReadErrorKind {
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

    /// The system's error the message was made from, when it was one (its kind and OS error
    /// code say what failed).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.io.as_deref()
    }

    /// The records this error cost. Errors of [`read_chunk`](crate::read_chunk) always say; for
    /// others (reading a decisions file) it is everything from the first record, how many unknown.
    pub fn unreadable(&self) -> Unreadable {
        self.lost.as_deref().cloned().unwrap_or_else(|| Unreadable {
            first_record: 0,
            records: None,
            kind: self.kind,
            reason: self.message.clone(),
            row_group: None,
            byte_offset: None,
        })
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

/// Its message already holds the system's error's: the source is what that error was caused by,
/// so a reporter printing the chain shows each cause once.
impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io.as_deref().and_then(std::error::Error::source)
    }
}

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
    /// A refusal or failure of kind `kind` (see [`WriteError::kind`]) concerning `path`, with
    /// `message` saying what and what to do.
    pub fn new(path: &Path, kind: &'static str, message: impl Into<String>) -> WriteError {
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

/// Its message already holds the system's error's: the source is what that error was caused by,
/// so a reporter printing the chain shows each cause once.
impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().and_then(std::error::Error::source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_records_are_described_by_what_is_known_of_them() {
        let range = |first_record, records, row_group, byte_offset| UnreadableRange {
            file: "f.jsonl".into(),
            lost: Unreadable {
                first_record,
                records,
                kind: ReadErrorKind::Corrupt,
                reason: "bad".into(),
                row_group,
                byte_offset,
            },
        };
        assert_eq!(range(5, Some(1), None, None).what(), "record 5 unreadable");
        assert_eq!(
            range(100, Some(100), Some(1), None).what(),
            "records 100 to 199 (row group 1) unreadable"
        );
        assert_eq!(
            range(0, None, None, None).what(),
            "unreadable, how many records it holds is unknown"
        );
        assert_eq!(
            range(543, None, None, Some(118000)).what(),
            "unreadable from record 543 (decompressed byte 118000) on, how many records is unknown"
        );
        assert_eq!(range(7, Some(0), None, None).what(), "no record unreadable");
        assert_eq!(
            range(5, Some(2), None, None).to_string(),
            "f.jsonl: records 5 to 6 unreadable: bad"
        );
        let mut storage = range(0, None, None, None);
        storage.lost.kind = ReadErrorKind::Storage;
        assert!(storage.is_storage_failure() && storage.whole_file_unknown());
        assert!(
            storage
                .to_string()
                .contains("--on-error skip does not skip that")
        );
    }

    #[test]
    fn a_range_reads_back_as_a_report_wrote_it() {
        // The report's fields are the reader's loss's, beside the file, in one flat object.
        let range = UnreadableRange {
            file: "f.parquet".into(),
            lost: Unreadable {
                first_record: 100,
                records: Some(100),
                kind: ReadErrorKind::CorruptParquet,
                reason: "bad page".into(),
                row_group: Some(1),
                byte_offset: None,
            },
        };
        let json = serde_json::to_string(&range).unwrap();
        assert_eq!(
            json,
            r#"{"file":"f.parquet","first_record":100,"records":100,"kind":"corrupt_parquet","reason":"bad page","row_group":1,"byte_offset":null}"#
        );
        assert_eq!(
            serde_json::from_str::<UnreadableRange>(&json).unwrap(),
            range
        );
        // A class this version does not know reads back as `io`, as stored losses always did.
        let stored = r#"{"first_record":0,"records":null,"kind":"future","reason":"r","row_group":null,"byte_offset":null}"#;
        assert_eq!(
            serde_json::from_str::<Unreadable>(stored).unwrap().kind,
            ReadErrorKind::Io
        );
    }

    #[test]
    fn a_read_error_chain_prints_the_system_error_once() {
        /// A cause with a cause of its own, as a storage client's error has.
        #[derive(Debug)]
        struct Request(std::fmt::Error);
        impl fmt::Display for Request {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("request failed")
            }
        }
        impl std::error::Error for Request {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = std::io::Error::other(Request(std::fmt::Error));
        let e = ReadError::from_io(Path::new("a.jsonl.zst"), None, inner);
        let mut chain = vec![e.to_string()];
        let mut next = std::error::Error::source(&e);
        while let Some(cause) = next {
            chain.push(cause.to_string());
            next = cause.source();
        }
        let text = chain.join(": ");
        assert_eq!(text.matches("request failed").count(), 1, "{text}");
        assert_eq!(
            text.matches(&std::fmt::Error.to_string()).count(),
            1,
            "{text}"
        );
        assert_eq!(e.kind(), ReadErrorKind::Io);
        assert!(e.io_error().is_some());
    }
}
