//! Reading Parquet chunks (row-group ranges) as record batches, and extracting text from them.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
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

use crate::chunk::{Chunk, ChunkRange};
use crate::error::ReadError;
use crate::format::InputFile;
use crate::read::{BlockData, FieldValue, Projection, ReadOptions, Sample, emit_record, reuse_vec};
use crate::select::{FieldPath, TextSelector};

/// Batch size bounds: below 64 rows per-batch overhead dominates; above 65536 a batch of short
/// rows would still be fine, but bounded batches keep latency and memory predictable.
const MIN_BATCH_ROWS: usize = 64;
const MAX_BATCH_ROWS: usize = 65536;

/// Reads and parses a Parquet footer. Errors are `corrupt_parquet` (or `io` if the file cannot be
/// opened).
pub(crate) fn read_footer(path: &Path) -> Result<(File, ParquetMetaData), ReadError> {
    let f = File::open(path).map_err(|e| ReadError::from_io(path, None, &e))?;
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&f)
        .map_err(|e| {
            ReadError::new(
                path,
                "corrupt_parquet",
                Some("footer".into()),
                e.to_string(),
            )
        })?;
    Ok((f, meta))
}

/// Loads the footer and its Arrow schema.
pub(crate) fn load(path: &Path) -> Result<(File, ArrowReaderMetadata), ReadError> {
    let (f, meta) = read_footer(path)?;
    let arrow = ArrowReaderMetadata::try_new(Arc::new(meta), ArrowReaderOptions::default())
        .map_err(|e| ReadError::new(path, "schema_mismatch", None, e.to_string()))?;
    Ok((f, arrow))
}

/// Reads one row group at a time (a fresh decoder per group, sharing the parsed footer) so
/// batches never span row groups and an error is located in exactly one group.
pub(crate) struct ParquetSource {
    path: PathBuf,
    file: File,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    batch_rows: usize,
    reader: Option<ParquetRecordBatchReader>,
    selector: TextSelector,
    full: bool,
    /// Chunk-local index of the next row.
    record: u64,
    /// Row groups still to open, in order.
    todo: std::collections::VecDeque<usize>,
    /// Row group being read.
    current: usize,
}

impl ParquetSource {
    pub(crate) fn open(
        file: &InputFile,
        chunk: &Chunk,
        opts: &ReadOptions,
    ) -> Result<ParquetSource, ReadError> {
        let path = &file.path;
        let (f, meta) = load(path)?;
        let pmeta = meta.metadata().clone();
        let n = pmeta.num_row_groups();
        let groups: Vec<usize> = match chunk.range {
            ChunkRange::Whole => (0..n).collect(),
            ChunkRange::RowGroups { start, end } if start <= end && end <= n => {
                (start..end).collect()
            }
            ref other => {
                return Err(ReadError::new(
                    path,
                    "invalid_chunk",
                    None,
                    format!(
                        "chunk range {other:?} does not fit a Parquet file with {n} row groups"
                    ),
                ));
            }
        };
        let schema = pmeta.file_metadata().schema_descr();
        let leaves: Vec<usize> = match opts.projection {
            Projection::FullRecords => (0..schema.num_columns()).collect(),
            Projection::TextOnly => {
                let wanted: Vec<&FieldPath> = opts
                    .selector
                    .fields
                    .iter()
                    .chain(opts.selector.id_field.as_ref())
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
        };
        let (mut rows, mut bytes) = (0u64, 0u64);
        for &g in &groups {
            let rg = pmeta.row_group(g);
            rows += rg.num_rows().max(0) as u64;
            bytes += leaves
                .iter()
                .map(|&c| rg.column(c).uncompressed_size().max(0) as u64)
                .sum::<u64>();
        }
        let avg_row = (bytes / rows.max(1)).max(1);
        let batch_rows =
            ((opts.block_bytes as u64 / avg_row) as usize).clamp(MIN_BATCH_ROWS, MAX_BATCH_ROWS);
        let mask = ProjectionMask::leaves(schema, leaves);
        Ok(ParquetSource {
            path: path.clone(),
            file: f,
            meta,
            mask,
            batch_rows,
            reader: None,
            selector: opts.selector.clone(),
            full: opts.projection == Projection::FullRecords,
            record: 0,
            todo: groups.into_iter().collect(),
            current: 0,
        })
    }

    fn location(&self) -> String {
        format!(
            "row group {} (chunk-local row {})",
            self.current, self.record
        )
    }

    fn open_next_group(&mut self) -> Option<Result<(), ReadError>> {
        let g = self.todo.pop_front()?;
        self.current = g;
        let file = match self.file.try_clone() {
            Ok(f) => f,
            Err(e) => {
                return Some(Err(ReadError::from_io(
                    &self.path,
                    Some(self.location()),
                    &e,
                )));
            }
        };
        let built = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
            .with_row_groups(vec![g])
            .with_projection(self.mask.clone())
            .with_batch_size(self.batch_rows)
            .build();
        Some(match built {
            Ok(r) => {
                self.reader = Some(r);
                Ok(())
            }
            Err(e) => Err(ReadError::new(
                &self.path,
                "corrupt_parquet",
                Some(self.location()),
                e.to_string(),
            )),
        })
    }

    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData), ReadError>> {
        let next = loop {
            if let Some(r) = &mut self.reader {
                match r.next() {
                    Some(item) => break item,
                    None => self.reader = None,
                }
            }
            if let Err(e) = self.open_next_group()? {
                return Some(Err(e));
            }
        };
        match next {
            Ok(batch) => {
                let first = self.record;
                self.record += batch.num_rows() as u64;
                let text_bytes = text_bytes(&batch, &self.selector);
                Some(Ok((
                    first,
                    BlockData::Parquet {
                        batch,
                        text_bytes,
                        full: self.full,
                    },
                )))
            }
            Err(e) => {
                let kind = match &e {
                    ArrowError::SchemaError(_) | ArrowError::CastError(_) => "schema_mismatch",
                    ArrowError::IoError(..) => "io",
                    _ => "corrupt_parquet",
                };
                Some(Err(ReadError::new(
                    &self.path,
                    kind,
                    Some(self.location()),
                    e.to_string(),
                )))
            }
        }
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

fn text_bytes(batch: &RecordBatch, selector: &TextSelector) -> u64 {
    selector
        .fields
        .iter()
        .map(|f| resolve(batch, f).col.value_bytes(batch.num_rows()))
        .sum()
}

/// Renders a non-string id value into `buf`; `false` if the type has no plain rendering.
fn render_id(a: &dyn Array, row: usize, buf: &mut String) -> bool {
    buf.clear();
    macro_rules! prim {
        ($($t:ty),*) => {
            $(if let Some(p) = a.as_primitive_opt::<$t>() {
                let _ = write!(buf, "{}", p.value(row));
                return true;
            })*
        };
    }
    prim!(
        Int8Type,
        Int16Type,
        Int32Type,
        Int64Type,
        UInt8Type,
        UInt16Type,
        UInt32Type,
        UInt64Type,
        Float32Type,
        Float64Type
    );
    if let Some(b) = a.as_boolean_opt() {
        let _ = write!(buf, "{}", b.value(row));
        return true;
    }
    false
}

pub(crate) fn batch_samples<F: FnMut(Sample<'_>)>(
    batch: &RecordBatch,
    selector: &TextSelector,
    f: &mut F,
) {
    let cols: Vec<Resolved<'_>> = selector.fields.iter().map(|p| resolve(batch, p)).collect();
    let id_col = selector.id_field.as_ref().map(|p| resolve(batch, p));
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
        emit_record(row, &values, id, &selector.mode, &mut join_buf, f);
        values_buf = reuse_vec(values);
    }
}
