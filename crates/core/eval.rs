//! `neardup eval`: measures the quality of a finished run from its decisions file, with exact
//! Jaccard similarities of shingle sets instead of MinHash estimates.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};

use neardup_corpus::{
    Chunk, ChunkRange, DiscoverOptions, Format, InputFile, OwnedDecisionRow, Projection,
    ReadOptions, Reason, SampleText, TextSelector, discover, read_chunk, read_decisions,
};
use neardup_sketch::normalize::NormalizeScratch;
use neardup_sketch::{Normalizer, Shingler, is_blank, jaccard_sorted};
use rayon::prelude::*;
use serde::Serialize;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

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
}

/// The outcome of [`evaluate`]: serialisable (the `--report` JSON), with [`EvalReport::summary`]
/// for humans.
#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// The decisions file evaluated.
    pub decisions: String,
    /// Input files read.
    pub files: usize,
    /// Similarity threshold the measurements use.
    pub threshold: f64,
    /// The shingler, as [`Shingler::describe`] gives it.
    pub shingler: String,
    /// The normaliser.
    pub normalizer: Normalizer,
    /// Rows in the decisions file.
    pub decision_rows: u64,
    /// Decision rows naming a file that is not among the inputs (wrong `--inputs`?).
    pub decisions_unmatched_file: u64,
    /// Decision rows of samples with text (unique / near / exact) whose sample was not found with
    /// non-blank text in the inputs (wrong inputs or text fields?).
    pub decisions_without_sample: u64,
    /// Samples with non-blank text read from the inputs.
    pub samples: u64,
    /// Of those, samples that have no decision row.
    pub samples_without_decision: u64,
    /// Input problems and read errors (the evaluation continues without the unreadable part).
    pub warnings: Vec<String>,
    /// The precision measurement.
    pub precision: PrecisionReport,
    /// The recall measurement.
    pub recall: RecallReport,
}

/// Exact Jaccard of every dropped sample with the sample it was declared a duplicate of.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrecisionReport {
    /// Decisions of samples in the input files with `keep = false` that name a `dup_of` sample.
    pub dropped: u64,
    /// Of those, pairs whose two sets were both found and compared.
    pub evaluated: u64,
    /// Dropped samples not found with text in the inputs.
    pub missing_sample: u64,
    /// Dropped samples whose `dup_of` was not found with text in the inputs (or whose file is not
    /// among them).
    pub missing_dup_of: u64,
    /// Evaluated pairs with exact Jaccard >= threshold.
    pub at_or_above_threshold: u64,
    /// `at_or_above_threshold / evaluated`.
    pub precision: Option<f64>,
    /// 95% Wilson score interval of the precision.
    pub precision_ci95: Option<[f64; 2]>,
    /// Mean exact Jaccard of the evaluated pairs.
    pub mean_jaccard: Option<f64>,
    /// Mean |similarity in the decision - exact Jaccard| over evaluated pairs that carry one.
    pub similarity_mean_abs_error: Option<f64>,
    /// Pairs per exact-Jaccard decile: `[0, 0.1)`, ..., `[0.9, 1.0]`.
    pub histogram: Vec<HistogramBin>,
    /// Evaluated pairs per decision reason.
    pub by_reason: Vec<ReasonPrecision>,
    /// The evaluated pairs with the lowest exact Jaccard, lowest first.
    pub worst: Vec<PrecisionExample>,
}

/// One histogram bin.
#[derive(Clone, Debug, Serialize)]
pub struct HistogramBin {
    /// Lower bound (inclusive).
    pub lo: f64,
    /// Upper bound (exclusive, except for the last bin).
    pub hi: f64,
    /// Pairs in the bin.
    pub count: u64,
}

/// Precision of the pairs dropped for one reason.
#[derive(Clone, Debug, Serialize)]
pub struct ReasonPrecision {
    /// The decision reason (`near` or `exact`, or another reason if a file marks such rows dropped
    /// with a `dup_of`).
    pub reason: Reason,
    /// Pairs evaluated.
    pub evaluated: u64,
    /// Pairs with exact Jaccard >= threshold.
    pub at_or_above_threshold: u64,
}

/// Where a sample is: the decisions' file name, file-level record index, field slot, and id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SampleRef {
    /// The file as the decisions name it.
    pub file: String,
    /// File-level record index.
    pub record: u64,
    /// Field slot (0 in join mode).
    pub field: u32,
    /// The record's id, when an id field is configured.
    pub id: Option<String>,
}

/// A dropped sample and the sample it was declared a duplicate of.
#[derive(Clone, Debug, Serialize)]
pub struct PrecisionExample {
    /// The dropped sample.
    pub sample: SampleRef,
    /// Its `dup_of` (in expand mode, the best-matching field of the `dup_of` record).
    pub dup_of: SampleRef,
    /// The decision's reason.
    pub reason: Reason,
    /// The similarity the decision reported.
    pub reported_similarity: Option<f64>,
    /// Exact Jaccard.
    pub jaccard: f64,
    /// The start of the dropped sample's text.
    pub text: String,
    /// The start of the `dup_of` sample's text.
    pub dup_of_text: String,
}

/// Recall estimated on a seed-fixed random draw of samples, by exact comparison with every earlier
/// sample of the corpus. See the module documentation for what each share means exactly.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecallReport {
    /// Samples the draw was made from (decided samples with text in the input files).
    pub population: u64,
    /// Samples asked for.
    pub requested: usize,
    /// Samples drawn and found in the inputs.
    pub sampled: u64,
    /// Drawn samples not found with text in the inputs (left out of every share).
    pub not_found: u64,
    /// Drawn samples with an earlier sample at Jaccard >= threshold.
    pub with_earlier_near_copy: u64,
    /// Of those, the ones the run dropped as near or exact duplicates.
    pub dropped_with_earlier_near_copy: u64,
    /// `dropped_with_earlier_near_copy / with_earlier_near_copy`.
    pub recall: Option<f64>,
    /// 95% Wilson score interval of `recall`.
    pub recall_ci95: Option<[f64; 2]>,
    /// Drawn samples with an earlier sample *kept by the run* at Jaccard >= threshold.
    pub with_earlier_kept_near_copy: u64,
    /// Of those, the ones the run dropped.
    pub dropped_with_earlier_kept_near_copy: u64,
    /// `dropped_with_earlier_kept_near_copy / with_earlier_kept_near_copy`.
    pub strict_recall: Option<f64>,
    /// 95% Wilson score interval of `strict_recall`.
    pub strict_recall_ci95: Option<[f64; 2]>,
    /// Drawn samples with no earlier sample at Jaccard >= threshold.
    pub without_earlier_near_copy: u64,
    /// Of those, the ones the run dropped anyway.
    pub wrongly_dropped: u64,
    /// `wrongly_dropped / without_earlier_near_copy`.
    pub wrongly_dropped_share: Option<f64>,
    /// Drawn samples the run kept although an earlier sample is at Jaccard >= threshold, most
    /// similar first (those whose close earlier sample was kept come first).
    pub missed: Vec<RecallExample>,
    /// Drawn samples the run dropped although no earlier sample is at Jaccard >= threshold.
    pub wrongly_dropped_examples: Vec<RecallExample>,
}

/// One drawn sample and its closest earlier samples.
#[derive(Clone, Debug, Serialize)]
pub struct RecallExample {
    /// The drawn sample.
    pub sample: SampleRef,
    /// Whether the run kept it.
    pub keep: bool,
    /// The run's reason.
    pub reason: Reason,
    /// The most similar earlier sample (first in input order among equals).
    pub closest_earlier: Option<EarlierMatch>,
    /// The most similar earlier sample that the run kept.
    pub closest_earlier_kept: Option<EarlierMatch>,
    /// The start of the drawn sample's text.
    pub text: String,
}

/// An earlier sample and its exact Jaccard with a drawn sample.
#[derive(Clone, Debug, Serialize)]
pub struct EarlierMatch {
    /// The earlier sample.
    pub sample: SampleRef,
    /// Exact Jaccard.
    pub jaccard: f64,
    /// The start of its text.
    pub text: String,
}

/// Runs both measurements. Errors when the options are invalid, no input file is found, or the
/// decisions file cannot be read; unreadable inputs become warnings in the report.
pub fn evaluate(opts: &EvalOptions) -> Result<EvalReport, String> {
    validate(opts)?;
    let found = discover(
        &opts.inputs,
        &DiscoverOptions {
            format: opts.format,
        },
    );
    let errors: Vec<String> = found
        .errors()
        .map(|p| format!("input {}: {}", p.input, p.message))
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    let mut warnings: Vec<String> = found
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.input, p.message))
        .collect();
    if found.files.is_empty() {
        return Err(format!("no input file found{}", problems_suffix(&warnings)));
    }
    let files = found.files;
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    let rows = read_decisions(&opts.decisions).map_err(|e| e.to_string())?;
    let decisions = Decisions::load(rows, &files, &names);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| format!("cannot start worker threads: {e}"))?;
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
        full_pass(&ctx, &decisions, &mut recall, &mut precision, &mut tally, &mut warnings);

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
        })
    })
}

impl EvalReport {
    /// A short human-readable account of the report.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let p = &self.precision;
        let r = &self.recall;
        let _ = writeln!(
            s,
            "eval of {} ({} decisions, {} samples in {} files) at Jaccard >= {} with {} shingles",
            self.decisions,
            self.decision_rows,
            self.samples,
            self.files,
            self.threshold,
            self.shingler
        );
        let _ = writeln!(
            s,
            "precision: {} ({} of {} dropped samples at or above the threshold{}); mean Jaccard {}",
            pct(p.precision),
            p.at_or_above_threshold,
            p.evaluated,
            ci(p.precision_ci95),
            num(p.mean_jaccard)
        );
        if p.missing_sample + p.missing_dup_of > 0 {
            let _ = writeln!(
                s,
                "  not evaluated: {} dropped samples and {} dup_of samples not found in the inputs",
                p.missing_sample, p.missing_dup_of
            );
        }
        if let Some(e) = p.similarity_mean_abs_error {
            let _ = writeln!(
                s,
                "  reported similarity vs exact Jaccard: mean absolute error {e:.4}"
            );
        }
        if p.evaluated > 0 {
            let bins: Vec<String> = p
                .histogram
                .iter()
                .map(|b| format!("{:.1}:{}", b.lo, b.count))
                .collect();
            let _ = writeln!(s, "  Jaccard deciles {}", bins.join(" "));
        }
        for ex in p
            .worst
            .iter()
            .take(3)
            .filter(|e| e.jaccard < self.threshold)
        {
            let _ = writeln!(
                s,
                "  below threshold: {} dup_of {} Jaccard {:.3} (reported {})",
                addr_text(&ex.sample),
                addr_text(&ex.dup_of),
                ex.jaccard,
                num(ex.reported_similarity)
            );
        }
        if r.requested == 0 {
            let _ = writeln!(s, "recall: not measured");
        } else {
            let _ = writeln!(
                s,
                "recall: {} ({} of {} drawn samples with an earlier near copy were dropped{}); drawn {} of {}",
                pct(r.recall),
                r.dropped_with_earlier_near_copy,
                r.with_earlier_near_copy,
                ci(r.recall_ci95),
                r.sampled,
                r.population
            );
            let _ = writeln!(
                s,
                "  strict recall: {} ({} of {} with an earlier kept near copy{})",
                pct(r.strict_recall),
                r.dropped_with_earlier_kept_near_copy,
                r.with_earlier_kept_near_copy,
                ci(r.strict_recall_ci95)
            );
            let _ = writeln!(
                s,
                "  wrongly dropped: {} ({} of {} drawn samples without an earlier near copy)",
                pct(r.wrongly_dropped_share),
                r.wrongly_dropped,
                r.without_earlier_near_copy
            );
            for ex in r.missed.iter().take(3) {
                if let Some(m) = &ex.closest_earlier {
                    let _ = writeln!(
                        s,
                        "  missed: {} kept, but {} is at Jaccard {:.3}",
                        addr_text(&ex.sample),
                        addr_text(&m.sample),
                        m.jaccard
                    );
                }
            }
        }
        for w in self.warnings.iter().take(5) {
            let _ = writeln!(s, "warning: {w}");
        }
        if self.warnings.len() > 5 {
            let _ = writeln!(s, "warning: ... and {} more", self.warnings.len() - 5);
        }
        s
    }
}

fn validate(opts: &EvalOptions) -> Result<(), String> {
    if !(0.0..=1.0).contains(&opts.threshold) {
        return Err(format!(
            "--threshold must be within [0, 1], got {}",
            opts.threshold
        ));
    }
    opts.shingler.validate().map_err(|e| e.to_string())?;
    if opts.selector.fields.is_empty() {
        return Err("at least one text field is needed".into());
    }
    if opts.inputs.is_empty() {
        return Err("no inputs given".into());
    }
    Ok(())
}

fn problems_suffix(problems: &[String]) -> String {
    if problems.is_empty() {
        String::new()
    } else {
        format!(": {}", problems.join("; "))
    }
}

/// Reasons given to samples that have text (the only ones eval compares).
fn has_text(reason: Reason) -> bool {
    matches!(reason, Reason::Unique | Reason::Near | Reason::Exact)
}

/// Dropped by the run as a near or exact duplicate.
fn dropped_as_dup(keep: bool, reason: Reason) -> bool {
    !keep && matches!(reason, Reason::Near | Reason::Exact)
}

/// A sample's position in the corpus; the derived order is input order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Addr {
    file: u32,
    record: u64,
    field: u32,
}

/// The pieces every pass needs.
struct Ctx<'a> {
    opts: &'a EvalOptions,
    files: &'a [InputFile],
    names: &'a [String],
    read: ReadOptions,
}

impl Ctx<'_> {
    fn sample_ref(&self, addr: Addr, id: Option<String>) -> SampleRef {
        SampleRef {
            file: self.names[addr.file as usize].clone(),
            record: addr.record,
            field: addr.field,
            id,
        }
    }
}

/// One decided sample, compacted.
#[derive(Clone, Copy, Debug)]
struct Decided {
    addr: Addr,
    keep: bool,
    reason: Reason,
}

/// A dropped sample that names its `dup_of`.
#[derive(Clone, Debug)]
struct DropItem {
    addr: Addr,
    /// `(file, record)` of the `dup_of`, `None` when its file is not among the inputs.
    target: Option<(u32, u64)>,
    dup_of_file: String,
    dup_of_record: u64,
    reason: Reason,
    similarity: Option<f64>,
    id: Option<String>,
    dup_of_id: Option<String>,
}

/// The decisions file, indexed by address.
struct Decisions {
    /// Sorted by address, one row per address (a repeated address keeps its first row).
    rows: Vec<Decided>,
    /// Sorted by address.
    drops: Vec<DropItem>,
    /// Dropped samples per `dup_of` record.
    targets: HashMap<(u32, u64), u32>,
    total_rows: u64,
    unmatched_file: u64,
}

impl Decisions {
    fn load(rows: Vec<OwnedDecisionRow>, files: &[InputFile], names: &[String]) -> Decisions {
        let mut resolver = FileResolver::new(files, names);
        let total_rows = rows.len() as u64;
        let mut unmatched_file = 0;
        let mut decided = Vec::with_capacity(rows.len());
        let mut drops = Vec::new();
        for row in rows {
            let Some(file) = resolver.index(&row.file) else {
                unmatched_file += 1;
                continue;
            };
            let addr = Addr {
                file,
                record: row.record,
                field: row.field,
            };
            decided.push(Decided {
                addr,
                keep: row.keep,
                reason: row.reason,
            });
            if row.keep {
                continue;
            }
            if let (Some(dup_of_file), Some(dup_of_record)) = (row.dup_of_file, row.dup_of_record) {
                let target = resolver.index(&dup_of_file).map(|f| (f, dup_of_record));
                drops.push(DropItem {
                    addr,
                    target,
                    dup_of_file,
                    dup_of_record,
                    reason: row.reason,
                    similarity: row.similarity,
                    id: row.id,
                    dup_of_id: row.dup_of_id,
                });
            }
        }
        decided.sort_by_key(|d| d.addr);
        decided.dedup_by_key(|d| d.addr);
        drops.sort_by_key(|d| d.addr);
        drops.dedup_by_key(|d| d.addr);
        let mut targets = HashMap::new();
        for t in drops.iter().filter_map(|d| d.target) {
            *targets.entry(t).or_insert(0) += 1;
        }
        Decisions {
            rows: decided,
            drops,
            targets,
            total_rows,
            unmatched_file,
        }
    }

    fn find(&self, addr: Addr) -> Option<usize> {
        self.rows.binary_search_by_key(&addr, |d| d.addr).ok()
    }

    fn find_drop(&self, addr: Addr) -> Option<usize> {
        self.drops.binary_search_by_key(&addr, |d| d.addr).ok()
    }
}

/// Maps the file names written in decisions to input indexes: by displayed path first, then by
/// canonical path, so `./data/a.jsonl` in the decisions still finds `data/a.jsonl`.
struct FileResolver {
    by_name: HashMap<String, Option<u32>>,
    by_canonical: HashMap<PathBuf, u32>,
}

impl FileResolver {
    fn new(files: &[InputFile], names: &[String]) -> FileResolver {
        let mut by_name = HashMap::new();
        let mut by_canonical = HashMap::new();
        for (i, (f, n)) in files.iter().zip(names).enumerate() {
            by_name.entry(n.clone()).or_insert(Some(i as u32));
            if let Ok(c) = std::fs::canonicalize(&f.path) {
                by_canonical.entry(c).or_insert(i as u32);
            }
        }
        FileResolver {
            by_name,
            by_canonical,
        }
    }

    fn index(&mut self, name: &str) -> Option<u32> {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = std::fs::canonicalize(Path::new(name))
            .ok()
            .and_then(|c| self.by_canonical.get(&c).copied());
        self.by_name.insert(name.to_owned(), i);
        i
    }
}

/// A streamed sample whose text is needed.
struct Streamed {
    addr: Addr,
    text: String,
    id: Option<String>,
    /// Index into the decisions' rows.
    decision: Option<usize>,
    /// Index into the decisions' drops.
    drop: Option<usize>,
}

/// Streams one whole file block by block. `visit` gets each block's first record, its record
/// count, and the samples with non-blank text it accepted through `accept` (which sees every such
/// sample, in order); it returns false to stop reading. A read error ends the file: the blocks
/// before it stand and the error is returned.
fn stream_file(
    ctx: &Ctx<'_>,
    file: usize,
    accept: &mut dyn FnMut(Addr, Option<&str>) -> Option<Streamed>,
    visit: &mut dyn FnMut(u64, usize, Vec<Streamed>) -> bool,
) -> Result<(), String> {
    let chunk = Chunk {
        file,
        seq: 0,
        range: ChunkRange::Whole,
    };
    for block in read_chunk(&ctx.files[file], &chunk, &ctx.read) {
        let block = block.map_err(|e| e.to_string())?;
        let mut batch = Vec::new();
        block.for_each_sample(&ctx.read.selector, |s| {
            let SampleText::Text(text) = s.text else {
                return;
            };
            if is_blank(&text) {
                return;
            }
            let addr = Addr {
                file: file as u32,
                record: block.first_record + s.record as u64,
                field: s.field,
            };
            if let Some(mut item) = accept(addr, s.id.as_deref()) {
                item.text = text.into_owned();
                batch.push(item);
            }
        });
        if !visit(block.first_record, block.num_records(), batch) {
            break;
        }
    }
    Ok(())
}

fn streamed(addr: Addr, id: Option<&str>) -> Streamed {
    Streamed {
        addr,
        text: String::new(),
        id: id.map(str::to_owned),
        decision: None,
        drop: None,
    }
}

/// The exact shingle set of a text: xxh3 of every shingle of the normalised text, sorted and
/// deduplicated; a text without any shingle is one element standing for the whole text.
fn shingle_set(opts: &EvalOptions, text: &str, scratch: &mut NormalizeScratch, out: &mut Vec<u64>) {
    let normal = opts.normalizer.normalize_into(text, scratch);
    out.clear();
    opts.shingler.for_each(normal, |sh| out.push(xxh3_64(sh)));
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        out.push(xxh3_64_with_seed(normal.as_bytes(), SHORT_TEXT_SEED));
    }
}

fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
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
    for file in 0..ctx.files.len() {
        tracing::debug!(file = %ctx.names[file], "eval: comparing");
        let mut accept = |addr: Addr, id: Option<&str>| {
            tally.samples += 1;
            let decision = decisions.find(addr);
            match decision {
                Some(d) => tally.seen[d] = true,
                None => tally.undecided += 1,
            }
            let drop = decisions.find_drop(addr);
            let target = decisions.targets.contains_key(&(addr.file, addr.record));
            (recall_on || drop.is_some() || target).then(|| Streamed {
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

/// A hasher for keys that are already uniform 64-bit hashes.
#[derive(Default)]
struct IdentityHasher(u64);

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
type Hits = Vec<(u32, f64)>;

/// Per-thread intersection counters, one per drawn sample.
struct Counter {
    counts: Vec<u32>,
    touched: Vec<u32>,
}

impl Counter {
    fn new(n: usize) -> Counter {
        Counter {
            counts: vec![0; n],
            touched: Vec::new(),
        }
    }
}

/// A drawn recall sample.
struct RecallItem {
    addr: Addr,
    set: Vec<u64>,
    id: Option<String>,
    text: String,
    keep: bool,
    reason: Reason,
    closest: Option<Closest>,
    closest_kept: Option<Closest>,
}

#[derive(Clone)]
struct Closest {
    addr: Addr,
    jaccard: f64,
    id: Option<String>,
    text: String,
}

/// The recall measurement: drawn samples, an inverted index over their sets, and the closest
/// earlier samples found so far.
#[derive(Default)]
struct Recall {
    requested: usize,
    population: u64,
    not_found: u64,
    /// Sorted by address.
    items: Vec<RecallItem>,
    /// Set element -> range of `postings`.
    index: HashMap<u64, (u32, u32), BuildHasherDefault<IdentityHasher>>,
    /// Indexes of drawn samples, grouped by element.
    postings: Vec<u32>,
    /// One bit per slot of the top bits of an element, set for the drawn elements: most streamed
    /// elements are in no drawn set, and this small bitmap turns them away before the much larger
    /// index is touched.
    filter: Vec<u64>,
    /// Bits of an element that select a filter bit.
    filter_bits: u32,
}

impl Recall {
    /// Draws the samples (bottom-k of a seeded hash of the address, which is a uniform draw
    /// without replacement that does not depend on the order of the decisions) and reads their
    /// sets.
    fn draw(ctx: &Ctx<'_>, decisions: &Decisions, warnings: &mut Vec<String>) -> Recall {
        let seed = ctx.opts.seed;
        let rank = |a: &Addr| {
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&a.file.to_le_bytes());
            key[4..12].copy_from_slice(&a.record.to_le_bytes());
            key[12..].copy_from_slice(&a.field.to_le_bytes());
            (xxh3_64_with_seed(&key, seed), *a)
        };
        let mut population: Vec<Addr> = decisions
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
            let mut accept = |addr: Addr, id: Option<&str>| {
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

    fn build_index(&mut self) {
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
    fn compare(&self, addr: Addr, set: &[u64], counter: &mut Counter) -> Hits {
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

    fn filter_slot(&self, e: u64) -> usize {
        (e >> (64 - self.filter_bits)) as usize
    }

    fn record_hits(&mut self, s: &Streamed, kept: bool, hits: &[(u32, f64)]) {
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

    fn finish(self, ctx: &Ctx<'_>) -> RecallReport {
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

fn earlier(ctx: &Ctx<'_>, c: &Closest) -> EarlierMatch {
    EarlierMatch {
        sample: ctx.sample_ref(c.addr, c.id.clone()),
        jaccard: c.jaccard,
        text: c.text.clone(),
    }
}

/// The set of one sample slot of a `dup_of` record.
struct TargetSet {
    field: u32,
    set: Vec<u64>,
    id: Option<String>,
    text: String,
}

/// A `dup_of` record's sets, kept until every dropped sample naming it has been checked.
#[derive(Default)]
struct TargetState {
    sets: Vec<TargetSet>,
    remaining: u32,
}

/// A dropped sample waiting for its `dup_of` record to be streamed.
struct Pending {
    drop: usize,
    set: Vec<u64>,
    id: Option<String>,
    text: String,
}

/// The precision measurement.
struct Precision {
    targets: HashMap<(u32, u64), TargetState>,
    /// Keyed by the `dup_of` record.
    pending: BTreeMap<(u32, u64), Vec<Pending>>,
    /// Per drop: exact Jaccard once evaluated.
    results: Vec<Option<f64>>,
    /// Per drop: its sample was streamed.
    seen: Vec<bool>,
    worst: Vec<PrecisionExample>,
}

impl Precision {
    fn new(decisions: &Decisions) -> Precision {
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
    fn add(&mut self, decisions: &Decisions, s: Streamed, set: Option<Vec<u64>>) {
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
    fn resolve_through(&mut self, ctx: &Ctx<'_>, decisions: &Decisions, through: (u32, u64)) {
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

    fn resolve(&mut self, ctx: &Ctx<'_>, decisions: &Decisions, key: (u32, u64), p: Pending) {
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

    fn finish(self, ctx: &Ctx<'_>, decisions: &Decisions) -> PrecisionReport {
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

fn sort_worst(v: &mut [PrecisionExample]) {
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
fn push_worst(worst: &mut Vec<PrecisionExample>, e: PrecisionExample) {
    worst.push(e);
    if worst.len() >= 4 * EXAMPLES {
        sort_worst(worst);
        worst.truncate(EXAMPLES);
    }
}

fn share(k: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| k as f64 / n as f64)
}

/// 95% Wilson score interval for `k` successes out of `n`: unlike the normal approximation it
/// stays within [0, 1] and is sensible at the small counts a 200-sample draw gives.
fn wilson(k: u64, n: u64) -> Option<[f64; 2]> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let n = n as f64;
    let p = k as f64 / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    Some([(center - half).max(0.0), (center + half).min(1.0)])
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.2}%", v * 100.0))
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"))
}

fn ci(v: Option<[f64; 2]>) -> String {
    v.map_or_else(String::new, |[lo, hi]| {
        format!(", 95% CI {:.1}-{:.1}%", lo * 100.0, hi * 100.0)
    })
}

fn addr_text(r: &SampleRef) -> String {
    let mut s = format!("{}:{}", r.file, r.record);
    if r.field != 0 {
        let _ = write!(s, "#{}", r.field);
    }
    if let Some(id) = &r.id {
        let _ = write!(s, " (id {id})");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn item(addr: Addr, set: Vec<u64>) -> RecallItem {
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
        let addr = |record| Addr {
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
            Addr {
                file: 1,
                record: 0,
                field: 0,
            },
            vec![1, 2, 3],
        ));
        let s = |record| Streamed {
            addr: Addr {
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
