//! Recall: drawn samples compared exactly with every earlier sample of the corpus.

use super::*;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use neardup_corpus::Reason;
use neardup_sketch::normalize::NormalizeScratch;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A hasher for keys that are already uniform 64-bit hashes.
#[derive(Default)]
pub(super) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; fold anything else so the hasher stays correct.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// `(drawn sample index, exact Jaccard)` of the drawn samples a streamed sample shares elements
/// with.
pub(super) type Hits = Vec<(u32, f64)>;

/// Per-thread intersection counters, one per drawn sample.
pub(super) struct Counter {
    pub(super) counts: Vec<u32>,
    pub(super) touched: Vec<u32>,
}

impl Counter {
    pub(super) fn new(n: usize) -> Counter {
        Counter {
            counts: vec![0; n],
            touched: Vec::new(),
        }
    }
}

/// A drawn recall sample.
pub(super) struct RecallItem {
    pub(super) addr: SampleAddr,
    pub(super) set: Vec<u64>,
    pub(super) id: Option<String>,
    pub(super) text: String,
    pub(super) keep: bool,
    pub(super) reason: Reason,
    pub(super) closest: Option<Closest>,
    pub(super) closest_kept: Option<Closest>,
}

#[derive(Clone)]
pub(super) struct Closest {
    pub(super) addr: SampleAddr,
    pub(super) jaccard: f64,
    pub(super) id: Option<String>,
    pub(super) text: String,
}

/// The recall measurement: drawn samples, an inverted index over their sets, and the closest
/// earlier samples found so far.
#[derive(Default)]
pub(super) struct Recall {
    pub(super) requested: usize,
    pub(super) population: u64,
    pub(super) not_found: u64,
    /// Sorted by address.
    pub(super) items: Vec<RecallItem>,
    /// Set element -> range of `postings`.
    pub(super) index: HashMap<u64, (u32, u32), BuildHasherDefault<IdentityHasher>>,
    /// Indexes of drawn samples, grouped by element.
    pub(super) postings: Vec<u32>,
    /// One bit per slot of the top bits of an element, set for the drawn elements: most streamed
    /// elements are in no drawn set, and this small bitmap turns them away before the much larger
    /// index is touched.
    pub(super) filter: Vec<u64>,
    /// Bits of an element that select a filter bit.
    pub(super) filter_bits: u32,
}

impl Recall {
    /// Draws the samples (bottom-k of a seeded hash of the address, which is a uniform draw
    /// without replacement that does not depend on the order of the decisions) and reads their
    /// sets.
    pub(super) fn draw(ctx: &Ctx<'_>, decisions: &Decisions, warnings: &mut Vec<String>) -> Recall {
        let seed = ctx.opts.seed;
        let rank = |a: &SampleAddr| {
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&a.file.to_le_bytes());
            key[4..12].copy_from_slice(&a.record.to_le_bytes());
            key[12..].copy_from_slice(&a.field.to_le_bytes());
            (xxh3_64_with_seed(&key, seed), *a)
        };
        let mut population: Vec<SampleAddr> = decisions
            .rows
            .iter()
            .filter(|d| has_text(d.reason))
            .map(|d| d.addr)
            .collect();
        let mut recall = Recall {
            requested: ctx.opts.recall_samples,
            population: population.len() as u64,
            ..Recall::default()
        };
        let n = ctx.opts.recall_samples.min(population.len());
        if n == 0 {
            return recall;
        }
        tracing::info!(
            samples = n,
            population = population.len(),
            "eval: reading the recall draw"
        );
        if n < population.len() {
            population.select_nth_unstable_by_key(n - 1, rank);
            population.truncate(n);
        }
        population.sort_unstable();
        let drawn = population;

        let mut found: Vec<RecallItem> = Vec::with_capacity(n);
        let mut from = 0;
        while from < drawn.len() {
            let file = drawn[from].file;
            let to = from + drawn[from..].iter().take_while(|a| a.file == file).count();
            let wanted = &drawn[from..to];
            let last = wanted[wanted.len() - 1].record;
            let mut accept = |addr: SampleAddr, id: Option<&str>| {
                wanted
                    .binary_search(&addr)
                    .is_ok()
                    .then(|| streamed(addr, id))
            };
            let mut visit = |first: u64, records: usize, batch: Vec<Streamed>| {
                let sets: Vec<Vec<u64>> = batch
                    .par_iter()
                    .map_init(NormalizeScratch::default, |scratch, s| {
                        let mut set = Vec::new();
                        shingle_set(ctx.opts, &s.text, scratch, &mut set);
                        set
                    })
                    .collect();
                for (s, set) in batch.into_iter().zip(sets) {
                    let d = decisions.find(s.addr).map(|i| decisions.rows[i]);
                    let (keep, reason) = d.map_or((true, Reason::Unique), |d| (d.keep, d.reason));
                    found.push(RecallItem {
                        addr: s.addr,
                        set,
                        id: s.id,
                        text: snippet(&s.text),
                        keep,
                        reason,
                        closest: None,
                        closest_kept: None,
                    });
                }
                first + (records as u64) <= last
            };
            tracing::debug!(file = %ctx.names[file as usize], samples = wanted.len(), "eval: reading recall samples");
            if let Err(e) = stream_file(ctx, file as usize, &mut accept, &mut visit) {
                warnings.push(e);
            }
            from = to;
        }
        recall.not_found = (drawn.len() - found.len()) as u64;
        recall.items = found;
        recall.build_index();
        recall
    }

    pub(super) fn build_index(&mut self) {
        let mut pairs: Vec<(u64, u32)> =
            Vec::with_capacity(self.items.iter().map(|i| i.set.len()).sum());
        for (i, item) in self.items.iter().enumerate() {
            pairs.extend(item.set.iter().map(|&e| (e, i as u32)));
        }
        pairs.sort_unstable();
        self.postings = pairs.iter().map(|p| p.1).collect();
        // About 16 bits per element keeps false positives near 6% (elements are uniform hashes).
        self.filter_bits = (pairs.len().max(1) * 16)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(12, 27);
        self.filter = vec![0; 1 << (self.filter_bits - 6)];
        for &(e, _) in &pairs {
            let slot = self.filter_slot(e);
            self.filter[slot >> 6] |= 1 << (slot & 63);
        }
        let mut start = 0;
        while start < pairs.len() {
            let e = pairs[start].0;
            let len = pairs[start..].iter().take_while(|p| p.0 == e).count();
            self.index.insert(e, (start as u32, len as u32));
            start += len;
        }
    }

    /// Exact Jaccard of `set` (the sample at `addr`) with every drawn sample that comes after it
    /// and shares at least one element. Counting shared elements through the inverted index gives
    /// the same intersection, hence the same value, as [`jaccard_sorted`].
    pub(super) fn compare(&self, addr: SampleAddr, set: &[u64], counter: &mut Counter) -> Hits {
        for &e in set {
            let slot = self.filter_slot(e);
            if self.filter[slot >> 6] & (1 << (slot & 63)) == 0 {
                continue;
            }
            if let Some(&(start, len)) = self.index.get(&e) {
                for &i in &self.postings[start as usize..(start + len) as usize] {
                    let c = &mut counter.counts[i as usize];
                    if *c == 0 {
                        counter.touched.push(i);
                    }
                    *c += 1;
                }
            }
        }
        let mut hits = Vec::new();
        for i in counter.touched.drain(..) {
            let inter = std::mem::take(&mut counter.counts[i as usize]) as usize;
            let item = &self.items[i as usize];
            if item.addr > addr {
                let union = item.set.len() + set.len() - inter;
                hits.push((i, inter as f64 / union as f64));
            }
        }
        hits
    }

    pub(super) fn filter_slot(&self, e: u64) -> usize {
        (e >> (64 - self.filter_bits)) as usize
    }

    pub(super) fn record_hits(&mut self, s: &Streamed, kept: bool, hits: &[(u32, f64)]) {
        for &(i, jaccard) in hits {
            let item = &mut self.items[i as usize];
            // Streaming is in input order, so keeping only strictly better matches keeps the
            // earliest of equals.
            let better = |c: &Option<Closest>| c.as_ref().is_none_or(|c| jaccard > c.jaccard);
            let closest = || Closest {
                addr: s.addr,
                jaccard,
                id: s.id.clone(),
                text: snippet(&s.text),
            };
            if better(&item.closest) {
                item.closest = Some(closest());
            }
            if kept && better(&item.closest_kept) {
                item.closest_kept = Some(closest());
            }
        }
    }

    pub(super) fn finish(self, ctx: &Ctx<'_>) -> RecallReport {
        let t = ctx.opts.threshold;
        let near = |c: &Option<Closest>| c.as_ref().is_some_and(|c| c.jaccard >= t);
        let mut r = RecallReport {
            population: self.population,
            requested: self.requested,
            sampled: self.items.len() as u64,
            not_found: self.not_found,
            ..RecallReport::default()
        };
        let mut missed = Vec::new();
        let mut wrong = Vec::new();
        for item in &self.items {
            let dropped = dropped_as_dup(item.keep, item.reason);
            let has_near = near(&item.closest);
            let has_kept_near = near(&item.closest_kept);
            if has_near {
                r.with_earlier_near_copy += 1;
                r.dropped_with_earlier_near_copy += u64::from(dropped);
                if !dropped {
                    missed.push(item);
                }
            } else {
                r.without_earlier_near_copy += 1;
                r.wrongly_dropped += u64::from(dropped);
                if dropped {
                    wrong.push(item);
                }
            }
            if has_kept_near {
                r.with_earlier_kept_near_copy += 1;
                r.dropped_with_earlier_kept_near_copy += u64::from(dropped);
            }
        }
        r.recall = share(r.dropped_with_earlier_near_copy, r.with_earlier_near_copy);
        r.recall_ci95 = wilson(r.dropped_with_earlier_near_copy, r.with_earlier_near_copy);
        r.strict_recall = share(
            r.dropped_with_earlier_kept_near_copy,
            r.with_earlier_kept_near_copy,
        );
        r.strict_recall_ci95 = wilson(
            r.dropped_with_earlier_kept_near_copy,
            r.with_earlier_kept_near_copy,
        );
        r.wrongly_dropped_share = share(r.wrongly_dropped, r.without_earlier_near_copy);

        let j = |c: &Option<Closest>| c.as_ref().map_or(0.0, |c| c.jaccard);
        missed.sort_by(|a, b| {
            near(&b.closest_kept)
                .cmp(&near(&a.closest_kept))
                .then(j(&b.closest).total_cmp(&j(&a.closest)))
                .then(a.addr.cmp(&b.addr))
        });
        wrong.sort_by(|a, b| {
            j(&a.closest)
                .total_cmp(&j(&b.closest))
                .then(a.addr.cmp(&b.addr))
        });
        let example = |item: &RecallItem| RecallExample {
            sample: ctx.sample_ref(item.addr, item.id.clone()),
            keep: item.keep,
            reason: item.reason,
            closest_earlier: item.closest.as_ref().map(|c| earlier(ctx, c)),
            closest_earlier_kept: item.closest_kept.as_ref().map(|c| earlier(ctx, c)),
            text: item.text.clone(),
        };
        r.missed = missed.into_iter().take(EXAMPLES).map(example).collect();
        r.wrongly_dropped_examples = wrong.into_iter().take(EXAMPLES).map(example).collect();
        r
    }
}

pub(super) fn earlier(ctx: &Ctx<'_>, c: &Closest) -> EarlierMatch {
    EarlierMatch {
        sample: ctx.sample_ref(c.addr, c.id.clone()),
        jaccard: c.jaccard,
        text: c.text.clone(),
    }
}
