//! In-memory Arrow record batches as an input ([`Format::Arrow`]): a table handed in by a library
//! (pyarrow, polars, pandas, DuckDB, Hugging Face `datasets`) is read in place, twice (once per
//! stage), without copying its buffers.
//!
//! A table is registered ([`ArrowTable::register`]) and stands in the run's inputs as an
//! [`InputFile`] whose path names it (`<name #N>`); its readers find its batches by that path
//! while the registration lives, so every stage, chunk plan and address works on it as on a file.
//! Its records are its rows in order, and a sample's record number is its row number.
//!
//! A stream larger than memory is registered instead as a way to open it
//! ([`ArrowTable::register_stream`]): each pass (stage 1, then stage 2) opens it afresh and reads
//! it batch by batch, holding only the batches being worked on, so it must give the same rows in
//! the same order every time it is opened.
//!
//! A table's samples are read as a Parquet file's rows are: a null in a text column is a null
//! field (`SkipReason::NullField`), decided `error` and passed through, as the file runner
//! decides a JSON `null` or a Parquet null, so a table and the same rows in a file get the same
//! decisions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::block::{BlockData, DiskShare, ReadOptions};
use crate::error::{ReadError, ReadErrorKind};
use crate::format::{Compression, Format, InputFile};

/// One pass over a stream's batches, or why a batch could not be read.
pub type StreamBatches = Box<dyn Iterator<Item = Result<RecordBatch, String>> + Send>;

/// Opens a fresh pass over a stream (called once per stage), or says why it cannot.
pub type OpenStream = dyn Fn() -> Result<StreamBatches, String> + Send + Sync;

/// Rows per block at least and at most, whatever the texts' sizes: as for Parquet batches.
const MIN_BLOCK_ROWS: usize = 64;
const MAX_BLOCK_ROWS: usize = 65536;

/// What a registered table's readers read.
#[derive(Clone)]
enum Rows {
    /// Batches held in memory.
    Held(Arc<Vec<RecordBatch>>),
    /// A stream opened afresh for each pass.
    Stream {
        open: Arc<OpenStream>,
        schema: SchemaRef,
    },
}

type Registry = HashMap<PathBuf, Rows>;

/// The tables registered now, by the path that names them.
static TABLES: Mutex<Option<Registry>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Record batches registered as an input while this value lives (dropping it unregisters them).
#[derive(Debug)]
pub struct ArrowTable {
    input: InputFile,
    /// None for a stream: its rows are counted as it is read.
    rows: Option<u64>,
}

/// [`ArrowTable::register_as`] was given a name registered already.
#[derive(Debug, thiserror::Error)]
#[error("an in-memory table is registered as {} already", .0.display())]
pub struct NameTaken(pub PathBuf);

impl ArrowTable {
    /// Registers `batches` (all of one schema) as an input named `<name #N>` (`name` e.g.
    /// `"pyarrow.Table"`, `N` unique in the process). The batches are shared, not copied.
    pub fn register(name: &str, batches: Vec<RecordBatch>) -> ArrowTable {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Self::register_as(&format!("<{name} #{id}>"), batches).expect("generated names are unique")
    }

    /// Registers `batches` under a name of the caller's (`<...>` by convention): a staged run
    /// whose steps run in several processes registers each shard's table under the same name in
    /// each (the key table records its inputs by name).
    pub fn register_as(name: &str, batches: Vec<RecordBatch>) -> Result<ArrowTable, NameTaken> {
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let size = batches
            .iter()
            .map(|b| b.get_array_memory_size() as u64)
            .sum();
        Self::insert(name, Rows::Held(Arc::new(batches)), size, Some(rows))
    }

    /// Registers a stream too large to hold as an input named `<name #N>`: `open` is called
    /// once per pass over it and must give the same rows in the same order each time (what
    /// differs in a later pass is caught by its record counts, or decides other texts).
    /// `schema` is the stream's, for messages naming its columns.
    pub fn register_stream(name: &str, schema: SchemaRef, open: Arc<OpenStream>) -> ArrowTable {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Self::insert(
            &format!("<{name} #{id}>"),
            Rows::Stream { open, schema },
            0,
            None,
        )
        .expect("generated names are unique")
    }

    fn insert(
        name: &str,
        rows_of: Rows,
        size: u64,
        rows: Option<u64>,
    ) -> Result<ArrowTable, NameTaken> {
        let path = PathBuf::from(name);
        let mut registry = tables();
        let registry = registry.get_or_insert_with(HashMap::new);
        if registry.contains_key(&path) {
            return Err(NameTaken(path));
        }
        registry.insert(path.clone(), rows_of);
        let input = InputFile {
            relative: path.clone(),
            path,
            format: Format::Arrow,
            compression: Compression::None,
            size,
        };
        Ok(ArrowTable { input, rows })
    }

    /// The table as an input of a run.
    pub fn input(&self) -> &InputFile {
        &self.input
    }

    /// Its rows; None for a stream, whose rows are known once it has been read.
    pub fn rows(&self) -> Option<u64> {
        self.rows
    }
}

impl Drop for ArrowTable {
    fn drop(&mut self) {
        if let Some(t) = tables().as_mut() {
            t.remove(&self.input.path);
        }
    }
}

fn tables() -> std::sync::MutexGuard<'static, Option<Registry>> {
    TABLES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registered rows an input's path names.
fn lookup(path: &Path) -> Option<Rows> {
    tables().as_ref()?.get(path).cloned()
}

/// Where an [`ArrowSource`] takes its batches from.
enum Batches {
    /// Held batches, and the next one's index.
    Held(Arc<Vec<RecordBatch>>, usize),
    /// A pass over a stream.
    Stream(StreamBatches),
}

/// Streams a registered table's rows as blocks of about [`ReadOptions::block_bytes`] of text,
/// each a zero-copy slice of one batch.
pub(crate) struct ArrowSource {
    path: PathBuf,
    batches: Batches,
    selector: crate::select::TextSelector,
    block_bytes: usize,
    /// The batch being sliced, and the next row of it.
    batch: Option<RecordBatch>,
    row: usize,
    /// Rows delivered: the next block's first record.
    delivered: u64,
    /// The table's size ([`InputFile::size`]: its batches' memory) handed to its blocks, each
    /// batch's by rows.
    disk: DiskShare,
    /// The size of the batches before the one being sliced.
    size_before: u64,
}

impl ArrowSource {
    /// A table is always read whole (one chunk): its blocks cost no I/O, and the executor shares
    /// them between the threads. A stream is opened afresh here.
    pub(crate) fn open(file: &InputFile, opts: &ReadOptions) -> Result<ArrowSource, ReadError> {
        let rows = lookup(&file.path).ok_or_else(|| {
            ReadError::new(
                &file.path,
                ReadErrorKind::Io,
                None,
                "the in-memory table is no longer registered (it was released before the run ended)",
            )
        })?;
        let batches = match rows {
            Rows::Held(batches) => Batches::Held(batches, 0),
            Rows::Stream { open, .. } => Batches::Stream(open().map_err(|e| {
                ReadError::new(
                    &file.path,
                    ReadErrorKind::Io,
                    None,
                    format!("cannot open the stream: {e}"),
                )
            })?),
        };
        Ok(ArrowSource {
            path: file.path.clone(),
            batches,
            selector: opts.selector.clone(),
            block_bytes: opts.block_bytes.max(1),
            batch: None,
            row: 0,
            delivered: 0,
            disk: DiskShare::new(file.size),
            size_before: 0,
        })
    }

    /// The next batch to slice, None at the end.
    fn next_batch(&mut self) -> Option<Result<RecordBatch, ReadError>> {
        match &mut self.batches {
            Batches::Held(batches, next) => {
                let batch = batches.get(*next)?.clone();
                *next += 1;
                Some(Ok(batch))
            }
            Batches::Stream(stream) => Some(stream.next()?.map_err(|e| {
                ReadError::new(
                    &self.path,
                    ReadErrorKind::Io,
                    Some(format!("row {}", self.delivered)),
                    format!("cannot read the stream: {e}"),
                )
                .losing(self.delivered, None, None, None)
            })),
        }
    }

    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        loop {
            let left = self.batch.as_ref().map_or(0, |b| b.num_rows() - self.row);
            if left == 0 {
                if let Some(done) = &self.batch {
                    self.size_before += done.get_array_memory_size() as u64;
                }
                match self.next_batch()? {
                    Ok(b) => self.batch = Some(b),
                    Err(e) => return Some(Err(e)),
                }
                self.row = 0;
                continue;
            }
            let batch = self.batch.as_ref().expect("a batch with rows left");
            // Rows per block from the batch's average text size, so blocks hold about
            // `block_bytes` of text whether rows are tweets or books.
            let text = crate::parquet_read::text_bytes(batch, &self.selector).max(1);
            let per_row = (text / batch.num_rows() as u64).max(1);
            let rows = ((self.block_bytes as u64 / per_row) as usize)
                .clamp(MIN_BLOCK_ROWS, MAX_BLOCK_ROWS)
                .min(left);
            let slice = batch.slice(self.row, rows);
            self.row += rows;
            let first = self.delivered;
            self.delivered += rows as u64;
            let text_bytes = crate::parquet_read::text_bytes(&slice, &self.selector);
            let upto = self.size_before
                + batch.get_array_memory_size() as u64 * self.row as u64 / batch.num_rows() as u64;
            // A stream's size is unknown (0): its blocks give no bytes, last or not.
            let last = match &self.batches {
                Batches::Held(batches, next) => batches[*next..].iter().all(|b| b.num_rows() == 0),
                Batches::Stream(_) => false,
            } && self.row == batch.num_rows();
            let disk_bytes = self.disk.next(upto, last);
            return Some(Ok((
                first,
                BlockData::Arrow {
                    batch: slice,
                    text_bytes,
                },
                disk_bytes,
            )));
        }
    }
}

/// The column names of a registered table (top level, and one level into structs), for a
/// message about a field no row has.
pub(crate) fn field_names(file: &InputFile) -> Vec<String> {
    let schema = match lookup(&file.path) {
        Some(Rows::Held(batches)) => match batches.first() {
            Some(first) => first.schema(),
            None => return Vec::new(),
        },
        Some(Rows::Stream { schema, .. }) => schema,
        None => return Vec::new(),
    };
    let mut names = Vec::new();
    for field in schema.fields() {
        names.push(field.name().clone());
        if let arrow_schema::DataType::Struct(children) = field.data_type() {
            for c in children {
                names.push(format!("{}.{}", field.name(), c.name()));
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, RecordBatch, StringArray, StringViewArray};

    use super::*;
    use crate::block::{Projection, SampleText};
    use crate::chunk::{Chunk, ChunkRange, plan_chunks};
    use crate::read::read_chunk;
    use crate::select::{FieldPath, TextSelector};

    fn batch(texts: Vec<Option<&str>>) -> RecordBatch {
        let col: ArrayRef = Arc::new(StringArray::from(texts));
        RecordBatch::try_from_iter([("text", col)]).unwrap()
    }

    /// Every sample of a registered table, as (record, text), read in blocks of `block_bytes`;
    /// a sample without a text as the kind of its reason in angle brackets.
    fn samples(table: &ArrowTable, block_bytes: usize) -> Vec<(u64, String)> {
        let mut opts = ReadOptions::new(
            TextSelector::single(FieldPath::top("text")),
            Projection::TextOnly,
        );
        opts.block_bytes = block_bytes;
        let chunks = plan_chunks(std::slice::from_ref(table.input()), 1);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].range, ChunkRange::Whole);
        let mut out = Vec::new();
        for block in read_chunk(table.input(), &chunks[0], &opts) {
            let block = block.unwrap();
            block.for_each_sample(&opts.selector, |s| {
                let text = match s.text {
                    SampleText::Text(t) => t.into_owned(),
                    SampleText::Skipped(reason) => format!("<{}>", reason.kind()),
                };
                out.push((block.first_record + s.record as u64, text));
            });
        }
        out
    }

    #[test]
    fn rows_are_records_in_order_across_batches_and_blocks_and_nulls_are_null_fields() {
        let texts: Vec<String> = (0..300).map(|i| format!("text number {i}")).collect();
        let first: Vec<Option<&str>> = texts[..250].iter().map(|t| Some(t.as_str())).collect();
        let mut second: Vec<Option<&str>> = texts[250..].iter().map(|t| Some(t.as_str())).collect();
        second[3] = None;
        let table = ArrowTable::register("test", vec![batch(first), batch(second)]);
        assert_eq!(table.rows(), Some(300));
        assert_eq!(table.input().format, Format::Arrow);
        let mut want: Vec<(u64, String)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64, t.clone()))
            .collect();
        want[253].1 = "<null_field>".to_string();
        // One block per batch, and blocks of 64 rows (the least a block holds).
        assert_eq!(samples(&table, 1 << 20), want);
        assert_eq!(samples(&table, 1), want);
    }

    #[test]
    fn a_stream_is_opened_for_each_read_and_read_batch_by_batch() {
        let texts: Vec<String> = (0..500).map(|i| format!("streamed text {i}")).collect();
        let batches: Vec<RecordBatch> = texts
            .chunks(120)
            .map(|c| batch(c.iter().map(|t| Some(t.as_str())).collect()))
            .collect();
        let schema = batches[0].schema();
        let opened = Arc::new(AtomicU64::new(0));
        let (given, count) = (batches.clone(), opened.clone());
        let table = ArrowTable::register_stream(
            "test stream",
            schema,
            Arc::new(move || {
                count.fetch_add(1, Ordering::Relaxed);
                let batches = given.clone();
                Ok(Box::new(batches.into_iter().map(Ok)) as StreamBatches)
            }),
        );
        assert_eq!(table.rows(), None);
        assert_eq!(field_names(table.input()), vec!["text".to_string()]);
        let want: Vec<(u64, String)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64, t.clone()))
            .collect();
        assert_eq!(samples(&table, 1 << 20), want);
        assert_eq!(samples(&table, 1), want);
        assert_eq!(opened.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_stream_that_fails_says_where_and_why() {
        let first = batch(vec![Some("one"), Some("two")]);
        let schema = first.schema();
        let table = ArrowTable::register_stream(
            "failing",
            schema,
            Arc::new(move || {
                let items = vec![Ok(first.clone()), Err("the disk went away".to_string())];
                Ok(Box::new(items.into_iter()) as StreamBatches)
            }),
        );
        let chunks = plan_chunks(std::slice::from_ref(table.input()), 1);
        let opts = ReadOptions::new(
            TextSelector::single(FieldPath::top("text")),
            Projection::TextOnly,
        );
        let read: Vec<_> = read_chunk(table.input(), &chunks[0], &opts).collect();
        assert!(read[0].is_ok());
        let err = read[1].as_ref().unwrap_err().to_string();
        assert!(
            err.contains("the disk went away") && err.contains("row 2"),
            "{err}"
        );
        let cannot = ArrowTable::register_stream(
            "unopenable",
            batch(vec![]).schema(),
            Arc::new(|| Err("no such query".to_string())),
        );
        let err = read_chunk(cannot.input(), &chunks[0], &opts)
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot open the stream: no such query"),
            "{err}"
        );
    }

    #[test]
    fn string_views_are_read_as_strings() {
        let col: ArrayRef = Arc::new(StringViewArray::from(vec![
            "a short one",
            "a string longer than twelve bytes",
        ]));
        let b = RecordBatch::try_from_iter([("text", col)]).unwrap();
        let table = ArrowTable::register("views", vec![b]);
        assert_eq!(
            samples(&table, 1 << 20),
            vec![
                (0, "a short one".to_string()),
                (1, "a string longer than twelve bytes".to_string())
            ]
        );
    }

    #[test]
    fn a_released_table_cannot_be_read_and_names_are_unique() {
        let table = ArrowTable::register_as("<shard 0>", vec![batch(vec![Some("x")])]).unwrap();
        assert!(ArrowTable::register_as("<shard 0>", Vec::new()).is_err());
        let input = table.input().clone();
        drop(table);
        let chunk = Chunk {
            file: 0,
            seq: 0,
            range: ChunkRange::Whole,
        };
        let opts = ReadOptions::new(
            TextSelector::single(FieldPath::top("text")),
            Projection::TextOnly,
        );
        let err = read_chunk(&input, &chunk, &opts)
            .next()
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("no longer registered"), "{err}");
        // The name is free again.
        ArrowTable::register_as("<shard 0>", Vec::new()).unwrap();
    }
}
