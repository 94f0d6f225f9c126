//! Deduplicating against saved indexes (`--index-out`, `--against`, `neardup index`), run as
//! the issue's acceptance check runs it:
//!
//! ```text
//! neardup dedup A/ -o outA --decisions dA.jsonl --index-out idx-a
//! neardup dedup B/ -o outB --decisions dB.jsonl --against idx-a --index-out idx-ab
//! neardup dedup C/ -o outC --decisions dC.jsonl --against idx-ab
//! ```
//!
//! B's and C's decisions and outputs must be exactly those their records get in one run
//! `neardup dedup A/ B/ C/`, and A's never change.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use support::{Rng, neardup, stderr, write_compressed, write_parquet_in_groups};

/// Texts of one dump: near copies of a few shared base texts (so dumps duplicate each other),
/// verbatim copies of `earlier` texts (exact copies across dumps), fresh texts, empty ones.
fn dump(rng: &mut Rng, n: usize, earlier: &[String]) -> Vec<String> {
    let word = |rng: &mut Rng| format!("w{}", rng.below(400));
    let bases: Vec<Vec<String>> = (0..12u64)
        .map(|b| {
            let mut r = Rng(b * 7919 + 1);
            (0..50).map(|_| word(&mut r)).collect()
        })
        .collect();
    (0..n)
        .map(|_| match rng.below(12) {
            0 => String::new(),
            1 | 2 => (0..45).map(|_| word(rng)).collect::<Vec<_>>().join(" "),
            3 if !earlier.is_empty() => earlier[rng.below(earlier.len() as u64) as usize].clone(),
            4 => bases[rng.below(12) as usize].join(" "),
            _ => {
                let mut t = bases[rng.below(12) as usize].clone();
                for _ in 0..rng.below(6) {
                    let i = rng.below(t.len() as u64) as usize;
                    t[i] = word(rng);
                }
                t.join(" ")
            }
        })
        .collect()
}

/// Dumps A, B and C as directories, each with a plain JSONL, a zstd JSONL and a Parquet file
/// (file names distinct across dumps: a joint run's outputs are named by file).
fn corpus(root: &Path) -> [PathBuf; 3] {
    corpus_seeded(root, 42, [420, 420, 420])
}

/// [`corpus`] from another seed, with `sizes` records per dump.
fn corpus_seeded(root: &Path, seed: u64, sizes: [usize; 3]) -> [PathBuf; 3] {
    let mut rng = Rng(seed);
    let mut all: Vec<String> = Vec::new();
    let dirs = ["A", "B", "C"].map(|d| root.join(d));
    for (d, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir).unwrap();
        let tag = ["a", "b", "c"][d];
        let texts = dump(&mut rng, sizes[d], &all);
        let third = sizes[d] / 3;
        let (one, rest) = texts.split_at(third);
        let (two, three) = rest.split_at(third);
        let lines = |part: &[String], file: &str| -> String {
            part.iter()
                .enumerate()
                .map(|(i, t)| {
                    format!(
                        "{}\n",
                        serde_json::json!({"id": format!("{tag}{file}-{i}"), "text": t})
                    )
                })
                .collect()
        };
        std::fs::write(dir.join(format!("{tag}1.jsonl")), lines(one, "1")).unwrap();
        write_compressed(
            &dir.join(format!("{tag}2.jsonl.zst")),
            lines(two, "2").as_bytes(),
        );
        let ids: Vec<String> = (0..three.len()).map(|i| format!("{tag}3-{i}")).collect();
        write_parquet_in_groups(&dir.join(format!("{tag}3.parquet")), &ids, three, Some(50));
        all.extend(texts);
    }
    dirs
}

fn ok(cmd: &mut std::process::Command) -> Output {
    let out = cmd.arg("-q").output().expect("run neardup");
    assert!(out.status.success(), "{cmd:?}: {}", stderr(&out));
    out
}

fn refused(cmd: &mut std::process::Command) -> String {
    let out = cmd.arg("-q").output().expect("run neardup");
    assert!(!out.status.success(), "{cmd:?} should have failed");
    stderr(&out)
}

fn decision_rows(path: &Path) -> Vec<serde_json::Value> {
    if path.extension().is_some_and(|e| e == "parquet") {
        let rows = neardup::corpus::read_decisions(path).unwrap();
        rows.iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect()
    } else {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The data files of an output directory by name (manifests left out).
fn outputs(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('_'))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

fn rows_of(rows: &[serde_json::Value], dump: &str) -> Vec<serde_json::Value> {
    rows.iter()
        .filter(|r| r["file"].as_str().unwrap().starts_with(&format!("{dump}/")))
        .cloned()
        .collect()
}

#[test]
fn separate_runs_against_chained_indexes_equal_one_joint_run() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    corpus(root);
    for (tag, settings, ext) in [
        ("exact", vec!["--verify", "exact"], "jsonl"),
        (
            "estimate-2",
            vec!["--verify", "estimate", "--max-reps", "2"],
            "parquet",
        ),
        (
            "exact-1",
            vec!["--max-reps", "1", "--threads", "1"],
            "jsonl",
        ),
    ] {
        let at = |name: &str| root.join(format!("{tag}-{name}"));
        let d = |name: &str| at(&format!("{name}.{ext}"));
        ok(neardup()
            .current_dir(root)
            .args(["dedup", "A", "B", "C", "-o"])
            .arg(at("out-joint"))
            .arg("--decisions")
            .arg(d("joint"))
            .args(&settings));
        ok(neardup()
            .current_dir(root)
            .args(["dedup", "A", "-o"])
            .arg(at("out-a"))
            .arg("--decisions")
            .arg(d("a"))
            .arg("--index-out")
            .arg(at("idx-a"))
            .args(&settings));
        ok(neardup()
            .current_dir(root)
            .args(["dedup", "B", "-o"])
            .arg(at("out-b"))
            .arg("--decisions")
            .arg(d("b"))
            .arg("--against")
            .arg(at("idx-a"))
            .arg("--index-out")
            .arg(at("idx-ab"))
            .arg("--report")
            .arg(at("report-b.json"))
            .args(&settings));
        ok(neardup()
            .current_dir(root)
            .args(["dedup", "C", "-o"])
            .arg(at("out-c"))
            .arg("--decisions")
            .arg(d("c"))
            .arg("--against")
            .arg(at("idx-ab"))
            .args(&settings));

        let joint = decision_rows(&d("joint"));
        let joint_out = outputs(&at("out-joint"));
        let mut across = 0;
        let mut exact_across = 0;
        for (dump, name) in [("A", "a"), ("B", "b"), ("C", "c")] {
            let mine = decision_rows(&d(name));
            assert_eq!(mine.len(), rows_of(&joint, dump).len(), "{tag} {dump}");
            assert_eq!(mine, rows_of(&joint, dump), "{tag}: {dump}'s decisions");
            for (file, bytes) in outputs(&at(&format!("out-{name}"))) {
                assert_eq!(
                    Some(&bytes),
                    joint_out.get(&file),
                    "{tag}: {dump}'s output {file}"
                );
            }
            for r in &mine {
                let of = r["dup_of_file"].as_str().unwrap_or("");
                if !of.is_empty() && !of.starts_with(&format!("{dump}/")) {
                    across += 1;
                    exact_across += usize::from(r["reason"] == "exact");
                    assert!(
                        !r["cluster_file"]
                            .as_str()
                            .unwrap()
                            .starts_with(&format!("{dump}/"))
                            || dump == "A",
                        "{tag}: a drop of {dump} duplicating an earlier dump names its cluster \
                         in an earlier dump: {r}"
                    );
                }
            }
        }
        assert!(
            across > 50 && exact_across > 10,
            "{tag}: {across} drops across dumps, {exact_across} exact"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(at("report-b.json")).unwrap()).unwrap();
        let against = &report["against"];
        assert!(against["representatives"].as_u64().unwrap() > 0, "{report}");
        assert!(against["copies"].as_u64().unwrap() > 0, "{report}");
        assert!(report["index"]["bytes"].as_u64().unwrap() > 0, "{report}");
        let estimate = tag.starts_with("estimate");
        assert_eq!(report["index"]["self_contained"], estimate, "{report}");
        assert_eq!(against["self_contained"], estimate, "{report}");
        assert_eq!(
            against["records_read"].as_u64().unwrap() > 0,
            !estimate,
            "{report}"
        );

        // With A's and B's files gone, an index made under --verify estimate still serves C
        // (it holds the sketches); one made under exact verification says which file it needs.
        std::fs::rename(root.join("A"), root.join("A-gone")).unwrap();
        std::fs::rename(root.join("B"), root.join("B-gone")).unwrap();
        let mut again = neardup();
        again
            .current_dir(root)
            .args(["dedup", "C", "--decisions"])
            .arg(d("c-again"))
            .arg("--against")
            .arg(at("idx-ab"))
            .args(&settings);
        if estimate {
            ok(&mut again);
            assert_eq!(
                decision_rows(&d("c-again")),
                decision_rows(&d("c")),
                "{tag}"
            );
        } else {
            let e = refused(&mut again);
            assert!(
                e.contains("cannot be read back") && e.contains("A/"),
                "{tag}: {e}"
            );
            assert!(
                !d("c-again").exists(),
                "{tag}: a failed run published its decisions"
            );
        }
        std::fs::rename(root.join("A-gone"), root.join("A")).unwrap();
        std::fs::rename(root.join("B-gone"), root.join("B")).unwrap();
    }
}

#[test]
fn an_index_made_from_the_staged_steps_equals_the_one_a_run_saves() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    corpus(root);
    ok(neardup().current_dir(root).args([
        "dedup",
        "A",
        "--decisions",
        "da.jsonl",
        "--index-out",
        "idx-run",
    ]));
    ok(neardup()
        .current_dir(root)
        .args(["keys", "A", "--shard", "0", "-o", "keys-a.ndk"]));
    ok(neardup().current_dir(root).args([
        "index",
        "keys-a.ndk",
        "--decisions",
        "da.jsonl",
        "-o",
        "idx-steps",
    ]));
    assert_eq!(
        std::fs::read(root.join("idx-run")).unwrap(),
        std::fs::read(root.join("idx-steps")).unwrap()
    );

    // Against it, B's staged steps (two shards, two groups) and `apply` give B the decisions and
    // outputs of the joint run.
    ok(neardup().current_dir(root).args([
        "dedup",
        "A",
        "B",
        "-o",
        "out-joint",
        "--decisions",
        "joint.jsonl",
    ]));
    let joint: Vec<serde_json::Value> = rows_of(&decision_rows(&root.join("joint.jsonl")), "B");
    let joint_out = outputs(&root.join("out-joint"));
    let shards = [vec!["B/b1.jsonl"], vec!["B/b2.jsonl.zst", "B/b3.parquet"]];
    for (i, files) in shards.iter().enumerate() {
        ok(neardup()
            .current_dir(root)
            .args(["keys"])
            .args(files)
            .args(["--shard", &i.to_string(), "-o", &format!("keys-b{i}.ndk")]));
    }
    ok(neardup().current_dir(root).args([
        "hot",
        "keys-b0.ndk",
        "keys-b1.ndk",
        "--groups",
        "2",
        "--against",
        "idx-steps",
        "-o",
        "hot-b.ndh",
    ]));
    for i in 0..2 {
        ok(neardup().current_dir(root).args([
            "sign",
            &format!("keys-b{i}.ndk"),
            "--hot",
            "hot-b.ndh",
            "--against",
            "idx-steps",
            "-o",
            &format!("sig-{i}"),
        ]));
    }
    for g in 0..2 {
        ok(neardup().current_dir(root).args([
            "decide",
            "sig-0",
            "sig-1",
            "--hot",
            "hot-b.ndh",
            "--group",
            &g.to_string(),
            "--against",
            "idx-steps",
            "-o",
            &format!("decided-{g}"),
        ]));
    }
    let mut staged = Vec::new();
    for i in 0..2 {
        ok(neardup().current_dir(root).args([
            "write",
            &format!("keys-b{i}.ndk"),
            "--hot",
            "hot-b.ndh",
            "--decided",
            "decided-0",
            "--decided",
            "decided-1",
            "--against",
            "idx-steps",
            "-o",
            "out-staged",
            "--decisions",
            &format!("d-b{i}.jsonl"),
        ]));
        staged.extend(decision_rows(&root.join(format!("d-b{i}.jsonl"))));
    }
    assert_eq!(staged, joint, "the staged steps' decisions");
    for (file, bytes) in outputs(&root.join("out-staged")) {
        assert_eq!(
            Some(&bytes),
            joint_out.get(&file),
            "the staged steps' output {file}"
        );
    }
    ok(neardup().current_dir(root).args([
        "apply",
        "keys-b0.ndk",
        "keys-b1.ndk",
        "--hot",
        "hot-b.ndh",
        "--against",
        "idx-steps",
        "--decisions",
        "d-apply.jsonl",
    ]));
    assert_eq!(
        decision_rows(&root.join("d-apply.jsonl")),
        joint,
        "apply's decisions"
    );

    // A step given another index (or none) than the others is refused, naming --against.
    let e = refused(neardup().current_dir(root).args([
        "decide",
        "sig-0",
        "sig-1",
        "--hot",
        "hot-b.ndh",
        "--group",
        "0",
        "-o",
        "decided-x",
    ]));
    assert!(e.contains("--against"), "{e}");
}

#[test]
fn indexes_that_do_not_fit_the_run_are_refused_naming_why() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    corpus(root);
    ok(neardup().current_dir(root).args([
        "dedup",
        "A",
        "--decisions",
        "da.jsonl",
        "--index-out",
        "idx-a",
    ]));
    ok(neardup().current_dir(root).args([
        "dedup",
        "B",
        "--decisions",
        "db.jsonl",
        "--against",
        "idx-a",
        "--index-out",
        "idx-ab",
    ]));
    let dedup_c = |extra: &[&str]| {
        let mut c = neardup();
        c.current_dir(root)
            .args(["dedup", "C", "--decisions", "dc.jsonl"])
            .args(extra);
        c
    };
    // Other settings: each named, with both values.
    let e = refused(&mut dedup_c(&["--against", "idx-a", "--threshold", "0.7"]));
    assert!(e.contains("threshold: 0.8 vs 0.7"), "{e}");
    let e = refused(&mut dedup_c(&["--against", "idx-a", "--num-perm", "64"]));
    assert!(e.contains("idx-a") && e.contains("settings"), "{e}");
    // An index and one made against it: A's files twice.
    let e = refused(&mut dedup_c(&["--against", "idx-a", "--against", "idx-ab"]));
    assert!(
        e.contains("in two of the indexes") && e.contains("give only the later"),
        "{e}"
    );
    // Settings that would let a later run change earlier decisions.
    let e = refused(&mut dedup_c(&[
        "--against",
        "idx-a",
        "--min-key-count",
        "2",
    ]));
    assert!(e.contains("--min-key-count 1"), "{e}");
    let e = refused(&mut dedup_c(&["--against", "idx-a", "--prefer", "longest"]));
    assert!(e.contains("first"), "{e}");
    // Not an index, a damaged one.
    let e = refused(&mut dedup_c(&["--against", "da.jsonl"]));
    assert!(e.contains("not a neardup index"), "{e}");
    let bytes = std::fs::read(root.join("idx-a")).unwrap();
    std::fs::write(root.join("idx-cut"), &bytes[..bytes.len() - 40]).unwrap();
    let e = refused(&mut dedup_c(&["--against", "idx-cut"]));
    assert!(e.contains("idx-cut") && e.contains("damaged"), "{e}");
    // The index is never an output's name, and an output never an indexed run's input.
    let e = refused(&mut dedup_c(&[
        "--against",
        "idx-a",
        "--index-out",
        "idx-a",
    ]));
    assert!(e.contains("idx-a"), "{e}");
    let e = refused(&mut dedup_c(&[
        "--against",
        "idx-a",
        "--report",
        "A/a1.jsonl",
    ]));
    assert!(e.contains("A/a1.jsonl"), "{e}");
    assert!(
        !root.join("dc.jsonl").exists(),
        "a refused run wrote its decisions"
    );

    // An indexed run's file changed or gone: the run says which and why, and publishes nothing.
    let a1 = root.join("A/a1.jsonl");
    let original = std::fs::read(&a1).unwrap();
    let mut changed = original.clone();
    changed.extend_from_slice(b"{\"id\":\"late\",\"text\":\"appended later\"}\n");
    std::fs::write(&a1, &changed).unwrap();
    let e = refused(&mut dedup_c(&["--against", "idx-ab"]));
    assert!(
        e.contains("A/a1.jsonl") && e.contains("size changed"),
        "{e}"
    );
    std::fs::remove_file(&a1).unwrap();
    let e = refused(&mut dedup_c(&["--against", "idx-ab"]));
    assert!(
        e.contains("A/a1.jsonl") && e.contains("cannot be read back"),
        "{e}"
    );
    assert!(!root.join("dc.jsonl").exists());
    // Records edited in place (same size): the one found is named by its 0-based number, as
    // decisions and reports number records. Only odd-numbered records are edited, so a number
    // off by one would name an even one.
    let text = String::from_utf8(original.clone()).unwrap();
    let edited: String = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if i % 2 == 1 {
                l.replacen("\"text\":\"w", "\"text\":\"x", 1)
            } else {
                l.to_string()
            };
            format!("{l}\n")
        })
        .collect();
    assert_eq!(edited.len(), original.len());
    std::fs::write(&a1, &edited).unwrap();
    let e = refused(&mut dedup_c(&["--against", "idx-ab"]));
    let record: usize = e
        .split("the text of record ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("names no edited record: {e}"));
    assert!(e.contains("A/a1.jsonl"), "{e}");
    assert_eq!(record % 2, 1, "record {record} was not edited: {e}");
    assert_ne!(text.lines().nth(record), edited.lines().nth(record));
    assert!(!root.join("dc.jsonl").exists());
    std::fs::write(&a1, &original).unwrap();
    ok(&mut dedup_c(&["--against", "idx-ab"]));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(6))]

    /// Whatever the corpus, the sizes of the dumps and the decision settings, the chained runs
    /// give each dump its part of the joint run.
    #[test]
    fn chained_runs_equal_the_joint_run_for_any_settings(
        seed in 1u64..1_000_000,
        sizes in proptest::array::uniform3(3usize..200),
        threshold in proptest::sample::select(vec!["0.6", "0.8", "0.9"]),
        max_reps in proptest::sample::select(vec!["0", "1", "3"]),
        verify in proptest::sample::select(vec!["exact", "estimate"]),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        corpus_seeded(root, seed, sizes);
        let settings = ["--threshold", threshold, "--max-reps", max_reps, "--verify", verify];
        let run = |args: &[&str]| {
            ok(neardup().current_dir(root).args(args).args(settings));
        };
        run(&["dedup", "A", "B", "C", "--decisions", "joint.jsonl"]);
        run(&["dedup", "A", "--decisions", "a.jsonl", "--index-out", "ia"]);
        run(&["dedup", "B", "--decisions", "b.jsonl", "--against", "ia", "--index-out", "iab"]);
        run(&["dedup", "C", "--decisions", "c.jsonl", "--against", "iab"]);
        let joint = decision_rows(&root.join("joint.jsonl"));
        for (dump, file) in [("A", "a.jsonl"), ("B", "b.jsonl"), ("C", "c.jsonl")] {
            proptest::prop_assert_eq!(
                decision_rows(&root.join(file)),
                rows_of(&joint, dump),
                "{}", dump
            );
        }
    }
}
