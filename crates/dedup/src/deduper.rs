//! The decision core: bounded representatives per hot bucket, first seen wins.

use hashbrown::HashSet;
use neardup_keys::RowRule;
use neardup_sketch::{NO_KEY, similarity};
use serde::{Deserialize, Serialize};

use crate::clusters::ClusterCounter;
use crate::error::SettingsError;
use crate::first_copies::{FirstCopies, FirstCopy};
use crate::large_set::{SetRef, SpilledSet};
use crate::prior::PriorState;
use crate::reps::{BucketIndex, RepBudget, RepId, RepStore};
use crate::sample_ids::{IdRef, IdStore};
use neardup_scratch::{Backing, MappedResidency, ScratchVec};

pub use neardup_corpus::SampleAddr;

/// How candidates are confirmed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// The estimated similarity (share of equal signature positions) decides: fastest, and no
    /// shingle sets are held, but with 128 permutations the estimate's standard error near 0.8 is
    /// about 0.035, so pairs just below the threshold are sometimes dropped.
    Estimate,
    /// The default. A candidate is confirmed only if the true Jaccard of the shingle sets reaches
    /// the threshold: nothing is ever dropped for a false positive of the estimate. Candidates are
    /// taken from three standard errors of the estimate below the threshold, so pairs whose
    /// estimate fell short by chance are still found. Named `exact` in settings and flags
    /// (`--verify exact`); in code, "exact" is reserved for identical texts
    /// (`neardup_corpus::Reason::Exact`).
    #[default]
    #[serde(rename = "exact")]
    Jaccard,
}

/// Settings of stage 2's decisions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeduperConfig {
    /// A sample whose similarity with an earlier kept sample reaches this is a duplicate.
    pub threshold: f64,
    /// At most this many representatives per hot bucket (unbounded when `None`).
    pub max_reps: Option<usize>,
    /// How candidates are confirmed.
    pub verify: Verify,
    /// Memory for representatives' shingle sets under [`Verify::Jaccard`] before they spill to disk.
    pub verify_memory: u64,
    /// Memory for the decision state (no bound when `None`): representatives' signatures and
    /// shingle sets, which spill to disk past it, and the bookkeeping every decision looks up
    /// (the bucket index, the places of records, first copies), which then lives in scratch
    /// files' mappings, goes first (the records keep what it leaves) and hands pages back past
    /// it. Sets are also bounded by `verify_memory`. Decisions do not depend on it: what spilled
    /// is read back when a comparison needs it.
    #[serde(default)]
    pub decision_memory: Option<u64>,
    /// Where signatures and sets past their budgets spill (the system's temporary directory when
    /// unset).
    #[serde(default)]
    pub spill_dir: Option<std::path::PathBuf>,
}

impl Default for DeduperConfig {
    fn default() -> Self {
        DeduperConfig {
            threshold: 0.8,
            max_reps: Some(64),
            verify: Verify::Jaccard,
            verify_memory: 1 << 30,
            decision_memory: None,
            spill_dir: None,
        }
    }
}

/// Why a sample was dropped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// No earlier kept sample is similar: kept.
    Unique,
    /// Same normalised text as an earlier sample.
    Exact {
        /// The earlier sample (the first with this text, which may itself be a near duplicate).
        of: SampleAddr,
        /// The kept sample its duplicate set resolves to: `of` when `of` was kept, else the
        /// sample `of` duplicates.
        cluster: SampleAddr,
    },
    /// Similar to an earlier kept sample.
    Near {
        /// The representative it matched.
        of: SampleAddr,
        /// The similarity that decided (estimated, or exact Jaccard under [`Verify::Jaccard`]).
        similarity: f64,
    },
}

impl Verdict {
    /// Whether the sample is kept.
    pub fn keep(&self) -> bool {
        matches!(self, Verdict::Unique)
    }

    /// The sample a duplicate duplicates and the similarity that decided (1.0 for an exact
    /// copy); `None` when kept.
    pub fn dup_of(&self) -> Option<(SampleAddr, f64)> {
        match *self {
            Verdict::Unique => None,
            Verdict::Exact { of, .. } => Some((of, 1.0)),
            Verdict::Near { of, similarity } => Some((of, similarity)),
        }
    }

    /// The kept sample the duplicate set of a sample at `addr` with this verdict resolves to,
    /// whatever chain of duplicates led there: `addr` itself when it is kept.
    pub fn cluster(&self, addr: SampleAddr) -> SampleAddr {
        match *self {
            Verdict::Unique => addr,
            Verdict::Exact { cluster, .. } => cluster,
            // Only kept samples are representatives.
            Verdict::Near { of, .. } => of,
        }
    }
}

/// Counters of the decision core.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeduperStats {
    /// Hot samples checked.
    pub checked: u64,
    /// Signature comparisons made.
    pub comparisons: u64,
    /// Exact-verification Jaccard computations made.
    pub verifications: u64,
    /// Candidates whose estimate passed but whose exact Jaccard did not.
    pub rejected_by_verification: u64,
    /// Near duplicates found.
    pub near: u64,
    /// Exact duplicates found.
    pub exact: u64,
    /// Representatives held.
    pub representatives: u64,
    /// Hot buckets holding at least one representative.
    pub buckets: u64,
    /// Bytes held per representative (signature + address).
    pub bytes_per_representative: u64,
    /// Bytes of the bucket index.
    pub bucket_index_bytes: u64,
    /// Bytes of representatives' shingle sets (exact verification), and of the texts held for
    /// representatives whose sets were not needed yet (a distributed decide step).
    pub shingle_set_bytes: u64,
    /// Bytes the representatives hold in memory: signatures and sets that did not spill, and
    /// every representative's address and record places.
    #[serde(default)]
    pub representative_memory_bytes: u64,
    /// Times the bookkeeping's pages were handed back to stay within a memory limit.
    #[serde(default)]
    pub bookkeeping_releases: u64,
    /// Bytes of representatives' signatures and sets spilled to disk past their budgets.
    #[serde(default)]
    pub spilled_bytes: u64,
}

/// An earlier sample a queried one duplicates ([`Deduper::query`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The earlier sample.
    pub addr: SampleAddr,
    /// Its id, when it was noted ([`Deduper::note`]) or seeded.
    pub id: Option<String>,
    /// The similarity (1.0 for the same text; exact Jaccard under [`Verify::Jaccard`]).
    pub similarity: f64,
}

/// One sample to decide: its address, signature and row of keys, and which columns are hot.
pub struct Candidate<'a> {
    /// The sample.
    pub addr: SampleAddr,
    /// Its MinHash signature.
    pub signature: &'a [u32],
    /// Its row of keys ([`RowRule`] layout).
    pub row: &'a [u64],
    /// Hot bit per column of `row`.
    pub hot: &'a [bool],
    /// 128-bit content hash of its normalised text.
    pub content_hash: u128,
    /// Its shingle set ([`Sketcher::shingle_set`]), when exact verification is on.
    pub shingles: Option<&'a [u32]>,
}

/// Decides hot samples in input order against bounded representative sets.
///
/// Deterministic: the verdict depends only on the sequence of candidates given.
pub struct Deduper {
    config: DeduperConfig,
    bands: usize,
    exact_column: Option<usize>,
    reps: RepStore,
    buckets: BucketIndex,
    /// First sample seen per full content hash, among samples whose content key is hot. Keyed by
    /// all 128 bits, so two texts whose 64-bit content keys collide each find their own copies,
    /// and whether a later copy is decided by its hash alone never depends on which of the
    /// colliding texts came first (a distributed decide step relies on that). With it, the kept
    /// sample its cluster resolves to (itself, or what it was found to duplicate).
    exact_seen: FirstCopies,
    /// The ids of the samples later decisions may name, for callers that report ids
    /// ([`Deduper::note`]): the first copies hold theirs, the representatives theirs in
    /// `rep_ids`.
    ids: IdStore,
    /// The id of each representative (by [`RepId`]) whose id was noted; [`IdRef::NONE`] for
    /// the others.
    rep_ids: ScratchVec<IdRef>,
    /// What the last decision did that [`Deduper::note`] needs.
    last: LastDecision,
    /// The sizes of the clusters decided, for callers that report them ([`Deduper::note`]).
    clusters: ClusterCounter,
    seen_reps: HashSet<RepId>,
    /// The representatives of the bucket being compared.
    bucket_reps: Vec<RepId>,
    /// Estimates below this are not candidates. The threshold itself when the estimate decides;
    /// under exact verification, three standard errors of the estimate lower, so that pairs
    /// whose estimate fell short by chance still get their exact check.
    candidate_floor: f64,
    /// Under a memory limit, what the bookkeeping (bucket index, places, first copies, ids,
    /// clusters) holds in memory: at most `decision_memory`, past which its pages are handed back.
    residency: Option<MappedResidency>,
    /// Decisions since the bookkeeping's memory was last measured.
    since_measured: u32,
    stats: DeduperStats,
}

/// What a decision did that [`Deduper::note`] needs afterwards: the sample it made a
/// representative or a first copy (whose id is to be kept), and the sample it named.
#[derive(Clone, Copy, Debug, Default)]
struct LastDecision {
    /// The representative the sample became.
    new_rep: Option<RepId>,
    /// Whether the sample became the first copy of its text.
    new_first_copy: bool,
    named: Named,
}

/// The sample a decision named as the original, as [`Deduper::note`] finds its id.
#[derive(Clone, Copy, Debug, Default)]
enum Named {
    #[default]
    Nothing,
    /// A representative.
    Rep(RepId),
    /// A first copy, whose id is this.
    Copy(IdRef),
}

/// Decisions between two measurements of the bookkeeping's memory once it could pass its cap:
/// one decision touches at most a few dozen pages of it, so it passes the cap by at most a few
/// megabytes.
const MEASURE_EVERY: u32 = 16;

/// A bookkeeping mapping past its cap hands back one of this many parts at a time, keeping
/// between three quarters of the cap and all of it in memory.
const RELEASE_PARTS: usize = 4;

/// How many representatives ahead of the one being compared the next signature is loaded.
const PREFETCH_AHEAD: usize = 2;

impl Deduper {
    /// A decision core for signatures of `num_perm` positions and rows of `bands` bands under `rule`.
    pub fn new(
        config: DeduperConfig,
        num_perm: usize,
        bands: usize,
        rule: RowRule,
    ) -> Result<Deduper, SettingsError> {
        if !(0.0..=1.0).contains(&config.threshold) || config.threshold.is_nan() {
            return Err(SettingsError::Threshold(config.threshold));
        }
        if config.max_reps == Some(0) {
            return Err(SettingsError::NoRepresentatives);
        }
        // Under a limit, the bookkeeping lives in scratch mappings and may hold all of the
        // decision state's memory: every decision looks it up, while records are read only for
        // comparisons, so the records keep what it leaves.
        let backing = match config.decision_memory {
            Some(_) => Backing::Scratch {
                dir: config.spill_dir.clone(),
            },
            None => Backing::Heap,
        };
        let grow_budget = config.decision_memory.unwrap_or(u64::MAX);
        let budget = RepBudget {
            records: config.decision_memory,
            sets: (config.verify == Verify::Jaccard).then_some(config.verify_memory),
        };
        let bands = rule.band_columns(bands);
        let t = config.threshold;
        let candidate_floor = match config.verify {
            Verify::Estimate => t,
            Verify::Jaccard => (t - 3.0 * (t * (1.0 - t) / num_perm.max(1) as f64).sqrt()).max(0.0),
        };
        Ok(Deduper {
            candidate_floor,
            bands,
            exact_column: rule.exact_key.then_some(bands),
            reps: RepStore::new(num_perm, budget, config.spill_dir.clone(), &backing),
            buckets: BucketIndex::new(backing.clone(), grow_budget),
            exact_seen: FirstCopies::new(backing.clone(), grow_budget),
            ids: IdStore::new(&backing),
            rep_ids: ScratchVec::new(&backing),
            last: LastDecision::default(),
            clusters: ClusterCounter::new(backing, grow_budget),
            residency: config.decision_memory.map(|_| MappedResidency::new()),
            since_measured: 0,
            seen_reps: HashSet::new(),
            bucket_reps: Vec::new(),
            stats: DeduperStats::default(),
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &DeduperConfig {
        &self.config
    }

    /// The estimated similarity ([`similarity()`]) below which a
    /// representative is no candidate: never compared further, it can change no decision.
    pub fn candidate_floor(&self) -> f64 {
        self.candidate_floor
    }

    /// Whether candidates need their shingle sets ([`Verify::Jaccard`]).
    pub fn needs_shingles(&self) -> bool {
        self.reps.keeps_sets()
    }

    /// Decides a sample that stage 1 marked as a later exact copy (its content key is hot and was
    /// seen in an earlier row) without its signature. `None` when no earlier hot sample has the
    /// same full 128-bit hash (the content keys collided): then decide it with
    /// [`Deduper::decide`].
    pub fn decide_copy(&mut self, content_hash: u128) -> Option<Verdict> {
        self.bound_bookkeeping();
        self.last = LastDecision::default();
        let first = self.exact_seen.get(content_hash)?;
        self.last.named = Named::Copy(first.id);
        self.stats.checked += 1;
        self.stats.exact += 1;
        Some(Verdict::Exact {
            of: first.addr,
            cluster: first.cluster,
        })
    }

    /// Whether an earlier hot sample had this full content hash (so that a later sample with it
    /// may be decided by the hash alone, [`Deduper::decide_known_copy`]).
    pub fn knows_content(&self, content_hash: u128) -> bool {
        self.exact_seen.contains(content_hash)
    }

    /// Notes the decision just made for the sample at `addr` (with `content_hash` and `id`), for
    /// a caller that reports decisions: the size of the cluster it joins
    /// ([`Deduper::cluster_counts`]), and its id when a later decision may name it as the
    /// original (it became a representative, or the first copy of its text). Returns the id of
    /// the sample `verdict` names, when that sample's id was noted (or came with
    /// [`Deduper::seed`]). Call after each decision, before the next.
    pub fn note(
        &mut self,
        addr: SampleAddr,
        verdict: &Verdict,
        content_hash: u128,
        id: Option<&str>,
    ) -> Option<String> {
        let last = std::mem::take(&mut self.last);
        if let Some(id) = id
            && (last.new_rep.is_some() || last.new_first_copy)
        {
            let at = self.ids.push(id);
            if let Some(rep) = last.new_rep {
                self.set_rep_id(rep, at);
            }
            if last.new_first_copy
                && let Some(first) = self.exact_seen.get_mut(content_hash)
            {
                first.id = at;
            }
        }
        if matches!(verdict, Verdict::Unique) {
            return None;
        }
        self.clusters.add_drop(verdict.cluster(addr));
        let named = match last.named {
            Named::Nothing => IdRef::NONE,
            Named::Rep(rep) => self
                .rep_ids
                .get(rep as usize)
                .copied()
                .unwrap_or(IdRef::NONE),
            Named::Copy(at) => at,
        };
        self.ids.get(named).map(str::to_string)
    }

    /// Keeps `at` as the id of representative `rep`.
    fn set_rep_id(&mut self, rep: RepId, at: IdRef) {
        let rep = rep as usize;
        while self.rep_ids.len() <= rep {
            self.rep_ids.push(IdRef::NONE);
        }
        self.rep_ids[rep] = at;
    }

    /// The clusters' sizes counted by [`Deduper::note`].
    pub fn cluster_counts(&self) -> &ClusterCounter {
        &self.clusters
    }

    /// The clusters' sizes counted by [`Deduper::note`], when the decider is done.
    pub fn into_cluster_counts(self) -> ClusterCounter {
        self.clusters
    }

    /// [`Deduper::decide`]'s verdict for a sample whose hot columns are `hot`, when its content
    /// hash alone gives it (its content key is hot and an earlier sample had the same content):
    /// then it needs no signature. `None` otherwise.
    pub fn decide_known_copy(&mut self, content_hash: u128, hot: &[bool]) -> Option<Verdict> {
        let col = self.exact_column?;
        if !hot.get(col).copied().unwrap_or(false) {
            return None;
        }
        self.decide_copy(content_hash)
    }

    /// Decides one hot sample. Call in input order.
    pub fn decide(&mut self, c: &Candidate<'_>) -> Verdict {
        let verdict = self.decide_sample(c, c.shingles.map(SetRef::Memory));
        self.bound_bookkeeping();
        verdict
    }

    /// [`Deduper::decide`] for a candidate whose shingle set was built in a scratch file
    /// ([`crate::large_set`]: a text too long for its set to be held in memory); `c.shingles` is
    /// not read. The same verdict as with the set in memory.
    pub(crate) fn decide_spilled(&mut self, c: &Candidate<'_>, set: &SpilledSet) -> Verdict {
        let verdict = self.decide_sample(c, Some(SetRef::Spilled(set)));
        self.bound_bookkeeping();
        verdict
    }

    fn decide_sample(&mut self, c: &Candidate<'_>, set: Option<SetRef<'_>>) -> Verdict {
        self.stats.checked += 1;
        self.last = LastDecision::default();
        if let Some(col) = self.exact_column
            && c.hot[col]
            && c.row[col] != NO_KEY
        {
            let first = FirstCopy {
                addr: c.addr,
                cluster: c.addr,
                id: IdRef::NONE,
            };
            match self.exact_seen.get_or_insert(c.content_hash, first) {
                Some(first) => {
                    self.stats.exact += 1;
                    self.last.named = Named::Copy(first.id);
                    return Verdict::Exact {
                        of: first.addr,
                        cluster: first.cluster,
                    };
                }
                None => self.last.new_first_copy = true,
            }
        }

        self.seen_reps.clear();
        for band in 0..self.bands {
            if c.hot[band] && c.row[band] != NO_KEY {
                self.buckets.prefetch(c.row[band]);
            }
        }
        for band in 0..self.bands {
            let key = c.row[band];
            if !c.hot[band] || key == NO_KEY {
                continue;
            }
            // A bucket's representatives are taken first, so that each one's signature can be
            // loaded while the ones before it are compared: they lie anywhere in the arena, and
            // comparing waited mostly for memory. Where each signature is must be loaded before
            // the signature can be.
            self.bucket_reps.clear();
            self.bucket_reps.extend(self.buckets.reps(key));
            for &first in self.bucket_reps.iter().take(2 * PREFETCH_AHEAD) {
                self.reps.prefetch_place(first);
            }
            for &first in self.bucket_reps.iter().take(PREFETCH_AHEAD) {
                self.reps.prefetch_signature(first);
            }
            for (k, &rep) in self.bucket_reps.iter().enumerate() {
                if let Some(&further) = self.bucket_reps.get(k + 2 * PREFETCH_AHEAD) {
                    self.reps.prefetch_place(further);
                }
                if let Some(&ahead) = self.bucket_reps.get(k + PREFETCH_AHEAD) {
                    self.reps.prefetch_signature(ahead);
                }
                if !self.seen_reps.insert(rep) {
                    continue;
                }
                self.stats.comparisons += 1;
                // A signature lost to a disk error is no candidate (the error fails the run).
                let Some(theirs) = self.reps.signature(rep) else {
                    continue;
                };
                let sim = similarity(c.signature, theirs);
                if sim < self.candidate_floor {
                    continue;
                }
                let decided = match set.filter(|_| self.reps.keeps_sets()) {
                    Some(mine) => {
                        self.stats.verifications += 1;
                        let exact = self.reps.jaccard_at_least(rep, mine, self.config.threshold);
                        if exact.is_none() {
                            self.stats.rejected_by_verification += 1;
                        }
                        exact
                    }
                    _ => (sim >= self.config.threshold).then_some(sim),
                };
                if let Some(similarity) = decided {
                    // An address lost to a disk error names nothing (the error fails the run).
                    let Some(of) = self.reps.addr(rep) else {
                        continue;
                    };
                    self.stats.near += 1;
                    if self.last.new_first_copy
                        && let Some(first) = self.exact_seen.get_mut(c.content_hash)
                    {
                        // Its later exact copies resolve to what it duplicates.
                        first.cluster = of;
                    }
                    self.last.named = Named::Rep(rep);
                    return Verdict::Near { of, similarity };
                }
            }
        }

        // Kept: it represents each of its hot buckets that still has room. What the rest of the
        // state holds is taken before its first bucket entry, as the store places its records.
        self.last.new_rep = self.join_buckets(c, set);
        Verdict::Unique
    }

    /// The earlier samples `c` duplicates, changing nothing: the first sample with its text
    /// (similarity 1.0), then each representative of its hot buckets whose similarity reaches the
    /// threshold (confirmed as [`Deduper::decide`] confirms a candidate), each once, in the order
    /// `decide` compares them. Only what `decide` looks at is found: representatives (at most
    /// `max_reps` per bucket) and first copies, never a sample that was dropped as a near
    /// duplicate unless it is the first with its text.
    pub fn query(&mut self, c: &Candidate<'_>) -> Vec<Match> {
        let mut out = Vec::new();
        let mut first_addr = None;
        if let Some(col) = self.exact_column
            && c.hot[col]
            && c.row[col] != NO_KEY
            && let Some(first) = self.exact_seen.get(c.content_hash)
        {
            first_addr = Some(first.addr);
            out.push(Match {
                addr: first.addr,
                id: self.ids.get(first.id).map(str::to_string),
                similarity: 1.0,
            });
        }
        self.seen_reps.clear();
        for band in 0..self.bands {
            let key = c.row[band];
            if !c.hot[band] || key == NO_KEY {
                continue;
            }
            self.bucket_reps.clear();
            self.bucket_reps.extend(self.buckets.reps(key));
            for k in 0..self.bucket_reps.len() {
                let rep = self.bucket_reps[k];
                if !self.seen_reps.insert(rep) {
                    continue;
                }
                let Some(theirs) = self.reps.signature(rep) else {
                    continue;
                };
                let sim = similarity(c.signature, theirs);
                if sim < self.candidate_floor {
                    continue;
                }
                let decided = match c.shingles.filter(|_| self.reps.keeps_sets()) {
                    Some(mine) => {
                        self.reps
                            .jaccard_at_least(rep, SetRef::Memory(mine), self.config.threshold)
                    }
                    _ => (sim >= self.config.threshold).then_some(sim),
                };
                let (Some(similarity), Some(addr)) = (decided, self.reps.addr(rep)) else {
                    continue;
                };
                if Some(addr) == first_addr {
                    continue;
                }
                let id = self
                    .rep_ids
                    .get(rep as usize)
                    .and_then(|at| self.ids.get(*at))
                    .map(str::to_string);
                out.push(Match {
                    addr,
                    id,
                    similarity,
                });
            }
        }
        out
    }

    /// Adds `c` as if it had been kept, without deciding it: it becomes the first sample with
    /// its text (unless an earlier one has it) and a representative of each of its hot buckets
    /// with room. Call [`Deduper::note`] after it, with [`Verdict::Unique`], to keep its id.
    pub fn insert(&mut self, c: &Candidate<'_>) {
        self.last = LastDecision::default();
        if let Some(col) = self.exact_column
            && c.hot[col]
            && c.row[col] != NO_KEY
        {
            let first = FirstCopy {
                addr: c.addr,
                cluster: c.addr,
                id: IdRef::NONE,
            };
            self.last.new_first_copy = self
                .exact_seen
                .get_or_insert(c.content_hash, first)
                .is_none();
        }
        self.last.new_rep = self.join_buckets(c, c.shingles.map(SetRef::Memory));
        self.bound_bookkeeping();
    }

    /// Starts from the decision state earlier runs left (see [`PriorState`]): their
    /// representatives join their buckets in order while there is room, their first copies
    /// are known texts, and the ids of both may be named ([`Deduper::note`]). Call before any
    /// [`Deduper::decide`].
    pub fn seed(&mut self, prior: &PriorState) {
        for r in &prior.representatives {
            self.seed_representative(
                r.addr,
                r.id.as_deref(),
                &r.signature,
                r.shingles.as_deref(),
                &r.bands,
            );
        }
        for c in &prior.copies {
            self.seed_copy(c.content_hash, c.addr, c.cluster, c.id.as_deref());
        }
    }

    /// [`Deduper::seed`] for one earlier representative (a [`PriorRepresentative`]'s fields,
    /// borrowed): it joins its buckets `bands`, in order, while there is room.
    ///
    /// [`PriorRepresentative`]: crate::PriorRepresentative
    fn seed_representative(
        &mut self,
        addr: SampleAddr,
        id: Option<&str>,
        signature: &[u32],
        shingles: Option<&[u32]>,
        bands: &[u64],
    ) {
        self.seed_joining(id, bands, |reps, others| {
            reps.push(signature, shingles.map(SetRef::Memory), addr, others)
        });
    }

    /// [`Deduper::seed`] for one earlier representative, from a caller that holds it (the online
    /// index, which seeds a core from its cache of a Redis server's representatives for every
    /// batch it decides): it joins its buckets `bands`, in order, while there is room, and the
    /// core keeps a share of its shingle set, neither copied nor counted in its memory.
    pub fn seed_shared_representative(
        &mut self,
        addr: SampleAddr,
        id: Option<&str>,
        signature: &[u32],
        shingles: Option<&std::sync::Arc<[u32]>>,
        bands: &[u64],
    ) {
        self.seed_joining(id, bands, |reps, others| {
            reps.push_shared(signature, shingles, addr, others)
        });
    }

    /// A representative made by `push` (at its first bucket with room) joins its buckets
    /// `bands` while they have room.
    fn seed_joining(
        &mut self,
        id: Option<&str>,
        bands: &[u64],
        push: impl FnOnce(&mut RepStore, u64) -> RepId,
    ) {
        let others = self.others_bytes();
        let mut push = Some(push);
        let mut rep: Option<RepId> = None;
        for &key in bands.iter().take(self.bands) {
            if key == NO_KEY
                || self
                    .config
                    .max_reps
                    .is_some_and(|m| self.buckets.len(key) >= m)
            {
                continue;
            }
            let id = match rep {
                Some(id) => id,
                None => {
                    let push = push.take().expect("a representative is made once");
                    *rep.insert(push(&mut self.reps, others))
                }
            };
            self.buckets.push(key, id);
        }
        if let (Some(rep), Some(id)) = (rep, id) {
            let at = self.ids.push(id);
            self.set_rep_id(rep, at);
        }
        self.bound_bookkeeping();
    }

    /// [`Deduper::seed`] for one earlier first copy (a [`PriorCopy`]'s fields): its text is
    /// known, its duplicates resolving to `cluster`.
    ///
    /// [`PriorCopy`]: crate::PriorCopy
    pub fn seed_copy(
        &mut self,
        content_hash: u128,
        addr: SampleAddr,
        cluster: SampleAddr,
        id: Option<&str>,
    ) {
        let first = FirstCopy {
            addr,
            cluster,
            id: IdRef::NONE,
        };
        if self.exact_seen.get_or_insert(content_hash, first).is_none()
            && let Some(id) = id
        {
            let at = self.ids.push(id);
            if let Some(first) = self.exact_seen.get_mut(content_hash) {
                first.id = at;
            }
        }
        self.bound_bookkeeping();
    }

    /// Bytes of the decision state besides the representatives' store: the bucket index, the
    /// first copies, the ids and the clusters (all of them, in memory or mapped).
    /// `c` as the representative of each of its hot buckets with room (one representative,
    /// made at the first such bucket); `None` when no bucket had room.
    fn join_buckets(&mut self, c: &Candidate<'_>, set: Option<SetRef<'_>>) -> Option<RepId> {
        let others = self.others_bytes();
        let mut rep: Option<RepId> = None;
        for band in 0..self.bands {
            let key = c.row[band];
            if !c.hot[band]
                || key == NO_KEY
                || self
                    .config
                    .max_reps
                    .is_some_and(|m| self.buckets.len(key) >= m)
            {
                continue;
            }
            let id = *rep.get_or_insert_with(|| self.reps.push(c.signature, set, c.addr, others));
            self.buckets.push(key, id);
        }
        rep
    }

    fn others_bytes(&self) -> u64 {
        (self.buckets.memory_bytes()
            + self.exact_seen.memory_bytes()
            + self.ids.memory_bytes()
            + self.rep_ids.memory_bytes()
            + self.clusters.memory_bytes()) as u64
    }

    /// Under a memory limit, keeps what the bookkeeping holds in memory within its cap: every
    /// [`MEASURE_EVERY`] decisions, once all of it could pass the cap, measures its pages in
    /// memory ([`MappedResidency`]) and, when they pass it, hands back the next of
    /// [`RELEASE_PARTS`] parts of each mapping (their pages fault back in as lookups touch
    /// them). Decisions do not change: the values stay in the scratch files.
    fn bound_bookkeeping(&mut self) {
        let (Some(cap), Some(_)) = (self.config.decision_memory, &self.residency) else {
            return;
        };
        self.since_measured += 1;
        if self.since_measured < MEASURE_EVERY {
            return;
        }
        self.since_measured = 0;
        if self.others_bytes() + self.reps.place_bytes() <= cap {
            return;
        }
        let Some(residency) = &mut self.residency else {
            return;
        };
        if residency.held(u64::MAX) <= cap {
            residency.within_cap();
            return;
        }
        self.buckets.release_part(RELEASE_PARTS);
        self.exact_seen.release_part(RELEASE_PARTS);
        self.ids.release_part(RELEASE_PARTS);
        self.rep_ids.release_part(RELEASE_PARTS);
        self.clusters.release_part(RELEASE_PARTS);
        self.reps.release_places_part(RELEASE_PARTS);
        residency.released_part(RELEASE_PARTS);
        self.stats.bookkeeping_releases += 1;
    }

    /// The first I/O error of the representatives' spill files, if one happened since the last
    /// call. Decisions stay safe after one (a signature or set that cannot be read is compared
    /// with nothing and confirms nothing), but a run that hit one has lost representatives and
    /// must be reported as failed.
    pub fn take_io_error(&mut self) -> Option<std::io::Error> {
        self.reps.take_error()
    }

    /// Counters so far, with memory figures filled in.
    pub fn stats(&self) -> DeduperStats {
        let mut s = self.stats.clone();
        s.representatives = self.reps.len() as u64;
        s.buckets = self.buckets.buckets() as u64;
        s.bytes_per_representative = self.reps.bytes_per_rep() as u64;
        s.bucket_index_bytes = self.buckets.memory_bytes() as u64;
        s.shingle_set_bytes = self.reps.set_bytes();
        s.representative_memory_bytes = self.reps.memory_bytes();
        s.spilled_bytes = self.reps.spilled_bytes();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NUM_PERM: usize = 8;
    const BANDS: usize = 2;

    fn addr(record: u64) -> SampleAddr {
        SampleAddr {
            file: 0,
            record,
            field: 0,
        }
    }

    /// A hot sample: both bands and the content column hot.
    struct Sample {
        signature: [u32; NUM_PERM],
        row: [u64; BANDS + 1],
        content_hash: u128,
        shingles: Vec<u32>,
    }

    fn sample(signature: [u32; NUM_PERM], bands: [u64; BANDS], content_hash: u128) -> Sample {
        Sample {
            signature,
            row: [bands[0], bands[1], content_hash as u64 | 1],
            content_hash,
            shingles: Vec::new(),
        }
    }

    fn deduper(config: DeduperConfig) -> Deduper {
        Deduper::new(config, NUM_PERM, BANDS, RowRule::default()).unwrap()
    }

    fn decide(d: &mut Deduper, record: u64, s: &Sample) -> Verdict {
        d.decide(&Candidate {
            addr: addr(record),
            signature: &s.signature,
            row: &s.row,
            hot: &[true; BANDS + 1],
            content_hash: s.content_hash,
            shingles: d.needs_shingles().then_some(s.shingles.as_slice()),
        })
    }

    fn estimate() -> DeduperConfig {
        DeduperConfig {
            verify: Verify::Estimate,
            ..DeduperConfig::default()
        }
    }

    #[test]
    fn settings_it_cannot_decide_with_are_refused_by_value() {
        let refused = |config: DeduperConfig| {
            Deduper::new(config, NUM_PERM, BANDS, RowRule::default())
                .err()
                .expect("refused")
        };
        let e = refused(DeduperConfig {
            threshold: 1.5,
            ..DeduperConfig::default()
        });
        assert_eq!(e, SettingsError::Threshold(1.5));
        assert_eq!(e.to_string(), "threshold must be in [0, 1], got 1.5");
        let e = refused(DeduperConfig {
            max_reps: Some(0),
            ..DeduperConfig::default()
        });
        assert_eq!(e, SettingsError::NoRepresentatives);
        let stage2 = crate::DedupError::from(e);
        assert!(
            stage2
                .to_string()
                .starts_with("invalid settings: max_reps must be at least 1")
        );
        // The message holds the settings error, so it is not also the source (a chain-printing
        // reporter would show it twice).
        assert!(std::error::Error::source(&stage2).is_none());
    }

    #[test]
    fn an_exact_copy_names_the_first_sample_and_wins_over_a_near_match() {
        let mut d = deduper(estimate());
        let a = sample([1, 2, 3, 4, 5, 6, 7, 8], [10, 20], 0xA);
        // Same bands and signature as `a` but other text: a near duplicate of it.
        let b = sample([1, 2, 3, 4, 5, 6, 7, 8], [10, 20], 0xB);
        assert_eq!(decide(&mut d, 0, &a), Verdict::Unique);
        assert!(matches!(decide(&mut d, 1, &b), Verdict::Near { of, .. } if of == addr(0)));
        // A copy of b's text: exact, of b (the first with that text), not near a; its cluster
        // is a, the kept sample b duplicates.
        let copy_of_b = Verdict::Exact {
            of: addr(1),
            cluster: addr(0),
        };
        assert_eq!(decide(&mut d, 2, &b), copy_of_b);
        assert_eq!(copy_of_b.cluster(addr(2)), addr(0));
        assert_eq!(d.decide_copy(0xB), Some(copy_of_b));
        assert_eq!(d.decide_copy(0xC), None);
        let s = d.stats();
        assert_eq!((s.checked, s.exact, s.near), (4, 2, 1));
    }

    #[test]
    fn texts_whose_64_bit_content_keys_collide_each_find_their_own_copies() {
        let mut d = deduper(estimate());
        // Same low 64 bits (the content key), different 128-bit hashes, dissimilar signatures.
        let h1 = (1u128 << 64) | 0x55;
        let h2 = (2u128 << 64) | 0x55;
        let a = sample([1; NUM_PERM], [10, 20], h1);
        let b = sample([2; NUM_PERM], [30, 40], h2);
        assert_eq!(a.row[BANDS], b.row[BANDS]);
        assert_eq!(decide(&mut d, 0, &a), Verdict::Unique);
        assert_eq!(decide(&mut d, 1, &b), Verdict::Unique);
        let copy_of = |n| Verdict::Exact {
            of: addr(n),
            cluster: addr(n),
        };
        assert_eq!(decide(&mut d, 2, &b), copy_of(1));
        assert_eq!(d.decide_copy(h1), Some(copy_of(0)));
        assert_eq!(d.decide_copy(h2), Some(copy_of(1)));
    }

    #[test]
    fn a_full_bucket_takes_no_more_representatives() {
        // Three dissimilar samples in one bucket (band 0 key 10); the bucket holds two.
        let first = sample([1; NUM_PERM], [10, 11], 1);
        let second = sample([2; NUM_PERM], [10, 12], 2);
        let third = sample([3; NUM_PERM], [10, 13], 3);
        // Similar to the third only, sharing just the full bucket.
        let late = sample([3, 3, 3, 3, 3, 3, 3, 9], [10, 14], 4);
        for (max_reps, expect_late_near) in [(Some(2), false), (None, true)] {
            let mut d = deduper(DeduperConfig {
                max_reps,
                threshold: 0.8,
                ..estimate()
            });
            for (i, s) in [&first, &second, &third].into_iter().enumerate() {
                assert_eq!(decide(&mut d, i as u64, s), Verdict::Unique);
            }
            let v = decide(&mut d, 3, &late);
            assert_eq!(
                matches!(v, Verdict::Near { of, similarity } if of == addr(2) && similarity == 7.0 / 8.0),
                expect_late_near,
                "max_reps {max_reps:?}: {v:?}"
            );
        }
    }

    #[test]
    fn bookkeeping_past_a_tiny_limit_is_handed_back_and_decides_the_same() {
        // 30,000 samples in a few thousand buckets, some near copies, some exact copies, with
        // sets and ids: the bookkeeping (index, places, first copies, ids, clusters) far
        // outgrows a 64 KB budget.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || neardup_scratch::xorshift(&mut state);
        let samples: Vec<Sample> = (0..30_000u64)
            .map(|i| {
                let r = next();
                let base = (r % 9_000) as u32;
                let mut signature = [base; NUM_PERM];
                // Every third differs in one position from the others of its base.
                if i % 3 == 0 {
                    signature[NUM_PERM - 1] = r as u32;
                }
                let content = if i % 7 == 0 {
                    u128::from(base)
                } else {
                    u128::from(r) | 1 << 64
                };
                let mut s = sample(signature, [u64::from(base) + 1, r % 50_000 + 1], content);
                s.shingles = (base..base + 40).collect();
                s
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let run = |limit: Option<u64>| {
            let mut d = deduper(DeduperConfig {
                decision_memory: limit,
                spill_dir: Some(dir.path().to_path_buf()),
                ..DeduperConfig::default()
            });
            let verdicts: Vec<(Verdict, Option<String>)> = samples
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let v = decide(&mut d, i as u64, s);
                    let id = format!("sample-{i}");
                    let dup_of_id = d.note(addr(i as u64), &v, s.content_hash, Some(&id));
                    (v, dup_of_id)
                })
                .collect();
            assert!(d.take_io_error().is_none());
            // Every original a drop names was kept or was the first copy of its text, so its
            // id was noted.
            for (v, dup_of_id) in &verdicts {
                if let Verdict::Near { of, .. } | Verdict::Exact { of, .. } = v {
                    assert_eq!(
                        dup_of_id.as_deref(),
                        Some(&*format!("sample-{}", of.record))
                    );
                }
            }
            let clusters = d.cluster_counts().finish(&["f".to_string()]);
            (verdicts, clusters, d.stats())
        };
        let (free, free_clusters, free_stats) = run(None);
        let (bounded, bounded_clusters, bounded_stats) = run(Some(64 * 1024));
        assert_eq!(free_clusters, bounded_clusters);
        assert_eq!(
            free_clusters
                .sizes
                .iter()
                .map(|c| c.clusters * (c.size - 1))
                .sum::<u64>(),
            free_stats.near + free_stats.exact,
            "every drop counted in its cluster"
        );
        assert_eq!(free_stats.bookkeeping_releases, 0);
        assert!(
            free_stats.near > 1000 && free_stats.exact > 500,
            "{free_stats:?}"
        );
        assert!(
            bounded_stats.bookkeeping_releases > 10,
            "the bookkeeping outgrew its cap: {bounded_stats:?}"
        );
        assert!(bounded_stats.spilled_bytes > 0);
        assert!(free == bounded, "the same decisions within the limit");
        assert_eq!(
            (free_stats.comparisons, free_stats.verifications),
            (bounded_stats.comparisons, bounded_stats.verifications)
        );
    }

    #[test]
    fn exact_verification_rejects_a_candidate_whose_sets_are_not_similar() {
        let mut d = deduper(DeduperConfig::default());
        assert!(d.needs_shingles());
        let mut a = sample([1; NUM_PERM], [10, 20], 1);
        a.shingles = (0..100).collect();
        // Identical signature (estimate 1.0), but only half the shingles in common.
        let mut b = sample([1; NUM_PERM], [10, 20], 2);
        b.shingles = (50..150).collect();
        let mut c = sample([1; NUM_PERM], [10, 20], 3);
        c.shingles = (5..100).collect();
        assert_eq!(decide(&mut d, 0, &a), Verdict::Unique);
        assert_eq!(decide(&mut d, 1, &b), Verdict::Unique);
        assert_eq!(
            decide(&mut d, 2, &c),
            Verdict::Near {
                of: addr(0),
                similarity: 0.95
            }
        );
        let s = d.stats();
        // b against a only: c matched a, the first representative it was compared with.
        assert_eq!(
            (s.verifications, s.rejected_by_verification),
            (2, 1),
            "{s:?}"
        );
    }
}
