//! The stage-2 pipeline: re-stream the inputs chunk by chunk with worker threads that sign only
//! the hot samples, decide in input order on one thread, and stream the filtered dataset and the
//! decisions out of the same pass.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use neardup_corpus::{
    Block, Chunk, ChunkRange, DecisionWriter, FileWriter, OutputDir, OutputOptions, Projection,
    Publication, PublishOptions, ReadOptions, Reason, SampleText, TextSelector, Unreadable,
    WriteError, WrittenFile, reread_chunk,
};
use neardup_exec::{OnError, StepControl};
use neardup_keys::{FileRows, HotMask, RowKind, RowRule, UnreadableRange};
use neardup_sketch::{Scratch, Sketcher};
use serde::{Deserialize, Serialize};

use crate::deduper::{Candidate, Deduper, DeduperConfig, DeduperStats, SampleAddr, Verify};
use crate::error::DedupError;
use crate::route::{BlockPlace, Decider, HotRoute};

/// What happens to samples whose text is empty or whitespace only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyPolicy {
    /// Pass them through to the output (decision reason `empty`, kept).
    #[default]
    Keep,
    /// Drop them (decision reason `empty`, dropped).
    Drop,
}

/// Settings of a stage-2 run: what it computes and writes. The handles a caller watches and
/// stops one run by are passed beside them ([`StepControl`]).
#[derive(Clone, Debug)]
pub struct Stage2Config {
    /// The sketch settings stage 1 used.
    pub sketcher: Sketcher,
    /// The row rule stage 1 used.
    pub rule: RowRule,
    /// The text selection stage 1 used.
    pub selector: TextSelector,
    /// Decision settings.
    pub deduper: DeduperConfig,
    /// Empty-text policy.
    pub empty: EmptyPolicy,
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Target size of one read block.
    pub block_bytes: usize,
    /// Bad input policy.
    pub on_error: OnError,
    /// Where the filtered dataset goes (none: decide only).
    pub output: Option<OutputOptions>,
    /// Where the decisions go (`.jsonl` or `.parquet`).
    pub decisions: Option<PathBuf>,
}

/// A write error as stage 2 reports it.
fn output_error(e: WriteError) -> DedupError {
    if e.kind() == "interrupted" {
        DedupError::Interrupted
    } else {
        DedupError::Output(e)
    }
}

/// One decision, as handed to an observer (serialisable, for schedulers that pass decisions as
/// values; addresses number files in input order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The sample.
    pub addr: SampleAddr,
    /// Its id, when an id field is configured and present.
    pub id: Option<String>,
    /// Kept or dropped.
    pub keep: bool,
    /// Why.
    pub reason: Reason,
    /// The sample it duplicates.
    pub dup_of: Option<SampleAddr>,
    /// That sample's id.
    pub dup_of_id: Option<String>,
    /// The similarity that decided (1.0 for exact copies).
    pub similarity: Option<f64>,
}

/// What stage 2 did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DedupStats {
    /// Records read.
    pub records: u64,
    /// Records that could not be read, as far as their number is known (see `unreadable`):
    /// `records + records_unreadable` are the records the inputs hold.
    #[serde(default)]
    pub records_unreadable: u64,
    /// Every part of an input that could not be read, in input order.
    #[serde(default)]
    pub unreadable: Vec<UnreadableRange>,
    /// Inputs of which nothing could be read: no output file is written for them.
    #[serde(default)]
    pub files_unreadable: Vec<PathBuf>,
    /// Records written to the output.
    pub records_kept: u64,
    /// Records left out of the output.
    pub records_dropped: u64,
    /// Sample slots decided (= rows of the decisions file).
    pub samples: u64,
    /// Samples kept as unique (including cold ones).
    pub unique: u64,
    /// Samples that hit no hot key (kept without any signature work).
    pub cold: u64,
    /// Samples dropped as near duplicates.
    pub near: u64,
    /// Samples dropped as exact duplicates.
    pub exact: u64,
    /// Empty samples (kept or dropped per the policy).
    pub empty: u64,
    /// Sample slots that could not be read (passed through, reason `error`).
    pub errors: u64,
    /// Those sample slots by reason (`malformed_json`, `missing_field`, …).
    #[serde(default)]
    pub skipped: BTreeMap<String, u64>,
    /// The decision core's counters.
    pub deduper: DeduperStats,
    /// Output files written.
    pub outputs: Vec<OutputFile>,
    /// Wall seconds.
    pub seconds: f64,
    /// Input MB/s.
    pub mb_per_second: f64,
    /// Input bytes read.
    pub bytes: u64,
}

/// One output file (or its parts, when split by size).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// The files written.
    pub paths: Vec<PathBuf>,
    /// Records written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl From<WrittenFile> for OutputFile {
    fn from(w: WrittenFile) -> Self {
        OutputFile {
            paths: w.paths,
            records: w.records,
            bytes: w.bytes,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum SampleKind {
    /// No text; the reason's kind.
    Skipped(&'static str),
    Blank,
    Cold,
    Hot {
        content_hash: u128,
        /// Its place among the block's signed samples: where its signature, keys and hot
        /// columns are in the block's vectors ([`PreparedBlock::signed`]).
        slot: u32,
        /// Its shingle set in the block's `shingles` (a one-process run under exact
        /// verification).
        material: (u32, u32),
        /// Its table row.
        row: u64,
    },
    /// A hot sample of a `sign` step under exact verification: only its content hash was
    /// computed; decide sketches its text.
    Text {
        content_hash: u128,
        row: u64,
        /// Its text in the block's `carried`.
        text: (u32, u32),
    },
    /// A later exact copy by stage 1's count: only its content hash was computed.
    Copy {
        content_hash: u128,
        row: u64,
        /// Its text in the block's `carried` (sign step).
        text: (u32, u32),
    },
    /// A hot sample of a `write` step: decided elsewhere, nothing computed.
    Decided {
        row: u64,
    },
}

/// How a shard's files and rows are numbered among all shards of a distributed run (the
/// one-process run is its only shard).
pub(crate) struct Addressing<'a> {
    /// The number of the shard's first file.
    pub file_base: u32,
    /// The number of the shard's first row.
    pub row_base: u64,
    /// Every file's name as decisions print it, in global order.
    pub names: &'a [String],
}

pub(crate) struct PreparedSample {
    pub record: u32,
    pub field: u32,
    pub kind: SampleKind,
    pub id: Option<(u32, u32)>,
}

/// One block, read and prepared by a worker.
pub(crate) struct PreparedBlock {
    pub block: Block,
    /// Table rows the block covers (its samples with a text).
    pub texts: u64,
    pub samples: Vec<PreparedSample>,
    pub signatures: Vec<u32>,
    pub rows: Vec<u64>,
    pub hot: Vec<bool>,
    pub shingles: Vec<u32>,
    /// The texts hot samples carry to a `sign` step's output.
    pub carried: String,
    pub ids: String,
}

impl PreparedBlock {
    /// The signature, row of keys and hot columns of the hot sample signed at `slot`.
    pub fn signed(&self, slot: u32, cfg: &Stage2Config) -> (&[u32], &[u64], &[bool]) {
        let (num_perm, columns) = (
            cfg.sketcher.num_perm(),
            cfg.rule.columns(cfg.sketcher.bands()),
        );
        let i = slot as usize;
        (
            &self.signatures[i * num_perm..(i + 1) * num_perm],
            &self.rows[i * columns..(i + 1) * columns],
            &self.hot[i * columns..(i + 1) * columns],
        )
    }
}

/// The per-block vectors of a decided block, handed back to the workers: a block's shingle sets
/// are megabytes, and a fresh vector of that size per block costs page faults and copies as it
/// grows.
#[derive(Default)]
struct RecycledBuffers {
    samples: Vec<PreparedSample>,
    signatures: Vec<u32>,
    rows: Vec<u64>,
    hot: Vec<bool>,
    shingles: Vec<u32>,
    carried: String,
}

impl RecycledBuffers {
    fn from_block(w: &mut PreparedBlock) -> RecycledBuffers {
        RecycledBuffers {
            samples: std::mem::take(&mut w.samples),
            signatures: std::mem::take(&mut w.signatures),
            rows: std::mem::take(&mut w.rows),
            hot: std::mem::take(&mut w.hot),
            shingles: std::mem::take(&mut w.shingles),
            carried: std::mem::take(&mut w.carried),
        }
    }

    fn cleared(mut self) -> RecycledBuffers {
        self.samples.clear();
        self.signatures.clear();
        self.rows.clear();
        self.hot.clear();
        self.shingles.clear();
        self.carried.clear();
        self
    }
}

struct ChunkJob<'a> {
    file: usize,
    chunk: Chunk,
    row_base: u64,
    expect: &'a neardup_keys::ChunkRows,
}

/// What every thread shares while preparing blocks: the stage-2 pass as a step of the executor
/// (`neardup_exec`).
struct PrepareWork<'a> {
    mask: &'a HotMask,
    cfg: &'a Stage2Config,
    control: &'a StepControl,
    hot_work: HotWork,
    spares: &'a crossbeam_channel::Receiver<RecycledBuffers>,
    /// The inputs the jobs read.
    inputs: &'a [neardup_corpus::InputFile],
}

/// What the workers prepare of each hot sample for the deciding thread.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum HotWork {
    /// Its signature and keys, and its shingle set when `shingles` (a one-process run under
    /// exact verification: the sets are a by-product of signing).
    Decide { shingles: bool },
    /// A `sign` step. Under exact verification (`texts`), only its content hash and text:
    /// decide sketches the text once for both its signature and its shingle set, as a
    /// one-process run does. Otherwise (`--verify estimate`, no texts) its signature and keys.
    /// Later copies bring their text in both cases.
    Sign { texts: bool },
    /// Nothing: a `write` step, whose hot samples were decided elsewhere.
    Decided,
}

/// Per-thread preparing buffers.
struct PrepareBuffers {
    /// One scratch per thread, not per chunk: its buffers grow to the largest text seen, and
    /// growing them again for every chunk cost page faults and copies.
    scratch: Scratch,
    sig: Vec<u32>,
    row_keys: Vec<u64>,
}

impl PrepareBuffers {
    fn new(prep: &PrepareWork<'_>) -> PrepareBuffers {
        PrepareBuffers {
            scratch: if prep.hot_work == (HotWork::Decide { shingles: true }) {
                Scratch::collecting_shingle_sets()
            } else {
                Scratch::default()
            },
            sig: vec![0u32; prep.cfg.sketcher.num_perm()],
            row_keys: vec![0u64; prep.cfg.rule.columns(prep.cfg.sketcher.bands())],
        }
    }
}

fn read_options(cfg: &Stage2Config) -> ReadOptions {
    ReadOptions {
        selector: cfg.selector.clone(),
        projection: Projection::FullRecords,
        block_bytes: cfg.block_bytes,
    }
}

/// Samples with a text in `block` (the table rows it covers).
fn count_texts(block: &Block, selector: &TextSelector) -> u64 {
    let mut texts = 0u64;
    block.for_each_sample(selector, |s| {
        texts += u64::from(matches!(s.text, SampleText::Text(_)));
    });
    texts
}

/// Classifies a block's samples (`row` is the table row of its first text, advanced past its
/// last), signing the hot ones.
fn prepare_block(
    prep: &PrepareWork<'_>,
    block: Block,
    row: &mut u64,
    worker: &mut PrepareBuffers,
) -> PreparedBlock {
    let PrepareWork {
        mask,
        cfg,
        control,
        hot_work,
        spares,
        ..
    } = *prep;
    let (shingles_of_hot, texts_of_hot, texts_of_copies) = match hot_work {
        HotWork::Decide { shingles } => (shingles, false, false),
        HotWork::Sign { texts } => (false, texts, true),
        HotWork::Decided => (false, false, false),
    };
    let PrepareBuffers {
        scratch,
        sig,
        row_keys,
    } = worker;
    if block.texts_only() {
        // Records stage 1 sketched but stage 2 cannot read whole: their table rows are passed
        // over, and they are neither decided nor written (the loss before them reports them).
        let texts = count_texts(&block, &cfg.selector);
        *row += texts;
        return PreparedBlock {
            block,
            texts,
            samples: Vec::new(),
            signatures: Vec::new(),
            rows: Vec::new(),
            hot: Vec::new(),
            shingles: Vec::new(),
            carried: String::new(),
            ids: String::new(),
        };
    }
    let columns = row_keys.len();
    let num_perm = sig.len();
    let RecycledBuffers {
        mut samples,
        mut signatures,
        mut rows,
        mut hot,
        mut shingles,
        mut carried,
    } = spares
        .try_recv()
        .map(RecycledBuffers::cleared)
        .unwrap_or_default();
    let mut carry = |text: &str| {
        let start = carried.len() as u32;
        carried.push_str(text);
        (start, carried.len() as u32)
    };
    let mut ids = String::new();
    let mut next_row = *row;
    block.for_each_sample(&cfg.selector, |s| {
        let id = s.id.as_ref().map(|id| {
            let start = ids.len() as u32;
            ids.push_str(id);
            (start, ids.len() as u32)
        });
        let kind = match s.text {
            SampleText::Skipped(reason) => SampleKind::Skipped(reason.kind()),
            SampleText::Text(text) => {
                let this_row = next_row;
                next_row += 1;
                if this_row >= mask.rows() as u64 || !mask.is_hot_row(this_row as usize) {
                    if cfg.rule.is_blank(&cfg.sketcher, &text) {
                        SampleKind::Blank
                    } else {
                        SampleKind::Cold
                    }
                } else if hot_work == HotWork::Decided {
                    SampleKind::Decided { row: this_row }
                } else if mask.is_later_copy(this_row as usize) {
                    SampleKind::Copy {
                        content_hash: cfg.sketcher.content_hash(&text, scratch),
                        row: this_row,
                        text: if texts_of_copies {
                            carry(&text)
                        } else {
                            (0, 0)
                        },
                    }
                } else if texts_of_hot {
                    // Stage 1 found one of its keys hot, so it is not blank (its keys would all
                    // be NO_KEY): nothing to sketch here.
                    SampleKind::Text {
                        content_hash: cfg.sketcher.content_hash(&text, scratch),
                        row: this_row,
                        text: carry(&text),
                    }
                } else {
                    let r = cfg
                        .rule
                        .sketch(&cfg.sketcher, &text, scratch, sig, row_keys);
                    if r.kind == RowKind::Blank {
                        SampleKind::Blank
                    } else {
                        let slot = (signatures.len() / num_perm) as u32;
                        signatures.extend_from_slice(sig);
                        rows.extend_from_slice(row_keys);
                        hot.extend((0..columns).map(|c| mask.is_hot(this_row as usize, c)));
                        let material = if shingles_of_hot {
                            let start = shingles.len() as u32;
                            cfg.sketcher.last_shingle_set(scratch, &mut shingles);
                            (start, shingles.len() as u32)
                        } else {
                            (0, 0)
                        };
                        SampleKind::Hot {
                            content_hash: r.content_hash,
                            slot,
                            material,
                            row: this_row,
                        }
                    }
                }
            }
        };
        samples.push(PreparedSample {
            record: s.record as u32,
            field: s.field,
            kind,
            id,
        });
    });
    let texts = next_row - *row;
    *row = next_row;
    if let Some(p) = control.progress() {
        p.add(block.input_bytes(), samples.len() as u64);
    }
    PreparedBlock {
        block,
        texts,
        samples,
        signatures,
        rows,
        hot,
        shingles,
        carried,
        ids,
    }
}

impl<'a> neardup_exec::ChunkWork for PrepareWork<'a> {
    type Job = ChunkJob<'a>;
    type Block = Block;
    type ReadError = Unreadable;
    type Worker = PrepareBuffers;
    type Out = Box<PreparedBlock>;
    // Signing needs each sample's table row (the hot mask is by row).
    const RELAYS_POSITION: bool = true;

    fn worker(&self) -> PrepareBuffers {
        PrepareBuffers::new(self)
    }

    /// The chunk is read up to where stage 1 lost records (see [`reread_chunk`]), so both stages
    /// see the same records.
    fn read(&self, job: &ChunkJob<'a>) -> impl Iterator<Item = Result<Block, Unreadable>> {
        reread_chunk(
            &self.inputs[job.file],
            &job.chunk,
            &read_options(self.cfg),
            &job.expect.unreadable,
        )
        .map(|r| r.map_err(|e| e.unreadable()))
    }

    fn shares_blocks(&self, job: &ChunkJob<'a>) -> bool {
        job.chunk.range == ChunkRange::Whole
    }

    fn first_position(&self, job: &ChunkJob<'a>) -> u64 {
        job.row_base
    }

    /// Counting a shared block's texts costs a parse, but lets the next block start before this
    /// one is signed.
    fn advance(&self, block: &Block) -> u64 {
        count_texts(block, &self.cfg.selector)
    }

    fn prepare(
        &self,
        worker: &mut PrepareBuffers,
        _job: &ChunkJob<'a>,
        block: Block,
        position: u64,
    ) -> (Box<PreparedBlock>, u64) {
        let mut row = position;
        let work = prepare_block(self, block, &mut row, worker);
        (Box::new(work), row)
    }
}

/// Runs stage 2 over the files stage 1 read (`files`, with their per-chunk counts) given the hot
/// mask of their rows. Calls `observe` with every decision in input order. The filtered dataset
/// (`cfg.output`) and the decisions (`cfg.decisions`) are published together at the end, all or
/// nothing (see [`Publication`]). `control` is watched and looked at between blocks: cancelled,
/// the run fails with [`DedupError::Interrupted`] and publishes nothing.
pub fn run_dedup(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    observe: &mut dyn FnMut(&Decision),
) -> Result<DedupStats, DedupError> {
    let publication = Publication::begin(&PublishOptions {
        output: cfg.output.clone(),
        outputs: files.iter().map(|f| f.input.relative.clone()).collect(),
        decisions: cfg.decisions.clone(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(output_error)?;
    let stats = run_dedup_into(files, mask, cfg, control, &publication, observe)?;
    publication.commit().map_err(output_error)?;
    Ok(stats)
}

/// [`run_dedup`] writing into `publication`, for a caller that publishes more with it (the run
/// report): the dataset goes to the publication's dataset directory (`cfg.output` is not looked
/// at) and the decisions to its file `cfg.decisions`; the caller commits.
pub fn run_dedup_into(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    publication: &Publication,
    observe: &mut dyn FnMut(&Decision),
) -> Result<DedupStats, DedupError> {
    let deduper = Deduper::new(
        cfg.deduper.clone(),
        cfg.sketcher.num_perm(),
        cfg.sketcher.bands(),
        cfg.rule,
    )?;
    let names: Vec<String> = files
        .iter()
        .map(|f| f.input.path.display().to_string())
        .collect();
    let addressing = Addressing {
        file_base: 0,
        row_base: 0,
        names: &names,
    };
    let (stats, _) = run_stage2(
        files,
        mask,
        cfg,
        control,
        publication,
        observe,
        deduper,
        &addressing,
    )?;
    Ok(stats)
}

/// Whether hot samples carry their shingle sets: under exact verification, when rows have band
/// keys (an exact-only run never compares sets).
pub(crate) fn needs_shingles(cfg: &Stage2Config) -> bool {
    cfg.deduper.verify == Verify::Jaccard && cfg.rule.band_keys
}

/// Every chunk of every file as a job, with the row its first sample has in the table; and per
/// job, its file's records before it.
fn chunk_jobs(files: &[FileRows]) -> (Vec<ChunkJob<'_>>, Vec<u64>) {
    let mut jobs = Vec::new();
    let mut record_bases = Vec::new();
    let mut row_base = 0u64;
    for (fi, f) in files.iter().enumerate() {
        let mut record_base = 0;
        for (seq, c) in f.chunks.iter().enumerate() {
            jobs.push(ChunkJob {
                file: fi,
                chunk: Chunk {
                    file: fi,
                    seq,
                    range: c.range.clone(),
                },
                row_base,
                expect: c,
            });
            record_bases.push(record_base);
            row_base += c.rows;
            record_base += c.records_spanned();
        }
    }
    (jobs, record_bases)
}

/// The deciding thread's end of the channel to the output writer (when there is one).
struct OutputLink {
    tx: Option<crossbeam_channel::Sender<WriterMsg>>,
    /// Set when the writer thread has ended early: its own error says why.
    gone: bool,
}

impl OutputLink {
    fn send(&mut self, msg: WriterMsg) -> Result<(), DedupError> {
        if let Some(tx) = &self.tx
            && tx.send(msg).is_err()
        {
            self.gone = true;
            return Err(DedupError::WriterStopped);
        }
        Ok(())
    }

    /// Ends the writer's input; after a failure, tells it to stop unpublished.
    fn close(&mut self, failed: bool) {
        if let Some(tx) = self.tx.take()
            && failed
        {
            let _ = tx.send(WriterMsg::Abort);
        }
    }
}

/// The deciding thread's side of a stage-2 pass: blocks arrive in input order from the executor,
/// are decided by `decider`, and go on to the writer.
struct Pass<'a, R> {
    jobs: &'a [ChunkJob<'a>],
    record_bases: &'a [u64],
    inputs: &'a [neardup_corpus::InputFile],
    cfg: &'a Stage2Config,
    decider: Decider<'a, R>,
    output: OutputLink,
    spares: crossbeam_channel::Sender<RecycledBuffers>,
    /// Per input: whether a block of it started its output, whether part of it could not be
    /// read, whether its last job ended. An input's output is started by its first block: an
    /// input of which nothing could be read gets no output file (a Parquet file without a
    /// readable footer has no schema to write one with), while one that holds no records gets
    /// an empty one.
    file_started: Vec<bool>,
    file_lost: Vec<bool>,
    file_done: Vec<bool>,
    /// What the current job's blocks held, checked against stage 1's counts at its end.
    job_records: u64,
    job_rows: u64,
}

impl<R: HotRoute> Pass<'_, R> {
    fn on_event(
        &mut self,
        event: neardup_exec::Event<Box<PreparedBlock>, Unreadable>,
    ) -> Result<(), DedupError> {
        match event {
            neardup_exec::Event::Block { job, out } => self.on_block(job, out),
            neardup_exec::Event::ReadError { job, error } => self.on_read_error(job, &error),
            neardup_exec::Event::JobEnd { job } => self.on_job_end(job),
        }
    }

    fn on_block(&mut self, job: usize, mut work: Box<PreparedBlock>) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        self.job_records += work.block.num_records() as u64;
        self.job_rows += work.texts;
        if work.block.texts_only() {
            // Counted with the loss before it; only its table rows mattered.
            let _ = self.spares.try_send(RecycledBuffers::from_block(&mut work));
            return Ok(());
        }
        if !self.file_started[fi] {
            self.file_started[fi] = true;
            self.output.send(WriterMsg::Start(fi))?;
        }
        let keep = self.decider.decide_block(
            &work,
            BlockPlace {
                file: fi as u32,
                record_base: self.record_bases[job],
            },
        );
        // Full means the workers hold enough spares: this one is dropped.
        let _ = self.spares.try_send(RecycledBuffers::from_block(&mut work));
        let keep = keep?;
        self.decider.stats.bytes += work.block.input_bytes();
        self.output.send(WriterMsg::Block(work.block, keep))
    }

    fn on_read_error(&mut self, job: usize, lost: &Unreadable) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        let range = UnreadableRange::new(&self.inputs[fi].path, self.record_bases[job], lost);
        // As in stage 1: a failed storage request is never skipped.
        if self.cfg.on_error == OnError::Fail || range.kind == "storage" {
            return Err(DedupError::Input(range.to_string()));
        }
        self.file_lost[fi] = true;
        let stats = &mut self.decider.stats;
        stats.records_unreadable += range.records.unwrap_or(0);
        stats.unreadable.push(range);
        Ok(())
    }

    fn on_job_end(&mut self, job: usize) -> Result<(), DedupError> {
        let fi = self.jobs[job].file;
        let expect = self.jobs[job].expect;
        let (records, rows) = (self.job_records, self.job_rows);
        (self.job_records, self.job_rows) = (0, 0);
        if records != expect.records || rows != expect.rows {
            return Err(DedupError::Mismatch(format!(
                "{}: stage 1 read {} records / {} samples from this part of the file, stage 2 \
                 read {records} / {rows}; did the input change between the stages?",
                self.inputs[fi].path.display(),
                expect.records,
                expect.rows
            )));
        }
        let last_of_file = job + 1 == self.jobs.len() || self.jobs[job + 1].file != fi;
        if last_of_file {
            self.file_done[fi] = true;
            if !self.file_started[fi] && self.file_lost[fi] {
                self.decider
                    .stats
                    .files_unreadable
                    .push(self.inputs[fi].path.clone());
            } else {
                if !self.file_started[fi] {
                    self.output.send(WriterMsg::Start(fi))?;
                }
                self.output.send(WriterMsg::End)?;
            }
        }
        Ok(())
    }

    /// After the last job: files without any chunk (nothing to read) still get their (empty)
    /// output.
    fn finish_files(&mut self) -> Result<(), DedupError> {
        for fi in 0..self.inputs.len() {
            if !self.file_done[fi] {
                self.output.send(WriterMsg::Start(fi))?;
                self.output.send(WriterMsg::End)?;
            }
        }
        Ok(())
    }
}

/// The stage-2 pass over `files` (one shard of a distributed run, or the whole input): reads
/// and prepares blocks on worker threads, and on this thread hands them in order to `route`
/// (see [`HotRoute`]), the decisions file, `observe` and the writer. Returns the statistics and
/// the route (to be finished by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_stage2<R: HotRoute>(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    publication: &Publication,
    observe: &mut dyn FnMut(&Decision),
    route: R,
    addressing: &Addressing<'_>,
) -> Result<(DedupStats, R), DedupError> {
    let started = Instant::now();
    if control.is_cancelled() {
        return Err(DedupError::Interrupted);
    }
    let total_rows: u64 = files.iter().map(|f| f.rows).sum();
    if total_rows != mask.rows() as u64 {
        return Err(DedupError::Mismatch(format!(
            "the hot mask covers {} rows but the inputs have {total_rows}",
            mask.rows()
        )));
    }
    let threads = if cfg.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cfg.threads
    };
    let (jobs, record_bases) = chunk_jobs(files);
    let inputs: Vec<neardup_corpus::InputFile> = files.iter().map(|f| f.input.clone()).collect();
    if let Some(p) = control.progress() {
        p.set_total(inputs.iter().map(|f| f.size).sum());
    }
    let output: Option<&OutputDir> = publication.dataset();
    let decisions = match &cfg.decisions {
        Some(p) => Some(
            publication
                .file(p)
                .and_then(DecisionWriter::to_file)
                .map_err(output_error)?,
        ),
        None => None,
    };

    let window = threads * 2;
    let (wtx, wrx) = crossbeam_channel::bounded::<WriterMsg>(8);
    let (spare_tx, spare_rx) = crossbeam_channel::bounded::<RecycledBuffers>(window);
    let prep = PrepareWork {
        mask,
        cfg,
        control,
        hot_work: route.hot_work(cfg),
        spares: &spare_rx,
        inputs: &inputs,
    };
    let mut pass = Pass {
        jobs: &jobs,
        record_bases: &record_bases,
        inputs: &inputs,
        cfg,
        decider: Decider::new(route, cfg, mask, addressing, decisions, observe),
        output: OutputLink {
            tx: output.is_some().then_some(wtx),
            gone: false,
        },
        spares: spare_tx,
        file_started: vec![false; inputs.len()],
        file_lost: vec![false; inputs.len()],
        file_done: vec![false; inputs.len()],
        job_records: 0,
        job_rows: 0,
    };
    let cancelled = || control.is_cancelled();
    let (ran, written) = std::thread::scope(|scope| {
        let writer = output.map(|out| {
            let inputs = &inputs;
            scope.spawn(move || write_outputs(out, inputs, wrx))
        });
        let ran = neardup_exec::run_ordered(
            &prep,
            &jobs,
            neardup_exec::ExecOptions { threads, window },
            &cancelled,
            |event| pass.on_event(event),
        );
        let ran = match ran {
            Ok(neardup_exec::Completion::Finished) => pass.finish_files(),
            Ok(neardup_exec::Completion::Cancelled) => Err(DedupError::Interrupted),
            Err(e) => Err(e),
        };
        pass.output.close(ran.is_err());
        (
            ran,
            writer.map(|w| w.join().expect("output writer panicked")),
        )
    });
    if let Err(e) = ran {
        // A writer that stopped says why (the file and the system's error, e.g. disk full).
        return Err(match written {
            Some(Err(writer_error)) if pass.output.gone => writer_error,
            _ => e,
        });
    }
    let Pass { mut decider, .. } = pass;
    let mut stats = std::mem::take(&mut decider.stats);
    if let Some(w) = written {
        stats.outputs = w?.into_iter().map(OutputFile::from).collect();
    }
    if let Some(d) = decider.take_decisions() {
        d.finish().map_err(output_error)?;
    }
    if let Some(deduper) = decider.route.deduper_stats() {
        stats.deduper = deduper;
    }
    stats.seconds = started.elapsed().as_secs_f64();
    stats.mb_per_second = stats.bytes as f64 / 1e6 / stats.seconds.max(1e-9);
    Ok((stats, decider.route))
}

enum WriterMsg {
    Start(usize),
    Block(Block, Vec<bool>),
    End,
    Abort,
}

fn write_outputs(
    out: &OutputDir,
    inputs: &[neardup_corpus::InputFile],
    rx: crossbeam_channel::Receiver<WriterMsg>,
) -> Result<Vec<WrittenFile>, DedupError> {
    let mut current: Option<FileWriter> = None;
    let mut written = Vec::new();
    for msg in rx {
        match msg {
            WriterMsg::Start(fi) => {
                current = Some(out.file_writer(&inputs[fi]).map_err(output_error)?);
            }
            WriterMsg::Block(block, keep) => {
                let w = current.as_mut().expect("block before file start");
                w.write_block(&block, &keep).map_err(output_error)?;
            }
            WriterMsg::End => {
                let w = current.take().expect("file end before start");
                written.push(w.finish().map_err(output_error)?);
            }
            // What was written stays in the staging directory, which is removed with the
            // unpublished run.
            WriterMsg::Abort => return Ok(written),
        }
    }
    Ok(written)
}

/// The rare path of a later copy whose full content hash matched no earlier sample: sketch it
/// here from the block's text and hand its candidate to `use_it` (which decides or signs it).
pub(crate) fn sketch_from_block(
    w: &PreparedBlock,
    target: &PreparedSample,
    row: u64,
    cfg: &Stage2Config,
    mask: &HotMask,
    addr: SampleAddr,
    mut use_it: impl FnMut(&Candidate<'_>),
) {
    let columns = cfg.rule.columns(cfg.sketcher.bands());
    let mut scratch = Scratch::default();
    let mut sig = vec![0u32; cfg.sketcher.num_perm()];
    let mut keys = vec![0u64; columns];
    let mut shingles = Vec::new();
    let with_shingles = needs_shingles(cfg);
    let hot: Vec<bool> = (0..columns).map(|c| mask.is_hot(row as usize, c)).collect();
    w.block.for_each_sample(&cfg.selector, |s| {
        if s.record as u32 != target.record || s.field != target.field {
            return;
        }
        if let SampleText::Text(text) = s.text {
            let r = cfg
                .rule
                .sketch(&cfg.sketcher, &text, &mut scratch, &mut sig, &mut keys);
            if with_shingles {
                cfg.sketcher.last_shingle_set(&mut scratch, &mut shingles);
            }
            use_it(&Candidate {
                addr,
                signature: &sig,
                row: &keys,
                hot: &hot,
                content_hash: r.content_hash,
                shingles: with_shingles.then_some(shingles.as_slice()),
            });
        }
    });
}
