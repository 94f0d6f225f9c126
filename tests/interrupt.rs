//! The kill test: runs of `dedup`, `exact`, `keys`, `hot` and `apply` interrupted by SIGINT,
//! SIGTERM, SIGHUP and SIGKILL at seeded random moments (stage 1, stage 2 and writing; spilling, split
//! outputs, `--overwrite` over an earlier run). After each: nothing of the interrupted run is
//! published (an earlier run's outputs are still whole), and except after SIGKILL no temporary,
//! staging or spill file is left; the exit code is 128 + the signal; then the same command
//! succeeds and its outputs equal an uninterrupted run's, byte for byte.
//!
//! `NEARDUP_KILL_SEED` replays another draw of the moments (the seed is printed on failure).

use crate::support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// A corpus with many near-duplicates (so stage 2 works), in plain and gzip'd JSONL and Parquet.
fn corpus(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(11);
    let vocabulary: Vec<String> = (0..4000)
        .map(|_| {
            let len = 3 + rng.next() % 7;
            (0..len)
                .map(|_| (b'a' + (rng.next() % 26) as u8) as char)
                .collect()
        })
        .collect();
    let mut doc = 0u64;
    let mut next_doc = |rng: &mut Rng| {
        // Groups of three near-copies: the same 250 words, a few changed.
        let mut group = Rng(doc / 3);
        let mut words: Vec<&str> = (0..250)
            .map(|_| vocabulary[(group.next() % 4000) as usize].as_str())
            .collect();
        if !doc.is_multiple_of(3) {
            for _ in 0..6 {
                let at = (rng.next() % 250) as usize;
                words[at] = &vocabulary[(rng.next() % 4000) as usize];
            }
        }
        doc += 1;
        (format!("d{doc}"), words.join(" "))
    };
    for f in 0..4 {
        let body: String = (0..1400)
            .map(|_| {
                let (id, text) = next_doc(&mut rng);
                format!("{{\"id\":\"{id}\",\"text\":\"{text}\"}}\n")
            })
            .collect();
        let name = if f == 3 {
            format!("part-{f}.jsonl.gz")
        } else {
            format!("part-{f}.jsonl")
        };
        write_compressed(&dir.join(name), body.as_bytes());
    }
    let (ids, texts): (Vec<String>, Vec<String>) = (0..800).map(|_| next_doc(&mut rng)).unzip();
    write_parquet(&dir.join("part-4.parquet"), &ids, &texts);
}

/// One command of the test, run in a directory of its own (`{root}` in its arguments).
#[derive(Clone)]
struct Cmd {
    name: &'static str,
    args: Vec<String>,
    /// The dataset directory, decisions and single files it publishes, relative to its root.
    dataset: Option<&'static str>,
    files: Vec<&'static str>,
    /// Files it publishes whose bytes vary from run to run (reports: timings).
    varying: Vec<&'static str>,
}

impl Cmd {
    fn command(&self, root: &Path) -> std::process::Command {
        let mut c = neardup_with_default_signals();
        c.args(
            self.args
                .iter()
                .map(|a| OsString::from(a.replace("{root}", &root.display().to_string()))),
        );
        c
    }
}

/// What a command published under `root`: dataset files (not the manifest, which names its run),
/// single files (reports only as present or not).
#[derive(Debug, PartialEq)]
struct Outputs {
    dataset: BTreeMap<String, Vec<u8>>,
    files: BTreeMap<String, Option<Vec<u8>>>,
}

fn outputs(cmd: &Cmd, root: &Path) -> Outputs {
    let mut dataset = BTreeMap::new();
    if let Some(d) = cmd.dataset {
        let dir = root.join(d);
        dataset = published(&dir);
        let manifest = dataset.remove("_SUCCESS");
        // A manifest present lists exactly the files there, with their sizes.
        if let Some(m) = manifest {
            let m: Value = serde_json::from_slice(&m).unwrap();
            let listed: BTreeMap<String, u64> = m["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["path"].as_str().unwrap().to_string(),
                        f["bytes"].as_u64().unwrap(),
                    )
                })
                .collect();
            let present: BTreeMap<String, u64> = dataset
                .iter()
                .map(|(k, v)| (k.clone(), v.len() as u64))
                .collect();
            assert_eq!(
                listed,
                present,
                "the manifest of {} is not whole",
                dir.display()
            );
        } else {
            assert!(
                dataset.is_empty(),
                "files without a manifest in {}: {:?}",
                dir.display(),
                dataset.keys()
            );
        }
    }
    let files = cmd
        .files
        .iter()
        .chain(&cmd.varying)
        .map(|f| {
            let bytes = std::fs::read(root.join(f)).ok();
            let bytes = if cmd.varying.contains(f) {
                bytes.map(|_| Vec::new())
            } else {
                bytes
            };
            (f.to_string(), bytes)
        })
        .collect();
    Outputs { dataset, files }
}

fn nothing(cmd: &Cmd) -> Outputs {
    Outputs {
        dataset: BTreeMap::new(),
        files: cmd
            .files
            .iter()
            .chain(&cmd.varying)
            .map(|f| (f.to_string(), None))
            .collect(),
    }
}

/// Runs `cmd` to completion in `root`; returns how long it took.
fn run_ok(cmd: &Cmd, root: &Path) -> Duration {
    std::fs::create_dir_all(root).unwrap();
    let started = Instant::now();
    let o = cmd.command(root).output().unwrap();
    assert!(
        o.status.success(),
        "{} failed: {}",
        cmd.name,
        String::from_utf8_lossy(&o.stderr)
    );
    started.elapsed()
}

#[derive(Clone, Copy, Debug)]
enum Sig {
    Int,
    Term,
    Hup,
    Kill,
}

impl Sig {
    fn number(self) -> i32 {
        match self {
            Sig::Int => libc::SIGINT,
            Sig::Term => libc::SIGTERM,
            Sig::Hup => libc::SIGHUP,
            Sig::Kill => libc::SIGKILL,
        }
    }
}

#[test]
fn interrupted_runs_publish_nothing_and_leave_nothing() {
    let seed: u64 = std::env::var("NEARDUP_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_240_601);
    eprintln!("NEARDUP_KILL_SEED={seed}");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let input = t.join("in");
    corpus(&input);
    let input = input.display().to_string();

    let s = |v: &[&str]| -> Vec<String> { v.iter().map(|a| a.to_string()).collect() };
    let dedup_args = |threshold: &str| {
        let mut a = s(&["dedup", &input]);
        a.extend(s(&[
            "-o",
            "{root}/out",
            "--decisions",
            "{root}/d.jsonl",
            "--report",
            "{root}/r.json",
            "--memory-limit",
            "256KiB",
            "--spill-dir",
            "{root}/spill",
            "--threshold",
            threshold,
            "--overwrite",
            "-j",
            "2",
            "-q",
        ]));
        a
    };
    let dataset_cmd = |name, args| Cmd {
        name,
        args,
        dataset: Some("out"),
        files: vec!["d.jsonl"],
        varying: vec!["r.json"],
    };
    let dedup = dataset_cmd("dedup", dedup_args("0.8"));
    let loose = dataset_cmd("dedup --threshold 0.5", dedup_args("0.5"));
    let mut split_args = dedup_args("0.8");
    split_args.extend(s(&["--max-output-bytes", "1MB"]));
    let split = dataset_cmd("dedup --max-output-bytes", split_args);
    let mut exact_args = s(&["exact", &input]);
    exact_args.extend(s(&[
        "-o",
        "{root}/out",
        "--decisions",
        "{root}/d.parquet",
        "--report",
        "{root}/r.json",
        "--overwrite",
        "-j",
        "2",
        "-q",
    ]));
    let exact = Cmd {
        files: vec!["d.parquet"],
        ..dataset_cmd("exact", exact_args)
    };
    let mut keys_args = s(&["keys", &input]);
    keys_args.extend(s(&[
        "--out",
        "{root}/t.ndk",
        "--report",
        "{root}/tr.json",
        "-j",
        "2",
        "-q",
    ]));
    let keys = Cmd {
        name: "keys",
        args: keys_args,
        dataset: None,
        files: vec!["t.ndk"],
        varying: vec!["tr.json"],
    };
    // Shards' tables for hot and apply.
    let shards = t.join("shards");
    let shard_tables: Vec<String> = (0..2)
        .map(|i| {
            let mut c = neardup();
            c.arg("keys");
            for f in 0..5 {
                if f % 2 == i {
                    let name = std::fs::read_dir(&input)
                        .unwrap()
                        .map(|e| e.unwrap().path())
                        .find(|p| {
                            p.file_name()
                                .unwrap()
                                .to_string_lossy()
                                .starts_with(&format!("part-{f}."))
                        })
                        .unwrap();
                    c.arg(name);
                }
            }
            let table = shards.join(format!("keys-{i}.ndk"));
            c.arg("--shard")
                .arg(i.to_string())
                .arg("--out")
                .arg(&table)
                .arg("-q");
            assert!(run(&mut c).status.success());
            table.display().to_string()
        })
        .collect();
    let mut hot_args = s(&["hot", &shard_tables[0], &shard_tables[1]]);
    hot_args.extend(s(&[
        "--out",
        "{root}/h.ndh",
        "--report",
        "{root}/hr.json",
        "--memory-limit",
        "64KiB",
        "--spill-dir",
        "{root}/spill",
        "-q",
    ]));
    let hot = Cmd {
        name: "hot",
        args: hot_args,
        dataset: None,
        files: vec!["h.ndh"],
        varying: vec!["hr.json"],
    };
    let hot_file = shards.join("hot.ndh");
    assert!(
        run(neardup()
            .arg("hot")
            .args(&shard_tables)
            .arg("--out")
            .arg(&hot_file)
            .arg("-q"))
        .status
        .success()
    );
    let mut apply_args = s(&["apply", "--hot", &hot_file.display().to_string()]);
    for table in &shard_tables {
        apply_args.extend(s(&["--keys", table]));
    }
    apply_args.extend(s(&[
        "-o",
        "{root}/out",
        "--decisions",
        "{root}/d.jsonl",
        "--report",
        "{root}/r.json",
        "--overwrite",
        "-j",
        "2",
        "-q",
    ]));
    let apply = dataset_cmd("apply", apply_args);

    // Uninterrupted runs: the outputs every rerun must equal, and how long a run takes.
    let mut reference = BTreeMap::new();
    for (i, cmd) in [&dedup, &loose, &split, &exact, &keys, &hot, &apply]
        .into_iter()
        .enumerate()
    {
        let root = t.join(format!("ref-{i}"));
        let took = run_ok(cmd, &root);
        let out = outputs(cmd, &root);
        assert!(
            out.files.values().all(Option::is_some),
            "{}: {:?}",
            cmd.name,
            out.files
        );
        assert!(artefacts(&root).is_empty(), "{:?}", artefacts(&root));
        reference.insert(cmd.name, (out, took));
    }

    use Sig::*;
    let cases: Vec<(&Cmd, Option<&Cmd>, Vec<Sig>)> = vec![
        (&dedup, None, vec![Int, Term, Kill, Int, Kill]),
        (&split, None, vec![Term, Kill, Int]),
        // Over an earlier, complete run with other settings: it must stay whole.
        (&loose, Some(&dedup), vec![Int, Term, Kill]),
        (&exact, None, vec![Hup, Kill]),
        (&keys, None, vec![Int, Kill]),
        (&hot, None, vec![Term, Kill]),
        (&apply, None, vec![Int, Term, Kill]),
    ];
    let mut n = 0;
    for (cmd, earlier, signals) in cases {
        let took = reference[cmd.name].1;
        for (k, &sig) in signals.iter().enumerate() {
            // Moments spread over the whole run (stratified, jittered by the seed).
            let at = took.mul_f64((k as f64 + rng.unit()) / signals.len() as f64);
            let at = at.max(Duration::from_millis(20));
            n += 1;
            let root = t.join(format!("case-{n}"));
            std::fs::create_dir_all(&root).unwrap();
            let before = match earlier {
                Some(e) => {
                    run_ok(e, &root);
                    outputs(cmd, &root)
                }
                None => nothing(cmd),
            };
            let what = format!(
                "seed {seed}, case {n}: {} with {sig:?} after {} ms",
                cmd.name,
                at.as_millis()
            );
            let child = cmd
                .command(&root)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(at);
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(child.id() as i32, sig.number()) };
            let o = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            let status = o.status;
            let leftovers = artefacts(&root);
            let journal = leftovers
                .iter()
                .any(|p| p.to_string_lossy().ends_with(".commit"));
            let published_whole = status.success() || err.contains("published whole");
            match sig {
                Kill => assert!(
                    status.success() || status.signal() == Some(libc::SIGKILL),
                    "{what}: {status:?} {err}"
                ),
                _ => {
                    assert!(
                        status.success()
                            || status.code() == Some(128 + sig.number())
                            // Killed by the default action before the handlers were installed,
                            // when nothing had been created yet.
                            || (status.signal() == Some(sig.number()) && leftovers.is_empty()),
                        "{what}: {status:?} {err}"
                    );
                    assert!(leftovers.is_empty(), "{what}: left {leftovers:?}");
                }
            }
            let now = outputs(cmd, &root);
            if published_whole {
                assert_eq!(
                    now, reference[cmd.name].0,
                    "{what}: published, but not whole"
                );
            } else if !journal {
                // SIGKILL can land after the last commit and before the exit: then the run
                // published whole without saying so.
                let killed_after_publishing = matches!(sig, Kill) && now == reference[cmd.name].0;
                if !killed_after_publishing {
                    assert_eq!(
                        now, before,
                        "{what}: the interrupted run published something"
                    );
                }
            }
            // The same command again: it succeeds, with an uninterrupted run's outputs.
            run_ok(cmd, &root);
            assert_eq!(
                outputs(cmd, &root),
                reference[cmd.name].0,
                "{what}: the rerun differs"
            );
            assert!(
                artefacts(&root).is_empty(),
                "{what}: rerun left {:?}",
                artefacts(&root)
            );
            eprintln!(
                "{what}: {status:?}{}",
                if journal { " (commit journal)" } else { "" }
            );
        }
    }
}
