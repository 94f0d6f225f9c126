//! End-to-end runs of the binary: outputs never collide or overwrite each other, `--overwrite`
//! replaces only what neardup wrote, a failed run publishes nothing, write errors say where and
//! why, and a dead run's leftovers are cleaned up.

use crate::support;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use serde_json::Value;
use support::*;

fn report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn totals(path: &Path, key: &str) -> u64 {
    report(path)["totals"][key].as_u64().unwrap()
}

/// Inputs named like another input's split parts (`shard.X`, `shard-1.X`, `shard-2.X`), each
/// with 100 unique records: every one of the 300 records is in the output directory, each input
/// has its own output, for plain, gzip and zstd JSONL and for Parquet.
#[test]
fn outputs_of_inputs_named_like_parts_are_all_kept() {
    for ext in ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"] {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in");
        std::fs::create_dir(&input).unwrap();
        let names = ["shard", "shard-1", "shard-2"];
        for name in names {
            let path = input.join(format!("{name}.{ext}"));
            let body = unique_lines(name, 100);
            if ext == "parquet" {
                let rows: Vec<Value> = body
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                let field = |k: &str| -> Vec<String> {
                    rows.iter()
                        .map(|r| r[k].as_str().unwrap().to_string())
                        .collect()
                };
                write_parquet(&path, &field("id"), &field("text"));
            } else {
                write_compressed(&path, body.as_bytes());
            }
        }
        let out = tmp.path().join("out");
        let rep = tmp.path().join("report.json");
        let o = run(neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .arg("--report")
            .arg(&rep)
            .arg("-q"));
        assert!(o.status.success(), "{ext}");
        assert_eq!(totals(&rep, "records_kept"), 300, "{ext}");
        let mut on_disk = 0;
        for name in names {
            let path = out.join(format!("{name}.{ext}"));
            assert!(path.exists(), "{ext}: the output of {name} is missing");
            let n = count_records(&path);
            assert_eq!(n, 100, "{}", path.display());
            on_disk += n;
        }
        assert_eq!(on_disk, 300, "{ext}");
    }
}

/// Split parts of two inputs whose names differ by a `-1` never overwrite each other: every
/// record the report keeps is on disk, in parts named `<stem>.part-<NNNNN><ext>`.
#[test]
fn split_parts_of_two_inputs_never_collide() {
    for ext in ["jsonl", "jsonl.gz"] {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in");
        std::fs::create_dir(&input).unwrap();
        write_compressed(
            &input.join(format!("a.{ext}")),
            unique_lines("a", 400).as_bytes(),
        );
        write_compressed(
            &input.join(format!("a-1.{ext}")),
            unique_lines("b", 400).as_bytes(),
        );
        let out = tmp.path().join("out");
        let rep = tmp.path().join("report.json");
        let o = run(neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .arg("--report")
            .arg(&rep)
            .args(["--max-output-bytes", "20000", "-q"]));
        assert!(o.status.success());
        let kept = totals(&rep, "records_kept");
        assert_eq!(kept, 800);
        let mut on_disk = 0;
        let mut parts = 0;
        for e in std::fs::read_dir(&out).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "_SUCCESS" {
                continue;
            }
            assert!(
                name.starts_with("a.part-") || name.starts_with("a-1.part-"),
                "{name}"
            );
            assert!(name.ends_with(&format!(".{ext}")), "{name}");
            on_disk += count_records(&e.path());
            parts += 1;
        }
        assert!(parts > 4, "{ext}: {parts} parts: the limit split nothing");
        assert_eq!(on_disk, kept, "{ext}: records on disk vs reported kept");
    }
}

/// A record appended to an input read in several chunks, between `keys` and `apply`, lies past
/// every chunk stage 1 recorded: `apply` refuses the input by its size instead of leaving the
/// record out of the dataset unsaid.
#[test]
fn a_record_appended_between_the_stages_is_not_lost_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("a.jsonl");
    std::fs::copy(data("sample/part-0.jsonl"), &input).unwrap();
    let settings = tmp.path().join("s.toml");
    std::fs::write(&settings, "[keys]\nchunk_bytes = 65536\n").unwrap();
    let table = tmp.path().join("t.ndk");
    let hot = tmp.path().join("h.ndh");
    for cmd in [
        neardup()
            .arg("keys")
            .arg(&input)
            .arg("--out")
            .arg(&table)
            .arg("--config")
            .arg(&settings),
        neardup().arg("hot").arg(&table).arg("--out").arg(&hot),
    ] {
        assert!(run(cmd.arg("-q")).status.success());
    }
    let before = std::fs::metadata(&input).unwrap().len();
    let mut body = std::fs::read_to_string(&input).unwrap();
    body.push_str("{\"id\": \"late\", \"text\": \"a record added after stage 1\"}\n");
    std::fs::write(&input, &body).unwrap();
    let out = tmp.path().join("out");
    let dec = tmp.path().join("d.jsonl");
    let o = run(neardup()
        .arg("apply")
        .arg("--hot")
        .arg(&hot)
        .arg("--keys")
        .arg(&table)
        .arg("--config")
        .arg(&settings)
        .arg("-o")
        .arg(&out)
        .arg("--decisions")
        .arg(&dec)
        .arg("-q"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}: {} bytes now, {before} bytes when stage 1 read it",
            input.display(),
            body.len()
        )),
        "{err}"
    );
    assert!(published(&out).is_empty());
    assert!(!dec.exists());
}

/// Records appended to an input while stage 2 reads it (here: `apply`, stopped with SIGSTOP
/// the moment it has the input open, the records appended, then let go on) lie past the chunks
/// stage 1 recorded: the run fails naming the file, and publishes nothing, instead of leaving
/// them out of every output and total.
#[test]
fn records_appended_while_stage_two_reads_are_not_lost_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("a.jsonl");
    let mut body = String::new();
    for _ in 0..12 {
        body.push_str(&std::fs::read_to_string(data("sample/part-0.jsonl")).unwrap());
        body.push_str(&std::fs::read_to_string(data("sample/part-1.jsonl")).unwrap());
    }
    std::fs::write(&input, &body).unwrap();
    let settings = tmp.path().join("s.toml");
    std::fs::write(&settings, "[keys]\nchunk_bytes = 65536\n").unwrap();
    let table = tmp.path().join("t.ndk");
    let hot = tmp.path().join("h.ndh");
    for cmd in [
        neardup()
            .arg("keys")
            .arg(&input)
            .arg("--out")
            .arg(&table)
            .arg("--config")
            .arg(&settings),
        neardup().arg("hot").arg(&table).arg("--out").arg(&hot),
    ] {
        assert!(run(cmd.arg("-q")).status.success());
    }
    let out = tmp.path().join("out");
    let dec = tmp.path().join("d.jsonl");
    let mut child = neardup()
        .arg("apply")
        .arg("--hot")
        .arg(&hot)
        .arg("--keys")
        .arg(&table)
        .arg("--config")
        .arg(&settings)
        .arg("-o")
        .arg(&out)
        .arg("--decisions")
        .arg(&dec)
        .args(["-j", "1", "-q"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let fds = std::path::PathBuf::from(format!("/proc/{pid}/fd"));
    let canonical = std::fs::canonicalize(&input).unwrap();
    let reading = || {
        std::fs::read_dir(&fds).into_iter().flatten().any(|e| {
            e.ok()
                .and_then(|e| std::fs::read_link(e.path()).ok())
                .is_some_and(|target| target == canonical)
        })
    };
    let started = std::time::Instant::now();
    while !reading() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "apply ended before it was seen reading the input"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // SAFETY: signals to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let before = std::fs::metadata(&input).unwrap().len();
    let late: String = (0..100)
        .map(|i| format!("{{\"id\": \"late-{i}\", \"text\": \"a record added while stage 2 ran, number {i}\"}}\n"))
        .collect();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .unwrap()
        .write_all(late.as_bytes())
        .unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("stderr: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: {} bytes when stage 2 ended, {before} bytes when the run read it",
            input.display(),
            before + late.len() as u64
        )),
        "{err}"
    );
    assert!(published(&out).is_empty());
    assert!(!dec.exists());
}

/// `apply` that fails (an input changed since stage 1) publishes no output file, no decisions.
#[test]
fn a_failed_apply_publishes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::copy(data("sample/part-0.jsonl"), input.join("a.jsonl")).unwrap();
    std::fs::copy(data("sample/part-1.jsonl"), input.join("b.jsonl")).unwrap();
    let table = tmp.path().join("t.ndk");
    let hot = tmp.path().join("h.ndh");
    assert!(
        run(neardup()
            .arg("keys")
            .arg(&input)
            .arg("--out")
            .arg(&table)
            .arg("-q"))
        .status
        .success()
    );
    assert!(
        run(neardup()
            .arg("hot")
            .arg(&table)
            .arg("--out")
            .arg(&hot)
            .arg("-q"))
        .status
        .success()
    );
    // The second input changes between the stages.
    let b = std::fs::read(input.join("b.jsonl")).unwrap();
    std::fs::write(input.join("b.jsonl"), &b[..20_000]).unwrap();
    let out = tmp.path().join("out");
    let dec = tmp.path().join("d.jsonl");
    let o = run(neardup()
        .arg("apply")
        .arg("--hot")
        .arg(&hot)
        .arg("--keys")
        .arg(&table)
        .arg("-o")
        .arg(&out)
        .arg("--decisions")
        .arg(&dec)
        .arg("-q"));
    assert_eq!(o.status.code(), Some(1));
    assert!(published(&out).is_empty(), "{:?}", published(&out).keys());
    assert!(!dec.exists());
    assert!(
        artefacts(tmp.path()).is_empty(),
        "{:?}",
        artefacts(tmp.path())
    );
}

/// Runs `cmd` with files limited to `limit` bytes (SIGXFSZ ignored, so writes past it fail with
/// EFBIG like on a full disk).
fn with_file_size_limit(cmd: &mut std::process::Command, limit: u64) -> std::process::Output {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    run(cmd)
}

/// A write that fails (here: past the file size limit, as on a full disk) is reported with the
/// file it was writing and the system's error, and publishes nothing.
#[test]
fn write_errors_name_the_file_and_the_system_error() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    // Larger than the writer's buffer, so the write fails while blocks are still coming.
    std::fs::write(input.join("big.jsonl"), unique_lines("big", 12_000)).unwrap();
    std::fs::write(input.join("more.jsonl"), unique_lines("more", 1000)).unwrap();
    let out = tmp.path().join("out");
    let o = with_file_size_limit(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        256 << 10,
    );
    assert_eq!(o.status.code(), Some(1));
    let msg = stderr(&o);
    assert!(
        msg.contains(&out.join("big.jsonl").display().to_string()),
        "names the output file: {msg}"
    );
    assert!(msg.contains("File too large"), "says why: {msg}");
    assert!(!msg.contains("writer stopped"), "{msg}");
    assert!(published(&out).is_empty());
    assert!(
        artefacts(tmp.path()).is_empty(),
        "{:?}",
        artefacts(tmp.path())
    );

    let dec = tmp.path().join("d.jsonl");
    let o = with_file_size_limit(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("--decisions")
            .arg(&dec)
            .arg("-q"),
        64 << 10,
    );
    assert_eq!(o.status.code(), Some(1));
    let msg = stderr(&o);
    assert!(
        msg.contains(&dec.display().to_string()) && msg.contains("File too large"),
        "{msg}"
    );
    assert!(!dec.exists());
}

fn dedup_into(input: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    run(neardup()
        .arg("dedup")
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(["-q"])
        .args(extra))
}

/// `--overwrite` replaces the files an earlier run wrote (and removes those the new run does not
/// write again), keeps the user's own files, and refuses to replace a file no manifest lists.
#[test]
fn overwrite_replaces_only_what_neardup_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for name in ["a", "b", "c"] {
        std::fs::write(input.join(format!("{name}.jsonl")), unique_lines(name, 20)).unwrap();
    }
    let out = tmp.path().join("out");
    assert!(dedup_into(&input, &out, &[]).status.success());

    // Without --overwrite, refused before any work (a bad input would fail stage 1 first).
    std::fs::write(input.join("z.jsonl"), "not json\n").unwrap();
    let o = dedup_into(&input, &out, &["--on-error", "fail"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--overwrite") && stderr(&o).contains("not empty"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(input.join("z.jsonl")).unwrap();

    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    std::fs::remove_file(input.join("c.jsonl")).unwrap();
    assert!(dedup_into(&input, &out, &["--overwrite"]).status.success());
    let files: Vec<String> = published(&out).into_keys().collect();
    assert_eq!(files, ["_SUCCESS", "a.jsonl", "b.jsonl", "notes.txt"]);
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"mine");

    // A file the user put where an output goes is not replaced: the run is refused, by name.
    std::fs::write(input.join("d.jsonl"), unique_lines("d", 5)).unwrap();
    std::fs::write(out.join("d.jsonl"), b"the user's d").unwrap();
    let o = dedup_into(&input, &out, &["--overwrite"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&out.join("d.jsonl").display().to_string()),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(out.join("d.jsonl")).unwrap(), b"the user's d");
    let files: Vec<String> = published(&out).into_keys().collect();
    assert_eq!(
        files,
        ["_SUCCESS", "a.jsonl", "b.jsonl", "d.jsonl", "notes.txt"]
    );
}

/// What a dead run (killed with SIGKILL) left — a staging directory, a temporary decisions
/// file, a spill directory — is removed by the next run writing there, which is not refused
/// because of it; a live run's (locked) spill directory is left alone.
#[test]
fn a_dead_runs_leftovers_are_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let spill = tmp.path().join("spill");
    let dead = "0123456789abcdef";
    let staging = out.join(format!(".neardup-{dead}"));
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join(".lock"), b"").unwrap();
    std::fs::write(staging.join("part-0.jsonl"), b"half a file").unwrap();
    let temp = tmp.path().join(format!(".d.jsonl.neardup-{dead}.tmp"));
    std::fs::write(&temp, b"half a file").unwrap();
    let dead_spill = spill.join(format!("neardup-spill-{dead}"));
    std::fs::create_dir_all(&dead_spill).unwrap();
    std::fs::write(dead_spill.join(".lock"), b"").unwrap();
    std::fs::write(dead_spill.join("part-000.bin"), [0u8; 16]).unwrap();
    // A live run's spill directory: its lock is held (here by this test).
    let live_spill = spill.join("neardup-spill-fedcba9876543210");
    std::fs::create_dir_all(&live_spill).unwrap();
    let lock = std::fs::File::create(live_spill.join(".lock")).unwrap();
    // SAFETY: flock on an open file.
    assert_eq!(
        unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX,) },
        0
    );

    let o = run(neardup()
        .arg("dedup")
        .arg(data("sample"))
        .arg("-o")
        .arg(&out)
        .arg("--decisions")
        .arg(tmp.path().join("d.jsonl"))
        .arg("--spill-dir")
        .arg(&spill)
        .args(["--memory-limit", "64KiB"]));
    assert!(o.status.success(), "{}", stderr(&o));
    for gone in [&staging, &temp, &dead_spill] {
        assert!(!gone.exists(), "{} was left", gone.display());
    }
    assert!(stderr(&o).contains("removed"), "says what it removed");
    assert!(live_spill.join(".lock").exists(), "a live run's files stay");
    let files: Vec<String> = published(&out).into_keys().collect();
    assert_eq!(
        files,
        ["_SUCCESS", "part-0.jsonl", "part-1.jsonl", "part-2.parquet"]
    );
    drop(lock);
}

/// Two runs writing one decisions file (or report) into different output directories: the
/// second, started while the first is alive (held with SIGSTOP once its temporary decisions file
/// exists), is refused naming the file and publishes nothing; the first then publishes, and its
/// manifest describes the decisions file that is there.
/// Whether some process holds a `flock` on the file with inode `ino` (`/proc/locks` names it
/// as `MAJOR:MINOR:INODE`).
fn flock_held(ino: u64) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let suffix = format!(":{ino}");
    locks.lines().any(|line| {
        line.contains("FLOCK")
            && line
                .split_whitespace()
                .any(|field| field.ends_with(&suffix))
    })
}

#[test]
fn two_runs_writing_one_single_file_output_exclude_each_other() {
    for flag in ["--decisions", "--report"] {
        'attempt: for attempt in 0.. {
            assert!(
                attempt < 20,
                "{flag}: the first run was never stopped in time"
            );
            let tmp = tempfile::tempdir().unwrap();
            let input = tmp.path().join("in");
            std::fs::create_dir(&input).unwrap();
            std::fs::copy(data("sample/part-0.jsonl"), input.join("a.jsonl")).unwrap();
            let shared = tmp.path().join("shared.json");
            let (out_a, out_b) = (tmp.path().join("out-a"), tmp.path().join("out-b"));
            let mut first = neardup()
                .arg("dedup")
                .arg(&input)
                .arg("-o")
                .arg(&out_a)
                .arg(flag)
                .arg(&shared)
                .args(["-q", "-j", "1"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = first.id() as libc::pid_t;
            let started = std::time::Instant::now();
            // The temporary file exists a moment before its lock is taken; stopped in that
            // moment, the first run is rightly not seen as alive, so the test waits for the lock
            // (as /proc/locks lists it: taking it here would disturb the run).
            let temp_exists = || {
                std::fs::read_dir(tmp.path()).unwrap().any(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(".shared.json.neardup-")
                        && name.ends_with(".tmp")
                        && e.metadata().is_ok_and(|m| flock_held(m.ino()))
                })
            };
            while !temp_exists() {
                if first.try_wait().unwrap().is_some() {
                    // It ended before it was seen (a fast run): try again.
                    continue 'attempt;
                }
                assert!(started.elapsed() < std::time::Duration::from_secs(60));
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            // SAFETY: signals to the child this test started and has not reaped.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
            if !temp_exists() {
                // It published between being seen and being stopped (a loaded machine): the
                // second run would rightly find nothing to wait for; try again.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
                first.wait().unwrap();
                continue 'attempt;
            }
            let second = run(neardup()
                .arg("dedup")
                .arg(&input)
                .arg("-o")
                .arg(&out_b)
                .arg(flag)
                .arg(&shared)
                .arg("-q"));
            assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
            let first = first.wait_with_output().unwrap();
            assert!(first.status.success(), "{}", stderr(&first));
            let msg = stderr(&second);
            assert_eq!(second.status.code(), Some(1), "{flag}: {msg}");
            assert!(
                msg.contains(&shared.display().to_string())
                    && msg.contains("another neardup run is writing this file"),
                "{flag}: {msg}"
            );
            assert!(published(&out_b).is_empty(), "{flag}");
            let manifest: Value =
                serde_json::from_slice(&std::fs::read(out_a.join("_SUCCESS")).unwrap()).unwrap();
            let key = if flag == "--decisions" {
                "decisions"
            } else {
                "report"
            };
            assert_eq!(
                manifest[key]["bytes"].as_u64().unwrap(),
                std::fs::metadata(&shared).unwrap().len(),
                "{flag}"
            );
            assert!(
                artefacts(tmp.path()).is_empty(),
                "{:?}",
                artefacts(tmp.path())
            );
            break;
        }
    }
}

/// A spill directory that did not exist is made for the run and gone after it (with the parents
/// made for it), whether the run spilled or not, and whether it succeeded or failed; one that
/// existed stays, as do directories holding anything else.
#[test]
fn no_empty_spill_directory_is_left_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::copy(data("sample/part-0.jsonl"), input.join("a.jsonl")).unwrap();
    for (i, extra) in [&[][..], &["--memory-limit", "1MB"]].iter().enumerate() {
        let spill = tmp.path().join(format!("spill-{i}/deeper"));
        let o = run(neardup()
            .arg("dedup")
            .arg(&input)
            .arg("--decisions")
            .arg(tmp.path().join(format!("d-{i}.jsonl")))
            .arg("--spill-dir")
            .arg(&spill)
            .arg("-q")
            .args(*extra));
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            !tmp.path().join(format!("spill-{i}")).exists(),
            "{extra:?}: the spill directory was left behind"
        );
    }
    // A failed run (an output directory that is not empty) leaves none either.
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"mine").unwrap();
    let o = run(neardup()
        .arg("dedup")
        .arg(&input)
        .arg("-o")
        .arg(&full)
        .arg("--spill-dir")
        .arg(tmp.path().join("spill-f"))
        .arg("-q"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!tmp.path().join("spill-f").exists());
    // An existing one stays.
    let kept = tmp.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let o = run(neardup()
        .arg("dedup")
        .arg(&input)
        .arg("--decisions")
        .arg(tmp.path().join("d-k.jsonl"))
        .arg("--spill-dir")
        .arg(&kept)
        .arg("-q"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(kept.is_dir());
    assert_eq!(std::fs::read_dir(&kept).unwrap().count(), 0);
}
