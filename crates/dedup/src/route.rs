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

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use neardup_corpus::{
        Chunk, ChunkRange, FieldPath, InputFile, Projection, ReadOptions, TextSelector, read_chunk,
        read_decisions,
    };

    use super::*;

    use crate::distributed::DecidedMerge;
    use crate::handoff::{DecidedSample, RecordReader, RecordWriter, encode_decided};

    fn cfg(empty: EmptyPolicy) -> Stage2Config {
        Stage2Config {
            empty,
            ..crate::pass::test_settings::stage2()
        }
    }

    /// A block of `lines` records read from a JSONL file.
    fn block(dir: &std::path::Path, lines: usize) -> neardup_corpus::Block {
        let texts: Vec<String> = (0..lines).map(|i| format!("record {i}")).collect();
        block_of(dir, &texts)
    }

    /// A block of one record per text, read from a JSONL file.
    fn block_of(dir: &std::path::Path, texts: &[String]) -> neardup_corpus::Block {
        let path = dir.join("in.jsonl");
        let body: String = texts
            .iter()
            .map(|t| format!("{{\"text\":\"{t}\"}}\n"))
            .collect();
        std::fs::write(&path, body).unwrap();
        let input = InputFile::detect(&path, std::path::Path::new("in.jsonl"), None).unwrap();
        let chunk = Chunk {
            file: 0,
            seq: 0,
            range: ChunkRange::Whole,
        };
        let opts = ReadOptions::new(
            TextSelector::single(FieldPath::top("text")),
            Projection::FullRecords,
        );
        read_chunk(&input, &chunk, &opts).next().unwrap().unwrap()
    }

    /// `block` prepared as a `write` step's workers prepare it: each sample's kind given.
    fn prepared(
        block: neardup_corpus::Block,
        first_row: u64,
        samples: &[(u32, u32, SampleKind)],
    ) -> PreparedBlock {
        let texts = samples
            .iter()
            .filter(|s| !matches!(s.2, SampleKind::Skipped(_)))
            .count() as u64;
        let mut ids = String::new();
        let samples = samples
            .iter()
            .map(|&(record, field, kind)| {
                let start = ids.len() as u32;
                ids.push_str(&format!("id-{record}.{field}"));
                PreparedSample {
                    record,
                    field,
                    kind,
                    id: Some((start, ids.len() as u32)),
                    rank: 0,
                }
            })
            .collect();
        PreparedBlock {
            block,
            first_row,
            texts,
            samples,
            signatures: Vec::new(),
            rows: Vec::new(),
            hot: Vec::new(),
            shingles: Vec::new(),
            spilled_sets: Vec::new(),
            set_errors: Vec::new(),
            carried: String::new(),
            ids,
            bad_rank: None,
            ranked: (0, 0),
        }
    }

    fn at(file: u32, record: u64) -> SampleAddr {
        SampleAddr {
            file,
            record,
            field: 0,
        }
    }

    /// The decided stream a `decide` step would hand a `write` step.
    fn decided(samples: &[DecidedSample]) -> DecidedMerge<Cursor<Vec<u8>>> {
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        for d in samples {
            encode_decided(d, w.buffer());
            w.record_done().unwrap();
        }
        let bytes = w.finish().unwrap();
        DecidedMerge::new(vec![(
            "decided".into(),
            RecordReader::new(Cursor::new(bytes)).unwrap(),
        )])
        .unwrap()
    }

    /// Every sample of a block gets its decision in order, addressed within all shards' files;
    /// a record is dropped only when a sample of it was dropped and none kept a text (an empty
    /// or unreadable slot keeps no text); the statistics count each kind once.
    #[test]
    fn a_block_is_decided_sample_by_sample_and_record_by_record() {
        let dir = tempfile::tempdir().unwrap();
        // Rows 10.. of this shard start at global row 1000 (`row_base`).
        let row_base = 1000;
        let merge = decided(&[
            DecidedSample {
                row: 1010,
                verdict: Verdict::Exact {
                    of: at(0, 7),
                    cluster: at(0, 3),
                },
                dup_of_id: Some("seven".into()),
            },
            DecidedSample {
                row: 1011,
                verdict: Verdict::Unique,
                dup_of_id: None,
            },
            DecidedSample {
                row: 1012,
                verdict: Verdict::Near {
                    of: at(1, 2),
                    similarity: 0.9,
                },
                dup_of_id: None,
            },
        ]);
        let names: Vec<String> = (0..4).map(|f| format!("file-{f}")).collect();
        // This shard's files are numbered from 2; the block is of its file 1, whose first
        // record here is the chunk's record 100.
        let addressing = Addressing {
            file_base: 2,
            row_base,
            names: &names,
        };
        let cfg = cfg(EmptyPolicy::Keep);
        let mask = HotMask::new(0, 17);
        let mut seen = Vec::new();
        let mut observe = |d: &Decision| seen.push(d.clone());
        let path = dir.path().join("decisions.jsonl");
        let writer = DecisionWriter::create(&path).unwrap();
        let mut decider = Decider::new(merge, &cfg, &mask, &addressing, Some(writer), &mut observe);
        let w = prepared(
            block(dir.path(), 5),
            10,
            &[
                // Record 0: an exact copy and a unique text: kept.
                (0, 0, SampleKind::Decided { row: 10 }),
                (0, 1, SampleKind::Decided { row: 11 }),
                // Record 1: a near copy and an empty slot: dropped.
                (1, 0, SampleKind::Decided { row: 12 }),
                (1, 1, SampleKind::Blank),
                // Record 2: unreadable: kept, as an error.
                (2, 0, SampleKind::Skipped("missing_field")),
                // Record 3: cold: kept. Record 4 has no sample: kept.
                (3, 0, SampleKind::Cold),
            ],
        );
        let keep = decider
            .decide_block(
                &w,
                BlockPlace {
                    file: 1,
                    record_base: 100,
                },
            )
            .unwrap();
        assert_eq!(keep, vec![true, false, true, true, true]);
        let stats = &decider.stats;
        assert_eq!(
            (stats.records, stats.records_kept, stats.records_dropped),
            (5, 4, 1)
        );
        assert_eq!(
            (
                stats.samples,
                stats.unique,
                stats.cold,
                stats.near,
                stats.exact,
                stats.empty,
                stats.errors
            ),
            (6, 2, 1, 1, 1, 1, 1)
        );
        assert_eq!(stats.skipped.get("missing_field"), Some(&1));
        decider.take_decisions().unwrap().finish().unwrap();
        drop(decider);

        let summary: Vec<_> = seen
            .iter()
            .map(|d| (d.addr.file, d.addr.record, d.addr.field, d.keep, d.reason))
            .collect();
        assert_eq!(
            summary,
            vec![
                (3, 100, 0, false, Reason::Exact),
                (3, 100, 1, true, Reason::Unique),
                (3, 101, 0, false, Reason::Near),
                (3, 101, 1, true, Reason::Empty),
                (3, 102, 0, true, Reason::Error),
                (3, 103, 0, true, Reason::Unique),
            ]
        );
        assert_eq!(seen[0].dup_of, Some(at(0, 7)));
        assert_eq!(seen[0].dup_of_id.as_deref(), Some("seven"));
        assert_eq!(seen[0].similarity, Some(1.0));
        assert_eq!(seen[0].cluster, at(0, 3));
        assert_eq!(seen[0].id.as_deref(), Some("id-0.0"));
        assert_eq!(seen[2].similarity, Some(0.9));
        assert_eq!(seen[2].cluster, at(1, 2));
        assert_eq!(seen[1].cluster, seen[1].addr);
        // The decisions file says the same, naming files by their global number.
        let rows = read_decisions(&path).unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0].file, "file-3");
        assert_eq!(rows[0].dup_of_file.as_deref(), Some("file-0"));
        assert_eq!(rows[0].dup_of_record, Some(7));
        assert_eq!(rows[0].cluster_record, Some(3));
        assert_eq!(rows[2].dup_of_file.as_deref(), Some("file-1"));
        for (row, d) in rows.iter().zip(&seen) {
            assert_eq!(
                (row.record, row.field, row.keep, row.reason),
                (d.addr.record, d.addr.field, d.keep, d.reason)
            );
        }
    }

    /// Under `empty = drop` an empty slot is dropped, and a record of empty slots with it; a
    /// record holding a kept text besides is kept.
    #[test]
    fn empty_slots_are_kept_or_dropped_by_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["f".to_string()];
        let addressing = Addressing {
            file_base: 0,
            row_base: 0,
            names: &names,
        };
        let mask = HotMask::new(0, 17);
        let samples = [
            (0, 0, SampleKind::Blank),
            (1, 0, SampleKind::Blank),
            (1, 1, SampleKind::Cold),
        ];
        for (policy, want) in [
            (EmptyPolicy::Keep, vec![true, true]),
            (EmptyPolicy::Drop, vec![false, true]),
        ] {
            let cfg = cfg(policy);
            let mut observe = |_: &Decision| {};
            let mut decider =
                Decider::new(decided(&[]), &cfg, &mask, &addressing, None, &mut observe);
            let w = prepared(block(dir.path(), 2), 0, &samples);
            let keep = decider
                .decide_block(
                    &w,
                    BlockPlace {
                        file: 0,
                        record_base: 0,
                    },
                )
                .unwrap();
            assert_eq!(keep, want, "{policy:?}");
            assert_eq!(decider.stats.empty, 2);
            assert_eq!(decider.stats.records_dropped, u64::from(!want[0]));
        }
    }

    /// A sample a route has no way to decide (one prepared for another kind of pass) stops the
    /// pass: the inputs are not those the route's plan was made for.
    #[test]
    fn a_sample_prepared_for_another_route_stops_the_pass() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["f".to_string()];
        let addressing = Addressing {
            file_base: 0,
            row_base: 0,
            names: &names,
        };
        let cfg = cfg(EmptyPolicy::Keep);
        let mask = HotMask::new(0, 17);
        let place = || BlockPlace {
            file: 0,
            record_base: 0,
        };
        let copy = SampleKind::Copy {
            content_hash: 1,
            row: 0,
            text: (0, 0),
        };
        let mut observe = |_: &Decision| {};
        // The decision core is given a sample a `write` step takes from decide.
        let core = Deduper::new(cfg.deduper.clone(), 128, 16, cfg.rule).unwrap();
        let mut decider = Decider::new(core, &cfg, &mask, &addressing, None, &mut observe);
        let w = prepared(
            block(dir.path(), 1),
            0,
            &[(0, 0, SampleKind::Decided { row: 0 })],
        );
        assert!(matches!(
            decider.decide_block(&w, place()),
            Err(DedupError::Mismatch(Mismatch::Route { .. }))
        ));
        // A `write` step is given a sample to sign.
        let mut observe = |_: &Decision| {};
        let mut decider = Decider::new(decided(&[]), &cfg, &mask, &addressing, None, &mut observe);
        let w = prepared(block(dir.path(), 1), 0, &[(0, 0, copy)]);
        assert!(matches!(
            decider.decide_block(&w, place()),
            Err(DedupError::Mismatch(Mismatch::Route { .. }))
        ));
    }

    /// Four texts as stage 1 sketched them (a text, a near copy of it, an exact copy, another
    /// near copy), each one record of a JSONL file.
    struct Sketched {
        texts: Vec<String>,
        sigs: Vec<Vec<u32>>,
        keys: Vec<Vec<u64>>,
        sets: Vec<Vec<u32>>,
        hashes: Vec<u128>,
        /// The mask of the keys they share: every row is hot.
        mask: HotMask,
    }

    fn sketched(dir: &std::path::Path, cfg: &Stage2Config) -> Sketched {
        use neardup_keys::{HotKeys, KeyTable, TableLayout};
        use neardup_sketch::Scratch;

        let words: Vec<String> = (0..40).map(|i| format!("w{}", i * 37 % 101)).collect();
        let text = words.join(" ");
        let mut near = words.clone();
        near[5] = "changed".into();
        let near = near.join(" ");
        let mut other_near = words.clone();
        other_near[30] = "altered".into();
        let other_near = other_near.join(" ");
        let texts = vec![text.clone(), near, text, other_near];
        let columns = cfg.rule.columns(16);
        let mut scratch = Scratch::collecting_shingle_sets();
        let (mut sigs, mut keys, mut sets, mut hashes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in &texts {
            let (mut sig, mut row, mut set) = (vec![0; 128], vec![0; columns], Vec::new());
            let r = cfg
                .rule
                .sketch(&cfg.sketcher, t, &mut scratch, &mut sig, &mut row);
            cfg.sketcher.last_shingle_set(&mut scratch, &mut set);
            sigs.push(sig);
            keys.push(row);
            sets.push(set);
            hashes.push(r.content_hash);
        }
        let layout = TableLayout {
            sketch_fingerprint: 1,
            sketch_description: "test".into(),
            bands: 16,
            rule: cfg.rule,
            selector: cfg.selector.clone(),
        };
        let mut all: Vec<u64> = keys.iter().flatten().copied().collect();
        all.sort_unstable();
        let mut hot_keys: Vec<u64> = all
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        hot_keys.dedup();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, "").unwrap();
        let input = InputFile::detect(&path, std::path::Path::new("t.jsonl"), None).unwrap();
        let files = vec![neardup_keys::FileRows {
            input,
            records: 4,
            rows: 4,
            chunks: Vec::new(),
        }];
        let table = KeyTable::new(layout.clone(), 0, files, keys.concat()).unwrap();
        let hot = HotKeys::new(layout, 2, hot_keys).counted_from(vec![table.identity()]);
        let mask = HotMask::from_tables(&[&table], &hot).unwrap();
        assert!((0..4).all(|r| mask.is_hot_row(r)));
        Sketched {
            texts,
            sigs,
            keys,
            sets,
            hashes,
            mask,
        }
    }

    /// The one-process route: hot samples go to the decision core with the signature, keys
    /// and shingle set their workers made; a later copy is decided by its hash, or, when the
    /// hash finds nothing, sketched from its text in the block; a set that could not be built
    /// stops the pass.
    #[test]
    fn the_decision_core_decides_hot_samples_and_copies() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = cfg(EmptyPolicy::Keep);
        let Sketched {
            texts,
            sigs,
            keys,
            sets,
            hashes,
            mask,
        } = sketched(dir.path(), &cfg);
        let columns = cfg.rule.columns(16);

        let mut w = prepared(
            block_of(dir.path(), &texts),
            0,
            &[
                (0, 0, SampleKind::Cold),
                (1, 0, SampleKind::Cold),
                // Its hash names row 0: an exact copy by the hash alone.
                (
                    2,
                    0,
                    SampleKind::Copy {
                        content_hash: hashes[2],
                        row: 2,
                        text: (0, 0),
                    },
                ),
                // Stage 1 counted it a copy, but its hash names nothing: sketched from the block.
                (
                    3,
                    0,
                    SampleKind::Copy {
                        content_hash: 77,
                        row: 3,
                        text: (0, 0),
                    },
                ),
            ],
        );
        for (i, set) in sets.iter().enumerate().take(2) {
            let start = w.shingles.len() as u32;
            w.shingles.extend_from_slice(set);
            w.samples[i].kind = SampleKind::Hot {
                content_hash: hashes[i],
                slot: i as u32,
                material: Material::Block(start, w.shingles.len() as u32),
                row: i as u64,
            };
            w.signatures.extend_from_slice(&sigs[i]);
            w.rows.extend_from_slice(&keys[i]);
            w.hot.extend((0..columns).map(|c| mask.is_hot(i, c)));
        }
        let names = vec!["t.jsonl".to_string()];
        let addressing = Addressing {
            file_base: 0,
            row_base: 0,
            names: &names,
        };
        let mut seen = Vec::new();
        let mut observe = |d: &Decision| seen.push((d.reason, d.dup_of.map(|a| a.record)));
        let core = Deduper::new(cfg.deduper.clone(), 128, 16, cfg.rule).unwrap();
        let mut decider = Decider::new(core, &cfg, &mask, &addressing, None, &mut observe);
        let place = || BlockPlace {
            file: 0,
            record_base: 0,
        };
        decider.decide_block(&w, place()).unwrap();
        let stats = decider.route.deduper_stats().unwrap();
        assert!(
            stats.verifications > 0,
            "exact verification compared the sets"
        );
        let clusters = decider.cluster_stats().unwrap();
        assert_eq!(
            clusters.sizes,
            vec![crate::ClusterSize {
                size: 4,
                clusters: 1
            }]
        );
        drop(decider);
        assert_eq!(
            seen,
            vec![
                (Reason::Unique, None),
                (Reason::Near, Some(0)),
                (Reason::Exact, Some(0)),
                (Reason::Near, Some(0)),
            ]
        );

        // A shingle set a scratch file failed to hold.
        w.samples.truncate(1);
        w.samples[0].kind = SampleKind::Hot {
            content_hash: hashes[0],
            slot: 0,
            material: Material::Failed(0),
            row: 0,
        };
        w.set_errors.push(std::io::Error::other("disk full"));
        let core = Deduper::new(cfg.deduper.clone(), 128, 16, cfg.rule).unwrap();
        let mut observe = |_: &Decision| {};
        let mut decider = Decider::new(core, &cfg, &mask, &addressing, None, &mut observe);
        match decider.decide_block(&w, place()) {
            Err(DedupError::Spill(e)) => assert!(e.to_string().contains("disk full"), "{e}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// A `sign` step's route: each hot sample goes to the signer as its kind says (a text to
    /// sketch in decide, a signature, a later copy by its hash or with its text), numbered in
    /// all shards' rows; nothing is decided; a sample prepared for `write` is refused.
    #[test]
    fn the_signer_writes_each_hot_sample_as_prepared() {
        use crate::distributed::Signer;
        use crate::handoff::{SignedKind, SignedSample, SignedShape, decode_signed};
        use crate::step_sink::StepSink;

        let dir = tempfile::tempdir().unwrap();
        let cfg = cfg(EmptyPolicy::Keep);
        let sk = sketched(dir.path(), &cfg);
        let columns = cfg.rule.columns(16);
        let names = vec!["t.jsonl".to_string()];
        let addressing = Addressing {
            file_base: 0,
            row_base: 500,
            names: &names,
        };
        let place = || BlockPlace {
            file: 0,
            record_base: 0,
        };
        let signed = |shape: SignedShape, w: &PreparedBlock| {
            let signer =
                Signer::with_groups(&sk.mask, None, shape, vec![StepSink::memory()]).unwrap();
            let mut seen = Vec::new();
            let mut observe = |d: &Decision| seen.push(d.reason);
            let mut decider = Decider::new(signer, &cfg, &sk.mask, &addressing, None, &mut observe);
            let keep = decider.decide_block(w, place()).unwrap();
            assert_eq!(keep, vec![true; 4]);
            assert_eq!(decider.stats.unique, 4);
            let Decider { route, .. } = decider;
            let (sinks, counts) = route.finish().unwrap();
            assert_eq!(seen, vec![Reason::Unique; 4], "a sign step decides nothing");
            let bytes = sinks.into_iter().next().unwrap().finish().unwrap().unwrap();
            let mut r = RecordReader::new(bytes.as_slice()).unwrap();
            let mut got = Vec::new();
            let mut s = SignedSample::default();
            while r.next(|b| decode_signed(b, shape, &mut s)).unwrap() {
                got.push(s.clone());
            }
            (got, counts)
        };
        // Under exact verification: texts, and later copies by their hash when an earlier
        // sample of the shard had it.
        let shape = SignedShape {
            num_perm: 128,
            columns,
            texts: true,
            ranked: false,
        };
        let mut carried = String::new();
        let texts: Vec<(u32, u32)> = sk
            .texts
            .iter()
            .map(|t| {
                let start = carried.len() as u32;
                carried.push_str(t);
                (start, carried.len() as u32)
            })
            .collect();
        let (h, t) = (&sk.hashes, &texts);
        let mut w = prepared(
            block_of(dir.path(), &sk.texts),
            0,
            &[
                (
                    0,
                    0,
                    SampleKind::Text {
                        content_hash: h[0],
                        row: 0,
                        text: t[0],
                    },
                ),
                (
                    1,
                    0,
                    SampleKind::Text {
                        content_hash: h[1],
                        row: 1,
                        text: t[1],
                    },
                ),
                // Row 0 had its hash: sent as the hash alone.
                (
                    2,
                    0,
                    SampleKind::Copy {
                        content_hash: h[2],
                        row: 2,
                        text: t[2],
                    },
                ),
                // Stage 1 counted it a copy (content keys collide), but no earlier sample of
                // the shard had its hash: sent with its text.
                (
                    3,
                    0,
                    SampleKind::Copy {
                        content_hash: h[3],
                        row: 3,
                        text: t[3],
                    },
                ),
            ],
        );
        w.carried = carried;
        let (got, counts) = signed(shape, &w);
        assert_eq!(counts.samples, vec![4]);
        assert_eq!(counts.copies_by_hash, 1);
        let summary: Vec<_> = got
            .iter()
            .map(|s| {
                (
                    s.row,
                    s.addr.record,
                    s.kind,
                    s.text.as_str(),
                    s.content_hash,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (500, 0, SignedKind::Full, sk.texts[0].as_str(), sk.hashes[0]),
                (501, 1, SignedKind::Full, sk.texts[1].as_str(), sk.hashes[1]),
                (502, 2, SignedKind::Copy, "", sk.hashes[2]),
                (
                    503,
                    3,
                    SignedKind::CopyWithText,
                    sk.texts[3].as_str(),
                    sk.hashes[3]
                ),
            ]
        );
        let hot_of =
            |row: usize| -> Vec<bool> { (0..columns).map(|c| sk.mask.is_hot(row, c)).collect() };
        assert_eq!(got[1].hot, hot_of(1));
        assert_eq!(got[3].hot, hot_of(3));
        assert_eq!(got[0].id.as_deref(), Some("id-0.0"));

        // Under `--verify estimate`: the signature the workers made, and the hot columns.
        let shape = SignedShape {
            texts: false,
            ..shape
        };
        let mut w = prepared(
            block_of(dir.path(), &sk.texts),
            0,
            &[
                (0, 0, SampleKind::Cold),
                (1, 0, SampleKind::Cold),
                (2, 0, SampleKind::Cold),
                (3, 0, SampleKind::Cold),
            ],
        );
        for i in 0..4 {
            w.samples[i].kind = SampleKind::Hot {
                content_hash: sk.hashes[i],
                slot: i as u32,
                material: Material::Block(0, 0),
                row: i as u64,
            };
            w.signatures.extend_from_slice(&sk.sigs[i]);
            w.rows.extend_from_slice(&sk.keys[i]);
            w.hot.extend(hot_of(i));
        }
        let (got, counts) = signed(shape, &w);
        assert_eq!((counts.samples[0], counts.copies_by_hash), (4, 0));
        for (i, s) in got.iter().enumerate() {
            assert_eq!((s.row, s.kind), (500 + i as u64, SignedKind::Full));
            assert_eq!(s.signature, sk.sigs[i]);
            assert_eq!(s.hot, hot_of(i));
            assert!(s.text.is_empty());
        }

        // A sample a `write` step takes from decide.
        let signer = Signer::with_groups(&sk.mask, None, shape, vec![StepSink::memory()]).unwrap();
        let mut observe = |_: &Decision| {};
        let mut decider = Decider::new(signer, &cfg, &sk.mask, &addressing, None, &mut observe);
        let w = prepared(
            block_of(dir.path(), &sk.texts[..1]),
            0,
            &[(0, 0, SampleKind::Decided { row: 0 })],
        );
        assert!(matches!(
            decider.decide_block(&w, place()),
            Err(DedupError::Mismatch(Mismatch::Route { .. }))
        ));
    }
}
