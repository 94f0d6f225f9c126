//! The stage-1 pipeline: read every input chunk with worker threads, sketch each sample into a
//! row of keys, assemble the rows in input order, and count them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use neardup_corpus::{
    Block, BlockQueue, Chunk, ChunkRange, InputFile, Projection, ReadOptions, SampleText,
    TextSelector, balanced_chunk_bytes, plan_chunks, read_chunk,
};
use neardup_sketch::{Scratch, Sketcher};
use serde::{Deserialize, Serialize};

use crate::count::{CountStats, Counted, SpillCounter, count_in_memory};
use crate::error::KeysError;
use crate::hot::{HotKeys, HotMask};
use crate::row::{RowKind, RowRule};
use crate::table::{
    ChunkRows, FileRows, KeyTable, KeyTableWriter, ShardTables, TableLayout, TableReader,
    check_shards,
};

/// What to do when an input record or file cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Count it, quote it in the report, and go on.
    #[default]
    Skip,
    /// Stop the run at the first problem.
    Fail,
}

/// Settings of stage 1.
#[derive(Clone, Debug)]
pub struct KeysConfig {
    /// How texts become keys.
    pub sketcher: Sketcher,
    /// Which columns a sample fills.
    pub rule: RowRule,
    /// Which fields of a record are the text.
    pub selector: TextSelector,
    /// A key is hot when seen more than this many times (lshcurator's `filter_low_freq_bucket_keys`).
    pub min_count: u32,
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Largest unit of parallel work within a large file (smaller inputs get smaller chunks, see
    /// [`neardup_corpus::balanced_chunk_bytes`]).
    pub chunk_bytes: u64,
    /// Target size of one read block.
    pub block_bytes: usize,
    /// When the key table would exceed this many bytes, spill and count from disk.
    pub memory_limit: Option<u64>,
    /// Where spill files go (the system temp dir when `None`).
    pub spill_dir: Option<PathBuf>,
    /// Bad input policy.
    pub on_error: OnError,
    /// Counters to watch the run by.
    pub progress: Option<std::sync::Arc<crate::Progress>>,
}

impl KeysConfig {
    /// Defaults for everything but the sketcher and the selector.
    pub fn new(sketcher: Sketcher, selector: TextSelector) -> KeysConfig {
        KeysConfig {
            sketcher,
            rule: RowRule::default(),
            selector,
            min_count: 1,
            threads: 0,
            chunk_bytes: 32 << 20,
            block_bytes: 4 << 20,
            memory_limit: None,
            spill_dir: None,
            on_error: OnError::Skip,
            progress: None,
        }
    }

    /// The table layout these settings produce.
    pub fn layout(&self) -> TableLayout {
        let cfg = self.sketcher.config();
        TableLayout {
            sketch_fingerprint: cfg.fingerprint(),
            sketch_description: format!(
                "{:?} num_perm={} seed={} shingles={} bands={}x{} band_keys={:?}",
                cfg.scheme,
                cfg.num_perm,
                cfg.seed,
                cfg.shingler.describe(),
                cfg.lsh.bands,
                cfg.lsh.rows,
                cfg.band_keys
            ),
            bands: self.rule.band_columns(self.sketcher.bands()),
            rule: self.rule,
            selector: self.selector.clone(),
        }
    }

    fn effective_threads(&self) -> usize {
        if self.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.threads
        }
    }
}

/// One quoted input problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The input file.
    pub file: PathBuf,
    /// The record (0-based line or row within the file), when known.
    pub record: Option<u64>,
    /// The field slot, when known.
    pub field: Option<u32>,
    /// Kind, e.g. `malformed_json` or `truncated`.
    pub kind: String,
    /// Details.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(r) = self.record {
            write!(f, ": record {}", r + 1)?;
        }
        if let Some(fl) = self.field {
            write!(f, " field {fl}")?;
        }
        write!(f, ": {}", self.kind)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// How many problems are quoted in full; the rest are only counted.
pub const QUOTED_PROBLEMS: usize = 20;

/// Statistics of a stage-1 run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeysStats {
    /// Input files.
    pub files: u64,
    /// Records read (JSONL lines including blank ones, Parquet rows).
    pub records: u64,
    /// Sample slots with a text (= table rows).
    pub samples: u64,
    /// Samples whose text is empty or whitespace only.
    pub blank_samples: u64,
    /// Samples with no shingle (shorter than the shingle size).
    pub short_samples: u64,
    /// Sample slots skipped, by reason (`malformed_json`, `missing_field`, ...).
    pub skipped: BTreeMap<String, u64>,
    /// Files (or parts of files) that could not be read to the end, by kind.
    pub read_errors: BTreeMap<String, u64>,
    /// The first problems, quoted.
    pub problems: Vec<Problem>,
    /// Input bytes read.
    pub bytes: u64,
    /// Columns per row.
    pub columns: u64,
    /// Key-table bytes per sample.
    pub bytes_per_sample: u64,
    /// Rows with at least one hot key.
    pub hot_samples: u64,
    /// `hot_samples / samples`.
    pub hot_share: f64,
    /// The frequency filter's numbers.
    pub count: CountStats,
    /// Seconds spent reading and sketching.
    pub sketch_seconds: f64,
    /// Seconds spent counting.
    pub count_seconds: f64,
    /// Input MB/s of the read + sketch phase.
    pub mb_per_second: f64,
}

/// Where the table of a run lives.
pub enum TableStore {
    /// The whole table, in memory.
    Memory(KeyTable),
    /// Too large for the memory limit: the rows went to the counter's spill files only.
    Spilled,
}

/// Stage 1's products for one shard of inputs.
pub struct KeysOutput {
    /// The table's settings.
    pub layout: TableLayout,
    /// Per-file record and row counts, in row order.
    pub files: Vec<FileRows>,
    /// The table (unless spilled).
    pub table: TableStore,
    /// The hot keys.
    pub hot: HotKeys,
    /// The hot bit of every key of every row.
    pub mask: HotMask,
    /// Statistics.
    pub stats: KeysStats,
}

struct ChunkOutput {
    keys: Vec<u64>,
    records: u64,
    rows: u64,
    bytes: u64,
    blank: u64,
    short: u64,
    skipped: HashMap<&'static str, u64>,
    /// (chunk-local record, field, kind, message)
    problems: Vec<(Option<u64>, Option<u32>, String, String)>,
    read_error: Option<(String, String)>,
}

impl ChunkOutput {
    fn new() -> ChunkOutput {
        ChunkOutput {
            keys: Vec::new(),
            records: 0,
            rows: 0,
            bytes: 0,
            blank: 0,
            short: 0,
            skipped: HashMap::new(),
            problems: Vec::new(),
            read_error: None,
        }
    }

    /// Appends the output of the blocks that follow this output's in the chunk, as if they had
    /// been sketched into it (chunk-local record numbers, the first problems quoted).
    fn append(&mut self, next: ChunkOutput) {
        let base = self.records;
        if self.keys.is_empty() {
            self.keys = next.keys;
        } else {
            self.keys.extend_from_slice(&next.keys);
        }
        self.records += next.records;
        self.rows += next.rows;
        self.bytes += next.bytes;
        self.blank += next.blank;
        self.short += next.short;
        for (kind, n) in next.skipped {
            *self.skipped.entry(kind).or_default() += n;
        }
        let room = QUOTED_PROBLEMS.saturating_sub(self.problems.len());
        self.problems
            .extend(
                next.problems
                    .into_iter()
                    .take(room)
                    .map(|(record, field, kind, message)| {
                        (record.map(|r| r + base), field, kind, message)
                    }),
            );
        if self.read_error.is_none() {
            self.read_error = next.read_error;
        }
    }
}

/// Per-thread sketching buffers.
struct Worker {
    /// One scratch per thread, not per chunk: its buffers grow to the largest text seen
    /// (megabytes for a big page), and growing them again for every chunk cost page faults and
    /// copies.
    scratch: Scratch,
    sig: Vec<u32>,
}

impl Worker {
    fn new(cfg: &KeysConfig) -> Worker {
        Worker {
            scratch: Scratch::default(),
            sig: vec![0u32; cfg.sketcher.num_perm()],
        }
    }
}

fn read_options(cfg: &KeysConfig) -> ReadOptions {
    ReadOptions {
        selector: cfg.selector.clone(),
        projection: Projection::TextOnly,
        block_bytes: cfg.block_bytes,
    }
}

/// Reads and sketches one chunk into rows, block by block on this thread.
fn sketch_chunk(
    file: &InputFile,
    chunk: &Chunk,
    cfg: &KeysConfig,
    stop: &AtomicBool,
    worker: &mut Worker,
) -> ChunkOutput {
    let mut out = ChunkOutput::new();
    out.read_error = for_each_block(file, chunk, cfg, stop, |block| {
        sketch_block(&block, cfg, worker, &mut out)
    });
    out
}

/// Hands a chunk's blocks to `each` in order until the chunk ends, `stop` is set, or a block
/// cannot be read: then returns the error (kind, message).
fn for_each_block(
    file: &InputFile,
    chunk: &Chunk,
    cfg: &KeysConfig,
    stop: &AtomicBool,
    mut each: impl FnMut(Block),
) -> Option<(String, String)> {
    for block in read_chunk(file, chunk, &read_options(cfg)) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match block {
            Ok(block) => each(block),
            Err(e) => return Some((e.kind().to_string(), e.to_string())),
        }
    }
    None
}

/// Sketches one block's samples into `out`, after the records `out` already holds.
fn sketch_block(block: &Block, cfg: &KeysConfig, worker: &mut Worker, out: &mut ChunkOutput) {
    let columns = cfg.rule.columns(cfg.sketcher.bands());
    let Worker { scratch, sig } = worker;
    out.bytes += block.input_bytes();
    let first = out.records;
    let rows_before = out.rows;
    block.for_each_sample(&cfg.selector, |sample| match sample.text {
        SampleText::Text(text) => {
            let start = out.keys.len();
            out.keys.resize(start + columns, 0);
            let r = cfg
                .rule
                .sketch(&cfg.sketcher, &text, scratch, sig, &mut out.keys[start..]);
            out.rows += 1;
            match r.kind {
                RowKind::Blank => out.blank += 1,
                RowKind::Short => out.short += 1,
                RowKind::Normal => {}
            }
        }
        SampleText::Skipped(reason) => {
            *out.skipped.entry(reason.kind()).or_default() += 1;
            if out.problems.len() < QUOTED_PROBLEMS {
                out.problems.push((
                    Some(first + sample.record as u64),
                    Some(sample.field),
                    reason.kind().to_string(),
                    format!("{reason:?}"),
                ));
            }
        }
    });
    out.records += block.num_records() as u64;
    if let Some(p) = &cfg.progress {
        p.add(block.input_bytes(), out.rows - rows_before);
    }
}

/// A block of a whole-file chunk, waiting for any thread to sketch it.
struct BlockJob {
    block: Block,
    /// Its place in the chunk.
    seq: usize,
    /// Where its output goes: the thread reading its chunk.
    results: crossbeam_channel::Sender<(usize, ChunkOutput)>,
}

impl BlockJob {
    fn run(self, cfg: &KeysConfig, worker: &mut Worker) {
        let mut out = ChunkOutput::new();
        sketch_block(&self.block, cfg, worker, &mut out);
        drop(self.block);
        // The reader waits for every block it handed out, so it is still listening.
        let _ = self.results.send((self.seq, out));
    }
}

/// Reads one whole-file chunk on this thread and hands its blocks to a [`BlockQueue`], where this
/// thread and the threads without a chunk sketch them; the outputs are put back in block order,
/// so the chunk's rows are exactly those of [`sketch_chunk`].
fn sketch_chunk_shared(
    file: &InputFile,
    chunk: &Chunk,
    cfg: &KeysConfig,
    stop: &AtomicBool,
    worker: &mut Worker,
    shared: &BlockQueue<BlockJob>,
) -> ChunkOutput {
    /// Block outputs put back in order.
    struct InOrder {
        out: ChunkOutput,
        pending: BTreeMap<usize, ChunkOutput>,
        next: usize,
    }
    impl InOrder {
        fn take(&mut self, (seq, o): (usize, ChunkOutput)) {
            self.pending.insert(seq, o);
            while let Some(o) = self.pending.remove(&self.next) {
                self.out.append(o);
                self.next += 1;
            }
        }
    }
    let (tx, rx) = crossbeam_channel::unbounded::<(usize, ChunkOutput)>();
    let mut done = InOrder {
        out: ChunkOutput::new(),
        pending: BTreeMap::new(),
        next: 0,
    };
    let mut handed_out = 0usize;
    let read_error = for_each_block(file, chunk, cfg, stop, |block| {
        let job = BlockJob {
            block,
            seq: handed_out,
            results: tx.clone(),
        };
        handed_out += 1;
        if let Some(oldest) = shared.push(job) {
            oldest.run(cfg, worker);
        }
        while let Ok(result) = rx.try_recv() {
            done.take(result);
        }
    });
    drop(tx);
    while done.next < handed_out {
        // Queued blocks (this chunk's or another's) are sketched here while any are left; once
        // none is queued, this chunk's missing blocks are being sketched by other threads.
        match shared.try_pop() {
            Some(job) => job.run(cfg, worker),
            None => done.take(rx.recv().expect("every handed-out block sends its output")),
        }
        while let Ok(result) = rx.try_recv() {
            done.take(result);
        }
    }
    let mut out = done.out;
    // A read error ends the chunk after the blocks read before it, as in `sketch_chunk`.
    if out.read_error.is_none() {
        out.read_error = read_error;
    }
    out
}

/// Where assembled rows go.
enum Sink {
    Memory(Vec<u64>),
    Spill(SpillCounter),
    File(KeyTableWriter),
}

/// Runs stage 1 over `files` (one shard): sketches every sample, counts the keys and finds the hot
/// ones. Rows come out in input order whatever the thread count.
pub fn run_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
) -> Result<KeysOutput, KeysError> {
    let layout = cfg.layout();
    let columns = layout.columns();
    let content_col = layout.rule.exact_key.then(|| columns - 1);
    let threads = cfg.effective_threads();
    let Sketched {
        mut stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, cfg, Sink::Memory(Vec::new()))?;

    let count_started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| KeysError::Config(format!("cannot start {threads} threads: {e}")))?;
    let (counted, table) = match sink {
        Sink::Memory(keys) => {
            let counted = if keys.is_empty() {
                count_in_memory(&[], columns, cfg.min_count, content_col)
            } else {
                pool.install(|| count_in_memory(&keys, columns, cfg.min_count, content_col))
            };
            let table = KeyTable::new(layout.clone(), shard, file_rows.clone(), keys)?;
            (counted, TableStore::Memory(table))
        }
        Sink::Spill(counter) => (counter.finish(cfg.min_count)?, TableStore::Spilled),
        Sink::File(_) => unreachable!("run_keys keeps its rows in memory or spills them"),
    };
    stats.count_seconds = count_started.elapsed().as_secs_f64();
    let Counted {
        hot_keys,
        mask,
        stats: count_stats,
    } = counted;
    stats.count = count_stats;
    stats.hot_samples = mask.hot_rows() as u64;
    stats.hot_share = if stats.samples == 0 {
        0.0
    } else {
        stats.hot_samples as f64 / stats.samples as f64
    };
    Ok(KeysOutput {
        hot: HotKeys::new(layout.clone(), cfg.min_count, hot_keys),
        layout,
        files: file_rows,
        table,
        mask,
        stats,
    })
}

/// Stage 1 of one shard straight to a key-table file (the `keys` step of a distributed run): the
/// rows stream to disk as they are assembled, so memory stays bounded however large the shard
/// (`cfg.memory_limit` does not apply: nothing grows but the per-file row counts). Nothing is
/// counted: hot keys come from merging all shards' tables ([`merge_table_files`]). The file is
/// byte-identical to [`KeyTable::save`] of [`run_keys`]' table, and is written atomically.
pub fn write_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
    path: &std::path::Path,
) -> Result<KeysStats, KeysError> {
    let layout = cfg.layout();
    let writer = KeyTableWriter::create(path, layout.columns())?;
    let Sketched {
        stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, cfg, Sink::File(writer))?;
    let Sink::File(writer) = sink else {
        unreachable!("a file sink stays a file sink")
    };
    writer.finish(layout, shard, file_rows)?;
    Ok(stats)
}

/// Stage 1 of one shard into an in-memory [`KeyTable`], without counting (the shard's own hot keys
/// are of no use when all shards' tables are merged): for a scheduler that keeps tables as values.
/// `cfg.memory_limit` does not apply; [`write_keys`] streams a table of any size to a file.
pub fn collect_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
) -> Result<(KeyTable, KeysStats), KeysError> {
    let mut cfg = cfg.clone();
    cfg.memory_limit = None;
    let Sketched {
        stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, &cfg, Sink::Memory(Vec::new()))?;
    let Sink::Memory(keys) = sink else {
        unreachable!("without a memory limit the rows stay in memory")
    };
    Ok((KeyTable::new(cfg.layout(), shard, file_rows, keys)?, stats))
}

/// What [`sketch_rows`] leaves: the run's statistics so far, the per-file row counts and the sink
/// holding the rows.
struct Sketched {
    stats: KeysStats,
    files: Vec<FileRows>,
    sink: Sink,
}

/// Reads and sketches every chunk with worker threads and hands the rows, in input order, to
/// `sink`.
fn sketch_rows(files: &[InputFile], cfg: &KeysConfig, sink: Sink) -> Result<Sketched, KeysError> {
    cfg.sketcher
        .config()
        .validate()
        .map_err(|e| KeysError::Config(e.to_string()))?;
    let columns = cfg.layout().columns();
    let threads = cfg.effective_threads();
    let chunks = plan_chunks(files, balanced_chunk_bytes(files, cfg.chunk_bytes));
    let started = Instant::now();
    if let Some(p) = &cfg.progress {
        p.set_total(files.iter().map(|f| f.size).sum());
    }

    let mut stats = KeysStats {
        files: files.len() as u64,
        columns: columns as u64,
        bytes_per_sample: 8 * columns as u64,
        ..KeysStats::default()
    };
    let mut file_rows: Vec<FileRows> = files
        .iter()
        .map(|f| FileRows {
            input: f.clone(),
            records: 0,
            rows: 0,
            chunks: Vec::new(),
        })
        .collect();
    let mut sink = sink;
    let budget = cfg.memory_limit;
    let mut first_error: Option<KeysError> = None;

    // Workers claim chunks in order but may run at most `window` chunks ahead of the collector,
    // which bounds the memory held by finished-but-not-yet-assembled chunks.
    let window = threads * 2;
    let next_chunk = AtomicUsize::new(0);
    let collected = Mutex::new(0usize);
    let progress = Condvar::new();
    let stop = AtomicBool::new(false);
    let (tx, rx) = crossbeam_channel::bounded::<(usize, ChunkOutput)>(window);

    // Blocks of whole-file chunks (compressed JSONL, small files, Parquet files of one row group)
    // are sketched by every thread without a chunk of its own (neardup_corpus::BlockQueue).
    let shared = BlockQueue::<BlockJob>::new(chunks.len(), threads);

    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next_chunk, collected, progress, stop, chunks, shared) =
                (&next_chunk, &collected, &progress, &stop, &chunks, &shared);
            scope.spawn(move || {
                let mut worker = Worker::new(cfg);
                loop {
                    let i = next_chunk.fetch_add(1, Ordering::Relaxed);
                    if i >= chunks.len() {
                        // No chunk left to claim: sketch other threads' whole-file blocks.
                        shared.help(stop, |job| job.run(cfg, &mut worker));
                        break;
                    }
                    {
                        let mut done = collected.lock().expect("collector lock");
                        while i >= *done + window && !stop.load(Ordering::Relaxed) {
                            done = progress.wait(done).expect("collector lock");
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let chunk = &chunks[i];
                    let file = &files[chunk.file];
                    let out = if threads > 1 && chunk.range == ChunkRange::Whole {
                        sketch_chunk_shared(file, chunk, cfg, stop, &mut worker, shared)
                    } else {
                        sketch_chunk(file, chunk, cfg, stop, &mut worker)
                    };
                    shared.chunk_finished();
                    if tx.send((i, out)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);

        let mut pending: BTreeMap<usize, ChunkOutput> = BTreeMap::new();
        let mut next = 0usize;
        for (i, out) in rx.iter() {
            pending.insert(i, out);
            while let Some(out) = pending.remove(&next) {
                let chunk = &chunks[next];
                if first_error.is_none()
                    && let Err(e) = absorb(
                        chunk,
                        out,
                        files,
                        cfg,
                        &mut stats,
                        &mut file_rows,
                        &mut sink,
                        columns,
                        budget,
                    )
                {
                    first_error = Some(e);
                    stop.store(true, Ordering::Relaxed);
                }
                next += 1;
                *collected.lock().expect("collector lock") = next;
                progress.notify_all();
            }
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    stats.sketch_seconds = started.elapsed().as_secs_f64();
    stats.mb_per_second = stats.bytes as f64 / 1e6 / stats.sketch_seconds.max(1e-9);
    Ok(Sketched {
        stats,
        files: file_rows,
        sink,
    })
}

/// Folds one finished chunk, in order, into the run.
#[allow(clippy::too_many_arguments)]
fn absorb(
    chunk: &Chunk,
    out: ChunkOutput,
    files: &[InputFile],
    cfg: &KeysConfig,
    stats: &mut KeysStats,
    file_rows: &mut [FileRows],
    sink: &mut Sink,
    columns: usize,
    budget: Option<u64>,
) -> Result<(), KeysError> {
    let fr = &mut file_rows[chunk.file];
    let record_base = fr.records;
    let path = &files[chunk.file].path;
    for (record, field, kind, message) in out.problems {
        let problem = Problem {
            file: path.clone(),
            record: record.map(|r| r + record_base),
            field,
            kind,
            message,
        };
        if cfg.on_error == OnError::Fail {
            return Err(KeysError::Input(problem.to_string()));
        }
        if stats.problems.len() < QUOTED_PROBLEMS {
            stats.problems.push(problem);
        }
    }
    fr.chunks.push(ChunkRows {
        range: chunk.range.clone(),
        records: out.records,
        rows: out.rows,
        read_error: out.read_error.is_some(),
    });
    if let Some((kind, message)) = out.read_error {
        let problem = Problem {
            file: path.clone(),
            record: Some(record_base + out.records),
            field: None,
            kind: kind.clone(),
            message,
        };
        if cfg.on_error == OnError::Fail {
            return Err(KeysError::Input(problem.to_string()));
        }
        *stats.read_errors.entry(kind).or_default() += 1;
        if stats.problems.len() < QUOTED_PROBLEMS {
            stats.problems.push(problem);
        }
    }
    for (kind, n) in out.skipped {
        *stats.skipped.entry(kind.to_string()).or_default() += n;
    }
    fr.records += out.records;
    fr.rows += out.rows;
    stats.records += out.records;
    stats.samples += out.rows;
    stats.blank_samples += out.blank;
    stats.short_samples += out.short;
    stats.bytes += out.bytes;

    if let Sink::Memory(keys) = sink {
        let would_hold = (keys.len() + out.keys.len()) as u64 * 8;
        if let Some(limit) = budget
            && would_hold > limit / 2
        {
            // The table no longer fits beside the counting buffers: move what we hold to spill
            // files and stream the rest there.
            let content_col = cfg.rule.exact_key.then(|| columns - 1);
            let mut counter =
                SpillCounter::new(cfg.spill_dir.as_deref(), columns, content_col, limit / 2)?;
            counter.push_rows(keys)?;
            *sink = Sink::Spill(counter);
        }
    }
    match sink {
        Sink::Memory(keys) => keys.extend_from_slice(&out.keys),
        Sink::Spill(counter) => counter.push_rows(&out.keys)?,
        Sink::File(writer) => writer.push_rows(&out.keys)?,
    }
    Ok(())
}

/// Like [`merge_tables`] over saved tables, without holding them: each file is read
/// sequentially (rows in shard order, checksums verified), and its keys go to an in-memory count
/// when all shards' keys fit in `memory_limit` (or there is no limit), else to a
/// [`SpillCounter`] under `spill_dir` that counts partition by partition within the limit. The
/// hot keys and mask are the same either way.
pub fn merge_table_files(
    tables: &ShardTables,
    min_count: u32,
    memory_limit: Option<u64>,
    spill_dir: Option<&std::path::Path>,
) -> Result<(HotKeys, HotMask, CountStats), KeysError> {
    let columns = tables.layout.columns();
    let content_col = tables.layout.rule.exact_key.then(|| columns - 1);
    let total_keys = tables.total_keys();
    let counted = match memory_limit.filter(|&limit| total_keys.saturating_mul(8) > limit) {
        Some(limit) => {
            let mut counter = SpillCounter::new(spill_dir, columns, content_col, limit / 2)?;
            let mut block = Vec::new();
            let rows_per_block = ((1usize << 20) / columns).max(1) * columns;
            for p in &tables.paths {
                let mut reader = TableReader::open(p)?;
                loop {
                    block.clear();
                    if reader.read_keys(rows_per_block, &mut block)? == 0 {
                        break;
                    }
                    counter.push_rows(&block)?;
                }
                reader.finish()?;
            }
            counter.finish(min_count)?
        }
        None => {
            let mut all = Vec::with_capacity(total_keys as usize);
            for p in &tables.paths {
                let mut reader = TableReader::open(p)?;
                reader.read_keys(usize::MAX, &mut all)?;
                reader.finish()?;
            }
            count_in_memory(&all, columns, min_count, content_col)
        }
    };
    Ok((
        HotKeys::new(tables.layout.clone(), min_count, counted.hot_keys),
        counted.mask,
        counted.stats,
    ))
}

/// Counts several shards' tables together (the `hot` step of a distributed run): the hot keys of
/// the union, and each table's rows' hot mask, concatenated in shard order.
///
/// Takes the tables themselves or references to them (`&[KeyTable]`, `&[&KeyTable]`), so callers
/// holding tables elsewhere need not copy them.
pub fn merge_tables<T: std::borrow::Borrow<KeyTable>>(
    tables: &[T],
    min_count: u32,
) -> Result<(HotKeys, HotMask, CountStats), KeysError> {
    let layout = check_shards(
        tables
            .iter()
            .map(|t| (t.borrow().shard(), t.borrow().layout())),
    )?;
    let mut ordered: Vec<&KeyTable> = tables.iter().map(|t| t.borrow()).collect();
    ordered.sort_by_key(|t| t.shard());
    let mut all = Vec::with_capacity(ordered.iter().map(|t| t.keys().len()).sum());
    for t in &ordered {
        all.extend_from_slice(t.keys());
    }
    let columns = layout.columns();
    let content_col = layout.rule.exact_key.then(|| columns - 1);
    let counted = count_in_memory(&all, columns, min_count, content_col);
    Ok((
        HotKeys::new(layout.clone(), min_count, counted.hot_keys),
        counted.mask,
        counted.stats,
    ))
}
