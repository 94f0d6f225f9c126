//! The blocks a chunk is read as, and what the format readers share: the read options, a
//! record's [`Sample`]s and why one was skipped ([`SkipReason`]), the block's data per format
//! ([`BlockData`]) and its recycled buffers, which selected fields the records have
//! ([`FieldsSeen`]), and turning one record's field values into samples ([`emit_record`]).
//!
//! The format readers (`jsonl`, `parquet_read`) build on this module; `read` picks the reader
//! for a file and walks a block's samples with it.

use std::borrow::Cow;

use arrow_array::RecordBatch;

use crate::select::{FieldsMode, TextSelector};

/// How much of each record is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projection {
    /// Stage 1: only the text (and id) columns/fields are decoded.
    TextOnly,
    /// Stage 2: whole records, so they can be written back out.
    FullRecords,
}

/// Options for [`read_chunk`](crate::read_chunk).
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Text fields, join/expand mode and id field.
    pub selector: TextSelector,
    /// TextOnly for sketching, FullRecords for writing.
    pub projection: Projection,
    /// Target size of one Block in input bytes. JSONL: decompressed bytes per block (rounded to
    /// whole lines). Parquet: rows per batch are chosen so a batch holds about this many bytes of
    /// the decoded columns (from the footer's uncompressed sizes), clamped to 64..=65536 rows.
    pub block_bytes: usize,
}

impl ReadOptions {
    /// Default block size: large enough to amortise per-block work, small enough that a few
    /// blocks in flight per thread stay in cache-friendly, bounded memory.
    pub const DEFAULT_BLOCK_BYTES: usize = 4 << 20;

    /// Options with [`ReadOptions::DEFAULT_BLOCK_BYTES`].
    pub fn new(selector: TextSelector, projection: Projection) -> ReadOptions {
        ReadOptions {
            selector,
            projection,
            block_bytes: Self::DEFAULT_BLOCK_BYTES,
        }
    }
}

/// Why a sample slot has no text.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SkipReason {
    /// The line is not valid JSON (or not a JSON object); detail = parser message.
    MalformedJson(String),
    /// The line/value is not valid UTF-8.
    InvalidUtf8,
    /// Field absent.
    MissingField,
    /// Field present but null.
    NullField,
    /// Field present but not a string (number, object, ...) / Parquet column not a string type.
    NotAString,
}

impl SkipReason {
    /// Stable snake_case name for reports: "malformed_json", "invalid_utf8", "missing_field",
    /// "null_field", "not_a_string".
    pub fn kind(&self) -> &'static str {
        match self {
            SkipReason::MalformedJson(_) => "malformed_json",
            SkipReason::InvalidUtf8 => "invalid_utf8",
            SkipReason::MissingField => "missing_field",
            SkipReason::NullField => "null_field",
            SkipReason::NotAString => "not_a_string",
        }
    }

    /// The reason for people, naming the fields of sample slot `field` (all selected fields in
    /// Join mode, the slot's own field in Expand mode): "not valid JSON: expected `,` or `}` at
    /// column 40", "no field `text`", "`text` is null", …
    pub fn describe(&self, selector: &TextSelector, field: u32) -> String {
        let names: Vec<String> = match selector.mode {
            FieldsMode::Expand => selector
                .fields
                .get(field as usize)
                .map(|f| format!("`{f}`"))
                .into_iter()
                .collect(),
            FieldsMode::Join { .. } => selector.fields.iter().map(|f| format!("`{f}`")).collect(),
        };
        let list = names.join(", ");
        let one = names.len() == 1;
        match self {
            // The parser says "not a JSON object (…)" itself for valid JSON of another type.
            SkipReason::MalformedJson(m) if m.starts_with("not a JSON object") => m.clone(),
            SkipReason::MalformedJson(m) => format!("not valid JSON: {m}"),
            SkipReason::InvalidUtf8 => "not valid UTF-8".to_string(),
            SkipReason::MissingField if one => format!("no field {list}"),
            SkipReason::MissingField => format!("none of the fields {list}"),
            SkipReason::NullField if one => format!("{list} is null"),
            SkipReason::NullField => format!("no text in {list}: the first one present is null"),
            SkipReason::NotAString if one => format!("{list} is not a string"),
            SkipReason::NotAString => {
                format!("no text in {list}: the first one present is not a string")
            }
        }
    }
}

/// The text of a sample slot, or why there is none.
///
/// Join mode: if every selected field is missing -> `Skipped(MissingField)`; null / non-string
/// fields are skipped individually and the present string fields joined; if none is a string, the
/// reason of the first field that is not missing. Whitespace-only text is NOT skipped here:
/// callers decide what "empty" means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleText<'a> {
    /// The text (borrowed from the block when it needed no decoding or joining).
    Text(Cow<'a, str>),
    /// No text, and why.
    Skipped(SkipReason),
}

/// One sample slot of one record.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample<'a> {
    /// Record index within the block (add block.first_record for the chunk-local index).
    pub record: usize,
    /// Field index: 0 in Join mode, the selector field's index in Expand mode.
    pub field: u32,
    /// The text or the skip reason.
    pub text: SampleText<'a>,
    /// The id field's value as a string (JSON numbers rendered as written), if configured and
    /// present (a JSON null or a missing id gives `None`).
    pub id: Option<Cow<'a, str>>,
    /// The value of the selector's rank field, when one is configured.
    pub rank: RankValue,
}

/// The value of a record's rank field ([`crate::TextSelector::rank_field`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum RankValue {
    /// No rank field is configured, the record lacks it, or it is null.
    #[default]
    Absent,
    /// A number (a JSON number; a Parquet integer, float or decimal column), as `f64`.
    Number(f64),
    /// Something else: what it is ("a string", "a boolean", …), for messages.
    NotANumber(&'static str),
}

/// A run of consecutive records of one chunk. Send (moved between threads).
#[derive(Debug)]
pub struct Block {
    /// Index of the input file in the discovery's file list.
    pub file: usize,
    /// Index of the chunk within its file.
    pub chunk_seq: usize,
    /// Index, within the chunk, of the block's first record (JSONL: lines; Parquet: rows).
    pub first_record: u64,
    pub(crate) data: BlockData,
    /// See [`Block::disk_bytes`].
    pub(crate) disk_bytes: u64,
}

/// A chunk's share of its file's bytes on disk, handed out block by block ([`Block::disk_bytes`]):
/// each block gets what the read has gone through since the block before, as far as the reader
/// can tell (bytes of an uncompressed file, compressed bytes consumed, a row group's compressed
/// bytes by rows), never more than the share and never going back, and the chunk's last block
/// gets what is left. A progress bar whose total is the files' sizes on disk then fills to its
/// total and never passes it, whatever a format decodes to.
#[derive(Debug)]
pub(crate) struct DiskShare {
    share: u64,
    given: u64,
}

impl DiskShare {
    /// The share of a chunk: `share` bytes of its file.
    pub(crate) fn new(share: u64) -> DiskShare {
        DiskShare { share, given: 0 }
    }

    /// The bytes of a block after which the read has gone through `upto` bytes of the share (an
    /// estimate: kept within the share, never below what was given); `last`: everything left.
    pub(crate) fn next(&mut self, upto: u64, last: bool) -> u64 {
        let upto = if last {
            self.share
        } else {
            upto.min(self.share)
        };
        let bytes = upto.saturating_sub(self.given);
        self.given += bytes;
        bytes
    }
}

/// The byte buffers of JSONL blocks, recycled. Each block is megabytes read into a buffer that
/// lives until a stage is done with the block; fresh allocations of that size come straight from
/// the kernel, which zeroes and faults them in page by page and unmaps them again on free (about
/// a sixth of a whole run's CPU time, in the kernel). A few free buffers are kept for the next
/// blocks instead: memory stays bounded by [`MAX_FREE_BUFFERS`] buffers beyond those in flight.
pub(crate) mod buffers {
    use std::sync::Mutex;

    /// Free buffers kept at most (a pipeline has a few blocks in flight per thread).
    pub(crate) const MAX_FREE_BUFFERS: usize = 8;
    /// Smaller buffers are not worth keeping; larger ones (a file of one huge line) are not
    /// kept either, so one odd block cannot pin its memory.
    const KEEP: std::ops::RangeInclusive<usize> = (256 << 10)..=(64 << 20);

    static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    /// A buffer to read into, recycled when there is one. Its length is how many of its bytes are
    /// initialised (stale data of an earlier block), not how many hold data: a reader tracks that
    /// itself, and reads over the stale bytes without zeroing them first (zeroing each block
    /// showed in stage 1's time: docs/benchmarks.md, "Measurements behind the code").
    pub(crate) fn take() -> Vec<u8> {
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        free.pop().unwrap_or_default()
    }

    /// Keeps `buf` (length = its initialised bytes) for reuse if it is worth it and there is room.
    pub(crate) fn give(buf: Vec<u8>) {
        if !KEEP.contains(&buf.capacity()) {
            return;
        }
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < MAX_FREE_BUFFERS {
            free.push(buf);
        }
    }

    /// A block's bytes (the first `len` of a buffer from [`take`]); the buffer goes back to the
    /// free list when dropped.
    #[derive(Debug, Default)]
    pub(crate) struct Recycled {
        buf: Vec<u8>,
        len: usize,
    }

    impl Recycled {
        /// The first `len` bytes of `buf`.
        pub(crate) fn new(buf: Vec<u8>, len: usize) -> Recycled {
            assert!(len <= buf.len(), "a block cannot hold more than its buffer");
            Recycled { buf, len }
        }
    }

    impl From<Vec<u8>> for Recycled {
        fn from(buf: Vec<u8>) -> Recycled {
            let len = buf.len();
            Recycled { buf, len }
        }
    }

    impl std::ops::Deref for Recycled {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            &self.buf[..self.len]
        }
    }

    impl Drop for Recycled {
        fn drop(&mut self) {
            give(std::mem::take(&mut self.buf));
        }
    }
}

#[derive(Debug)]
pub(crate) enum BlockData {
    Jsonl {
        /// Complete lines, newline bytes included (the file's last line may lack one).
        bytes: buffers::Recycled,
        /// Start offset of every line in `bytes`.
        starts: Vec<usize>,
        /// The offset of `bytes[0]` in the file's decompressed stream (the file's own offset for
        /// an uncompressed file), for a block read in order.
        offset: Option<u64>,
        /// For a block of a compressed file read in order, the members (frames) that started
        /// since the block before it was read (see [`crate::ResumePoint`]).
        resumes: Vec<crate::members::ResumePoint>,
        /// For a block read by the places of some of its records ([`crate::read_records`]):
        /// which records were read.
        picked: Option<Box<Picked>>,
    },
    Parquet {
        batch: RecordBatch,
        /// Sum of the value bytes of the selected text columns.
        text_bytes: u64,
        /// Read with [`Projection::FullRecords`], so it can be written out.
        full: bool,
        /// The texts of records a full-record read could not read whole (see
        /// [`Block::texts_only`]).
        texts_only: bool,
        /// For a block read by the rows chosen ([`crate::read_rows`]): the batch holds those
        /// rows only, and this says which records of the block they are.
        picked: Option<Box<PickedRows>>,
    },
    /// A slice of a registered in-memory table's batch (`arrow_table`).
    Arrow {
        batch: RecordBatch,
        /// Sum of the value bytes of the selected text columns.
        text_bytes: u64,
    },
}

/// The records of a block read by their places ([`crate::read_records`]): the others are
/// passed over, their lines empty in the block.
#[derive(Debug)]
pub(crate) struct Picked {
    /// Block-local indices of the records read, ascending.
    pub(crate) records: Vec<usize>,
    /// The bytes of the file the block's records span, read or not.
    pub(crate) spanned: u64,
    /// The bytes read for it (the records read and the short gaps read with them).
    pub(crate) read: u64,
    /// Whether every record's line is in the block ([`crate::read_records_whole`]): the
    /// records passed over were read, not parsed, and can be written out.
    pub(crate) whole: bool,
}

/// The rows of a Parquet block read by choosing them ([`crate::read_rows`]): the batch holds
/// the rows read, in order; the block's other records were passed over, unread.
#[derive(Debug)]
pub(crate) struct PickedRows {
    /// Block-local indices of the rows read, ascending, one per batch row.
    pub(crate) records: Vec<usize>,
    /// The records the block spans, read or not.
    pub(crate) spanned: usize,
    /// The bytes the Parquet reader took from the file for the block (footer, page index,
    /// dictionary and data pages, compressed as stored).
    pub(crate) read: u64,
}

impl Block {
    /// Records in this block (JSONL: every line, including blank lines; Parquet: rows, those
    /// passed over by [`crate::read_rows`] included).
    pub fn num_records(&self) -> usize {
        match &self.data {
            BlockData::Jsonl { starts, .. } => starts.len(),
            BlockData::Parquet {
                picked: Some(p), ..
            } => p.spanned,
            BlockData::Parquet { batch, .. } | BlockData::Arrow { batch, .. } => batch.num_rows(),
        }
    }

    /// The memory the block holds: its buffer (JSONL), or its decoded columns (Parquet). A slice
    /// of a registered in-memory table holds none of its own: its buffers are the caller's
    /// table's, which are held whatever the run reads.
    pub fn memory_bytes(&self) -> u64 {
        match &self.data {
            BlockData::Jsonl {
                bytes,
                starts,
                picked,
                ..
            } => {
                let picked = picked
                    .as_ref()
                    .map_or(0, |p| p.records.capacity() * size_of::<usize>());
                (bytes.len() + starts.capacity() * size_of::<usize>() + picked) as u64
            }
            BlockData::Parquet { batch, picked, .. } => {
                let picked = picked
                    .as_ref()
                    .map_or(0, |p| p.records.capacity() * size_of::<usize>());
                (batch.get_array_memory_size() + picked) as u64
            }
            BlockData::Arrow { .. } => 0,
        }
    }

    /// The bytes of its input file on disk this block stands for (see `DiskShare`): over the
    /// blocks of a chunk read to its end they add up to the chunk's share of the file, and over
    /// a file's chunks to its size ([`crate::InputFile::size`]), compressed or Parquet alike. What
    /// progress is counted in, against a total of the inputs' sizes.
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }

    /// Input bytes this block covers (JSONL: raw line bytes incl. newlines, decompressed, the
    /// lines of records passed over included; Parquet: the text columns' value bytes) — used
    /// for MB/s.
    pub fn input_bytes(&self) -> u64 {
        match &self.data {
            BlockData::Jsonl {
                picked: Some(p), ..
            } => p.spanned,
            BlockData::Jsonl { bytes, .. } => bytes.len() as u64,
            BlockData::Parquet { text_bytes, .. } | BlockData::Arrow { text_bytes, .. } => {
                *text_bytes
            }
        }
    }

    /// The offset of the block's first byte in its JSONL file's decompressed stream (the file
    /// offset of an uncompressed file), for a block read in order (as [`crate::read_chunk`]
    /// reads); `None` otherwise. Its records lie back to back from there, each as long as its
    /// line ([`Block::jsonl_line`]).
    pub fn jsonl_offset(&self) -> Option<u64> {
        match &self.data {
            BlockData::Jsonl {
                offset,
                picked: None,
                ..
            } => *offset,
            _ => None,
        }
    }

    /// Whether a later read can pick this block's records by their places: a block of an
    /// uncompressed JSONL file read in order ([`Block::jsonl_offset`]: [`crate::read_records`]
    /// reads records by offset and length), or a Parquet block read whole, every row of it
    /// ([`crate::read_rows`] reads rows by their index in the chunk, the row groups and
    /// pages holding them found in the footer).
    pub fn records_placeable(&self) -> bool {
        match &self.data {
            BlockData::Jsonl { .. } => self.jsonl_offset().is_some(),
            BlockData::Parquet {
                picked, texts_only, ..
            } => picked.is_none() && !texts_only,
            BlockData::Arrow { .. } => false,
        }
    }

    /// For a block of a compressed JSONL file read in order: where the members (frames) that
    /// started since the block before it begin ([`crate::ResumePoint`]), in order; what
    /// [`crate::read_records`] enters the stream by.
    pub fn jsonl_resume_points(&self) -> &[crate::members::ResumePoint] {
        match &self.data {
            BlockData::Jsonl { resumes, .. } => resumes,
            _ => &[],
        }
    }

    /// For a block read by the places of some of its records ([`crate::read_records`],
    /// [`crate::read_rows`]): those records (block-local indices, ascending), the only ones
    /// whose samples it yields; the others were passed over unread. `None` for a block read
    /// whole.
    pub fn records_read(&self) -> Option<&[usize]> {
        match &self.data {
            BlockData::Jsonl {
                picked: Some(p), ..
            } => Some(&p.records),
            BlockData::Parquet {
                picked: Some(p), ..
            } => Some(&p.records),
            _ => None,
        }
    }

    /// For a block read by the places of some of its records ([`crate::read_records`],
    /// [`crate::read_rows`]): the bytes of the file read for it. `None` for a block read
    /// whole.
    pub fn bytes_read(&self) -> Option<u64> {
        match &self.data {
            BlockData::Jsonl {
                picked: Some(p), ..
            } => Some(p.read),
            BlockData::Parquet {
                picked: Some(p), ..
            } => Some(p.read),
            _ => None,
        }
    }

    /// The raw bytes of JSONL record `i` of this block, newline included; `None` for Parquet.
    /// For a record passed over ([`Block::records_read`]) by [`crate::read_records`] they are
    /// not its own: empty, or bytes read between two records read.
    pub fn jsonl_line(&self, i: usize) -> Option<&[u8]> {
        match &self.data {
            BlockData::Jsonl { bytes, starts, .. } => {
                let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
                Some(&bytes[*starts.get(i)?..end])
            }
            BlockData::Parquet { .. } | BlockData::Arrow { .. } => None,
        }
    }

    /// Whether this block holds only the texts of records that a [`Projection::FullRecords`]
    /// read could not read whole: a Parquet row group with a corrupt page in a column other than
    /// the text and id columns. The [`ReadError`](crate::ReadError) yielded just before the block reports these
    /// records as lost; the block is there so that a stage which numbers samples as a
    /// [`Projection::TextOnly`] read did (stage 2 after stage 1) keeps its count. Such a block
    /// cannot be written, and its records must not be decided.
    pub fn texts_only(&self) -> bool {
        matches!(
            self.data,
            BlockData::Parquet {
                texts_only: true,
                ..
            }
        )
    }

    /// The decoded rows of a Parquet or in-memory Arrow block; `None` for JSONL.
    pub fn record_batch(&self) -> Option<&RecordBatch> {
        match &self.data {
            BlockData::Parquet { batch, .. } | BlockData::Arrow { batch, .. } => Some(batch),
            BlockData::Jsonl { .. } => None,
        }
    }
}

/// Which of a selector's fields the records read so far have: a JSON record has a field when
/// its path leads to a value (even `null`); a Parquet batch has it when the column is in its
/// schema. A field that no record has is almost always a typo (`--field txt`), which would
/// otherwise make every sample `missing_field`. Records that cannot be parsed (malformed JSON,
/// invalid UTF-8) say nothing about fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldsSeen {
    present: Vec<bool>,
    /// Fields not seen yet: 0 once all are (the common case, checked first).
    absent: usize,
    /// Whether any record has been looked at.
    examined: bool,
}

impl FieldsSeen {
    /// Nothing seen yet, for the fields of `selector`.
    pub fn new(selector: &TextSelector) -> FieldsSeen {
        FieldsSeen {
            present: vec![false; selector.fields.len()],
            absent: selector.fields.len(),
            examined: false,
        }
    }

    /// Adds what `other` (for the same selector) saw.
    pub fn merge(&mut self, other: &FieldsSeen) {
        if self.present.len() < other.present.len() {
            self.present.resize(other.present.len(), false);
        }
        for (mine, theirs) in self.present.iter_mut().zip(&other.present) {
            *mine |= *theirs;
        }
        self.absent = self.present.iter().filter(|p| !**p).count();
        self.examined |= other.examined;
    }

    /// Whether any record had its fields looked at.
    pub fn examined(&self) -> bool {
        self.examined
    }

    /// Indexes (into the selector's fields) of the fields no examined record had; empty when no
    /// record was examined.
    pub fn never_seen(&self) -> Vec<usize> {
        if !self.examined {
            return Vec::new();
        }
        (0..self.present.len())
            .filter(|&i| !self.present[i])
            .collect()
    }

    #[inline]
    pub(crate) fn all_seen(&self) -> bool {
        self.absent == 0
    }

    /// Marks field `i` as seen (`examined` is set by the caller).
    pub(crate) fn mark(&mut self, i: usize) {
        if let Some(p) = self.present.get_mut(i)
            && !*p
        {
            *p = true;
            self.absent -= 1;
        }
    }

    pub(crate) fn set_examined(&mut self) {
        self.examined = true;
    }
}

/// Value of one selected field of one record, before join/expand.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FieldValue<'a> {
    Str(&'a str),
    Missing,
    Null,
    NotString,
    InvalidUtf8,
}

impl FieldValue<'_> {
    fn reason(&self) -> SkipReason {
        match self {
            FieldValue::Str(_) | FieldValue::Missing => SkipReason::MissingField,
            FieldValue::Null => SkipReason::NullField,
            FieldValue::NotString => SkipReason::NotAString,
            FieldValue::InvalidUtf8 => SkipReason::InvalidUtf8,
        }
    }
}

/// Emits the samples of one record from its field values (shared by JSONL and Parquet).
pub(crate) fn emit_record<'a, F: FnMut(Sample<'_>)>(
    record: usize,
    values: &[FieldValue<'a>],
    id: Option<&'a str>,
    rank: RankValue,
    mode: &FieldsMode,
    join_buf: &mut String,
    f: &mut F,
) {
    match mode {
        FieldsMode::Expand => {
            for (i, v) in values.iter().enumerate() {
                let text = match v {
                    FieldValue::Str(s) => SampleText::Text(Cow::Borrowed(*s)),
                    other => SampleText::Skipped(other.reason()),
                };
                f(Sample {
                    record,
                    field: i as u32,
                    text,
                    id: id.map(Cow::Borrowed),
                    rank,
                });
            }
        }
        FieldsMode::Join { separator } => {
            let mut strings = values.iter().filter_map(|v| match v {
                FieldValue::Str(s) => Some(*s),
                _ => None,
            });
            let text = match (strings.next(), strings.next()) {
                (None, _) => SampleText::Skipped(
                    values
                        .iter()
                        .find(|v| !matches!(v, FieldValue::Missing))
                        .map_or(SkipReason::MissingField, FieldValue::reason),
                ),
                (Some(one), None) => SampleText::Text(Cow::Borrowed(one)),
                (Some(a), Some(b)) => {
                    join_buf.clear();
                    join_buf.push_str(a);
                    join_buf.push_str(separator);
                    join_buf.push_str(b);
                    for s in strings {
                        join_buf.push_str(separator);
                        join_buf.push_str(s);
                    }
                    SampleText::Text(Cow::Borrowed(join_buf.as_str()))
                }
            };
            f(Sample {
                record,
                field: 0,
                text,
                id: id.map(Cow::Borrowed),
                rank,
            });
        }
    }
}

/// Emits one skipped sample per slot of a record that could not be parsed at all.
pub(crate) fn emit_bad<F: FnMut(Sample<'_>)>(
    record: usize,
    n: usize,
    reason: SkipReason,
    f: &mut F,
) {
    for field in 0..n {
        f(Sample {
            record,
            field: field as u32,
            text: SampleText::Skipped(reason.clone()),
            id: None,
            rank: RankValue::Absent,
        });
    }
}

/// Empties a vector and hands back its allocation for elements of another lifetime, so per-record
/// borrowed views need no allocation (the in-place `collect` keeps the buffer).
pub(crate) fn reuse_vec<'b>(mut v: Vec<FieldValue<'_>>) -> Vec<FieldValue<'b>> {
    v.clear();
    v.into_iter().map(|_| FieldValue::Missing).collect()
}

/// Where a sample sits in the inputs: file index, record within the file, field slot.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SampleAddr {
    /// Index of the input file.
    pub file: u32,
    /// Record (line or row) within the file, from 0.
    pub record: u64,
    /// Field slot within the record, from 0.
    pub field: u32,
}

/// What the readers' tests compare blocks by.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{Block, SampleText};
    use crate::select::TextSelector;

    /// (record, text or skip kind) of every sample of `blocks`, records counted from the
    /// chunk's start.
    pub(crate) fn samples(blocks: &[Block], sel: &TextSelector) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for b in blocks {
            b.for_each_sample(sel, |s| {
                let t = match s.text {
                    SampleText::Text(t) => t.into_owned(),
                    SampleText::Skipped(r) => r.kind().to_string(),
                };
                out.push((b.first_record + s.record as u64, t));
            });
        }
        out
    }
}
