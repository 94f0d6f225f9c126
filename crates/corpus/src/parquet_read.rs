//! Reading Parquet chunks (row-group ranges) as record batches, and extracting text from them.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Decimal128Type, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::ArrowError;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::schema::types::SchemaDescriptor;

use neardup_storage::ObjectRanges;

use crate::block::{
    BlockData, DiskShare, FieldValue, FieldsSeen, Projection, RankValue, ReadOptions, Sample,
    emit_record, reuse_vec,
};
use crate::chunk::{Chunk, ChunkRange};
use crate::error::{ReadError, ReadErrorKind, Unreadable};
use crate::format::InputFile;
use crate::select::{FieldPath, TextSelector};

/// Batch size bounds: below 64 rows per-batch overhead dominates; above 65536 a batch of short
/// rows would still be fine, but bounded batches keep latency and memory predictable.
const MIN_BATCH_ROWS: usize = 64;
const MAX_BATCH_ROWS: usize = 65536;

/// Where a Parquet file's bytes come from: a local file, or ranged reads of an object.
pub(crate) enum ParquetBytes {
    File(File),
    Object(ObjectRanges),
}

impl ParquetBytes {
    pub(crate) fn open(file: &InputFile) -> Result<ParquetBytes, ReadError> {
        match file.object_url() {
            Some(url) => ObjectRanges::open(&url, file.size)
                .map(ParquetBytes::Object)
                .map_err(|e| ReadError::from_io(&file.path, None, object_io_error(e))),
            None => File::open(&file.path)
                .map(ParquetBytes::File)
                .map_err(|e| ReadError::from_io(&file.path, None, e)),
        }
    }

    fn try_clone(&self) -> std::io::Result<ParquetBytes> {
        Ok(match self {
            ParquetBytes::File(f) => ParquetBytes::File(f.try_clone()?),
            ParquetBytes::Object(o) => ParquetBytes::Object(o.clone()),
        })
    }

    /// Fetches the byte ranges of `leaves` in row group `group` before they are decoded (an
    /// object's column chunks arrive together, over concurrent requests; a file needs nothing).
    fn prefetch(
        &self,
        meta: &ParquetMetaData,
        group: usize,
        leaves: &[usize],
    ) -> Result<(), neardup_storage::StorageError> {
        let ParquetBytes::Object(o) = self else {
            return Ok(());
        };
        let rg = meta.row_group(group);
        let ranges: Vec<std::ops::Range<u64>> = leaves
            .iter()
            .map(|&c| {
                let (start, len) = rg.column(c).byte_range();
                start..start + len
            })
            .collect();
        o.prefetch(&ranges)
    }
}

/// A storage error as the I/O error a reader reports: its message without the URL, which the
/// read error names already.
pub(crate) fn object_io_error(e: neardup_storage::StorageError) -> std::io::Error {
    e.into_unnamed_io()
}

/// Reads and parses a Parquet footer. Errors are `corrupt_parquet` (or `io` if the file cannot be
/// opened).
pub(crate) fn read_footer(file: &InputFile) -> Result<(ParquetBytes, ParquetMetaData), ReadError> {
    let bytes = ParquetBytes::open(file)?;
    let parsed = match &bytes {
        ParquetBytes::File(f) => ParquetMetaDataReader::new().parse_and_finish(f),
        ParquetBytes::Object(o) => ParquetMetaDataReader::new().parse_and_finish(o),
    };
    let meta = parsed.map_err(|e| footer_error(file, e))?;
    Ok((bytes, meta))
}

/// Loads the footer and its Arrow schema.
pub(crate) fn load(file: &InputFile) -> Result<(ParquetBytes, ArrowReaderMetadata), ReadError> {
    let (f, meta) = read_footer(file)?;
    let arrow = ArrowReaderMetadata::try_new(Arc::new(meta), ArrowReaderOptions::default())
        .map_err(|e| {
            ReadError::new(
                &file.path,
                ReadErrorKind::SchemaMismatch,
                None,
                e.to_string(),
            )
        })?;
    Ok((f, arrow))
}

/// The leaf columns a [`Projection::TextOnly`] read decodes: the selected text, id and rank
/// columns (with their nested leaves).
pub(crate) fn selected_leaves(schema: &SchemaDescriptor, selector: &TextSelector) -> Vec<usize> {
    let wanted: Vec<&FieldPath> = selector
        .fields
        .iter()
        .chain(selector.id_field.as_ref())
        .chain(selector.rank_field.as_ref())
        .collect();
    let mut l: Vec<usize> = (0..schema.num_columns())
        .filter(|&i| {
            let parts = schema.column(i).path().parts().to_vec();
            wanted.iter().any(|w| parts.starts_with(w.segments()))
        })
        .collect();
    if l.is_empty() && schema.num_columns() > 0 {
        // No selected column exists: decode the first column only so row counts
        // (and hence record addresses) stay right; every sample is MissingField.
        l.push(0);
    }
    l
}

/// A row limit applied only when it cuts the group short (as the builder is given it for
/// either source).
trait LimitBelow: Sized {
    fn with_limit_below(self, limit: u64, rows: u64) -> Self;
}

impl<T: parquet::file::reader::ChunkReader + 'static> LimitBelow
    for ParquetRecordBatchReaderBuilder<T>
{
    fn with_limit_below(self, limit: u64, rows: u64) -> Self {
        if limit < rows {
            self.with_limit(limit as usize)
        } else {
            self
        }
    }
}

/// Reads one row group at a time (a fresh decoder per group, sharing the parsed footer) so
/// batches never span row groups and an error is located in exactly one group. A group that
/// cannot be read to its end costs only its own unread rows: reading goes on with the next group.
pub(crate) struct ParquetSource {
    path: PathBuf,
    file: ParquetBytes,
    meta: ArrowReaderMetadata,
    /// The columns this read decodes, and its rows per batch.
    read: Decoding,
    /// For a [`Projection::FullRecords`] read: how a [`Projection::TextOnly`] read (stage 1's)
    /// decodes the same chunk, to replay it for the rows of a group whose other columns fail.
    texts: Option<Decoding>,
    reader: Option<ParquetRecordBatchReader>,
    selector: TextSelector,
    full: bool,
    /// Row groups still to open, in order.
    todo: VecDeque<GroupPlan>,
    /// Row group being read.
    current: GroupPlan,
    /// Rows of the current group delivered so far (whole records, or texts only while replaying).
    delivered: u64,
    /// While replaying a failed group's texts: the rows of the replay still to drop (those the
    /// full read delivered before it failed).
    replay_skip: Option<u64>,
    /// The chunk's share of the file's bytes, handed to its blocks by rows read.
    disk: DiskShare,
}

/// A projection and its batch size.
#[derive(Clone)]
struct Decoding {
    mask: ProjectionMask,
    /// The leaf columns the mask selects.
    leaves: Vec<usize>,
    batch_rows: usize,
}

/// One row group of the chunk.
#[derive(Clone, Default)]
struct GroupPlan {
    index: usize,
    /// Chunk-local index of its first row.
    first: u64,
    /// Rows it holds, from the footer.
    rows: u64,
    /// The loss an earlier read of the chunk met in this group, from its first lost row to the
    /// group's end: this read delivers the rows before it and reports the same loss.
    known: Option<Unreadable>,
    /// Compressed bytes of the chunk's groups before this one.
    disk_before: u64,
    /// Its own compressed bytes.
    disk: u64,
}

impl GroupPlan {
    /// Rows this read may deliver.
    fn limit(&self) -> u64 {
        match &self.known {
            Some(k) => k.first_record.saturating_sub(self.first).min(self.rows),
            None => self.rows,
        }
    }
}

/// What a failed read of `file`'s footer means: a failed request is no sign of a corrupt file.
pub(crate) fn footer_error(file: &InputFile, e: parquet::errors::ParquetError) -> ReadError {
    match e {
        parquet::errors::ParquetError::External(inner) => ReadError::new(
            &file.path,
            ReadErrorKind::Storage,
            Some("footer".into()),
            inner.to_string(),
        ),
        e => ReadError::new(
            &file.path,
            ReadErrorKind::CorruptParquet,
            Some("footer".into()),
            format!("unreadable footer ({e})"),
        ),
    }
}

/// The row groups of `chunk`, a chunk of `file` (a Parquet file of `n` row groups), or why the
/// chunk does not fit the file.
pub(crate) fn chunk_row_groups(
    file: &InputFile,
    chunk: &Chunk,
    n: usize,
) -> Result<Vec<usize>, ReadError> {
    match chunk.range {
        ChunkRange::Whole => Ok((0..n).collect()),
        ChunkRange::RowGroups { start, end } if start <= end && end <= n => {
            Ok((start..end).collect())
        }
        ref other => Err(ReadError::new(
            &file.path,
            ReadErrorKind::InvalidChunk,
            None,
            format!(
                "a chunk of {other} (end exclusive) does not fit a Parquet file of {n} row groups"
            ),
        )),
    }
}

/// The bytes of a file of `file_size` bytes that the chunk over the row groups `groups` stands
/// for: its groups' compressed bytes, and, for the chunk holding the last row group, the rest of
/// the file too (its footer, the magic bytes, anything between the groups), so that a file's
/// chunks cover all its bytes.
pub(crate) fn chunk_file_share(pmeta: &ParquetMetaData, groups: &[usize], file_size: u64) -> u64 {
    let n = pmeta.num_row_groups();
    let group_disk = |g: usize| pmeta.row_group(g).compressed_size().max(0) as u64;
    let own: u64 = groups.iter().map(|&g| group_disk(g)).sum();
    if groups.last().is_none_or(|&g| g + 1 == n) {
        let all: u64 = (0..n).map(group_disk).sum();
        own + file_size.saturating_sub(all)
    } else {
        own
    }
}

/// `pmeta` as the Arrow reader's metadata, or why `file`'s schema cannot be read as Arrow.
pub(crate) fn arrow_metadata(
    pmeta: ParquetMetaData,
    file: &InputFile,
) -> Result<ArrowReaderMetadata, ReadError> {
    ArrowReaderMetadata::try_new(Arc::new(pmeta), ArrowReaderOptions::default()).map_err(|e| {
        ReadError::new(
            &file.path,
            ReadErrorKind::SchemaMismatch,
            None,
            format!("schema not readable as Arrow ({e})"),
        )
    })
}

impl ParquetSource {
    pub(crate) fn open(
        file: &InputFile,
        chunk: &Chunk,
        opts: &ReadOptions,
        known: &[Unreadable],
    ) -> Result<ParquetSource, ReadError> {
        let path = &file.path;
        // Without a footer nothing is known, not even how many rows the chunk holds.
        let (f, pmeta) = read_footer(file).map_err(|e| e.losing(0, None, None, None))?;
        let n = pmeta.num_row_groups();
        let groups = chunk_row_groups(file, chunk, n).map_err(|e| e.losing(0, None, None, None))?;
        let mut plans = VecDeque::with_capacity(groups.len());
        let mut first = 0u64;
        let mut disk_before = 0u64;
        let group_disk = |g: usize| pmeta.row_group(g).compressed_size().max(0) as u64;
        for &g in &groups {
            let rows = pmeta.row_group(g).num_rows().max(0) as u64;
            let known = known
                .iter()
                .find(|k| k.row_group == Some(g) && k.records.is_some())
                .cloned();
            plans.push_back(GroupPlan {
                index: g,
                first,
                rows,
                known,
                disk_before,
                disk: group_disk(g),
            });
            first += rows;
            disk_before += group_disk(g);
        }
        let share = chunk_file_share(&pmeta, &groups, file.size);
        let chunk_rows = first;
        let meta =
            arrow_metadata(pmeta, file).map_err(|e| e.losing(0, Some(chunk_rows), None, None))?;
        let pmeta = meta.metadata();
        let schema = pmeta.file_metadata().schema_descr();
        let decoding = |leaves: Vec<usize>| {
            let mut bytes = 0u64;
            for &g in &groups {
                let rg = pmeta.row_group(g);
                bytes += leaves
                    .iter()
                    .map(|&c| rg.column(c).uncompressed_size().max(0) as u64)
                    .sum::<u64>();
            }
            let avg_row = (bytes / chunk_rows.max(1)).max(1);
            Decoding {
                batch_rows: ((opts.block_bytes as u64 / avg_row) as usize)
                    .clamp(MIN_BATCH_ROWS, MAX_BATCH_ROWS),
                mask: ProjectionMask::leaves(schema, leaves.iter().copied()),
                leaves,
            }
        };
        let text_leaves = selected_leaves(schema, &opts.selector);
        let (read, texts) = match opts.projection {
            Projection::FullRecords => (
                decoding((0..schema.num_columns()).collect()),
                Some(decoding(text_leaves)),
            ),
            Projection::TextOnly => (decoding(text_leaves), None),
        };
        Ok(ParquetSource {
            path: path.clone(),
            file: f,
            meta,
            read,
            texts,
            reader: None,
            selector: opts.selector.clone(),
            full: opts.projection == Projection::FullRecords,
            todo: plans,
            current: GroupPlan::default(),
            delivered: 0,
            replay_skip: None,
            disk: DiskShare::new(share),
        })
    }

    fn location(&self) -> String {
        format!(
            "row group {} (chunk-local row {})",
            self.current.index,
            self.current.first + self.delivered
        )
    }

    /// A decoder of the current group's first `limit` rows.
    fn decoder(
        &self,
        decoding: &Decoding,
        limit: u64,
    ) -> Result<ParquetRecordBatchReader, ReadError> {
        let file = self
            .file
            .try_clone()
            .map_err(|e| ReadError::from_io(&self.path, Some(self.location()), e))?;
        file.prefetch(self.meta.metadata(), self.current.index, &decoding.leaves)
            .map_err(|e| {
                ReadError::from_io(&self.path, Some(self.location()), object_io_error(e))
            })?;
        let builder = match file {
            ParquetBytes::File(f) => {
                ParquetRecordBatchReaderBuilder::new_with_metadata(f, self.meta.clone())
                    .with_row_groups(vec![self.current.index])
                    .with_projection(decoding.mask.clone())
                    .with_batch_size(decoding.batch_rows)
                    .with_limit_below(limit, self.current.rows)
                    .build()
            }
            ParquetBytes::Object(o) => {
                ParquetRecordBatchReaderBuilder::new_with_metadata(o, self.meta.clone())
                    .with_row_groups(vec![self.current.index])
                    .with_projection(decoding.mask.clone())
                    .with_batch_size(decoding.batch_rows)
                    .with_limit_below(limit, self.current.rows)
                    .build()
            }
        };
        builder.map_err(|e| {
            ReadError::new(
                &self.path,
                ReadErrorKind::CorruptParquet,
                Some(self.location()),
                format!("corrupt column data ({e})"),
            )
        })
    }

    /// The current group failed after `delivered` rows: the rest of the group is lost (this
    /// loss covers any known one). A full-record read replays the texts-only read of the group
    /// for the rows the earlier read delivered, so a stage keeps its sample count.
    fn group_failed(&mut self, e: ReadError) -> ReadError {
        let g = &self.current;
        let lost_from = g.first + self.delivered;
        let limit = g.limit();
        let err = e.losing(
            lost_from,
            Some(g.rows - self.delivered),
            Some(g.index),
            None,
        );
        self.reader = None;
        if let Some(texts) = self.texts.clone()
            && self.delivered < limit
            && self.replay_skip.is_none()
        {
            // A replay that fails too leaves the stage's counts short of the earlier read's,
            // which it reports as a mismatch.
            if let Ok(r) = self.decoder(&texts, limit) {
                self.reader = Some(r);
                self.replay_skip = Some(self.delivered);
                self.delivered = 0;
            }
        }
        self.current.known = None;
        err
    }

    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        loop {
            if let Some(r) = &mut self.reader {
                match r.next() {
                    Some(Ok(batch)) => {
                        if let Some(block) = self.deliver(batch) {
                            return Some(Ok(block));
                        }
                    }
                    Some(Err(_)) if self.replay_skip.is_some() => {
                        // The texts-only replay failed too: leave it (see group_failed).
                        self.reader = None;
                        self.replay_skip = None;
                    }
                    Some(Err(e)) => {
                        // A range fetched while decoding failed: the request, not the data.
                        if let ParquetBytes::Object(o) = &self.file
                            && let Some(failure) = o.take_failure()
                        {
                            let e = ReadError::from_io(
                                &self.path,
                                Some(self.location()),
                                object_io_error(failure),
                            );
                            return Some(Err(self.group_failed(e)));
                        }
                        let kind = match &e {
                            ArrowError::SchemaError(_) | ArrowError::CastError(_) => {
                                ReadErrorKind::SchemaMismatch
                            }
                            ArrowError::IoError(..) => ReadErrorKind::Io,
                            _ => ReadErrorKind::CorruptParquet,
                        };
                        let message = match kind {
                            ReadErrorKind::CorruptParquet => format!("corrupt column data ({e})"),
                            _ => e.to_string(),
                        };
                        let e = ReadError::new(&self.path, kind, Some(self.location()), message);
                        return Some(Err(self.group_failed(e)));
                    }
                    None => {
                        self.reader = None;
                        if self.replay_skip.take().is_none()
                            && let Some(known) = self.current.known.take()
                        {
                            // Read up to where the earlier read lost the rest of the group.
                            return Some(Err(ReadError::known(&self.path, &known)));
                        }
                    }
                }
                continue;
            }
            self.current = self.todo.pop_front()?;
            self.delivered = 0;
            self.replay_skip = None;
            let limit = self.current.limit();
            if limit == 0 {
                if let Some(known) = self.current.known.take() {
                    return Some(Err(ReadError::known(&self.path, &known)));
                }
                continue;
            }
            match self.decoder(&self.read.clone(), limit) {
                Ok(r) => self.reader = Some(r),
                Err(e) => return Some(Err(self.group_failed(e))),
            }
        }
    }

    /// A batch of the current group as a block (its chunk-local first row, data and bytes on
    /// disk); `None` when a replay drops all of it.
    fn deliver(&mut self, batch: RecordBatch) -> Option<(u64, BlockData, u64)> {
        let mut batch = batch;
        let mut first = self.current.first + self.delivered;
        self.delivered += batch.num_rows() as u64;
        let texts_only = self.replay_skip.is_some();
        if let Some(skip) = self.replay_skip {
            let end = self.current.first + self.delivered;
            let from = self.current.first + skip;
            if end <= from {
                return None;
            }
            if first < from {
                let cut = (from - first) as usize;
                batch = batch.slice(cut, batch.num_rows() - cut);
                first = from;
            }
        }
        let text_bytes = text_bytes(&batch, &self.selector);
        let g = &self.current;
        let upto = g.disk_before + g.disk * self.delivered.min(g.rows) / g.rows.max(1);
        let last = self.todo.is_empty() && self.delivered >= g.limit() && g.known.is_none();
        let disk_bytes = self.disk.next(upto, last);
        Some((
            first,
            BlockData::Parquet {
                batch,
                text_bytes,
                full: self.full && !texts_only,
                texts_only,
                picked: None,
            },
            disk_bytes,
        ))
    }
}

/// A selected column resolved in a batch: the leaf array plus the nulls of its struct parents.
struct Resolved<'a> {
    col: TextCol<'a>,
    parent_nulls: Option<NullBuffer>,
}

enum TextCol<'a> {
    Missing,
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Utf8View(&'a arrow_array::StringViewArray),
    Binary(&'a arrow_array::BinaryArray),
    LargeBinary(&'a arrow_array::LargeBinaryArray),
    BinaryView(&'a arrow_array::BinaryViewArray),
    Dict {
        array: &'a dyn Array,
        keys: Vec<usize>,
        values: Box<TextCol<'a>>,
    },
    Other(&'a dyn Array),
}

impl<'a> TextCol<'a> {
    fn new(a: &'a dyn Array) -> TextCol<'a> {
        if let Some(s) = a.as_string_opt::<i32>() {
            TextCol::Utf8(s)
        } else if let Some(s) = a.as_string_opt::<i64>() {
            TextCol::LargeUtf8(s)
        } else if let Some(s) = a.as_string_view_opt() {
            TextCol::Utf8View(s)
        } else if let Some(s) = a.as_binary_opt::<i32>() {
            TextCol::Binary(s)
        } else if let Some(s) = a.as_binary_opt::<i64>() {
            TextCol::LargeBinary(s)
        } else if let Some(s) = a.as_binary_view_opt() {
            TextCol::BinaryView(s)
        } else if let Some(d) = a.as_any_dictionary_opt() {
            TextCol::Dict {
                array: a,
                keys: d.normalized_keys(),
                values: Box::new(TextCol::new(d.values().as_ref())),
            }
        } else {
            TextCol::Other(a)
        }
    }

    fn get(&self, row: usize) -> FieldValue<'a> {
        fn bytes<'b>(b: &'b [u8]) -> FieldValue<'b> {
            match std::str::from_utf8(b) {
                Ok(s) => FieldValue::Str(s),
                Err(_) => FieldValue::InvalidUtf8,
            }
        }
        match self {
            TextCol::Missing => FieldValue::Missing,
            TextCol::Utf8(a) if a.is_valid(row) => FieldValue::Str(a.value(row)),
            TextCol::LargeUtf8(a) if a.is_valid(row) => FieldValue::Str(a.value(row)),
            TextCol::Utf8View(a) if a.is_valid(row) => FieldValue::Str(a.value(row)),
            TextCol::Binary(a) if a.is_valid(row) => bytes(a.value(row)),
            TextCol::LargeBinary(a) if a.is_valid(row) => bytes(a.value(row)),
            TextCol::BinaryView(a) if a.is_valid(row) => bytes(a.value(row)),
            TextCol::Dict {
                array,
                keys,
                values,
            } if array.is_valid(row) => values.get(keys[row]),
            TextCol::Other(a) if a.is_valid(row) => FieldValue::NotString,
            _ => FieldValue::Null,
        }
    }

    /// Value bytes of the column, for throughput accounting.
    fn value_bytes(&self, rows: usize) -> u64 {
        fn span<O: arrow_array::OffsetSizeTrait>(o: &[O]) -> u64 {
            match (o.first(), o.last()) {
                (Some(a), Some(b)) => (b.as_usize() - a.as_usize()) as u64,
                _ => 0,
            }
        }
        match self {
            TextCol::Missing | TextCol::Other(_) => 0,
            TextCol::Utf8(a) => span(a.value_offsets()),
            TextCol::LargeUtf8(a) => span(a.value_offsets()),
            TextCol::Binary(a) => span(a.value_offsets()),
            TextCol::LargeBinary(a) => span(a.value_offsets()),
            TextCol::Utf8View(a) => a.views().iter().map(|v| *v as u32 as u64).sum(),
            TextCol::BinaryView(a) => a.views().iter().map(|v| *v as u32 as u64).sum(),
            TextCol::Dict { .. } => (0..rows)
                .map(|r| match self.get(r) {
                    FieldValue::Str(s) => s.len() as u64,
                    _ => 0,
                })
                .sum(),
        }
    }
}

/// Finds a (possibly nested) column by path; a missing column or a non-struct parent is Missing.
fn resolve<'a>(batch: &'a RecordBatch, path: &FieldPath) -> Resolved<'a> {
    let segs = path.segments();
    let Some(mut arr): Option<&'a ArrayRef> = batch.column_by_name(&segs[0]) else {
        return Resolved {
            col: TextCol::Missing,
            parent_nulls: None,
        };
    };
    let mut parent_nulls: Option<NullBuffer> = None;
    for seg in &segs[1..] {
        let Some(st) = arr.as_struct_opt() else {
            return Resolved {
                col: TextCol::Missing,
                parent_nulls: None,
            };
        };
        parent_nulls = NullBuffer::union(parent_nulls.as_ref(), st.nulls());
        match st.column_by_name(seg) {
            Some(c) => arr = c,
            None => {
                return Resolved {
                    col: TextCol::Missing,
                    parent_nulls: None,
                };
            }
        }
    }
    Resolved {
        col: TextCol::new(arr.as_ref()),
        parent_nulls,
    }
}

impl<'a> Resolved<'a> {
    fn get(&self, row: usize) -> FieldValue<'a> {
        if self.parent_nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            // Like JSON `"meta": null` for path meta.body: the field is absent.
            return FieldValue::Missing;
        }
        self.col.get(row)
    }
}

pub(crate) fn text_bytes(batch: &RecordBatch, selector: &TextSelector) -> u64 {
    selector
        .fields
        .iter()
        .map(|f| resolve(batch, f).col.value_bytes(batch.num_rows()))
        .sum()
}

/// Returns `$body` from the enclosing function, with `$p` the array `$a` as a primitive array of
/// its type, when that type is an integer or float one (the id and rank columns read them).
macro_rules! return_if_integer_or_float {
    ($a:expr, $p:ident => $body:expr) => {
        return_if_integer_or_float!(@each $a, $p => $body; Int8Type, Int16Type, Int32Type,
            Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type, Float32Type, Float64Type)
    };
    (@each $a:expr, $p:ident => $body:expr; $($t:ty),*) => {
        $(if let Some($p) = $a.as_primitive_opt::<$t>() {
            return $body;
        })*
    };
}

/// A rank column's value at `row`: a number from any integer, float or decimal column.
// The macro casts every type to f64, Float64 too.
#[allow(clippy::unnecessary_cast)]
fn rank_of(c: &Resolved<'_>, row: usize) -> RankValue {
    let a = match c.get(row) {
        FieldValue::Missing | FieldValue::Null => return RankValue::Absent,
        FieldValue::NotString => match &c.col {
            TextCol::Other(a) => *a,
            _ => return RankValue::NotANumber("not a number"),
        },
        FieldValue::Str(_) | FieldValue::InvalidUtf8 => return RankValue::NotANumber("a string"),
    };
    return_if_integer_or_float!(a, p => RankValue::Number(p.value(row) as f64));
    if let Some(p) = a.as_primitive_opt::<Float16Type>() {
        return RankValue::Number(p.value(row).to_f64());
    }
    if let Some(p) = a.as_primitive_opt::<Decimal128Type>() {
        return RankValue::Number(p.value(row) as f64 / 10f64.powi(i32::from(p.scale())));
    }
    if a.as_boolean_opt().is_some() {
        return RankValue::NotANumber("a boolean");
    }
    RankValue::NotANumber("not a number")
}

/// Renders a non-string id value into `buf`; `false` if the type has no plain rendering.
fn render_id(a: &dyn Array, row: usize, buf: &mut String) -> bool {
    buf.clear();
    return_if_integer_or_float!(a, p => {
        let _ = write!(buf, "{}", p.value(row));
        true
    });
    if let Some(b) = a.as_boolean_opt() {
        let _ = write!(buf, "{}", b.value(row));
        return true;
    }
    false
}

pub(crate) fn batch_samples<F: FnMut(Sample<'_>)>(
    batch: &RecordBatch,
    selector: &TextSelector,
    seen: Option<&mut FieldsSeen>,
    f: &mut F,
) {
    let cols: Vec<Resolved<'_>> = selector.fields.iter().map(|p| resolve(batch, p)).collect();
    if let Some(seen) = seen
        && batch.num_rows() > 0
    {
        seen.set_examined();
        for (i, c) in cols.iter().enumerate() {
            if !matches!(c.col, TextCol::Missing) {
                seen.mark(i);
            }
        }
    }
    let id_col = selector.id_field.as_ref().map(|p| resolve(batch, p));
    let rank_col = selector.rank_field.as_ref().map(|p| resolve(batch, p));
    let mut join_buf = String::new();
    let mut id_buf = String::new();
    let mut values_buf: Vec<FieldValue<'static>> = Vec::with_capacity(cols.len());
    for row in 0..batch.num_rows() {
        let mut values = reuse_vec(std::mem::take(&mut values_buf));
        values.extend(cols.iter().map(|c| c.get(row)));
        let id: Option<&str> = match &id_col {
            None => None,
            Some(c) => match c.get(row) {
                FieldValue::Str(s) => Some(s),
                FieldValue::NotString => match &c.col {
                    TextCol::Other(a) if render_id(*a, row, &mut id_buf) => Some(id_buf.as_str()),
                    _ => None,
                },
                _ => None,
            },
        };
        let rank = rank_col
            .as_ref()
            .map_or(RankValue::Absent, |c| rank_of(c, row));
        emit_record(row, &values, id, rank, &selector.mode, &mut join_buf, f);
        values_buf = reuse_vec(values);
    }
}
