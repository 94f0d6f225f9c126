//! The stage-1 pipeline: read every input chunk with worker threads, sketch each sample into a
//! row of keys, assemble the rows in input order, and count them. The threads, their order and
//! their look-ahead are `neardup_exec::run_ordered`'s; this module says what a block becomes
//! ([`SketchWork`]) and folds each chunk's blocks into the run ([`absorb`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use neardup_corpus::{
    AtomicFile, Block, Chunk, ChunkRange, FieldsSeen, InputFile, Projection, ReadOptions,
    SampleText, TextSelector, Unreadable, UnreadableRange, balanced_chunk_bytes, plan_chunks,
    read_chunk, record_fields,
};
use neardup_exec::{
    CancelToken, ChunkWork, Completion, Event, ExecOptions, OnError, StepControl, run_ordered,
};
use neardup_sketch::{Scratch, Sketcher};
use serde::{Deserialize, Serialize};

use crate::count::{CountStats, Counted, SpillCounter, count_in_memory, count_in_memory_until};
use crate::error::{InputFailure, KeysError, KeysSettingsError, Problem};
use crate::hot::{HotKeys, HotMask};
use crate::places::{RecordPlaces, places_budget};
use crate::prior::{HotRule, PriorKeys};
use crate::row::{KnownRows, RowKind, RowRule};
use crate::row_cache::RowCache;
use crate::table::{
    ChunkRows, FileRows, KeyTable, KeyTableWriter, ShardTables, TableLayout, TableReader,
    check_shards,
};

/// Largest unit of parallel work within a large file, by default: 32 MiB.
pub const DEFAULT_CHUNK_BYTES: u64 = 32 << 20;
/// A key is hot when seen more than this many times, by default: seen twice.
pub const DEFAULT_MIN_COUNT: u32 = 1;

/// Settings of stage 1: what it computes. The handles a caller watches and stops one run by
/// are passed beside them ([`StepControl`]).
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
    /// Bytes of blocks read and not yet folded into the table, at most (see
    /// [`neardup_exec::ExecOptions::block_memory`]); `None`: bounded by the look-ahead only.
    pub block_memory: Option<u64>,
    /// When the key table would exceed this many bytes, spill and count from disk.
    pub memory_limit: Option<u64>,
    /// Where spill files go (the system temp dir when `None`).
    pub spill_dir: Option<PathBuf>,
    /// Bad input policy.
    pub on_error: OnError,
    /// Keys of earlier runs that count towards this run's hot keys (`--against` a saved index):
    /// each counts once more.
    pub prior: Option<std::sync::Arc<PriorKeys>>,
}

impl KeysConfig {
    /// Defaults for everything but the sketcher and the selector.
    pub fn new(sketcher: Sketcher, selector: TextSelector) -> KeysConfig {
        KeysConfig {
            sketcher,
            rule: RowRule::default(),
            selector,
            min_count: DEFAULT_MIN_COUNT,
            threads: 0,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            block_bytes: ReadOptions::DEFAULT_BLOCK_BYTES,
            block_memory: None,
            memory_limit: None,
            spill_dir: None,
            on_error: OnError::default(),
            prior: None,
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

/// How many problems are quoted in full; the rest are only counted.
pub const QUOTED_PROBLEMS: usize = 20;

/// Statistics of a stage-1 run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeysStats {
    /// Input files.
    pub files: u64,
    /// Records read (JSONL lines including blank ones, Parquet rows).
    pub records: u64,
    /// Records that could not be read, as far as their number is known (see `unreadable`).
    #[serde(default)]
    pub records_unreadable: u64,
    /// Every part of a file that could not be read, in input order.
    #[serde(default)]
    pub unreadable: Vec<UnreadableRange>,
    /// Sample slots with a text (= table rows).
    pub samples: u64,
    /// Samples whose text is empty or whitespace only.
    pub blank_samples: u64,
    /// Samples with no shingle (shorter than the shingle size).
    pub short_samples: u64,
    /// Samples whose row was taken from an earlier exact copy of their text, not signed again.
    /// How many depends on the threads' timing (the rows do not), so it stays out of the
    /// report, whose counts are the same on every run of the same work.
    #[serde(skip)]
    pub reused_samples: u64,
    /// Sample slots skipped, by reason (`malformed_json`, `missing_field`, ...).
    pub skipped: BTreeMap<String, u64>,
    /// Parts of files that could not be read, by kind (one per entry of `unreadable`).
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

/// The rows and counts of one block, sketched by a worker.
struct BlockRows {
    keys: Vec<u64>,
    records: u64,
    rows: u64,
    bytes: u64,
    blank: u64,
    short: u64,
    /// Rows taken from an earlier exact copy's.
    reused: u64,
    skipped: HashMap<&'static str, u64>,
    /// The first [`QUOTED_PROBLEMS`] of the block.
    problems: Vec<SkippedSample>,
    /// Which selected fields the block's records have.
    fields: FieldsSeen,
    /// Where its records lie (a block of a JSONL file read in order, or of a Parquet file,
    /// when places are noted).
    places: Option<RecordPlaces>,
}

/// A sample a block skipped, as a [`Problem`] quotes it once the chunk's place in its file is
/// known.
struct SkippedSample {
    /// The record, chunk-local as the reader numbers it.
    record: u64,
    /// The field slot.
    field: u32,
    /// The [`SkipReason`](neardup_corpus::SkipReason)'s kind.
    kind: &'static str,
    /// What is wrong, for people.
    message: String,
}

/// One chunk's blocks, assembled in order by the collector until the chunk ends.
#[derive(Default)]
struct ChunkOutput {
    /// Each block's keys, in block order (kept apart so that no block's keys are copied
    /// before they reach the sink).
    keys: Vec<Vec<u64>>,
    records: u64,
    rows: u64,
    bytes: u64,
    blank: u64,
    short: u64,
    reused: u64,
    skipped: HashMap<&'static str, u64>,
    /// The chunk's first [`QUOTED_PROBLEMS`].
    problems: Vec<SkippedSample>,
    /// The records the reader could not deliver, in order.
    unreadable: Vec<Unreadable>,
    /// Where its records lie, while every block so far had its places and followed the one
    /// before it.
    places: Option<RecordPlaces>,
    /// Blocks appended.
    blocks: u64,
}

impl ChunkOutput {
    /// Appends the chunk's next block (record numbers are the reader's, already chunk-local).
    fn append(&mut self, block: BlockRows) {
        let joined = match (&mut self.places, block.places) {
            (None, Some(first)) if self.blocks == 0 => {
                self.places = Some(first);
                true
            }
            (Some(places), Some(next)) => places.append(&next),
            _ => false,
        };
        if !joined {
            self.places = None;
        }
        self.blocks += 1;
        if !block.keys.is_empty() {
            self.keys.push(block.keys);
        }
        self.records += block.records;
        self.rows += block.rows;
        self.bytes += block.bytes;
        self.blank += block.blank;
        self.short += block.short;
        self.reused += block.reused;
        for (kind, n) in block.skipped {
            *self.skipped.entry(kind).or_default() += n;
        }
        let room = QUOTED_PROBLEMS.saturating_sub(self.problems.len());
        self.problems.extend(block.problems.into_iter().take(room));
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

/// Stage 1's work on the executor: read the chunks of `files` and sketch every block into rows.
struct SketchWork<'a> {
    files: &'a [InputFile],
    cfg: &'a KeysConfig,
    control: &'a StepControl,
    read: ReadOptions,
    /// Columns per row.
    columns: usize,
    /// Rows of texts signed lately, for their exact copies.
    known: Option<RowCache>,
    /// Whether blocks note where their records lie ([`RecordPlaces`]); cleared once the run
    /// has dropped them.
    places: AtomicBool,
}

impl ChunkWork for SketchWork<'_> {
    type Job = Chunk;
    type Block = Block;
    type ReadError = Unreadable;
    type Worker = Worker;
    type Out = BlockRows;

    fn worker(&self) -> Worker {
        Worker::new(self.cfg)
    }

    fn read(&self, chunk: &Chunk) -> impl Iterator<Item = Result<Block, Unreadable>> {
        read_chunk(&self.files[chunk.file], chunk, &self.read)
            .map(|b| b.map_err(|e| e.unreadable()))
    }

    /// Blocks of whole-file chunks (compressed JSONL, small files, Parquet files of one row
    /// group) are sketched by every thread without a chunk of its own.
    fn shares_blocks(&self, chunk: &Chunk) -> bool {
        chunk.range == ChunkRange::Whole
    }

    /// The block, and the row of keys each of its records gets.
    fn block_bytes(&self, block: &Block) -> u64 {
        block.memory_bytes() + (block.num_records() * self.columns * size_of::<u64>()) as u64
    }

    /// A sketched block keeps its keys alone.
    fn out_bytes(&self, out: &BlockRows) -> Option<u64> {
        Some((out.keys.capacity() * size_of::<u64>()) as u64)
    }

    fn prepare(&self, worker: &mut Worker, _: &Chunk, block: Block, _: u64) -> (BlockRows, u64) {
        (self.sketch_block(&block, worker), 0)
    }
}

impl SketchWork<'_> {
    /// Sketches one block's samples into rows.
    fn sketch_block(&self, block: &Block, worker: &mut Worker) -> BlockRows {
        let (cfg, columns) = (self.cfg, self.columns);
        let Worker { scratch, sig } = worker;
        let mut out = BlockRows {
            keys: Vec::new(),
            records: block.num_records() as u64,
            rows: 0,
            bytes: block.input_bytes(),
            blank: 0,
            short: 0,
            reused: 0,
            skipped: HashMap::new(),
            problems: Vec::new(),
            fields: FieldsSeen::new(&cfg.selector),
            places: None,
        };
        // Per record of a block whose places are noted: its rows, and whether a slot of it had
        // no text or a blank one.
        let mut per_record: Option<Vec<(u32, bool)>> = (block.records_placeable()
            && self.places.load(Ordering::Relaxed))
        .then(|| vec![(0, false); block.num_records()]);
        if cfg.sketcher.wants_batches() {
            // A tokenizer that takes a lock per call (a Python callable and its GIL) is handed
            // the block's texts at once.
            let mut texts = Vec::new();
            block.for_each_sample(&cfg.selector, |sample| {
                if let SampleText::Text(text) = sample.text {
                    texts.push(text.into_owned());
                }
            });
            cfg.sketcher.prefetch(texts.iter().map(String::as_str));
        }
        let first = block.first_record;
        block.for_each_sample_noting(&cfg.selector, &mut out.fields, |sample| match sample.text {
            SampleText::Text(text) => {
                let start = out.keys.len();
                out.keys.resize(start + columns, 0);
                let (r, reused) = cfg.rule.sketch_known(
                    &cfg.sketcher,
                    &text,
                    scratch,
                    sig,
                    &mut out.keys[start..],
                    self.known.as_ref().map(|k| k as &dyn KnownRows),
                );
                out.rows += 1;
                out.reused += u64::from(reused);
                if let Some(records) = &mut per_record {
                    let record = &mut records[sample.record];
                    record.0 += 1;
                    record.1 |= r.kind == RowKind::Blank;
                }
                match r.kind {
                    RowKind::Blank => out.blank += 1,
                    RowKind::Short => out.short += 1,
                    RowKind::Normal => {}
                }
            }
            SampleText::Skipped(reason) => {
                if let Some(records) = &mut per_record {
                    records[sample.record].1 = true;
                }
                *out.skipped.entry(reason.kind()).or_default() += 1;
                if out.problems.len() < QUOTED_PROBLEMS {
                    out.problems.push(SkippedSample {
                        record: first + sample.record as u64,
                        field: sample.field,
                        kind: reason.kind(),
                        message: reason.describe(&cfg.selector, sample.field),
                    });
                }
            }
        });
        if let Some(records) = per_record {
            let per_record = cfg.selector.samples_per_record() as u32;
            // A Parquet row's place is its index in the chunk: its length is 0.
            let mut places = RecordPlaces::new(block.jsonl_offset().unwrap_or(0), per_record);
            for (i, (rows, odd)) in records.into_iter().enumerate() {
                let len = block.jsonl_line(i).map_or(0, <[u8]>::len) as u64;
                places.push(len, rows, !odd && rows == per_record);
            }
            for &point in block.jsonl_resume_points() {
                places.push_resume(point);
            }
            out.places = Some(places);
        }
        if let Some(p) = self.control.progress() {
            // In the units of its total, the inputs' sizes on disk.
            p.add(block.disk_bytes(), out.rows);
        }
        out
    }
}

/// Where assembled rows go.
enum Sink {
    Memory(Vec<u64>),
    Spill(SpillCounter),
    File(KeyTableWriter),
}

/// Runs stage 1 over `files` (one shard): sketches every sample, counts the keys and finds the hot
/// ones. Rows come out in input order whatever the thread count. `control` is watched and looked
/// at between blocks while reading and between partitions while counting: cancelled, the run
/// fails with [`KeysError::Interrupted`].
pub fn run_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
    control: &StepControl,
) -> Result<KeysOutput, KeysError> {
    let layout = cfg.layout();
    let columns = layout.columns();
    let content_col = layout.rule.exact_key.then(|| columns - 1);
    let threads = cfg.effective_threads();
    let Sketched {
        mut stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, cfg, control, Sink::Memory(Vec::new()), true)?;

    let count_started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|error| KeysSettingsError::Threads { threads, error })?;
    let (counted, table) = match sink {
        Sink::Memory(keys) => {
            let counted = if keys.is_empty() {
                count_in_memory(&[], columns, cfg.min_count, content_col)
            } else {
                pool.install(|| {
                    count_in_memory_until(
                        &keys,
                        columns,
                        HotRule {
                            min_count: cfg.min_count,
                            prior: cfg.prior.as_deref(),
                        },
                        content_col,
                        &control.cancel,
                    )
                })
                .ok_or(KeysError::Interrupted)?
            };
            // The places are stage 2's, which reads them from `files`; the table keeps none.
            let mut table_files = file_rows.clone();
            for f in &mut table_files {
                for c in &mut f.chunks {
                    c.places = None;
                }
            }
            let table = KeyTable::new(layout.clone(), shard, table_files, keys)?;
            (counted, TableStore::Memory(table))
        }
        Sink::Spill(counter) => (
            counter.finish_with_prior(cfg.min_count, cfg.prior.as_deref(), &control.cancel)?,
            TableStore::Spilled,
        ),
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
        hot: HotKeys::counted(layout.clone(), cfg.min_count, hot_keys),
        layout,
        files: file_rows,
        table,
        mask,
        stats,
    })
}

/// Stage 1 of one shard straight into a key-table file (the `keys` step of a distributed run),
/// written through `target` (an [`AtomicFile`], alone or one output of a
/// [`neardup_corpus::Publication`] that publishes the table with the shard's report): the rows
/// stream to disk as they are assembled, so memory stays bounded however large the shard
/// (`cfg.memory_limit` does not apply: nothing grows but the per-file row counts; the records'
/// places, which the table holds after its keys, wait in a scratch file too). Nothing is
/// counted: hot keys come from merging all shards' tables ([`merge_table_files`]). The file is
/// byte-identical to [`KeyTable::save`] of [`collect_keys`]' table.
pub fn write_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
    control: &StepControl,
    target: AtomicFile,
) -> Result<KeysStats, KeysError> {
    let layout = cfg.layout();
    let writer = KeyTableWriter::to_file(target, layout.columns())?;
    let Sketched {
        stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, cfg, control, Sink::File(writer), true)?;
    let Sink::File(writer) = sink else {
        unreachable!("a file sink stays a file sink")
    };
    writer.finish(layout, shard, file_rows)?;
    Ok(stats)
}

/// Stage 1 of one shard into an in-memory [`KeyTable`], without counting (the shard's own hot keys
/// are of no use when all shards' tables are merged): for a scheduler that keeps tables as values.
/// `cfg.memory_limit` does not apply; [`write_keys`] streams a table of any size to a file. The
/// table holds the places of its records ([`ChunkRows::places`]), as its file does.
pub fn collect_keys(
    files: &[InputFile],
    shard: u32,
    cfg: &KeysConfig,
    control: &StepControl,
) -> Result<(KeyTable, KeysStats), KeysError> {
    let mut cfg = cfg.clone();
    cfg.memory_limit = None;
    let Sketched {
        stats,
        files: file_rows,
        sink,
    } = sketch_rows(files, &cfg, control, Sink::Memory(Vec::new()), true)?;
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

/// What the rows of recently signed texts may take: a 64th of the memory limit, which leaves the
/// key table its half and the counting buffers theirs (the table stops at 10 MB, its most rows).
fn row_cache_bytes(memory_limit: Option<u64>) -> u64 {
    memory_limit.map_or(u64::MAX, |limit| limit / 64)
}

/// Reads and sketches every chunk with worker threads and hands the rows, in input order, to
/// `sink`; with `places`, notes where the records of JSONL and Parquet chunks lie
/// ([`ChunkRows::places`]) while they take at most [`places_budget`] of the memory limit.
fn sketch_rows(
    files: &[InputFile],
    cfg: &KeysConfig,
    control: &StepControl,
    sink: Sink,
    places: bool,
) -> Result<Sketched, KeysError> {
    cfg.sketcher
        .config()
        .validate()
        .map_err(KeysSettingsError::Sketch)?;
    let columns = cfg.layout().columns();
    let threads = cfg.effective_threads();
    let chunks = plan_chunks(files, balanced_chunk_bytes(files, cfg.chunk_bytes));
    let started = Instant::now();
    if let Some(p) = control.progress() {
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
    let mut fields = FieldsSeen::new(&cfg.selector);

    let work = SketchWork {
        files,
        cfg,
        control,
        read: read_options(cfg),
        columns,
        known: RowCache::new(
            columns,
            row_cache_bytes(cfg.memory_limit),
            files.iter().map(|f| f.size).sum(),
        ),
        places: AtomicBool::new(places),
    };
    let mut places_held = 0u64;
    // The executor bounds the look-ahead (the memory held by sketched blocks waiting for their
    // turn) and hands the blocks over in input order; a chunk is folded into the run once all
    // its blocks and read errors are in.
    let mut chunk = ChunkOutput::default();
    let completion = run_ordered(
        &work,
        &chunks,
        ExecOptions {
            block_memory: cfg.block_memory,
            ..ExecOptions::threads(threads)
        },
        &|| control.is_cancelled(),
        |event| {
            match event {
                Event::Block { out, .. } => {
                    fields.merge(&out.fields);
                    chunk.append(out);
                }
                Event::ReadError { error, .. } => chunk.unreadable.push(error),
                Event::JobEnd { job } => {
                    let out = std::mem::take(&mut chunk);
                    absorb(
                        &chunks[job],
                        out,
                        files,
                        cfg,
                        &mut stats,
                        &mut file_rows,
                        &mut sink,
                        columns,
                        budget,
                    )?;
                    if let Some(places) = file_rows[chunks[job].file]
                        .chunks
                        .last()
                        .and_then(|c| c.places.as_ref())
                    {
                        places_held += places.memory_bytes();
                        if places_held > places_budget(cfg.memory_limit) {
                            // Over their share of the limit: stage 2 reads every record.
                            work.places.store(false, Ordering::Relaxed);
                            for f in &mut file_rows {
                                for c in &mut f.chunks {
                                    c.places = None;
                                }
                            }
                        }
                    }
                }
            }
            Ok::<(), KeysError>(())
        },
    )?;
    if completion == Completion::Cancelled {
        return Err(KeysError::Interrupted);
    }
    check_something_read(files, cfg, &stats, &fields)?;
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
    // The chunk's records are numbered after everything the file's earlier chunks span, lost
    // records included, so addresses stay those of the file.
    let record_base: u64 = fr.chunks.iter().map(ChunkRows::records_spanned).sum();
    let path = &files[chunk.file].path;
    for skipped in out.problems {
        let problem = Problem {
            file: path.clone(),
            record: Some(skipped.record + record_base),
            field: Some(skipped.field),
            kind: skipped.kind.to_string(),
            message: skipped.message,
        };
        if cfg.on_error == OnError::Fail {
            return Err(KeysError::Input(Box::new(InputFailure::Record(problem))));
        }
        if stats.problems.len() < QUOTED_PROBLEMS {
            stats.problems.push(problem);
        }
    }
    for lost in &out.unreadable {
        let range = UnreadableRange::new(path, record_base, lost);
        // A failed storage request says nothing about the data: skipping it would publish a
        // dataset short of records a later attempt reads.
        if cfg.on_error == OnError::Fail || range.is_storage_failure() {
            return Err(KeysError::Input(Box::new(InputFailure::Unreadable(range))));
        }
        let kind = range.lost.kind.as_str();
        *stats.read_errors.entry(kind.to_string()).or_default() += 1;
        stats.records_unreadable += range.lost.records.unwrap_or(0);
        if stats.problems.len() < QUOTED_PROBLEMS {
            stats.problems.push(Problem {
                file: path.clone(),
                record: Some(range.lost.first_record),
                field: None,
                kind: kind.to_string(),
                message: format!("{}: {}", range.what(), range.lost.reason),
            });
        }
        stats.unreadable.push(range);
    }
    // Places are of use only for a chunk read whole, every record of it placed; and of a
    // compressed file, only one of several members (frames): one that cannot be entered but at
    // its start is read as a whole again.
    let places = out
        .places
        .filter(|p| out.unreadable.is_empty() && p.records() == out.records)
        .filter(|p| p.resume_count() != 1)
        .map(|mut p| {
            p.shrink_to_fit();
            if files[chunk.file].format == neardup_corpus::Format::Parquet {
                // Stage 2 passes rows over without their text bytes: it counts these.
                p.set_input_bytes(out.bytes);
            }
            p
        });
    fr.chunks.push(ChunkRows {
        range: chunk.range.clone(),
        records: out.records,
        rows: out.rows,
        read_error: !out.unreadable.is_empty(),
        unreadable: out.unreadable,
        places,
    });
    if let Sink::File(writer) = sink
        && let Some(places) = fr.chunks.last_mut().and_then(|c| c.places.take())
    {
        // A table file holds them after its keys; they wait on disk, not here.
        writer.push_places(chunk.file, fr.chunks.len() - 1, &places)?;
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
    stats.reused_samples += out.reused;
    stats.bytes += out.bytes;

    if let Sink::Memory(keys) = sink {
        let chunk_keys: usize = out.keys.iter().map(Vec::len).sum();
        let would_hold = (keys.len() + chunk_keys) as u64 * 8;
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
    for block in &out.keys {
        match sink {
            Sink::Memory(keys) => keys.extend_from_slice(block),
            Sink::Spill(counter) => counter.push_rows(block)?,
            Sink::File(writer) => writer.push_rows(block)?,
        }
    }
    Ok(())
}

/// Fails a run that read nothing usable, once all inputs have been read and before anything is
/// written: a selected field that no record has (almost always a typo: `--field txt` would make
/// every sample `missing_field`), or no text at all because every record was unreadable.
/// Inputs that hold no records, or only blank lines, are not an error.
fn check_something_read(
    files: &[InputFile],
    cfg: &KeysConfig,
    stats: &KeysStats,
    fields: &FieldsSeen,
) -> Result<(), KeysError> {
    let never = fields.never_seen();
    if !never.is_empty() {
        return Err(KeysError::Input(Box::new(InputFailure::FieldsNeverSeen {
            missing: never
                .iter()
                .map(|&i| cfg.selector.fields[i].to_string())
                .collect(),
            seen: record_fields(files, 1000).into_iter().collect(),
        })));
    }
    if stats.samples > 0 {
        return Ok(());
    }
    let skipped: u64 = stats.skipped.values().sum();
    if skipped == 0 && stats.unreadable.is_empty() {
        return Ok(());
    }
    Err(KeysError::Input(Box::new(InputFailure::NothingRead {
        records: stats.records,
        skipped: stats.skipped.iter().map(|(k, n)| (k.clone(), *n)).collect(),
        unreadable: stats.unreadable.clone(),
    })))
}

/// Like [`merge_tables`] over saved tables, without holding them: each file is read
/// sequentially (rows in shard order, checksums verified), and its keys go to an in-memory count
/// when all shards' keys fit in `memory_limit` (or there is no limit), else to a
/// [`SpillCounter`] under `spill_dir` that counts partition by partition within the limit. The
/// hot keys and mask are the same either way.
pub fn merge_table_files(
    tables: &ShardTables,
    min_count: u32,
    prior: Option<&PriorKeys>,
    memory_limit: Option<u64>,
    spill_dir: Option<&std::path::Path>,
    cancel: &CancelToken,
) -> Result<(HotKeys, HotMask, CountStats), KeysError> {
    let check = || {
        if cancel.is_cancelled() {
            Err(KeysError::Interrupted)
        } else {
            Ok(())
        }
    };
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
                    check()?;
                    block.clear();
                    if reader.read_keys(rows_per_block, &mut block)? == 0 {
                        break;
                    }
                    counter.push_rows(&block)?;
                }
                reader.finish()?;
            }
            counter.finish_with_prior(min_count, prior, cancel)?
        }
        None => {
            let mut all = Vec::with_capacity(total_keys as usize);
            for p in &tables.paths {
                let mut reader = TableReader::open(p)?;
                loop {
                    check()?;
                    if reader.read_keys(1 << 20, &mut all)? == 0 {
                        break;
                    }
                }
                reader.finish()?;
            }
            count_in_memory_until(
                &all,
                columns,
                HotRule { min_count, prior },
                content_col,
                cancel,
            )
            .ok_or(KeysError::Interrupted)?
        }
    };
    Ok((
        HotKeys::counted(tables.layout.clone(), min_count, counted.hot_keys)
            .counted_from(tables.identities.clone()),
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
            .map(|t| (t.borrow().shard(), t.borrow().layout(), None)),
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
    let identities = ordered.iter().map(|t| t.identity()).collect();
    Ok((
        HotKeys::counted(layout.clone(), min_count, counted.hot_keys).counted_from(identities),
        counted.mask,
        counted.stats,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_corpus::{FieldPath, SkipReason};
    use neardup_sketch::{LshParams, Shingler, SketchConfig};

    use crate::row::ShortTextPolicy;

    fn config(threads: usize, chunk_bytes: u64) -> KeysConfig {
        let sketcher = Sketcher::new(SketchConfig::new(
            Shingler::Chars { k: 5, step: 1 },
            128,
            LshParams::new(16, 8).unwrap(),
        ))
        .unwrap();
        let mut cfg = KeysConfig::new(sketcher, TextSelector::single(FieldPath::top("text")));
        cfg.threads = threads;
        cfg.chunk_bytes = chunk_bytes;
        cfg.block_bytes = 256;
        cfg
    }

    /// Texts in groups of near copies, exact copies, singletons, one empty text and a malformed
    /// line, over two files.
    fn inputs(dir: &std::path::Path) -> (Vec<InputFile>, Vec<String>) {
        let base = |b: usize| -> String {
            (0..60)
                .map(|i| format!("w{}", (i * 7 + b * 131) % 997))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut texts = Vec::new();
        for i in 0..120 {
            texts.push(match i % 6 {
                0 | 1 => base(i % 12),
                2 => format!("{} tail{}", base(i % 12), i),
                3 => (0..60)
                    .map(|k| format!("u{}", (k * 7919 + i * 104_729) % 1_000_003))
                    .collect::<Vec<_>>()
                    .join(" "),
                4 => base(3),
                _ => format!("{} {}", base(i % 5), base(i % 7)),
            });
        }
        let mut files = Vec::new();
        for (f, part) in texts.chunks(60).enumerate() {
            let path = dir.join(format!("in-{f}.jsonl"));
            let mut body = String::new();
            for (i, t) in part.iter().enumerate() {
                body.push_str(&serde_json::json!({ "text": t }).to_string());
                body.push('\n');
                if f == 1 && i == 10 {
                    body.push_str("{\"text\": broken\n");
                    body.push_str("{\"text\": \"\"}\n");
                }
            }
            std::fs::write(&path, body).unwrap();
            let name = std::path::PathBuf::from(path.file_name().unwrap());
            files.push(InputFile::detect(&path, &name, None).unwrap());
        }
        (files, texts)
    }

    fn run(files: &[InputFile], cfg: &KeysConfig) -> KeysOutput {
        run_keys(files, 0, cfg, &StepControl::default()).unwrap()
    }

    fn table(out: &KeysOutput) -> &KeyTable {
        match &out.table {
            TableStore::Memory(t) => t,
            TableStore::Spilled => panic!("the table spilled"),
        }
    }

    #[test]
    fn rows_are_the_sketches_of_the_texts_in_input_order_whatever_the_threads_and_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, texts) = inputs(tmp.path());
        let cfg = config(1, 1 << 20);
        let one = run(&files, &cfg);
        let columns = one.layout.columns();
        // Every text gives a row (the empty one too: its row is all NO_KEY); the malformed line
        // gives none.
        assert_eq!(table(&one).rows(), texts.len() + 1);
        assert_eq!(one.stats.records, texts.len() as u64 + 2);
        assert_eq!(
            one.stats
                .skipped
                .get(SkipReason::MalformedJson(String::new()).kind()),
            Some(&1)
        );
        let mut scratch = neardup_sketch::Scratch::default();
        let (mut sig, mut row) = (vec![0; 128], vec![0; columns]);
        let mut expected_rows: Vec<&str> = texts.iter().map(String::as_str).collect();
        expected_rows.insert(71, "");
        for (r, text) in expected_rows.iter().enumerate() {
            cfg.rule
                .sketch(&cfg.sketcher, text, &mut scratch, &mut sig, &mut row);
            assert_eq!(table(&one).row(r), &row[..], "row {r}");
        }
        assert_eq!(
            one.files.iter().map(|f| f.rows).collect::<Vec<_>>(),
            vec![60, 61]
        );
        // Rows sharing a key are hot, the unique texts are not.
        assert!(one.mask.is_hot_row(0) && one.mask.is_hot_row(1));
        assert!(!one.mask.is_hot_row(3));
        assert!(one.mask.is_later_copy(10), "an exact copy of row 4");
        assert!(one.mask.is_later_copy(12), "an exact copy of row 0");
        assert!(!one.mask.is_later_copy(4) && !one.mask.is_later_copy(0));
        // Threads and chunks change nothing.
        for (threads, chunk_bytes) in [(2, 1 << 20), (3, 700), (4, 64)] {
            let other = run(&files, &config(threads, chunk_bytes));
            assert_eq!(table(&other).keys(), table(&one).keys());
            assert_eq!(other.hot.keys(), one.hot.keys());
            assert!(
                (0..one.mask.rows()).all(|r| (0..columns)
                    .all(|c| other.mask.is_hot(r, c) == one.mask.is_hot(r, c))),
                "{threads} threads, chunks of {chunk_bytes} bytes"
            );
            assert_eq!(
                other
                    .files
                    .iter()
                    .map(|f| (f.records, f.rows))
                    .collect::<Vec<_>>(),
                one.files
                    .iter()
                    .map(|f| (f.records, f.rows))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn exact_copies_take_the_row_of_their_first_copy_unsigned_and_the_rows_stay_the_sketches() {
        let tmp = tempfile::tempdir().unwrap();
        // A pool of texts met again and again, in other case and spacing (equal once normalised),
        // among texts met once; short texts too (fewer characters than a shingle).
        let pool: Vec<String> = (0..40)
            .map(|p| match p % 4 {
                0 => "ab".to_string(),
                1 => format!("x{p}"),
                _ => (0..30)
                    .map(|i| format!("word{}", (i * 13 + p * 7) % 101))
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect();
        let mut state = 17u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        let mut texts = Vec::new();
        for i in 0..3000 {
            let text = if next() % 3 == 0 {
                format!("unique {i} {}", pool[next() % pool.len()])
            } else {
                let t = &pool[next() % pool.len()];
                match next() % 3 {
                    0 => t.clone(),
                    1 => t.to_uppercase(),
                    _ => format!("  {}  ", t.replace(' ', "   ")),
                }
            };
            texts.push(text);
        }
        let mut files = Vec::new();
        for (f, part) in texts.chunks(1000).enumerate() {
            let path = tmp.path().join(format!("copies-{f}.jsonl"));
            let body: String = part
                .iter()
                .map(|t| serde_json::json!({ "text": t }).to_string() + "\n")
                .collect();
            std::fs::write(&path, body).unwrap();
            let name = std::path::PathBuf::from(path.file_name().unwrap());
            files.push(InputFile::detect(&path, &name, None).unwrap());
        }
        for short_texts in [ShortTextPolicy::ExactOnly, ShortTextPolicy::EmptySignature] {
            let mut sketch = SketchConfig::new(
                Shingler::Chars { k: 5, step: 1 },
                64,
                LshParams::new(8, 8).unwrap(),
            );
            sketch.normalizer = neardup_sketch::Normalizer {
                lowercase: true,
                collapse_whitespace: true,
                ..neardup_sketch::Normalizer::default()
            };
            let mut cfg = config(1, 1 << 20);
            cfg.sketcher = Sketcher::new(sketch).unwrap();
            cfg.rule.short_texts = short_texts;
            let one = run(&files, &cfg);
            // One thread meets every copy after its first; the table is larger than the pool.
            let copies = texts.len() - 1000 - pool.len();
            assert!(
                one.stats.reused_samples as usize >= copies * 9 / 10,
                "{} rows reused of about {copies} copies",
                one.stats.reused_samples
            );
            let columns = one.layout.columns();
            let mut scratch = Scratch::default();
            let (mut sig, mut row) = (vec![0; 64], vec![0; columns]);
            for (r, text) in texts.iter().enumerate() {
                cfg.rule
                    .sketch(&cfg.sketcher, text, &mut scratch, &mut sig, &mut row);
                assert_eq!(table(&one).row(r), &row[..], "row {r}: {text:?}");
            }
            let report = serde_json::to_value(&one.stats).unwrap();
            assert!(
                report.get("reused_samples").is_none() && report.get("samples").is_some(),
                "a count that depends on timing stays out of the report"
            );
            for threads in [2, 3] {
                cfg.threads = threads;
                let other = run(&files, &cfg);
                assert_eq!(
                    table(&other).keys(),
                    table(&one).keys(),
                    "{threads} threads"
                );
                assert_eq!(other.stats.short_samples, one.stats.short_samples);
            }
        }
    }

    #[test]
    fn shards_merged_and_a_spilled_count_give_the_one_runs_hot_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, _) = inputs(tmp.path());
        let cfg = config(2, 1 << 20);
        let one = run(&files, &cfg);
        let tables: Vec<KeyTable> = files
            .iter()
            .enumerate()
            .map(|(shard, f)| {
                collect_keys(
                    std::slice::from_ref(f),
                    shard as u32,
                    &cfg,
                    &StepControl::default(),
                )
                .unwrap()
                .0
            })
            .collect();
        let (hot, mask, _) = merge_tables(&tables, cfg.min_count).unwrap();
        assert_eq!(hot.keys(), one.hot.keys());
        assert_eq!(mask.hot_rows(), one.mask.hot_rows());
        let mut spilling = cfg.clone();
        spilling.memory_limit = Some(1024);
        spilling.spill_dir = Some(tmp.path().to_path_buf());
        let spilled = run(&files, &spilling);
        assert!(matches!(spilled.table, TableStore::Spilled));
        assert_eq!(spilled.hot.keys(), one.hot.keys());
        assert_eq!(spilled.mask.hot_rows(), one.mask.hot_rows());
    }

    #[test]
    fn a_field_no_record_has_stops_the_run_naming_the_fields_records_have() {
        let tmp = tempfile::tempdir().unwrap();
        let (files, _) = inputs(tmp.path());
        let mut cfg = config(1, 1 << 20);
        cfg.selector = TextSelector::single(FieldPath::top("txt"));
        let Err(KeysError::Input(failure)) = run_keys(&files, 0, &cfg, &StepControl::default())
        else {
            panic!("a field no record has is an error")
        };
        match *failure {
            InputFailure::FieldsNeverSeen { missing, seen } => {
                assert_eq!(missing, vec!["txt".to_string()]);
                assert!(seen.contains(&"text".to_string()), "{seen:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}
