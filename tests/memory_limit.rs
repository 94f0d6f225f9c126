//! `--memory-limit` as a user meets it: a spill location that cannot take files fails the run
//! before any work; a limit below what a run needs says so before the run starts.

use std::process::Command;

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

/// Runs `cmd` and returns its exit code, its stderr and its peak resident memory in bytes (the
/// kernel's `ru_maxrss` of the child).
fn run_measured(cmd: &mut Command) -> (Option<i32>, String, u64) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("start neardup");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid for writes.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    // The child is reaped: `Child` must not wait for it again.
    std::mem::forget(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let text = std::fs::read_to_string(stderr.path()).unwrap();
    (code, text, usage.ru_maxrss as u64 * 1024)
}

/// A spill location that cannot take files, with a limit, fails the run before any work and
/// names it; nothing is published.
#[test]
fn an_unusable_spill_location_fails_the_run_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"text\":\"one text\"}\n{\"text\":\"one text\"}\n").unwrap();
    let blocker = tmp.path().join("a-file");
    std::fs::write(&blocker, b"").unwrap();
    let out = tmp.path().join("out");
    // The system's temporary directory (TMPDIR) under a file: there is no such directory.
    let tmpdir = blocker.join("tmp");
    let (code, stderr, _) = run_measured(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .args(["--memory-limit", "64MB"])
            .env("TMPDIR", &tmpdir),
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&*tmpdir.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("spill"), "{stderr}");
    assert!(!stderr.contains("scratch file"), "{stderr}");
    assert!(!out.exists());
    // A directory the kernel will not make files in (procfs), given as --spill-dir.
    let (code, stderr, _) = run_measured(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .args(["--memory-limit", "64MB", "--spill-dir", "/proc/self/fdinfo"]),
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("/proc/self/fdinfo"), "{stderr}");
    assert!(!out.exists());
}

/// A limit below what any run needs is not taken silently: the run says what it will use.
#[test]
fn a_limit_below_what_a_run_needs_says_what_the_run_will_use() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"text\":\"one text\"}\n{\"text\":\"one text\"}\n").unwrap();
    let (code, stderr, _) = run_measured(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("--decisions")
            .arg(tmp.path().join("d.jsonl"))
            .args(["--memory-limit", "1MiB", "-j", "2"])
            .arg("--spill-dir")
            .arg(tmp.path()),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("--memory-limit"), "{stderr}");
    assert!(stderr.contains("will use about"), "{stderr}");
    // A limit that leaves room says nothing about it.
    let (code, stderr, _) = run_measured(
        neardup()
            .arg("dedup")
            .arg(&input)
            .arg("--decisions")
            .arg(tmp.path().join("d2.jsonl"))
            .args(["--memory-limit", "4GiB", "-j", "2"])
            .arg("--spill-dir")
            .arg(tmp.path()),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("will use about"), "{stderr}");
}
