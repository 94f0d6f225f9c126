//! The worked custom-scheduler example of docs/tuning.md, run as separate processes of the built
//! binary: stage 1 per shard (`neardup keys`), the merge (`neardup hot`) and stage 2 (`neardup
//! apply`) must give byte for byte the decisions and outputs of one `neardup dedup` over the same
//! inputs in shard order; and the merge must refuse tables made with different settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

/// A file of the bundled sample corpus, as the path string given on the command line (the
/// decisions' `file` column shows inputs as given, so every run must be passed the same strings).
fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sample")
        .join(name)
        .display()
        .to_string()
}

/// Runs a command, echoing its stderr so a failing step explains itself.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run neardup");
    eprintln!("{cmd:?}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {:?}", out.status);
    out
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn read_jsonl(bytes: &[u8]) -> Vec<Value> {
    std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The shards of the example: shard 0 is part-0.jsonl, shard 1 is part-1.jsonl + part-2.parquet.
fn shards() -> [Vec<String>; 2] {
    [
        vec![sample("part-0.jsonl")],
        vec![sample("part-1.jsonl"), sample("part-2.parquet")],
    ]
}

/// `neardup keys` for each shard, in its own process; returns the table paths in shard order.
fn keys_per_shard(dir: &Path, extra: &[&[&str]; 2]) -> Vec<PathBuf> {
    shards()
        .iter()
        .enumerate()
        .map(|(n, inputs)| {
            let table = dir.join(format!("keys-{n}.ndk"));
            run_ok(
                neardup()
                    .arg("keys")
                    .args(inputs)
                    .args(["--shard", &n.to_string(), "--id-field", "id"])
                    .args(extra[n])
                    .arg("--out")
                    .arg(&table),
            );
            assert!(table.is_file(), "{} not written", table.display());
            table
        })
        .collect()
}

#[test]
fn keys_hot_apply_over_shards_equal_one_dedup_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let all: Vec<String> = shards().concat();

    // The reference: one process, both stages.
    let single_out = dir.join("single");
    let single_dec = dir.join("single.decisions.jsonl");
    run_ok(
        neardup()
            .arg("dedup")
            .args(&all)
            .args(["--id-field", "id", "-q"])
            .arg("--output")
            .arg(&single_out)
            .arg("--decisions")
            .arg(&single_dec),
    );

    // The same job split: stage 1 per shard (with other thread counts, which must not matter),
    // the merge, then stage 2 over all shards.
    let tables = keys_per_shard(dir, &[&["-j", "1"], &["-j", "2"]]);
    let hot = dir.join("hot.ndh");
    // Tables are merged in shard-number order whatever order they are given in.
    let merged = run_ok(
        neardup()
            .arg("hot")
            .arg(&tables[1])
            .arg(&tables[0])
            .arg("--out")
            .arg(&hot),
    );
    let merge_summary = String::from_utf8_lossy(&merged.stderr);
    assert!(
        merge_summary.starts_with("2 tables,"),
        "unexpected merge summary: {merge_summary}"
    );
    let split_out = dir.join("split");
    let split_dec = dir.join("split.decisions.jsonl");
    run_ok(
        neardup()
            .arg("apply")
            .arg("--hot")
            .arg(&hot)
            .arg("--keys")
            .arg(&tables[0])
            .arg("--keys")
            .arg(&tables[1])
            .args(["--id-field", "id", "-q"])
            .arg("--decisions")
            .arg(&split_dec)
            .arg("--output")
            .arg(&split_out),
    );

    let single = std::fs::read(&single_dec).unwrap();
    let split = std::fs::read(&split_dec).unwrap();
    assert!(
        single == split,
        "decisions differ between `dedup` and `keys` + `hot` + `apply`"
    );

    let single_files = tree(&single_out);
    let split_files = tree(&split_out);
    assert_eq!(
        single_files.keys().collect::<Vec<_>>(),
        split_files.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &single_files {
        if name.as_os_str() == "_SUCCESS" {
            // The manifests name different runs; they list the same files.
            let files = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap()["files"].clone();
            assert_eq!(files(&split_files[name]), files(bytes));
            continue;
        }
        assert!(&split_files[name] == bytes, "{} differs", name.display());
    }

    // The comparison means something only if the split run had to find duplicates across
    // shards: some sample of shard 1 is dropped as a copy of a sample of shard 0.
    let decisions = read_jsonl(&split);
    assert_eq!(decisions.len(), 500);
    let part0 = sample("part-0.jsonl");
    let cross_shard = decisions.iter().filter(|d| {
        d["keep"] == false && d["file"] != part0.as_str() && d["dup_of_file"] == part0.as_str()
    });
    assert!(
        cross_shard.count() > 0,
        "no duplicate across shards in the sample: the test checks nothing"
    );
    // And it wrote a dataset: every input file has its filtered output, and the manifest.
    assert_eq!(split_files.len(), 4);
}

/// `hot` under a memory limit far below the tables' size counts from spill files, and the
/// hot-key file is byte-identical to the in-memory merge's; `apply` then streams the tables.
#[test]
fn hot_under_a_memory_limit_spills_and_writes_the_same_hot_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tables = keys_per_shard(dir, &[&[], &[]]);
    let in_memory = dir.join("hot-mem.ndh");
    run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .arg("--out")
            .arg(&in_memory),
    );
    let spilled = dir.join("hot-spill.ndh");
    let spill_dir = dir.join("spill");
    std::fs::create_dir(&spill_dir).unwrap();
    let o = run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .arg("--out")
            .arg(&spilled)
            .args(["--memory-limit", "1KB"])
            .arg("--spill-dir")
            .arg(&spill_dir),
    );
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(summary.contains("(spilled)"), "did not spill: {summary}");
    assert!(
        std::fs::read(&in_memory).unwrap() == std::fs::read(&spilled).unwrap(),
        "spilled and in-memory merges wrote different hot keys"
    );
    assert_eq!(
        std::fs::read_dir(&spill_dir).unwrap().count(),
        0,
        "spill files left behind"
    );
}

#[test]
fn keys_refuses_stage_two_output_flags_instead_of_ignoring_them() {
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("k.ndk");
    let decisions = tmp.path().join("d.jsonl");
    let o = run(neardup()
        .arg("keys")
        .arg(sample("part-0.jsonl"))
        .arg("--out")
        .arg(&table)
        .arg("--decisions")
        .arg(&decisions));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("neardup apply"),
        "unclear message: {stderr}"
    );
    assert!(!table.exists() && !decisions.exists());
}

#[test]
fn hot_refuses_tables_made_with_different_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tables = keys_per_shard(dir, &[&[], &["--num-perm", "64"]]);
    let hot = dir.join("hot.ndh");
    let o = run(neardup()
        .arg("hot")
        .arg(&tables[0])
        .arg(&tables[1])
        .arg("--out")
        .arg(&hot));
    assert!(!o.status.success());
    assert_ne!(o.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("different settings"),
        "unclear message: {stderr}"
    );
    assert!(!hot.exists(), "a hot-key file was written anyway");
}

#[test]
fn apply_refuses_settings_other_than_the_hot_keys_were_made_with() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tables = keys_per_shard(dir, &[&[], &[]]);
    let hot = dir.join("hot.ndh");
    run_ok(neardup().arg("hot").args(&tables).arg("--out").arg(&hot));
    let dec = dir.join("d.jsonl");
    let o = run(neardup()
        .arg("apply")
        .arg("--hot")
        .arg(&hot)
        .arg("--keys")
        .arg(&tables[0])
        .arg("--keys")
        .arg(&tables[1])
        .args(["--id-field", "id", "--shingle", "7"])
        .arg("--decisions")
        .arg(&dec));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("do not match these settings"),
        "unclear message: {stderr}"
    );
    assert!(!dec.exists(), "decisions were written anyway");
}

/// Without --bands and --rows, --verify chooses them: stage 1 takes the later steps' --verify,
/// and a table made under the other weighting is refused, naming the bands.
#[test]
fn keys_takes_verify_because_it_chooses_the_bands() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let all: Vec<String> = shards().concat();
    let apply = |tables: &[PathBuf], hot: &Path, dec: &Path| {
        run(neardup()
            .arg("apply")
            .arg("--hot")
            .arg(hot)
            .args(tables)
            .args(["--id-field", "id", "--verify", "estimate", "-q"])
            .arg("--decisions")
            .arg(dec))
    };

    // Made under the default (exact) weighting, used under the estimate's: refused.
    let default_dir = dir.join("default");
    std::fs::create_dir(&default_dir).unwrap();
    let tables = keys_per_shard(&default_dir, &[&[], &[]]);
    let hot = default_dir.join("hot.ndh");
    run_ok(neardup().arg("hot").args(&tables).arg("--out").arg(&hot));
    let refused = default_dir.join("d.jsonl");
    let o = apply(&tables, &hot, &refused);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("bands"),
        "the bands are not named: {stderr}"
    );
    assert!(!refused.exists(), "decisions were written anyway");

    // Made with the same --verify: the decisions of one run.
    let tables = keys_per_shard(dir, &[&["--verify", "estimate"], &["--verify", "estimate"]]);
    let hot = dir.join("hot.ndh");
    run_ok(neardup().arg("hot").args(&tables).arg("--out").arg(&hot));
    let split = dir.join("split.jsonl");
    let o = apply(&tables, &hot, &split);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let single = dir.join("single.jsonl");
    run_ok(
        neardup()
            .arg("dedup")
            .args(&all)
            .args(["--id-field", "id", "--verify", "estimate", "-q"])
            .arg("--decisions")
            .arg(&single),
    );
    assert!(std::fs::read(&single).unwrap() == std::fs::read(&split).unwrap());
}

#[test]
fn keys_and_hot_write_reports_that_account_for_every_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let reports = [dir.join("keys-0.json"), dir.join("keys-1.json")];
    let tables = keys_per_shard(
        dir,
        &[
            &["--report", reports[0].to_str().unwrap()],
            &["--report", reports[1].to_str().unwrap()],
        ],
    );
    let hot_report = dir.join("hot.json");
    run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .args(["-j", "1", "--out"])
            .arg(dir.join("hot.ndh"))
            .arg("--report")
            .arg(&hot_report),
    );
    let read = |p: &Path| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let shard_reports: Vec<Value> = reports.iter().map(|p| read(p)).collect();
    let mut samples = 0;
    for (n, r) in shard_reports.iter().enumerate() {
        assert_eq!(r["shard"], n as u64);
        assert_eq!(r["table"], tables[n].to_str().unwrap());
        assert_eq!(r["inputs"].as_array().unwrap().len(), shards()[n].len());
        samples += r["stage1"]["samples"].as_u64().unwrap();
    }
    // The bundled sample: 500 records, one text each, none unreadable.
    let records: u64 = shard_reports
        .iter()
        .map(|r| r["stage1"]["records"].as_u64().unwrap())
        .sum();
    assert_eq!((records, samples), (500, 500));
    let hot = read(&hot_report);
    assert_eq!(hot["samples"], samples);
    assert_eq!(hot["tables"].as_array().unwrap().len(), 2);
    let hot_samples = hot["hot_samples"].as_u64().unwrap();
    assert!(hot_samples > 0 && hot_samples < samples, "{hot}");
    assert!(hot["count"]["hot_keys"].as_u64().unwrap() > 0, "{hot}");
}

#[test]
fn each_staged_command_lists_only_the_options_it_uses() {
    let help = |cmd: &str| {
        let o = run_ok(neardup().args([cmd, "--help"]));
        String::from_utf8(o.stdout).unwrap()
    };
    let keys = help("keys");
    // --verify is there: without --bands and --rows it chooses them (docs/tuning.md).
    for absent in ["--decisions", "--max-reps", "--prefer", "--min-key-count"] {
        assert!(
            !keys.contains(absent),
            "keys --help lists {absent}:\n{keys}"
        );
    }
    // Its -o/--output is the key table, as every command names its main output.
    for present in [
        "--num-perm",
        "--field",
        "--report",
        "--shard",
        "--no-exact",
        "--verify",
        "-o, --output",
    ] {
        assert!(
            keys.contains(present),
            "keys --help lacks {present}:\n{keys}"
        );
    }
    let apply = help("apply");
    assert!(
        !apply.contains("--min-key-count"),
        "apply --help lists --min-key-count:\n{apply}"
    );
    // Its --memory-limit bounds stage 2: the decision state and the hot mask.
    for present in [
        "--output",
        "--decisions",
        "--max-reps",
        "--num-perm",
        "--spill-dir",
        "--memory-limit",
    ] {
        assert!(
            apply.contains(present),
            "apply --help lacks {present}:\n{apply}"
        );
    }
    // The per-shard steps bound their hot masks with it.
    for cmd in ["sign", "write"] {
        let text = help(cmd);
        for present in ["--memory-limit", "--spill-dir"] {
            assert!(text.contains(present), "{cmd} --help lacks {present}");
        }
        assert!(
            !text.contains("--min-key-count"),
            "{cmd} --help lists --min-key-count"
        );
    }
    let exact = help("exact");
    for absent in ["--num-perm", "--threshold", "--max-reps"] {
        assert!(
            !exact.contains(absent),
            "exact --help lists {absent}:\n{exact}"
        );
    }
}
