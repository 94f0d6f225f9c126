//! The report of `neardup eval`: what it contains (serialisable, the `--eval-report` JSON) and
//! its summary for people.

use std::fmt::Write as _;

use neardup_corpus::Reason;
use neardup_sketch::Normalizer;
use serde::Serialize;

/// The outcome of [`evaluate`](crate::evaluate): serialisable (the `--report` JSON), with [`EvalReport::summary`]
/// for humans.
#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// The decisions file evaluated.
    pub decisions: String,
    /// Input files read.
    pub files: usize,
    /// Similarity threshold the measurements use.
    pub threshold: f64,
    /// The shingler, as [`neardup_sketch::Shingler::describe`] gives it.
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
    /// The largest duplicate clusters (as many as asked for), largest first, each with the start
    /// of its kept sample's text and of its first members' texts.
    pub largest_clusters: Vec<ClusterExample>,
}

/// One duplicate cluster: a kept sample and the duplicates that resolve to it.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterExample {
    /// The kept sample.
    pub kept: SampleRef,
    /// Samples in the cluster, the kept one included.
    pub size: u64,
    /// The start of the kept sample's text (`None` when it was not found in the inputs).
    pub kept_text: Option<String>,
    /// The cluster's first members in input order (at most three).
    pub members: Vec<ClusterMember>,
}

/// A dropped member of a cluster.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterMember {
    /// The dropped sample.
    pub sample: SampleRef,
    /// Why it was dropped.
    pub reason: Reason,
    /// The similarity its decision reported.
    pub similarity: Option<f64>,
    /// The start of its text (`None` when it was not found in the inputs).
    pub text: Option<String>,
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
        for c in &self.largest_clusters {
            let _ = writeln!(s, "cluster of {}:", c.size);
            let _ = writeln!(s, "  kept  {}", addr_text(&c.kept));
            let _ = writeln!(s, "        {}", shown(c.kept_text.as_deref()));
            for m in &c.members {
                let _ = writeln!(
                    s,
                    "  {:<5} {}{}",
                    m.reason.as_str(),
                    addr_text(&m.sample),
                    m.similarity
                        .map_or_else(String::new, |x| format!(" (similarity {x:.3})"))
                );
                let _ = writeln!(s, "        {}", shown(m.text.as_deref()));
            }
            if c.size > 1 + c.members.len() as u64 {
                let _ = writeln!(s, "  … and {} more", c.size - 1 - c.members.len() as u64);
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

/// A text snippet on one line (line breaks shown as ⏎), or a note that it was not found.
fn shown(text: Option<&str>) -> String {
    text.map_or_else(
        || "(not found in the inputs)".to_owned(),
        |t| t.replace("\r\n", "⏎").replace(['\n', '\r'], "⏎"),
    )
}

pub(super) fn share(k: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| k as f64 / n as f64)
}

/// 95% Wilson score interval for `k` successes out of `n`: unlike the normal approximation it
/// stays within [0, 1] and is sensible at the small counts a 200-sample draw gives.
pub(super) fn wilson(k: u64, n: u64) -> Option<[f64; 2]> {
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

pub(super) fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.2}%", v * 100.0))
}

pub(super) fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"))
}

pub(super) fn ci(v: Option<[f64; 2]>) -> String {
    v.map_or_else(String::new, |[lo, hi]| {
        format!(", 95% CI {:.1}-{:.1}%", lo * 100.0, hi * 100.0)
    })
}

pub(super) fn addr_text(r: &SampleRef) -> String {
    let mut s = format!("{}:{}", r.file, r.record);
    if r.field != 0 {
        let _ = write!(s, "#{}", r.field);
    }
    if let Some(id) = &r.id {
        let _ = write!(s, " (id {id})");
    }
    s
}
