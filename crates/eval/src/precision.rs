//! Precision: every dropped sample compared exactly with the sample it was declared a
//! duplicate of.

use super::*;
use std::collections::{BTreeMap, HashMap};

use neardup_sketch::jaccard_sorted;

/// The set of one sample slot of a `dup_of` record.
pub(super) struct TargetSet {
    pub(super) field: u32,
    pub(super) set: Vec<u64>,
    pub(super) id: Option<String>,
    pub(super) text: String,
}

/// A `dup_of` record's sets, kept until every dropped sample naming it has been checked.
#[derive(Default)]
pub(super) struct TargetState {
    pub(super) sets: Vec<TargetSet>,
    pub(super) remaining: u32,
}

/// A dropped sample waiting for its `dup_of` record to be streamed.
pub(super) struct Pending {
    pub(super) drop: usize,
    pub(super) set: Vec<u64>,
    pub(super) id: Option<String>,
    pub(super) text: String,
}

/// The precision measurement.
pub(super) struct Precision {
    pub(super) targets: HashMap<(u32, u64), TargetState>,
    /// Keyed by the `dup_of` record.
    pub(super) pending: BTreeMap<(u32, u64), Vec<Pending>>,
    /// Per drop: exact Jaccard once evaluated.
    pub(super) results: Vec<Option<f64>>,
    /// Per drop: its sample was streamed.
    pub(super) seen: Vec<bool>,
    pub(super) worst: Vec<PrecisionExample>,
}

impl Precision {
    pub(super) fn new(decisions: &Decisions) -> Precision {
        let targets = decisions
            .targets
            .iter()
            .map(|(&k, &remaining)| {
                (
                    k,
                    TargetState {
                        sets: Vec::new(),
                        remaining,
                    },
                )
            })
            .collect();
        Precision {
            targets,
            pending: BTreeMap::new(),
            results: vec![None; decisions.drops.len()],
            seen: vec![false; decisions.drops.len()],
            worst: Vec::new(),
        }
    }

    /// Takes one streamed sample's set (in input order), if it is a dropped sample or a slot of a
    /// `dup_of` record.
    pub(super) fn add(&mut self, decisions: &Decisions, s: Streamed, set: Option<Vec<u64>>) {
        let Some(set) = set else { return };
        let key = (s.addr.file, s.addr.record);
        let text = snippet(&s.text);
        let Some(drop) = s.drop else {
            if let Some(t) = self.targets.get_mut(&key) {
                t.sets.push(TargetSet {
                    field: s.addr.field,
                    set,
                    id: s.id,
                    text,
                });
            }
            return;
        };
        self.seen[drop] = true;
        if let Some(t) = self.targets.get_mut(&key) {
            t.sets.push(TargetSet {
                field: s.addr.field,
                set: set.clone(),
                id: s.id.clone(),
                text: text.clone(),
            });
        }
        // A drop whose dup_of file is not among the inputs can never be checked: it stays
        // unevaluated and is counted as missing_dup_of.
        if let Some(target) = decisions.drops[drop].target {
            self.pending.entry(target).or_default().push(Pending {
                drop,
                set,
                id: s.id,
                text,
            });
        }
    }

    /// Checks every waiting dropped sample whose `dup_of` record is at or before `through`
    /// (such records are complete: the stream has passed them).
    pub(super) fn resolve_through(
        &mut self,
        ctx: &Ctx<'_>,
        decisions: &Decisions,
        through: (u32, u64),
    ) {
        let later = match through.1.checked_add(1) {
            Some(next) => self.pending.split_off(&(through.0, next)),
            None => match through.0.checked_add(1) {
                Some(next_file) => self.pending.split_off(&(next_file, 0)),
                None => BTreeMap::new(),
            },
        };
        let ready = std::mem::replace(&mut self.pending, later);
        for (key, waiting) in ready {
            for p in waiting {
                self.resolve(ctx, decisions, key, p);
            }
        }
    }

    pub(super) fn resolve(
        &mut self,
        ctx: &Ctx<'_>,
        decisions: &Decisions,
        key: (u32, u64),
        p: Pending,
    ) {
        let d = &decisions.drops[p.drop];
        let Some(state) = self.targets.get_mut(&key) else {
            return;
        };
        // The dropped sample itself may be a slot of its dup_of record (expand mode).
        let best = state
            .sets
            .iter()
            .filter(|t| (key.0, key.1, t.field) != (d.addr.file, d.addr.record, d.addr.field))
            .map(|t| (jaccard_sorted(&p.set, &t.set), t))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.field.cmp(&a.1.field)));
        if let Some((jaccard, t)) = best {
            self.results[p.drop] = Some(jaccard);
            let example = PrecisionExample {
                sample: ctx.sample_ref(d.addr, d.id.clone().or(p.id)),
                dup_of: SampleRef {
                    file: d.dup_of_file.clone(),
                    record: d.dup_of_record,
                    field: t.field,
                    id: d.dup_of_id.clone().or_else(|| t.id.clone()),
                },
                reason: d.reason,
                reported_similarity: d.similarity,
                jaccard,
                text: p.text,
                dup_of_text: t.text.clone(),
            };
            push_worst(&mut self.worst, example);
        }
        state.remaining -= 1;
        if state.remaining == 0 {
            self.targets.remove(&key);
        }
    }

    pub(super) fn finish(self, ctx: &Ctx<'_>, decisions: &Decisions) -> PrecisionReport {
        let t = ctx.opts.threshold;
        let mut r = PrecisionReport {
            dropped: decisions.drops.len() as u64,
            ..PrecisionReport::default()
        };
        let mut hist = [0u64; 10];
        let mut sum = 0.0;
        let (mut err_sum, mut err_n) = (0.0, 0u64);
        let mut by_reason: Vec<ReasonPrecision> = Vec::new();
        for ((d, result), seen) in decisions.drops.iter().zip(&self.results).zip(&self.seen) {
            let Some(j) = *result else {
                if *seen {
                    r.missing_dup_of += 1;
                } else {
                    r.missing_sample += 1;
                }
                continue;
            };
            r.evaluated += 1;
            let above = j >= t;
            r.at_or_above_threshold += u64::from(above);
            hist[((j * 10.0) as usize).min(9)] += 1;
            sum += j;
            if let Some(s) = d.similarity {
                err_sum += (s - j).abs();
                err_n += 1;
            }
            let entry = match by_reason.iter_mut().position(|e| e.reason == d.reason) {
                Some(i) => &mut by_reason[i],
                None => {
                    by_reason.push(ReasonPrecision {
                        reason: d.reason,
                        evaluated: 0,
                        at_or_above_threshold: 0,
                    });
                    by_reason.last_mut().expect("just pushed")
                }
            };
            entry.evaluated += 1;
            entry.at_or_above_threshold += u64::from(above);
        }
        r.precision = share(r.at_or_above_threshold, r.evaluated);
        r.precision_ci95 = wilson(r.at_or_above_threshold, r.evaluated);
        r.mean_jaccard = (r.evaluated > 0).then(|| sum / r.evaluated as f64);
        r.similarity_mean_abs_error = (err_n > 0).then(|| err_sum / err_n as f64);
        r.histogram = hist
            .iter()
            .enumerate()
            .map(|(i, &count)| HistogramBin {
                lo: i as f64 / 10.0,
                hi: (i + 1) as f64 / 10.0,
                count,
            })
            .collect();
        by_reason.sort_by_key(|e| e.reason.as_str());
        r.by_reason = by_reason;
        let mut worst = self.worst;
        sort_worst(&mut worst);
        worst.truncate(EXAMPLES);
        r.worst = worst;
        r
    }
}

pub(super) fn sort_worst(v: &mut [PrecisionExample]) {
    v.sort_by(|a, b| {
        a.jaccard.total_cmp(&b.jaccard).then_with(|| {
            (&a.sample.file, a.sample.record, a.sample.field).cmp(&(
                &b.sample.file,
                b.sample.record,
                b.sample.field,
            ))
        })
    });
}

/// Keeps the lowest-Jaccard examples without holding one per evaluated pair.
pub(super) fn push_worst(worst: &mut Vec<PrecisionExample>, e: PrecisionExample) {
    worst.push(e);
    if worst.len() >= 4 * EXAMPLES {
        sort_worst(worst);
        worst.truncate(EXAMPLES);
    }
}
