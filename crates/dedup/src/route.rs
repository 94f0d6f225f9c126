//! The deciding thread of a stage-2 pass: every sample of every block, in input order, gets its
//! decision, and the decision goes to the statistics, the decisions file and the observer.
//!
//! Only hot samples differ between the kinds of pass, and a [`HotRoute`] says what happens to
//! them: the decision core decides them (one-process stage 2, [`Deduper`], here), the signer
//! writes them for a `decide` step (`crate::Signer`), or their verdicts come from the decided
//! streams (a `write` step, `crate::DecidedMerge`); those two routes are `distributed`'s. Builds
//! on `pass` and `prepare`.

use neardup_corpus::{DecisionRow, DecisionWriter, Reason};
use neardup_keys::HotMask;

use crate::clusters::ClusterStats;
use crate::deduper::{Candidate, Deduper, DeduperStats, SampleAddr, Verdict};
use crate::error::{DedupError, Mismatch};
use crate::pass::{Addressing, Decision, DedupStats, EmptyPolicy, Stage2Config, needs_shingles};
use crate::prepare::{
    HotWork, Material, PreparedBlock, PreparedSample, SampleKind, sketch_from_block,
};

/// One hot sample as its block holds it, for a [`HotRoute`].
pub(crate) struct HotSample<'a> {
    pub block: &'a PreparedBlock,
    pub sample: &'a PreparedSample,
    pub addr: SampleAddr,
    pub id: Option<&'a str>,
    pub cfg: &'a Stage2Config,
    pub mask: &'a HotMask,
    /// The shard's first row in the global row order.
    pub row_base: u64,
}

/// What happens to the hot samples of a stage-2 pass (see the module docs).
pub(crate) trait HotRoute {
    /// What the workers prepare of each hot sample for this route.
    fn hot_work(&self, cfg: &Stage2Config) -> HotWork;

    /// The verdict of one hot sample, and the id of the sample it names as the original when
    /// that is known (a route that only passes the sample on calls it unique: nothing is
    /// written by such a pass).
    fn verdict(&mut self, hot: &HotSample<'_>) -> Result<(Verdict, Option<String>), DedupError>;

    /// Called after every block: a route that keeps an error out of the verdicts reports it
    /// here.
    fn block_done(&mut self) -> Result<(), DedupError> {
        Ok(())
    }

    /// The decision core's counters, for a route that has one.
    fn deduper_stats(&self) -> Option<DeduperStats> {
        None
    }

    /// The sizes of the clusters, for a route that every member of every cluster passes (so
    /// that it can count them); files named by `names`.
    fn cluster_stats(&self, names: &[String]) -> Option<ClusterStats> {
        let _ = names;
        None
    }
}

/// A hot sample met by a route that cannot take it: the inputs are not what the plan of the
/// route expects.
pub(crate) fn wrong_route(what: &'static str) -> DedupError {
    DedupError::Mismatch(Mismatch::Route { what })
}

/// One-process stage 2: the decision core decides here and now.
impl HotRoute for Deduper {
    fn hot_work(&self, cfg: &Stage2Config) -> HotWork {
        HotWork::Decide {
            shingles: needs_shingles(cfg),
        }
    }

    fn verdict(&mut self, hot: &HotSample<'_>) -> Result<(Verdict, Option<String>), DedupError> {
        let (verdict, content_hash) = match hot.sample.kind {
            SampleKind::Copy {
                content_hash, row, ..
            } => match self.decide_copy(content_hash) {
                Some(v) => (v, content_hash),
                None => {
                    let mut verdict = Verdict::Unique;
                    sketch_from_block(
                        hot.block,
                        hot.sample,
                        row,
                        hot.cfg,
                        hot.mask,
                        hot.addr,
                        |c| {
                            verdict = self.decide(c);
                        },
                    );
                    (verdict, content_hash)
                }
            },
            SampleKind::Hot {
                content_hash,
                slot,
                material,
                ..
            } => {
                let (signature, keys, hot_columns) = hot.block.signed(slot, hot.cfg);
                let mut c = Candidate {
                    addr: hot.addr,
                    signature,
                    row: keys,
                    hot: hot_columns,
                    content_hash,
                    shingles: None,
                };
                let verdict = match material {
                    Material::Block(start, end) => {
                        c.shingles = self
                            .needs_shingles()
                            .then(|| &hot.block.shingles[start as usize..end as usize]);
                        self.decide(&c)
                    }
                    Material::Spilled(i) => {
                        self.decide_spilled(&c, &hot.block.spilled_sets[i as usize])
                    }
                    Material::Failed(i) => {
                        let e = &hot.block.set_errors[i as usize];
                        return Err(DedupError::Spill(std::io::Error::new(
                            e.kind(),
                            format!("building a long text's shingle set: {e}"),
                        )));
                    }
                };
                (verdict, content_hash)
            }
            _ => return Err(wrong_route("a hot sample without its signature")),
        };
        let dup_of_id = self.note(hot.addr, &verdict, content_hash, hot.id);
        Ok((verdict, dup_of_id))
    }

    fn block_done(&mut self) -> Result<(), DedupError> {
        match self.take_io_error() {
            Some(e) => Err(DedupError::Spill(e)),
            None => Ok(()),
        }
    }

    fn deduper_stats(&self) -> Option<DeduperStats> {
        Some(self.stats())
    }

    /// Every sample passes the one-process decision core, which counts the clusters
    /// ([`Deduper::note`]).
    fn cluster_stats(&self, names: &[String]) -> Option<ClusterStats> {
        Some(self.cluster_counts().finish(names))
    }
}

/// Where a block's samples are: its file (within the shard) and the file's first record before
/// the block's chunk.
pub(crate) struct BlockPlace {
    pub file: u32,
    pub record_base: u64,
}

/// The deciding thread's state: the route of the hot samples, and where decisions go.
pub(crate) struct Decider<'a, R> {
    pub route: R,
    pub stats: DedupStats,
    cfg: &'a Stage2Config,
    mask: &'a HotMask,
    addressing: &'a Addressing<'a>,
    /// The mask's rows before this one have been handed back ([`HotMask::hand_back_rows`]).
    mask_handed_back: u64,
    decisions: Option<DecisionWriter>,
    observe: &'a mut dyn FnMut(&Decision),
}

/// Rows decided between two hand-backs of a mapped mask's pages (a few hundred kilobytes of
/// mask).
const MASK_ROWS_HANDED_BACK: u64 = 1 << 16;

/// One sample's decision.
struct Decided {
    keep: bool,
    reason: Reason,
    verdict: Option<Verdict>,
    dup_of_id: Option<String>,
}

impl Decided {
    fn of(keep: bool, reason: Reason) -> Decided {
        Decided {
            keep,
            reason,
            verdict: None,
            dup_of_id: None,
        }
    }
}

impl<'a, R: HotRoute> Decider<'a, R> {
    pub fn new(
        route: R,
        cfg: &'a Stage2Config,
        mask: &'a HotMask,
        addressing: &'a Addressing<'a>,
        decisions: Option<DecisionWriter>,
        observe: &'a mut dyn FnMut(&Decision),
    ) -> Self {
        Decider {
            route,
            stats: DedupStats::default(),
            cfg,
            mask,
            addressing,
            mask_handed_back: 0,
            decisions,
            observe,
        }
    }

    /// The cluster sizes counted, when the route sees whole clusters.
    pub fn cluster_stats(&self) -> Option<ClusterStats> {
        self.route.cluster_stats(self.addressing.names)
    }

    /// The decisions file, to be finished by the caller.
    pub fn take_decisions(&mut self) -> Option<DecisionWriter> {
        self.decisions.take()
    }

    /// Decides every sample of one block in order; returns the keep flag of each record.
    pub fn decide_block(
        &mut self,
        w: &PreparedBlock,
        place: BlockPlace,
    ) -> Result<Vec<bool>, DedupError> {
        let n = w.block.num_records();
        // Per record: (samples kept as text, samples dropped).
        let mut tally = vec![(0u32, 0u32); n];
        let first = place.record_base + w.block.first_record;
        let file = self.addressing.file_base + place.file;
        for s in &w.samples {
            let addr = SampleAddr {
                file,
                record: first + s.record as u64,
                field: s.field,
            };
            let id = s.id.map(|(a, b)| &w.ids[a as usize..b as usize]);
            let d = self.decide_sample(w, s, addr, id)?;
            self.stats.samples += 1;
            let t = &mut tally[s.record as usize];
            if d.keep {
                if !matches!(s.kind, SampleKind::Skipped(_) | SampleKind::Blank) {
                    t.0 += 1;
                }
            } else {
                t.1 += 1;
            }
            self.record(addr, id, d)?;
        }
        let keep: Vec<bool> = tally
            .iter()
            .map(|&(kept, dropped)| !(dropped > 0 && kept == 0))
            .collect();
        self.stats.records += n as u64;
        let kept = keep.iter().filter(|k| **k).count() as u64;
        self.stats.records_kept += kept;
        self.stats.records_dropped += n as u64 - kept;
        self.route.block_done()?;
        // Rows are decided in order: a mapped mask's pages behind them are not needed again.
        let decided = w.first_row + w.texts;
        if decided >= self.mask_handed_back + MASK_ROWS_HANDED_BACK {
            self.mask
                .hand_back_rows(self.mask_handed_back as usize..decided as usize);
            self.mask_handed_back = decided;
        }
        Ok(keep)
    }

    fn decide_sample(
        &mut self,
        w: &PreparedBlock,
        s: &PreparedSample,
        addr: SampleAddr,
        id: Option<&str>,
    ) -> Result<Decided, DedupError> {
        let stats = &mut self.stats;
        match s.kind {
            SampleKind::Skipped(why) => {
                stats.errors += 1;
                match stats.skipped.get_mut(why) {
                    Some(n) => *n += 1,
                    None => {
                        stats.skipped.insert(why.to_string(), 1);
                    }
                }
                Ok(Decided::of(true, Reason::Error))
            }
            SampleKind::Blank => {
                stats.empty += 1;
                Ok(Decided::of(
                    self.cfg.empty == EmptyPolicy::Keep,
                    Reason::Empty,
                ))
            }
            SampleKind::Cold => {
                stats.cold += 1;
                stats.unique += 1;
                Ok(Decided::of(true, Reason::Unique))
            }
            SampleKind::Copy { .. }
            | SampleKind::Text { .. }
            | SampleKind::Hot { .. }
            | SampleKind::Decided { .. } => {
                let hot = HotSample {
                    block: w,
                    sample: s,
                    addr,
                    id,
                    cfg: self.cfg,
                    mask: self.mask,
                    row_base: self.addressing.row_base,
                };
                let (verdict, dup_of_id) = self.route.verdict(&hot)?;
                match verdict {
                    Verdict::Unique => stats.unique += 1,
                    Verdict::Near { .. } => stats.near += 1,
                    Verdict::Exact { .. } => stats.exact += 1,
                }
                let reason = match verdict {
                    Verdict::Unique => Reason::Unique,
                    Verdict::Near { .. } => Reason::Near,
                    Verdict::Exact { .. } => Reason::Exact,
                };
                Ok(Decided {
                    keep: verdict.keep(),
                    reason,
                    verdict: Some(verdict),
                    dup_of_id,
                })
            }
        }
    }

    /// Writes one decision to the decisions file and hands it to the observer.
    fn record(&mut self, addr: SampleAddr, id: Option<&str>, d: Decided) -> Result<(), DedupError> {
        let (dup_of, similarity) = d.verdict.and_then(|v| v.dup_of()).unzip();
        // A sample dropped for another reason than a duplicate (an empty text) is its own.
        let cluster = d.verdict.map_or(addr, |v| v.cluster(addr));
        let dup_of_id = d.dup_of_id;
        let names = self.addressing.names;
        if let Some(w) = &mut self.decisions {
            w.write(&DecisionRow {
                file: &names[addr.file as usize],
                record: addr.record,
                field: addr.field,
                id,
                keep: d.keep,
                reason: d.reason,
                dup_of_file: dup_of.map(|a| names[a.file as usize].as_str()),
                dup_of_record: dup_of.map(|a| a.record),
                dup_of_id: dup_of_id.as_deref(),
                similarity,
                cluster_file: &names[cluster.file as usize],
                cluster_record: cluster.record,
            })
            .map_err(DedupError::Output)?;
        }
        (self.observe)(&Decision {
            addr,
            id: id.map(str::to_string),
            keep: d.keep,
            reason: d.reason,
            dup_of,
            dup_of_id,
            similarity,
            cluster,
        });
        Ok(())
    }
}
