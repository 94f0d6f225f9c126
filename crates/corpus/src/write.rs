//! Writing filtered copies of input files into a run's staging directory, optionally split into
//! size-bounded parts; [`crate::Publication`] publishes them.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use bytes::{Buf, Bytes};
use parquet::arrow::arrow_writer::{ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::bloom_filter::Sbbf;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{KeyValue, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;

use neardup_storage::{ObjectUrl, ObjectWriter, UploadSet};

use crate::block::{Block, BlockData};
use crate::error::WriteError;
use crate::format::{Compression, Format, InputFile, format_suffix_len};
use crate::parquet_read::ParquetBytes;

/// Buffer between encoders and the temp file; large writes keep syscalls rare.
const WRITE_BUF: usize = 1 << 20;
/// Rows per write to a Parquet encoder. The encoder cuts a column's pages (and checks their size)
/// within each write on its own, so writes of whatever rows the blocks happened to hold would cut
/// pages where the blocks ended, and blocks end in other places when the same file is read in
/// other chunks (a shard of a distributed run, another `chunk_bytes`). Kept rows are regrouped
/// into writes of exactly this many rows counted from their input row group's start, so the
/// bytes depend on the kept rows alone. Few rows a write keep what writing holds small (the rows gathered for a
/// write, the page being encoded: a page ends at the first write past the page size, so with
/// many rows a write a page of long texts grows far past it: docs/benchmarks.md), and let
/// a part split by size (`max_output_bytes`, checked before each write) end close below it.
const PARQUET_WRITE_ROWS: usize = 64;

/// Where and how outputs are written.
#[derive(Clone, Debug)]
pub struct OutputOptions {
    /// Output directory; outputs go to `<dir>/<input.relative>`.
    pub dir: PathBuf,
    /// Allow an existing non-empty directory, replacing the files an earlier run's manifest lists
    /// (see [`crate::Publication::begin`]).
    pub overwrite: bool,
    /// Split each output into parts of at most this many bytes (see [`FileWriter`]).
    pub max_output_bytes: Option<u64>,
}

/// One finished output file in the staging directory.
#[derive(Clone, Debug)]
pub(crate) struct FinishedPart {
    /// Which claimed output it belongs to.
    pub file: usize,
    /// Path relative to the output directory.
    pub rel: PathBuf,
    pub bytes: u64,
    pub records: u64,
}

/// A run's dataset directory: hands out one [`FileWriter`] per input file, writing under the
/// run's staging directory; [`crate::Publication::commit`] moves the finished files into place.
/// Get it from [`crate::Publication::dataset`]. Sync: share it between threads by reference.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    staging: PathBuf,
    /// Set when the directory is an object storage prefix: outputs are uploads of the run, to
    /// be completed when it publishes (`staging` is then the prefix itself).
    uploads: Option<Arc<UploadSet>>,
    max_output_bytes: Option<u64>,
    claimed: Mutex<HashSet<PathBuf>>,
    finished: Arc<Mutex<Vec<FinishedPart>>>,
}

impl OutputDir {
    /// The directory `dir` (as the caller named it), written through `staging`.
    pub(crate) fn staged(dir: PathBuf, staging: PathBuf, max_output_bytes: Option<u64>) -> Self {
        OutputDir {
            dir,
            staging,
            uploads: None,
            max_output_bytes,
            claimed: Mutex::new(HashSet::new()),
            finished: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The object storage prefix `dir`, written as uploads of `uploads` under their final names
    /// (invisible until the publication completes them).
    pub(crate) fn uploaded(
        dir: PathBuf,
        uploads: Arc<UploadSet>,
        max_output_bytes: Option<u64>,
    ) -> Self {
        OutputDir {
            staging: dir.clone(),
            dir,
            uploads: Some(uploads),
            max_output_bytes,
            claimed: Mutex::new(HashSet::new()),
            finished: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The output directory (where the files will be published).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The number of outputs claimed, and the finished files, in the order they finished.
    pub(crate) fn finished(&self) -> (usize, Vec<FinishedPart>) {
        let claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner()).len();
        let parts = self
            .finished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (claimed, parts)
    }

    /// Writer for the output of one input file: `<dir>/<input.relative>`, same format and
    /// compression (Parquet: same schema, key-value metadata, per-column codec, writer version
    /// and row-group row count as the input). Each relative path can be claimed once
    /// (`"duplicate_output"`), and must stay inside the directory.
    pub fn file_writer(&self, input: &InputFile) -> Result<FileWriter, WriteError> {
        let rel = &input.relative;
        if rel.as_os_str().is_empty()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(WriteError::new(
                rel,
                "invalid_output",
                "relative output path must be a plain relative path",
            ));
        }
        let rel: PathBuf = rel.components().collect();
        let claim = {
            let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
            if !claimed.insert(rel.clone()) {
                return Err(WriteError::new(
                    &self.dir.join(&rel),
                    "duplicate_output",
                    "two inputs map to the same output path",
                ));
            }
            claimed.len() - 1
        };
        let base = self.dir.join(&rel);
        let sink = match input.format {
            Format::Jsonl => Sink::Jsonl(Box::new(JsonlSink {
                compression: input.compression,
                enc: None,
                since_flush: 0,
            })),
            Format::Parquet => Sink::Parquet(Box::new(ParquetSink::for_input(input, &base)?)),
            Format::Arrow => {
                return Err(WriteError::new(
                    &base,
                    "invalid_output",
                    "an in-memory Arrow table has no output file: filter it with its decisions",
                ));
            }
        };
        Ok(FileWriter {
            rel,
            dir: self.dir.clone(),
            staging: self.staging.clone(),
            uploads: self.uploads.clone(),
            max: self.max_output_bytes,
            claim,
            finished: self.finished.clone(),
            parts: Vec::new(),
            sink,
            records: 0,
            part_records: 0,
        })
    }
}

/// Name of part `k` of the output with relative path `rel`. Unsplit (`split` false), the output
/// keeps the input's name. Split, every part — the first too — is `<stem>.part-<k><suffix>`
/// with `k` in at least five digits and `suffix` the format extension (`a.jsonl.gz` ->
/// `a.part-00000.jsonl.gz`, `a.part-00001.jsonl.gz`): no part name is ever another input's
/// output name (see `docs/formats.md`, "Split parts").
pub(crate) fn part_name(rel: &Path, k: usize, split: bool) -> PathBuf {
    if !split {
        return rel.to_path_buf();
    }
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cut = name.len() - format_suffix_len(&name);
    rel.with_file_name(format!("{}.part-{k:05}{}", &name[..cut], &name[cut..]))
}

/// A file being written under its staging name, or an object being uploaded under its final
/// name (invisible until the run's publication completes it).
pub(crate) enum OutFile {
    Local(LocalFile),
    Object(Box<ObjectWriter>),
}

/// How much a local output writes between two starts of the kernel's writeback.
const WRITEBACK_BYTES: u64 = 4 << 20;

/// A local output file that asks the kernel to start writing back every [`WRITEBACK_BYTES`] it
/// wrote. Left to itself the kernel writes dirty pages back half a minute later, so the fsync
/// that finishes an output waited for all of it at the end of the run (figures in
/// docs/benchmarks.md); started early, the writeback overlaps
/// the rest of the run, and the fsync waits only for the last stretch. Only a hint: the fsync
/// still decides whether the bytes are on stable storage.
pub(crate) struct LocalFile {
    file: File,
    written: u64,
    writeback_from: u64,
}

impl LocalFile {
    pub(crate) fn new(file: File) -> LocalFile {
        LocalFile {
            file,
            written: 0,
            writeback_from: 0,
        }
    }

    fn wrote(&mut self, n: usize) {
        self.written += n as u64;
        if self.written - self.writeback_from >= WRITEBACK_BYTES {
            start_writeback(&self.file, self.writeback_from, self.written);
            self.writeback_from = self.written;
        }
    }
}

/// Starts writing back the file's bytes `from..to` without waiting for it. An error here (the
/// call is only a hint) shows again at the fsync, which reports it.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, from: u64, to: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return;
    };
    // SAFETY: `sync_file_range` reads no memory of ours; the descriptor is open for as long as
    // `file` is borrowed.
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _from: u64, _to: u64) {}

impl OutFile {
    /// Flushes it to stable storage (a file: fsync; an object: every part uploaded) and returns
    /// its size.
    pub(crate) fn finish(self) -> io::Result<u64> {
        match self {
            OutFile::Local(f) => {
                f.file.sync_all()?;
                Ok(f.file.metadata()?.len())
            }
            OutFile::Object(w) => w.finish(),
        }
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            OutFile::Local(f) => {
                let n = f.file.write(buf)?;
                f.wrote(n);
                Ok(n)
            }
            OutFile::Object(w) => w.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            OutFile::Local(f) => {
                f.file.write_all(buf)?;
                f.wrote(buf.len());
                Ok(())
            }
            OutFile::Object(w) => w.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            OutFile::Local(f) => f.file.flush(),
            OutFile::Object(w) => w.flush(),
        }
    }
}

/// Creates an output: with `uploads`, an upload of the object `path` names; otherwise a new
/// file.
fn create_output(path: &Path, uploads: Option<&Arc<UploadSet>>) -> io::Result<OutFile> {
    match uploads {
        Some(set) => {
            let url = ObjectUrl::from_path(path)
                .ok_or_else(|| io::Error::other("not an object storage URL"))?;
            Ok(OutFile::Object(Box::new(
                set.create(&url).map_err(|e| e.into_unnamed_io())?,
            )))
        }
        None => create_file(path).map(|f| OutFile::Local(LocalFile::new(f))),
    }
}

/// Creates a new output file (0644 less the umask, like any data file; never an existing one).
fn create_file(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
}

/// Counts bytes passed to the file.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

type Out = Counting<BufWriter<OutFile>>;

enum Enc {
    Plain(Out),
    Gzip(flate2::write::GzEncoder<Out>),
    Zstd(zstd::stream::write::Encoder<'static, Out>),
}

impl Enc {
    fn new(compression: Compression, f: OutFile) -> io::Result<Enc> {
        let out = Counting {
            inner: BufWriter::with_capacity(WRITE_BUF, f),
            n: 0,
        };
        Ok(match compression {
            Compression::None => Enc::Plain(out),
            Compression::Gzip => Enc::Gzip(flate2::write::GzEncoder::new(
                out,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Enc::Zstd(zstd::stream::write::Encoder::new(out, 3)?),
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Enc::Plain(w) => w,
            Enc::Gzip(w) => w,
            Enc::Zstd(w) => w,
        }
    }

    /// Bytes emitted to the file so far.
    fn emitted(&self) -> u64 {
        match self {
            Enc::Plain(w) => w.n,
            Enc::Gzip(w) => w.get_ref().n,
            Enc::Zstd(w) => w.get_ref().n,
        }
    }

    fn finish(self) -> io::Result<OutFile> {
        let out = match self {
            Enc::Plain(w) => w,
            Enc::Gzip(w) => w.finish()?,
            Enc::Zstd(w) => w.finish()?,
        };
        out.inner.into_inner().map_err(|e| e.into_error())
    }
}

struct JsonlSink {
    compression: Compression,
    enc: Option<Enc>,
    /// Uncompressed bytes given to a compressing encoder since its last flush (their compressed
    /// size is not known yet).
    since_flush: u64,
}

impl JsonlSink {
    /// Whether `len` more bytes surely keep the part within `max` bytes once finished.
    fn fits(&mut self, len: u64, max: u64) -> io::Result<bool> {
        let Some(enc) = &mut self.enc else {
            return Ok(true);
        };
        if matches!(enc, Enc::Plain(_)) {
            return Ok(enc.emitted() + len <= max);
        }
        // Worst case, a compressor stores new data raw plus block headers; 64 bytes cover the
        // gzip header/trailer or zstd frame header/epilogue.
        let bound = |emitted: u64, pending: u64| emitted + pending + pending / 1024 + 64;
        if bound(enc.emitted(), self.since_flush + len) <= max {
            return Ok(true);
        }
        if self.since_flush > 0 {
            // Make the pending data's real compressed size known before giving up on the part.
            enc.writer().flush()?;
            self.since_flush = 0;
        }
        Ok(bound(enc.emitted(), len) <= max)
    }
}

/// The kept rows of the current input row group held back from the encoder while every row of
/// the group so far is kept (it may yet be copied whole), up to this many bytes of rows; past
/// it they are encoded as they come, and a group kept whole after all is still copied (its
/// encoding thrown away), so what is held stays small whatever the input's row groups hold.
const PARQUET_HOLD_BYTES: u64 = 8 << 20;

/// A column chunk of an object, fetched whole to be copied into an output: a reader of the
/// object's bytes `at..at + bytes.len()` by their offsets in the object.
struct FetchedChunk {
    at: u64,
    bytes: Bytes,
}

impl Length for FetchedChunk {
    fn len(&self) -> u64 {
        self.at + self.bytes.len() as u64
    }
}

impl ChunkReader for FetchedChunk {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let len = self.len().saturating_sub(start) as usize;
        Ok(self.get_bytes(start, len)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start
            .checked_sub(self.at)
            .map(|f| f as usize)
            .filter(|&f| f + length <= self.bytes.len())
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "bytes {start}+{length} outside the fetched column chunk at {}",
                    self.at
                ))
            })?;
        Ok(self.bytes.slice(from..from + length))
    }
}

/// One output part being written: the Parquet file writer, what encodes row groups for it,
/// and the column writers of the row group being encoded.
struct ParquetPart {
    file: SerializedFileWriter<OutFile>,
    factory: ArrowRowGroupWriterFactory,
    encoders: Option<Vec<ArrowColumnWriter>>,
}

impl ParquetPart {
    /// The encoded size of the row group being encoded, as far as the encoders can tell.
    fn in_progress_size(&self) -> u64 {
        self.encoders.as_ref().map_or(0, |e| {
            e.iter().map(|w| w.get_estimated_total_bytes() as u64).sum()
        })
    }

    /// Closes the row group being encoded (if any) into the file.
    fn close_group(&mut self) -> parquet::errors::Result<()> {
        let Some(encoders) = self.encoders.take() else {
            return Ok(());
        };
        let chunks = encoders
            .into_iter()
            .map(ArrowColumnWriter::close)
            .collect::<parquet::errors::Result<Vec<_>>>()?;
        let mut group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        Ok(())
    }
}

/// The input row group whose rows are coming in.
struct GroupInProgress {
    /// Its index in the input file.
    index: usize,
    /// The file's row after the last one given so far.
    next_row: u64,
    /// Every row of the group so far given and kept, and every one written to the current part:
    /// the group can still be copied whole.
    whole: bool,
    /// Rows of the group given to the current part's encoders, and their in-memory bytes
    /// (taken back when the group is copied instead).
    encoded_rows: u64,
    encoded_mem: u64,
}

struct ParquetSink {
    schema: SchemaRef,
    props: WriterProperties,
    /// The input's bytes and its footer (with its page index, where it has one): where row
    /// groups copied whole come from.
    input: ParquetBytes,
    meta: Arc<ParquetMetaData>,
    /// The file's row where each input row group starts, and its row count after them.
    group_starts: Vec<u64>,
    /// Whether the input's column chunks are what this output's columns are, leaf for leaf
    /// (physical and logical types, repetition, names): only then can a row group be copied.
    copyable: bool,
    part: Option<ParquetPart>,
    group: Option<GroupInProgress>,
    /// In-memory bytes given to the current part's encoders, to estimate their encoded ratio.
    mem_in: u64,
    /// Kept rows of the current group not yet given to the encoders, in order.
    pending: VecDeque<RecordBatch>,
    pending_rows: usize,
    /// The rows' own bytes in `pending`.
    pending_mem: u64,
    /// Footer size estimate: a fixed part (schema, key-value metadata) plus a part per row group
    /// (column chunk metadata with truncated statistics), which the encoder's running size omits.
    footer_base: u64,
    footer_per_group: u64,
}

impl ParquetSink {
    fn for_input(input: &InputFile, base: &Path) -> Result<ParquetSink, WriteError> {
        let read_error =
            |e: crate::error::ReadError| WriteError::new(base, "read_input", e.to_string());
        let bytes = ParquetBytes::open(input).map_err(read_error)?;
        // The page index travels with the row groups copied whole; a file whose page index
        // cannot be read has its rows written as they are encoded, without one.
        let reader = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Optional);
        let with_index = match &bytes {
            ParquetBytes::File(f) => reader.parse_and_finish(f),
            ParquetBytes::Object(o) => reader.parse_and_finish(o),
        };
        let (meta, index_read) = match with_index {
            Ok(meta) => (meta, true),
            Err(_) => (
                crate::parquet_read::read_footer(input)
                    .map_err(read_error)?
                    .1,
                false,
            ),
        };
        let meta = crate::parquet_read::arrow_metadata(meta, input).map_err(read_error)?;
        let pmeta = meta.metadata().clone();
        let fm = pmeta.file_metadata();
        let mut b = WriterProperties::builder()
            .set_writer_version(if fm.version() >= 2 {
                WriterVersion::PARQUET_2_0
            } else {
                WriterVersion::PARQUET_1_0
            })
            .set_key_value_metadata(fm.key_value_metadata().map(|kv| {
                kv.iter()
                    .filter(|k| k.key != "ARROW:schema")
                    .cloned()
                    .collect::<Vec<KeyValue>>()
            }));
        if let Some(rg) = pmeta.row_groups().first() {
            for col in rg.columns() {
                b = b.set_column_compression(col.column_path().clone(), col.compression());
            }
        }
        let props = b.build();
        let schema = meta.schema().clone();
        let copyable = index_read
            && ArrowSchemaConverter::new()
                .with_coerce_types(props.coerce_types())
                .convert(&schema)
                .is_ok_and(|out| out.columns() == fm.schema_descr().columns());
        let mut group_starts = Vec::with_capacity(pmeta.num_row_groups() + 1);
        let mut row = 0u64;
        for rg in pmeta.row_groups() {
            group_starts.push(row);
            row += rg.num_rows().max(0) as u64;
        }
        group_starts.push(row);
        let leaves = fm.schema_descr().num_columns() as u64;
        let kv_bytes: u64 = fm
            .key_value_metadata()
            .map(|kv| {
                kv.iter()
                    .map(|k| (k.key.len() + k.value.as_ref().map_or(0, String::len)) as u64)
                    .sum()
            })
            .unwrap_or(0);
        Ok(ParquetSink {
            schema,
            props,
            input: bytes,
            meta: pmeta,
            group_starts,
            copyable,
            part: None,
            group: None,
            mem_in: 0,
            pending: VecDeque::new(),
            pending_rows: 0,
            pending_mem: 0,
            // The embedded Arrow schema is about as large as the input's; 256 bytes per leaf
            // covers a column chunk's metadata with two 64-byte statistics values.
            footer_base: 1024 + kv_bytes + 64 * leaves,
            footer_per_group: 256 * leaves,
        })
    }

    /// The input row group holding the file's row `row` (`None`: past the last).
    fn group_of(&self, row: u64) -> Option<usize> {
        let g = self.group_starts.partition_point(|&s| s <= row);
        (g < self.group_starts.len()).then(|| g - 1)
    }

    /// Whether input row group `g` could be copied whole into a part of at most `max` bytes.
    fn group_fits(&self, g: usize, max: Option<u64>) -> bool {
        let bytes = self.meta.row_group(g).compressed_size().max(0) as u64;
        max.is_none_or(|max| bytes + self.footer_base + self.footer_per_group <= max)
    }

    /// The current part, creating it at `staged` (reported as `shown`).
    fn part(
        &mut self,
        staged: &Path,
        shown: &Path,
        uploads: Option<&Arc<UploadSet>>,
    ) -> Result<&mut ParquetPart, WriteError> {
        if self.part.is_none() {
            let f = create_output(staged, uploads).map_err(|e| WriteError::io(shown, e))?;
            // The Arrow writer sets the file up as it would write it itself (the Parquet schema
            // of the Arrow one, the Arrow schema in the key-value metadata); its row groups are
            // then written here, encoded or copied.
            let (file, factory) =
                ArrowWriter::try_new(f, self.schema.clone(), Some(self.props.clone()))
                    .and_then(ArrowWriter::into_serialized_writer)
                    .map_err(|e| WriteError::new(shown, "parquet", e.to_string()))?;
            self.part = Some(ParquetPart {
                file,
                factory,
                encoders: None,
            });
            self.mem_in = 0;
        }
        Ok(self.part.as_mut().expect("just created"))
    }

    /// Takes the first `n` pending rows (at most `pending_rows`) as one batch.
    fn take_pending(&mut self, n: usize) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut pieces = Vec::new();
        let mut need = n;
        while need > 0 {
            let front = self.pending.pop_front().expect("n <= pending_rows");
            if front.num_rows() > need {
                self.pending
                    .push_front(front.slice(need, front.num_rows() - need));
                pieces.push(front.slice(0, need));
                need = 0;
            } else {
                need -= front.num_rows();
                pieces.push(front);
            }
        }
        self.pending_rows -= n;
        match pieces.len() {
            1 => Ok(pieces.pop().expect("one piece")),
            _ => arrow_select::concat::concat_batches(&self.schema, &pieces),
        }
    }

    /// Estimated final size of the current part if `mem` more in-memory bytes were encoded.
    fn projected(&self, mem: u64) -> u64 {
        let Some(part) = &self.part else { return 0 };
        let so_far = part.file.bytes_written() as u64 + part.in_progress_size();
        let ratio = if self.mem_in > 0 {
            so_far as f64 / self.mem_in as f64
        } else {
            1.0
        };
        let footer = self.footer_base
            + self.footer_per_group * (part.file.flushed_row_groups().len() as u64 + 1);
        so_far + (mem as f64 * ratio) as u64 + footer
    }

    /// Estimated final size of the current part if input row group `g` were copied into it.
    fn projected_copy(&self, g: usize) -> u64 {
        let Some(part) = &self.part else { return 0 };
        let footer = self.footer_base
            + self.footer_per_group * (part.file.flushed_row_groups().len() as u64 + 1);
        part.file.bytes_written() as u64
            + self.meta.row_group(g).compressed_size().max(0) as u64
            + footer
    }

    /// Encodes `rows` into the current part's row group being encoded.
    fn encode(&mut self, rows: &RecordBatch) -> parquet::errors::Result<()> {
        let part = self.part.as_mut().expect("a part to encode into");
        if part.encoders.is_none() {
            let index = part.file.flushed_row_groups().len();
            part.encoders = Some(part.factory.create_column_writers(index)?);
        }
        let encoders = part.encoders.as_mut().expect("just created");
        let mut leaves = encoders.iter_mut();
        for (field, column) in self.schema.fields().iter().zip(rows.columns()) {
            for leaf in compute_leaves(field.as_ref(), column)? {
                leaves
                    .next()
                    .ok_or_else(|| {
                        parquet::errors::ParquetError::General("more leaves than columns".into())
                    })?
                    .write(&leaf)?;
            }
        }
        Ok(())
    }

    /// Copies input row group `g` into the current part as it is stored: its column chunks'
    /// bytes, statistics, page index and bloom filters (the writer moves their offsets).
    fn copy_group(&mut self, g: usize) -> parquet::errors::Result<()> {
        let rg = self.meta.row_group(g);
        let index = self.meta.page_index_for_row_group(g);
        let part = self.part.as_mut().expect("a part to copy into");
        let mut out = part.file.next_row_group()?;
        for (c, col) in rg.columns().iter().enumerate() {
            let bloom_filter = match &self.input {
                _ if col.bloom_filter_offset().is_none() => None,
                ParquetBytes::File(f) => Sbbf::read_from_column_chunk(col, f)?,
                ParquetBytes::Object(o) => Sbbf::read_from_column_chunk(col, o)?,
            };
            let close = ColumnCloseResult {
                bytes_written: col.compressed_size().max(0) as u64,
                rows_written: rg.num_rows().max(0) as u64,
                metadata: col.clone(),
                bloom_filter,
                column_index: index.column_index(c).cloned(),
                offset_index: index.offset_index(c).cloned(),
            };
            match &self.input {
                ParquetBytes::File(f) => out.append_column(f, close)?,
                ParquetBytes::Object(o) => {
                    let (at, len) = col.byte_range();
                    let bytes = o.get_bytes(at, len as usize)?;
                    out.append_column(&FetchedChunk { at, bytes }, close)?;
                }
            }
        }
        out.close()?;
        Ok(())
    }
}

/// The rows' own bytes, not the buffers they are a slice of (which depend on the block they
/// came in).
fn rows_memory(rows: &RecordBatch) -> u64 {
    rows.columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

enum Sink {
    Jsonl(Box<JsonlSink>),
    Parquet(Box<ParquetSink>),
}

/// Writes the output of one input file into the run's staging directory; `finish` flushes and
/// fsyncs it, and the publication's commit moves it into place with the run's other outputs.
/// Nothing is ever written under a final name before then. Send.
///
/// Splitting (`max_output_bytes`): a new part starts before a record that would push the current
/// part over the limit; a single record larger than the limit gets a part of its own. Every
/// output is then named by part: `a.part-00000.jsonl`, `a.part-00001.jsonl`, … (see
/// `docs/formats.md`). JSONL limits are exact for plain files and a guaranteed upper bound for
/// gzip/zstd (the encoder is flushed near the limit to learn its real size); Parquet sizes are
/// estimated from the encoder's buffered size, so a Parquet part can exceed the limit by about
/// one write of [`PARQUET_WRITE_ROWS`] rows.
pub struct FileWriter {
    /// The input's relative path.
    rel: PathBuf,
    /// The output directory, as named by the caller (messages and returned paths).
    dir: PathBuf,
    staging: PathBuf,
    uploads: Option<Arc<UploadSet>>,
    max: Option<u64>,
    /// Which claimed output this is.
    claim: usize,
    finished: Arc<Mutex<Vec<FinishedPart>>>,
    /// Finished (fsynced, closed) earlier parts.
    parts: Vec<FinishedPart>,
    sink: Sink,
    records: u64,
    part_records: u64,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("output", &self.dir.join(&self.rel))
            .field("parts_done", &self.parts.len())
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

/// What [`FileWriter::finish`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenFile {
    /// Paths the output will have once published, in order (more than one if split by
    /// max_output_bytes).
    pub paths: Vec<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Bytes on disk, all parts.
    pub bytes: u64,
}

impl FileWriter {
    /// The relative path of part `k`.
    fn part_rel(&self, k: usize) -> PathBuf {
        part_name(&self.rel, k, self.max.is_some())
    }

    /// The published path of part `k`, as messages name it.
    fn shown(&self, k: usize) -> PathBuf {
        self.dir.join(self.part_rel(k))
    }

    /// Creates the file of part `k` in the staging directory.
    fn create_part(&self, k: usize) -> Result<OutFile, WriteError> {
        create_output(&self.staging.join(self.part_rel(k)), self.uploads.as_ref())
            .map_err(|e| WriteError::io(&self.shown(k), e))
    }

    /// The output as messages name it.
    fn base(&self) -> PathBuf {
        self.shown(0)
    }

    /// Writes the records of `block` that `keep` says (`keep.len() == block.num_records()`);
    /// `record_base` is the number of the file's records before the block's chunk. Blocks must
    /// come in record order; records never given (lost to damage) are not written. JSONL: kept
    /// lines copied byte for byte (blank lines are passed through when keep is true). Parquet:
    /// each input row group holding a kept row becomes a row group of the output (two, if a
    /// split part ends inside it): one whose every row came and was kept is copied as it is
    /// stored, column chunks, statistics, page index and bloom filters alike, where its columns
    /// are what the output's are; the others have their kept rows encoded. The block must have
    /// been read with Projection::FullRecords.
    pub fn write_block(
        &mut self,
        block: &Block,
        record_base: u64,
        keep: &[bool],
    ) -> Result<(), WriteError> {
        if keep.len() != block.num_records() {
            return Err(WriteError::new(
                &self.base(),
                "invalid_block",
                format!(
                    "mask has {} entries for a block of {} records",
                    keep.len(),
                    block.num_records()
                ),
            ));
        }
        match (&mut self.sink, &block.data) {
            (
                Sink::Jsonl(_),
                BlockData::Jsonl {
                    picked: Some(p), ..
                },
            ) if !p.whole => Err(WriteError::new(
                &self.base(),
                "invalid_block",
                "block was read by the places of some records only; writing needs them all",
            )),
            (Sink::Jsonl(_), BlockData::Jsonl { bytes, starts, .. }) => {
                self.write_lines(bytes, starts, keep)
            }
            (
                Sink::Parquet(_),
                BlockData::Parquet {
                    picked: Some(_), ..
                },
            ) => Err(WriteError::new(
                &self.base(),
                "invalid_block",
                "block was read by choosing some rows only; writing needs them all",
            )),
            (Sink::Parquet(_), BlockData::Parquet { batch, full, .. }) => {
                if !full {
                    return Err(WriteError::new(
                        &self.base(),
                        "invalid_block",
                        "block was read with Projection::TextOnly; writing needs FullRecords",
                    ));
                }
                self.write_batch(record_base + block.first_record, batch, keep)
            }
            _ => Err(WriteError::new(
                &self.base(),
                "invalid_block",
                "block format differs from the output format",
            )),
        }
    }

    fn io<T>(&self, r: io::Result<T>) -> Result<T, WriteError> {
        r.map_err(|e| WriteError::io(&self.shown(self.parts.len()), e))
    }

    fn write_lines(
        &mut self,
        bytes: &[u8],
        starts: &[usize],
        keep: &[bool],
    ) -> Result<(), WriteError> {
        let line_end = |i: usize| starts.get(i + 1).copied().unwrap_or(bytes.len());
        let mut i = 0;
        while i < starts.len() {
            if !keep[i] {
                i += 1;
                continue;
            }
            // Without a size limit, runs of kept lines are copied with one write.
            let mut j = i + 1;
            if self.max.is_none() {
                while j < starts.len() && keep[j] {
                    j += 1;
                }
            }
            let run = &bytes[starts[i]..line_end(j - 1)];
            self.write_run(run, (j - i) as u64)?;
            i = j;
        }
        Ok(())
    }

    fn write_run(&mut self, run: &[u8], lines: u64) -> Result<(), WriteError> {
        let Sink::Jsonl(sink) = &mut self.sink else {
            unreachable!("write_run is only called for JSONL sinks");
        };
        if let Some(max) = self.max
            && self.part_records > 0
        {
            let fits = sink.fits(run.len() as u64, max);
            if !self.io(fits)? {
                self.close_part()?;
            }
        }
        let part = self.parts.len();
        let needs_file = matches!(&self.sink, Sink::Jsonl(s) if s.enc.is_none());
        let file = if needs_file {
            Some(self.create_part(part)?)
        } else {
            None
        };
        let shown = self.shown(part);
        let Sink::Jsonl(sink) = &mut self.sink else {
            unreachable!("checked above");
        };
        if let Some(f) = file {
            let enc = Enc::new(sink.compression, f).map_err(|e| WriteError::io(&shown, e))?;
            sink.enc = Some(enc);
        }
        let enc = sink.enc.as_mut().expect("just created");
        let r = enc.writer().write_all(run);
        if !matches!(enc, Enc::Plain(_)) {
            sink.since_flush += run.len() as u64;
        }
        r.map_err(|e| WriteError::io(&shown, e))?;
        self.records += lines;
        self.part_records += lines;
        Ok(())
    }

    fn write_batch(
        &mut self,
        first_row: u64,
        batch: &RecordBatch,
        keep: &[bool],
    ) -> Result<(), WriteError> {
        let base = self.base();
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("write_batch is only called for Parquet sinks");
        };
        if batch.schema().fields() != sink.schema.fields() {
            return Err(WriteError::new(
                &base,
                "invalid_block",
                "block schema differs from the input file's schema",
            ));
        }
        // The writer must use the file's schema (with its metadata), not the batch's.
        let batch = batch
            .clone()
            .with_schema(sink.schema.clone())
            .map_err(|e| WriteError::new(&base, "invalid_block", e.to_string()))?;
        let mut at = 0;
        while at < batch.num_rows() {
            let row = first_row + at as u64;
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            let Some(g) = sink.group_of(row) else {
                return Err(WriteError::new(
                    &base,
                    "invalid_block",
                    format!("row {row} is past the input's last row group"),
                ));
            };
            let end = at + ((sink.group_starts[g + 1] - row) as usize).min(batch.num_rows() - at);
            self.enter_group(g, row)?;
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            let group = sink.group.as_mut().expect("entered");
            let mask = &keep[at..end];
            let rows = batch.slice(at, end - at);
            let kept = if mask.iter().all(|&k| k) {
                rows
            } else {
                group.whole = false;
                arrow_select::filter::filter_record_batch(&rows, &BooleanArray::from(mask.to_vec()))
                    .map_err(|e| WriteError::new(&base, "parquet", e.to_string()))?
            };
            group.next_row = first_row + end as u64;
            let (whole, ended) = (group.whole, group.next_row == sink.group_starts[g + 1]);
            if kept.num_rows() > 0 {
                sink.pending_rows += kept.num_rows();
                sink.pending_mem += rows_memory(&kept);
                sink.pending.push_back(kept);
            }
            if !whole || sink.pending_mem > PARQUET_HOLD_BYTES {
                self.write_pending(PARQUET_WRITE_ROWS)?;
            }
            if ended {
                self.end_group()?;
            }
            at = end;
        }
        Ok(())
    }

    /// Makes input row group `g` the one whose rows come in, its rows from the file's row `row`
    /// on: the group before it ends, and rows of the group not given (lost to a damaged page)
    /// mean it cannot be copied whole.
    fn enter_group(&mut self, g: usize, row: u64) -> Result<(), WriteError> {
        let base = self.base();
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("enter_group is only called for Parquet sinks");
        };
        if let Some(group) = &mut sink.group {
            if group.index > g || (group.index == g && row < group.next_row) {
                return Err(WriteError::new(
                    &base,
                    "invalid_block",
                    format!("row {row} comes after row {}", group.next_row),
                ));
            }
            if group.index == g {
                group.whole &= row == group.next_row;
                return Ok(());
            }
            self.end_group()?;
        }
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("checked above");
        };
        let whole = sink.copyable && row == sink.group_starts[g] && sink.group_fits(g, self.max);
        sink.group = Some(GroupInProgress {
            index: g,
            next_row: row,
            whole,
            encoded_rows: 0,
            encoded_mem: 0,
        });
        Ok(())
    }

    /// Ends the input row group whose rows were coming in: one whose every row came and was
    /// kept is copied as it is stored (what was encoded of it thrown away), another has the
    /// rest of its kept rows encoded and closed as a row group.
    fn end_group(&mut self) -> Result<(), WriteError> {
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("end_group is only called for Parquet sinks");
        };
        let Some(group) = sink.group.take() else {
            return Ok(());
        };
        let g = group.index;
        let rows = sink.group_starts[g + 1] - sink.group_starts[g];
        if group.whole && group.next_row == sink.group_starts[g + 1] && rows > 0 {
            sink.pending.clear();
            sink.pending_rows = 0;
            sink.pending_mem = 0;
            if let Some(part) = &mut sink.part {
                part.encoders = None;
            }
            sink.mem_in -= group.encoded_mem;
            self.records -= group.encoded_rows;
            self.part_records -= group.encoded_rows;
            let shown = self.open_parquet_part(|sink| sink.projected_copy(g))?;
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            sink.copy_group(g)
                .map_err(|e| WriteError::new(&shown, "parquet", e.to_string()))?;
            self.records += rows;
            self.part_records += rows;
            return Ok(());
        }
        self.write_pending(1)?;
        let shown = self.shown(self.parts.len());
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("checked above");
        };
        if let Some(part) = &mut sink.part {
            part.close_group()
                .map_err(|e| WriteError::new(&shown, "parquet", e.to_string()))?;
        }
        Ok(())
    }

    /// Gives the encoders the pending rows in writes of [`PARQUET_WRITE_ROWS`], while at
    /// least `min_rows` are pending (1 at a group's end: the last write takes what is left).
    fn write_pending(&mut self, min_rows: usize) -> Result<(), WriteError> {
        let base = self.base();
        let rows_per_write = PARQUET_WRITE_ROWS;
        loop {
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("write_pending is only called for Parquet sinks");
            };
            if sink.pending_rows < min_rows.max(1) {
                return Ok(());
            }
            let slice = sink
                .take_pending(sink.pending_rows.min(rows_per_write))
                .map_err(|e| WriteError::new(&base, "parquet", e.to_string()))?;
            let mem = rows_memory(&slice);
            sink.pending_mem = sink.pending_mem.saturating_sub(mem);
            let shown = self.open_parquet_part(|sink| sink.projected(mem))?;
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            sink.encode(&slice)
                .map_err(|e| WriteError::new(&shown, "parquet", e.to_string()))?;
            sink.mem_in += mem;
            if let Some(group) = &mut sink.group {
                group.encoded_rows += slice.num_rows() as u64;
                group.encoded_mem += mem;
            }
            self.records += slice.num_rows() as u64;
            self.part_records += slice.num_rows() as u64;
        }
    }

    /// Opens the Parquet part the next write goes to, closing the current one first when
    /// `projected` (its size once the write is in) would pass `--max-output-bytes`; returns the
    /// part's shown path.
    fn open_parquet_part(
        &mut self,
        projected: impl FnOnce(&ParquetSink) -> u64,
    ) -> Result<PathBuf, WriteError> {
        let Sink::Parquet(sink) = &self.sink else {
            unreachable!("open_parquet_part is only called for Parquet sinks");
        };
        if let Some(max) = self.max
            && self.part_records > 0
            && projected(sink) > max
        {
            self.close_part()?;
        }
        let part = self.parts.len();
        let (staged, shown) = (self.staging.join(self.part_rel(part)), self.shown(part));
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("checked above");
        };
        sink.part(&staged, &shown, self.uploads.as_ref())?;
        Ok(shown)
    }

    /// Finishes the current part's encoder and fsyncs it.
    fn close_part(&mut self) -> Result<(), WriteError> {
        let k = self.parts.len();
        let path = self.shown(k);
        let file = match &mut self.sink {
            Sink::Jsonl(s) => {
                s.since_flush = 0;
                match s.enc.take() {
                    Some(enc) => enc.finish().map_err(|e| WriteError::io(&path, e))?,
                    None => return Ok(()),
                }
            }
            Sink::Parquet(s) => match s.part.take() {
                Some(mut part) => {
                    // The rows of the group in progress written so far end this part as a row
                    // group: the group is now split, and can no longer be copied whole.
                    if let Some(group) = &mut s.group {
                        group.whole = false;
                        group.encoded_rows = 0;
                        group.encoded_mem = 0;
                    }
                    part.close_group()
                        .and_then(|()| part.file.into_inner())
                        .map_err(|e| WriteError::new(&path, "parquet", e.to_string()))?
                }
                None => return Ok(()),
            },
        };
        let bytes = file.finish().map_err(|e| WriteError::io(&path, e))?;
        self.parts.push(FinishedPart {
            file: self.claim,
            rel: self.part_rel(k),
            bytes,
            records: self.part_records,
        });
        self.part_records = 0;
        Ok(())
    }

    /// Flushes and fsyncs every part, ready to be published; an input with no kept record still
    /// gets one (empty, valid) output file.
    pub fn finish(mut self) -> Result<WrittenFile, WriteError> {
        if matches!(self.sink, Sink::Parquet(_)) {
            self.end_group()?;
        }
        let has_open = match &self.sink {
            Sink::Jsonl(s) => s.enc.is_some(),
            Sink::Parquet(s) => s.part.is_some(),
        };
        if !has_open && self.parts.is_empty() {
            // Create an empty part so the output exists with the right format.
            let (staged, shown) = (self.staging.join(self.part_rel(0)), self.shown(0));
            match &mut self.sink {
                Sink::Jsonl(s) => {
                    let f = create_output(&staged, self.uploads.as_ref())
                        .map_err(|e| WriteError::io(&shown, e))?;
                    s.enc =
                        Some(Enc::new(s.compression, f).map_err(|e| WriteError::io(&shown, e))?);
                }
                Sink::Parquet(s) => {
                    s.part(&staged, &shown, self.uploads.as_ref())?;
                }
            }
        }
        self.close_part()?;
        let written = WrittenFile {
            paths: self.parts.iter().map(|p| self.dir.join(&p.rel)).collect(),
            records: self.records,
            bytes: self.parts.iter().map(|p| p.bytes).sum(),
        };
        self.finished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(self.parts.drain(..));
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local output starts the writeback of every stretch of [`WRITEBACK_BYTES`] it wrote, by
    /// `write` and `write_all` alike, and still holds exactly the bytes written once finished.
    #[test]
    fn local_outputs_start_writeback_as_they_go_and_keep_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out = OutFile::Local(LocalFile::new(create_file(&path).unwrap()));
        let mut want = Vec::new();
        let mut state = 11u32;
        while want.len() < 2 * WRITEBACK_BYTES as usize + 12_345 {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let chunk = vec![(state >> 24) as u8; 1 + (state as usize >> 8) % 200_000];
            if state.is_multiple_of(2) {
                out.write_all(&chunk).unwrap();
            } else {
                let mut rest = &chunk[..];
                while !rest.is_empty() {
                    let n = out.write(rest).unwrap();
                    rest = &rest[n..];
                }
            }
            want.extend_from_slice(&chunk);
        }
        let OutFile::Local(local) = &out else {
            unreachable!()
        };
        assert_eq!(local.written, want.len() as u64);
        assert!(
            local.writeback_from >= 2 * WRITEBACK_BYTES,
            "{}",
            local.writeback_from
        );
        assert!(local.written - local.writeback_from < WRITEBACK_BYTES);
        assert_eq!(out.finish().unwrap(), want.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// Writes `batch`'s rows as blocks of the given sizes (each block keeping the rows `keep`
    /// says) through a [`FileWriter`] for the Parquet input `input`; returns the output's bytes.
    fn parquet_output(
        input: &InputFile,
        batch: &RecordBatch,
        blocks: &[usize],
        keep: impl Fn(usize) -> bool,
        max: Option<u64>,
    ) -> Vec<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        let out = OutputDir::staged(dir.path().to_path_buf(), staging.clone(), max);
        let mut w = out.file_writer(input).unwrap();
        let mut at = 0;
        for &n in blocks.iter().cycle() {
            if at >= batch.num_rows() {
                break;
            }
            let n = n.min(batch.num_rows() - at);
            let block = Block {
                file: 0,
                chunk_seq: 0,
                first_record: at as u64,
                data: BlockData::Parquet {
                    batch: batch.slice(at, n),
                    text_bytes: 0,
                    full: true,
                    texts_only: false,
                    picked: None,
                },
                disk_bytes: 0,
            };
            let mask: Vec<bool> = (at..at + n).map(&keep).collect();
            w.write_block(&block, 0, &mask).unwrap();
            at += n;
        }
        let written = w.finish().unwrap();
        written
            .paths
            .iter()
            .map(|p| std::fs::read(staging.join(p.strip_prefix(dir.path()).unwrap())).unwrap())
            .collect()
    }

    /// `rows` rows of `id` and `text` (200 to 10,000 random letters, so a row group of a thousand
    /// rows passes the 1 MB page limit several times and not at fixed row counts).
    fn texts_batch(rows: usize) -> RecordBatch {
        use arrow_array::{ArrayRef, Int64Array, StringArray};
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let texts: Vec<String> = (0..rows)
            .map(|i| {
                let len = 200 + (next() % 9800) as usize;
                (0..len)
                    .map(|_| (b'a' + (next() % 26) as u8) as char)
                    .collect::<String>()
                    + &i.to_string()
            })
            .collect();
        RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
        ])
        .unwrap()
    }

    /// Writes `batch` to `path` in row groups ending at the rows `ends`, with `props`.
    fn write_groups(path: &Path, batch: &RecordBatch, ends: &[usize], props: WriterProperties) {
        let mut w =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
        let mut at = 0;
        for &end in ends {
            w.write(&batch.slice(at, end - at)).unwrap();
            w.flush().unwrap();
            at = end;
        }
        w.close().unwrap();
    }

    /// The bytes of a Parquet output depend on the rows kept, never on the blocks they came in
    /// (a distributed run's `write` step reads a shard in other blocks than one process reads
    /// the whole input): pages are cut at the same rows, split parts end at the same rows, and
    /// the same row groups are copied whole; a group kept whole is copied whether its rows were
    /// held back from the encoder (a group of fewer bytes than [`PARQUET_HOLD_BYTES`]) or
    /// encoded as they came (more).
    #[test]
    fn parquet_bytes_do_not_depend_on_the_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let rows = 3000;
        let batch = texts_batch(rows);
        let path = dir.path().join("in.parquet");
        // Groups of 1,800 rows (about 9 MB: more than is held back), 600 and 600.
        write_groups(
            &path,
            &batch,
            &[1800, 2400, 3000],
            WriterProperties::default(),
        );
        let input = InputFile::detect(&path, Path::new("in.parquet"), None).unwrap();
        let group_sizes = |out: &[Vec<u8>]| -> Vec<Vec<i64>> {
            out.iter()
                .map(|b| {
                    let meta = ParquetMetaDataReader::new()
                        .parse_and_finish(&Bytes::from(b.clone()))
                        .unwrap();
                    meta.row_groups().iter().map(|g| g.num_rows()).collect()
                })
                .collect()
        };
        for (keep, groups) in [
            (
                (|i: usize| i % 7 != 3) as fn(usize) -> bool,
                vec![vec![1543, 514, 514]],
            ),
            (
                |i: usize| !(1800..2400).contains(&i) || i % 7 != 3,
                vec![vec![1800, 514, 600]],
            ),
        ] {
            for max in [None, Some(12_000_000), Some(2_000_000)] {
                let one = parquet_output(&input, &batch, &[rows], keep, max);
                if max.is_none() {
                    assert_eq!(group_sizes(&one), groups);
                } else {
                    assert!(one.len() > 1, "no split at {max:?}");
                }
                for blocks in [&[1000][..], &[333, 17, 1500], &[1], &[2999, 1]] {
                    let other = parquet_output(&input, &batch, blocks, keep, max);
                    assert!(
                        other == one,
                        "blocks of {blocks:?} rows (split at {max:?}) changed the bytes"
                    );
                }
            }
        }
    }

    /// A row group whose every row is kept is copied as the input stores it: the same column
    /// chunk bytes (codec and all), statistics, page index and bloom filters, at the output's
    /// offsets; a group with a dropped row, or with rows never given (lost to damage), has its
    /// kept rows encoded. The file's key-value metadata is kept, and the output holds exactly
    /// the kept rows.
    #[test]
    fn parquet_row_groups_kept_whole_are_copied_as_stored() {
        use arrow_array::cast::AsArray;
        use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
        use parquet::basic::{Compression as Codec, ZstdLevel};
        let dir = tempfile::tempdir().unwrap();
        let batch = texts_batch(900);
        let path = dir.path().join("in.parquet");
        let props = WriterProperties::builder()
            .set_compression(Codec::ZSTD(ZstdLevel::try_new(5).unwrap()))
            .set_column_compression("id".into(), Codec::SNAPPY)
            .set_bloom_filter_enabled(true)
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "origin".to_string(),
                "crawl 7".to_string(),
            )]))
            .build();
        write_groups(&path, &batch, &[300, 600, 900], props);
        let input = InputFile::detect(&path, Path::new("in.parquet"), None).unwrap();
        let input_bytes = std::fs::read(&path).unwrap();
        let in_meta = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Required)
            .parse_and_finish(&Bytes::from(input_bytes.clone()))
            .unwrap();
        // Rows 0..300 kept whole; one row of 300..600 dropped; rows 650..700 never given.
        let blocks: Vec<(usize, usize)> = vec![(0, 250), (250, 400), (400, 650), (700, 900)];
        let out_dir = tempfile::tempdir().unwrap();
        let staging = out_dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        let out = OutputDir::staged(out_dir.path().to_path_buf(), staging.clone(), None);
        let mut w = out.file_writer(&input).unwrap();
        for &(from, to) in &blocks {
            let block = Block {
                file: 0,
                chunk_seq: 0,
                first_record: from as u64,
                data: BlockData::Parquet {
                    batch: batch.slice(from, to - from),
                    text_bytes: 0,
                    full: true,
                    texts_only: false,
                    picked: None,
                },
                disk_bytes: 0,
            };
            let keep: Vec<bool> = (from..to).map(|i| i != 456).collect();
            w.write_block(&block, 0, &keep).unwrap();
        }
        let written = w.finish().unwrap();
        assert_eq!(written.records, 300 + 299 + 250);
        let out_path = staging.join("in.parquet");
        let out_bytes = std::fs::read(&out_path).unwrap();
        let out_meta = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&Bytes::from(out_bytes.clone()))
            .unwrap();
        let rows: Vec<i64> = out_meta.row_groups().iter().map(|g| g.num_rows()).collect();
        assert_eq!(rows, [300, 299, 250]);
        let kv = out_meta.file_metadata().key_value_metadata().unwrap();
        assert!(
            kv.iter()
                .any(|k| k.key == "origin" && k.value.as_deref() == Some("crawl 7"))
        );
        for c in 0..2 {
            let (i, o) = (
                in_meta.row_group(0).column(c),
                out_meta.row_group(0).column(c),
            );
            let (ia, il) = i.byte_range();
            let (oa, ol) = o.byte_range();
            assert_eq!(il, ol);
            assert_eq!(
                input_bytes[ia as usize..(ia + il) as usize],
                out_bytes[oa as usize..(oa + ol) as usize],
                "column {c} of the group kept whole is not its input's bytes"
            );
            assert_eq!(i.compression(), o.compression());
            assert_eq!(i.statistics(), o.statistics());
            assert!(o.bloom_filter_offset().is_some());
            let index = out_meta.page_index_for_row_group(0);
            let locations = &index.offset_index(c).unwrap().page_locations;
            let in_locations = &in_meta
                .page_index_for_row_group(0)
                .offset_index(c)
                .unwrap()
                .page_locations
                .clone();
            assert_eq!(locations.len(), in_locations.len());
            for (l, il) in locations.iter().zip(in_locations) {
                assert_eq!(l.offset - oa as i64, il.offset - ia as i64);
            }
            assert!(index.column_index(c).is_some());
        }
        // The copied bloom filter still answers for the copied rows.
        let read = Sbbf::read_from_column_chunk(
            out_meta.row_group(0).column(0),
            &Bytes::from(out_bytes.clone()),
        )
        .unwrap()
        .unwrap();
        assert!((0..300i64).all(|v| read.check(&v)));
        // Every kept row, in order, and nothing else.
        let r = ParquetRecordBatchReaderBuilder::try_new_with_options(
            File::open(&out_path).unwrap(),
            ArrowReaderOptions::default(),
        )
        .unwrap()
        .build()
        .unwrap();
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for b in r {
            let b = b.unwrap();
            ids.extend(
                b.column(0)
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .values()
                    .iter()
                    .copied(),
            );
            texts.extend(
                b.column(1)
                    .as_string::<i32>()
                    .iter()
                    .map(|t| t.unwrap().to_string()),
            );
        }
        let want: Vec<i64> = (0..900i64)
            .filter(|&i| i != 456 && !(650..700).contains(&i))
            .collect();
        assert_eq!(ids, want);
        let all = batch.column(1).as_string::<i32>();
        assert!(
            ids.iter()
                .zip(&texts)
                .all(|(&i, t)| all.value(i as usize) == t)
        );
    }

    /// A file whose Parquet columns are not what its Arrow schema writes (here INT96 timestamps,
    /// which Arrow reads as nanosecond timestamps and writes as INT64) has its row groups kept
    /// whole encoded, not copied: a copied chunk would not match the output's column.
    #[test]
    fn parquet_columns_the_output_writes_otherwise_are_encoded() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::basic::Type as Physical;
        use parquet::data_type::{ByteArray, ByteArrayType, Int96, Int96Type};
        use parquet::schema::parser::parse_message_type;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.parquet");
        let schema = Arc::new(
            parse_message_type("message m { required int96 t; required binary text (UTF8); }")
                .unwrap(),
        );
        let mut w = SerializedFileWriter::new(
            File::create(&path).unwrap(),
            schema,
            Arc::new(WriterProperties::default()),
        )
        .unwrap();
        for group in 0..2u32 {
            let mut rg = w.next_row_group().unwrap();
            let mut col = rg.next_column().unwrap().unwrap();
            let times: Vec<Int96> = (0..50u32)
                .map(|i| Int96::from(vec![group * 50 + i, 0, 2_440_588]))
                .collect();
            col.typed::<Int96Type>()
                .write_batch(&times, None, None)
                .unwrap();
            col.close().unwrap();
            let mut col = rg.next_column().unwrap().unwrap();
            let texts: Vec<ByteArray> = (0..50)
                .map(|i| ByteArray::from(format!("text {}", group * 50 + i).as_str()))
                .collect();
            col.typed::<ByteArrayType>()
                .write_batch(&texts, None, None)
                .unwrap();
            col.close().unwrap();
            rg.close().unwrap();
        }
        w.close().unwrap();
        let input = InputFile::detect(&path, Path::new("in.parquet"), None).unwrap();
        let batch = {
            let r = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
                .unwrap()
                .build()
                .unwrap();
            let batches: Vec<RecordBatch> = r.map(|b| b.unwrap()).collect();
            arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap()
        };
        let out = parquet_output(&input, &batch, &[30], |i| i != 70, None);
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(out[0].clone()))
            .unwrap();
        let rows: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
        assert_eq!(rows, [50, 49]);
        assert_eq!(
            meta.row_group(0).column(0).column_type(),
            Physical::INT64,
            "the group kept whole was copied with its INT96 column"
        );
        let back = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(out[0].clone()))
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect::<Vec<_>>();
        let back = arrow_select::concat::concat_batches(&back[0].schema(), &back).unwrap();
        let keep = BooleanArray::from((0..100).map(|i| i != 70).collect::<Vec<_>>());
        let want = arrow_select::filter::filter_record_batch(&batch, &keep).unwrap();
        assert_eq!(back.columns(), want.columns());
    }

    #[test]
    fn part_names() {
        let b = Path::new("sub/part-00000.jsonl.gz");
        assert_eq!(part_name(b, 0, false), b);
        assert_eq!(
            part_name(b, 0, true),
            Path::new("sub/part-00000.part-00000.jsonl.gz")
        );
        assert_eq!(
            part_name(Path::new("x.parquet"), 12, true),
            Path::new("x.part-00012.parquet")
        );
        assert_eq!(
            part_name(Path::new("x.jsonl"), 123_456, true),
            Path::new("x.part-123456.jsonl")
        );
        assert_eq!(
            part_name(Path::new("noext"), 2, true),
            Path::new("noext.part-00002")
        );
    }

    /// Split names of different inputs (or parts) never coincide, and no split name is an input
    /// name of the same directory that a second input could also map to: checked over
    /// adversarial names, including ones that already look like parts.
    #[test]
    fn split_names_are_injective() {
        let stems = [
            "a",
            "a.part-00001",
            "a.part-00000",
            "a-1",
            "a.part",
            ".hidden",
            "x.part-00003.part-00007",
            "2024",
            "a.2024",
            "a.part-1",
        ];
        let exts = [
            "",
            ".jsonl",
            ".jsonl.gz",
            ".gz",
            ".zst",
            ".zstd",
            ".parquet",
            ".json.zst",
        ];
        let mut inputs = Vec::new();
        for s in stems {
            for e in exts {
                inputs.push(format!("{s}{e}"));
            }
        }
        inputs.sort();
        inputs.dedup();
        let mut seen = std::collections::HashMap::new();
        for input in &inputs {
            for k in [0, 1, 3, 7, 99_999, 100_000] {
                let name = part_name(Path::new(input), k, true);
                if let Some(other) = seen.insert(name.clone(), (input.clone(), k)) {
                    panic!("{name:?} is both {other:?} and {:?}", (input, k));
                }
            }
        }
    }
}
