//! `--memory-limit` as a user meets it: a spill location that cannot take files fails the run
//! before any work; a limit below what a run needs says so before the run starts; a run's peak
//! resident memory stays below the limit plus the constant docs/tuning.md states, at any thread
//! count, on JSONL and Parquet and with a huge record, and decides and writes the same bytes as
//! a run without a limit.

use std::path::Path;
use std::process::Command;

use crate::support;

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

/// Runs `cmd` and returns its exit code, its stderr and its peak resident memory in bytes.
///
/// The peak is the kernel's `ru_maxrss` of the process, which keeps, across `exec`, the high
/// mark of the memory the process had before: spawned from this test process (which holds the
/// generated corpora, and every other test running beside it), a child would inherit its size.
/// So `cmd` is run by a small process of its own, this test binary re-executed as [`reaper`],
/// which spawns it and reports its `ru_maxrss`.
fn run_measured(cmd: &mut Command) -> (Option<i32>, String, u64) {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut spec = vec![cmd.get_program().to_owned()];
    spec.extend(cmd.get_args().map(|a| a.to_owned()));
    let spec: Vec<String> = spec
        .iter()
        .map(|a| a.to_str().expect("UTF-8 arguments").to_owned())
        .collect();
    let mut reaper = Command::new(std::env::current_exe().unwrap());
    reaper
        .args([
            "--exact",
            "memory_limit::reaper",
            "--nocapture",
            "--test-threads",
            "1",
            "--quiet",
        ])
        .env(REAP, spec.join("\u{1f}"))
        .env(REAP_STDERR, stderr.path());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => reaper.env(k, v),
            None => reaper.env_remove(k),
        };
    }
    let out = reaper.output().expect("start the reaper");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("the reaper said no {name}: {text}"))
            .trim()
            .to_owned()
    };
    let code = field("code=").parse::<i32>().ok();
    let peak = field("peak=").parse::<u64>().unwrap();
    (code, std::fs::read_to_string(stderr.path()).unwrap(), peak)
}

/// The command (program and arguments, joined by U+001F) [`reaper`] runs.
const REAP: &str = "NEARDUP_TEST_REAP";
/// Where [`reaper`] sends the command's stderr.
const REAP_STDERR: &str = "NEARDUP_TEST_REAP_STDERR";

/// Not a test: run by [`run_measured`] in a process of its own, it runs the command it is given
/// and prints its exit code (`code=`, `none` when killed by a signal) and its peak resident
/// memory in bytes (`peak=`).
#[test]
fn reaper() {
    let Ok(spec) = std::env::var(REAP) else {
        return;
    };
    let mut parts = spec.split('\u{1f}');
    let mut cmd = Command::new(parts.next().unwrap());
    cmd.args(parts)
        .env_remove(REAP)
        .env_remove(REAP_STDERR)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(std::env::var(REAP_STDERR).unwrap()).unwrap());
    let child = cmd.spawn().expect("start the command");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid for writes.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    // The child is reaped: `Child` must not wait for it again.
    std::mem::forget(child);
    match libc::WIFEXITED(status) {
        true => println!("code={}", libc::WEXITSTATUS(status)),
        false => println!("code=none"),
    }
    println!("peak={}", usage.ru_maxrss as u64 * 1024);
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

const MIB: u64 = 1 << 20;

/// What docs/tuning.md ("Memory limit and spilling") says a run holds beside the limit.
const ABOVE_LIMIT: u64 = 32 * MIB;
/// ... and beside that, per byte of the largest text: the record as read, the text decoded from
/// it when it has escapes, its normalised copy (its shingle set is built and compared in bounded
/// pieces once the text passes 1 MiB).
const PER_TEXT_BYTE: u64 = 3;
/// ... and with a Parquet output, the row group being encoded (here 256 rows of at most 5 KB
/// texts, uncompressed).
const PARQUET_ROW_GROUP: u64 = 2 * MIB;

/// The test corpus: pages of 1 to 5 KB (about 8 MB), and its limit, under which the key table
/// fits but stage 2's decision state spills.
const PAGES: usize = 10_000;
const LIMIT: u64 = 16_000_000;
/// Rows per row group of the Parquet inputs.
const GROUP_ROWS: usize = 256;
/// The huge record's bytes.
const HUGE: usize = 4_000_000;
/// The bytes of the texts several times the limit.
const HUGER: usize = 3 * LIMIT as usize;

/// Deterministic text: words of a fixed vocabulary drawn by a linear congruential generator.
struct Words {
    state: u64,
    vocabulary: Vec<String>,
}

impl Words {
    fn new(seed: u64) -> Words {
        let mut w = Words {
            state: seed,
            vocabulary: Vec::new(),
        };
        w.vocabulary = (0..6000)
            .map(|_| {
                let len = 2 + w.next() % 9;
                (0..len)
                    .map(|_| char::from(b'a' + (w.next() % 26) as u8))
                    .collect()
            })
            .collect();
        w
    }

    fn next(&mut self) -> u64 {
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.state >> 33
    }

    fn word(&mut self) -> String {
        let i = self.next() as usize % self.vocabulary.len();
        self.vocabulary[i].clone()
    }

    fn text(&mut self, bytes: usize) -> Vec<String> {
        let mut words = Vec::new();
        let mut n = 0;
        while n < bytes {
            let w = self.word();
            n += w.len() + 1;
            words.push(w);
        }
        words
    }

    /// `words` with about one word in `every` replaced.
    fn edited(&mut self, words: &[String], every: u64) -> Vec<String> {
        words
            .iter()
            .map(|w| {
                if self.next().is_multiple_of(every) {
                    self.word()
                } else {
                    w.clone()
                }
            })
            .collect()
    }
}

/// A corpus of pages of 1 to 5 KB: about a third near copies of an earlier page, some exact
/// copies; ids and texts.
fn pages(docs: usize) -> (Vec<String>, Vec<String>) {
    let mut words = Words::new(47);
    let mut texts: Vec<Vec<String>> = Vec::with_capacity(docs);
    for _ in 0..docs {
        let roll = words.next() % 20;
        let text = if texts.len() > 10 && roll < 7 {
            let of = words.next() as usize % texts.len();
            let base = texts[of].clone();
            words.edited(&base, 25)
        } else if texts.len() > 10 && roll < 8 {
            texts[words.next() as usize % texts.len()].clone()
        } else {
            let len = 1000 + words.next() as usize % 4000;
            words.text(len)
        };
        texts.push(text);
    }
    let ids = (0..docs).map(|i| format!("page-{i:05}")).collect();
    (ids, texts.iter().map(|t| t.join(" ")).collect())
}

fn write_jsonl(path: &Path, ids: &[String], texts: &[String]) {
    let mut out = String::new();
    for (id, text) in ids.iter().zip(texts) {
        out.push_str(&format!("{{\"id\":\"{id}\",\"text\":\"{text}\"}}\n"));
    }
    std::fs::write(path, out).unwrap();
}

/// One run's decisions and dataset files (their sizes and a hash of their bytes, by name; the
/// manifest, which names the run, left out) and its peak resident memory.
struct Ran {
    decisions: Vec<u8>,
    dataset: std::collections::BTreeMap<String, (usize, u64)>,
    peak: u64,
    stderr: String,
}

fn dedup(inputs: &Path, dir: &Path, name: &str, extra: &[&str]) -> Ran {
    let out = dir.join(format!("{name}-out"));
    let decisions = dir.join(format!("{name}-decisions.jsonl"));
    let spill = dir.join("spill");
    let (code, stderr, peak) = run_measured(
        neardup()
            .arg("dedup")
            .arg(inputs)
            .arg("-o")
            .arg(&out)
            .arg("--decisions")
            .arg(&decisions)
            .args(["--id-field", "id", "--spill-dir"])
            .arg(&spill)
            .args(extra),
    );
    assert_eq!(code, Some(0), "{name}: {stderr}");
    let mut dataset = support::published(&out);
    dataset.retain(|name, _| !name.starts_with("_SUCCESS"));
    assert!(!dataset.is_empty());
    let dataset = dataset
        .into_iter()
        .map(|(name, bytes)| {
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hasher::write(&mut h, &bytes);
            (name, (bytes.len(), std::hash::Hasher::finish(&h)))
        })
        .collect();
    std::fs::remove_dir_all(&out).unwrap();
    Ran {
        decisions: std::fs::read(&decisions).unwrap(),
        dataset,
        peak,
        stderr,
    }
}

/// Runs `inputs` without a limit on one thread, then under `limit` on 1, 2 and 7 threads:
/// every run decides and writes the same bytes, and each limited run peaks below the limit
/// plus `above` (the unlimited run must not, or the check could not fail).
fn holds_at_every_thread_count(inputs: &Path, dir: &Path, limit: u64, above: u64) -> Ran {
    holds_at(inputs, dir, limit, above, &["1", "2", "7"])
}

/// [`holds_at_every_thread_count`] on the thread counts `threads` (the run without a limit is
/// repeated on the last); returns the run without a limit on one thread.
fn holds_at(inputs: &Path, dir: &Path, limit: u64, above: u64, threads: &[&str]) -> Ran {
    let free = dedup(inputs, dir, "free", &["-j", "1"]);
    let bound = limit + above;
    let most = threads.last().copied().unwrap_or("1");
    let free7 = dedup(inputs, dir, "free7", &["-j", most]);
    assert!(
        free7.peak > bound,
        "without a limit the run peaks at {} MiB, under the bound of {} MiB: the check proves nothing",
        free7.peak / MIB,
        bound / MIB
    );
    assert_eq!(free7.decisions, free.decisions);
    assert!(free7.dataset == free.dataset);
    for &threads in threads {
        let name = format!("limit-j{threads}");
        let ran = dedup(
            inputs,
            dir,
            &name,
            &["-j", threads, "--memory-limit", &format!("{limit}")],
        );
        eprintln!(
            "-j {threads}: peak {} MiB, without a limit {} MiB (-j {most}: {} MiB), bound {} MiB",
            ran.peak / MIB,
            free.peak / MIB,
            free7.peak / MIB,
            bound / MIB
        );
        assert!(
            ran.peak <= bound,
            "-j {threads} under --memory-limit {} MiB peaked at {} MiB (bound {} MiB)\n{}",
            limit / MIB,
            ran.peak / MIB,
            bound / MIB,
            ran.stderr
        );
        assert!(
            ran.decisions == free.decisions,
            "-j {threads}: the decisions differ from the run without a limit"
        );
        assert!(
            ran.dataset == free.dataset,
            "-j {threads}: the outputs differ from the run without a limit"
        );
    }
    free
}

#[test]
fn the_limit_holds_on_jsonl_at_every_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (ids, texts) = pages(PAGES);
    let inputs = tmp.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let half = ids.len() / 2;
    write_jsonl(&inputs.join("a.jsonl"), &ids[..half], &texts[..half]);
    write_jsonl(&inputs.join("b.jsonl"), &ids[half..], &texts[half..]);
    holds_at_every_thread_count(&inputs, tmp.path(), LIMIT, ABOVE_LIMIT);
}

#[test]
fn the_limit_holds_on_parquet_at_every_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (ids, texts) = pages(PAGES);
    let inputs = tmp.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let half = ids.len() / 2;
    support::write_parquet_in_groups(
        &inputs.join("a.parquet"),
        &ids[..half],
        &texts[..half],
        Some(GROUP_ROWS),
    );
    support::write_parquet_in_groups(
        &inputs.join("b.parquet"),
        &ids[half..],
        &texts[half..],
        Some(GROUP_ROWS),
    );
    holds_at_every_thread_count(&inputs, tmp.path(), LIMIT, ABOVE_LIMIT + PARQUET_ROW_GROUP);
}

#[test]
fn the_limit_holds_with_a_huge_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut ids, mut texts) = pages(300);
    let mut words = Words::new(4747);
    let huge = words.text(HUGE);
    let near = words.edited(&huge, 50);
    ids.insert(100, "huge".into());
    texts.insert(100, huge.join(" "));
    ids.push("huge-near-copy".into());
    texts.push(near.join(" "));
    let inputs = tmp.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    write_jsonl(&inputs.join("huge.jsonl"), &ids, &texts);
    holds_at_every_thread_count(
        &inputs,
        tmp.path(),
        LIMIT,
        ABOVE_LIMIT + PER_TEXT_BYTE * HUGE as u64,
    );
}

/// Two near-identical texts each three times the limit: their shingle sets (tens of millions of
/// shingles) are built and compared in scratch files, so a run holds only the texts themselves
/// beside the limit, and exact verification still finds the copy.
#[test]
fn the_limit_holds_with_texts_several_times_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    {
        let (mut ids, mut texts) = pages(200);
        let mut words = Words::new(4848);
        let mut huge = String::with_capacity(HUGER + 16);
        while huge.len() < HUGER {
            huge.push_str(&words.word());
            huge.push(' ');
        }
        let mut near = String::with_capacity(huge.len() + 1024);
        for w in huge.split_terminator(' ') {
            match words.next().is_multiple_of(50) {
                true => near.push_str(&words.word()),
                false => near.push_str(w),
            }
            near.push(' ');
        }
        ids.insert(50, "huge".into());
        texts.insert(50, huge);
        ids.push("huge-near-copy".into());
        texts.push(near);
        write_jsonl(&inputs.join("huge.jsonl"), &ids, &texts);
    }
    let free = holds_at(
        &inputs,
        tmp.path(),
        LIMIT,
        ABOVE_LIMIT + PER_TEXT_BYTE * HUGER as u64,
        &["1", "2"],
    );
    let decisions = String::from_utf8(free.decisions).unwrap();
    let near = decisions
        .lines()
        .find(|l| l.contains("\"id\":\"huge-near-copy\""))
        .unwrap();
    assert!(near.contains("\"keep\":false"), "{near}");
    assert!(near.contains("\"dup_of_id\":\"huge\""), "{near}");
}
