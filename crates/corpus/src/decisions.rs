//! The per-sample decisions file (JSONL or Parquet), written atomically (alone or as one output
//! of a [`crate::Publication`]) and read back.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{ReadError, ReadErrorKind, WriteError};
use crate::publish::AtomicFile;
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Rows buffered before a Parquet decisions batch is encoded.
const BATCH_ROWS: usize = 65536;

/// Why a sample was kept or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// No near duplicate seen before it: kept.
    Unique,
    /// Near duplicate of an earlier sample.
    Near,
    /// Exact duplicate of an earlier sample.
    Exact,
    /// Empty or missing text (kept or dropped per `--empty`).
    Empty,
    /// The record could not be read (malformed JSON, invalid UTF-8, ...).
    Error,
}

impl Reason {
    /// Every reason, in the order of their one-byte codes ([`Reason::code`]).
    const BY_CODE: [Reason; 5] = [
        Reason::Unique,
        Reason::Near,
        Reason::Exact,
        Reason::Empty,
        Reason::Error,
    ];

    /// The reason as one byte, for formats that store it so (saved indexes' online decisions,
    /// the Redis store's); [`Reason::from_code`] reads it back.
    pub fn code(self) -> u8 {
        match self {
            Reason::Unique => 0,
            Reason::Near => 1,
            Reason::Exact => 2,
            Reason::Empty => 3,
            Reason::Error => 4,
        }
    }

    /// The reason of a [`Reason::code`], if it is one.
    pub fn from_code(code: u8) -> Option<Reason> {
        Reason::BY_CODE.get(usize::from(code)).copied()
    }

    /// The lowercase name used in decision files.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unique => "unique",
            Reason::Near => "near",
            Reason::Exact => "exact",
            Reason::Empty => "empty",
            Reason::Error => "error",
        }
    }

    fn parse(s: &str) -> Option<Reason> {
        Some(match s {
            "unique" => Reason::Unique,
            "near" => Reason::Near,
            "exact" => Reason::Exact,
            "empty" => Reason::Empty,
            "error" => Reason::Error,
            _ => return None,
        })
    }
}

/// One decision: the sample's address, whether it is kept, why, and what it duplicates.
/// Serialises (JSONL) with exactly these keys in this order, `null` when absent.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DecisionRow<'a> {
    /// The input file (as the caller names it, usually its path or relative path).
    pub file: &'a str,
    /// File-level record index.
    pub record: u64,
    /// Field index (0 in Join mode).
    pub field: u32,
    /// The record's id, if an id field is configured and present.
    pub id: Option<&'a str>,
    /// Whether the sample's record is written to the output.
    pub keep: bool,
    /// Why.
    pub reason: Reason,
    /// File of the sample this one duplicates.
    pub dup_of_file: Option<&'a str>,
    /// Record of the sample this one duplicates.
    pub dup_of_record: Option<u64>,
    /// Id of the sample this one duplicates.
    pub dup_of_id: Option<&'a str>,
    /// Estimated or exact Jaccard similarity to the duplicated sample.
    pub similarity: Option<f64>,
    /// File of the kept sample this sample's duplicate set resolves to, whatever chain of
    /// `dup_of` led there: the sample's own file when it is kept.
    pub cluster_file: &'a str,
    /// Record of that kept sample.
    pub cluster_record: u64,
}

/// An owned [`DecisionRow`], as read back by [`read_decisions`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OwnedDecisionRow {
    /// See [`DecisionRow::file`].
    pub file: String,
    /// See [`DecisionRow::record`].
    pub record: u64,
    /// See [`DecisionRow::field`].
    pub field: u32,
    /// See [`DecisionRow::id`].
    pub id: Option<String>,
    /// See [`DecisionRow::keep`].
    pub keep: bool,
    /// See [`DecisionRow::reason`].
    pub reason: Reason,
    /// See [`DecisionRow::dup_of_file`].
    pub dup_of_file: Option<String>,
    /// See [`DecisionRow::dup_of_record`].
    pub dup_of_record: Option<u64>,
    /// See [`DecisionRow::dup_of_id`].
    pub dup_of_id: Option<String>,
    /// See [`DecisionRow::similarity`].
    pub similarity: Option<f64>,
    /// See [`DecisionRow::cluster_file`]; `None` in decisions written before clusters were
    /// recorded (neardup 0.x before format 4 of the steps).
    #[serde(default)]
    pub cluster_file: Option<String>,
    /// See [`DecisionRow::cluster_record`]; `None` as `cluster_file`.
    #[serde(default)]
    pub cluster_record: Option<u64>,
}

impl OwnedDecisionRow {
    /// Borrowed view, e.g. to write it again. A row read from decisions without clusters gets
    /// the cluster of its own address when kept and of its `dup_of` when dropped, which is exact
    /// only where `dup_of` was kept.
    pub fn as_row(&self) -> DecisionRow<'_> {
        let (cluster_file, cluster_record) = match (&self.cluster_file, self.cluster_record) {
            (Some(f), Some(r)) => (f.as_str(), r),
            _ => match (&self.dup_of_file, self.dup_of_record) {
                (Some(f), Some(r)) if !self.keep => (f.as_str(), r),
                _ => (self.file.as_str(), self.record),
            },
        };
        DecisionRow {
            file: &self.file,
            record: self.record,
            field: self.field,
            id: self.id.as_deref(),
            keep: self.keep,
            reason: self.reason,
            dup_of_file: self.dup_of_file.as_deref(),
            dup_of_record: self.dup_of_record,
            dup_of_id: self.dup_of_id.as_deref(),
            similarity: self.similarity,
            cluster_file,
            cluster_record,
        }
    }
}

/// The Arrow schema of Parquet decision files.
fn decision_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, false),
        Field::new("record", DataType::UInt64, false),
        Field::new("field", DataType::UInt32, false),
        Field::new("id", DataType::Utf8, true),
        Field::new("keep", DataType::Boolean, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("dup_of_file", DataType::Utf8, true),
        Field::new("dup_of_record", DataType::UInt64, true),
        Field::new("dup_of_id", DataType::Utf8, true),
        Field::new("similarity", DataType::Float64, true),
        Field::new("cluster_file", DataType::Utf8, false),
        Field::new("cluster_record", DataType::UInt64, false),
    ]))
}

#[derive(Default)]
struct Builders {
    file: StringBuilder,
    record: UInt64Builder,
    field: UInt32Builder,
    id: StringBuilder,
    keep: BooleanBuilder,
    reason: StringBuilder,
    dup_of_file: StringBuilder,
    dup_of_record: UInt64Builder,
    dup_of_id: StringBuilder,
    similarity: Float64Builder,
    cluster_file: StringBuilder,
    cluster_record: UInt64Builder,
    len: usize,
}

impl Builders {
    fn push(&mut self, r: &DecisionRow<'_>) {
        self.file.append_value(r.file);
        self.record.append_value(r.record);
        self.field.append_value(r.field);
        self.id.append_option(r.id);
        self.keep.append_value(r.keep);
        self.reason.append_value(r.reason.as_str());
        self.dup_of_file.append_option(r.dup_of_file);
        self.dup_of_record.append_option(r.dup_of_record);
        self.dup_of_id.append_option(r.dup_of_id);
        self.similarity.append_option(r.similarity);
        self.cluster_file.append_value(r.cluster_file);
        self.cluster_record.append_value(r.cluster_record);
        self.len += 1;
    }

    fn batch(&mut self, schema: &SchemaRef) -> RecordBatch {
        self.len = 0;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.file.finish()),
            Arc::new(self.record.finish()),
            Arc::new(self.field.finish()),
            Arc::new(self.id.finish()),
            Arc::new(self.keep.finish()),
            Arc::new(self.reason.finish()),
            Arc::new(self.dup_of_file.finish()),
            Arc::new(self.dup_of_record.finish()),
            Arc::new(self.dup_of_id.finish()),
            Arc::new(self.similarity.finish()),
            Arc::new(self.cluster_file.finish()),
            Arc::new(self.cluster_record.finish()),
        ];
        RecordBatch::try_new(schema.clone(), cols).expect("builders match the decision schema")
    }
}

enum Sink {
    Jsonl(AtomicFile, Box<JsonlRows>),
    Parquet {
        writer: Box<ArrowWriter<AtomicFile>>,
        builders: Box<Builders>,
        schema: SchemaRef,
    },
}

/// Encodes decision rows as JSONL lines, byte for byte what `serde_json` writes for a
/// [`DecisionRow`] and a newline. The deciding thread writes one row per sample, and most of
/// serde's time went into escaping the same few file names again on every row (three per row):
/// here the last escaped form of each is kept.
#[derive(Default)]
struct JsonlRows {
    line: Vec<u8>,
    file: EscapedName,
    dup_of_file: EscapedName,
    cluster_file: EscapedName,
}

/// A string and its JSON form (quoted and escaped).
#[derive(Default)]
struct EscapedName {
    name: String,
    json: Vec<u8>,
}

impl EscapedName {
    fn of(&mut self, name: &str) -> &[u8] {
        if self.json.is_empty() || self.name != name {
            self.name.clear();
            self.name.push_str(name);
            self.json.clear();
            json_string(&mut self.json, name);
        }
        &self.json
    }
}

/// Appends `value` as `write` writes it, or `null` when there is none.
fn or_null<T>(line: &mut Vec<u8>, value: Option<T>, write: impl FnOnce(&mut Vec<u8>, T)) {
    match value {
        Some(value) => write(line, value),
        None => line.extend_from_slice(b"null"),
    }
}

/// Appends `s` as a JSON string, as `serde_json` writes it.
fn json_string(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing to a Vec cannot fail");
}

impl JsonlRows {
    /// The line of `row`, with its newline.
    fn encode(&mut self, row: &DecisionRow<'_>) -> &[u8] {
        let mut numbers = itoa::Buffer::new();
        let line = &mut self.line;
        line.clear();
        line.extend_from_slice(b"{\"file\":");
        line.extend_from_slice(self.file.of(row.file));
        line.extend_from_slice(b",\"record\":");
        line.extend_from_slice(numbers.format(row.record).as_bytes());
        line.extend_from_slice(b",\"field\":");
        line.extend_from_slice(numbers.format(row.field).as_bytes());
        line.extend_from_slice(b",\"id\":");
        or_null(line, row.id, json_string);
        line.extend_from_slice(if row.keep {
            b",\"keep\":true,\"reason\":\""
        } else {
            b",\"keep\":false,\"reason\":\""
        });
        line.extend_from_slice(row.reason.as_str().as_bytes());
        line.extend_from_slice(b"\",\"dup_of_file\":");
        or_null(line, row.dup_of_file, |line, file| {
            line.extend_from_slice(self.dup_of_file.of(file))
        });
        line.extend_from_slice(b",\"dup_of_record\":");
        or_null(line, row.dup_of_record, |line, record| {
            line.extend_from_slice(numbers.format(record).as_bytes())
        });
        line.extend_from_slice(b",\"dup_of_id\":");
        or_null(line, row.dup_of_id, json_string);
        line.extend_from_slice(b",\"similarity\":");
        // serde_json's own float formatting (and its `null` for NaN and infinities).
        or_null(line, row.similarity, |line, similarity| {
            serde_json::to_writer(line, &similarity).expect("writing to a Vec cannot fail")
        });
        line.extend_from_slice(b",\"cluster_file\":");
        line.extend_from_slice(self.cluster_file.of(row.cluster_file));
        line.extend_from_slice(b",\"cluster_record\":");
        line.extend_from_slice(numbers.format(row.cluster_record).as_bytes());
        line.extend_from_slice(b"}\n");
        line
    }
}

/// JSONL or Parquet chosen by the path's extension (`.parquet` -> Parquet, anything else ->
/// JSONL), written through an [`AtomicFile`]: nothing appears under the final name before
/// [`DecisionWriter::finish`] (or, for a publication's file, before the publication's commit).
/// JSONL lines have exactly the keys file, record,
/// field, id, keep, reason, dup_of_file, dup_of_record, dup_of_id, similarity (null when absent),
/// cluster_file, cluster_record, in that order.
pub struct DecisionWriter {
    path: PathBuf,
    sink: Sink,
    rows: u64,
}

fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

impl std::fmt::Debug for DecisionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionWriter")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl DecisionWriter {
    /// Starts writing `path` on its own: [`DecisionWriter::finish`] publishes it.
    pub fn create(path: &Path) -> Result<DecisionWriter, WriteError> {
        DecisionWriter::to_file(AtomicFile::create(path).map_err(|e| WriteError::io(path, e))?)
    }

    /// Starts writing into `file` (e.g. [`crate::Publication::file`]); the format follows its
    /// path.
    pub fn to_file(file: AtomicFile) -> Result<DecisionWriter, WriteError> {
        let path = file.path().to_path_buf();
        let sink = if is_parquet(&path) {
            let schema = decision_schema();
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .build();
            let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
                .map_err(|e| WriteError::new(&path, "parquet", e.to_string()))?;
            Sink::Parquet {
                writer: Box::new(writer),
                builders: Box::default(),
                schema,
            }
        } else {
            Sink::Jsonl(file, Box::default())
        };
        Ok(DecisionWriter {
            path,
            sink,
            rows: 0,
        })
    }

    /// Appends one row.
    pub fn write(&mut self, row: &DecisionRow<'_>) -> Result<(), WriteError> {
        match &mut self.sink {
            Sink::Jsonl(f, rows) => {
                f.write_all(rows.encode(row))
                    .map_err(|e| WriteError::io(&self.path, e))?;
            }
            Sink::Parquet {
                writer,
                builders,
                schema,
            } => {
                builders.push(row);
                if builders.len >= BATCH_ROWS {
                    writer
                        .write(&builders.batch(schema))
                        .map_err(|e| WriteError::new(&self.path, "parquet", e.to_string()))?;
                }
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// Flushes and fsyncs, and publishes the file (or marks it ready, for a publication's file);
    /// returns the number of rows written.
    pub fn finish(self) -> Result<u64, WriteError> {
        let path = &self.path;
        match self.sink {
            Sink::Jsonl(f, _) => f.commit().map_err(|e| WriteError::io(path, e))?,
            Sink::Parquet {
                mut writer,
                mut builders,
                schema,
            } => {
                let perr = |e: parquet::errors::ParquetError| {
                    WriteError::new(path, "parquet", e.to_string())
                };
                if builders.len > 0 {
                    writer.write(&builders.batch(&schema)).map_err(perr)?;
                }
                let f = writer.into_inner().map_err(perr)?;
                f.commit().map_err(|e| WriteError::io(path, e))?;
            }
        }
        Ok(self.rows)
    }
}

/// Bytes of a JSONL file's start read to tell whether it is a decisions file: its first row, which
/// is short (an address, a reason, what it duplicates), whatever the file's size.
const RECOGNISED_PREFIX: u64 = 1 << 16;

/// Whether the local file at `path` is a decisions file neardup wrote (of any version), told by
/// a bounded read of it: JSONL whose first row is a decision ([`OwnedDecisionRow`], so decisions
/// written before clusters were recorded too), or Parquet (told by its first bytes, whatever its
/// name) whose footer has the decision columns. An empty file counts: it holds nothing to lose.
/// Used to refuse replacing any other file with decisions.
pub fn is_decisions_file(path: &Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek};
    let mut file = std::fs::File::open(path)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic)?;
    if n == 0 {
        return Ok(true);
    }
    if n == magic.len() && &magic == b"PAR1" {
        // The footer alone is read (its length is in the file's last bytes).
        let Ok(builder) = ParquetRecordBatchReaderBuilder::try_new(file) else {
            return Ok(false);
        };
        let schema = builder.schema();
        return Ok(["file", "record", "field", "keep", "reason"]
            .iter()
            .all(|c| schema.column_with_name(c).is_some()));
    }
    file.rewind()?;
    let mut head = BufReader::new(file.take(RECOGNISED_PREFIX));
    let mut line = String::new();
    loop {
        line.clear();
        if head.read_line(&mut line).is_err() {
            // Not UTF-8: not JSONL neardup wrote.
            return Ok(false);
        }
        if line.is_empty() {
            // Blank lines only.
            return Ok(false);
        }
        if !line.trim().is_empty() {
            // A line the prefix cuts short is longer than any row.
            return Ok(
                line.ends_with('\n') && serde_json::from_str::<OwnedDecisionRow>(&line).is_ok()
            );
        }
    }
}

/// Reads a decisions file back (both formats, by extension) — used by `neardup eval` and tests.
pub fn read_decisions(path: &Path) -> Result<Vec<OwnedDecisionRow>, ReadError> {
    if is_parquet(path) {
        read_parquet(path)
    } else {
        read_jsonl(path)
    }
}

fn read_jsonl(path: &Path) -> Result<Vec<OwnedDecisionRow>, ReadError> {
    let f = neardup_storage::file::open(path).map_err(|e| ReadError::from_io(path, None, e))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line =
            line.map_err(|e| ReadError::from_io(path, Some(format!("line {}", i + 1)), e))?;
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(&line).map_err(|e| {
            ReadError::new(
                path,
                ReadErrorKind::MalformedDecision,
                Some(format!("line {}", i + 1)),
                e.to_string(),
            )
        })?;
        out.push(row);
    }
    Ok(out)
}

fn read_parquet(path: &Path) -> Result<Vec<OwnedDecisionRow>, ReadError> {
    match neardup_storage::ObjectUrl::from_path(path) {
        Some(url) => {
            let size = neardup_storage::head(&url)
                .and_then(|size| {
                    size.ok_or_else(|| {
                        neardup_storage::StorageError::not_found(&url, "no such object")
                    })
                })
                .map_err(|e| ReadError::from_io(path, None, e.into_unnamed_io()))?;
            let object = neardup_storage::ObjectRanges::open(&url, size)
                .map_err(|e| ReadError::from_io(path, None, e.into_unnamed_io()))?;
            parquet_rows(path, object)
        }
        None => {
            let f = std::fs::File::open(path).map_err(|e| ReadError::from_io(path, None, e))?;
            parquet_rows(path, f)
        }
    }
}

fn parquet_rows<T: parquet::file::reader::ChunkReader + 'static>(
    path: &Path,
    input: T,
) -> Result<Vec<OwnedDecisionRow>, ReadError> {
    let corrupt = |e: &dyn std::fmt::Display| {
        ReadError::new(path, ReadErrorKind::CorruptParquet, None, e.to_string())
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(input)
        .map_err(|e| corrupt(&e))?
        .build()
        .map_err(|e| corrupt(&e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&e))?;
        let col = |name: &str| -> Result<&ArrayRef, ReadError> {
            batch.column_by_name(name).ok_or_else(|| {
                ReadError::new(
                    path,
                    ReadErrorKind::SchemaMismatch,
                    None,
                    format!("no column {name:?}"),
                )
            })
        };
        let mismatch = |name: &str| {
            ReadError::new(
                path,
                ReadErrorKind::SchemaMismatch,
                None,
                format!("column {name:?} has an unexpected type"),
            )
        };
        let s = |name: &'static str| -> Result<&arrow_array::StringArray, ReadError> {
            col(name)?
                .as_string_opt::<i32>()
                .ok_or_else(|| mismatch(name))
        };
        let file = s("file")?;
        let id = s("id")?;
        let reason = s("reason")?;
        let dup_file = s("dup_of_file")?;
        let dup_id = s("dup_of_id")?;
        let record = col("record")?
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| mismatch("record"))?;
        let field = col("field")?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| mismatch("field"))?;
        let dup_record = col("dup_of_record")?
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| mismatch("dup_of_record"))?;
        let sim = col("similarity")?
            .as_primitive_opt::<Float64Type>()
            .ok_or_else(|| mismatch("similarity"))?;
        // Decisions written before clusters were recorded have neither column.
        let cluster_file = match batch.column_by_name("cluster_file") {
            Some(_) => Some(s("cluster_file")?),
            None => None,
        };
        let cluster_record = match batch.column_by_name("cluster_record") {
            Some(c) => Some(
                c.as_primitive_opt::<UInt64Type>()
                    .ok_or_else(|| mismatch("cluster_record"))?,
            ),
            None => None,
        };
        let keep = col("keep")?
            .as_boolean_opt()
            .ok_or_else(|| mismatch("keep"))?;
        let opt_s =
            |a: &arrow_array::StringArray, i: usize| a.is_valid(i).then(|| a.value(i).to_owned());
        for i in 0..batch.num_rows() {
            let r = Reason::parse(reason.value(i)).ok_or_else(|| {
                ReadError::new(
                    path,
                    ReadErrorKind::MalformedDecision,
                    Some(format!("row {}", out.len())),
                    format!("unknown reason {:?}", reason.value(i)),
                )
            })?;
            out.push(OwnedDecisionRow {
                file: file.value(i).to_owned(),
                record: record.value(i),
                field: field.value(i),
                id: opt_s(id, i),
                keep: keep.value(i),
                reason: r,
                dup_of_file: opt_s(dup_file, i),
                dup_of_record: dup_record.is_valid(i).then(|| dup_record.value(i)),
                dup_of_id: opt_s(dup_id, i),
                similarity: sim.is_valid(i).then(|| sim.value(i)),
                cluster_file: cluster_file.and_then(|a| opt_s(a, i)),
                cluster_record: cluster_record.and_then(|a| a.is_valid(i).then(|| a.value(i))),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_reasons_code_reads_back_as_it() {
        for r in Reason::BY_CODE {
            assert_eq!(Reason::from_code(r.code()), Some(r));
        }
        assert_eq!(Reason::from_code(5), None);
    }

    fn reason() -> impl Strategy<Value = Reason> {
        prop_oneof![
            Just(Reason::Unique),
            Just(Reason::Near),
            Just(Reason::Exact),
            Just(Reason::Empty),
            Just(Reason::Error),
        ]
    }

    /// Names that need escaping (quotes, backslashes, control characters, non-ASCII) and
    /// names that repeat, so that the kept escaped forms are both reused and replaced.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a.jsonl".to_string()),
            Just("dir/b \"q\".jsonl".to_string()),
            "\\PC{0,12}",
            ".{0,12}",
        ]
    }

    fn similarity() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            Just(Some(1.0)),
            Just(Some(f64::NAN)),
            (0.0f64..=1.0).prop_map(Some),
        ]
    }

    proptest! {
        #[test]
        fn jsonl_rows_are_what_serde_json_writes(
            rows in proptest::collection::vec(
                (
                    (name(), any::<u64>(), any::<u32>(), proptest::option::of(name()), any::<bool>()),
                    (reason(), proptest::option::of(name()), proptest::option::of(any::<u64>())),
                    (proptest::option::of(name()), similarity(), name(), any::<u64>()),
                ),
                1..20,
            )
        ) {
            let mut encoder = JsonlRows::default();
            for ((file, record, field, id, keep), (reason, dup_of_file, dup_of_record), (dup_of_id, similarity, cluster_file, cluster_record)) in &rows {
                let row = DecisionRow {
                    file,
                    record: *record,
                    field: *field,
                    id: id.as_deref(),
                    keep: *keep,
                    reason: *reason,
                    dup_of_file: dup_of_file.as_deref(),
                    dup_of_record: *dup_of_record,
                    dup_of_id: dup_of_id.as_deref(),
                    similarity: *similarity,
                    cluster_file,
                    cluster_record: *cluster_record,
                };
                let mut expected = serde_json::to_vec(&row).unwrap();
                expected.push(b'\n');
                prop_assert_eq!(
                    String::from_utf8_lossy(encoder.encode(&row)),
                    String::from_utf8_lossy(&expected)
                );
            }
        }
    }
}
