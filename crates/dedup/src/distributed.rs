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
            merge.advance(i)?;
        }
        Ok(merge)
    }

    fn advance(&mut self, i: usize) -> Result<(), DedupError> {
        let (name, reader) = &mut self.streams[i];
        let mut got = None;
        reader
            .next(|b| {
                let (d, n) = decode_decided(b)?;
                got = Some(d);
                Ok(n)
            })
            .map_err(|e| step_error(name, e))?;
        if let (Some(next), Some(prev)) = (&got, &self.heads[i])
            && next.row <= prev.row
        {
            return Err(DedupError::Step(StepInputError::DecidedOutOfOrder {
                stream: name.clone(),
                row: next.row,
                after: prev.row,
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
        self.advance(i)?;
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
    use neardup_sketch::{LshParams, Shingler, SketchConfig};

    fn sketch() -> DecideShape {
        DecideShape {
            sketcher: Sketcher::new(SketchConfig::new(
                Shingler::Chars { k: 5, step: 1 },
                128,
                LshParams::new(16, 8).unwrap(),
            ))
            .unwrap(),
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
        // Rows out of order within a stream: the row left behind is a decision for a row not
        // asked for when the next is.
        let mut m = merge(&[&[2, 5, 3]]).unwrap();
        m.take(2).unwrap();
        m.take(5).unwrap();
        assert!(matches!(
            step(m.take(6).unwrap_err()),
            StepInputError::NotHotRow {
                row: 3,
                before_end: true,
                ..
            }
        ));
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
}
