//! `neardup eval`: measures the quality of a finished run from its decisions file, with exact
//! Jaccard similarities of shingle sets instead of MinHash estimates.
//!
//! This crate owns the measurement (reading a decisions file beside its inputs, the exact sets,
//! precision, recall, clusters and the [`EvalReport`]). It does not run deduplication, read
//! settings files or print: the facade (`neardup::eval`) and the CLI's `eval` command do that.
//!
//! Every sample's shingle set is built exactly as the run built it — the same [`Normalizer`] and
//! [`Shingler`] — except that each shingle is hashed with 64-bit xxh3 (so sets are exact up to
//! 64-bit collisions, whatever MinHash scheme the run used). A text too short to yield a single
//! shingle is represented by its whole normalised text as one element, so it matches only
//! identical short texts (the pipeline's default short-text rule). Sample addresses are
//! `(file index in discovery order, file-level record index, field slot)` and "earlier" means
//! earlier in that order, which is the order in which the run saw samples first. Only samples with
//! non-blank text take part (blank and unreadable records are neither near-duplicates nor
//! originals).
//!
//! Two measurements:
//!
//! - **Precision.** For every decision with `keep = false` that names a `dup_of` sample, the exact
//!   Jaccard of the dropped sample's set with the set of the sample it was declared a duplicate
//!   of. Decisions name the `dup_of` record but not its field: in expand mode (several samples per
//!   record) the dropped sample is compared with every other sample slot of that record and the
//!   best-matching one is taken. Reported: the share with Jaccard >= threshold, a decile
//!   histogram, the mean, the mean absolute error of the run's own similarity estimate, and the
//!   worst examples. Memory: the sets of `dup_of` samples that still have dropped samples waiting
//!   for them (a set is freed once every sample naming it has been checked).
//! - **Recall.** `recall_samples` samples are drawn uniformly without replacement (seed-fixed,
//!   bottom-k of a seeded hash of the address) from every decided sample with text. Each drawn
//!   sample `s` is compared exactly with every sample `t` that comes before it in the corpus. Two
//!   numbers come out of that, because the run's greedy first-seen rule drops `s` only when it is
//!   close to an earlier sample that was *kept*:
//!   - `recall`: among drawn samples that have some earlier `t` with Jaccard >= threshold, the
//!     share the run dropped (as `near` or `exact`). When the only close earlier samples were
//!     themselves dropped as copies of something `s` is not close to, greedy dedup correctly keeps
//!     `s`, so this number is an estimate that can understate the run's recall.
//!   - `strict_recall`: among drawn samples with an earlier sample *that the run kept* at
//!     Jaccard >= threshold, the share the run dropped. Exact greedy dedup drops every such
//!     sample, so each one kept is a definite miss.
//!   - `wrongly_dropped_share`: among drawn samples with no earlier sample at Jaccard >= threshold,
//!     the share the run dropped anyway.
//!
//!   Memory: the drawn samples' sets and an inverted index over them; the corpus is streamed once
//!   and each streamed set is compared with every drawn set by counting shared elements.
//!
//! Inputs are read in two passes: one that collects the drawn samples' sets (only as far into
//! each file as the last drawn record), and one over the whole corpus that does both measurements.

#![warn(missing_docs)]

use std::path::PathBuf;

use neardup_corpus::{
    DiscoverOptions, Format, InputFile, InputProblem, Projection, ReadOptions, Reason, SampleAddr,
    TextSelector, discover, read_decisions,
};
use neardup_sketch::normalize::NormalizeScratch;
use neardup_sketch::{Normalizer, Shingler};
use rayon::prelude::*;

mod clusters;
mod decisions;
mod precision;
mod recall;
mod report;
mod stream;

use clusters::*;
use decisions::*;
use precision::*;
use recall::*;
pub use report::*;
use stream::*;

/// Number of recall samples drawn when the user does not say.
pub const DEFAULT_RECALL_SAMPLES: usize = 200;

/// How many examples each list of the report holds.
const EXAMPLES: usize = 10;

/// Characters of text shown per example.
const SNIPPET_CHARS: usize = 160;

/// Seed of the hash that stands for a text too short to shingle; distinct from the shingle
/// hash's seed so such a text can never collide with a real shingle of another text.
const SHORT_TEXT_SEED: u64 = 0x5348_4f52_5454_5854;

/// Everything `neardup eval` needs: the decisions of a run, the same inputs and the same text
/// settings the run used.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// The run's decisions file (`.jsonl` or `.parquet`).
    pub decisions: PathBuf,
    /// The run's input arguments (files, directories, globs), in the same order: decisions name
    /// files by their displayed path, and record indexes are per file.
    pub inputs: Vec<String>,
    /// Force a format for inputs whose extension says nothing (as the run's `--format`).
    pub format: Option<Format>,
    /// The run's text fields, fields mode and id field.
    pub selector: TextSelector,
    /// The run's normaliser.
    pub normalizer: Normalizer,
    /// The run's shingler.
    pub shingler: Shingler,
    /// Jaccard similarity at or above which two samples count as near-duplicates.
    pub threshold: f64,
    /// How many samples the recall estimate draws (0 skips recall).
    pub recall_samples: usize,
    /// Seed of the recall draw.
    pub seed: u64,
    /// Worker threads for the comparisons (0 = one per core).
    pub threads: usize,
    /// How many of the largest duplicate clusters the report shows with their texts.
    pub clusters: usize,
}

/// Clusters shown when the user does not say.
pub const DEFAULT_CLUSTERS_SHOWN: usize = 3;

/// Runs both measurements. Errors when the options are invalid, no input file is found, or the
/// decisions file cannot be read; unreadable inputs become warnings in the report.
pub fn evaluate(opts: &EvalOptions) -> Result<EvalReport, EvalError> {
    validate(opts)?;
    let found = discover(
        &opts.inputs,
        &DiscoverOptions {
            format: opts.format,
        },
    );
    let errors: Vec<InputProblem> = found.errors().cloned().collect();
    if !errors.is_empty() {
        return Err(EvalError::Inputs(errors));
    }
    if found.files.is_empty() {
        return Err(EvalError::NoneFound(found.problems));
    }
    let mut warnings: Vec<String> = found
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.input, p.message))
        .collect();
    let files = found.files;
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    let rows = read_decisions(&opts.decisions).map_err(EvalError::Decisions)?;
    let decisions = Decisions::load(rows, &files, &names);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(EvalError::Threads)?;
    let ctx = Ctx {
        opts,
        files: &files,
        names: &names,
        read: ReadOptions::new(opts.selector.clone(), Projection::TextOnly),
    };

    pool.install(|| {
        let mut recall = Recall::draw(&ctx, &decisions, &mut warnings);
        let mut precision = Precision::new(&decisions);
        let mut tally = Tally { seen: vec![false; decisions.rows.len()], ..Tally::default() };
        let mut clusters = decisions.clusters.largest(opts.clusters);
        full_pass(&ctx, &decisions, &mut recall, &mut precision, &mut clusters, &mut tally, &mut warnings);

        let decisions_without_sample = decisions
            .rows
            .iter()
            .zip(&tally.seen)
            .filter(|(d, seen)| has_text(d.reason) && !**seen)
            .count() as u64;
        if decisions_without_sample > 0 {
            warnings.push(format!(
                "{decisions_without_sample} decided samples were not found with text in the inputs: are the inputs and \
                 text fields those of the run?"
            ));
        }
        if decisions.unmatched_file > 0 {
            warnings.push(format!(
                "{} decision rows name files that are not among the inputs",
                decisions.unmatched_file
            ));
        }
        Ok(EvalReport {
            decisions: opts.decisions.display().to_string(),
            files: files.len(),
            threshold: opts.threshold,
            shingler: opts.shingler.describe(),
            normalizer: opts.normalizer.clone(),
            decision_rows: decisions.total_rows,
            decisions_unmatched_file: decisions.unmatched_file,
            decisions_without_sample,
            samples: tally.samples,
            samples_without_decision: tally.undecided,
            warnings,
            precision: precision.finish(&ctx, &decisions),
            recall: recall.finish(&ctx),
            largest_clusters: clusters.into_iter().map(|c| c.finish(&ctx)).collect(),
        })
    })
}

fn validate(opts: &EvalOptions) -> Result<(), EvalError> {
    if !(0.0..=1.0).contains(&opts.threshold) {
        return Err(EvalError::Threshold(opts.threshold));
    }
    opts.shingler.validate().map_err(EvalError::Shingler)?;
    if opts.selector.fields.is_empty() {
        return Err(EvalError::NoFields);
    }
    if opts.inputs.is_empty() {
        return Err(EvalError::NoInputs);
    }
    Ok(())
}

/// Why [`evaluate`] could not run. Its message holds its causes', so `source()` never returns
/// one the message printed.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The threshold is outside [0, 1].
    #[error("--threshold must be within [0, 1], got {0}")]
    Threshold(f64),
    /// The shingler's settings cannot be used.
    #[error(transparent)]
    Shingler(neardup_sketch::SketchError),
    /// No text field is selected.
    #[error("at least one text field is needed")]
    NoFields,
    /// No input is given.
    #[error("no inputs given")]
    NoInputs,
    /// Input arguments that cannot be used as given, each with its problem.
    #[error("{}", InputProblem::listed(.0, "input ", "\ninput "))]
    Inputs(Vec<InputProblem>),
    /// No input file was found; the problems met while looking.
    #[error("no input file found{}", InputProblem::listed(.0, ": ", "; "))]
    NoneFound(Vec<InputProblem>),
    /// The decisions file cannot be read.
    #[error(transparent)]
    Decisions(neardup_corpus::ReadError),
    /// The worker threads could not be started.
    #[error("cannot start worker threads: {0}")]
    Threads(rayon::ThreadPoolBuildError),
}

/// Reasons given to samples that have text (the only ones eval compares).
fn has_text(reason: Reason) -> bool {
    matches!(reason, Reason::Unique | Reason::Near | Reason::Exact)
}

/// Dropped by the run as a near or exact duplicate.
fn dropped_as_dup(keep: bool, reason: Reason) -> bool {
    !keep && matches!(reason, Reason::Near | Reason::Exact)
}

/// The pieces every pass needs.
struct Ctx<'a> {
    opts: &'a EvalOptions,
    files: &'a [InputFile],
    names: &'a [String],
    read: ReadOptions,
}

impl Ctx<'_> {
    fn sample_ref(&self, addr: SampleAddr, id: Option<String>) -> SampleRef {
        SampleRef {
            file: self.names[addr.file as usize].clone(),
            record: addr.record,
            field: addr.field,
            id,
        }
    }
}

/// Counters of the full pass.
#[derive(Default)]
struct Tally {
    /// Per decision row: its sample was streamed with text.
    seen: Vec<bool>,
    samples: u64,
    undecided: u64,
}

/// The full pass: every sample's set is compared with the drawn recall samples and, when it is a
/// dropped sample or a `dup_of`, used for precision.
fn full_pass(
    ctx: &Ctx<'_>,
    decisions: &Decisions,
    recall: &mut Recall,
    precision: &mut Precision,
    clusters: &mut [PendingCluster],
    tally: &mut Tally,
    warnings: &mut Vec<String>,
) {
    let recall_on = !recall.items.is_empty();
    tracing::info!(
        files = ctx.files.len(),
        recall_samples = recall.items.len(),
        dropped = decisions.drops.len(),
        "eval: comparing every sample"
    );
    // Both closures below look at the clusters shown: which samples they want, and their texts.
    let clusters = std::cell::RefCell::new(clusters);
    for file in 0..ctx.files.len() {
        tracing::debug!(file = %ctx.names[file], "eval: comparing");
        let mut accept = |addr: SampleAddr, id: Option<&str>| {
            tally.samples += 1;
            let decision = decisions.find(addr);
            match decision {
                Some(d) => tally.seen[d] = true,
                None => tally.undecided += 1,
            }
            let drop = decisions.find_drop(addr);
            let target = decisions.targets.contains_key(&(addr.file, addr.record));
            let shown = clusters.borrow().iter().any(|c| c.wants(addr));
            (recall_on || drop.is_some() || target || shown).then(|| Streamed {
                decision,
                drop,
                ..streamed(addr, id)
            })
        };
        let mut visit = |first: u64, records: usize, batch: Vec<Streamed>| {
            let sets: Vec<(Option<Vec<u64>>, Hits)> = batch
                .par_iter()
                .map_init(
                    || {
                        (
                            NormalizeScratch::default(),
                            Counter::new(recall.items.len()),
                            Vec::new(),
                        )
                    },
                    |(scratch, counter, set), s| {
                        shingle_set(ctx.opts, &s.text, scratch, set);
                        let hits = if recall_on {
                            recall.compare(s.addr, set, counter)
                        } else {
                            Vec::new()
                        };
                        let for_precision = s.drop.is_some()
                            || decisions
                                .targets
                                .contains_key(&(s.addr.file, s.addr.record));
                        (for_precision.then(|| set.clone()), hits)
                    },
                )
                .collect();
            for (s, (set, hits)) in batch.into_iter().zip(sets) {
                for c in clusters.borrow_mut().iter_mut().filter(|c| c.wants(s.addr)) {
                    c.offer(s.addr, s.id.as_deref(), &s.text);
                }
                let kept = s.decision.is_some_and(|d| decisions.rows[d].keep);
                recall.record_hits(&s, kept, &hits);
                precision.add(decisions, s, set);
            }
            if records > 0 {
                precision.resolve_through(
                    ctx,
                    decisions,
                    (file as u32, first + records as u64 - 1),
                );
            }
            true
        };
        if let Err(e) = stream_file(ctx, file, &mut accept, &mut visit) {
            warnings.push(e);
        }
        precision.resolve_through(ctx, decisions, (file as u32, u64::MAX));
    }
    precision.resolve_through(ctx, decisions, (u32::MAX, u64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_sketch::jaccard_sorted;
    use std::hash::Hasher;
    use xxhash_rust::xxh3::xxh3_64;

    fn rng_sets(seed: u64, n: usize, universe: u64) -> Vec<u64> {
        let mut x = seed;
        let mut v: Vec<u64> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 33) % universe
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn item(addr: SampleAddr, set: Vec<u64>) -> RecallItem {
        RecallItem {
            addr,
            set,
            id: None,
            text: String::new(),
            keep: true,
            reason: Reason::Unique,
            closest: None,
            closest_kept: None,
        }
    }

    #[test]
    fn counting_through_the_index_equals_jaccard_sorted() {
        let addr = |record| SampleAddr {
            file: 0,
            record,
            field: 0,
        };
        let mut recall = Recall::default();
        for i in 0..30 {
            recall
                .items
                .push(item(addr(100 + i), rng_sets(i, 50 + 7 * i as usize, 400)));
        }
        recall.build_index();
        let mut counter = Counter::new(recall.items.len());
        for probe in 0..20u64 {
            let set = rng_sets(1000 + probe, 120, 400);
            // A probe placed among the drawn samples sees only the later ones.
            let at = addr(100 + probe);
            let hits = recall.compare(at, &set, &mut counter);
            let mut expected: Vec<(u32, f64)> = recall
                .items
                .iter()
                .enumerate()
                .filter(|(_, it)| it.addr > at)
                .map(|(i, it)| (i as u32, jaccard_sorted(&set, &it.set)))
                .filter(|&(_, j)| j > 0.0)
                .collect();
            let mut got = hits.clone();
            got.sort_by_key(|h| h.0);
            expected.sort_by_key(|h| h.0);
            assert_eq!(got, expected, "probe {probe}");
            assert!(counter.counts.iter().all(|&c| c == 0) && counter.touched.is_empty());
        }
    }

    #[test]
    fn closest_matches_keep_the_earliest_of_equals_and_track_kept_ones() {
        let mut recall = Recall::default();
        recall.items.push(item(
            SampleAddr {
                file: 1,
                record: 0,
                field: 0,
            },
            vec![1, 2, 3],
        ));
        let s = |record| Streamed {
            addr: SampleAddr {
                file: 0,
                record,
                field: 0,
            },
            text: format!("text {record}"),
            id: None,
            decision: None,
            drop: None,
        };
        recall.record_hits(&s(1), false, &[(0, 0.5)]);
        recall.record_hits(&s(2), true, &[(0, 0.5)]);
        recall.record_hits(&s(3), false, &[(0, 0.4)]);
        let it = &recall.items[0];
        assert_eq!(it.closest.as_ref().unwrap().addr.record, 1);
        assert_eq!(it.closest_kept.as_ref().unwrap().addr.record, 2);
    }

    #[test]
    fn shingle_sets_follow_the_normaliser_and_stand_in_for_short_texts() {
        let opts = EvalOptions {
            decisions: PathBuf::new(),
            inputs: Vec::new(),
            format: None,
            selector: TextSelector::single("text".parse().unwrap()),
            normalizer: Normalizer {
                lowercase: true,
                ..Normalizer::default()
            },
            shingler: Shingler::Chars { k: 3, step: 1 },
            threshold: 0.5,
            recall_samples: 0,
            seed: 0,
            threads: 1,
            clusters: 0,
        };
        let mut scratch = NormalizeScratch::default();
        let set = |t: &str, scratch: &mut NormalizeScratch| {
            let mut v = Vec::new();
            shingle_set(&opts, t, scratch, &mut v);
            v
        };
        let abcab = set("ABCAB", &mut scratch);
        let mut expected: Vec<u64> = ["abc", "bca", "cab"]
            .iter()
            .map(|s| xxh3_64(s.as_bytes()))
            .collect();
        expected.sort_unstable();
        assert_eq!(abcab, expected);
        assert_eq!(set("abcab", &mut scratch), abcab);
        let (ab, ab2, cd) = (
            set("AB", &mut scratch),
            set("ab", &mut scratch),
            set("cd", &mut scratch),
        );
        assert_eq!(ab.len(), 1);
        assert_eq!(ab, ab2);
        assert_eq!(jaccard_sorted(&ab, &cd), 0.0);
        assert_eq!(jaccard_sorted(&ab, &set("abx", &mut scratch)), 0.0);
    }

    #[test]
    fn wilson_interval_brackets_the_share() {
        assert_eq!(wilson(0, 0), None);
        let [lo, hi] = wilson(0, 10).unwrap();
        assert_eq!(lo, 0.0);
        assert!(hi > 0.2 && hi < 0.35, "{hi}");
        let [lo, hi] = wilson(10, 10).unwrap();
        assert!(
            lo > 0.65 && lo < 0.8 && (hi - 1.0).abs() < 1e-12,
            "{lo} {hi}"
        );
        // Symmetric around one half, and narrowing with more trials.
        let [a, b] = wilson(50, 100).unwrap();
        assert!((a + b - 1.0).abs() < 1e-12);
        let [c, d] = wilson(500, 1000).unwrap();
        assert!(d - c < b - a);
    }

    #[test]
    fn snippets_cut_at_character_boundaries() {
        let long = "é".repeat(SNIPPET_CHARS + 5);
        let s = snippet(&long);
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(snippet("short"), "short");
    }

    #[test]
    fn identity_hasher_passes_u64_keys_through_and_folds_bytes() {
        let mut h = IdentityHasher::default();
        h.write_u64(42);
        assert_eq!(h.finish(), 42);
        let mut a = IdentityHasher::default();
        a.write(b"ab");
        let mut b = IdentityHasher::default();
        b.write(b"ba");
        assert_ne!(a.finish(), b.finish());
    }
}
