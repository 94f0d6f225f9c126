//! What the worker threads of a stage-2 pass make of each block, for the deciding thread: every
//! sample classified ([`SampleKind`]), the hot ones signed as the pass's route asks
//! ([`HotWork`]), in a [`PreparedBlock`] whose vectors are recycled ([`RecycledBuffers`]). The
//! pass is a step of the executor here ([`PrepareWork`] is its `neardup_exec::ChunkWork`).
//! Builds on `pass`.

use neardup_corpus::{
    Block, Chunk, ChunkRange, Format, Projection, ReadOptions, RecordPlace, RecordSpan, SampleText,
    TextSelector, Unreadable, read_records, read_records_whole, read_rows, reread_chunk,
};
use neardup_exec::StepControl;
use neardup_keys::{HotMask, RecordPlaces, RowKind};
use neardup_sketch::Scratch;

use crate::deduper::{Candidate, SampleAddr};
use crate::large_set::{SetBuilder, SpilledSet};
use crate::pass::{Stage2Config, needs_shingles};

/// Where a hot sample's shingle set is.
#[derive(Clone, Copy)]
pub(crate) enum Material {
    /// In the block's `shingles` (empty when the pass keeps no sets).
    Block(u32, u32),
    /// In the block's `spilled_sets` (a text longer than [`LARGE_SET_TEXT`] under a memory
    /// limit).
    Spilled(u32),
    /// Building it in a scratch file failed with the block's `set_errors` at this index.
    Failed(u32),
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
        /// Its shingle set (a one-process run under exact verification).
        material: Material,
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

pub(crate) struct PreparedSample {
    pub record: u32,
    pub field: u32,
    pub kind: SampleKind,
    pub id: Option<(u32, u32)>,
    /// Its rank, when a `sign` step ranks hot samples (`Stage2Config::prefer`); else 0.
    pub rank: u64,
}

/// One block, read and prepared by a worker.
pub(crate) struct PreparedBlock {
    pub block: Block,
    /// The table row of its first sample with a text.
    pub first_row: u64,
    /// Table rows the block covers (its samples with a text).
    pub texts: u64,
    pub samples: Vec<PreparedSample>,
    pub signatures: Vec<u32>,
    pub rows: Vec<u64>,
    pub hot: Vec<bool>,
    pub shingles: Vec<u32>,
    /// The shingle sets built in scratch files ([`Material::Spilled`]).
    pub spilled_sets: Vec<SpilledSet>,
    /// What failed building a set in a scratch file ([`Material::Failed`]): the pass fails.
    pub set_errors: Vec<std::io::Error>,
    /// The texts hot samples carry to a `sign` step's output.
    pub carried: String,
    pub ids: String,
    /// The first hot sample (its index in `samples`) whose rank field holds something that is
    /// not a number, and what it holds: the pass stops there.
    pub bad_rank: Option<(u32, &'static str)>,
    /// Samples ranked by a field, and those of them whose field held a number.
    pub ranked: (u32, u32),
}

impl PreparedBlock {
    /// The bytes preparing added to the block (its vectors, as allocated): charged with the
    /// block against the executor's block memory.
    pub fn prepared_bytes(&self) -> u64 {
        (self.samples.capacity() * size_of::<PreparedSample>()
            + self.signatures.capacity() * size_of::<u32>()
            + self.rows.capacity() * size_of::<u64>()
            + self.hot.capacity()
            + self.shingles.capacity() * size_of::<u32>()
            + self.carried.capacity()
            + self.ids.capacity()) as u64
    }

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
pub(crate) struct RecycledBuffers {
    samples: Vec<PreparedSample>,
    signatures: Vec<u32>,
    rows: Vec<u64>,
    hot: Vec<bool>,
    shingles: Vec<u32>,
    carried: String,
}

impl RecycledBuffers {
    pub fn from_block(w: &mut PreparedBlock) -> RecycledBuffers {
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

/// One chunk of an input as a job of the executor, with the table row of its first sample and
/// stage 1's counts of it.
pub(crate) struct ChunkJob<'a> {
    pub file: usize,
    pub chunk: Chunk,
    pub row_base: u64,
    pub expect: &'a neardup_keys::ChunkRows,
    /// How it reads by the places of the chunk's records, if stage 1 noted them.
    pub by_places: PlacesRead,
}

/// How a job uses the places of its chunk's records that stage 1 noted (see [`crate::stage`]'s
/// `reads_by_places`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlacesRead {
    /// Not at all: the chunk is read and parsed whole.
    Ignored,
    /// Only the records to decide are read (and parsed); the others are decided unread.
    Picked,
    /// The chunk is read whole, since the filtered dataset copies the records passed over,
    /// but only the records to decide are parsed.
    Whole,
}

impl ChunkJob<'_> {
    /// The places this job reads by, if it does.
    pub fn places(&self) -> Option<&RecordPlaces> {
        self.expect
            .places
            .as_ref()
            .filter(|_| self.by_places != PlacesRead::Ignored)
    }
}

/// The records of a chunk that stage 2 has to read (its rows from `row`): those that are not
/// plain (a blank line, a slot without a text or with a blank text: the pass reads them to
/// decide them as a whole read would) and those with a hot row. The others are decided unread,
/// each of their samples `unique` (cold).
fn records_to_read(places: &RecordPlaces, mut row: u64, mask: &HotMask) -> Vec<RecordPlace> {
    let rows = mask.rows() as u64;
    let mut picks = Vec::new();
    for (record, p) in places.iter().enumerate() {
        let end = row + u64::from(p.rows);
        if !p.plain || (row..end.min(rows)).any(|r| mask.is_hot_row(r as usize)) {
            picks.push(RecordPlace {
                record: record as u64,
                offset: p.offset,
                len: p.len,
            });
        }
        row = end;
    }
    picks
}

/// The records of a block read by their places that were passed over unread, walked in order
/// alongside its samples.
struct PassedOver<'a> {
    /// The block's records read (all of them for a block read whole).
    read: Option<&'a [usize]>,
    /// How many of `read` lie before `next`.
    seen: usize,
    /// The first record not walked yet.
    next: usize,
}

impl<'a> PassedOver<'a> {
    fn of(block: &'a Block) -> PassedOver<'a> {
        PassedOver {
            read: block.records_read(),
            seen: 0,
            next: 0,
        }
    }

    /// Walks on to record `end` (exclusive), calling `f` with each record passed over.
    fn upto(&mut self, end: usize, mut f: impl FnMut(usize)) {
        let Some(read) = self.read else {
            return;
        };
        while self.next < end {
            if read.get(self.seen) == Some(&self.next) {
                self.seen += 1;
            } else {
                f(self.next);
            }
            self.next += 1;
        }
    }
}

/// What every thread shares while preparing blocks: the stage-2 pass as a step of the executor
/// (`neardup_exec`).
pub(crate) struct PrepareWork<'a> {
    pub mask: &'a HotMask,
    pub cfg: &'a Stage2Config,
    pub control: &'a StepControl,
    pub hot_work: HotWork,
    pub spares: &'a crossbeam_channel::Receiver<RecycledBuffers>,
    /// The inputs the jobs read.
    pub inputs: &'a [neardup_corpus::InputFile],
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
pub(crate) struct PrepareBuffers {
    /// One scratch per thread, not per chunk: its buffers grow to the largest text seen, and
    /// growing them again for every chunk cost page faults and copies.
    scratch: Scratch,
    sig: Vec<u32>,
    row_keys: Vec<u64>,
    /// The longest text sketched with these buffers, in bytes.
    largest_text: usize,
}

/// Under a memory limit, a thread's buffers are made anew after it sketched a text longer than
/// this: they grow with the longest text they served (several bytes per character), which no
/// budget counts, and kept in every thread that met a long text they would add up.
const LARGE_TEXT: usize = 1 << 20;

/// Under a memory limit and exact verification, a hot text longer than this (in bytes) has its
/// shingle set built in a scratch file ([`crate::large_set`]) rather than in memory, where its
/// hashes, the set and the sort's buffers take up to 16 bytes per byte of text.
pub(crate) const LARGE_SET_TEXT: usize = 1 << 20;

/// Hashes handed at once to a [`SetBuilder`].
const SET_PIECE: usize = 1 << 14;

/// The shingle set of `text` in a scratch file in `spill_dir`, built a piece at a time.
fn spilled_set(
    cfg: &Stage2Config,
    text: &str,
    scratch: &mut Scratch,
) -> std::io::Result<SpilledSet> {
    let mut builder = SetBuilder::new(cfg.deduper.spill_dir.clone());
    let mut failed = None;
    cfg.sketcher
        .for_each_shingle_hash(text, scratch, SET_PIECE, |hashes| {
            if failed.is_none()
                && let Err(e) = builder.add(hashes)
            {
                failed = Some(e);
            }
        });
    match failed {
        Some(e) => Err(e),
        None => builder.finish(),
    }
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
            largest_text: 0,
        }
    }
}

/// How a pass reads its chunks: whole records, to write them; but a pass that writes no
/// dataset (decisions only, or a `sign` step) decodes the columns of its samples alone (text,
/// id and rank columns of a Parquet file, as stage 1 reads them): nothing it writes needs the
/// others, and a damaged page of a column it never reads costs no records, whether it reads a
/// chunk whole or only the rows it decides ([`read_rows`]).
fn read_options(cfg: &Stage2Config) -> ReadOptions {
    let samples_only = cfg.output.is_none();
    ReadOptions {
        selector: cfg.selector.clone(),
        projection: if samples_only {
            Projection::TextOnly
        } else {
            Projection::FullRecords
        },
        block_bytes: cfg.block_bytes,
    }
}

/// Samples with a text in `block` (the table rows it covers): every sample of a record passed
/// over has one.
fn count_texts(block: &Block, selector: &TextSelector) -> u64 {
    let mut texts = 0u64;
    block.for_each_sample(selector, |s| {
        texts += u64::from(matches!(s.text, SampleText::Text(_)));
    });
    let passed = block
        .records_read()
        .map_or(0, |read| block.num_records() - read.len());
    texts + (passed * selector.samples_per_record()) as u64
}

/// Hands the texts of `block` that [`prepare_block`] signs (hot rows that are not later copies,
/// the first text's row being `row`) to a tokenizer that takes them in batches
/// (`neardup_sketch::Sketcher::prefetch`).
fn prefetch_hot_texts(block: &Block, cfg: &Stage2Config, mask: &HotMask, mut row: u64) {
    let mut texts = Vec::new();
    let per_record = cfg.selector.samples_per_record() as u64;
    let mut passed = PassedOver::of(block);
    block.for_each_sample(&cfg.selector, |s| {
        passed.upto(s.record + 1, |_| row += per_record);
        if let SampleText::Text(text) = s.text {
            let r = row as usize;
            if row < mask.rows() as u64 && mask.is_hot_row(r) && !mask.is_later_copy(r) {
                texts.push(text.into_owned());
            }
            row += 1;
        }
    });
    cfg.sketcher.prefetch(texts.iter().map(String::as_str));
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
        largest_text,
    } = worker;
    let first_row = *row;
    if block.texts_only() {
        // Records stage 1 sketched but stage 2 cannot read whole: their table rows are passed
        // over, and they are neither decided nor written (the loss before them reports them).
        let texts = count_texts(&block, &cfg.selector);
        *row += texts;
        return PreparedBlock {
            block,
            first_row,
            texts,
            samples: Vec::new(),
            signatures: Vec::new(),
            rows: Vec::new(),
            hot: Vec::new(),
            shingles: Vec::new(),
            spilled_sets: Vec::new(),
            set_errors: Vec::new(),
            carried: String::new(),
            ids: String::new(),
            bad_rank: None,
            ranked: (0, 0),
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
    if cfg.sketcher.wants_batches() && hot_work != HotWork::Decided && !texts_of_hot {
        prefetch_hot_texts(&block, cfg, mask, *row);
    }
    let mut ids = String::new();
    let mut spilled_sets = Vec::new();
    let mut set_errors = Vec::new();
    let mut next_row = *row;
    let ranking = matches!(hot_work, HotWork::Sign { .. }) && !cfg.prefer.is_input_order();
    let mut bad_rank = None;
    let mut ranked = (0u32, 0u32);
    // A record passed over unread is plain and cold: each of its samples is a cold text.
    let per_record = cfg.selector.samples_per_record() as u32;
    let mut passed = PassedOver::of(&block);
    let pass_over = |record: usize, samples: &mut Vec<PreparedSample>, next_row: &mut u64| {
        for field in 0..per_record {
            samples.push(PreparedSample {
                record: record as u32,
                field,
                kind: SampleKind::Cold,
                id: None,
                rank: 0,
            });
            *next_row += 1;
        }
    };
    block.for_each_sample(&cfg.selector, |s| {
        passed.upto(s.record + 1, |r| pass_over(r, &mut samples, &mut next_row));
        let mut rank = 0;
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
                *largest_text = (*largest_text).max(text.len());
                let kind = if this_row >= mask.rows() as u64 || !mask.is_hot_row(this_row as usize)
                {
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
                    // A text whose set goes to a scratch file is signed without keeping its
                    // distinct hashes.
                    let spill_set = shingles_of_hot
                        && cfg.block_memory.is_some()
                        && text.len() > LARGE_SET_TEXT;
                    scratch.set_collecting_shingle_sets(shingles_of_hot && !spill_set);
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
                        let material = if spill_set {
                            match spilled_set(cfg, &text, scratch) {
                                Ok(set) => {
                                    spilled_sets.push(set);
                                    Material::Spilled(spilled_sets.len() as u32 - 1)
                                }
                                Err(e) => {
                                    set_errors.push(e);
                                    Material::Failed(set_errors.len() as u32 - 1)
                                }
                            }
                        } else if shingles_of_hot {
                            let start = shingles.len() as u32;
                            cfg.sketcher.last_shingle_set(scratch, &mut shingles);
                            Material::Block(start, shingles.len() as u32)
                        } else {
                            Material::Block(0, 0)
                        };
                        SampleKind::Hot {
                            content_hash: r.content_hash,
                            slot,
                            material,
                            row: this_row,
                        }
                    }
                };
                if ranking
                    && matches!(
                        kind,
                        SampleKind::Hot { .. } | SampleKind::Text { .. } | SampleKind::Copy { .. }
                    )
                {
                    ranked.0 += 1;
                    if matches!(s.rank, neardup_corpus::RankValue::Number(v) if !v.is_nan()) {
                        ranked.1 += 1;
                    }
                    rank = cfg.prefer.rank(&text, s.rank).unwrap_or_else(|what| {
                        bad_rank.get_or_insert((samples.len() as u32, what));
                        u64::MAX
                    });
                }
                kind
            }
        };
        samples.push(PreparedSample {
            record: s.record as u32,
            field: s.field,
            kind,
            id,
            rank,
        });
    });
    passed.upto(block.num_records(), |r| {
        pass_over(r, &mut samples, &mut next_row)
    });
    let texts = next_row - *row;
    *row = next_row;
    if let Some(p) = control.progress() {
        p.add(block.disk_bytes(), samples.len() as u64);
    }
    PreparedBlock {
        block,
        first_row,
        texts,
        samples,
        signatures,
        rows,
        hot,
        shingles,
        spilled_sets,
        set_errors,
        carried,
        ids,
        bad_rank,
        ranked,
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
        let file = &self.inputs[job.file];
        match job.places() {
            Some(places) if file.format == Format::Parquet => read_rows(
                file,
                &job.chunk,
                &read_options(self.cfg),
                records_to_read(places, job.row_base, self.mask)
                    .into_iter()
                    .map(|p| p.record)
                    .collect(),
            ),
            Some(places) if job.by_places == PlacesRead::Whole => read_records_whole(
                file,
                &job.chunk,
                &read_options(self.cfg),
                &job.expect.unreadable,
                records_to_read(places, job.row_base, self.mask),
            ),
            Some(places) => read_records(
                file,
                &job.chunk,
                RecordSpan {
                    records: places.records(),
                    start: places.start(),
                    end: places.end(),
                },
                places.resume_points(),
                records_to_read(places, job.row_base, self.mask),
                self.cfg.block_bytes,
            ),
            None => reread_chunk(
                file,
                &job.chunk,
                &read_options(self.cfg),
                &job.expect.unreadable,
            ),
        }
        .map(|r| r.map_err(|e| e.unreadable()))
    }

    fn shares_blocks(&self, job: &ChunkJob<'a>) -> bool {
        job.chunk.range == ChunkRange::Whole
    }

    fn first_position(&self, job: &ChunkJob<'a>) -> u64 {
        job.row_base
    }

    /// The block, and at most what preparing it adds: per record, a signature, a row of keys
    /// and its hot columns; under exact verification, a shingle set of at most 4 bytes per byte
    /// of text.
    fn block_bytes(&self, block: &Block) -> u64 {
        let cfg = self.cfg;
        let columns = cfg.rule.columns(cfg.sketcher.bands());
        let per_record = size_of::<PreparedSample>()
            + cfg.sketcher.num_perm() * size_of::<u32>()
            + columns * (size_of::<u64>() + 1);
        let sets = match self.hot_work {
            HotWork::Decide { shingles: true } => 4 * block.input_bytes(),
            _ => 0,
        };
        block.memory_bytes() + (block.num_records() * per_record) as u64 + sets
    }

    fn out_bytes(&self, out: &Box<PreparedBlock>) -> Option<u64> {
        Some(out.block.memory_bytes() + out.prepared_bytes())
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
        if self.cfg.block_memory.is_some() && worker.largest_text > LARGE_TEXT {
            *worker = PrepareBuffers::new(self);
        }
        (Box::new(work), row)
    }
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
    let with_shingles = needs_shingles(cfg);
    let mut scratch = if with_shingles {
        Scratch::collecting_shingle_sets()
    } else {
        Scratch::default()
    };
    let mut sig = vec![0u32; cfg.sketcher.num_perm()];
    let mut keys = vec![0u64; columns];
    let mut shingles = Vec::new();
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use neardup_corpus::{Compression, Format, InputFile, TextSelector};
    use neardup_keys::{FileRows, HotKeys, KeyTable, RowRule, ShortTextPolicy, TableLayout};

    use super::*;

    /// A mask over one band column of `keys` (a row each), with `hot` the hot keys.
    fn mask(keys: &[u64], hot: &[u64]) -> HotMask {
        let layout = TableLayout {
            sketch_fingerprint: 1,
            sketch_description: "test".into(),
            bands: 1,
            rule: RowRule {
                band_keys: true,
                exact_key: false,
                short_texts: ShortTextPolicy::ExactOnly,
            },
            selector: TextSelector::single(neardup_corpus::FieldPath::top("text")),
        };
        let files = vec![FileRows {
            input: InputFile {
                path: PathBuf::from("a.jsonl"),
                relative: PathBuf::from("a.jsonl"),
                format: Format::Jsonl,
                compression: Compression::None,
                size: 0,
            },
            records: keys.len() as u64,
            rows: keys.len() as u64,
            chunks: Vec::new(),
        }];
        let table = KeyTable::new(layout.clone(), 0, files, keys.to_vec()).unwrap();
        let hot = HotKeys::new(layout, 1, hot.to_vec());
        HotMask::from_tables(&[&table], &hot).unwrap()
    }

    fn picked(places: &RecordPlaces, row: u64, mask: &HotMask) -> Vec<(u64, u64, u64)> {
        records_to_read(places, row, mask)
            .into_iter()
            .map(|p| (p.record, p.offset, p.len))
            .collect()
    }

    #[test]
    fn records_to_read_are_the_hot_and_the_not_plain() {
        // Rows 0..4 of the table; row 2 (key 7) is hot.
        let mask = mask(&[1, 2, 7, 3], &[7]);
        // Five records from offset 100: the third is a blank line (no row, not plain), so
        // the fourth holds row 2.
        let mut places = RecordPlaces::new(100, 1);
        for (len, rows, plain) in [(10, 1, true), (20, 1, true), (1, 0, false), (30, 1, true)] {
            places.push(len, rows, plain);
        }
        places.push(40, 1, true);
        // The blank line (read to be decided as a whole read would) and the hot record; each
        // at its own offset and length.
        assert_eq!(picked(&places, 0, &mask), vec![(2, 130, 1), (3, 131, 30)]);
        // Starting one row later, the hot row is the second record's; the blank line is read
        // whatever the rows.
        assert_eq!(picked(&places, 1, &mask), vec![(1, 110, 20), (2, 130, 1)]);
    }

    #[test]
    fn records_to_read_look_at_every_row_of_a_record_and_no_row_past_the_mask() {
        // Two samples per record (expand mode): record 1 holds rows 2 and 3, and row 3 is hot.
        let mask = mask(&[1, 2, 3, 7], &[7]);
        let mut places = RecordPlaces::new(0, 2);
        for _ in 0..3 {
            places.push(8, 2, true);
        }
        assert_eq!(picked(&places, 0, &mask), vec![(1, 8, 8)]);
        // Record 2's rows lie past the mask's four rows: nothing makes it hot.
        assert!(picked(&places, 4, &mask).is_empty());
    }

    #[test]
    fn passed_over_walks_the_records_not_read() {
        let read = [0usize, 2, 5];
        let mut walk = PassedOver {
            read: Some(&read),
            seen: 0,
            next: 0,
        };
        let mut passed = Vec::new();
        walk.upto(4, |r| passed.push(r));
        assert_eq!(passed, vec![1, 3]);
        walk.upto(4, |r| passed.push(r));
        assert_eq!(passed, vec![1, 3], "a record is walked once");
        walk.upto(7, |r| passed.push(r));
        assert_eq!(passed, vec![1, 3, 4, 6]);
        // A block read whole passes nothing over.
        let mut whole = PassedOver {
            read: None,
            seen: 0,
            next: 0,
        };
        whole.upto(10, |r| passed.push(r));
        assert_eq!(passed.len(), 4);
    }
}
