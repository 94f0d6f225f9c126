//! Runs over object storage (`s3://`) against a real S3 API server on 127.0.0.1 (moto's, started
//! by each test; see `tests/support/s3.rs`): the same decisions and byte-identical outputs as
//! the same files on disk, outputs published all or nothing, and each failure of the service
//! reported with the object it concerns.
//!
//! Needs `NEARDUP_MOTO_SERVER` (the `moto_server` binary); `tests/run` sets it. Without it every
//! test fails saying how to run it.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use support::s3::{self, DroppingProxy, S3Server};
use support::{neardup, unique_lines, write_compressed, write_parquet_in_groups};

/// A corpus of every input kind: plain JSONL large enough to be read in several byte-range
/// chunks, zstd and gzip JSONL, a one-group Parquet file and a Parquet file of many row groups,
/// with near and exact copies across them.
fn corpus(dir: &Path) {
    let sample = |name: &str| std::fs::read(support::data("sample").join(name)).unwrap();
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("a/part-0.jsonl"), sample("part-0.jsonl")).unwrap();
    write_compressed(&dir.join("a/part-1.jsonl.zst"), &sample("part-1.jsonl"));
    write_compressed(
        &dir.join("a/copy.jsonl.gz"),
        &sample("part-0.jsonl")[..60_000],
    );
    std::fs::write(dir.join("b/part-2.parquet"), sample("part-2.parquet")).unwrap();
    // 3 MB: with the run's 1 MiB chunks, read from three offsets.
    let mut big = unique_lines("big", 10_000).into_bytes();
    big.extend_from_slice(&sample("part-1.jsonl"));
    assert!(big.len() > 3 << 20);
    std::fs::write(dir.join("big.jsonl"), big).unwrap();
    // Row groups of 40 rows: read group by group, each by its own ranged requests.
    let texts: Vec<String> = String::from_utf8(sample("part-1.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some(v.get("text")?.as_str()?.to_string())
        })
        .collect();
    let ids: Vec<String> = (0..texts.len()).map(|i| format!("g-{i}")).collect();
    write_parquet_in_groups(&dir.join("b/groups.parquet"), &ids, &texts, Some(40));
}

fn with_env(cmd: &mut Command, env: &[(&'static str, String)]) -> Output {
    for (k, v) in env {
        cmd.env(k, v);
    }
    support::run(cmd)
}

/// Every file below `dir` (relative path → bytes), manifests left out (they name their run).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if !p.file_name().unwrap().to_str().unwrap().starts_with('_') {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn a_run_over_objects_gives_the_decisions_and_outputs_of_the_same_files_on_disk() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);

    let dedup = |input: &str, tag: &str| {
        let out = tmp.path().join(format!("out-{tag}"));
        let decisions = tmp.path().join(format!("decisions-{tag}.jsonl"));
        let o = with_env(
            neardup()
                .arg("dedup")
                .arg(input)
                .arg("--output")
                .arg(&out)
                .arg("--decisions")
                .arg(&decisions)
                .args(["--threshold", "0.7", "-j", "3"]),
            &s3.env(),
        );
        assert!(o.status.success(), "{tag}: {}", support::stderr(&o));
        (tree(&out), std::fs::read_to_string(&decisions).unwrap())
    };
    let (files, decisions) = dedup(local.to_str().unwrap(), "local");
    let (s3_files, s3_decisions) = dedup("s3://corpus/in/", "s3");

    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        vec![
            "a/copy.jsonl.gz",
            "a/part-0.jsonl",
            "a/part-1.jsonl.zst",
            "b/groups.parquet",
            "b/part-2.parquet",
            "big.jsonl"
        ]
    );
    for (name, bytes) in &files {
        assert!(s3_files.get(name) == Some(bytes), "{name} differs");
    }
    assert_eq!(files.len(), s3_files.len());
    // The decisions name the objects by URL, and are otherwise those of the local run.
    let local_prefix = format!("{}/", local.display());
    assert_eq!(
        s3_decisions,
        decisions.replace(&local_prefix, "s3://corpus/in/")
    );
    assert!(s3_decisions.contains(r#""file":"s3://corpus/in/a/part-1.jsonl.zst""#));
    assert!(s3_decisions.contains(r#""dup_of_file":"s3://corpus/in/a/part-0.jsonl""#));
    assert!(s3_decisions.contains(r#""file":"s3://corpus/in/b/groups.parquet""#));
    let dropped = s3_decisions.matches(r#""keep":false"#).count();
    assert!(dropped > 300, "{dropped} dropped");

    // A glob over the bucket reads the files it matches, in the same order as on disk.
    let glob = with_env(
        neardup()
            .args(["dedup", "s3://corpus/in/**/*.parquet", "--decisions"])
            .arg(tmp.path().join("glob.jsonl")),
        &s3.env(),
    );
    assert!(glob.status.success(), "{}", support::stderr(&glob));
    let got = std::fs::read_to_string(tmp.path().join("glob.jsonl")).unwrap();
    assert!(
        got.starts_with(r#"{"file":"s3://corpus/in/b/groups.parquet""#),
        "{got:.200}"
    );
    assert!(!got.contains(".jsonl\""));

    // Decisions only: stage 2 reads only the records of the plain JSONL objects it has to
    // decide, by ranged requests, and decides as the run that read everything.
    let report = tmp.path().join("only-report.json");
    let only = with_env(
        neardup()
            .args(["dedup", "s3://corpus/in/", "--decisions"])
            .arg(tmp.path().join("only.jsonl"))
            .arg("--report")
            .arg(&report)
            .args(["--threshold", "0.7", "-j", "3"]),
        &s3.env(),
    );
    assert!(only.status.success(), "{}", support::stderr(&only));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("only.jsonl")).unwrap(),
        s3_decisions
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let read = report["stage2"]["bytes_read"].as_u64().unwrap();
    let big = std::fs::metadata(local.join("big.jsonl")).unwrap().len();
    let all: u64 = tree(&local).values().map(|b| b.len() as u64).sum();
    assert!(read + big / 2 < all, "{read} bytes read of {all}");
}

/// Parquet objects with and without a page index, of one and of several row groups: a run
/// writing only decisions fetches only the row groups (and, with a page index, the pages)
/// holding rows it decides, by ranged requests, takes the bytes a run over the same files on
/// disk takes, and decides as the runs over the files that read every row.
/// `neardup dedup INPUT` against `s3` at threshold 0.7 on 2 threads (with `--output` under
/// `dir` when `output`): its decisions file and its report, files named by `tag`.
fn dedup_reported(
    s3: &S3Server,
    dir: &Path,
    input: &str,
    tag: &str,
    output: bool,
) -> (String, serde_json::Value) {
    let decisions = dir.join(format!("decisions-{tag}.jsonl"));
    let report = dir.join(format!("report-{tag}.json"));
    let mut cmd = neardup();
    cmd.arg("dedup")
        .arg(input)
        .arg("--decisions")
        .arg(&decisions)
        .arg("--report")
        .arg(&report)
        .args(["--threshold", "0.7", "-j", "2", "--on-error", "skip"]);
    if output {
        cmd.arg("--output").arg(dir.join(format!("out-{tag}")));
    }
    let o = with_env(&mut cmd, &s3.env());
    assert!(o.status.success(), "{tag}: {}", support::stderr(&o));
    let report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    (std::fs::read_to_string(&decisions).unwrap(), report)
}

#[test]
fn parquet_objects_are_read_by_the_row_groups_and_pages_holding_rows_to_decide() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let (local, total) = crate::stage2_reads::parquet_corpus(tmp.path());
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "pq/", &local);
    let dedup = |input: &str, tag: &str, output: bool| {
        let (decisions, report) = dedup_reported(&s3, tmp.path(), input, tag, output);
        (decisions, report["stage2"]["bytes_read"].as_u64().unwrap())
    };
    let (whole, whole_read) = dedup(local.to_str().unwrap(), "whole", true);
    assert_eq!(whole_read, total);
    let (picked, picked_read) = dedup(local.to_str().unwrap(), "local", false);
    assert_eq!(picked, whole);
    assert!(
        picked_read < total / 2,
        "{picked_read} bytes read of {total}"
    );
    let (objects, objects_read) = dedup("s3://corpus/pq/", "s3", false);
    let local_prefix = format!("{}/", local.display());
    assert_eq!(objects, whole.replace(&local_prefix, "s3://corpus/pq/"));
    assert!(objects.contains(r#""file":"s3://corpus/pq/p.parquet""#));
    assert_eq!(
        objects_read, picked_read,
        "the same bytes as from the files"
    );
}

#[test]
fn a_connection_dropped_mid_object_is_retried_and_changes_nothing() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);
    // Two responses cut after 50 KB: the first reads of the large objects.
    let proxy = DroppingProxy::start(s3.port, 50_000, 2);
    let mut env = s3::env_for(&format!("http://127.0.0.1:{}", proxy.port));
    env.push(("RUST_LOG", "warn".to_string()));
    let run = |input: &str, tag: &str, env: &[(&'static str, String)]| {
        let decisions = tmp.path().join(format!("decisions-{tag}.jsonl"));
        let o = with_env(
            neardup()
                .args(["dedup", input, "--decisions"])
                .arg(&decisions)
                .args(["-j", "2"]),
            env,
        );
        assert!(o.status.success(), "{tag}: {}", support::stderr(&o));
        std::fs::read_to_string(&decisions).unwrap()
    };
    let through_proxy = run("s3://corpus/in/big.jsonl", "proxy", &env);
    assert_eq!(proxy.dropped(), 2, "the proxy cut no connection");
    let direct = run("s3://corpus/in/big.jsonl", "direct", &s3.env());
    assert_eq!(through_proxy, direct);
}

#[test]
fn a_connection_that_keeps_dropping_fails_the_run_naming_the_object() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);
    s3.put(
        "corpus",
        "in/small.jsonl",
        unique_lines("small", 4).as_bytes(),
    );
    // Responses of more than 2 KB are cut: the small object and the lookups pass, and each
    // retry (resumed from the byte it reached) brings too little for the objects to be read.
    let proxy = DroppingProxy::start(s3.port, 2_000, usize::MAX);
    let env = s3::env_for(&format!("http://127.0.0.1:{}", proxy.port));
    // Whatever the format, and whatever --on-error says: another input reads fine and the run
    // fails all the same, publishing nothing. A failed request is no fault of the data.
    for (object, step) in [
        ("big.jsonl", "dedup"),
        ("a/part-1.jsonl.zst", "dedup"),
        ("a/copy.jsonl.gz", "keys"),
        ("b/groups.parquet", "dedup"),
    ] {
        let url = format!("s3://corpus/in/{object}");
        let dropped = proxy.dropped();
        let mut cmd = neardup();
        cmd.args([step, "s3://corpus/in/small.jsonl", &url])
            .args(["--on-error", "skip", "--report"])
            .arg(tmp.path().join("r.json"));
        match step {
            "keys" => cmd.arg("-o").arg(tmp.path().join("k.ndk")),
            _ => cmd.arg("--decisions").arg(tmp.path().join("d.jsonl")),
        };
        let o = with_env(&mut cmd, &env);
        let err = support::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{object}: {err}");
        assert!(!err.contains("nothing to deduplicate"), "{err}");
        assert!(err.contains(&url), "{object}: {err}");
        assert!(err.contains("retries"), "{object}: {err}");
        assert!(
            err.contains("--on-error skip does not skip"),
            "{object}: {err}"
        );
        assert!(!err.contains("Generic") && !err.contains("{ "), "{err}");
        assert!(proxy.dropped() > dropped + 3, "{object}");
        assert!(!tmp.path().join("d.jsonl").exists());
        assert!(!tmp.path().join("k.ndk").exists());
        assert!(!tmp.path().join("r.json").exists());
    }
}

#[test]
fn missing_buckets_objects_and_prefixes_are_refused_before_any_work() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    s3.create_bucket("corpus");
    s3.put("corpus", "in/a.jsonl", b"{\"text\":\"x\"}\n");
    for (arg, want) in [
        (
            "s3://no-such-bucket/in/",
            "the bucket no-such-bucket does not exist",
        ),
        ("s3://corpus/in/b.jsonl", "no such object"),
        (
            "s3://corpus/elsewhere/",
            "no such object, and no object below this prefix",
        ),
        ("s3://corpus/in/*.parquet", "glob matched no object"),
        ("s3://corpus/in//a.jsonl", "empty"),
    ] {
        let o = with_env(
            neardup()
                .args(["dedup", arg, "--decisions"])
                .arg(tmp.path().join("d.jsonl")),
            &s3.env(),
        );
        let err = support::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{arg}: {err}");
        assert!(err.contains(arg) && err.contains(want), "{arg}: {err}");
        assert!(!err.contains("Generic") && !err.contains("{ "), "{err}");
    }
}

#[test]
fn a_plain_http_endpoint_without_aws_allow_http_is_refused_naming_the_variable() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    s3.create_bucket("corpus");
    s3.put("corpus", "in/a.jsonl", b"{\"text\":\"x\"}\n");
    let decisions = tmp.path().join("d.jsonl");
    let without: Vec<_> = s3
        .env()
        .into_iter()
        .filter(|(k, _)| *k != "AWS_ALLOW_HTTP")
        .collect();
    let mut cmd = neardup();
    cmd.env_remove("AWS_ALLOW_HTTP")
        .args(["dedup", "s3://corpus/in/", "--decisions"])
        .arg(&decisions);
    let o = with_env(&mut cmd, &without);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("s3://corpus/in/")
            && err.contains(
                "the endpoint is plain http://, which the s3 client refuses unless \
                             AWS_ALLOW_HTTP=true is set"
            ),
        "{err}"
    );
    // Refused by the client before any request: nothing to retry, and no retries claimed.
    assert!(!err.contains("retries"), "{err}");
    assert!(!decisions.exists());
    // The variable it names is the fix.
    let mut cmd = neardup();
    cmd.args(["dedup", "s3://corpus/in/", "--decisions"])
        .arg(&decisions);
    let o = with_env(&mut cmd, &s3.env());
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!(decisions.exists());
}

#[test]
fn an_output_in_a_missing_bucket_is_refused_before_any_work() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let sample = support::data("sample");
    for (flag, url) in [
        ("--decisions", "s3://no-such-bucket/d.jsonl"),
        ("--report", "s3://no-such-bucket/r.json"),
        ("--output", "s3://no-such-bucket/out/"),
    ] {
        let mut cmd = neardup();
        cmd.arg("dedup").arg(&sample).args([flag, url]);
        if flag == "--report" {
            cmd.arg("--decisions").arg(tmp.path().join("d.jsonl"));
        }
        let o = with_env(&mut cmd, &s3.env());
        let err = support::stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert!(
            err.contains("the bucket no-such-bucket does not exist"),
            "{err}"
        );
        // Refused before anything was read or written.
        assert!(!err.contains("records in"), "{err}");
        assert!(!tmp.path().join("d.jsonl").exists());
    }
}

#[test]
fn refused_credentials_are_reported_as_denied_access() {
    // Authentication on from the third request: the bucket and its object are made first.
    let s3 = S3Server::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "2")]);
    let tmp = tempfile::tempdir().unwrap();
    s3.create_bucket("corpus");
    s3.put("corpus", "in/a.jsonl", b"{\"text\":\"x\"}\n");
    let o = with_env(
        neardup()
            .args(["dedup", "s3://corpus/in/a.jsonl", "--decisions"])
            .arg(tmp.path().join("d.jsonl")),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("s3://corpus/in/a.jsonl") && err.contains("access denied"),
        "{err}"
    );
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    // The secret never appears.
    assert!(!err.contains("testing-secret"), "{err}");
}

#[test]
fn outputs_decisions_and_reports_are_published_to_objects_as_to_files() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);
    let out = tmp.path().join("out");
    let decisions = tmp.path().join("decisions.jsonl");
    let o = with_env(
        neardup()
            .arg("dedup")
            .arg(&local)
            .arg("--output")
            .arg(&out)
            .arg("--decisions")
            .arg(&decisions),
        &s3.env(),
    );
    assert!(o.status.success(), "{}", support::stderr(&o));
    let files = tree(&out);

    let to_s3 = |extra: &[&str]| {
        with_env(
            neardup()
                .args(["dedup", "s3://corpus/in/", "--output", "s3://corpus/out/"])
                .args(["--decisions", "s3://corpus/decisions.jsonl"])
                .args(["--report", "s3://corpus/report.json"])
                .args(extra),
            &s3.env(),
        )
    };
    let o = to_s3(&[]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    let keys = s3.keys("corpus", "out/");
    let mut want: Vec<String> = files.keys().map(|k| format!("out/{k}")).collect();
    want.push("out/_SUCCESS".to_string());
    want.sort();
    assert_eq!(keys, want);
    for (name, bytes) in &files {
        assert!(
            s3.get("corpus", &format!("out/{name}")).as_ref() == Some(bytes),
            "{name} differs"
        );
    }
    let local_decisions = std::fs::read_to_string(&decisions).unwrap();
    let s3_decisions = String::from_utf8(s3.get("corpus", "decisions.jsonl").unwrap()).unwrap();
    assert_eq!(
        s3_decisions,
        local_decisions.replace(&format!("{}/", local.display()), "s3://corpus/in/")
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.get("corpus", "out/_SUCCESS").unwrap()).unwrap();
    assert_eq!(manifest["format"], "neardup-manifest");
    assert_eq!(manifest["files"].as_array().unwrap().len(), files.len());
    assert_eq!(manifest["decisions"]["path"], "s3://corpus/decisions.jsonl");
    assert_eq!(manifest["report"]["path"], "s3://corpus/report.json");
    let report: serde_json::Value =
        serde_json::from_slice(&s3.get("corpus", "report.json").unwrap()).unwrap();
    assert!(report["totals"]["records_in"].as_u64().unwrap() > 10_000);
    assert_eq!(s3.open_uploads("corpus"), 0);

    // A second run needs --overwrite, which replaces only what the manifest lists.
    let o = to_s3(&[]);
    let err = support::stderr(&o);
    assert!(!o.status.success() && err.contains("--overwrite"), "{err}");
    s3.put("corpus", "out/notes.txt", b"mine");
    let o = to_s3(&["--overwrite", "--threshold", "0.9"]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert_eq!(s3.get("corpus", "out/notes.txt").unwrap(), b"mine");
    let again: serde_json::Value =
        serde_json::from_slice(&s3.get("corpus", "out/_SUCCESS").unwrap()).unwrap();
    assert_ne!(again["run_id"], manifest["run_id"]);
    // An object no manifest lists, where an output goes, is never replaced.
    s3.put("corpus", "out/stranger/x.jsonl", b"{}\n");
    s3.put(
        "corpus",
        "in2/stranger/x.jsonl",
        b"{\"text\":\"a b c d e f\"}\n",
    );
    let o = with_env(
        neardup().args([
            "dedup",
            "s3://corpus/in2/",
            "--output",
            "s3://corpus/out/",
            "--overwrite",
        ]),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert!(
        !o.status.success() && err.contains("s3://corpus/out/stranger/x.jsonl"),
        "{err}"
    );
    assert!(err.contains("does not list it"), "{err}");
    assert_eq!(s3.get("corpus", "out/stranger/x.jsonl").unwrap(), b"{}\n");

    // Outputs that hold the inputs, or that a later run over the inputs would read back, are
    // refused before any work.
    let o = with_env(
        neardup().args(["dedup", "s3://corpus/in/a/", "--output", "s3://corpus/in/"]),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("s3://corpus/in/ contains"), "{err}");
    let o = with_env(
        neardup().args([
            "dedup",
            "s3://corpus/in/",
            "--decisions",
            "s3://corpus/in/d.jsonl",
        ]),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("read the outputs back"), "{err}");
}

#[test]
fn an_interrupted_run_leaves_no_object_under_a_final_name() {
    use std::time::{Duration, Instant};
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);
    // Every uploaded part is held for two seconds: the run is stopped while it uploads.
    let proxy = s3::DelayingProxy::start(s3.port, b"partNumber=", Duration::from_secs(2));
    let env = s3::env_for(&format!("http://127.0.0.1:{}", proxy.port));
    // The dataset and decisions of a run, and a key table with its report (whose rows wait in
    // a local scratch file until the table is uploaded).
    let runs = [
        (libc::SIGINT, Some(130), "dedup"),
        (libc::SIGINT, Some(130), "keys"),
        // Last: what it leaves is open uploads, invisible, until a lifecycle rule ends them.
        (libc::SIGKILL, None, "dedup"),
    ];
    for (signal, code, step) in runs {
        let mut cmd = support::neardup_with_default_signals();
        match step {
            "dedup" => cmd
                .args(["dedup", "s3://corpus/in/", "--output", "s3://corpus/out/"])
                .args(["--decisions", "s3://corpus/decisions.jsonl"]),
            _ => cmd
                .args([
                    "keys",
                    "s3://corpus/in/",
                    "-o",
                    "s3://corpus/work/keys-0.ndk",
                ])
                .args(["--report", "s3://corpus/work/keys-0.json"]),
        };
        cmd.stderr(std::process::Stdio::piped());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let before = proxy.seen();
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while proxy.seen() == before {
            assert!(Instant::now() < deadline, "no upload started");
            assert!(
                child.try_wait().unwrap().is_none(),
                "the run ended before uploading"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), code, "{status:?}");
        assert_eq!(s3.keys("corpus", "out/"), Vec::<String>::new());
        assert_eq!(s3.get("corpus", "decisions.jsonl"), None);
        assert_eq!(s3.keys("corpus", "work/"), Vec::<String>::new());
        if signal == libc::SIGINT {
            // Stopped by a signal it handles, the run aborts its uploads.
            assert_eq!(s3.open_uploads("corpus"), 0);
        }
    }
}

/// Runs `neardup ARGS` in `cwd` against the server; asserts it succeeded.
fn step(s3: &S3Server, cwd: &Path, args: &[&str]) -> Output {
    let o = with_env(neardup().current_dir(cwd).args(args), &s3.env());
    assert!(o.status.success(), "{args:?}: {}", support::stderr(&o));
    o
}

#[test]
fn the_staged_steps_with_every_file_between_them_on_object_storage_match_one_local_dedup() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.create_bucket("work");
    s3.upload_dir("corpus", "in/", &local);
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let settings = ["--threshold", "0.7", "-j", "2"];

    // The reference: one process over the same shards, on disk.
    let shards = ["a/", "b/", "big.jsonl"];
    let local_shards: Vec<String> = shards
        .iter()
        .map(|s| local.join(s).to_str().unwrap().to_string())
        .collect();
    let out = tmp.path().join("out-local");
    let decisions = tmp.path().join("d-local.jsonl");
    let mut args: Vec<&str> = vec!["dedup"];
    args.extend(local_shards.iter().map(String::as_str));
    args.extend(["--output", out.to_str().unwrap()]);
    args.extend(["--decisions", decisions.to_str().unwrap()]);
    args.extend(settings);
    step(&s3, &cwd, &args);

    // keys per shard → hot with 2 groups → sign per shard → decide per group → write per shard,
    // every table, hot-key file, sign and decide directory, report and decisions file on S3.
    let w = "s3://work/run";
    for (i, shard) in shards.iter().enumerate() {
        let input = format!("s3://corpus/in/{shard}");
        let table = format!("{w}/keys-{i}.ndk");
        let report = format!("{w}/keys-{i}.json");
        let shard_no = i.to_string();
        let mut args = vec!["keys", &input, "--shard", &shard_no, "-o", &table];
        args.extend(["--report", &report]);
        args.extend(settings);
        step(&s3, &cwd, &args);
    }
    let tables: Vec<String> = (0..shards.len())
        .map(|i| format!("{w}/keys-{i}.ndk"))
        .collect();
    let hot = format!("{w}/hot.ndh");
    let mut args = vec!["hot"];
    args.extend(tables.iter().map(String::as_str));
    args.extend(["--groups", "2", "-o", &hot]);
    let hot_report = format!("{w}/hot.json");
    args.extend(["--report", &hot_report]);
    step(&s3, &cwd, &args);
    let sigs: Vec<String> = (0..shards.len()).map(|i| format!("{w}/sig-{i}")).collect();
    for (table, sig) in tables.iter().zip(&sigs) {
        let mut args = vec!["sign", table, "--hot", &hot, "-o", sig];
        args.extend(settings);
        step(&s3, &cwd, &args);
    }
    let decided: Vec<String> = (0..2).map(|g| format!("{w}/decided-{g}")).collect();
    for (g, dir) in decided.iter().enumerate() {
        let group = g.to_string();
        let mut args = vec!["decide"];
        args.extend(sigs.iter().map(String::as_str));
        args.extend(["--hot", &hot, "--group", &group, "-o", dir]);
        args.extend(settings);
        step(&s3, &cwd, &args);
    }
    for (i, table) in tables.iter().enumerate() {
        let d = format!("{w}/d-{i}.jsonl");
        let mut args = vec!["write", table, "--hot", &hot, "--decided"];
        args.extend(decided.iter().map(String::as_str));
        args.extend(["-o", "s3://corpus/out/", "--decisions", &d]);
        args.extend(settings);
        step(&s3, &cwd, &args);
    }

    let concatenated: String = (0..shards.len())
        .map(|i| String::from_utf8(s3.get("work", &format!("run/d-{i}.jsonl")).unwrap()).unwrap())
        .collect();
    let want = std::fs::read_to_string(&decisions)
        .unwrap()
        .replace(&format!("{}/", local.display()), "s3://corpus/in/");
    assert!(concatenated == want, "the staged decisions differ");
    let files = tree(&out);
    assert_eq!(files.len(), 6);
    for (name, bytes) in &files {
        assert!(
            s3.get("corpus", &format!("out/{name}")).as_ref() == Some(bytes),
            "{name} differs"
        );
    }
    let published = s3.keys("corpus", "out/");
    assert_eq!(
        published
            .iter()
            .filter(|k| k.contains("_SUCCESS.shard-"))
            .count(),
        shards.len(),
        "{published:?}"
    );
    // Each shard's manifest, and the whole output's `_SUCCESS` once every shard is in.
    assert!(
        published.iter().any(|k| k == "out/_SUCCESS"),
        "{published:?}"
    );
    assert_eq!(
        published.len(),
        files.len() + shards.len() + 1,
        "{published:?}"
    );
    let mut intermediates = s3.keys("work", "run/");
    intermediates.retain(|k| !k.contains("/sig-") && !k.contains("/decided-"));
    assert_eq!(
        intermediates,
        [
            "run/d-0.jsonl",
            "run/d-1.jsonl",
            "run/d-2.jsonl",
            "run/hot.json",
            "run/hot.ndh",
            "run/keys-0.json",
            "run/keys-0.ndk",
            "run/keys-1.json",
            "run/keys-1.ndk",
            "run/keys-2.json",
            "run/keys-2.ndk",
        ]
    );
    assert_eq!(
        s3.keys("work", "run/sig-0/"),
        [
            "run/sig-0/group-00000.bin",
            "run/sig-0/group-00001.bin",
            "run/sig-0/manifest.json"
        ]
    );
    assert_eq!(s3.keys("work", "run/decided-1/").len(), shards.len() + 1);
    assert_eq!(s3.open_uploads("work") + s3.open_uploads("corpus"), 0);
    // Nothing was written on disk under a name that looks like a URL.
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0);
    let report: serde_json::Value =
        serde_json::from_slice(&s3.get("work", "run/hot.json").unwrap()).unwrap();
    assert_eq!(report["hot_keys_file"], hot.as_str());
    assert_eq!(report["plan"]["groups"], 2);

    // A shard written again replaces only what its own manifest lists: the other shards' and
    // a stranger's objects in the shared prefix stay; without --overwrite it is refused.
    s3.put("corpus", "out/notes.txt", b"mine");
    let other_manifest = s3.get("corpus", "out/_SUCCESS.shard-00001").unwrap();
    let mut args = vec!["write", &tables[0], "--hot", &hot, "--decided"];
    args.extend(decided.iter().map(String::as_str));
    args.extend([
        "-o",
        "s3://corpus/out/",
        "--decisions",
        "s3://work/d-0-again.jsonl",
    ]);
    args.extend(settings);
    let o = with_env(neardup().current_dir(&cwd).args(&args), &s3.env());
    let err = support::stderr(&o);
    assert!(!o.status.success() && err.contains("--overwrite"), "{err}");
    args.push("--overwrite");
    step(&s3, &cwd, &args);
    assert_eq!(s3.get("corpus", "out/notes.txt").unwrap(), b"mine");
    assert_eq!(
        s3.get("corpus", "out/_SUCCESS.shard-00001").unwrap(),
        other_manifest
    );
    let mut again = s3.keys("corpus", "out/");
    again.retain(|k| k != "out/notes.txt");
    assert_eq!(again, published);
    for (name, bytes) in &files {
        assert!(
            s3.get("corpus", &format!("out/{name}")).as_ref() == Some(bytes),
            "{name} differs after the shard was written again"
        );
    }
    assert!(s3.get("work", "d-0-again.jsonl").unwrap() == s3.get("work", "run/d-0.jsonl").unwrap());

    // `apply` reads the tables and the hot-key file from object storage too.
    let mut args = vec!["apply"];
    args.extend(tables.iter().map(String::as_str));
    args.extend(["--hot", &hot, "--decisions", "s3://work/apply.jsonl"]);
    args.extend(settings);
    step(&s3, &cwd, &args);
    assert!(s3.get("work", "apply.jsonl").unwrap() == want.as_bytes());

    // The same checks as for files: an output that is an input of its step is refused before
    // any work, and a missing step output is named. Spill files stay on a local disk.
    let o = with_env(
        neardup()
            .current_dir(&cwd)
            .args(["hot", &tables[0], &tables[1], "-o", &tables[1]]),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "the hot-key file (--output) {} is the key table {}",
            tables[1], tables[1]
        )),
        "{err}"
    );
    let o = with_env(
        neardup().current_dir(&cwd).args([
            "hot",
            &tables[0],
            "--spill-dir",
            "s3://work/spill/",
            "-o",
            "s3://work/hot-0.ndh",
        ]),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the spill directory (--spill-dir) s3://work/spill/: spill files are"),
        "{err}"
    );
    let mut args = vec!["decide", &sigs[0], &sigs[1], "s3://work/run/sig-9"];
    args.extend([
        "--hot",
        &hot,
        "--group",
        "0",
        "-o",
        "s3://work/run/decided-x",
    ]);
    args.extend(settings);
    let o = with_env(neardup().current_dir(&cwd).args(&args), &s3.env());
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("s3://work/run/sig-9: not a `neardup sign` output")
            && err.contains("no such object"),
        "{err}"
    );
    assert!(s3.keys("work", "run/decided-x").is_empty());
    // No step writes over an object a step of the run reads: a sign or decide output's files,
    // or an input object the manifests name.
    let objects = |bucket: &str| -> Vec<(String, Option<Vec<u8>>)> {
        s3.keys(bucket, "")
            .into_iter()
            .map(|k| {
                let bytes = s3.get(bucket, &k);
                (k, bytes)
            })
            .collect()
    };
    let before = (objects("work"), objects("corpus"));
    let decide_args = |rest: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = vec!["decide".into()];
        args.extend(sigs.iter().cloned());
        args.extend(["--hot", &hot, "--group", "0"].map(String::from));
        args.extend(rest.iter().map(|s| s.to_string()));
        args.extend(settings.map(String::from));
        args
    };
    let mut write_args: Vec<String> = ["write", &tables[0], "--hot", &hot]
        .map(String::from)
        .to_vec();
    for d in &decided {
        write_args.extend(["--decided".to_string(), d.clone()]);
    }
    write_args.extend(settings.map(String::from));
    let cases: [(Vec<String>, &str); 4] = [
        (
            decide_args(&[
                "-o",
                "s3://work/run/decided-y",
                "--report",
                "s3://work/run/sig-1/manifest.json",
            ]),
            "the report (--report) s3://work/run/sig-1/manifest.json is the sign output",
        ),
        (
            decide_args(&["-o", "s3://work/run/sig-2"]),
            "s3://work/run/sig-2/manifest.json is the sign output",
        ),
        (
            [
                &write_args[..],
                &[
                    "--decisions".into(),
                    "s3://work/run/decided-1/manifest.json".into(),
                ],
            ]
            .concat(),
            "s3://work/run/decided-1/manifest.json is the decide output",
        ),
        (
            [
                &write_args[..],
                &["--decisions".into(), "s3://corpus/in/big.jsonl".into()],
            ]
            .concat(),
            "s3://corpus/in/big.jsonl is the input file",
        ),
    ];
    for (args, expected) in cases {
        let o = with_env(neardup().current_dir(&cwd).args(&args), &s3.env());
        let err = support::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(
            (objects("work"), objects("corpus")) == before,
            "{args:?} changed an object"
        );
    }
    // A prefix holding objects is no step's to write into (exit code 1), but with --overwrite an
    // earlier output of the same step, replaced by the same bytes.
    let sign_args = |out: &str, rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["sign", &tables[0], "--hot", &hot, "-o", out]
            .map(String::from)
            .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args.extend(settings.map(String::from));
        args
    };
    for (args, expected) in [
        (sign_args(&decided[0], &[]), "is not empty"),
        (sign_args(&sigs[0], &[]), "pass --overwrite"),
        (
            sign_args(&decided[0], &["--overwrite"]),
            "replaces only an earlier `sign` output",
        ),
    ] {
        let o = with_env(neardup().current_dir(&cwd).args(&args), &s3.env());
        let err = support::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(
            (objects("work"), objects("corpus")) == before,
            "{args:?} changed an object"
        );
    }
    let o = with_env(
        neardup()
            .current_dir(&cwd)
            .args(sign_args(&sigs[0], &["--overwrite"])),
        &s3.env(),
    );
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!((objects("work"), objects("corpus")) == before);
    let o = with_env(
        neardup()
            .current_dir(&cwd)
            .args(["sign", "s3://work/run/keys-7.ndk", "--hot", &hot, "-o"])
            .arg(tmp.path().join("sig-7"))
            .args(settings),
        &s3.env(),
    );
    let err = support::stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("s3://work/run/keys-7.ndk: no such object"),
        "{err}"
    );
}

#[test]
fn no_credential_reaches_logs_reports_decisions_manifests_or_errors() {
    let secrets = ["AKIDsecretid7", "SECRETkey9xyzzy", "TOKENsession4plugh"];
    let leaks = |what: &str, text: &str| {
        for s in secrets.iter().chain(&[
            "Signature=",
            "X-Amz-Signature",
            "Authorization",
            "x-amz-security-token",
        ]) {
            assert!(
                !text.to_ascii_lowercase().contains(&s.to_ascii_lowercase()),
                "{what} holds {s}"
            );
        }
    };
    let env = |endpoint: &str| {
        let mut env = s3::env_for(endpoint);
        for (k, v) in &mut env {
            match *k {
                "AWS_ACCESS_KEY_ID" => *v = secrets[0].to_string(),
                "AWS_SECRET_ACCESS_KEY" => *v = secrets[1].to_string(),
                _ => {}
            }
        }
        env.push(("AWS_SESSION_TOKEN", secrets[2].to_string()));
        env
    };
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("corpus");
    corpus(&local);
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "in/", &local);

    // A whole run at the most verbose log level, every output on the server.
    let o = with_env(
        neardup()
            .args([
                "-vv",
                "dedup",
                "s3://corpus/in/",
                "--output",
                "s3://corpus/out/",
            ])
            .args([
                "--decisions",
                "s3://corpus/d.jsonl",
                "--report",
                "s3://corpus/r.json",
            ]),
        &env(&s3.endpoint()),
    );
    let err = support::stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("TRACE"), "not the most verbose log");
    leaks("the log", &err);
    for key in s3.keys("corpus", "") {
        if !key.starts_with("in/") {
            leaks(
                &key,
                &String::from_utf8_lossy(&s3.get("corpus", &key).unwrap()),
            );
        }
    }
    // Failed runs: a connection that keeps dropping, a missing object, refused credentials.
    let proxy = DroppingProxy::start(s3.port, 2_000, usize::MAX);
    let o = with_env(
        neardup()
            .args(["-vv", "dedup", "s3://corpus/in/big.jsonl", "--decisions"])
            .arg(tmp.path().join("d.jsonl")),
        &env(&format!("http://127.0.0.1:{}", proxy.port)),
    );
    assert_eq!(o.status.code(), Some(1));
    leaks("the error of a dropped connection", &support::stderr(&o));
    let o = with_env(
        neardup().args([
            "-vv",
            "keys",
            "s3://corpus/in/nothing.jsonl",
            "-o",
            "s3://corpus/k.ndk",
        ]),
        &env(&s3.endpoint()),
    );
    assert_eq!(o.status.code(), Some(1));
    leaks("the error of a missing object", &support::stderr(&o));
    let denying = S3Server::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "2")]);
    denying.create_bucket("corpus");
    denying.put("corpus", "in/a.jsonl", b"{\"text\":\"x\"}\n");
    let o = with_env(
        neardup().args([
            "-vv",
            "dedup",
            "s3://corpus/in/a.jsonl",
            "--decisions",
            "s3://corpus/d.jsonl",
        ]),
        &env(&denying.endpoint()),
    );
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("access denied"), "{err}");
    leaks("the error of refused credentials", &err);
}

/// A gzip file of several members and a zstd file of several frames on object storage are read
/// by the members holding records to decide (ranged requests from each member's start), as the
/// same files on disk are: the same decisions and the same `stage2.bytes_read`, less than the
/// files hold. A Parquet dataset written from objects is the one written from the files, byte
/// for byte: the row groups kept whole are copied from the objects' bytes.
#[test]
fn compressed_members_and_parquet_row_groups_are_read_from_objects_as_from_files() {
    let s3 = S3Server::start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let (parquet, _) = crate::stage2_reads::parquet_corpus(tmp.path());
    let lines = |body: String| -> Vec<Vec<u8>> {
        body.split_inclusive('\n')
            .map(|l| l.as_bytes().to_vec())
            .collect()
    };
    let a = lines(unique_lines("a", 1500));
    // Exact copies of a's first lines among b's: the only records to decide.
    let mut b = lines(unique_lines("b", 1000));
    b.splice(500..500, a[..40].iter().cloned());
    let members = tmp.path().join("members");
    std::fs::create_dir_all(&members).unwrap();
    use crate::stage2_reads::in_members;
    std::fs::write(members.join("a.jsonl.gz"), in_members(&a, 5, false)).unwrap();
    std::fs::write(members.join("b.jsonl.zst"), in_members(&b, 5, true)).unwrap();
    let size = |dir: &Path| -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    s3.create_bucket("corpus");
    s3.upload_dir("corpus", "m/", &members);
    s3.upload_dir("corpus", "pq/", &parquet);
    let dedup = |input: &str, tag: &str, output: bool| {
        let (decisions, report) = dedup_reported(&s3, tmp.path(), input, tag, output);
        let read = report["stage2"]["bytes_read"].as_u64().unwrap();
        let dropped = report["totals"]["records_dropped"].as_u64().unwrap();
        (decisions, read, dropped)
    };
    let total = size(&members);
    let (files, files_read, dropped) = dedup(members.to_str().unwrap(), "files", false);
    assert!(dropped >= 40, "{dropped} records dropped");
    assert!(
        files_read > 0 && files_read < total * 3 / 4,
        "{files_read} bytes read of {total}"
    );
    let (objects, objects_read, _) = dedup("s3://corpus/m/", "objects", false);
    assert!(objects.contains(r#""file":"s3://corpus/m/a.jsonl.gz""#));
    let prefix = format!("{}/", members.display());
    assert_eq!(objects, files.replace(&prefix, "s3://corpus/m/"));
    assert_eq!(objects_read, files_read, "the same bytes as from the files");

    let (_, files_out_read, _) = dedup(parquet.to_str().unwrap(), "files-o", true);
    let (_, objects_out_read, _) = dedup("s3://corpus/pq/", "objects-o", true);
    assert_eq!(files_out_read, size(&parquet));
    assert_eq!(objects_out_read, files_out_read);
    let (from_files, from_objects) = (
        tree(&tmp.path().join("out-files-o")),
        tree(&tmp.path().join("out-objects-o")),
    );
    assert_eq!(
        from_files.keys().collect::<Vec<_>>(),
        from_objects.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &from_files {
        assert!(
            &from_objects[name] == bytes,
            "{name}: written from objects otherwise than from files"
        );
    }
    // q.parquet's copies are all in its third row group: its first is copied as stored.
    let footer = |path: &Path| {
        parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&std::fs::File::open(path).unwrap())
            .unwrap()
    };
    let out = tmp.path().join("out-objects-o/q.parquet");
    let (input, output) = (
        std::fs::read(parquet.join("q.parquet")).unwrap(),
        std::fs::read(&out).unwrap(),
    );
    let (in_meta, out_meta) = (footer(&parquet.join("q.parquet")), footer(&out));
    assert_eq!(
        in_meta.row_group(0).num_rows(),
        out_meta.row_group(0).num_rows()
    );
    for (i, o) in in_meta
        .row_group(0)
        .columns()
        .iter()
        .zip(out_meta.row_group(0).columns())
    {
        let ((ia, il), (oa, ol)) = (i.byte_range(), o.byte_range());
        assert!(
            input[ia as usize..(ia + il) as usize] == output[oa as usize..(oa + ol) as usize],
            "q.parquet's first row group was not copied"
        );
    }
}
