//! Integration tests of `neardup::eval` on small generated corpora with planted near-duplicates
//! and hand-written decisions: the measured precision and recall must match what was planted, and
//! every exact Jaccard must match a naive string-set computation.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use neardup::corpus::{
    DecisionRow, DecisionWriter, DiscoverOptions, FieldPath, FieldsMode, Reason, TextSelector,
    discover,
};
use neardup::eval::{EvalOptions, EvalReport, evaluate};
use neardup::sketch::{Normalizer, Shingler};
use tempfile::TempDir;

use crate::support::Rng;

const THRESHOLD: f64 = 0.7;
const K: usize = 5;

/// A word of 3 to 8 random letters.
fn word(rng: &mut Rng) -> String {
    let len = 3 + (rng.next() % 6) as usize;
    (0..len)
        .map(|_| (b'a' + (rng.next() % 26) as u8) as char)
        .collect()
}

/// 120 random words.
fn doc(seed: u64) -> Vec<String> {
    let mut rng = Rng(seed.wrapping_mul(7919) + 1);
    (0..120).map(|_| word(&mut rng)).collect()
}

/// `words` with the words in `range` replaced by fresh ones.
fn edit(words: &[String], range: std::ops::Range<usize>, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed ^ 0xdead_beef);
    let mut out = words.to_vec();
    for w in &mut out[range] {
        *w = word(&mut rng);
    }
    out
}

fn text(words: &[String]) -> String {
    words.join(" ")
}

/// Naive exact Jaccard of character 5-gram sets, independent of the code under test.
fn naive_jaccard(a: &str, b: &str) -> f64 {
    let grams = |s: &str| -> HashSet<String> {
        let chars: Vec<char> = s.chars().collect();
        chars.windows(K).map(|w| w.iter().collect()).collect()
    };
    let (a, b) = (grams(a), grams(b));
    a.intersection(&b).count() as f64 / a.union(&b).count() as f64
}

fn line(id: &str, text: &str) -> String {
    serde_json::json!({ "id": id, "text": text }).to_string()
}

/// The planted corpus: three files, with a blank and a malformed line so that record numbering
/// is exercised.
struct Corpus {
    dir: TempDir,
    /// File names as the pipeline writes them into decisions.
    names: Vec<String>,
    /// Texts by (file, record).
    texts: Vec<Vec<Option<String>>>,
}

impl Corpus {
    fn build() -> Corpus {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        let u: Vec<Vec<String>> = (0..6).map(doc).collect();
        let near = |i: usize, seed: u64| text(&edit(&u[i], 50..56, seed));
        // c: a chain U5 -> V -> W where V is close to both, but W is not close to U5.
        let v = edit(&u[5], 0..12, 100);
        let w = edit(&v, 108..120, 101);
        let a = vec![
            Some(text(&u[0])),
            Some(text(&u[1])),
            None, // blank line
            Some(near(0, 1)),
            None, // malformed line
            Some(text(&u[2])),
            Some(near(1, 2)),
        ];
        let b = vec![
            Some(text(&u[3])),
            Some(text(&u[0])),
            Some(near(2, 3)),
            Some(text(&u[4])),
            Some("tiny".to_owned()),
            Some("tiny".to_owned()),
            Some("wee".to_owned()),
        ];
        let c = vec![Some(text(&u[5])), Some(text(&v)), Some(text(&w))];
        let write = |name: &str, file: usize, recs: &[Option<String>]| {
            let mut out = String::new();
            for (i, r) in recs.iter().enumerate() {
                match r {
                    Some(t) => out.push_str(&line(&format!("{name}{i}"), t)),
                    None if file == 0 && i == 2 => out.push_str("   "),
                    None => out.push_str("{\"id\": \"broken\", \"text\": "),
                }
                out.push('\n');
            }
            std::fs::write(dir.path().join("in").join(format!("{name}.jsonl")), out).unwrap();
        };
        write("a", 0, &a);
        write("b", 1, &b);
        write("c", 2, &c);
        let found = discover(
            &[dir.path().join("in").display().to_string()],
            &DiscoverOptions::default(),
        );
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let names = found
            .files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        let corpus = Corpus {
            dir,
            names,
            texts: vec![a, b, c],
        };
        // Preconditions of the planted structure, checked naively.
        let t = |f: usize, r: usize| corpus.text(f, r);
        for (x, y) in [
            ((0, 0), (0, 3)),
            ((0, 1), (0, 6)),
            ((0, 5), (1, 2)),
            ((2, 0), (2, 1)),
            ((2, 1), (2, 2)),
        ] {
            let j = naive_jaccard(t(x.0, x.1), t(y.0, y.1));
            assert!(
                (THRESHOLD..1.0).contains(&j),
                "planted pair {x:?} {y:?} has Jaccard {j}"
            );
        }
        let j = naive_jaccard(t(2, 0), t(2, 2));
        assert!(
            j < THRESHOLD,
            "chain ends must not be near-duplicates, Jaccard {j}"
        );
        for (x, y) in [((0, 1), (0, 5)), ((1, 0), (1, 3))] {
            assert!(naive_jaccard(t(x.0, x.1), t(y.0, y.1)) < 0.3);
        }
        corpus
    }

    fn text(&self, file: usize, record: usize) -> &str {
        self.texts[file][record].as_deref().unwrap()
    }

    /// The input argument: the directory of the three files.
    fn input(&self) -> String {
        self.dir.path().join("in").display().to_string()
    }
}

/// One hand-written decision: (file, record, keep, reason, dup_of (file, record)).
type Row = (usize, u64, bool, Reason, Option<(usize, u64)>);

/// Decisions of a correct greedy run over [`Corpus`].
fn correct_rows() -> Vec<Row> {
    use Reason::*;
    vec![
        (0, 0, true, Unique, None),
        (0, 1, true, Unique, None),
        (0, 3, false, Near, Some((0, 0))),
        (0, 4, true, Error, None),
        (0, 5, true, Unique, None),
        (0, 6, false, Near, Some((0, 1))),
        (1, 0, true, Unique, None),
        (1, 1, false, Exact, Some((0, 0))),
        (1, 2, false, Near, Some((0, 5))),
        (1, 3, true, Unique, None),
        (1, 4, true, Unique, None),
        (1, 5, false, Exact, Some((1, 4))),
        (1, 6, true, Unique, None),
        (2, 0, true, Unique, None),
        (2, 1, false, Near, Some((2, 0))),
        // Greedy keeps W: its only close earlier sample (V) was dropped.
        (2, 2, true, Unique, None),
    ]
}

fn set_row(
    rows: &mut [Row],
    file: usize,
    record: u64,
    keep: bool,
    reason: Reason,
    dup_of: Option<(usize, u64)>,
) {
    let r = rows
        .iter_mut()
        .find(|r| r.0 == file && r.1 == record)
        .unwrap();
    *r = (file, record, keep, reason, dup_of);
}

fn write_decisions(path: &Path, names: &[String], rows: &[Row]) {
    let mut w = DecisionWriter::create(path).unwrap();
    for &(file, record, keep, reason, dup_of) in rows {
        w.write(&DecisionRow {
            file: &names[file],
            record,
            field: 0,
            id: None,
            keep,
            reason,
            dup_of_file: dup_of.map(|d| names[d.0].as_str()),
            dup_of_record: dup_of.map(|d| d.1),
            dup_of_id: None,
            similarity: dup_of.map(|_| 0.9),
            cluster_file: dup_of.map_or(&names[file], |d| names[d.0].as_str()),
            cluster_record: dup_of.map_or(record, |d| d.1),
        })
        .unwrap();
    }
    w.finish().unwrap();
}

fn options(decisions: PathBuf, inputs: Vec<String>, selector: TextSelector) -> EvalOptions {
    EvalOptions {
        decisions,
        inputs,
        format: None,
        selector,
        normalizer: Normalizer::default(),
        shingler: Shingler::Chars { k: K, step: 1 },
        threshold: THRESHOLD,
        recall_samples: 1000,
        seed: 0,
        threads: 2,
        clusters: 3,
    }
}

fn run(corpus: &Corpus, rows: &[Row], file_name: &str) -> EvalReport {
    let path = corpus.dir.path().join("out").join(file_name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_decisions(&path, &corpus.names, rows);
    let selector = TextSelector::single(FieldPath::top("text"));
    evaluate(&options(path, vec![corpus.input()], selector)).unwrap()
}

/// Samples with text in [`Corpus`].
const SAMPLES: u64 = 15;

#[test]
fn correct_decisions_have_full_precision_and_strict_recall() {
    let corpus = Corpus::build();
    let r = run(&corpus, &correct_rows(), "decisions.jsonl");
    assert_eq!(r.files, 3);
    assert_eq!(r.samples, SAMPLES);
    assert_eq!(r.samples_without_decision, 0);
    assert_eq!(r.decisions_without_sample, 0);
    assert_eq!(r.decisions_unmatched_file, 0);

    let p = &r.precision;
    assert_eq!(
        (p.dropped, p.evaluated, p.missing_sample, p.missing_dup_of),
        (6, 6, 0, 0)
    );
    assert_eq!(p.at_or_above_threshold, 6);
    assert_eq!(p.precision, Some(1.0));
    assert_eq!(p.histogram.iter().map(|b| b.count).sum::<u64>(), 6);
    // The histogram is exactly that of the naive Jaccards of the planted pairs.
    let mut expected = [0u64; 10];
    for (file, record, _, _, dup_of) in correct_rows() {
        if let Some((df, dr)) = dup_of {
            let (x, y) = (
                corpus.text(file, record as usize),
                corpus.text(df, dr as usize),
            );
            // Texts shorter than a shingle match only identical texts.
            let j = if x.chars().count() < K {
                f64::from(x == y)
            } else {
                naive_jaccard(x, y)
            };
            expected[((j * 10.0) as usize).min(9)] += 1;
        }
    }
    assert_eq!(
        p.histogram.iter().map(|b| b.count).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        p.worst.iter().filter(|e| e.jaccard == 1.0).count(),
        2,
        "two exact copies"
    );
    // The worst pair's Jaccard is the naive one of a planted pair.
    let worst = &p.worst[0];
    let naive = naive_jaccard(
        corpus.text(
            file_of(&corpus, &worst.sample.file),
            worst.sample.record as usize,
        ),
        corpus.text(
            file_of(&corpus, &worst.dup_of.file),
            worst.dup_of.record as usize,
        ),
    );
    assert!(
        (worst.jaccard - naive).abs() < 1e-12,
        "{} vs naive {naive}",
        worst.jaccard
    );
    assert!(p.worst.windows(2).all(|w| w[0].jaccard <= w[1].jaccard));

    let rc = &r.recall;
    assert_eq!(
        (rc.population, rc.sampled, rc.not_found),
        (SAMPLES, SAMPLES, 0)
    );
    // Near copies: a3, a6, b1, b2, b5, c1 (dropped) and W = c2 (kept, correctly).
    assert_eq!(
        (rc.with_earlier_near_copy, rc.dropped_with_earlier_near_copy),
        (7, 6)
    );
    assert_eq!(
        (
            rc.with_earlier_kept_near_copy,
            rc.dropped_with_earlier_kept_near_copy
        ),
        (6, 6)
    );
    assert_eq!(rc.strict_recall, Some(1.0));
    assert_eq!(rc.recall, Some(6.0 / 7.0));
    assert_eq!((rc.without_earlier_near_copy, rc.wrongly_dropped), (8, 0));
    assert_eq!(rc.missed.len(), 1);
    let w = &rc.missed[0];
    assert_eq!((w.sample.record, w.keep), (2, true));
    let closest = w.closest_earlier.as_ref().unwrap();
    assert_eq!(closest.sample.record, 1);
    assert!((closest.jaccard - naive_jaccard(corpus.text(2, 2), corpus.text(2, 1))).abs() < 1e-12);
    let kept = w.closest_earlier_kept.as_ref().unwrap();
    assert_eq!(kept.sample.record, 0);
    assert!(kept.jaccard < THRESHOLD);

    let summary = r.summary();
    assert!(summary.contains("precision: 100.00%"), "{summary}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["precision"]["precision"], 1.0);
}

fn file_of(corpus: &Corpus, name: &str) -> usize {
    corpus.names.iter().position(|n| n == name).unwrap()
}

#[test]
fn a_wrong_dup_of_lowers_precision() {
    let corpus = Corpus::build();
    let mut rows = correct_rows();
    // a6 is a copy of a1, but the decision names a5 (an unrelated text).
    set_row(&mut rows, 0, 6, false, Reason::Near, Some((0, 5)));
    let r = run(&corpus, &rows, "decisions.parquet");
    let p = &r.precision;
    assert_eq!((p.evaluated, p.at_or_above_threshold), (6, 5));
    assert_eq!(p.precision, Some(5.0 / 6.0));
    let worst = &p.worst[0];
    assert_eq!(
        (worst.sample.record, worst.dup_of.record, worst.reason),
        (6, 5, Reason::Near)
    );
    let naive = naive_jaccard(corpus.text(0, 6), corpus.text(0, 5));
    assert!((worst.jaccard - naive).abs() < 1e-12);
    assert_eq!(p.histogram[(naive * 10.0) as usize].count, 1);
    assert_eq!(worst.reported_similarity, Some(0.9));
    assert!(worst.text.starts_with(&corpus.text(0, 6)[..20]));
    // Recall does not depend on which sample a drop names.
    assert_eq!(r.recall.strict_recall, Some(1.0));
    assert!(r.summary().contains("below threshold"), "{}", r.summary());
}

#[test]
fn a_missed_and_a_wrongly_dropped_sample_are_found() {
    let corpus = Corpus::build();
    let mut rows = correct_rows();
    // b2 is a near copy of a5 but the run kept it; b3 is unique but the run dropped it.
    set_row(&mut rows, 1, 2, true, Reason::Unique, None);
    set_row(&mut rows, 1, 3, false, Reason::Near, Some((1, 0)));
    let r = run(&corpus, &rows, "decisions.jsonl");
    let rc = &r.recall;
    assert_eq!(
        (rc.with_earlier_near_copy, rc.dropped_with_earlier_near_copy),
        (7, 5)
    );
    assert_eq!(
        (
            rc.with_earlier_kept_near_copy,
            rc.dropped_with_earlier_kept_near_copy
        ),
        (6, 5)
    );
    assert_eq!(rc.strict_recall, Some(5.0 / 6.0));
    let ci = rc.strict_recall_ci95.unwrap();
    assert!(ci[0] < 5.0 / 6.0 && 5.0 / 6.0 < ci[1] && ci[1] <= 1.0);
    assert_eq!((rc.without_earlier_near_copy, rc.wrongly_dropped), (8, 1));
    assert_eq!(rc.wrongly_dropped_share, Some(1.0 / 8.0));
    // The definite miss (its close earlier sample was kept) comes first.
    let m = &rc.missed[0];
    assert_eq!(
        (m.sample.file.as_str(), m.sample.record),
        (corpus.names[1].as_str(), 2)
    );
    let kept = m.closest_earlier_kept.as_ref().unwrap();
    assert_eq!(
        (kept.sample.file.as_str(), kept.sample.record),
        (corpus.names[0].as_str(), 5)
    );
    assert!((kept.jaccard - naive_jaccard(corpus.text(1, 2), corpus.text(0, 5))).abs() < 1e-12);
    let wd = &rc.wrongly_dropped_examples[0];
    assert_eq!(
        (wd.sample.record, wd.keep, wd.reason),
        (3, false, Reason::Near)
    );
    // And precision sees the wrong drop too.
    assert_eq!(
        (r.precision.evaluated, r.precision.at_or_above_threshold),
        (6, 5)
    );
}

#[test]
fn the_draw_is_seed_fixed_and_thread_independent() {
    let corpus = Corpus::build();
    let path = corpus.dir.path().join("out").join("decisions.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_decisions(&path, &corpus.names, &correct_rows());
    let selector = TextSelector::single(FieldPath::top("text"));
    let mut opts = options(path, vec![corpus.input()], selector);
    opts.recall_samples = 5;
    opts.seed = 7;
    let a = evaluate(&opts).unwrap();
    opts.threads = 1;
    let b = evaluate(&opts).unwrap();
    assert_eq!(a.recall.sampled, 5);
    assert_eq!(a.recall.population, SAMPLES);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    // Over many seeds every sample with text is drawn sometimes: the draw is not stuck on a prefix.
    let mut drawn_near = HashSet::new();
    for seed in 0..40 {
        opts.seed = seed;
        let r = evaluate(&opts).unwrap();
        assert_eq!(r.recall.sampled, 5);
        drawn_near.insert(r.recall.with_earlier_near_copy);
    }
    assert!(drawn_near.len() >= 3, "{drawn_near:?}");
    opts.recall_samples = 0;
    let none = evaluate(&opts).unwrap();
    assert_eq!((none.recall.sampled, none.recall.recall), (0, None));
    assert_eq!(none.precision.evaluated, 6);
}

#[test]
fn unknown_files_and_later_dup_of_are_handled() {
    let corpus = Corpus::build();
    let path = corpus.dir.path().join("out").join("decisions.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut w = DecisionWriter::create(&path).unwrap();
    let a = corpus.names[0].as_str();
    let b = corpus.names[1].as_str();
    fn row<'a>(
        file: &'a str,
        record: u64,
        dup_of: Option<(&'a str, u64)>,
    ) -> (&'a str, u64, Option<(&'a str, u64)>) {
        (file, record, dup_of)
    }
    let rows = [
        // a0's exact copy b1 comes later: named as its dup_of anyway, it must still be checked.
        row(a, 0, Some((b, 1))),
        // The dup_of file is not an input.
        row(a, 3, Some(("elsewhere.jsonl", 0))),
        // The dropped sample's file is not an input.
        row("elsewhere.jsonl", 1, Some((a, 0))),
        // A record beyond the end of the file.
        row(b, 99, Some((a, 0))),
    ];
    for &(file, record, dup_of) in &rows {
        w.write(&DecisionRow {
            file,
            record,
            field: 0,
            id: None,
            keep: false,
            reason: Reason::Near,
            dup_of_file: dup_of.map(|d| d.0),
            dup_of_record: dup_of.map(|d| d.1),
            dup_of_id: None,
            similarity: None,
            cluster_file: dup_of.map_or(file, |d| d.0),
            cluster_record: dup_of.map_or(record, |d| d.1),
        })
        .unwrap();
    }
    w.finish().unwrap();
    let selector = TextSelector::single(FieldPath::top("text"));
    let r = evaluate(&options(path, vec![corpus.input()], selector)).unwrap();
    assert_eq!(r.decision_rows, 4);
    assert_eq!(r.decisions_unmatched_file, 1);
    assert_eq!(r.decisions_without_sample, 1);
    assert_eq!(r.samples_without_decision, SAMPLES - 2);
    let p = &r.precision;
    assert_eq!(
        (p.dropped, p.evaluated, p.missing_dup_of, p.missing_sample),
        (3, 1, 1, 1)
    );
    assert_eq!(p.precision, Some(1.0));
    assert_eq!(p.similarity_mean_abs_error, None);
    assert_eq!(p.worst[0].jaccard, 1.0);
    assert!(!r.warnings.is_empty());
}

#[test]
fn expand_mode_compares_with_the_best_field_of_the_dup_of_record() {
    let dir = TempDir::new().unwrap();
    let (t0, b0, t1, x) = (doc(11), doc(12), doc(13), doc(14));
    let b1 = edit(&b0, 30..36, 5);
    let lines = [
        serde_json::json!({"title": text(&t0), "body": text(&b0)}).to_string(),
        serde_json::json!({"title": text(&t1), "body": text(&b1)}).to_string(),
        serde_json::json!({"title": text(&x), "body": text(&x)}).to_string(),
    ];
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let name = input.display().to_string();
    let path = dir.path().join("decisions.jsonl");
    let mut w = DecisionWriter::create(&path).unwrap();
    let mut put = |record: u64, field: u32, dup_of: Option<u64>| {
        w.write(&DecisionRow {
            file: &name,
            record,
            field,
            id: None,
            keep: dup_of.is_none(),
            reason: if dup_of.is_some() {
                Reason::Near
            } else {
                Reason::Unique
            },
            dup_of_file: dup_of.map(|_| name.as_str()),
            dup_of_record: dup_of,
            dup_of_id: None,
            similarity: None,
            cluster_file: &name,
            cluster_record: dup_of.unwrap_or(record),
        })
        .unwrap();
    };
    put(0, 0, None);
    put(0, 1, None);
    put(1, 0, None);
    put(1, 1, Some(0)); // body of r1 copies body of r0 (field 1 of the dup_of record)
    put(2, 0, None);
    put(2, 1, Some(2)); // body of r2 copies the title of the same record
    w.finish().unwrap();
    let selector = TextSelector {
        fields: vec![FieldPath::top("title"), FieldPath::top("body")],
        mode: FieldsMode::Expand,
        id_field: None,
        rank_field: None,
    };
    let r = evaluate(&options(path, vec![input.display().to_string()], selector)).unwrap();
    assert_eq!(r.samples, 6);
    let p = &r.precision;
    assert_eq!((p.evaluated, p.at_or_above_threshold), (2, 2));
    let mut pairs: Vec<(u64, u32, u32, f64)> = p
        .worst
        .iter()
        .map(|e| (e.sample.record, e.sample.field, e.dup_of.field, e.jaccard))
        .collect();
    pairs.sort_by_key(|p| p.0);
    assert_eq!((pairs[0].0, pairs[0].1, pairs[0].2), (1, 1, 1));
    assert!((pairs[0].3 - naive_jaccard(&text(&b1), &text(&b0))).abs() < 1e-12);
    assert_eq!(
        (pairs[1].0, pairs[1].1, pairs[1].2, pairs[1].3),
        (2, 1, 0, 1.0)
    );
    // Recall: the two copied bodies have an earlier near copy and were dropped.
    assert_eq!(
        (
            r.recall.with_earlier_near_copy,
            r.recall.dropped_with_earlier_near_copy
        ),
        (2, 2)
    );
}

#[test]
fn bad_options_and_inputs_are_errors() {
    let corpus = Corpus::build();
    let selector = TextSelector::single(FieldPath::top("text"));
    let path = corpus.dir.path().join("missing-decisions.jsonl");
    let mut opts = options(path.clone(), vec![corpus.input()], selector);
    let err = evaluate(&opts).unwrap_err().to_string();
    assert!(err.contains("missing-decisions.jsonl"), "{err}");
    opts.threshold = 1.5;
    assert!(
        evaluate(&opts)
            .unwrap_err()
            .to_string()
            .contains("threshold")
    );
    opts.threshold = THRESHOLD;
    opts.shingler = Shingler::Chars { k: 0, step: 1 };
    assert!(evaluate(&opts).is_err());
    opts.shingler = Shingler::Chars { k: K, step: 1 };
    opts.inputs = vec![corpus.dir.path().join("nothing-here").display().to_string()];
    let err = evaluate(&opts).unwrap_err().to_string();
    assert!(
        err.contains("nothing-here") && err.contains("no such file"),
        "{err}"
    );
}

#[test]
fn the_largest_clusters_come_with_their_texts() {
    let corpus = Corpus::build();
    let r = run(&corpus, &correct_rows(), "decisions.jsonl");
    let shown: Vec<(String, u64, u64)> = r
        .largest_clusters
        .iter()
        .map(|c| (c.kept.file.clone(), c.kept.record, c.size))
        .collect();
    let name = |f: usize| corpus.names[f].clone();
    // (0, 0) holds two duplicates; the others one each, the earliest kept record first.
    assert_eq!(shown, [(name(0), 0, 3), (name(0), 1, 2), (name(0), 5, 2)]);
    let first = &r.largest_clusters[0];
    assert_eq!(
        first.kept_text.as_deref(),
        Some(snippet(corpus.text(0, 0)).as_str())
    );
    let members: Vec<(u64, Reason, Option<String>)> = first
        .members
        .iter()
        .map(|m| (m.sample.record, m.reason, m.text.clone()))
        .collect();
    assert_eq!(
        members,
        [
            (3, Reason::Near, Some(snippet(corpus.text(0, 3)))),
            (1, Reason::Exact, Some(snippet(corpus.text(1, 1)))),
        ]
    );
    assert!(r.summary().contains("cluster of 3:"), "{}", r.summary());
}

/// Decisions written before clusters were recorded name only `dup_of`; eval follows the chain
/// from a copy of a dropped sample to the kept one.
#[test]
fn clusters_of_decisions_without_them_follow_dup_of_chains() {
    let corpus = Corpus::build();
    let path = corpus.dir.path().join("old.jsonl");
    let mut rows = correct_rows();
    // (1, 1) names (0, 3), itself a duplicate of (0, 0).
    set_row(&mut rows, 1, 1, false, Reason::Exact, Some((0, 3)));
    let mut lines = String::new();
    for (file, record, keep, reason, dup_of) in rows {
        let line = serde_json::json!({
            "file": corpus.names[file], "record": record, "field": 0, "id": null, "keep": keep,
            "reason": reason.as_str(),
            "dup_of_file": dup_of.map(|d| corpus.names[d.0].clone()),
            "dup_of_record": dup_of.map(|d| d.1), "dup_of_id": null, "similarity": null,
        });
        lines += &format!("{line}\n");
    }
    std::fs::write(&path, lines).unwrap();
    let selector = TextSelector::single(FieldPath::top("text"));
    let r = evaluate(&options(path, vec![corpus.input()], selector)).unwrap();
    let first = &r.largest_clusters[0];
    assert_eq!((first.kept.record, first.size), (0, 3));
    assert_eq!(first.kept.file, corpus.names[0]);
}

/// The start of a text as eval's reports show it (160 characters).
fn snippet(text: &str) -> String {
    match text.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
