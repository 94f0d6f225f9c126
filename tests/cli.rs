//! End-to-end runs of the `neardup` binary: outputs, decisions, reports, exit codes, bad input,
//! and interruption.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support;

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run neardup");
    eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn read_jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn dedup_writes_the_input_minus_exactly_the_dropped_records() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let dec = tmp.path().join("decisions.jsonl");
    let rep = tmp.path().join("report.json");
    let o = run(neardup()
        .arg("dedup")
        .arg(data("sample"))
        .args(["--id-field", "id", "-q"])
        .arg("--output")
        .arg(&out)
        .arg("--decisions")
        .arg(&dec)
        .arg("--report")
        .arg(&rep));
    assert!(o.status.success());
    let decisions = read_jsonl(&dec);
    assert_eq!(decisions.len(), 500);
    for name in ["part-0.jsonl", "part-1.jsonl"] {
        let input = std::fs::read_to_string(data("sample").join(name)).unwrap();
        let file = data("sample").join(name).display().to_string();
        let keep: Vec<bool> = decisions
            .iter()
            .filter(|d| d["file"] == file)
            .map(|d| d["keep"].as_bool().unwrap())
            .collect();
        let expected: String = input
            .split_inclusive('\n')
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(l, _)| l)
            .collect();
        assert_eq!(keep.len(), input.lines().count());
        assert_eq!(
            std::fs::read_to_string(out.join(name)).unwrap(),
            expected,
            "{name}"
        );
    }
    assert!(out.join("part-2.parquet").exists());
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let t = &report["totals"];
    let n = |k: &str| t[k].as_u64().unwrap();
    assert_eq!(n("records_in"), 500);
    assert_eq!(n("records_in"), n("records_kept") + n("records_dropped"));
    assert_eq!(
        n("samples"),
        n("unique") + n("near") + n("exact") + n("empty") + n("errors")
    );
    let dropped = decisions
        .iter()
        .filter(|d| !d["keep"].as_bool().unwrap())
        .count() as u64;
    assert_eq!(n("records_dropped"), dropped);

    // An existing output directory is refused without --overwrite.
    let again = run(neardup()
        .arg("dedup")
        .arg(data("sample"))
        .arg("-o")
        .arg(&out)
        .arg("-q"));
    assert_eq!(again.status.code(), Some(1));
}

#[test]
fn usage_errors_exit_with_2() {
    let o = run(neardup().args(["dedup", "x.jsonl", "--threshold", "1.5", "-o", "/tmp/never"]));
    assert_eq!(o.status.code(), Some(2));
    let o = run(neardup().args(["dedup", "x.jsonl", "--no-such-flag"]));
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bad_input_is_counted_and_quoted_or_fails_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dec = tmp.path().join("d.jsonl");
    let rep = tmp.path().join("r.json");
    let bad = [
        "malformed.jsonl",
        "invalid_utf8.jsonl",
        "fields.jsonl",
        "truncated.jsonl.gz",
        "corrupt_footer.parquet",
    ];
    let mut cmd = neardup();
    cmd.arg("dedup")
        .arg("--decisions")
        .arg(&dec)
        .arg("--report")
        .arg(&rep)
        .arg("-q");
    for b in bad {
        cmd.arg(data("bad").join(b));
    }
    let o = run(&mut cmd);
    assert!(o.status.success(), "skip is the default");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let s1 = &report["stage1"];
    assert!(
        s1["skipped"]["malformed_json"].as_u64().unwrap() >= 1,
        "{s1}"
    );
    assert!(s1["skipped"]["invalid_utf8"].as_u64().unwrap() >= 1, "{s1}");
    assert!(
        s1["read_errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>()
            >= 2,
        "{s1}"
    );
    let problems = s1["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["file"].as_str().unwrap().ends_with("malformed.jsonl")
                && p["record"].is_u64())
    );
    let t = &report["totals"];
    assert_eq!(
        t["records_in"].as_u64().unwrap(),
        t["records_kept"].as_u64().unwrap() + t["records_dropped"].as_u64().unwrap()
    );
    assert!(t["errors"].as_u64().unwrap() >= 2);

    let o = run(neardup()
        .arg("dedup")
        .arg(data("bad/malformed.jsonl"))
        .args(["--on-error", "fail", "-q", "--decisions"])
        .arg(tmp.path().join("d2.jsonl")));
    assert_eq!(o.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&o.stderr);
    assert!(
        msg.contains("malformed.jsonl") && msg.contains("record"),
        "{msg}"
    );
    assert!(
        !tmp.path().join("d2.jsonl").exists(),
        "no decisions file from a failed run"
    );

    let o = run(neardup()
        .args(["dedup", "/definitely/not/here.jsonl", "-q", "--decisions"])
        .arg(tmp.path().join("d3.jsonl")));
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn params_shows_the_chosen_setting() {
    let o = run(neardup().args(["params", "--threshold", "0.8", "--num-perm", "128"]));
    assert!(o.status.success());
    let s = String::from_utf8(o.stdout).unwrap();
    assert!(s.contains("bands = 20, rows = 6"), "{s}");
    assert!(s.contains("false-positive area"));
}

/// Exact verification, the default, leans to recall; `--verify estimate` keeps the earlier
/// weighting; `params` says which weighting chose the setting and why.
#[test]
fn params_weighting_follows_verify_and_says_why() {
    let params = |extra: &[&str]| {
        let o = run(neardup().arg("params").args(extra));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let exact = params(&["--verify", "exact"]);
    assert_eq!(exact, params(&[]), "exact verification is the default");
    assert!(exact.contains("bands = 20, rows = 6"), "{exact}");
    assert!(
        exact.contains("chosen for --verify exact: false-positive area weighted 0.003"),
        "{exact}"
    );
    assert!(exact.contains("never drop a document"), "{exact}");

    let estimate = params(&["--verify", "estimate"]);
    assert!(estimate.contains("bands = 16, rows = 8"), "{estimate}");
    assert!(
        estimate.contains("chosen for --verify estimate: false-positive area weighted 0.05"),
        "{estimate}"
    );

    let given = params(&["--bands", "16", "--rows", "8"]);
    assert!(given.contains("bands = 16, rows = 8"), "{given}");
    assert!(given.contains("no weighting applies"), "{given}");
}

#[test]
fn interrupted_run_leaves_no_final_named_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    // Enough text that the run is still writing when interrupted.
    let line = |i: usize| {
        format!(
            "{{\"text\":\"document {i} {}\"}}\n",
            "lorem ipsum dolor sit amet ".repeat(40 + i % 7)
        )
    };
    for f in 0..4 {
        let body: String = (0..40_000).map(|i| line(f * 40_000 + i / 2)).collect();
        std::fs::write(input.join(format!("part-{f}.jsonl")), body).unwrap();
    }
    let out = tmp.path().join("out");
    let mut cmd = neardup();
    // So that the SIGINT below interrupts it wherever the tests run.
    support::with_default_signals(&mut cmd);
    let mut child = cmd
        .arg("dedup")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .arg("-q")
        .arg("-j")
        .arg("1")
        .spawn()
        .unwrap();
    // Interrupt once outputs have begun, or after a while.
    for _ in 0..400 {
        if out.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    // A complete run for comparison.
    let full = tmp.path().join("full");
    assert!(
        run(neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&full)
            .arg("-q"))
        .status
        .success()
    );
    if status.success() {
        return; // finished before the signal: nothing to check
    }
    if out.exists() {
        for e in std::fs::read_dir(&out).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue; // a temporary name, never mistaken for output
            }
            assert_eq!(
                std::fs::read(e.path()).unwrap(),
                std::fs::read(full.join(&name)).unwrap(),
                "{name} is partial"
            );
        }
    }
}

#[test]
fn texts_that_normalise_to_nothing_are_empty_not_copies_of_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("kc.jsonl");
    std::fs::write(
        &input,
        "{\"text\":\"hello world\"}\n{\"text\":\"other words\"}\n{\"text\":\"안녕하세요 세계\"}\n",
    )
    .unwrap();
    for cmd in ["exact", "dedup"] {
        let dec = tmp.path().join(format!("{cmd}.jsonl"));
        let o = run(neardup()
            .arg(cmd)
            .arg(&input)
            .args(["--keep-chars", "가-힣", "-q", "--decisions"])
            .arg(&dec));
        assert!(o.status.success());
        let reasons: Vec<String> = read_jsonl(&dec)
            .iter()
            .map(|d| d["reason"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(reasons, ["empty", "empty", "unique"], "{cmd}");
    }
}

/// Settings apply in one order (defaults, the preset's defaults, the settings file, the flags,
/// what the preset pins): a bound on representatives from the settings file survives
/// `--compat lshcurator`, which only changes its default, and 0 in a file means "unbounded".
#[test]
fn a_settings_file_layers_under_flags_and_over_a_presets_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let settings = tmp.path().join("s.toml");
    let report_of = |file: &str, args: &[&str], name: &str| -> Value {
        std::fs::write(&settings, file).unwrap();
        let rep = tmp.path().join(format!("{name}.json"));
        let o = run(neardup()
            .arg("dedup")
            .arg(data("sample"))
            .args(["-q", "--config"])
            .arg(&settings)
            .args(args)
            .arg("--decisions")
            .arg(tmp.path().join(format!("{name}.jsonl")))
            .arg("--report")
            .arg(&rep));
        assert!(o.status.success(), "{name}");
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap()
    };
    let r = report_of(
        "[dedup]\nmax_reps = 8\n",
        &["--compat", "lshcurator"],
        "preset",
    );
    assert_eq!(r["config"]["dedup"]["max_reps"], 8);
    assert_eq!(r["config"]["dedup"]["verify"], "estimate");
    let r = report_of("[dedup]\nmax_reps = 8\n", &["--max-reps", "3"], "flag");
    assert_eq!(r["config"]["dedup"]["max_reps"], 3);
    let r = report_of("[dedup]\nmax_reps = 0\n", &[], "zero");
    assert_eq!(r["config"]["dedup"]["max_reps"], Value::Null);
}

/// `--tokenize ascii-word` cuts texts as hojichar's `non_alpha_num_splitter` does: every
/// character outside `[A-Za-z0-9_]` separates, so two texts that differ only in their accented
/// letters have the same tokens and are duplicates, while Unicode words (`--tokenize word`)
/// keep them apart. The setting is reported under its settings-file name.
#[test]
fn ascii_word_tokens_split_at_every_non_ascii_character() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("accents.jsonl");
    let sentence = |accent: &str| {
        (0..40)
            .map(|i| format!("caf{accent}{i} na{accent}ve_{i} r{accent}sum{accent}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let records = [sentence("é"), sentence("è"), sentence("ü")]
        .iter()
        .map(|t| serde_json::json!({ "text": t }).to_string() + "\n")
        .collect::<String>();
    std::fs::write(&input, records).unwrap();
    let decide = |tokenize: &str| {
        let dec = tmp.path().join(format!("{tokenize}.jsonl"));
        let report = tmp.path().join(format!("{tokenize}.report.json"));
        let o = run(neardup()
            .arg("dedup")
            .arg(&input)
            .args(["--tokenize", tokenize, "-q", "--decisions"])
            .arg(&dec)
            .arg("--report")
            .arg(&report));
        assert!(o.status.success(), "--tokenize {tokenize}");
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(report["config"]["sketch"]["tokenize"], tokenize);
        read_jsonl(&dec)
            .iter()
            .map(|d| (d["keep"].as_bool().unwrap(), d["similarity"].as_f64()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        decide("ascii-word"),
        [(true, None), (false, Some(1.0)), (false, Some(1.0))]
    );
    assert_eq!(decide("word"), [(true, None), (true, None), (true, None)]);
}

/// `--tokenize jieba` shingles Chinese words: near copies of documents of real sentences
/// (Debian's gettext translations, `tests/data/cjk`) are found, and key tables made with jieba
/// and with characters never combine: the tokenizer is part of the settings' fingerprint.
#[test]
fn jieba_words_shingle_chinese_and_tables_of_other_tokenizers_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let sentences: Vec<String> = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cjk/zh.jsonl"),
    )
    .unwrap()
    .lines()
    .map(|l| {
        serde_json::from_str::<Value>(l).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    // Documents of five sentences; the second of each pair drops its last sentence.
    let mut records = String::new();
    for doc in sentences.chunks(5).take(40) {
        let whole = doc.concat();
        let less = doc[..4].concat();
        for text in [whole, less] {
            records += &(serde_json::json!({ "text": text }).to_string() + "\n");
        }
    }
    let input = tmp.path().join("zh.jsonl");
    std::fs::write(&input, records).unwrap();
    let decide = |tokenize: &str| {
        let dec = tmp.path().join(format!("{tokenize}.jsonl"));
        let o = run(neardup()
            .arg("dedup")
            .arg(&input)
            .args([
                "--tokenize",
                tokenize,
                "--shingle",
                "2",
                "--threshold",
                "0.5",
            ])
            .args(["-q", "--decisions"])
            .arg(&dec));
        assert!(o.status.success(), "--tokenize {tokenize}");
        read_jsonl(&dec)
            .iter()
            .map(|d| d["keep"].as_bool().unwrap())
            .collect::<Vec<_>>()
    };
    let words = decide("jieba");
    assert_eq!(words.len(), 80);
    let dropped = words.iter().filter(|k| !**k).count();
    assert!(dropped >= 30, "{dropped} near copies found");
    assert!(
        words.iter().step_by(2).all(|k| *k),
        "every first copy is kept"
    );
    // Key tables of two tokenizers do not combine.
    let table = |tokenize: &str, shard: &str| {
        let out = tmp.path().join(format!("{tokenize}.ndk"));
        let o = run(neardup()
            .arg("keys")
            .arg(&input)
            .args(["--tokenize", tokenize, "--shard", shard, "-q", "--out"])
            .arg(&out));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let (jieba, chars) = (table("jieba", "0"), table("char", "1"));
    let o = run(neardup()
        .arg("hot")
        .arg(&jieba)
        .arg(&chars)
        .arg("--out")
        .arg(tmp.path().join("hot.ndh")));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("settings") || err.contains("fingerprint"),
        "{err}"
    );
}
