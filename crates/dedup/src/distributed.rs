//! The steps of a distributed stage 2, built from the one-process pipeline's pieces.
//!
//! Decisions interact only inside connected components of hot rows (see `neardup_keys::plan`),
//! so stage 2 splits into three steps with explicit values between them:
//!
//! - **sign** (per shard, [`crate::run_sign`]): the stage-2 pass over one shard, whose deciding
//!   thread hands each hot sample to a [`Signer`] instead of the decision core. The signer writes
//!   what deciding the sample needs ([`SignedSample`]) to the stream of the sample's group.
//! - **decide** (per group, [`decide_group`]): reads its group's streams of every shard in shard
//!   order (the global row order; with a preference, `crate::Prefer`, merged in (rank, row)
//!   order, each stream sorted so by its sign step), runs the decision core exactly as a
//!   one-process run does, and writes one [`DecidedSample`] per hot sample to the stream of the
//!   sample's shard, in row order. It opens no input file; the texts it sketches are sketched
//!   ahead of their turn on worker threads, the decision core running in order on one.
//! - **write** (per shard, [`crate::run_write`]): the stage-2 pass over one shard again, without
//!   signing; its hot samples take their verdicts from a [`DecidedMerge`] of every group's stream
//!   for the shard, cold ones are kept as in a one-process run, and the dataset and decisions are
//!   written.
//!
//! A later exact copy whose original is an earlier hot sample of its own shard travels as its
//! content hash alone ([`SignedKind::Copy`]): the original is decided first, in the same group
//! (same content key), so the hash finds it (not so with a preference, where every copy travels
//! with its text). Any other later copy (by stage 1's count) travels as
//! its hash, hot columns and text ([`SignedKind::CopyWithText`]): the hash decides it unless two
//! texts' content keys collided, and only then is it sketched, in decide. Every other hot sample
//! ([`SignedKind::Full`]) carries, under exact verification, its hot columns and text: decide
//! sketches the text once for its signature, keys and shingle set, as a one-process run does in
//! its workers, so no shingle is hashed twice and sign hashes none. Under `--verify estimate` it
//! carries its signature and hot columns instead, and decide computes its keys from the
//! signature.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read};
use std::path::PathBuf;

use hashbrown::HashSet;
use neardup_corpus::Publication;
use neardup_exec::{CancelToken, ExecOptions, StepControl};
use neardup_keys::{
    FileRows, HotKeys, HotMask, HotRowGroups, RowKind, RowRule, ShardPlace, content_key,
};
use neardup_sketch::{Scratch, Sketcher, band_keys};

use crate::clusters::ClusterCounter;
use crate::deduper::{Candidate, Deduper, DeduperConfig, DeduperStats, SampleAddr, Verdict};
use crate::error::{DedupError, SettingsError, StepInputError};
use crate::handoff::{
    DecidedSample, RecordReader, RecordWriter, SignedKind, SignedParts, SignedSample, SignedShape,
    decode_decided, decode_signed, encode_decided, encode_signed_parts,
};
use crate::pass::{Addressing, DedupStats, Stage2Config, needs_shingles};
use crate::prepare::{HotWork, SampleKind};
use crate::prior::PriorState;
use crate::rank_order::RecordSorter;
use crate::route::{HotRoute, HotSample, wrong_route};
use crate::stage::run_stage2;
use crate::step_sink::StepSink;

/// Writes the signed samples of one shard, one stream per group (see the module docs).
pub struct Signer<'a> {
    /// The shard's hot mask: each sample's hot columns.
    mask: &'a HotMask,
    /// The group of each hot row of the shard (from the hot-key file's plan); all hot rows are
    /// in one group without.
    groups: Option<HotRowGroups<'a>>,
    shape: SignedShape,
    streams: Vec<RecordWriter<StepSink>>,
    /// Content hashes of this shard's hot samples so far: a later copy of one is sent as its
    /// hash alone.
    seen: HashSet<u128>,
    samples: Vec<u64>,
    copies_by_hash: u64,
    /// The hot columns of the sample being written (reused).
    hot_columns: Vec<bool>,
    /// Ranked samples wait here to be written in (rank, row) order ([`SignedShape::ranked`]).
    sorter: Option<RecordSorter>,
    /// The sample being encoded for the sorter (reused).
    encoded: Vec<u8>,
}

/// Where a hot sample of a `sign` step is, and what names it.
pub(crate) struct SampleAt<'s> {
    /// Its row in the global row order.
    pub row: u64,
    /// Its row in the shard (the mask's numbering).
    pub local_row: u64,
    /// Its rank (0 unless the signer's shape is ranked).
    pub rank: u64,
    pub addr: SampleAddr,
    pub id: Option<&'s str>,
    pub content_hash: u128,
}

/// What a [`Signer`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SignedCounts {
    /// Signed samples per group.
    pub samples: Vec<u64>,
    /// Of those, later exact copies sent as their content hash alone.
    pub copies_by_hash: u64,
}

impl<'a> Signer<'a> {
    /// A signer of the hot rows of `mask` (one shard's, made with `hot` and
    /// [`neardup_keys::RowGrouping::Record`]) writing group `g`'s samples to `sinks[g]` (one sink
    /// per group of `hot`).
    pub fn new(
        hot: &HotKeys,
        mask: &'a HotMask,
        shape: SignedShape,
        sinks: Vec<StepSink>,
    ) -> io::Result<Self> {
        assert_eq!(sinks.len(), hot.groups() as usize, "one sink per group");
        Signer::for_mask(mask, shape, sinks)
    }

    /// A signer of the hot rows of `mask`, whose groups it knows, into one sink per group.
    fn for_mask(mask: &'a HotMask, shape: SignedShape, sinks: Vec<StepSink>) -> io::Result<Self> {
        assert!(mask.has_groups(), "a signer's mask knows its rows' groups");
        Signer::with_groups(mask, Some(mask.groups()), shape, sinks)
    }

    pub(crate) fn with_groups(
        mask: &'a HotMask,
        groups: Option<HotRowGroups<'a>>,
        shape: SignedShape,
        sinks: Vec<StepSink>,
    ) -> io::Result<Self> {
        let streams = sinks
            .into_iter()
            .map(RecordWriter::new)
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Signer {
            mask,
            groups,
            shape,
            samples: vec![0; streams.len()],
            streams,
            seen: HashSet::new(),
            copies_by_hash: 0,
            hot_columns: Vec::new(),
            sorter: None,
            encoded: Vec::new(),
        })
    }

    /// Where ranked samples are sorted: up to `memory` bytes are held before sorted runs spill
    /// to `spill_dir` (the system's temporary directory when unset). Without it, a ranked
    /// signer holds them all.
    pub fn sorting_in(mut self, memory: usize, spill_dir: Option<PathBuf>) -> Self {
        if self.shape.ranked {
            self.sorter = Some(RecordSorter::by_rank(self.streams.len(), memory, spill_dir));
        }
        self
    }

    /// The shape of every sample this signer writes.
    pub fn shape(&self) -> SignedShape {
        self.shape
    }

    /// Writes one sample to its group's stream; a sample of any kind but
    /// [`SignedKind::Copy`] carries its hot columns, read from the mask.
    fn write(
        &mut self,
        at: &SampleAt<'_>,
        kind: SignedKind,
        signature: &[u32],
        text: &str,
    ) -> io::Result<()> {
        let row = at.local_row as usize;
        let group = match &mut self.groups {
            Some(groups) => groups.group_of(row),
            None => (row < self.mask.rows() && self.mask.is_hot_row(row)).then_some(0),
        };
        let group = group.ok_or_else(|| {
            io::Error::other(format!(
                "row {} of the shard is signed but the hot keys mark it cold",
                at.local_row
            ))
        })?;
        let mut hot = std::mem::take(&mut self.hot_columns);
        hot.clear();
        if kind != SignedKind::Copy {
            let (mask, row) = (self.mask, at.local_row as usize);
            hot.extend((0..self.shape.columns).map(|c| mask.is_hot(row, c)));
        }
        let sample = SignedParts {
            rank: at.rank,
            row: at.row,
            addr: at.addr,
            id: at.id,
            content_hash: at.content_hash,
            kind,
            signature,
            hot: &hot,
            text,
        };
        if self.shape.ranked {
            let sorter = self
                .sorter
                .get_or_insert_with(|| RecordSorter::by_rank(self.streams.len(), usize::MAX, None));
            self.encoded.clear();
            encode_signed_parts(&sample, self.shape, &mut self.encoded);
            sorter.push(group, &self.encoded)?;
        } else {
            let stream = &mut self.streams[group as usize];
            encode_signed_parts(&sample, self.shape, stream.buffer());
            stream.record_done()?;
        }
        self.hot_columns = hot;
        self.samples[group as usize] += 1;
        Ok(())
    }

    /// Writes a hot sample that is not a later copy: with its `signature` under
    /// `--verify estimate` (decide computes its keys from it), with its `text` alone when this
    /// signer's shape carries texts (decide sketches it); the other one is not written.
    pub(crate) fn push_full(
        &mut self,
        at: &SampleAt<'_>,
        signature: &[u32],
        text: &str,
    ) -> io::Result<()> {
        self.seen.insert(at.content_hash);
        self.write(at, SignedKind::Full, signature, text)
    }

    /// Writes a later exact copy by stage 1's count: as its content hash alone when an earlier
    /// hot sample of this shard had the same hash, else with its hot columns and text (decide
    /// sketches it only if the hash finds no earlier sample).
    /// Ranked samples are decided in rank order, where the original may come after its copy:
    /// every copy carries its text.
    pub(crate) fn push_copy(&mut self, at: &SampleAt<'_>, text: &str) -> io::Result<()> {
        if self.seen.insert(at.content_hash) || self.shape.ranked {
            self.write(at, SignedKind::CopyWithText, &[], text)
        } else {
            self.write(at, SignedKind::Copy, &[], "")?;
            self.copies_by_hash += 1;
            Ok(())
        }
    }

    /// Ends every stream; returns the sinks (in group order) and what was written.
    pub fn finish(mut self) -> io::Result<(Vec<StepSink>, SignedCounts)> {
        if let Some(sorter) = self.sorter.take() {
            sorter.finish(&mut self.streams)?;
        }
        let sinks = self
            .streams
            .into_iter()
            .map(RecordWriter::finish)
            .collect::<io::Result<Vec<_>>>()?;
        Ok((
            sinks,
            SignedCounts {
                samples: self.samples,
                copies_by_hash: self.copies_by_hash,
            },
        ))
    }
}

/// The decided samples of one shard from every group's stream, merged by row (see the module
/// docs).
pub struct DecidedMerge<R: Read> {
    streams: Vec<(String, RecordReader<R>)>,
    heads: Vec<Option<DecidedSample>>,
}

pub(crate) fn step_error(name: &str, e: io::Error) -> DedupError {
    DedupError::Step(StepInputError::Read {
        stream: name.to_string(),
        error: e,
    })
}

impl<R: Read> DecidedMerge<R> {
    /// Merges `streams` (each named for messages: the decided directory it came from).
    pub fn new(streams: Vec<(String, RecordReader<R>)>) -> Result<Self, DedupError> {
        let mut merge = DecidedMerge {
            heads: vec![None; streams.len()],
            streams,
        };
        for i in 0..merge.streams.len() {
            merge.advance(i, None)?;
        }
        Ok(merge)
    }

    /// Reads stream `i`'s next decision into its head; `after` is the row of the one just
    /// taken from it, which the next must follow.
    fn advance(&mut self, i: usize, after: Option<u64>) -> Result<(), DedupError> {
        let (name, reader) = &mut self.streams[i];
        let mut got = None;
        reader
            .next(|b| {
                let (d, n) = decode_decided(b)?;
                got = Some(d);
                Ok(n)
            })
            .map_err(|e| step_error(name, e))?;
        if let (Some(next), Some(after)) = (&got, after)
            && next.row <= after
        {
            return Err(DedupError::Step(StepInputError::DecidedOutOfOrder {
                stream: name.clone(),
                row: next.row,
                after,
            }));
        }
        self.heads[i] = got;
        Ok(())
    }

    /// The decision of hot row `row` (global numbering); rows must be asked for in ascending
    /// order, every decided row exactly once.
    pub(crate) fn take(&mut self, row: u64) -> Result<DecidedSample, DedupError> {
        let mut found = None;
        for (i, head) in self.heads.iter().enumerate() {
            match head {
                Some(d) if d.row < row => {
                    return Err(DedupError::Step(StepInputError::NotHotRow {
                        stream: self.streams[i].0.clone(),
                        row: d.row,
                        before_end: true,
                    }));
                }
                Some(d) if d.row == row => found = Some(i),
                _ => {}
            }
        }
        let Some(i) = found else {
            return Err(DedupError::Step(StepInputError::NoDecision { row }));
        };
        let d = self.heads[i].take().expect("found");
        self.advance(i, Some(d.row))?;
        Ok(d)
    }

    /// Checks that every decision was taken (and every stream read to its verified end).
    pub fn finish(self) -> Result<(), DedupError> {
        for (i, head) in self.heads.iter().enumerate() {
            if let Some(d) = head {
                return Err(DedupError::Step(StepInputError::NotHotRow {
                    stream: self.streams[i].0.clone(),
                    row: d.row,
                    before_end: false,
                }));
            }
        }
        Ok(())
    }
}

/// What the decision core needs besides its settings: the sketch settings and row rule the
/// samples were signed with (decide computes their keys from their signatures, builds the shingle
/// sets exact verification compares from their texts, and sketches the rare later copy whose
/// hash finds no original).
#[derive(Clone, Debug)]
pub struct DecideShape {
    /// The sketch settings of the tables.
    pub sketcher: Sketcher,
    /// The row rule of the tables.
    pub rule: RowRule,
}

/// A signed sample made whole for the decision core: its row of keys computed again, or, for a
/// later copy whose hash found no original, its signature and keys sketched from its text.
struct Rebuilt {
    /// Collects each text's shingles while signing it, so that its set costs only a sort.
    scratch: Scratch,
    signature: Vec<u32>,
    keys: Vec<u64>,
    set: Vec<u32>,
}

impl Rebuilt {
    fn new(sketch: &DecideShape) -> Rebuilt {
        Rebuilt {
            scratch: Scratch::collecting_shingle_sets(),
            signature: vec![0; sketch.sketcher.num_perm()],
            keys: vec![0; sketch.rule.columns(sketch.sketcher.bands())],
            set: Vec::new(),
        }
    }

    /// The keys of a full sample, as stage 1's sketch computed them: band keys from the
    /// signature, the content key from the content hash.
    fn keys_of(&mut self, sketch: &DecideShape, signature: &[u32], content_hash: u128) {
        let bands = sketch.rule.band_columns(sketch.sketcher.bands());
        let config = sketch.sketcher.config();
        band_keys(
            config.band_keys,
            config.lsh,
            signature,
            &mut self.keys[..bands],
        );
        if let Some(slot) = self.keys.get_mut(bands) {
            *slot = content_key(content_hash);
        }
    }

    /// Decides a sample sent as its text: sketched here as a one-process run sketches it from
    /// its block (signature, keys and, under exact verification, its shingle set, from one
    /// pass over the text).
    fn decide_text(
        &mut self,
        deduper: &mut Deduper,
        sketch: &DecideShape,
        sample: &SignedSample,
        name: &str,
    ) -> Result<Verdict, DedupError> {
        let r = sketch.rule.sketch(
            &sketch.sketcher,
            &sample.text,
            &mut self.scratch,
            &mut self.signature,
            &mut self.keys,
        );
        if r.kind != RowKind::Blank && r.content_hash != sample.content_hash {
            return Err(sketch_mismatch(name, sample.row));
        }
        let with_set = deduper.needs_shingles() && sketch.rule.band_keys;
        if with_set {
            self.set.clear();
            sketch
                .sketcher
                .last_shingle_set(&mut self.scratch, &mut self.set);
        }
        Ok(deduper.decide(&Candidate {
            addr: sample.addr,
            signature: &self.signature,
            row: &self.keys,
            hot: &sample.hot,
            content_hash: sample.content_hash,
            shingles: with_set.then_some(&self.set[..]),
        }))
    }
}

/// A text sketched ahead of its turn: what [`Rebuilt::decide_text`] computes, made on a worker
/// thread.
#[derive(Default)]
struct Sketched {
    blank: bool,
    content_hash: u128,
    signature: Vec<u32>,
    keys: Vec<u64>,
    set: Vec<u32>,
    with_set: bool,
}

impl Sketched {
    /// The verdict of `sample`, whose text this is the sketch of (as `Rebuilt::decide_text`).
    fn decide(
        &self,
        deduper: &mut Deduper,
        sample: &SignedSample,
        name: &str,
    ) -> Result<Verdict, DedupError> {
        if !self.blank && self.content_hash != sample.content_hash {
            return Err(sketch_mismatch(name, sample.row));
        }
        Ok(deduper.decide(&Candidate {
            addr: sample.addr,
            signature: &self.signature,
            row: &self.keys,
            hot: &sample.hot,
            content_hash: sample.content_hash,
            shingles: self.with_set.then_some(&self.set[..]),
        }))
    }
}

/// The next samples of a group in decide order, with the texts decide will sketch (full samples
/// under exact verification) sketched on worker threads ahead of their turn: the decision core
/// runs on one thread, in order, and sketching is most of a decide step's work. A text is not
/// sketched ahead when its hash already names an earlier sample (it is then, almost surely,
/// decided as a copy by its hash); when such a guess is wrong, it is sketched in its turn. The
/// decisions are those of sketching each in its turn.
struct SketchAhead<'a> {
    sketch: &'a DecideShape,
    threads: usize,
    with_set: bool,
    samples: Vec<SignedSample>,
    streams: Vec<usize>,
    sketched: Vec<Option<Sketched>>,
    /// One scratch per worker, kept across batches.
    scratches: Vec<Scratch>,
}

/// Samples per batch, and the text bytes that end a batch early.
const AHEAD_SAMPLES: usize = 1024;
const AHEAD_TEXT_BYTES: usize = 16 << 20;

impl<'a> SketchAhead<'a> {
    fn new(sketch: &'a DecideShape, threads: usize, with_texts: bool) -> Self {
        let threads = ExecOptions::threads(threads).threads;
        SketchAhead {
            sketch,
            threads: if with_texts { threads } else { 0 },
            with_set: with_texts && sketch.rule.band_keys,
            samples: Vec::new(),
            streams: Vec::new(),
            sketched: Vec::new(),
            scratches: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    /// Reads the next batch; `false` when there is none.
    fn fill<R: Read>(
        &mut self,
        order: &mut DecideOrder<R>,
        deduper: &Deduper,
    ) -> Result<bool, DedupError> {
        // The buffers of the last batch are reused.
        let mut spare = std::mem::take(&mut self.samples);
        spare.reverse();
        self.streams.clear();
        let mut text_bytes = 0;
        while self.samples.len() < AHEAD_SAMPLES && text_bytes < AHEAD_TEXT_BYTES {
            let mut sample = spare.pop().unwrap_or_default();
            let Some(s) = order.next(&mut sample)? else {
                break;
            };
            text_bytes += sample.text.len();
            self.samples.push(sample);
            self.streams.push(s);
        }
        self.sketched.clear();
        self.sketched.resize_with(self.samples.len(), || None);
        if self.threads > 0 {
            let mut seen: HashSet<u128> = HashSet::new();
            let wanted: Vec<usize> = (0..self.samples.len())
                .filter(|&i| {
                    let s = &self.samples[i];
                    let first = seen.insert(s.content_hash);
                    s.kind == SignedKind::Full && first && !deduper.knows_content(s.content_hash)
                })
                .collect();
            self.sketch_all(&wanted);
        }
        Ok(!self.samples.is_empty())
    }

    /// Sketches the samples at `wanted` on the worker threads.
    fn sketch_all(&mut self, wanted: &[usize]) {
        if wanted.is_empty() {
            return;
        }
        let workers = self.threads.min(wanted.len());
        while self.scratches.len() < workers {
            self.scratches.push(Scratch::collecting_shingle_sets());
        }
        let (sketch, with_set, samples) = (self.sketch, self.with_set, &self.samples);
        let done =
            neardup_exec::map_in_parts(wanted, &mut self.scratches[..workers], |scratch, &i| {
                sketch_text(sketch, with_set, &samples[i].text, scratch)
            });
        for (&i, done) in wanted.iter().zip(done) {
            self.sketched[i] = Some(done);
        }
    }
}

fn sketch_text(
    sketch: &DecideShape,
    with_set: bool,
    text: &str,
    scratch: &mut Scratch,
) -> Sketched {
    let mut done = Sketched {
        signature: vec![0; sketch.sketcher.num_perm()],
        keys: vec![0; sketch.rule.columns(sketch.sketcher.bands())],
        with_set,
        ..Sketched::default()
    };
    let r = sketch.rule.sketch(
        &sketch.sketcher,
        text,
        scratch,
        &mut done.signature,
        &mut done.keys,
    );
    done.blank = r.kind == RowKind::Blank;
    done.content_hash = r.content_hash;
    if with_set {
        sketch.sketcher.last_shingle_set(scratch, &mut done.set);
    }
    done
}

fn sketch_mismatch(name: &str, row: u64) -> DedupError {
    DedupError::Step(StepInputError::ContentHash {
        stream: name.to_string(),
        row,
    })
}

fn write_decided(out: &mut RecordWriter<StepSink>, d: &DecidedSample) -> Result<(), DedupError> {
    encode_decided(d, out.buffer());
    out.record_done().map_err(|e| DedupError::StepOutput {
        what: "the decided samples",
        error: e,
    })
}

/// A group's signed samples in the order they are decided: global row order (the streams one
/// after another, as the shards' rows follow each other), or for ranked streams (rank, row)
/// order, merged from the streams, each sorted so by its sign step.
struct DecideOrder<R: Read> {
    streams: Vec<(String, RecordReader<R>)>,
    shape: SignedShape,
    /// Row order: the stream being read, and the last row taken.
    current: usize,
    last_row: Option<u64>,
    /// Ranked: the next sample of each stream, and their keys.
    heads: Vec<SignedSample>,
    queue: BinaryHeap<Reverse<((u64, u64), usize)>>,
}

impl<R: Read> DecideOrder<R> {
    fn new(
        streams: Vec<(String, RecordReader<R>)>,
        shape: SignedShape,
    ) -> Result<Self, DedupError> {
        let mut order = DecideOrder {
            heads: vec![SignedSample::default(); if shape.ranked { streams.len() } else { 0 }],
            streams,
            shape,
            current: 0,
            last_row: None,
            queue: BinaryHeap::new(),
        };
        if shape.ranked {
            for s in 0..order.streams.len() {
                if order.read(s)? {
                    let h = &order.heads[s];
                    order.queue.push(Reverse(((h.rank, h.row), s)));
                }
            }
        }
        Ok(order)
    }

    /// How messages name stream `s`.
    fn name(&self, s: usize) -> &str {
        &self.streams[s].0
    }

    /// Reads the next sample of ranked stream `s` into its head.
    fn read(&mut self, s: usize) -> Result<bool, DedupError> {
        let (name, reader) = &mut self.streams[s];
        let shape = self.shape;
        let head = &mut self.heads[s];
        reader
            .next(|b| decode_signed(b, shape, head))
            .map_err(|e| step_error(name, e))
    }

    /// The next sample to decide, into `sample`, and the stream (shard) it came from.
    fn next(&mut self, sample: &mut SignedSample) -> Result<Option<usize>, DedupError> {
        if !self.shape.ranked {
            while self.current < self.streams.len() {
                let s = self.current;
                let (name, reader) = &mut self.streams[s];
                let more = reader
                    .next(|b| decode_signed(b, self.shape, sample))
                    .map_err(|e| step_error(name, e))?;
                if !more {
                    self.current += 1;
                    continue;
                }
                if let Some(last) = self.last_row
                    && sample.row <= last
                {
                    return Err(DedupError::Step(StepInputError::SignedOutOfOrder {
                        stream: name.clone(),
                        row: sample.row,
                        after: last,
                    }));
                }
                self.last_row = Some(sample.row);
                return Ok(Some(s));
            }
            return Ok(None);
        }
        let Some(Reverse((key, s))) = self.queue.pop() else {
            return Ok(None);
        };
        std::mem::swap(sample, &mut self.heads[s]);
        if self.read(s)? {
            let h = &self.heads[s];
            if (h.rank, h.row) <= key {
                return Err(DedupError::Step(StepInputError::RankOutOfOrder {
                    stream: self.streams[s].0.clone(),
                    row: h.row,
                    after: key.1,
                }));
            }
            self.queue.push(Reverse(((h.rank, h.row), s)));
        }
        Ok(Some(s))
    }
}

/// What deciding a group did.
pub struct GroupDecided {
    /// The decision core's counters.
    pub deduper: DeduperStats,
    /// Samples decided per shard.
    pub written: Vec<u64>,
    /// The group's duplicate clusters (complete: a cluster never spans two groups).
    pub clusters: ClusterCounter,
}

/// Decides one group: `signed` are the group's streams of every shard, in shard order (the global
/// row order); the decisions of stream `s` go to `out[s]`. Returns the decision core's counters
/// and the decisions written per shard. `prior` is the state earlier runs left this group
/// (`--against` a saved index; see [`PriorState`]), which the group's decisions start from.
/// Ranked streams are decided out of row order: their decisions are held (up to `sort_memory`
/// bytes, then sorted runs spill to `dedup.spill_dir`) and written in row order at the end.
#[allow(clippy::too_many_arguments)]
pub fn decide_group<R: Read>(
    signed: Vec<(String, RecordReader<R>)>,
    shape: SignedShape,
    dedup: &DeduperConfig,
    sketch: &DecideShape,
    out: &mut [RecordWriter<StepSink>],
    threads: usize,
    sort_memory: usize,
    cancel: &CancelToken,
    prior: Option<&PriorState>,
) -> Result<GroupDecided, DedupError> {
    assert_eq!(signed.len(), out.len(), "one output per shard");
    let num_perm = sketch.sketcher.num_perm();
    let columns = sketch.rule.columns(sketch.sketcher.bands());
    let mut deduper = Deduper::new(
        dedup.clone(),
        num_perm,
        sketch.sketcher.bands(),
        sketch.rule,
    )?;
    let needs_texts = deduper.needs_shingles() && sketch.rule.band_keys;
    if needs_texts && !shape.texts {
        return Err(DedupError::Config(SettingsError::SignedWithoutTexts));
    }
    if shape.num_perm != num_perm || shape.columns != columns {
        return Err(DedupError::Step(StepInputError::Shape {
            signed: (shape.num_perm, shape.columns),
            expected: (num_perm, columns),
        }));
    }
    let mut rebuilt = Rebuilt::new(sketch);
    if let Some(prior) = prior {
        if !shape.ranked {
            deduper.seed(prior);
        } else {
            return Err(SettingsError::PreferAgainstIndex.into());
        }
    }
    let mut written = vec![0u64; out.len()];
    // Ranked samples are decided out of row order; their decisions are written in row order
    // at the end, as `write` reads them.
    let mut held = shape
        .ranked
        .then(|| RecordSorter::by_row(out.len(), sort_memory, dedup.spill_dir.clone()));
    let mut encoded = Vec::new();
    let mut order = DecideOrder::new(signed, shape)?;
    let mut ahead = SketchAhead::new(sketch, threads, deduper.needs_shingles() && shape.texts);
    let mut decided = 0u64;
    loop {
        if cancel.is_cancelled() {
            return Err(DedupError::Interrupted);
        }
        if !ahead.fill(&mut order, &deduper)? {
            break;
        }
        for i in 0..ahead.len() {
            let (s, sample) = (ahead.streams[i], &ahead.samples[i]);
            let name = order.name(s);
            let verdict = match sample.kind {
                SignedKind::Copy => deduper.decide_copy(sample.content_hash).ok_or_else(|| {
                    DedupError::Step(StepInputError::CopyWithoutOriginal {
                        stream: name.to_string(),
                        row: sample.row,
                    })
                })?,
                SignedKind::CopyWithText => match deduper.decide_copy(sample.content_hash) {
                    Some(v) => v,
                    // Its content key collided with another text's (or, ranked, it is the
                    // first copy decided).
                    None => rebuilt.decide_text(&mut deduper, sketch, sample, name)?,
                },
                // A copy of a sample of an earlier shard (its sign step saw only its own
                // shard's copies): decided by its hash, as the decision core would after
                // sketching it.
                SignedKind::Full if shape.texts => {
                    match deduper.decide_known_copy(sample.content_hash, &sample.hot) {
                        Some(v) => v,
                        None => match &ahead.sketched[i] {
                            Some(done) => done.decide(&mut deduper, sample, name)?,
                            None => rebuilt.decide_text(&mut deduper, sketch, sample, name)?,
                        },
                    }
                }
                SignedKind::Full => {
                    rebuilt.keys_of(sketch, &sample.signature, sample.content_hash);
                    deduper.decide(&Candidate {
                        addr: sample.addr,
                        signature: &sample.signature,
                        row: &rebuilt.keys,
                        hot: &sample.hot,
                        content_hash: sample.content_hash,
                        shingles: None,
                    })
                }
            };
            if let Some(e) = deduper.take_io_error() {
                return Err(DedupError::Spill(e));
            }
            let dup_of_id = deduper.note(
                sample.addr,
                &verdict,
                sample.content_hash,
                sample.id.as_deref(),
            );
            let decided_sample = DecidedSample {
                row: sample.row,
                verdict,
                dup_of_id,
            };
            match &mut held {
                Some(sorter) => {
                    encoded.clear();
                    encode_decided(&decided_sample, &mut encoded);
                    sorter.push(s as u32, &encoded).map_err(DedupError::Spill)?;
                }
                None => write_decided(&mut out[s], &decided_sample)?,
            }
            written[s] += 1;
            decided += 1;
        }
    }
    debug_assert_eq!(decided, written.iter().sum::<u64>());
    if let Some(sorter) = held {
        sorter.finish(out).map_err(|e| DedupError::StepOutput {
            what: "the decided samples",
            error: e,
        })?;
    }
    Ok(GroupDecided {
        deduper: deduper.stats(),
        written,
        clusters: deduper.into_cluster_counts(),
    })
}

/// A `sign` step: hot samples go to the signer, nothing is decided.
impl HotRoute for Signer<'_> {
    fn hot_work(&self, _cfg: &Stage2Config) -> HotWork {
        HotWork::Sign {
            texts: self.shape().texts,
        }
    }

    fn verdict(&mut self, hot: &HotSample<'_>) -> Result<(Verdict, Option<String>), DedupError> {
        let carried = |range: (u32, u32)| &hot.block.carried[range.0 as usize..range.1 as usize];
        let at = |row: u64, content_hash: u128| SampleAt {
            row: hot.row_base + row,
            local_row: row,
            rank: hot.sample.rank,
            addr: hot.addr,
            id: hot.id,
            content_hash,
        };
        match hot.sample.kind {
            SampleKind::Copy {
                content_hash,
                row,
                text,
            } => self.push_copy(&at(row, content_hash), carried(text)),
            SampleKind::Text {
                content_hash,
                row,
                text,
            } => self.push_full(&at(row, content_hash), &[], carried(text)),
            SampleKind::Hot {
                content_hash,
                slot,
                row,
                ..
            } => {
                let (signature, _, _) = hot.block.signed(slot, hot.cfg);
                self.push_full(&at(row, content_hash), signature, "")
            }
            _ => return Err(wrong_route("a hot sample without its signature")),
        }
        .map_err(sign_stream_error)?;
        // A `sign` step decides nothing (`decide` keeps the ids it needs from the signed
        // streams).
        Ok((Verdict::Unique, None))
    }
}

/// A `write` step: hot samples' verdicts come from the decided streams.
impl<R: Read> HotRoute for DecidedMerge<R> {
    fn hot_work(&self, _cfg: &Stage2Config) -> HotWork {
        HotWork::Decided
    }

    fn verdict(&mut self, hot: &HotSample<'_>) -> Result<(Verdict, Option<String>), DedupError> {
        match hot.sample.kind {
            SampleKind::Decided { row } => {
                let d = self.take(hot.row_base + row)?;
                Ok((d.verdict, d.dup_of_id))
            }
            SampleKind::Copy { .. } | SampleKind::Text { .. } => {
                Err(wrong_route("a hot sample to sign"))
            }
            _ => Err(wrong_route("a hot sample to sign")),
        }
    }
}

/// The `sign` step over one shard: re-reads its inputs (`files`, with the shard's hot mask from
/// [`neardup_keys::HotMask::for_shard`]) and writes each hot sample to `sinks[group]`. Nothing
/// is decided or written besides the sinks (`cfg.output` and `cfg.decisions` must be unset).
/// Returns the sinks (in group order), what was signed, and the pass's statistics.
#[allow(clippy::too_many_arguments)]
pub fn run_sign(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    place: &ShardPlace,
    hot: &HotKeys,
    sinks: Vec<StepSink>,
    publication: &Publication,
) -> Result<(Vec<StepSink>, SignedCounts, DedupStats), DedupError> {
    if cfg.output.is_some() || cfg.decisions.is_some() {
        return Err(DedupError::Config(SettingsError::SignWritesNothing));
    }
    let shape = signed_shape(cfg);
    let signer = Signer::new(hot, mask, shape, sinks)
        .map_err(sign_stream_error)?
        .sorting_in(cfg.sort_memory, cfg.deduper.spill_dir.clone());
    let names: Vec<String> = files
        .iter()
        .map(|f| f.input.path.display().to_string())
        .collect();
    let addressing = Addressing {
        file_base: file_base(cfg, place)?,
        row_base: place.row_base,
        names: &names,
    };
    let (stats, signer) = run_stage2(
        files,
        mask,
        cfg,
        control,
        publication,
        &mut |_| {},
        signer,
        &addressing,
    )?;
    let (sinks, counts) = signer.finish().map_err(sign_stream_error)?;
    Ok((sinks, counts, stats))
}

/// The number of a shard's first file: after every earlier shard's files, and after the files
/// of the earlier runs a saved index holds ([`Stage2Config::prior`]).
fn file_base(cfg: &Stage2Config, place: &ShardPlace) -> Result<u32, DedupError> {
    let prior = cfg.prior.as_ref().map_or(0, |p| p.names.len() as u64);
    u32::try_from(place.file_base + prior)
        .map_err(|_| DedupError::Config(SettingsError::TooManyFiles))
}

pub(crate) fn sign_stream_error(e: io::Error) -> DedupError {
    DedupError::StepOutput {
        what: "the signed samples",
        error: e,
    }
}

/// The shape of the samples `sign` writes under `cfg`.
pub fn signed_shape(cfg: &Stage2Config) -> SignedShape {
    SignedShape {
        num_perm: cfg.sketcher.num_perm(),
        columns: cfg.rule.columns(cfg.sketcher.bands()),
        texts: needs_shingles(cfg),
        ranked: !cfg.prefer.is_input_order(),
    }
}

/// The `write` step over one shard: re-reads its inputs and writes the filtered dataset and the
/// decisions into `publication` (the caller commits) exactly as a one-process run writes this
/// shard's part, the hot samples' verdicts taken from `decided` (every group's decided stream of
/// this shard). `names` are all shards' file names in global order (decisions name the files
/// other shards' samples duplicate).
#[allow(clippy::too_many_arguments)]
pub fn run_write(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    place: &ShardPlace,
    names: &[String],
    decided: DecidedMerge<Box<dyn Read + Send>>,
    publication: &Publication,
    observe: &mut dyn FnMut(&crate::Decision),
) -> Result<DedupStats, DedupError> {
    let addressing = Addressing {
        file_base: file_base(cfg, place)?,
        row_base: place.row_base,
        names,
    };
    let (stats, merge) = run_stage2(
        files,
        mask,
        cfg,
        control,
        publication,
        observe,
        decided,
        &addressing,
    )?;
    merge.finish()?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch() -> DecideShape {
        DecideShape {
            sketcher: crate::pass::test_settings::sketcher(),
            rule: RowRule::default(),
        }
    }

    fn addr(record: u64) -> SampleAddr {
        SampleAddr {
            file: 0,
            record,
            field: 0,
        }
    }

    /// The verdicts of a one-process run: every text sketched, with its set.
    /// The verdicts a decide step wrote to a stream in memory.
    fn verdicts_of(out: RecordWriter<StepSink>) -> Vec<Verdict> {
        let decided = out.finish().unwrap().finish().unwrap().unwrap();
        let mut r = RecordReader::new(decided.as_slice()).unwrap();
        let mut got = Vec::new();
        while r
            .next(|b| {
                let (d, n) = decode_decided(b)?;
                got.push(d.verdict);
                Ok(n)
            })
            .unwrap()
        {}
        got
    }

    fn one_process(sketch: &DecideShape, texts: &[&str]) -> Vec<Verdict> {
        let mut d = Deduper::new(DeduperConfig::default(), 128, 16, sketch.rule).unwrap();
        let columns = sketch.rule.columns(16);
        let mut scratch = Scratch::collecting_shingle_sets();
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let (mut sig, mut keys, mut set) = (vec![0; 128], vec![0; columns], Vec::new());
                let r =
                    sketch
                        .rule
                        .sketch(&sketch.sketcher, text, &mut scratch, &mut sig, &mut keys);
                sketch.sketcher.last_shingle_set(&mut scratch, &mut set);
                d.decide(&Candidate {
                    addr: addr(i as u64),
                    signature: &sig,
                    row: &keys,
                    hot: &vec![true; columns],
                    content_hash: r.content_hash,
                    shingles: Some(&set),
                })
            })
            .collect()
    }

    /// A later copy by stage 1's count whose hash finds no original (its content key collided
    /// with another text's) is sketched from its text in decide and gets the verdict a
    /// one-process run gives it; one whose hash finds its original is an exact copy of it.
    #[test]
    fn a_later_copy_whose_hash_finds_nothing_is_sketched_from_its_text() {
        let sketch = sketch();
        let base = "The quick brown fox jumps over the lazy dog near the river bank, \
                    and then it runs back into the forest where the other foxes live.";
        let near = format!("{base} Again.");
        let texts = [base, near.as_str(), base];
        let want = one_process(&sketch, &texts);
        assert!(matches!(want[1], Verdict::Near { .. }), "{want:?}");
        assert_eq!(
            want[2],
            Verdict::Exact {
                of: addr(0),
                cluster: addr(0)
            }
        );

        let columns = sketch.rule.columns(16);
        let shape = SignedShape {
            num_perm: 128,
            columns,
            texts: true,
            ranked: false,
        };
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        let mut scratch = Scratch::default();
        for (i, text) in texts.iter().enumerate() {
            let (mut sig, mut keys) = (vec![0; 128], vec![0; columns]);
            let r = sketch
                .rule
                .sketch(&sketch.sketcher, text, &mut scratch, &mut sig, &mut keys);
            let hot = vec![true; columns];
            encode_signed_parts(
                &SignedParts {
                    rank: 0,
                    row: i as u64,
                    addr: addr(i as u64),
                    id: None,
                    content_hash: r.content_hash,
                    // The first is decided by its signature, the others come as later copies.
                    kind: if i == 0 {
                        SignedKind::Full
                    } else {
                        SignedKind::CopyWithText
                    },
                    signature: &sig,
                    hot: &hot,
                    text,
                },
                shape,
                w.buffer(),
            );
            w.record_done().unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut out = vec![RecordWriter::new(StepSink::memory()).unwrap()];
        let GroupDecided {
            deduper: stats,
            written,
            ..
        } = decide_group(
            vec![("g".into(), RecordReader::new(bytes.as_slice()).unwrap())],
            shape,
            &DeduperConfig::default(),
            &sketch,
            &mut out,
            2,
            usize::MAX,
            &CancelToken::default(),
            None,
        )
        .unwrap();
        assert_eq!(written, vec![3]);
        assert_eq!(stats.verifications, 1);
        assert_eq!(verdicts_of(out.pop().unwrap()), want);
    }

    /// Decide sketches texts ahead of their turn on worker threads, in batches: across batches,
    /// with exact copies of samples of earlier batches and of the same batch sent as full samples
    /// (as copies from another shard are), any thread count gives the one-process verdicts.
    #[test]
    fn sketching_ahead_on_any_threads_gives_the_verdicts_of_sketching_in_turn() {
        let sketch = sketch();
        let columns = sketch.rule.columns(16);
        let shape = SignedShape {
            num_perm: 128,
            columns,
            texts: true,
            ranked: false,
        };
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut below = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let bases: Vec<Vec<String>> = (0..40)
            .map(|_| (0..40).map(|_| format!("w{}", below(500))).collect())
            .collect();
        let texts: Vec<String> = (0..AHEAD_SAMPLES as u64 * 2 + 300)
            .map(|_| {
                let mut t = bases[below(40) as usize].clone();
                for _ in 0..below(4) {
                    let at = below(40) as usize;
                    t[at] = format!("w{}", below(500));
                }
                t.join(" ")
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let want = one_process(&sketch, &refs);
        assert!(want.iter().any(|v| matches!(v, Verdict::Exact { .. })));
        assert!(want.iter().any(|v| matches!(v, Verdict::Near { .. })));
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        let mut scratch = Scratch::default();
        for (i, text) in refs.iter().enumerate() {
            let (mut sig, mut keys) = (vec![0; 128], vec![0; columns]);
            let r = sketch
                .rule
                .sketch(&sketch.sketcher, text, &mut scratch, &mut sig, &mut keys);
            encode_signed_parts(
                &SignedParts {
                    rank: 0,
                    row: i as u64,
                    addr: addr(i as u64),
                    id: None,
                    content_hash: r.content_hash,
                    kind: SignedKind::Full,
                    signature: &[],
                    hot: &vec![true; columns],
                    text,
                },
                shape,
                w.buffer(),
            );
            w.record_done().unwrap();
        }
        let bytes = w.finish().unwrap();
        for threads in [1, 2, 3] {
            let mut out = vec![RecordWriter::new(StepSink::memory()).unwrap()];
            decide_group(
                vec![("g".into(), RecordReader::new(bytes.as_slice()).unwrap())],
                shape,
                &DeduperConfig::default(),
                &sketch,
                &mut out,
                threads,
                usize::MAX,
                &CancelToken::default(),
                None,
            )
            .unwrap();
            let got = verdicts_of(out.pop().unwrap());
            assert!(got == want, "{threads} threads decided otherwise");
        }
    }

    /// A decided stream in memory holding `rows` (in the order given), each unique.
    fn decided_stream(rows: &[u64]) -> RecordReader<std::io::Cursor<Vec<u8>>> {
        let mut w = RecordWriter::new(StepSink::memory()).unwrap();
        for &row in rows {
            write_decided(
                &mut w,
                &DecidedSample {
                    row,
                    verdict: Verdict::Unique,
                    dup_of_id: None,
                },
            )
            .unwrap();
        }
        let bytes = w.finish().unwrap().finish().unwrap().unwrap();
        RecordReader::new(std::io::Cursor::new(bytes)).unwrap()
    }

    fn merge(streams: &[&[u64]]) -> Result<DecidedMerge<std::io::Cursor<Vec<u8>>>, DedupError> {
        DecidedMerge::new(
            streams
                .iter()
                .enumerate()
                .map(|(g, rows)| (format!("decided-{g}"), decided_stream(rows)))
                .collect(),
        )
    }

    #[test]
    fn a_merge_gives_each_hot_row_its_groups_decision_in_row_order() {
        let mut m = merge(&[&[1, 4, 9], &[2, 3], &[]]).unwrap();
        for row in [1, 2, 3, 4, 9] {
            assert_eq!(m.take(row).unwrap().row, row);
        }
        m.finish().unwrap();
    }

    #[test]
    fn a_merge_refuses_streams_that_do_not_fit_the_rows_asked_for() {
        let step = |e: DedupError| match e {
            DedupError::Step(s) => s,
            other => panic!("{other:?}"),
        };
        // Rows out of order within a stream, or one row twice.
        for (rows, row, after) in [(&[2u64, 5, 3][..], 3, 5), (&[2, 5, 5], 5, 5)] {
            let mut m = merge(&[rows]).unwrap();
            m.take(2).unwrap();
            let e = step(m.take(5).unwrap_err());
            assert!(
                matches!(&e, StepInputError::DecidedOutOfOrder { stream, row: r, after: a }
                    if stream == "decided-0" && (*r, *a) == (row, after)),
                "{e:?}"
            );
        }
        // A row no stream decided (a group's stream missing).
        let mut m = merge(&[&[1], &[4]]).unwrap();
        m.take(1).unwrap();
        assert!(matches!(
            step(m.take(3).unwrap_err()),
            StepInputError::NoDecision { row: 3 }
        ));
        // A decision for a row that is not asked for: among the rows, and after the last.
        let mut m = merge(&[&[1, 2], &[3]]).unwrap();
        m.take(1).unwrap();
        let e = step(m.take(3).unwrap_err());
        assert!(
            matches!(&e, StepInputError::NotHotRow { stream, row: 2, before_end: true } if stream == "decided-0"),
            "{e:?}"
        );
        let mut m = merge(&[&[1, 7]]).unwrap();
        m.take(1).unwrap();
        assert!(matches!(
            step(m.finish().unwrap_err()),
            StepInputError::NotHotRow {
                row: 7,
                before_end: false,
                ..
            }
        ));
        // Bytes that are not a decided stream.
        let bad = RecordReader::new(std::io::Cursor::new(b"not a stream".to_vec()));
        assert!(bad.is_err());
    }

    /// The three steps end to end over key tables of real texts, split into shards and groups
    /// as `neardup keys --shard`, `neardup hot --groups` and the per-shard and per-group steps
    /// split them.
    mod steps {
        use std::collections::BTreeMap;
        use std::io::Cursor;

        use neardup_corpus::{Compression, FieldPath, Format, InputFile, TextSelector};
        use neardup_keys::{KeyTable, Plan, PlanBuilder, RowGrouping, TableLayout};

        use super::*;
        use crate::deduper::Verify;

        /// One text as stage 1 sketched it.
        pub(super) struct Row {
            pub text: String,
            pub id: String,
            pub signature: Vec<u32>,
            pub keys: Vec<u64>,
            pub set: Vec<u32>,
            pub content_hash: u128,
        }

        pub(super) fn rows(sketch: &DecideShape, texts: &[String]) -> Vec<Row> {
            let columns = sketch.rule.columns(sketch.sketcher.bands());
            let mut scratch = Scratch::collecting_shingle_sets();
            texts
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    let (mut signature, mut keys, mut set) =
                        (vec![0; 128], vec![0; columns], Vec::new());
                    let r = sketch.rule.sketch(
                        &sketch.sketcher,
                        text,
                        &mut scratch,
                        &mut signature,
                        &mut keys,
                    );
                    sketch.sketcher.last_shingle_set(&mut scratch, &mut set);
                    Row {
                        text: text.clone(),
                        id: format!("doc-{i}"),
                        signature,
                        keys,
                        set,
                        content_hash: r.content_hash,
                    }
                })
                .collect()
        }

        /// Near copies of a few bases (no edit: an exact copy), and texts of their own.
        pub(super) fn family_texts(n: usize, seed: u64) -> Vec<String> {
            let mut state = seed;
            let mut below = |m: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % m
            };
            let bases: Vec<Vec<String>> = (0..12)
                .map(|_| (0..40).map(|_| format!("w{}", below(5000))).collect())
                .collect();
            (0..n)
                .map(|_| {
                    if below(4) == 0 {
                        return (0..40)
                            .map(|_| format!("u{}", below(1 << 40)))
                            .collect::<Vec<_>>()
                            .join(" ");
                    }
                    let mut t = bases[below(12) as usize].clone();
                    for _ in 0..below(4) {
                        let at = below(40) as usize;
                        t[at] = format!("e{}", below(1 << 30));
                    }
                    t.join(" ")
                })
                .collect()
        }

        pub(super) fn layout(sketch: &DecideShape) -> TableLayout {
            TableLayout {
                sketch_fingerprint: 1,
                sketch_description: "test".into(),
                bands: sketch.sketcher.bands(),
                rule: sketch.rule,
                selector: TextSelector::single(FieldPath::top("text")),
            }
        }

        /// The key table of `rows` as shard `shard` (one input file).
        pub(super) fn table(sketch: &DecideShape, shard: u32, rows: &[Row]) -> KeyTable {
            let name = std::path::PathBuf::from(format!("shard-{shard}.jsonl"));
            let files = vec![FileRows {
                input: InputFile {
                    path: name.clone(),
                    relative: name,
                    format: Format::Jsonl,
                    compression: Compression::None,
                    size: 0,
                },
                records: rows.len() as u64,
                rows: rows.len() as u64,
                chunks: Vec::new(),
            }];
            let keys = rows.iter().flat_map(|r| r.keys.iter().copied()).collect();
            KeyTable::new(layout(sketch), shard, files, keys).unwrap()
        }

        /// The keys more than one row holds (stage 1's count at its default minimum).
        pub(super) fn hot_of(rows: &[Row]) -> Vec<u64> {
            let mut counts = BTreeMap::new();
            for r in rows {
                for &k in &r.keys {
                    if k != 0 {
                        *counts.entry(k).or_insert(0u32) += 1;
                    }
                }
            }
            counts
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(k, _)| k)
                .collect()
        }

        /// The plan of `groups` groups over every row, whatever the shards.
        pub(super) fn plan(rows: &[Row], hot: &[u64], groups: u32) -> Plan {
            let mut b = PlanBuilder::new(hot).unwrap();
            for r in rows {
                b.add_row(&r.keys);
            }
            b.finish(groups).unwrap()
        }

        /// Shards `rows` at `cuts` (each shard from one cut to the next), counts the hot keys of
        /// all shards and plans them into `groups`.
        pub(super) fn shards_and_hot(
            sketch: &DecideShape,
            rows: &[Row],
            cuts: &[usize],
            groups: u32,
        ) -> (Vec<KeyTable>, HotKeys) {
            let tables: Vec<KeyTable> = cuts
                .windows(2)
                .enumerate()
                .map(|(s, w)| table(sketch, s as u32, &rows[w[0]..w[1]]))
                .collect();
            let hot = hot_of(rows);
            let plan = plan(rows, &hot, groups);
            let hot = HotKeys::new(layout(sketch), 2, hot)
                .counted_from(tables.iter().map(|t| t.identity()).collect())
                .with_plan(plan)
                .unwrap();
            (tables, hot)
        }

        pub(super) fn addr(row: u64) -> SampleAddr {
            SampleAddr {
                file: 0,
                record: row,
                field: 0,
            }
        }

        fn reader(bytes: &[u8]) -> RecordReader<Cursor<Vec<u8>>> {
            RecordReader::new(Cursor::new(bytes.to_vec())).unwrap()
        }

        fn memory_bytes(w: RecordWriter<StepSink>) -> Vec<u8> {
            w.finish().unwrap().finish().unwrap().unwrap()
        }

        /// The signed streams of one shard (one per group), as a `sign` step's pass hands its
        /// hot samples to the signer: a later copy (the mask says) with its text, any other
        /// sample with its text under exact verification, its signature otherwise.
        pub(super) fn sign_shard(
            table: &KeyTable,
            hot: &HotKeys,
            rows: &[Row],
            shape: SignedShape,
        ) -> (Vec<Vec<u8>>, SignedCounts) {
            let (mask, _, place) = HotMask::for_table(table, hot, RowGrouping::Record).unwrap();
            let sinks = (0..hot.groups()).map(|_| StepSink::memory()).collect();
            let mut signer = Signer::new(hot, &mask, shape, sinks).unwrap();
            for local in 0..table.rows() {
                if !mask.is_hot_row(local) {
                    continue;
                }
                let row = place.row_base + local as u64;
                let r = &rows[row as usize];
                let at = SampleAt {
                    row,
                    local_row: local as u64,
                    rank: 0,
                    addr: addr(row),
                    id: Some(&r.id),
                    content_hash: r.content_hash,
                };
                if mask.is_later_copy(local) {
                    signer.push_copy(&at, &r.text).unwrap();
                } else if shape.texts {
                    signer.push_full(&at, &[], &r.text).unwrap();
                } else {
                    signer.push_full(&at, &r.signature, "").unwrap();
                }
            }
            let (sinks, counts) = signer.finish().unwrap();
            let bytes = sinks
                .into_iter()
                .map(|s| s.finish().unwrap().unwrap())
                .collect();
            (bytes, counts)
        }

        /// The rows of a signed stream, in its order.
        pub(super) fn signed_rows(bytes: &[u8], shape: SignedShape) -> Vec<(u64, u64)> {
            let mut r = reader(bytes);
            let mut s = SignedSample::default();
            let mut got = Vec::new();
            while r.next(|b| decode_signed(b, shape, &mut s)).unwrap() {
                got.push((s.rank, s.row));
            }
            got
        }

        /// Every hot row's verdict and the id it names, through sign per shard, decide per group
        /// and write's merge per shard. Also checks that each hot row went to the stream of its
        /// plan's group, once.
        fn through_the_steps(
            sketch: &DecideShape,
            dedup: &DeduperConfig,
            rows: &[Row],
            cuts: &[usize],
            groups: u32,
        ) -> (BTreeMap<u64, (Verdict, Option<String>)>, u64) {
            let (tables, hot) = shards_and_hot(sketch, rows, cuts, groups);
            let shape = SignedShape {
                num_perm: 128,
                columns: sketch.rule.columns(sketch.sketcher.bands()),
                texts: dedup.verify == Verify::Jaccard,
                ranked: false,
            };
            let mut signed = Vec::new();
            let mut hot_rows = Vec::new();
            let mut copies_by_hash = 0;
            for (s, table) in tables.iter().enumerate() {
                let (streams, counts) = sign_shard(table, &hot, rows, shape);
                copies_by_hash += counts.copies_by_hash;
                let (mask, _, place) = HotMask::for_table(table, &hot, RowGrouping::Skip).unwrap();
                let shard_hot: Vec<u64> = (0..table.rows())
                    .filter(|&r| mask.is_hot_row(r))
                    .map(|r| place.row_base + r as u64)
                    .collect();
                assert_eq!(
                    counts.samples.iter().sum::<u64>(),
                    shard_hot.len() as u64,
                    "shard {s}: every hot row signed once"
                );
                let mut seen = Vec::new();
                for (g, bytes) in streams.iter().enumerate() {
                    let got = signed_rows(bytes, shape);
                    assert_eq!(got.len() as u64, counts.samples[g]);
                    for (_, row) in got {
                        assert_eq!(
                            hot.group_of_row(&rows[row as usize].keys),
                            Some(g as u32),
                            "row {row} in the stream of group {g}"
                        );
                        seen.push(row);
                    }
                }
                seen.sort_unstable();
                assert_eq!(
                    seen, shard_hot,
                    "shard {s}: the hot rows, each in one stream"
                );
                hot_rows.push(shard_hot);
                signed.push(streams);
            }
            // decided[g][s]: group g's decisions of shard s's rows.
            let mut decided = Vec::new();
            for g in 0..groups as usize {
                let streams = signed
                    .iter()
                    .enumerate()
                    .map(|(s, streams)| (format!("signed-{s}-{g}"), reader(&streams[g])))
                    .collect();
                let mut out: Vec<_> = (0..tables.len())
                    .map(|_| RecordWriter::new(StepSink::memory()).unwrap())
                    .collect();
                let group = decide_group(
                    streams,
                    shape,
                    dedup,
                    sketch,
                    &mut out,
                    2,
                    usize::MAX,
                    &CancelToken::default(),
                    None,
                )
                .unwrap();
                for (s, streams) in signed.iter().enumerate() {
                    assert_eq!(
                        group.written[s],
                        signed_rows(&streams[g], shape).len() as u64
                    );
                }
                decided.push(out.into_iter().map(memory_bytes).collect::<Vec<_>>());
            }
            let mut verdicts = BTreeMap::new();
            for (s, shard_hot) in hot_rows.iter().enumerate() {
                let mut merge = DecidedMerge::new(
                    decided
                        .iter()
                        .enumerate()
                        .map(|(g, d)| (format!("decided-{g}-{s}"), reader(&d[s])))
                        .collect(),
                )
                .unwrap();
                for &row in shard_hot {
                    let d = merge.take(row).unwrap();
                    verdicts.insert(row, (d.verdict, d.dup_of_id));
                }
                merge.finish().unwrap();
            }
            (verdicts, copies_by_hash)
        }

        /// What a one-process run decides: the decision core over the hot rows in row order,
        /// later copies by their hash first (as `route.rs`'s core route).
        fn one_process_run(
            sketch: &DecideShape,
            dedup: &DeduperConfig,
            rows: &[Row],
        ) -> BTreeMap<u64, (Verdict, Option<String>)> {
            let (tables, hot) = shards_and_hot(sketch, rows, &[0, rows.len()], 1);
            let mask = HotMask::of_checked_table(&tables[0], &hot, RowGrouping::Skip);
            let columns = sketch.rule.columns(sketch.sketcher.bands());
            let mut d = Deduper::new(dedup.clone(), 128, 16, sketch.rule).unwrap();
            let mut verdicts = BTreeMap::new();
            for (i, r) in rows.iter().enumerate() {
                if !mask.is_hot_row(i) {
                    continue;
                }
                let hot: Vec<bool> = (0..columns).map(|c| mask.is_hot(i, c)).collect();
                let copy = if mask.is_later_copy(i) {
                    d.decide_copy(r.content_hash)
                } else {
                    None
                };
                let v = copy.unwrap_or_else(|| {
                    d.decide(&Candidate {
                        addr: addr(i as u64),
                        signature: &r.signature,
                        row: &r.keys,
                        hot: &hot,
                        content_hash: r.content_hash,
                        shingles: d.needs_shingles().then_some(&r.set[..]),
                    })
                });
                let id = d.note(addr(i as u64), &v, r.content_hash, Some(&r.id));
                verdicts.insert(i as u64, (v, id));
            }
            verdicts
        }

        /// Decisions do not depend on how the rows are split: any number of shards (some of
        /// them empty) and of groups (more groups than components among them), under either
        /// verification, give a one-process run's verdicts and the ids they name.
        #[test]
        fn any_split_into_shards_and_groups_decides_as_one_process() {
            let sketch = sketch();
            let rows = rows(&sketch, &family_texts(240, 0x9e37_79b9_7f4a_7c15));
            let n = rows.len();
            for verify in [Verify::Jaccard, Verify::Estimate] {
                let dedup = DeduperConfig {
                    verify,
                    ..DeduperConfig::default()
                };
                let want = one_process_run(&sketch, &dedup, &rows);
                let drops = want.values().filter(|(v, _)| !v.keep()).count();
                assert!(
                    want.values()
                        .any(|(v, id)| matches!(v, Verdict::Near { .. }) && id.is_some()),
                    "{verify:?}: the texts hold near copies"
                );
                assert!(drops > n / 4, "{verify:?}: {drops} drops");
                let components = plan(&rows, &hot_of(&rows), 2).components;
                for cuts in [
                    vec![0, n],
                    vec![0, n / 3, n / 3, n],
                    vec![0, 0, 17, n / 2, n, n],
                ] {
                    for groups in [1, 2, 3, components as u32 + 5] {
                        let (got, copies_by_hash) =
                            through_the_steps(&sketch, &dedup, &rows, &cuts, groups);
                        assert!(copies_by_hash > 0, "later copies go as their hash alone");
                        assert!(
                            got == want,
                            "{verify:?}, shards at {cuts:?}, {groups} groups decided otherwise"
                        );
                    }
                }
            }
        }

        /// Without a hot key nothing is signed, decided or merged, in any group.
        #[test]
        fn no_hot_key_leaves_every_stream_empty() {
            let sketch = sketch();
            let texts: Vec<String> = (0..30)
                .map(|i| {
                    (0..40)
                        .map(|w| format!("t{i}w{w}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            let rows = rows(&sketch, &texts);
            assert!(hot_of(&rows).is_empty());
            let (tables, hot) = shards_and_hot(&sketch, &rows, &[0, 10, 10, 30], 3);
            assert_eq!(hot.plan().unwrap().group_rows, vec![0, 0, 0]);
            let shape = signed_shape_of(&sketch, true);
            let mut signed = Vec::new();
            for table in &tables {
                let (streams, counts) = sign_shard(table, &hot, &rows, shape);
                assert_eq!(counts.samples, vec![0, 0, 0]);
                assert!(streams.iter().all(|s| signed_rows(s, shape).is_empty()));
                signed.push(streams);
            }
            for g in 0..3 {
                let mut out: Vec<_> = (0..3)
                    .map(|_| RecordWriter::new(StepSink::memory()).unwrap())
                    .collect();
                let done = decide_group(
                    signed
                        .iter()
                        .map(|s| ("signed".to_string(), reader(&s[g])))
                        .collect(),
                    shape,
                    &DeduperConfig::default(),
                    &sketch,
                    &mut out,
                    1,
                    usize::MAX,
                    &CancelToken::default(),
                    None,
                )
                .unwrap();
                assert_eq!(done.written, vec![0, 0, 0]);
                for w in out {
                    let mut merge =
                        DecidedMerge::new(vec![("d".into(), reader(&memory_bytes(w)))]).unwrap();
                    assert!(matches!(
                        merge.take(0),
                        Err(DedupError::Step(StepInputError::NoDecision { row: 0 }))
                    ));
                    merge.finish().unwrap();
                }
            }
        }

        pub(super) fn signed_shape_of(sketch: &DecideShape, texts: bool) -> SignedShape {
            SignedShape {
                num_perm: 128,
                columns: sketch.rule.columns(sketch.sketcher.bands()),
                texts,
                ranked: false,
            }
        }

        /// A ranked signer writes each group's samples in (rank, row) order, equal ranks in
        /// row order, whether it holds them all or spills sorted runs.
        #[test]
        fn a_ranked_signer_writes_rank_then_row_order() {
            let sketch = sketch();
            let texts = family_texts(1, 3);
            let texts: Vec<String> = (0..7).map(|_| texts[0].clone()).collect();
            let rows = rows(&sketch, &texts);
            let (tables, hot) = shards_and_hot(&sketch, &rows, &[0, 7], 1);
            let (mask, _, _) = HotMask::for_table(&tables[0], &hot, RowGrouping::Record).unwrap();
            let shape = SignedShape {
                ranked: true,
                ..signed_shape_of(&sketch, true)
            };
            let ranks = [3u64, 1, 3, 1, 2, 0, 1];
            for memory in [usize::MAX, 1] {
                let spill = tempfile::tempdir().unwrap();
                let mut signer = Signer::new(&hot, &mask, shape, vec![StepSink::memory()])
                    .unwrap()
                    .sorting_in(memory, Some(spill.path().to_path_buf()));
                for (row, &rank) in ranks.iter().enumerate() {
                    let r = &rows[row];
                    let at = SampleAt {
                        row: row as u64,
                        local_row: row as u64,
                        rank,
                        addr: addr(row as u64),
                        id: None,
                        content_hash: r.content_hash,
                    };
                    if row == 0 {
                        signer.push_full(&at, &[], &r.text).unwrap();
                    } else {
                        signer.push_copy(&at, &r.text).unwrap();
                    }
                }
                let (sinks, counts) = signer.finish().unwrap();
                assert_eq!(counts.samples, vec![7]);
                // Ranked, every copy carries its text: its original may come after it.
                assert_eq!(counts.copies_by_hash, 0);
                let bytes = sinks.into_iter().next().unwrap().finish().unwrap().unwrap();
                assert_eq!(
                    signed_rows(&bytes, shape),
                    vec![(0, 5), (1, 1), (1, 3), (1, 6), (2, 4), (3, 0), (3, 2)],
                    "{memory} bytes held"
                );
            }
        }

        /// A row the hot keys call cold, or one past the shard, cannot be signed: the pass and
        /// the hot keys disagree about the inputs.
        #[test]
        fn a_signer_refuses_a_row_its_hot_keys_call_cold() {
            let sketch = sketch();
            let mut texts = family_texts(3, 5);
            texts.push(texts[0].clone());
            texts[1] = "a text of its own".into();
            let rows = rows(&sketch, &texts);
            let (tables, hot) = shards_and_hot(&sketch, &rows, &[0, 4], 2);
            let (mask, _, _) = HotMask::for_table(&tables[0], &hot, RowGrouping::Record).unwrap();
            assert!(!mask.is_hot_row(1) && mask.is_hot_row(3));
            let shape = signed_shape_of(&sketch, true);
            let sinks = vec![StepSink::memory(), StepSink::memory()];
            let mut signer = Signer::new(&hot, &mask, shape, sinks).unwrap();
            for row in [1u64, 9] {
                let at = SampleAt {
                    row,
                    local_row: row,
                    rank: 0,
                    addr: addr(row),
                    id: None,
                    content_hash: 1,
                };
                let e = signer.push_full(&at, &[], "text").unwrap_err();
                assert!(
                    e.to_string()
                        .contains(&format!("row {row} of the shard is signed")),
                    "{e}"
                );
            }
            let (_, counts) = signer.finish().unwrap();
            assert_eq!(counts.samples, vec![0, 0]);
        }
    }

    /// What decide refuses: streams that do not fit its settings or each other, and damaged
    /// streams, each named.
    mod refused {
        use std::io::Cursor;

        use super::steps::{addr, family_texts, rows, shards_and_hot, sign_shard, signed_shape_of};
        use super::*;
        use crate::deduper::Verify;
        use crate::handoff::encode_signed;

        fn decide(
            streams: Vec<(String, RecordReader<Cursor<Vec<u8>>>)>,
            shape: SignedShape,
            dedup: &DeduperConfig,
            prior: Option<&PriorState>,
        ) -> Result<Vec<Vec<u8>>, DedupError> {
            let mut out: Vec<_> = (0..streams.len())
                .map(|_| RecordWriter::new(StepSink::memory()).unwrap())
                .collect();
            decide_group(
                streams,
                shape,
                dedup,
                &sketch(),
                &mut out,
                2,
                usize::MAX,
                &CancelToken::default(),
                prior,
            )?;
            Ok(out
                .into_iter()
                .map(|w| w.finish().unwrap().finish().unwrap().unwrap())
                .collect())
        }

        fn named(name: &str, bytes: &[u8]) -> (String, RecordReader<Cursor<Vec<u8>>>) {
            (
                name.to_string(),
                RecordReader::new(Cursor::new(bytes.to_vec())).unwrap(),
            )
        }

        /// One shard's signed stream (one group) of texts with near and exact copies.
        fn signed(texts: bool) -> (Vec<u8>, SignedShape) {
            let sketch = sketch();
            let rows = rows(&sketch, &family_texts(120, 77));
            let (tables, hot) = shards_and_hot(&sketch, &rows, &[0, rows.len()], 1);
            let shape = signed_shape_of(&sketch, texts);
            let (mut streams, _) = sign_shard(&tables[0], &hot, &rows, shape);
            (streams.pop().unwrap(), shape)
        }

        fn step(r: Result<Vec<Vec<u8>>, DedupError>) -> StepInputError {
            match r {
                Err(DedupError::Step(e)) => e,
                Err(other) => panic!("{other:?}"),
                Ok(_) => panic!("decided"),
            }
        }

        /// Signed with other sketch settings, without the texts exact verification needs, or
        /// ranked against a saved index: refused before a sample is read.
        #[test]
        fn streams_signed_with_other_settings_are_refused() {
            let (bytes, shape) = signed(true);
            let other = SignedShape {
                num_perm: 64,
                ..shape
            };
            let columns = shape.columns;
            assert!(matches!(
                step(decide(vec![named("s", &bytes)], other, &DeduperConfig::default(), None)),
                StepInputError::Shape { signed: (64, c), expected: (128, e) }
                    if c == columns && e == columns
            ));
            let fewer_columns = SignedShape {
                columns: columns - 1,
                ..shape
            };
            assert!(matches!(
                step(decide(
                    vec![named("s", &bytes)],
                    fewer_columns,
                    &DeduperConfig::default(),
                    None
                )),
                StepInputError::Shape { .. }
            ));
            // Signed under `--verify estimate`, decided under exact verification.
            let (estimate, estimate_shape) = signed(false);
            assert!(matches!(
                decide(
                    vec![named("s", &estimate)],
                    estimate_shape,
                    &DeduperConfig::default(),
                    None
                ),
                Err(DedupError::Config(SettingsError::SignedWithoutTexts))
            ));
            // The other way round is fine: estimate needs no text, and has one.
            let estimated = DeduperConfig {
                verify: Verify::Estimate,
                ..DeduperConfig::default()
            };
            decide(vec![named("s", &bytes)], shape, &estimated, None).unwrap();
            let ranked = SignedShape {
                ranked: true,
                ..shape
            };
            assert!(matches!(
                decide(
                    vec![named("s", &bytes)],
                    ranked,
                    &DeduperConfig::default(),
                    Some(&PriorState::default())
                ),
                Err(DedupError::Config(SettingsError::PreferAgainstIndex))
            ));
        }

        /// A stream cut short or altered anywhere fails decide, naming the stream: never a
        /// decision from a damaged hand-off.
        #[test]
        fn a_damaged_signed_stream_fails_decide_naming_it() {
            let (bytes, shape) = signed(true);
            let dedup = DeduperConfig::default();
            decide(vec![named("intact", &bytes)], shape, &dedup, None).unwrap();
            for cut in [9, 40, bytes.len() / 2, bytes.len() - 20, bytes.len() - 1] {
                match step(decide(
                    vec![named("shard-3/group-1", &bytes[..cut])],
                    shape,
                    &dedup,
                    None,
                )) {
                    StepInputError::Read { stream, error } => {
                        assert_eq!(stream, "shard-3/group-1");
                        assert!(error.to_string().contains("truncated"), "{cut}: {error}");
                    }
                    other => panic!("cut at {cut}: {other:?}"),
                }
            }
            for at in [8, 20, bytes.len() / 3, bytes.len() / 2, bytes.len() - 12] {
                let mut flipped = bytes.clone();
                flipped[at] ^= 0x10;
                let r = decide(vec![named("flipped", &flipped)], shape, &dedup, None);
                assert!(r.is_err(), "a flipped bit at {at} went unnoticed");
            }
            // A stream of another version of the format is not read at all.
            let mut old = bytes.clone();
            old[7] = 3;
            let e = RecordReader::new(Cursor::new(old)).err().unwrap();
            assert!(e.to_string().contains("bad magic"), "{e}");
        }

        /// Verifying a stream before using it reads it through: intact it passes, damaged
        /// or cut short it does not.
        #[test]
        fn verifying_a_stream_reads_its_checksum_and_end() {
            let (bytes, _) = signed(false);
            let open = |b: &[u8]| RecordReader::new(Cursor::new(b.to_vec())).unwrap();
            open(&bytes).verify().unwrap();
            let mut flipped = bytes.clone();
            flipped[bytes.len() / 2] ^= 1;
            let e = open(&flipped).verify().unwrap_err();
            assert!(e.to_string().contains("checksum"), "{e}");
            let e = open(&bytes[..bytes.len() - 4]).verify().unwrap_err();
            assert!(e.to_string().contains("truncated"), "{e}");
        }

        /// A stream of real samples: (rank, row, text, kind) each.
        pub(super) fn stream_of(
            samples: &[(u64, u64, &str, SignedKind)],
            shape: SignedShape,
        ) -> Vec<u8> {
            let sketch = sketch();
            let texts: Vec<String> = samples.iter().map(|s| s.2.to_string()).collect();
            let sketched = rows(&sketch, &texts);
            let mut w = RecordWriter::new(Vec::new()).unwrap();
            for (&(rank, row, text, kind), r) in samples.iter().zip(&sketched) {
                let copy = kind == SignedKind::Copy;
                encode_signed(
                    &SignedSample {
                        rank,
                        row,
                        addr: addr(row),
                        id: None,
                        content_hash: r.content_hash,
                        kind,
                        signature: Vec::new(),
                        hot: if copy {
                            Vec::new()
                        } else {
                            vec![true; shape.columns]
                        },
                        text: if copy {
                            String::new()
                        } else {
                            text.to_string()
                        },
                    },
                    shape,
                    w.buffer(),
                );
                w.record_done().unwrap();
            }
            w.finish().unwrap()
        }

        pub(super) const A: &str =
            "the first text of these tests, long enough to have many shingles of five";
        pub(super) const B: &str =
            "another text altogether, which shares nothing much with the first one here";

        /// Streams whose rows do not follow each other (the shards' streams out of shard
        /// order), a copy sent as its hash whose original the group never saw, and a text that
        /// is not the one its hash was computed from.
        #[test]
        fn streams_out_of_row_order_copies_without_originals_and_wrong_texts_are_refused() {
            let shape = signed_shape_of(&sketch(), true);
            let dedup = DeduperConfig::default();
            let early = stream_of(
                &[(0, 1, A, SignedKind::Full), (0, 4, B, SignedKind::Full)],
                shape,
            );
            let late = stream_of(
                &[(0, 7, A, SignedKind::Full), (0, 9, B, SignedKind::Full)],
                shape,
            );
            decide(
                vec![named("0", &early), named("1", &late)],
                shape,
                &dedup,
                None,
            )
            .unwrap();
            assert!(matches!(
                step(decide(vec![named("late", &late), named("early", &early)], shape, &dedup, None)),
                StepInputError::SignedOutOfOrder { stream, row: 1, after: 9 } if stream == "early"
            ));
            let copy_first = stream_of(
                &[(0, 2, A, SignedKind::Copy), (0, 3, A, SignedKind::Full)],
                shape,
            );
            assert!(matches!(
                step(decide(vec![named("c", &copy_first)], shape, &dedup, None)),
                StepInputError::CopyWithoutOriginal { stream, row: 2 } if stream == "c"
            ));
            let copy_after = stream_of(
                &[(0, 2, A, SignedKind::Full), (0, 3, A, SignedKind::Copy)],
                shape,
            );
            decide(vec![named("c", &copy_after)], shape, &dedup, None).unwrap();
            // B's text sent under A's hash.
            let mut wrong = SignedSample::default();
            let a = stream_of(&[(0, 0, A, SignedKind::Full)], shape);
            RecordReader::new(a.as_slice())
                .unwrap()
                .next(|b| decode_signed(b, shape, &mut wrong))
                .unwrap();
            wrong.text = B.to_string();
            let mut w = RecordWriter::new(Vec::new()).unwrap();
            encode_signed(&wrong, shape, w.buffer());
            w.record_done().unwrap();
            let wrong = w.finish().unwrap();
            assert!(matches!(
                step(decide(vec![named("w", &wrong)], shape, &dedup, None)),
                StepInputError::ContentHash { stream, row: 0 } if stream == "w"
            ));
        }

        /// Ranked streams are decided in (rank, row) order across streams: the best-ranked copy
        /// is kept wherever it is, equal ranks fall back to the row (the first in input order
        /// is kept), and the decisions come out in row order per shard.
        #[test]
        fn ranked_samples_are_decided_by_rank_then_row_across_streams() {
            let shape = SignedShape {
                ranked: true,
                ..signed_shape_of(&sketch(), true)
            };
            let dedup = DeduperConfig::default();
            let verdicts = |bytes: &[u8]| -> Vec<(u64, Verdict)> {
                let mut r = RecordReader::new(bytes).unwrap();
                let mut got = Vec::new();
                while r
                    .next(|b| {
                        let (d, n) = decode_decided(b)?;
                        got.push((d.row, d.verdict));
                        Ok(n)
                    })
                    .unwrap()
                {}
                got
            };
            let exact = |of: u64| Verdict::Exact {
                of: addr(of),
                cluster: addr(of),
            };
            // A at rows 0 and 1 with equal ranks, in two streams; B at rows 2 and 3 likewise
            // but the later one in the first stream.
            let s0 = stream_of(
                &[(1, 3, B, SignedKind::Full), (5, 0, A, SignedKind::Full)],
                shape,
            );
            let s1 = stream_of(
                &[(1, 2, B, SignedKind::Full), (5, 1, A, SignedKind::Full)],
                shape,
            );
            let out = decide(vec![named("0", &s0), named("1", &s1)], shape, &dedup, None).unwrap();
            assert_eq!(verdicts(&out[0]), vec![(0, Verdict::Unique), (3, exact(2))]);
            assert_eq!(verdicts(&out[1]), vec![(1, exact(0)), (2, Verdict::Unique)]);
            // A better-ranked A at the last row is kept over both.
            let s1 = stream_of(
                &[
                    (0, 4, A, SignedKind::Full),
                    (1, 2, B, SignedKind::Full),
                    (5, 1, A, SignedKind::Full),
                ],
                shape,
            );
            let out = decide(vec![named("0", &s0), named("1", &s1)], shape, &dedup, None).unwrap();
            assert_eq!(verdicts(&out[0]), vec![(0, exact(4)), (3, exact(2))]);
            assert_eq!(
                verdicts(&out[1]),
                vec![(1, exact(4)), (2, Verdict::Unique), (4, Verdict::Unique)]
            );
            // A stream not sorted by (rank, row) is refused, ties included.
            for unsorted in [
                &[(5, 0, A, SignedKind::Full), (1, 3, B, SignedKind::Full)][..],
                &[(5, 1, A, SignedKind::Full), (5, 0, A, SignedKind::Full)][..],
            ] {
                let bad = stream_of(unsorted, shape);
                assert!(matches!(
                    step(decide(vec![named("unsorted", &bad)], shape, &dedup, None)),
                    StepInputError::RankOutOfOrder { stream, .. } if stream == "unsorted"
                ));
            }
        }
    }
}
