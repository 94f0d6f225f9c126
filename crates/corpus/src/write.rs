//! Writing filtered copies of input files, atomically, optionally split into size-bounded parts.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterVersion};
use tempfile::{NamedTempFile, TempPath};

use crate::error::WriteError;
use crate::format::{Compression, Format, InputFile, format_suffix_len};
use crate::read::{Block, BlockData};

/// Buffer between encoders and the temp file; large writes keep syscalls rare.
const WRITE_BUF: usize = 1 << 20;
/// Rows per Parquet write when splitting, so a part can end close to the size limit.
const SPLIT_SLICE_ROWS: usize = 1024;

/// Where and how outputs are written.
#[derive(Clone, Debug)]
pub struct OutputOptions {
    /// Output directory; outputs go to `<dir>/<input.relative>`.
    pub dir: PathBuf,
    /// Allow an existing non-empty directory (see [`OutputDir::create`]).
    pub overwrite: bool,
    /// Split each output into parts of at most this many bytes (see [`FileWriter`]).
    pub max_output_bytes: Option<u64>,
}

/// An output directory that hands out one [`FileWriter`] per input file. Sync: share it between
/// threads by reference.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    max_output_bytes: Option<u64>,
    claimed: Mutex<HashSet<PathBuf>>,
}

impl OutputDir {
    /// Creates the directory (and parents). An existing non-empty directory is refused
    /// (`"exists"`) unless `overwrite`; with `overwrite` nothing is deleted up front — each output
    /// atomically replaces its own files when finished (and removes stale split parts of the same
    /// output left by an earlier run), while unrelated files are left alone.
    pub fn create(opts: &OutputOptions) -> Result<OutputDir, WriteError> {
        let dir = &opts.dir;
        match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() && !opts.overwrite {
                    return Err(WriteError::new(
                        dir,
                        "exists",
                        "output directory exists and is not empty (use overwrite)",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|e| WriteError::io(dir, e))?
            }
            Err(e) => return Err(WriteError::io(dir, e)),
        }
        Ok(OutputDir {
            dir: dir.clone(),
            max_output_bytes: opts.max_output_bytes,
            claimed: Mutex::new(HashSet::new()),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
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
        let base = self.dir.join(rel);
        if !self
            .claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(base.clone())
        {
            return Err(WriteError::new(
                &base,
                "duplicate_output",
                "two inputs map to the same output path",
            ));
        }
        if let Some(parent) = base.parent() {
            std::fs::create_dir_all(parent).map_err(|e| WriteError::io(parent, e))?;
        }
        let sink = match input.format {
            Format::Jsonl => Sink::Jsonl(Box::new(JsonlSink {
                compression: input.compression,
                enc: None,
                since_flush: 0,
            })),
            Format::Parquet => Sink::Parquet(Box::new(ParquetSink::for_input(input, &base)?)),
        };
        Ok(FileWriter {
            base,
            max: self.max_output_bytes,
            parts: Vec::new(),
            sink,
            records: 0,
            part_records: 0,
        })
    }
}

/// Creates a temp file next to `target` (same directory, so the final rename is atomic).
pub(crate) fn temp_beside(target: &Path) -> io::Result<NamedTempFile> {
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty());
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Outputs are data files for other tools, not secrets: the usual rw-r--r-- (less the umask),
    // not the 0600 a temporary file gets by default.
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir.unwrap_or(Path::new(".")))
}

/// Makes a rename durable.
pub(crate) fn sync_dir(path: &Path) {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Ok(d) = File::open(dir.unwrap_or(Path::new("."))) {
        // Some filesystems refuse fsync on directories; the rename itself already happened.
        let _ = d.sync_all();
    }
}

/// Name of split part `k` of `base`: part 0 is `base` itself, part k ≥ 1 is
/// `<stem>-<k><suffix>` where suffix is the format extension (`part-00000.jsonl.gz` ->
/// `part-00000-1.jsonl.gz`).
pub(crate) fn part_path(base: &Path, k: usize) -> PathBuf {
    if k == 0 {
        return base.to_path_buf();
    }
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cut = name.len() - format_suffix_len(&name);
    base.with_file_name(format!("{}-{k}{}", &name[..cut], &name[cut..]))
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

type Out = Counting<BufWriter<NamedTempFile>>;

enum Enc {
    Plain(Out),
    Gzip(flate2::write::GzEncoder<Out>),
    Zstd(zstd::stream::write::Encoder<'static, Out>),
}

impl Enc {
    fn new(compression: Compression, f: NamedTempFile) -> io::Result<Enc> {
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

    fn finish(self) -> io::Result<NamedTempFile> {
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
    writer: Option<ArrowWriter<NamedTempFile>>,
    /// In-memory bytes given to the current part's writer, to estimate its encoded ratio.
    mem_in: u64,
    /// Footer size estimate: a fixed part (schema, key-value metadata) plus a part per row group
    /// (column chunk metadata with truncated statistics), which the encoder's running size omits.
    footer_base: u64,
    footer_per_group: u64,
}

impl ParquetSink {
    fn for_input(input: &InputFile, base: &Path) -> Result<ParquetSink, WriteError> {
        let (_, meta) = crate::parquet_read::load(&input.path)
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
            // The embedded Arrow schema is about as large as the input's; 256 bytes per leaf
            // covers a column chunk's metadata with two 64-byte statistics values.
            footer_base: 1024 + kv_bytes + 64 * leaves,
            footer_per_group: 256 * leaves,
        })
    }

    fn writer(
        &mut self,
        base: &Path,
        part: usize,
    ) -> Result<&mut ArrowWriter<NamedTempFile>, WriteError> {
        if self.writer.is_none() {
            let path = part_path(base, part);
            let f = temp_beside(&path).map_err(|e| WriteError::io(&path, e))?;
            let w = ArrowWriter::try_new(f, self.schema.clone(), Some(self.props.clone()))
                .map_err(|e| WriteError::new(&path, "parquet", e.to_string()))?;
            self.writer = Some(w);
            self.mem_in = 0;
        }
        Ok(self.writer.as_mut().expect("just created"))
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

/// Writes the output of one input file. Parts are written under temporary names in the output
/// directory; `finish` flushes, fsyncs and renames them all. Dropped without finish -> the temp
/// files are removed; never a final-named partial file. Send.
///
/// Splitting (`max_output_bytes`): a new part starts before a record that would push the current
/// part over the limit; a single record larger than the limit gets a part of its own. Parts are
/// `part-00000.jsonl`, `part-00000-1.jsonl`, `part-00000-2.jsonl`, … (see the suffix rule in
/// `docs/formats.md`). JSONL limits are exact for plain files and a guaranteed upper bound for
/// gzip/zstd (the encoder is flushed near the limit to learn its real size); Parquet sizes are
/// estimated from the encoder's buffered size, so a Parquet part can exceed the limit by about
/// one 1024-row slice.
pub struct FileWriter {
    base: PathBuf,
    max: Option<u64>,
    /// Finished (fsynced, closed) temp files of earlier parts.
    parts: Vec<TempPath>,
    sink: Sink,
    records: u64,
    part_records: u64,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("base", &self.base)
            .field("parts_done", &self.parts.len())
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

/// What [`FileWriter::finish`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenFile {
    /// Final paths, in order (more than one if split by max_output_bytes).
    pub paths: Vec<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Bytes on disk, all parts.
    pub bytes: u64,
}

impl FileWriter {
    /// Blocks must come in record order. `keep.len() == block.num_records()`. JSONL: kept lines
    /// copied byte for byte (blank lines are passed through when keep is true). Parquet: arrow
    /// filter kernel. The block must have been read with Projection::FullRecords.
    pub fn write_block(&mut self, block: &Block, keep: &[bool]) -> Result<(), WriteError> {
        if keep.len() != block.num_records() {
            return Err(WriteError::new(
                &self.base,
                "invalid_block",
                format!(
                    "mask has {} entries for a block of {} records",
                    keep.len(),
                    block.num_records()
                ),
            ));
        }
        match (&mut self.sink, &block.data) {
            (Sink::Jsonl(_), BlockData::Jsonl { bytes, starts }) => {
                self.write_lines(bytes, starts, keep)
            }
            (Sink::Parquet(_), BlockData::Parquet { batch, full, .. }) => {
                if !full {
                    return Err(WriteError::new(
                        &self.base,
                        "invalid_block",
                        "block was read with Projection::TextOnly; writing needs FullRecords",
                    ));
                }
                self.write_batch(batch, keep)
            }
            _ => Err(WriteError::new(
                &self.base,
                "invalid_block",
                "block format differs from the output format",
            )),
        }
    }

    fn io<T>(&self, r: io::Result<T>) -> Result<T, WriteError> {
        r.map_err(|e| WriteError::io(&part_path(&self.base, self.parts.len()), e))
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
        let Sink::Jsonl(sink) = &mut self.sink else {
            unreachable!("checked above");
        };
        if sink.enc.is_none() {
            let path = part_path(&self.base, part);
            let f = temp_beside(&path).map_err(|e| WriteError::io(&path, e))?;
            let enc = Enc::new(sink.compression, f).map_err(|e| WriteError::io(&path, e))?;
            sink.enc = Some(enc);
        }
        let enc = sink.enc.as_mut().expect("just created");
        let r = enc.writer().write_all(run);
        if !matches!(enc, Enc::Plain(_)) {
            sink.since_flush += run.len() as u64;
        }
        self.io(r)?;
        self.records += lines;
        self.part_records += lines;
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, keep: &[bool]) -> Result<(), WriteError> {
        let Sink::Parquet(sink) = &mut self.sink else {
            unreachable!("write_batch is only called for Parquet sinks");
        };
        if batch.schema().fields() != sink.schema.fields() {
            return Err(WriteError::new(
                &self.base,
                "invalid_block",
                "block schema differs from the input file's schema",
            ));
        }
        let filtered = if keep.iter().all(|&k| k) {
            batch.clone()
        } else {
            arrow_select::filter::filter_record_batch(batch, &BooleanArray::from(keep.to_vec()))
                .map_err(|e| WriteError::new(&self.base, "parquet", e.to_string()))?
        };
        // The writer must use the file's schema (with its metadata), not the batch's.
        let filtered = filtered
            .with_schema(sink.schema.clone())
            .map_err(|e| WriteError::new(&self.base, "invalid_block", e.to_string()))?;
        let step = if self.max.is_some() {
            SPLIT_SLICE_ROWS
        } else {
            filtered.num_rows().max(1)
        };
        let mut off = 0;
        while off < filtered.num_rows() {
            let slice = filtered.slice(off, step.min(filtered.num_rows() - off));
            off += slice.num_rows();
            let mem = slice.get_array_memory_size() as u64;
            if let Some(max) = self.max
                && self.part_records > 0
            {
                let Sink::Parquet(sink) = &self.sink else {
                    unreachable!("checked above");
                };
                if sink.projected(mem) > max {
                    self.close_part()?;
                }
            }
            let part = self.parts.len();
            let Sink::Parquet(sink) = &mut self.sink else {
                unreachable!("checked above");
            };
            let w = sink.writer(&self.base, part)?;
            w.write(&slice).map_err(|e| {
                WriteError::new(&part_path(&self.base, part), "parquet", e.to_string())
            })?;
            sink.mem_in += mem;
            self.records += slice.num_rows() as u64;
            self.part_records += slice.num_rows() as u64;
        }
        Ok(())
    }

    /// Finishes the current part's encoder, fsyncs it and keeps it as a temp path.
    fn close_part(&mut self) -> Result<(), WriteError> {
        let path = part_path(&self.base, self.parts.len());
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
        file.as_file()
            .sync_all()
            .map_err(|e| WriteError::io(&path, e))?;
        self.parts.push(file.into_temp_path());
        self.part_records = 0;
        Ok(())
    }

    /// Flushes, fsyncs and renames every part to its final name; an input with no kept record
    /// still gets one (empty, valid) output file. Stale split parts of the same output from an
    /// earlier run are removed.
    pub fn finish(mut self) -> Result<WrittenFile, WriteError> {
        let has_open = match &self.sink {
            Sink::Jsonl(s) => s.enc.is_some(),
            Sink::Parquet(s) => s.writer.is_some(),
        };
        if !has_open && self.parts.is_empty() {
            // Create an empty part so the output exists with the right format.
            match &mut self.sink {
                Sink::Jsonl(s) => {
                    let f = temp_beside(&self.base).map_err(|e| WriteError::io(&self.base, e))?;
                    s.enc = Some(
                        Enc::new(s.compression, f).map_err(|e| WriteError::io(&self.base, e))?,
                    );
                }
                Sink::Parquet(s) => {
                    s.writer(&self.base, 0)?;
                }
            }
        }
        self.close_part()?;
        let mut paths = Vec::with_capacity(self.parts.len());
        let mut bytes = 0;
        for (k, tmp) in std::mem::take(&mut self.parts).into_iter().enumerate() {
            let path = part_path(&self.base, k);
            tmp.persist(&path)
                .map_err(|e| WriteError::io(&path, e.error))?;
            bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            paths.push(path);
        }
        let mut k = paths.len();
        loop {
            let stale = part_path(&self.base, k);
            if std::fs::remove_file(&stale).is_err() {
                break;
            }
            k += 1;
        }
        sync_dir(&self.base);
        Ok(WrittenFile {
            paths,
            records: self.records,
            bytes,
        })
    }
}

/// Generic atomic file (temp in same dir + fsync + rename), used for reports, key tables, etc.
/// Dropped without `commit`, the temp file is removed and the target is untouched.
pub struct AtomicFile {
    path: PathBuf,
    out: BufWriter<NamedTempFile>,
}

impl std::fmt::Debug for AtomicFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AtomicFile {
    /// Starts writing `path` (its directory must exist).
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        Ok(AtomicFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(WRITE_BUF, temp_beside(path)?),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, fsyncs and renames to the final path.
    pub fn commit(self) -> io::Result<()> {
        let f = self.out.into_inner().map_err(|e| e.into_error())?;
        f.as_file().sync_all()?;
        f.persist(&self.path).map_err(|e| e.error)?;
        sync_dir(&self.path);
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names() {
        let b = Path::new("/o/sub/part-00000.jsonl.gz");
        assert_eq!(part_path(b, 0), b);
        assert_eq!(part_path(b, 1), Path::new("/o/sub/part-00000-1.jsonl.gz"));
        assert_eq!(
            part_path(Path::new("x.parquet"), 12),
            Path::new("x-12.parquet")
        );
        assert_eq!(part_path(Path::new("noext"), 2), Path::new("noext-2"));
    }
}
