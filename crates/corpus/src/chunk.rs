//! The chunk: a part of an input file that can be read on its own (`plan.rs` splits the inputs
//! into chunks).

/// A unit of reading work: a whole file, a byte range of an uncompressed JSONL file (cut at
/// newlines: a chunk owns every line that STARTS in `[start, end)`), or a range of Parquet row
/// groups.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    /// Index into the files slice given to [`crate::plan_chunks`].
    pub file: usize,
    /// Chunk index within its file, from 0.
    pub seq: usize,
    /// What part of the file.
    pub range: ChunkRange,
}

/// The part of a file a [`Chunk`] covers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChunkRange {
    /// The whole file.
    Whole,
    /// Lines of an uncompressed JSONL file that start in `[start, end)`.
    Bytes {
        /// First byte offset owned (inclusive).
        start: u64,
        /// End byte offset (exclusive) for line starts.
        end: u64,
    },
    /// Parquet row groups `start..end`.
    RowGroups {
        /// First row group (inclusive).
        start: usize,
        /// Last row group (exclusive).
        end: usize,
    },
}

/// For messages: "the whole file", "bytes 0 to 4096", "row groups 2 to 4" (ends exclusive).
impl std::fmt::Display for ChunkRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkRange::Whole => f.write_str("the whole file"),
            ChunkRange::Bytes { start, end } => write!(f, "bytes {start} to {end}"),
            ChunkRange::RowGroups { start, end } => write!(f, "row groups {start} to {end}"),
        }
    }
}
