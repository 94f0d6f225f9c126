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
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterVersion};

use neardup_storage::{ObjectUrl, ObjectWriter, UploadSet};

use crate::block::{Block, BlockData};
use crate::error::WriteError;
use crate::format::{Compression, Format, InputFile, format_suffix_len};

/// Buffer between encoders and the temp file; large writes keep syscalls rare.
const WRITE_BUF: usize = 1 << 20;
/// Rows per write to a Parquet encoder. The encoder cuts a column's pages (and checks their size)
/// within each write on its own, so writes of whatever rows the blocks happened to hold would cut
/// pages where the blocks ended, and blocks end in other places when the same file is read in
/// other chunks (a shard of a distributed run, another `chunk_bytes`). Kept rows are regrouped
/// into writes of exactly this many rows counted from a part's start, so the bytes depend on the
/// kept rows alone. Few rows a write keep what writing holds small (the rows gathered for a
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

struct ParquetSink {
    schema: SchemaRef,
    props: WriterProperties,
    writer: Option<ArrowWriter<OutFile>>,
    /// In-memory bytes given to the current part's writer, to estimate its encoded ratio.
    mem_in: u64,
    /// Kept rows not yet given to the writer (fewer than [`PARQUET_WRITE_ROWS`] between blocks),
    /// in order.
    pending: VecDeque<RecordBatch>,
    pending_rows: usize,
    /// Footer size estimate: a fixed part (schema, key-value metadata) plus a part per row group
    /// (column chunk metadata with truncated statistics), which the encoder's running size omits.
    footer_base: u64,
    footer_per_group: u64,
}

impl ParquetSink {
    fn for_input(input: &InputFile, base: &Path) -> Result<ParquetSink, WriteError> {
        let (_, meta) = crate::parquet_read::load(input)
            .map_err(|e| WriteError::new(base, "read_input", e.to_string()))?;
        let pmeta = meta.metadata();
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
        let max_rows = pmeta
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows().max(0) as usize)
            .max()
            .unwrap_or(0);
        if max_rows > 0 {
            b = b.set_max_row_group_row_count(Some(max_rows));
        }
        if let Some(rg) = pmeta.row_groups().first() {
            for col in rg.columns() {
                b = b.set_column_compression(col.column_path().clone(), col.compression());
            }
        }
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
            schema: meta.schema().clone(),
            props: b.build(),
            writer: None,
            mem_in: 0,
            pending: VecDeque::new(),
            pending_rows: 0,
            // The embedded Arrow schema is about as large as the input's; 256 bytes per leaf
            // covers a column chunk's metadata with two 64-byte statistics values.
            footer_base: 1024 + kv_bytes + 64 * leaves,
            footer_per_group: 256 * leaves,
        })
    }

    /// The current part's writer, creating the part at `staged` (reported as `shown`).
    fn writer(
        &mut self,
        staged: &Path,
        shown: &Path,
        uploads: Option<&Arc<UploadSet>>,
    ) -> Result<&mut ArrowWriter<OutFile>, WriteError> {
        if self.writer.is_none() {
            let f = create_output(staged, uploads).map_err(|e| WriteError::io(shown, e))?;
            let w = ArrowWriter::try_new(f, self.schema.clone(), Some(self.props.clone()))
                .map_err(|e| WriteError::new(shown, "parquet", e.to_string()))?;
            self.writer = Some(w);
            self.mem_in = 0;
        }
        Ok(self.writer.as_mut().expect("just created"))
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

    /// Estimated final size of the current part if `mem` more in-memory bytes were added.
    fn projected(&self, mem: u64) -> u64 {
        let Some(w) = &self.writer else { return 0 };
        let so_far = (w.bytes_written() + w.in_progress_size()) as u64;
        let ratio = if self.mem_in > 0 {
            so_far as f64 / self.mem_in as f64
        } else {
            1.0
        };
        let footer =
            self.footer_base + self.footer_per_group * (w.flushed_row_groups().len() as u64 + 1);
        so_far + (mem as f64 * ratio) as u64 + footer
    }
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

    /// Blocks must come in record order. `keep.len() == block.num_records()`. JSONL: kept lines
    /// copied byte for byte (blank lines are passed through when keep is true). Parquet: arrow
    /// filter kernel. The block must have been read with Projection::FullRecords.
    pub fn write_block(&mut self, block: &Block, keep: &[bool]) -> Result<(), WriteError> {
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
                self.write_batch(batch, keep)
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

    fn write_batch(&mut self, batch: &RecordBatch, keep: &[bool]) -> Result<(), WriteError> {
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
        let filtered = if keep.iter().all(|&k| k) {
            batch.clone()
        } else {
            arrow_select::filter::filter_record_batch(batch, &BooleanArray::from(keep.to_vec()))
                .map_err(|e| WriteError::new(&base, "parquet", e.to_string()))?
        };
        // The writer must use the file's schema (with its metadata), not the batch's.
        let filtered = filtered
            .with_schema(sink.schema.clone())
            .map_err(|e| WriteError::new(&base, "invalid_block", e.to_string()))?;
        if filtered.num_rows() > 0 {
            sink.pending_rows += filtered.num_rows();
            sink.pending.push_back(filtered);
        }
        self.write_pending(PARQUET_WRITE_ROWS)
    }

    /// Gives the writer the pending rows in writes of [`PARQUET_WRITE_ROWS`], while at
    /// least `min_rows` are pending (1 at the end: the last write takes what is left).
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
            // The rows' own bytes, not the buffers they are a slice of (which depend on the
            // block they came in).
            let mem = slice
                .columns()
                .iter()
                .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
                .sum::<u64>();
            if let Some(max) = self.max
                && self.part_records > 0
                && sink.projected(mem) > max
            {
                self.close_part()?;
            }
            let part = self.parts.len();
            let (staged, shown) = (self.staging.join(self.part_rel(part)), self.shown(part));
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            let w = sink.writer(&staged, &shown, self.uploads.as_ref())?;
            w.write(&slice)
                .map_err(|e| WriteError::new(&shown, "parquet", e.to_string()))?;
            sink.mem_in += mem;
            self.records += slice.num_rows() as u64;
            self.part_records += slice.num_rows() as u64;
        }
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
            Sink::Parquet(s) => match s.writer.take() {
                Some(w) => w
                    .into_inner()
                    .map_err(|e| WriteError::new(&path, "parquet", e.to_string()))?,
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
            self.write_pending(1)?;
        }
        let has_open = match &self.sink {
            Sink::Jsonl(s) => s.enc.is_some(),
            Sink::Parquet(s) => s.writer.is_some(),
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
                    s.writer(&staged, &shown, self.uploads.as_ref())?;
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
            w.write_block(&block, &mask).unwrap();
            at += n;
        }
        let written = w.finish().unwrap();
        written
            .paths
            .iter()
            .map(|p| std::fs::read(staging.join(p.strip_prefix(dir.path()).unwrap())).unwrap())
            .collect()
    }

    /// The bytes of a Parquet output depend on the rows kept, never on the blocks they came in
    /// (a distributed run's `write` step reads a shard in other blocks than one process reads
    /// the whole input): pages are cut at the same rows, split parts end at the same rows.
    #[test]
    fn parquet_bytes_do_not_depend_on_the_blocks() {
        use arrow_array::{ArrayRef, Int64Array, StringArray};
        let dir = tempfile::tempdir().unwrap();
        let rows = 3000;
        // Texts of 200 to 5,000 bytes, so a row group's text column passes the 1 MB page limit
        // several times and not at fixed row counts.
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let texts: Vec<String> = (0..rows)
            .map(|i| {
                let len = 200 + (next() % 4800) as usize;
                (0..len)
                    .map(|_| (b'a' + (next() % 26) as u8) as char)
                    .collect::<String>()
                    + &i.to_string()
            })
            .collect();
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
        ])
        .unwrap();
        let path = dir.path().join("in.parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(2000))
            .build();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let input = InputFile::detect(&path, Path::new("in.parquet"), None).unwrap();
        let keep = |i: usize| i % 7 != 3;
        for max in [None, Some(2_000_000)] {
            let one = parquet_output(&input, &batch, &[rows], keep, max);
            assert!(max.is_none() || one.len() > 1, "no split at {max:?}");
            for blocks in [&[1000][..], &[333, 17, 1500], &[1], &[2999, 1]] {
                let other = parquet_output(&input, &batch, blocks, keep, max);
                assert!(
                    other == one,
                    "blocks of {blocks:?} rows (split at {max:?}) changed the bytes"
                );
            }
        }
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
