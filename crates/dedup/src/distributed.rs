//! The steps of a distributed stage 2, built from the one-process pipeline's pieces.
//!
//! Decisions interact only inside connected components of hot rows (see `neardup_keys::plan`),
//! so stage 2 splits into three steps with explicit values between them:
//!
//! - **sign** (per shard, [`crate::run_sign`]): the stage-2 pass over one shard, whose deciding
//!   thread hands each hot sample to a [`Signer`] instead of the decision core. The signer writes
//!   what deciding the sample needs ([`SignedSample`]) to the stream of the sample's group.
//! - **decide** (per group, [`decide_group`]): reads its group's streams of every shard in shard
//!   order (the global row order), runs the decision core exactly as a one-process run does, and
//!   writes one [`DecidedSample`] per hot sample to the stream of the sample's shard. It opens no
//!   input file.
//! - **write** (per shard, [`crate::run_write`]): the stage-2 pass over one shard again, without
//!   signing; its hot samples take their verdicts from a [`DecidedMerge`] of every group's stream
//!   for the shard, cold ones are kept as in a one-process run, and the dataset and decisions are
//!   written.
//!
//! A later exact copy whose original is an earlier hot sample of its own shard travels as its
//! content hash alone (`full = false`): the original is decided first, in the same group (same
//! content key), so the hash finds it. Any other hot sample carries its signature, keys, hot
//! columns and, under exact verification, its shingle set.

use std::io::{self, BufWriter, Read, Write};

use hashbrown::{HashMap, HashSet};
use neardup_corpus::{AtomicFile, CancelToken, Publication};
use neardup_keys::{FileRows, HotKeys, HotMask, RowRule, ShardPlace, content_key};

use crate::deduper::{Candidate, DedupConfig, Deduper, DeduperStats, SampleAddr, Verdict};
use crate::error::DedupError;
use crate::handoff::{
    DecidedSample, RecordReader, RecordWriter, SignedSample, SignedShape, decode_decided,
    decode_signed, encode_decided, encode_signed,
};
use crate::stage::{Addressing, ApplyConfig, DedupStats, Route, run_stage2};

/// Where one stream of a step goes: a file being published, or memory (for schedulers that pass
/// the steps' values as bytes).
pub struct StepSink {
    target: Target,
    bytes: u64,
}

enum Target {
    File(BufWriter<AtomicFile>),
    Memory(Vec<u8>),
}

impl StepSink {
    /// A sink writing to `file` (a file of a [`neardup_corpus::Publication`], committed by
    /// [`StepSink::finish`]).
    pub fn file(file: AtomicFile) -> StepSink {
        StepSink {
            target: Target::File(BufWriter::with_capacity(1 << 20, file)),
            bytes: 0,
        }
    }

    /// A sink collecting the bytes in memory.
    pub fn memory() -> StepSink {
        StepSink {
            target: Target::Memory(Vec::new()),
            bytes: 0,
        }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flushes and commits a file (marking it ready to publish); returns the bytes of a memory
    /// sink.
    pub fn finish(self) -> io::Result<Option<Vec<u8>>> {
        match self.target {
            Target::File(w) => {
                let file = w.into_inner().map_err(|e| e.into_error())?;
                file.commit()?;
                Ok(None)
            }
            Target::Memory(bytes) => Ok(Some(bytes)),
        }
    }
}

impl Write for StepSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.target {
            Target::File(w) => w.write(buf)?,
            Target::Memory(v) => v.write(buf)?,
        };
        self.bytes += n as u64;
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.target {
            Target::File(w) => w.write_all(buf)?,
            Target::Memory(v) => v.write_all(buf)?,
        }
        self.bytes += buf.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.target {
            Target::File(w) => w.flush(),
            Target::Memory(_) => Ok(()),
        }
    }
}

/// Writes the signed samples of one shard, one stream per group (see the module docs).
pub struct Signer<'a> {
    hot: &'a HotKeys,
    shape: SignedShape,
    streams: Vec<RecordWriter<StepSink>>,
    /// Content hashes of this shard's hot samples so far: a later copy of one is sent as its
    /// hash alone.
    seen: HashSet<u128>,
    samples: Vec<u64>,
    copies_by_hash: u64,
    sample: SignedSample,
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
    /// A signer writing group `g`'s samples to `sinks[g]` (one sink per group of `hot`).
    pub fn new(hot: &'a HotKeys, shape: SignedShape, sinks: Vec<StepSink>) -> io::Result<Self> {
        assert_eq!(sinks.len(), hot.groups() as usize, "one sink per group");
        let streams = sinks
            .into_iter()
            .map(RecordWriter::new)
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Signer {
            hot,
            shape,
            samples: vec![0; streams.len()],
            streams,
            seen: HashSet::new(),
            copies_by_hash: 0,
            sample: SignedSample::default(),
        })
    }

    /// The shape of every sample this signer writes.
    pub fn shape(&self) -> SignedShape {
        self.shape
    }

    fn write(&mut self, group: u32) -> io::Result<()> {
        let stream = &mut self.streams[group as usize];
        encode_signed(&self.sample, self.shape, stream.buffer());
        stream.record_done()?;
        self.samples[group as usize] += 1;
        Ok(())
    }

    /// Writes a hot sample with everything deciding it needs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_full(
        &mut self,
        row: u64,
        addr: SampleAddr,
        id: Option<&str>,
        content_hash: u128,
        later_copy: bool,
        signature: &[u32],
        keys: &[u64],
        hot: &[bool],
        shingles: &[u32],
    ) -> io::Result<()> {
        let group = self
            .hot
            .group_of_row(keys)
            .ok_or_else(|| io::Error::other(format!("row {row} is signed but has no hot key")))?;
        self.seen.insert(content_hash);
        let s = &mut self.sample;
        s.row = row;
        s.addr = addr;
        s.id = id.map(str::to_string);
        s.content_hash = content_hash;
        s.full = true;
        s.later_copy = later_copy;
        s.signature.clear();
        s.signature.extend_from_slice(signature);
        s.keys.clear();
        s.keys.extend_from_slice(keys);
        s.hot.clear();
        s.hot.extend_from_slice(hot);
        s.shingles.clear();
        if self.shape.shingles {
            s.shingles.extend_from_slice(shingles);
        }
        self.write(group)
    }

    /// Writes a later exact copy as its content hash alone when an earlier hot sample of this
    /// shard had the same hash; false otherwise (the caller signs it and calls
    /// [`Signer::push_full`] with `later_copy`).
    pub(crate) fn push_copy(
        &mut self,
        row: u64,
        addr: SampleAddr,
        id: Option<&str>,
        content_hash: u128,
    ) -> io::Result<bool> {
        if !self.seen.contains(&content_hash) {
            return Ok(false);
        }
        let group = self
            .hot
            .group_of_row(&[content_key(content_hash)])
            .ok_or_else(|| {
                io::Error::other(format!(
                    "row {row} is a later copy but its content key is cold"
                ))
            })?;
        let s = &mut self.sample;
        s.row = row;
        s.addr = addr;
        s.id = id.map(str::to_string);
        s.content_hash = content_hash;
        s.full = false;
        s.later_copy = true;
        s.signature.clear();
        s.keys.clear();
        s.hot.clear();
        s.shingles.clear();
        self.write(group)?;
        self.copies_by_hash += 1;
        Ok(true)
    }

    /// Ends every stream; returns the sinks (in group order) and what was written.
    pub fn finish(self) -> io::Result<(Vec<StepSink>, SignedCounts)> {
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

fn step_error(name: &str, e: io::Error) -> DedupError {
    DedupError::Step(format!("{name}: {e}"))
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
            return Err(DedupError::Step(format!(
                "{name}: decided rows are out of order ({} after {}); the file is not what \
                 `neardup decide` wrote",
                next.row, prev.row
            )));
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
                    return Err(DedupError::Step(format!(
                        "{}: holds a decision for row {}, which is not a hot row of this shard \
                         as this table and hot-key file see it; give `write` the decided \
                         directories made from this shard's sign output",
                        self.streams[i].0, d.row
                    )));
                }
                Some(d) if d.row == row => found = Some(i),
                _ => {}
            }
        }
        let Some(i) = found else {
            return Err(DedupError::Step(format!(
                "no decided directory holds the decision of hot row {row}: pass `write` the \
                 decided directories of every group (--decided decided-0 … decided-(G-1))"
            )));
        };
        let d = self.heads[i].take().expect("found");
        self.advance(i)?;
        Ok(d)
    }

    /// Checks that every decision was taken (and every stream read to its verified end).
    pub fn finish(self) -> Result<(), DedupError> {
        for (i, head) in self.heads.iter().enumerate() {
            if let Some(d) = head {
                return Err(DedupError::Step(format!(
                    "{}: holds a decision for row {}, which is not a hot row of this shard; give \
                     `write` the decided directories made from this shard's sign output",
                    self.streams[i].0, d.row
                )));
            }
        }
        Ok(())
    }
}

/// What the decision core needs besides its settings: the sketch shape the samples were made
/// with.
#[derive(Clone, Copy, Debug)]
pub struct DecideShape {
    /// Signature width.
    pub num_perm: usize,
    /// LSH bands.
    pub bands: usize,
    /// The row rule of the tables.
    pub rule: RowRule,
}

/// Decides one group: `signed` are the group's streams of every shard, in shard order (the global
/// row order); the decisions of stream `s` go to `out[s]`. Returns the decision core's counters
/// and the decisions written per shard.
pub fn decide_group<R: Read>(
    signed: Vec<(String, RecordReader<R>)>,
    shape: SignedShape,
    dedup: &DedupConfig,
    sketch: DecideShape,
    out: &mut [RecordWriter<StepSink>],
    cancel: &CancelToken,
) -> Result<(DeduperStats, Vec<u64>), DedupError> {
    assert_eq!(signed.len(), out.len(), "one output per shard");
    let mut deduper = Deduper::new(dedup.clone(), sketch.num_perm, sketch.bands, sketch.rule)
        .map_err(DedupError::Config)?;
    let needs_shingles = deduper.needs_shingles() && sketch.rule.band_keys;
    if needs_shingles && !shape.shingles {
        return Err(DedupError::Config(
            "exact verification needs the samples' shingle sets, and these sign outputs were \
             made without them (with --verify estimate): run `neardup sign` with the same \
             --verify as `decide`"
                .into(),
        ));
    }
    if shape.num_perm != sketch.num_perm || shape.columns != sketch.rule.columns(sketch.bands) {
        return Err(DedupError::Step(format!(
            "the sign outputs hold {} permutations and {} keys per row, the hot keys' settings \
             {} and {}: they were made with other settings",
            shape.num_perm,
            shape.columns,
            sketch.num_perm,
            sketch.rule.columns(sketch.bands)
        )));
    }
    let mut ids: HashMap<SampleAddr, Box<str>> = HashMap::new();
    let mut written = vec![0u64; out.len()];
    let mut sample = SignedSample::default();
    let mut last_row: Option<u64> = None;
    let mut decided = 0u64;
    for (s, (name, mut reader)) in signed.into_iter().enumerate() {
        loop {
            if decided.is_multiple_of(4096) && cancel.is_cancelled() {
                return Err(DedupError::Interrupted);
            }
            decided += 1;
            let more = reader
                .next(|b| decode_signed(b, shape, &mut sample))
                .map_err(|e| step_error(&name, e))?;
            if !more {
                break;
            }
            if last_row.is_some_and(|r| sample.row <= r) {
                return Err(DedupError::Step(format!(
                    "{name}: row {} comes after row {}: sign outputs must be given in shard \
                     order, each shard once",
                    sample.row,
                    last_row.unwrap_or(0)
                )));
            }
            last_row = Some(sample.row);
            let verdict = if !sample.full {
                deduper.decide_copy(sample.content_hash).ok_or_else(|| {
                    DedupError::Step(format!(
                        "{name}: row {} is sent as an exact copy, but no earlier sample of this \
                         group has its content; the sign outputs are incomplete or from another \
                         group",
                        sample.row
                    ))
                })?
            } else {
                let copy = if sample.later_copy {
                    deduper.decide_copy(sample.content_hash)
                } else {
                    None
                };
                match copy {
                    Some(v) => v,
                    None => deduper.decide(&Candidate {
                        addr: sample.addr,
                        signature: &sample.signature,
                        row: &sample.keys,
                        hot: &sample.hot,
                        content_hash: sample.content_hash,
                        shingles: deduper
                            .needs_shingles()
                            .then_some(sample.shingles.as_slice()),
                    }),
                }
            };
            if let Some(e) = deduper.take_io_error() {
                return Err(DedupError::Spill(e.to_string()));
            }
            // Any hot sample may be named as the original of a later one.
            if let Some(id) = &sample.id {
                ids.insert(sample.addr, id.as_str().into());
            }
            let dup_of_id = match verdict {
                Verdict::Unique => None,
                Verdict::Near { of, .. } | Verdict::Exact { of } => {
                    ids.get(&of).map(|s| s.to_string())
                }
            };
            let decided = DecidedSample {
                row: sample.row,
                verdict,
                dup_of_id,
            };
            encode_decided(&decided, out[s].buffer());
            out[s]
                .record_done()
                .map_err(|e| DedupError::Output(e.to_string()))?;
            written[s] += 1;
        }
    }
    Ok((deduper.stats(), written))
}

/// The `sign` step over one shard: re-reads its inputs (`files`, with the shard's hot mask from
/// [`neardup_keys::HotMask::for_shard`]) and writes each hot sample to `sinks[group]`. Nothing
/// is decided or written besides the sinks (`cfg.output` and `cfg.decisions` must be unset).
/// Returns the sinks (in group order), what was signed, and the pass's statistics.
pub fn run_sign(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &ApplyConfig,
    place: &ShardPlace,
    hot: &HotKeys,
    sinks: Vec<StepSink>,
    publication: &Publication,
) -> Result<(Vec<StepSink>, SignedCounts, DedupStats), DedupError> {
    if cfg.output.is_some() || cfg.decisions.is_some() {
        return Err(DedupError::Config(
            "`sign` writes only its signed samples: the dataset and the decisions are written by \
             `write`"
                .into(),
        ));
    }
    let shape = signed_shape(cfg);
    let signer = Signer::new(hot, shape, sinks).map_err(sign_stream_error)?;
    let names: Vec<String> = files
        .iter()
        .map(|f| f.input.path.display().to_string())
        .collect();
    let addressing = Addressing {
        file_base: u32::try_from(place.file_base)
            .map_err(|_| DedupError::Config("more than 4,294,967,295 input files".into()))?,
        row_base: place.row_base,
        names: &names,
    };
    let (stats, route) = run_stage2(
        files,
        mask,
        cfg,
        publication,
        &mut |_| {},
        Route::Sign(Box::new(signer)),
        &addressing,
    )?;
    let Route::Sign(signer) = route else {
        unreachable!("the route comes back as it went")
    };
    let (sinks, counts) = (*signer).finish().map_err(sign_stream_error)?;
    Ok((sinks, counts, stats))
}

fn sign_stream_error(e: io::Error) -> DedupError {
    DedupError::Output(format!("writing the signed samples: {e}"))
}

/// The shape of the samples `sign` writes under `cfg`.
pub fn signed_shape(cfg: &ApplyConfig) -> SignedShape {
    SignedShape {
        num_perm: cfg.sketcher.num_perm(),
        columns: cfg.rule.columns(cfg.sketcher.bands()),
        shingles: crate::stage::needs_shingles(cfg),
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
    cfg: &ApplyConfig,
    place: &ShardPlace,
    names: &[String],
    decided: DecidedMerge<Box<dyn Read + Send>>,
    publication: &Publication,
    observe: &mut dyn FnMut(&crate::Decision),
) -> Result<DedupStats, DedupError> {
    let addressing = Addressing {
        file_base: u32::try_from(place.file_base)
            .map_err(|_| DedupError::Config("more than 4,294,967,295 input files".into()))?,
        row_base: place.row_base,
        names,
    };
    let (stats, route) = run_stage2(
        files,
        mask,
        cfg,
        publication,
        observe,
        Route::Write(decided),
        &addressing,
    )?;
    let Route::Write(merge) = route else {
        unreachable!("the route comes back as it went")
    };
    merge.finish()?;
    Ok(stats)
}
