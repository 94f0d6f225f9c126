//! End-to-end refusals of the `neardup` binary: outputs that would overwrite, sit inside or
//! contain an input, or collide; inputs that name nothing or cannot be read twice; absurd
//! settings; a hot-key file applied to other tables; a closed stdout; and the CLI's consistency
//! (`-o` everywhere, positional inputs, docs that agree with `--help`).
//!
//! Every refusal is checked to come before any work: exit code 2 (1 for unusable inputs), the
//! message naming the paths, and the working directory byte for byte as it was (no output, no
//! temporary file, inputs intact).
//!
//! `NEARDUP_BIN=/path/to/neardup cargo test --test cli_safety` runs the same checks against
//! another build (how they were confirmed to fail on the build before these checks).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    std::env::var_os("NEARDUP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_neardup")))
}

fn sample(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sample")
        .join(name)
}

/// A command run in `dir`, so that relative paths are spelled as a user would.
fn neardup(dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(dir).arg("-q");
    c
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` for at most `limit`; a run still going then is killed and fails the test.
fn run_within(cmd: &mut Command, limit: Duration) -> Ran {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start neardup");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("still running after {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    eprintln!("{cmd:?}\n  -> {:?}: {}", ran.code, ran.stderr);
    ran
}

fn run(cmd: &mut Command) -> Ran {
    run_within(cmd, Duration::from_secs(120))
}

fn run_ok(cmd: &mut Command) -> Ran {
    let ran = run(cmd);
    assert_eq!(ran.code, Some(0), "{cmd:?} failed: {}", ran.stderr);
    ran
}

/// Every file under `dir` with its bytes, and every directory: what a refused run must leave as
/// it found it.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    Some(
                        std::fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ),
                );
            } else if meta.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else if meta.is_file() {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            } else {
                out.insert(rel, Some(b"<special>".to_vec()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The run was refused with `code` before doing anything: the message names every one of
/// `names`, no panic, and `dir` is exactly as before.
fn refused(
    ran: &Ran,
    code: i32,
    names: &[&str],
    dir: &Path,
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) {
    assert_eq!(ran.code, Some(code), "expected exit {code}: {}", ran.stderr);
    for name in names {
        assert!(
            ran.stderr.contains(name),
            "the message does not name {name}: {}",
            ran.stderr
        );
    }
    assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
    let after = snapshot(dir);
    let changed: Vec<_> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, _)| k)
        .chain(before.keys().filter(|k| !after.contains_key(*k)))
        .collect();
    assert!(changed.is_empty(), "a refused run changed {changed:?}");
}

/// `dir/in/a.jsonl` and `dir/in/b.jsonl`: two files of the bundled sample.
fn corpus() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("in")).unwrap();
    std::fs::copy(sample("part-0.jsonl"), tmp.path().join("in/a.jsonl")).unwrap();
    std::fs::copy(sample("part-1.jsonl"), tmp.path().join("in/b.jsonl")).unwrap();
    tmp
}

#[test]
fn outputs_that_are_inputs_are_refused_by_any_spelling() {
    let tmp = corpus();
    let dir = tmp.path();
    std::os::unix::fs::symlink("in/a.jsonl", dir.join("link.jsonl")).unwrap();
    std::fs::hard_link(dir.join("in/a.jsonl"), dir.join("hard.jsonl")).unwrap();
    std::os::unix::fs::symlink("in", dir.join("lin")).unwrap();
    let before = snapshot(dir);
    let absolute = dir.join("in/a.jsonl").display().to_string();
    for spelling in [
        "in/a.jsonl",
        "./in/../in/a.jsonl",
        "lin/a.jsonl",
        "link.jsonl",
        "hard.jsonl",
        "not-yet/../in/a.jsonl",
        absolute.as_str(),
    ] {
        let ran = run(neardup(dir).args(["dedup", "in", "--decisions", spelling]));
        refused(&ran, 2, &["--decisions", spelling, "a.jsonl"], dir, &before);
        let ran = run(neardup(dir).args(["exact", "in", "-o", "out", "--report", spelling]));
        refused(&ran, 2, &["--report", spelling], dir, &before);
    }
    // Onto a file of the filtered dataset.
    let ran = run(neardup(dir).args(["dedup", "in", "-o", "out", "--decisions", "out/a.jsonl"]));
    refused(
        &ran,
        2,
        &["--decisions", "out/a.jsonl", "--output"],
        dir,
        &before,
    );
    // Two outputs on one file.
    let ran = run(neardup(dir).args([
        "dedup",
        "in",
        "--decisions",
        "x.json",
        "--report",
        "./x.json",
    ]));
    refused(
        &ran,
        2,
        &["--decisions", "--report", "x.json"],
        dir,
        &before,
    );
}

#[test]
fn an_output_directory_over_or_around_the_inputs_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("in")).unwrap();
    // The case that lost data: part-1.jsonl was taken for a split part of part.jsonl.
    std::fs::copy(sample("part-0.jsonl"), dir.join("in/part.jsonl")).unwrap();
    std::fs::copy(sample("part-1.jsonl"), dir.join("in/part-1.jsonl")).unwrap();
    std::os::unix::fs::symlink("in", dir.join("lin")).unwrap();
    let before = snapshot(dir);
    for args in [
        &["dedup", "in", "-o", "in", "--overwrite"][..],
        &["dedup", "in", "-o", "lin", "--overwrite"],
        &["dedup", "in/part.jsonl", "-o", "in", "--overwrite"],
        &["dedup", "in/part.jsonl", "-o", ".", "--overwrite"],
        &["exact", "lin", "-o", "in/..", "--overwrite"],
    ] {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 2, &["--output", args[3]], dir, &before);
    }
}

#[test]
fn outputs_inside_the_input_tree_are_refused_not_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("crawl/sub")).unwrap();
    std::fs::copy(sample("part-0.jsonl"), dir.join("crawl/a.jsonl")).unwrap();
    std::fs::copy(sample("part-1.jsonl"), dir.join("crawl/sub/b.jsonl")).unwrap();
    let before = snapshot(dir);
    for args in [
        &["dedup", "crawl/", "-o", "crawl/out"][..],
        &["dedup", "crawl", "--decisions", "crawl/sub/decisions.jsonl"],
        &[
            "dedup",
            "crawl",
            "-o",
            "out",
            "--report",
            "crawl/report.json",
        ],
        &["exact", "crawl", "-o", "crawl/sub/out"],
        &["dedup", "crawl/**/*.jsonl", "-o", "crawl/out"],
        &["dedup", "crawl/*.jsonl", "--decisions", "crawl/d.jsonl"],
        &["dedup", "crawl", "-o", "out", "--spill-dir", "crawl/spill"],
    ] {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 2, &[args[3], "outside the input tree"], dir, &before);
    }
    // What a glob cannot read is fine: `crawl/*.jsonl` reads neither crawl/out/ nor a .json file.
    run_ok(neardup(dir).args([
        "dedup",
        "crawl/*.jsonl",
        "-o",
        "crawl/out",
        "--report",
        "crawl/r.json",
    ]));
    run_ok(neardup(dir).args(["dedup", "crawl/*.jsonl", "-o", "crawl/out2"]));
}

/// `neardup keys` for the sample's three files as shards 0, 1, 2, in `dir`; returns the tables.
fn shard_tables(dir: &Path, extra: &[&str]) -> Vec<String> {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    (0..3)
        .map(|n| {
            let name = if n == 2 {
                "part-2.parquet".to_string()
            } else {
                format!("part-{n}.jsonl")
            };
            let input = dir.join("data").join(&name);
            if !input.exists() {
                std::fs::copy(sample(&name), &input).unwrap();
            }
            let table = format!("keys-{n}.ndk");
            run_ok(
                neardup(dir)
                    .args([
                        "keys",
                        &format!("data/{name}"),
                        "--shard",
                        &n.to_string(),
                        "--out",
                        &table,
                    ])
                    .args(extra),
            );
            table
        })
        .collect()
}

#[test]
fn staged_commands_refuse_outputs_over_their_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = shard_tables(dir, &[]);
    run_ok(neardup(dir).args(["hot", &t[0], &t[1], &t[2], "--out", "hot.ndh"]));
    run_ok(neardup(dir).args(["dedup", "data", "--decisions", "d.jsonl"]));
    let before = snapshot(dir);
    let cases: [(&[&str], &[&str]); 10] = [
        (
            &["keys", "data/part-0.jsonl", "--out", "data/part-0.jsonl"],
            &["data/part-0.jsonl"],
        ),
        (
            &["keys", "data", "--out", "data/keys.ndk"],
            &["data/keys.ndk", "outside the input tree"],
        ),
        (
            &[
                "keys",
                "data/part-0.jsonl",
                "--out",
                "k.ndk",
                "--report",
                "data/part-0.jsonl",
            ],
            &["--report"],
        ),
        (
            &["hot", &t[0], &t[1], &t[2], "--out", &t[0]],
            &[&t[0], "key table"],
        ),
        (
            &[
                "hot", &t[0], &t[1], &t[2], "--out", "h.ndh", "--report", &t[1],
            ],
            &["--report", &t[1]],
        ),
        (
            &[
                "apply",
                "--hot",
                "hot.ndh",
                "--keys",
                &t[0],
                "--keys",
                &t[1],
                "--keys",
                &t[2],
                "--decisions",
                "data/part-1.jsonl",
            ],
            &["--decisions", "part-1.jsonl"],
        ),
        (
            &[
                "apply",
                "--hot",
                "hot.ndh",
                "--keys",
                &t[0],
                "--keys",
                &t[1],
                "--keys",
                &t[2],
                "-o",
                "out",
                "--decisions",
                &t[2],
            ],
            &["--decisions", &t[2]],
        ),
        (
            &[
                "apply",
                "--hot",
                "hot.ndh",
                "--keys",
                &t[0],
                "--keys",
                &t[1],
                "--keys",
                &t[2],
                "-o",
                "data",
                "--overwrite",
            ],
            &["--output", "data"],
        ),
        (
            &[
                "eval",
                "--inputs",
                "data",
                "--decisions",
                "d.jsonl",
                "--eval-report",
                "d.jsonl",
            ],
            &["--eval-report", "d.jsonl"],
        ),
        (
            &[
                "eval",
                "--inputs",
                "data",
                "--decisions",
                "d.jsonl",
                "--eval-report",
                "data/part-0.jsonl",
            ],
            &["--eval-report", "part-0.jsonl"],
        ),
    ];
    for (args, names) in cases {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 2, names, dir, &before);
    }
}

/// The distributed steps of `shard_tables`' three shards in `dir`, planned in two groups:
/// `hot.ndh`, `sig-0` … `sig-2` and `dec-0`, `dec-1`; returns the tables.
fn distributed_steps(dir: &Path) -> Vec<String> {
    let t = shard_tables(dir, &[]);
    run_ok(neardup(dir).args(["hot", &t[0], &t[1], &t[2], "--groups", "2", "-o", "hot.ndh"]));
    for (i, table) in t.iter().enumerate() {
        run_ok(neardup(dir).args(["sign", table, "--hot", "hot.ndh", "-o", &format!("sig-{i}")]));
    }
    for g in 0..2 {
        run_ok(neardup(dir).args([
            "decide",
            "sig-0",
            "sig-1",
            "sig-2",
            "--hot",
            "hot.ndh",
            "--group",
            &g.to_string(),
            "-o",
            &format!("dec-{g}"),
        ]));
    }
    t
}

#[test]
fn distributed_steps_refuse_outputs_over_what_the_run_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = distributed_steps(dir);
    std::os::unix::fs::symlink("data/part-0.jsonl", dir.join("link.jsonl")).unwrap();
    std::fs::hard_link(dir.join("data/part-1.jsonl"), dir.join("hard.jsonl")).unwrap();
    std::fs::hard_link(dir.join("data/part-0.jsonl"), dir.join("hard-0.jsonl")).unwrap();
    let before = snapshot(dir);
    let hot = |rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["hot", &t[0], &t[1], &t[2], "--groups", "2"]
            .map(String::from)
            .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let sign = |rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["sign", &t[0], "--hot", "hot.ndh"]
            .map(String::from)
            .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let decide = |rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "decide", "sig-0", "sig-1", "sig-2", "--hot", "hot.ndh", "--group", "0",
        ]
        .map(String::from)
        .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let write = |rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "write",
            &t[0],
            "--hot",
            "hot.ndh",
            "--decided",
            "dec-0",
            "--decided",
            "dec-1",
        ]
        .map(String::from)
        .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    // Each with the paths its message must name: all exit code 2, nothing touched.
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        // The input files the key tables name are the run's inputs: every later step reads them.
        (
            hot(&["-o", "data/part-0.jsonl"]),
            vec!["--output", "data/part-0.jsonl", "input file"],
        ),
        (
            hot(&["-o", "h.ndh", "--report", "data/part-2.parquet"]),
            vec!["--report", "data/part-2.parquet"],
        ),
        (
            hot(&["-o", "hard.jsonl"]),
            vec!["hard.jsonl", "data/part-1.jsonl", "(the same file)"],
        ),
        (hot(&["-o", "link.jsonl"]), vec!["link.jsonl"]),
        // An earlier step's output directory holds only that step's files.
        (
            hot(&["-o", "sig-0/shard-00000.bin"]),
            vec!["sig-0/shard-00000.bin", "the sign output"],
        ),
        (
            sign(&["-o", "s", "--report", "data/part-0.jsonl"]),
            vec!["--report", "data/part-0.jsonl"],
        ),
        (
            sign(&["-o", "s", "--report", "./data/../data/part-0.jsonl"]),
            vec!["--report", "part-0.jsonl"],
        ),
        // `sign` knows the files of its own shard only (the other shards' are in their key
        // tables); `decide` and `write` know every shard's (from the sign manifests).
        (
            sign(&["-o", "s", "--report", "hard-0.jsonl"]),
            vec!["hard-0.jsonl", "data/part-0.jsonl", "(the same file)"],
        ),
        (
            sign(&["-o", "s", "--report", &t[0]]),
            vec!["--report", &t[0], "key table"],
        ),
        (
            sign(&["-o", "s", "--report", "hot.ndh"]),
            vec!["--report", "hot.ndh", "--hot"],
        ),
        (
            sign(&["-o", "data"]),
            vec!["the sign output (-o) data", "input file"],
        ),
        (
            sign(&["-o", "s", "--report", "s/report.json"]),
            vec!["s/report.json", "inside the sign output (-o) s"],
        ),
        (
            decide(&["-o", "d", "--report", "sig-1/manifest.json"]),
            vec!["--report", "sig-1/manifest.json", "the sign output"],
        ),
        (
            decide(&["-o", "d", "--report", "sig-2/group-00000.bin"]),
            vec!["--report", "sig-2/group-00000.bin"],
        ),
        (decide(&["-o", "sig-0"]), vec!["sig-0", "the sign output"]),
        (
            decide(&["-o", "data"]),
            vec!["the decide output (-o) data", "input file"],
        ),
        (
            decide(&["-o", "d", "--report", "data/part-1.jsonl"]),
            vec!["--report", "data/part-1.jsonl"],
        ),
        (
            write(&["--decisions", "x.jsonl", "--report", "dec-0/manifest.json"]),
            vec!["--report", "dec-0/manifest.json", "the decide output"],
        ),
        (
            write(&["--decisions", "dec-1/manifest.json"]),
            vec!["--decisions", "dec-1/manifest.json"],
        ),
        (
            write(&["--decisions", "dec-1/shard-00000.bin"]),
            vec!["--decisions", "dec-1/shard-00000.bin"],
        ),
        // Another shard's input: the run's, which that shard's `write` reads.
        (
            write(&["--decisions", "hard.jsonl"]),
            vec![
                "--decisions",
                "hard.jsonl",
                "data/part-1.jsonl",
                "(the same file)",
            ],
        ),
        (
            decide(&["-o", "d", "--report", "hard.jsonl"]),
            vec!["--report", "hard.jsonl", "data/part-1.jsonl"],
        ),
        (
            write(&["--decisions", "data/part-2.parquet"]),
            vec!["--decisions", "data/part-2.parquet"],
        ),
        (
            write(&["-o", "sig-1", "--decisions", "x.jsonl"]),
            vec!["--output", "sig-1", "earlier `sign` step"],
        ),
    ];
    for (args, names) in cases {
        let ran = run(neardup(dir).args(&args));
        refused(&ran, 2, &names, dir, &before);
    }
    // A directory that is not empty is no step's to write into (exit code 1, as a refused
    // publication): another step's output, or an earlier output of the same step without
    // --overwrite.
    for (args, names) in [
        (
            sign(&["-o", "dec-0"]),
            vec!["dec-0", "not empty", "--overwrite"],
        ),
        (sign(&["-o", "sig-0"]), vec!["sig-0", "not empty"]),
        (decide(&["-o", "dec-1"]), vec!["dec-1", "not empty"]),
        (
            sign(&["-o", "dec-0", "--overwrite"]),
            vec!["dec-0/manifest.json", "earlier `sign` output"],
        ),
    ] {
        let ran = run(neardup(dir).args(&args));
        refused(&ran, 1, &names, dir, &before);
    }
}

#[test]
fn a_step_with_overwrite_replaces_only_its_own_earlier_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = distributed_steps(dir);
    let signed = snapshot(&dir.join("sig-0"));
    let sign = || {
        let mut cmd = neardup(dir);
        cmd.args(["sign", &t[0], "--hot", "hot.ndh", "-o", "sig-0"]);
        cmd
    };
    run_ok(sign().arg("--overwrite"));
    assert_eq!(snapshot(&dir.join("sig-0")), signed, "the same bytes again");
    // A file its manifest does not list is not its to replace.
    std::fs::write(dir.join("sig-0/notes.txt"), b"mine").unwrap();
    let before = snapshot(dir);
    let ran = run(sign().arg("--overwrite"));
    refused(&ran, 1, &["sig-0/notes.txt", "does not list"], dir, &before);
    let decided = snapshot(&dir.join("dec-1"));
    run_ok(neardup(dir).args([
        "decide",
        "sig-0",
        "sig-1",
        "sig-2",
        "--hot",
        "hot.ndh",
        "--group",
        "1",
        "-o",
        "dec-1",
        "--overwrite",
    ]));
    assert_eq!(snapshot(&dir.join("dec-1")), decided);
}

#[test]
fn everything_checkable_is_checked_before_stage_1() {
    let tmp = corpus();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::copy(sample("part-1.jsonl"), dir.join("other/a.jsonl")).unwrap();
    std::fs::write(dir.join("plain"), b"not a directory\n").unwrap();
    let before = snapshot(dir);
    // Two inputs that would be written to one output file.
    let ran = run(neardup(dir).args(["dedup", "in/a.jsonl", "other/a.jsonl", "-o", "out"]));
    refused(
        &ran,
        2,
        &["in/a.jsonl", "other/a.jsonl", "out/a.jsonl"],
        dir,
        &before,
    );
    // Places that cannot be written.
    for (args, names) in [
        (
            &["dedup", "in", "-o", "out", "--decisions", "plain/d.jsonl"][..],
            &["--decisions", "plain/d.jsonl", "not a directory"][..],
        ),
        (
            &["dedup", "in", "-o", "plain/out"],
            &["--output", "plain/out", "not a directory"],
        ),
        (
            &["dedup", "in", "-o", "out", "--report", "."],
            &["--report", "is a directory"],
        ),
        (
            &["dedup", "in", "-o", "out", "--spill-dir", "plain"],
            &["--spill-dir", "plain", "not a directory"],
        ),
    ] {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 2, names, dir, &before);
    }

    // A spill directory that does not exist yet is created for the run, for dedup and for hot,
    // and removed after it (with the parents made for it): no empty directory is left behind.
    let reference = dir.join("reference.jsonl");
    run_ok(
        neardup(dir)
            .args(["dedup", "in", "--decisions"])
            .arg(&reference),
    );
    run_ok(neardup(dir).args([
        "dedup",
        "in",
        "--decisions",
        "spilled.jsonl",
        "--memory-limit",
        "1",
        "--spill-dir",
        "spill/deeper",
    ]));
    assert!(!dir.join("spill").exists());
    assert_eq!(
        std::fs::read(&reference).unwrap(),
        std::fs::read(dir.join("spilled.jsonl")).unwrap()
    );
    let t = shard_tables(dir, &[]);
    run_ok(neardup(dir).args([
        "hot",
        &t[0],
        &t[1],
        &t[2],
        "--out",
        "h.ndh",
        "--memory-limit",
        "1",
        "--spill-dir",
        "hot-spill",
    ]));
    assert!(!dir.join("hot-spill").exists() && dir.join("h.ndh").is_file());
}

#[test]
fn mistyped_and_unusable_inputs_are_errors() {
    let tmp = corpus();
    let dir = tmp.path();
    std::fs::copy(sample("part-0.jsonl"), dir.join("notes.txt")).unwrap();
    let before = snapshot(dir);
    for (args, names) in [
        (
            &["dedup", "in/a.jsonl", "in/tpyo.jsonl", "-o", "out"][..],
            &["in/tpyo.jsonl", "no such file"][..],
        ),
        (
            &[
                "dedup",
                "in",
                "in/*.jsnol",
                "-o",
                "out",
                "--on-error",
                "skip",
            ],
            &["in/*.jsnol", "matched no file"],
        ),
        (
            &["exact", "in", "notes.txt", "--decisions", "d.jsonl"],
            &["notes.txt", "--format"],
        ),
        (
            &["keys", "in/a.jsonl", "gone.jsonl", "--out", "k.ndk"],
            &["gone.jsonl"],
        ),
    ] {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 1, names, dir, &before);
    }
    // Named with its format, the file is read; met while walking a directory, a file of unknown
    // format is reported and left out, as before.
    run_ok(neardup(dir).args([
        "dedup",
        "notes.txt",
        "--format",
        "jsonl",
        "--decisions",
        "d1.jsonl",
    ]));
    std::fs::write(dir.join("in/README.md"), b"# about\n").unwrap();
    let ran = run_ok(neardup(dir).args([
        "dedup",
        "in",
        "--decisions",
        "d2.jsonl",
        "--report",
        "r.json",
    ]));
    assert!(ran.stderr.is_empty());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("r.json")).unwrap()).unwrap();
    assert!(
        report["input_problems"][0]
            .as_str()
            .unwrap()
            .contains("README.md"),
        "{report}"
    );
}

#[test]
fn streams_are_refused_up_front() {
    let tmp = corpus();
    let dir = tmp.path();
    assert!(
        Command::new("mkfifo")
            .arg(dir.join("stream.jsonl"))
            .status()
            .unwrap()
            .success()
    );
    let before = snapshot(dir);
    // A reader of a pipe would wait for a writer forever: the refusal must come first.
    for input in ["stream.jsonl", "-", "/dev/stdin"] {
        let ran = run_within(
            neardup(dir).args(["dedup", "in", input, "-o", "out"]),
            Duration::from_secs(20),
        );
        refused(&ran, 1, &[input, "twice"], dir, &before);
    }
}

#[test]
fn file_names_that_are_not_utf8_are_refused_before_any_output() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = corpus();
    let dir = tmp.path();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.jsonl");
    std::fs::copy(sample("part-0.jsonl"), dir.join("in").join(name)).unwrap();
    let before = snapshot(dir);
    let ran = run(neardup(dir).args([
        "dedup",
        "in",
        "-o",
        "out",
        "--decisions",
        "d.jsonl",
        "--report",
        "r.json",
    ]));
    refused(&ran, 1, &["caf\u{fffd}.jsonl", "UTF-8"], dir, &before);
}

#[test]
fn apply_refuses_tables_other_than_those_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = shard_tables(dir, &[]);
    run_ok(neardup(dir).args(["hot", &t[0], &t[1], &t[2], "--out", "hot.ndh"]));
    let before = snapshot(dir);
    // Shard 1 left out: the run used to keep 5,552 records of a corpus that keeps 2,326.
    let ran = run(neardup(dir).args([
        "apply",
        "--hot",
        "hot.ndh",
        "--keys",
        &t[0],
        "--keys",
        &t[2],
        "-o",
        "out",
        "--decisions",
        "d.jsonl",
    ]));
    refused(
        &ran,
        2,
        &["shard 1", "missing", "neardup hot"],
        dir,
        &before,
    );
    // A table made again after hot ran (other inputs for shard 1).
    run_ok(neardup(dir).args(["keys", "data/part-0.jsonl", "--shard", "1", "--out", &t[1]]));
    let before = snapshot(dir);
    let ran = run(neardup(dir).args([
        "apply",
        "--hot",
        "hot.ndh",
        "--keys",
        &t[0],
        "--keys",
        &t[1],
        "--keys",
        &t[2],
        "--decisions",
        "d.jsonl",
    ]));
    refused(&ran, 2, &[&t[1], "shard 1", "neardup hot"], dir, &before);
}

#[test]
fn absurd_settings_are_refused_at_once_and_params_answers_at_once() {
    let tmp = corpus();
    let dir = tmp.path();
    let before = snapshot(dir);
    let quick = Duration::from_secs(20);
    for (args, names) in [
        (
            &["dedup", "in", "-o", "out", "--threads", "20000"][..],
            &["--threads", "1024"][..],
        ),
        (
            &["hot", "x.ndk", "-o", "h.ndh", "-j", "5000"],
            &["--threads", "1024"],
        ),
        (
            &["params", "--num-perm", "100000"],
            &["--num-perm", "16384"],
        ),
        (
            &["dedup", "in", "-o", "out", "--bands", "200", "--rows", "1"],
            &["--bands 200", "--num-perm 128"],
        ),
        (
            &["params", "--bands", "200", "--rows", "1"],
            &["--num-perm"],
        ),
        (&["params", "--points", "100000000"], &["--points"]),
    ] {
        let ran = run_within(neardup(dir).args(args), quick);
        refused(&ran, 2, names, dir, &before);
    }
    // The widest accepted signature still gets its optimal bands at once.
    let ran = run_within(neardup(dir).args(["params", "--num-perm", "16384"]), quick);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.contains("num_perm 16384: bands = "),
        "{}",
        ran.stdout
    );
}

/// Runs `cmd` with its stdout closed before it writes, as `cmd | head -0` would.
fn with_stdout_closed(cmd: &mut Command) -> (Option<i32>, Option<i32>, String) {
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), status.signal(), stderr)
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let tmp = corpus();
    let dir = tmp.path();
    run_ok(neardup(dir).args(["dedup", "in", "--decisions", "d.jsonl"]));
    for args in [
        &["params", "--points", "10000"][..],
        &["eval", "in", "--decisions", "d.jsonl", "--samples", "10"],
    ] {
        let (code, signal, stderr) = with_stdout_closed(neardup(dir).args(args));
        assert!(
            code == Some(0) || signal == Some(libc_sigpipe()),
            "{args:?}: exit {code:?}, signal {signal:?}: {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{stderr}"
        );
    }
}

fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn differing_settings_are_named_with_both_values() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = shard_tables(dir, &[]);
    // Shard 1 again with an id field, shard 2 with another separator from a settings file.
    run_ok(neardup(dir).args([
        "keys",
        "data/part-1.jsonl",
        "--shard",
        "1",
        "--out",
        "id.ndk",
        "--id-field",
        "id",
    ]));
    std::fs::write(dir.join("sep.toml"), "[input]\nseparator = \" \"\n").unwrap();
    run_ok(neardup(dir).args([
        "keys",
        "data/part-1.jsonl",
        "--shard",
        "1",
        "--out",
        "sep.ndk",
        "--config",
        "sep.toml",
    ]));
    for (table, names) in [
        ("id.ndk", &["--id-field", "none vs id", "id.ndk"][..]),
        ("sep.ndk", &["separator", r#""\n" vs " ""#, "sep.ndk"]),
    ] {
        let ran = run(neardup(dir).args(["hot", &t[0], table, "--out", "hot.ndh"]));
        assert_ne!(ran.code, Some(0));
        for name in names {
            assert!(ran.stderr.contains(name), "{name}: {}", ran.stderr);
        }
        for debug in ["Join {", "vs [", "Some(", "ExactOnly"] {
            assert!(!ran.stderr.contains(debug), "{debug}: {}", ran.stderr);
        }
        assert!(!dir.join("hot.ndh").exists());
    }
}

#[test]
fn every_command_names_its_output_with_o_and_takes_positional_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("data")).unwrap();
    for name in ["part-0.jsonl", "part-1.jsonl", "part-2.parquet"] {
        std::fs::copy(sample(name), dir.join("data").join(name)).unwrap();
    }
    run_ok(neardup(dir).args([
        "dedup",
        "data/part-0.jsonl",
        "data/part-1.jsonl",
        "data/part-2.parquet",
        "--decisions",
        "one.jsonl",
    ]));
    run_ok(neardup(dir).args(["keys", "data/part-0.jsonl", "--shard", "0", "-o", "k0.ndk"]));
    run_ok(neardup(dir).args([
        "keys",
        "data/part-1.jsonl",
        "data/part-2.parquet",
        "--shard",
        "1",
        "--output",
        "k1.ndk",
    ]));
    run_ok(neardup(dir).args(["hot", "k1.ndk", "k0.ndk", "-o", "hot.ndh"]));
    run_ok(neardup(dir).args([
        "apply",
        "k0.ndk",
        "k1.ndk",
        "--hot",
        "hot.ndh",
        "--decisions",
        "staged.jsonl",
        "-o",
        "out",
    ]));
    assert_eq!(
        std::fs::read(dir.join("one.jsonl")).unwrap(),
        std::fs::read(dir.join("staged.jsonl")).unwrap()
    );
    let ran = run_ok(neardup(dir).args([
        "eval",
        "data/part-0.jsonl",
        "data/part-1.jsonl",
        "data/part-2.parquet",
        "--decisions",
        "one.jsonl",
        "--samples",
        "20",
    ]));
    assert!(ran.stdout.contains("precision"), "{}", ran.stdout);
}

/// The `neardup …` commands of a Markdown file's `sh` blocks, continuation lines joined.
fn documented_commands(markdown: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = line.split(" #").next().unwrap().trim_end();
        pending.push_str(code.trim_end_matches('\\'));
        pending.push(' ');
        if code.ends_with('\\') {
            continue;
        }
        let words: Vec<String> = pending.split_whitespace().map(str::to_string).collect();
        pending.clear();
        let start = words.iter().position(|w| w == "neardup");
        if let Some(start) = start
            && words.len() > start + 1
        {
            commands.push(words[start + 1..].to_vec());
        }
    }
    commands
}

#[test]
fn documented_commands_use_flags_their_help_lists() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(e.unwrap().path());
    }
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for words in documented_commands(&text) {
            let mut command = vec![words[0].clone()];
            let mut help_of = |command: &[String]| {
                helps
                    .entry(command.join(" "))
                    .or_insert_with(|| {
                        let ran = run_ok(Command::new(bin()).args(command).arg("--help"));
                        ran.stdout
                    })
                    .clone()
            };
            let mut help = help_of(&command);
            // A command with subcommands (`neardup index push …`): the subcommand's help.
            if let Some(sub) = words.get(1)
                && help.contains("\nCommands:\n")
                && help.contains(&format!("\n  {sub} "))
            {
                command.push(sub.clone());
                help = help_of(&command);
            }
            let command = command.join(" ");
            for flag in words.iter().filter(|w| w.starts_with('-') && w.len() > 1) {
                let flag = flag.split('=').next().unwrap();
                let listed = if flag.starts_with("--") {
                    help.contains(&format!("{flag} "))
                        || help.contains(&format!("{flag}\n"))
                        || help.contains(&format!("{flag},"))
                        || help.contains(&format!("{flag}]"))
                } else {
                    help.contains(&format!("{flag},"))
                };
                assert!(
                    listed,
                    "{}: `neardup {command}` has no {flag}:\n{help}",
                    page.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 30, "{checked}");
    // The default scheme the docs name is the one --help states.
    let dedup = &helps["dedup"];
    assert!(dedup.contains("[default: oph]"), "{dedup}");
    let compatibility = std::fs::read_to_string(root.join("docs/compatibility.md")).unwrap();
    assert!(
        compatibility.contains("| MinHash | `oph`"),
        "compatibility.md names another default scheme"
    );
}

/// The kinds of node a path can hold besides a regular file, made at `path`: a FIFO, a character
/// device made with `mknod` (the numbers of `/dev/null`), and symbolic links to the process's
/// standard output and to such a device.
fn make_special(path: &Path, kind: &str) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    match kind {
        // SAFETY: `c` is a NUL-terminated path that outlives the calls.
        "fifo" => assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0),
        "chardev" => assert_eq!(
            unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) },
            0,
            "mknod needs root: {}",
            std::io::Error::last_os_error()
        ),
        "stdout-link" => std::os::unix::fs::symlink("/proc/self/fd/1", path).unwrap(),
        "device-link" => {
            let dev = path.with_extension("dev");
            make_special(&dev, "chardev");
            std::os::unix::fs::symlink(&dev, path).unwrap();
        }
        _ => unreachable!("{kind}"),
    }
}

const SPECIAL_KINDS: [&str; 4] = ["fifo", "chardev", "stdout-link", "device-link"];

/// An output path holding a FIFO, a device or a symbolic link is never replaced by a file: every
/// single-file output of every command refuses it before any work, naming the flag and the path
/// (exit 2), and the node is left as it was.
#[test]
fn outputs_that_are_not_regular_files_are_refused_before_any_work() {
    for kind in SPECIAL_KINDS {
        let tmp = corpus();
        let dir = tmp.path();
        run_ok(neardup(dir).args(["keys", "in", "-o", "t.ndk"]));
        make_special(&dir.join("x"), kind);
        let before = snapshot(dir);
        for (args, flag) in [
            (&["dedup", "in", "--decisions", "x"][..], "--decisions"),
            (&["dedup", "in", "-o", "out", "--report", "x"], "--report"),
            (
                &["dedup", "in", "--decisions", "d.jsonl", "--index-out", "x"],
                "--index-out",
            ),
            (&["exact", "in", "--decisions", "x"], "--decisions"),
            (&["keys", "in", "-o", "x"], "--output"),
            (&["hot", "t.ndk", "-o", "x"], "--output"),
        ] {
            let ran = run_within(neardup(dir).args(args), Duration::from_secs(60));
            refused(&ran, 2, &[flag, " x ", "not a regular file"], dir, &before);
        }
    }
}

/// With `--overwrite`, an output directory whose manifest `_SUCCESS` is a FIFO, a device or a
/// link is refused before any work (reading a FIFO would wait forever), and the node stays.
#[test]
fn an_output_directory_whose_manifest_is_not_a_regular_file_is_refused() {
    for kind in SPECIAL_KINDS {
        let tmp = corpus();
        let dir = tmp.path();
        std::fs::create_dir(dir.join("out")).unwrap();
        make_special(&dir.join("out/_SUCCESS"), kind);
        let before = snapshot(dir);
        let ran = run_within(
            neardup(dir).args(["dedup", "in", "-o", "out", "--overwrite"]),
            Duration::from_secs(60),
        );
        refused(&ran, 1, &["_SUCCESS", "not a regular file"], dir, &before);
    }
}

/// A symbolic link inside an input directory (or a glob's tree) that leads to an output, or to
/// a directory around it, is refused before any work, naming the link: the next run over the
/// same input would follow it and read the outputs back as input. A link leading nowhere yet
/// (the first run, before the output exists) counts as well.
#[test]
fn links_inside_the_input_tree_that_lead_to_outputs_are_refused() {
    let tmp = corpus();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("in/sub")).unwrap();
    std::os::unix::fs::symlink("../out", dir.join("in/link")).unwrap();
    std::os::unix::fs::symlink("../../reports", dir.join("in/sub/up")).unwrap();
    std::fs::create_dir(dir.join("reports")).unwrap();
    let before = snapshot(dir);
    for (args, names) in [
        (
            &["dedup", "in", "-o", "out"][..],
            &["--output", "in/link"][..],
        ),
        (&["exact", "in", "-o", "out"], &["--output", "in/link"]),
        (
            &["dedup", "in", "--decisions", "reports/d.jsonl"],
            &["--decisions", "in/sub/up"],
        ),
        (
            &[
                "dedup",
                "in/**/*.jsonl",
                "-o",
                "elsewhere",
                "--report",
                "reports/r.jsonl",
            ],
            &["--report", "in/sub/up"],
        ),
    ] {
        let ran = run(neardup(dir).args(args));
        refused(&ran, 2, names, dir, &before);
    }
    // What the link does not lead to is fine, and the link's own data is read.
    run_ok(neardup(dir).args(["dedup", "in", "-o", "elsewhere", "--report", "r.json"]));
}

/// An output beside a glob's matches, in a directory the glob's pattern does not enter
/// (`gg/x2` for `gg/data*/*.jsonl`), is not read back and is accepted; one the pattern enters
/// (`gg/data3`) is refused.
#[test]
fn a_glob_refuses_only_the_directories_its_pattern_enters() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("gg/data1")).unwrap();
    std::fs::create_dir_all(dir.join("gg/data2")).unwrap();
    std::fs::copy(sample("part-0.jsonl"), dir.join("gg/data1/a.jsonl")).unwrap();
    std::fs::copy(sample("part-1.jsonl"), dir.join("gg/data2/b.jsonl")).unwrap();
    let before = snapshot(dir);
    let ran = run(neardup(dir).args(["dedup", "gg/data*/*.jsonl", "-o", "gg/data3"]));
    refused(
        &ran,
        2,
        &["--output", "gg/data3", "gg/data*/*.jsonl"],
        dir,
        &before,
    );
    run_ok(neardup(dir).args(["dedup", "gg/data*/*.jsonl", "-o", "gg/x2"]));
    assert!(dir.join("gg/x2/data1/a.jsonl").exists());
}

/// Files neardup did not write, each of a shape close to one it writes: a single-file output
/// over any of them is refused.
const FOREIGN_FILES: [(&str, &str); 4] = [
    ("notes.txt", "precious\n"),
    (
        "package.json",
        "{\n  \"version\": \"1.0.0\",\n  \"name\": \"mine\"\n}\n",
    ),
    (
        "rows.jsonl",
        "{\"file\": \"a.jsonl\", \"record\": 0, \"note\": \"mine\"}\n",
    ),
    ("keys.bin", "NDKEYX\u{0}\u{1}not neardup's"),
];

/// Every single-file output of every command (`OUT` marks the output's path) replaces an
/// existing file only when neardup wrote it, of the output's kind: a foreign file (text, JSON
/// that is no report, JSONL that is no decisions, binary that is no key file) is refused with
/// exit code 2 before any work, left unchanged; an empty file and the command's own earlier
/// output are replaced as before.
#[test]
fn single_file_outputs_replace_only_neardup_files_of_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = distributed_steps(dir);
    run_ok(neardup(dir).args(["dedup", "data/part-0.jsonl", "--decisions", "d0.jsonl"]));
    // Each command with the flag its output is named by.
    let commands: Vec<(Vec<&str>, &str)> = vec![
        (vec!["dedup", "data", "--decisions", "OUT"], "--decisions"),
        (
            vec!["dedup", "data", "--decisions", "d.jsonl", "--report", "OUT"],
            "--report",
        ),
        (
            vec![
                "dedup",
                "data",
                "--decisions",
                "d.parquet",
                "--index-out",
                "OUT",
            ],
            "--index-out",
        ),
        (vec!["exact", "data", "--decisions", "OUT"], "--decisions"),
        (vec!["keys", "data/part-0.jsonl", "-o", "OUT"], "--output"),
        (
            vec![
                "keys",
                "data/part-0.jsonl",
                "-o",
                "k.ndk",
                "--report",
                "OUT",
            ],
            "--report",
        ),
        (vec!["hot", &t[0], &t[1], &t[2], "-o", "OUT"], "--output"),
        (
            vec!["hot", &t[0], &t[1], &t[2], "-o", "h.ndh", "--report", "OUT"],
            "--report",
        ),
        (
            vec![
                "sign",
                &t[0],
                "--hot",
                "hot.ndh",
                "-o",
                "s",
                "--overwrite",
                "--report",
                "OUT",
            ],
            "--report",
        ),
        (
            vec![
                "decide",
                "sig-0",
                "sig-1",
                "sig-2",
                "--hot",
                "hot.ndh",
                "--group",
                "0",
                "-o",
                "g",
                "--overwrite",
                "--report",
                "OUT",
            ],
            "--report",
        ),
        (
            vec![
                "write",
                &t[0],
                "--hot",
                "hot.ndh",
                "--decided",
                "dec-0",
                "--decided",
                "dec-1",
                "--decisions",
                "OUT",
            ],
            "--decisions",
        ),
        (
            vec![
                "write",
                &t[0],
                "--hot",
                "hot.ndh",
                "--decided",
                "dec-0",
                "--decided",
                "dec-1",
                "--decisions",
                "w.jsonl",
                "--report",
                "OUT",
            ],
            "--report",
        ),
        (
            vec![
                "apply",
                &t[0],
                &t[1],
                &t[2],
                "--hot",
                "hot.ndh",
                "--decisions",
                "OUT",
            ],
            "--decisions",
        ),
        (
            vec![
                "apply",
                &t[0],
                &t[1],
                &t[2],
                "--hot",
                "hot.ndh",
                "--decisions",
                "a.jsonl",
                "--report",
                "OUT",
            ],
            "--report",
        ),
        (
            vec!["index", &t[0], "--decisions", "d0.jsonl", "-o", "OUT"],
            "-o",
        ),
        (
            vec![
                "eval",
                "--inputs",
                "data/part-0.jsonl",
                "--decisions",
                "d0.jsonl",
                "--eval-report",
                "OUT",
            ],
            "--eval-report",
        ),
    ];
    let with = |args: &[&str], out: &str| -> Vec<String> {
        args.iter()
            .map(|a| if *a == "OUT" { out } else { a }.to_string())
            .collect()
    };
    for (name, body) in FOREIGN_FILES {
        std::fs::write(dir.join(name), body).unwrap();
    }
    for (args, flag) in &commands {
        // A file neardup did not write, by any name of it.
        let before = snapshot(dir);
        for (name, _) in FOREIGN_FILES {
            let ran = run(neardup(dir).args(with(args, name)));
            refused(
                &ran,
                2,
                &[
                    flag,
                    name,
                    "is a file neardup did not write",
                    "remove it first",
                ],
                dir,
                &before,
            );
        }
        // An empty file holds nothing to lose; the command's own output is written again.
        let fresh = format!("own-{}", args[0]);
        let path = |out: &str| {
            let named = with(args, out);
            let i = args.iter().position(|a| a.starts_with("OUT")).unwrap();
            dir.join(&named[i])
        };
        std::fs::write(path(&fresh), b"").unwrap();
        run_ok(neardup(dir).args(with(args, &fresh)));
        let first = std::fs::read(path(&fresh)).unwrap();
        assert!(
            !first.is_empty(),
            "{args:?} wrote nothing over an empty file"
        );
        run_ok(neardup(dir).args(with(args, &fresh)));
        assert!(
            !std::fs::read(path(&fresh)).unwrap().is_empty(),
            "{args:?} over its own output"
        );
        std::fs::remove_file(path(&fresh)).unwrap();
    }
    // Pulling an index from Redis is refused before the server is asked.
    let before = snapshot(dir);
    let ran = run(neardup(dir).args(["index", "pull", "redis://127.0.0.1:1", "-o", "notes.txt"]));
    refused(
        &ran,
        2,
        &["-o", "notes.txt", "not a neardup index"],
        dir,
        &before,
    );
    for (name, body) in FOREIGN_FILES {
        assert_eq!(std::fs::read(dir.join(name)).unwrap(), body.as_bytes());
    }
}
