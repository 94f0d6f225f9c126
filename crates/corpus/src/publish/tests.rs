//! Publication: all or nothing, overwrite rules, recovery from a death inside the commit, dead
//! runs' leftovers, live runs' files.

use super::*;
use crate::{Chunk, ChunkRange, InputFile, Projection, ReadOptions, TextSelector, read_chunk};

/// Writes an input file of `lines` JSONL records named `name` in `dir`, returns it.
fn input(dir: &Path, name: &str, lines: usize, tag: &str) -> InputFile {
    let path = dir.join(name);
    let body: String = (0..lines)
        .map(|i| format!("{{\"text\":\"{tag} {i}\"}}\n"))
        .collect();
    fs::write(&path, body).unwrap();
    InputFile::detect(&path, Path::new(name), None).unwrap()
}

/// Copies every record of `f` into the publication's dataset.
fn copy_all(p: &Publication, f: &InputFile) {
    let mut w = p.dataset().unwrap().file_writer(f).unwrap();
    let opts = ReadOptions {
        selector: TextSelector::single("text".parse().unwrap()),
        projection: Projection::FullRecords,
        block_bytes: 1 << 16,
    };
    let chunk = Chunk {
        file: 0,
        seq: 0,
        range: ChunkRange::Whole,
    };
    for b in read_chunk(f, &chunk, &opts) {
        let b = b.unwrap();
        w.write_block(&b, 0, &vec![true; b.num_records()]).unwrap();
    }
    w.finish().unwrap();
}

fn write_file(p: &Publication, path: &Path, bytes: &[u8]) {
    let mut f = p.file(path).unwrap();
    f.write_all(bytes).unwrap();
    f.commit().unwrap();
}

/// Every name in `dir` and below, sorted (directories end with `/`).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(base).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &e.path(), out);
            } else {
                out.push(rel);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

struct Setup {
    tmp: tempfile::TempDir,
    inputs: Vec<InputFile>,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("in")).unwrap();
        let inputs = ["a.jsonl", "a-1.jsonl", "b.jsonl"]
            .iter()
            .map(|n| input(&tmp.path().join("in"), n, 5, tag))
            .collect();
        Setup { tmp, inputs }
    }
    fn out(&self) -> PathBuf {
        self.tmp.path().join("out")
    }
    fn decisions(&self) -> PathBuf {
        self.tmp.path().join("meta/decisions.jsonl")
    }
    fn options(&self, overwrite: bool) -> PublishOptions {
        PublishOptions {
            output: Some(OutputOptions {
                dir: self.out(),
                overwrite,
                max_output_bytes: None,
            }),
            outputs: self.inputs.iter().map(|f| f.relative.clone()).collect(),
            decisions: Some(self.decisions()),
            report: Some(self.tmp.path().join("meta/report.json")),
            ..PublishOptions::default()
        }
    }
    /// A whole run's outputs, not committed.
    fn run(&self, overwrite: bool, tag: &str) -> Publication {
        let p = Publication::begin(&self.options(overwrite)).unwrap();
        for f in &self.inputs {
            copy_all(&p, f);
        }
        write_file(
            &p,
            &self.decisions(),
            format!("decisions {tag}\n").as_bytes(),
        );
        write_file(
            &p,
            &self.tmp.path().join("meta/report.json"),
            format!("report {tag}\n").as_bytes(),
        );
        p
    }
}

#[test]
fn nothing_is_published_before_the_commit_and_everything_after() {
    let s = Setup::new("one");
    let p = s.run(false, "one");
    assert_eq!(
        tree(&s.out()),
        vec![
            format!(".neardup-{}/", p.run_id()),
            format!(".neardup-{}/.lock", p.run_id()),
            format!(".neardup-{}/a-1.jsonl", p.run_id()),
            format!(".neardup-{}/a.jsonl", p.run_id()),
            format!(".neardup-{}/b.jsonl", p.run_id()),
        ]
    );
    assert!(!s.decisions().exists());
    let run = p.run_id();
    let published = p.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "a.jsonl", "b.jsonl"]
    );
    assert_eq!(
        tree(&s.tmp.path().join("meta")),
        ["decisions.jsonl", "report.json"]
    );
    for f in &s.inputs {
        assert_eq!(
            fs::read(s.out().join(&f.relative)).unwrap(),
            fs::read(&f.path).unwrap()
        );
    }
    let m = read_manifest(&s.out(), MANIFEST).unwrap().unwrap();
    assert_eq!(Some(&m), published.manifest.as_ref());
    assert_eq!(m.run_id, run.to_string());
    let listed: Vec<(&str, u64)> = m
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.records))
        .collect();
    assert_eq!(listed, [("a.jsonl", 5), ("a-1.jsonl", 5), ("b.jsonl", 5)]);
    for f in &m.files {
        assert_eq!(fs::metadata(s.out().join(&f.path)).unwrap().len(), f.bytes);
    }
    assert_eq!(
        m.decisions.unwrap().path,
        std::path::absolute(s.decisions()).unwrap()
    );
    assert!(
        m.committed_at.ends_with('Z') && m.committed_at.len() == 24,
        "{}",
        m.committed_at
    );
}

#[test]
fn a_dropped_publication_leaves_nothing() {
    let s = Setup::new("one");
    let p = s.run(false, "one");
    drop(p);
    assert!(!s.out().exists(), "the output directory it created is gone");
    assert!(!s.tmp.path().join("meta").exists());
}

#[test]
fn cancelled_before_the_commit_publishes_nothing() {
    let s = Setup::new("one");
    let cancel = CancelToken::new();
    let mut opts = s.options(false);
    opts.cancel = cancel.clone();
    let p = Publication::begin(&opts).unwrap();
    for f in &s.inputs {
        copy_all(&p, f);
    }
    cancel.cancel();
    assert_eq!(p.commit().unwrap_err().kind(), "interrupted");
    assert!(!s.out().exists());
}

#[test]
fn an_unfinished_output_stops_the_commit() {
    let s = Setup::new("one");
    let p = Publication::begin(&s.options(false)).unwrap();
    copy_all(&p, &s.inputs[0]);
    let _half = p.dataset().unwrap().file_writer(&s.inputs[1]).unwrap();
    assert_eq!(p.commit().unwrap_err().kind(), "unfinished");
    assert!(!s.out().exists());
}

#[test]
fn overwrite_replaces_only_what_a_manifest_lists() {
    let s = Setup::new("one");
    s.run(false, "one").commit().unwrap();
    // Without overwrite a published directory is refused before anything is written.
    let e = Publication::begin(&s.options(false)).unwrap_err();
    assert_eq!(e.kind(), "exists");
    assert!(e.to_string().contains("--overwrite"), "{e}");

    // The user's own file beside the outputs survives an overwrite.
    fs::write(s.out().join("notes.txt"), b"mine").unwrap();
    // An earlier run's file that the new run does not write again is removed.
    let mut fewer = Setup::new("two");
    fewer.inputs.truncate(2);
    let old = s.inputs[2].relative.clone();
    let mut opts = s.options(true);
    opts.outputs.truncate(2);
    let p = Publication::begin(&opts).unwrap();
    for f in &fewer.inputs {
        copy_all(&p, f);
    }
    write_file(&p, &s.decisions(), b"two\n");
    write_file(&p, &s.tmp.path().join("meta/report.json"), b"two\n");
    p.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "a.jsonl", "notes.txt"],
        "{old:?} removed, notes.txt kept"
    );
    assert_eq!(fs::read(s.out().join("notes.txt")).unwrap(), b"mine");
    assert_eq!(
        fs::read(s.out().join("a.jsonl")).unwrap(),
        fs::read(&fewer.inputs[0].path).unwrap()
    );
    assert_eq!(fs::read(s.decisions()).unwrap(), b"two\n");

    // A file no manifest lists where an output goes is refused, before any work, by name.
    fs::write(s.out().join("b.jsonl"), b"the user's b").unwrap();
    let e = Publication::begin(&s.options(true)).unwrap_err();
    assert_eq!(e.kind(), "not_ours");
    assert!(e.to_string().contains("b.jsonl"), "{e}");
    assert_eq!(fs::read(s.out().join("b.jsonl")).unwrap(), b"the user's b");

    // A listed file that was changed since is not replaced either.
    fs::remove_file(s.out().join("b.jsonl")).unwrap();
    fs::write(s.out().join("a.jsonl"), b"edited").unwrap();
    let e = Publication::begin(&s.options(true)).unwrap_err();
    assert_eq!(e.kind(), "changed");
    assert_eq!(fs::read(s.out().join("a.jsonl")).unwrap(), b"edited");

    // A manifest that is not neardup's (Hadoop's empty marker) is not trusted.
    fs::remove_file(s.out().join("a.jsonl")).unwrap();
    fs::write(s.out().join("_SUCCESS"), b"").unwrap();
    let e = Publication::begin(&s.options(true)).unwrap_err();
    assert_eq!(e.kind(), "foreign_manifest");
}

#[test]
fn a_file_appearing_during_the_run_is_never_replaced() {
    let s = Setup::new("one");
    let p = s.run(false, "one");
    fs::write(s.out().join("b.jsonl"), b"appeared").unwrap();
    let e = p.commit().unwrap_err();
    assert_eq!(e.kind(), "not_ours");
    assert_eq!(fs::read(s.out().join("b.jsonl")).unwrap(), b"appeared");
    assert_eq!(tree(&s.out()), ["b.jsonl"], "nothing else published");
    assert!(!s.decisions().exists());
}

/// The published state: every file of the output directory and the meta directory with its
/// bytes, and the manifest's run.
fn state(s: &Setup) -> (Vec<(String, Vec<u8>)>, Option<String>) {
    let mut files = Vec::new();
    for dir in [s.out(), s.tmp.path().join("meta")] {
        for name in tree(&dir) {
            assert!(!name.starts_with('.'), "{name} left in {}", dir.display());
            if name != "_SUCCESS" {
                files.push((name.clone(), fs::read(dir.join(&name)).unwrap()));
            }
        }
    }
    let run = read_manifest(&s.out(), MANIFEST).unwrap().map(|m| m.run_id);
    (files, run)
}

/// A run dies after each possible number of its commit's operations; the next run that sweeps
/// the directory (any of the commit's directories) finishes the commit, so the published set is
/// the whole new run — never a mix, never the old run's files beside the new manifest.
#[test]
fn a_death_inside_the_commit_is_rolled_forward_by_the_next_run() {
    let base = Setup::new("old");
    base.run(false, "old").commit().unwrap();
    let want_old = state(&base);
    let mut ops = 0;
    for die_after in 0.. {
        let s = Setup::new("old");
        s.run(false, "old").commit().unwrap();
        assert_eq!(state(&s).0, want_old.0);
        // The new run writes other contents (and one input fewer).
        let new = Setup::new("new");
        let mut opts = s.options(true);
        opts.outputs.truncate(2);
        let mut p = Publication::begin(&opts).unwrap();
        for f in &new.inputs[..2] {
            copy_all(&p, f);
        }
        write_file(&p, &s.decisions(), b"new decisions\n");
        write_file(&p, &s.tmp.path().join("meta/report.json"), b"new report\n");
        let run = p.run_id().to_string();
        p.die_after_ops = Some(die_after);
        assert_eq!(p.commit().unwrap_err().kind(), "died");
        let journal = s.out().join(format!(".neardup-{run}.commit"));
        assert!(journal.exists());
        if die_after == 0 {
            let j: Journal = serde_json::from_slice(&fs::read(&journal).unwrap()).unwrap();
            ops = j.ops.len();
            assert_eq!(j.copies.len(), 2, "one copy per directory");
        }
        // While the journal waits, a manifest present is never wrong about the files.
        if let Some(m) = read_manifest(&s.out(), MANIFEST).unwrap() {
            for f in &m.files {
                assert_eq!(fs::metadata(s.out().join(&f.path)).unwrap().len(), f.bytes);
            }
        }
        // The next run writes only the decisions: sweeping their directory finishes the commit.
        let next = Publication::begin(&PublishOptions {
            decisions: Some(s.decisions()),
            ..PublishOptions::default()
        })
        .unwrap();
        drop(next);
        let (files, manifest_run) = state(&s);
        assert_eq!(
            manifest_run.as_deref(),
            Some(run.as_str()),
            "after {die_after} ops"
        );
        let mut want: Vec<(String, Vec<u8>)> = new.inputs[..2]
            .iter()
            .map(|f| (f.relative.display().to_string(), fs::read(&f.path).unwrap()))
            .collect();
        want.push(("decisions.jsonl".into(), b"new decisions\n".to_vec()));
        want.push(("report.json".into(), b"new report\n".to_vec()));
        want.sort();
        let mut files = files;
        files.sort();
        assert_eq!(files, want, "after {die_after} of {ops} ops");
        if die_after > ops {
            break;
        }
    }
    assert!(ops >= 10, "{ops}");
}

/// A journal whose copies were not all written (the run died writing them) is dropped: nothing
/// had been moved, and the dead run's files are swept.
#[test]
fn a_half_written_journal_is_dropped() {
    let s = Setup::new("old");
    s.run(false, "old").commit().unwrap();
    let before = state(&s);
    let mut p = s.run(true, "new");
    let run = p.run_id();
    let journal = Journal::new(
        run,
        [s.out(), s.tmp.path().join("meta")],
        vec![Op::Remove {
            path: s.out().join("a.jsonl"),
        }],
    );
    // Only the first copy, and the process "dies" (its locks go with it).
    fs::write(&journal.copies[0], serde_json::to_vec(&journal).unwrap()).unwrap();
    p.committed = true;
    drop(p);
    Publication::begin(&s.options(true)).map(drop).unwrap();
    assert_eq!(state(&s), before, "nothing of the dead run, nothing lost");
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "a.jsonl", "b.jsonl"]
    );
}

#[test]
fn a_live_runs_files_are_left_alone() {
    let s = Setup::new("one");
    let live = s.run(false, "one");
    // A second run into the same directory is refused and touches nothing.
    let e = Publication::begin(&s.options(true)).unwrap_err();
    assert_eq!(e.kind(), "in_use");
    // Sweeping the directory of the live run's decisions leaves its temporary file.
    let other = Publication::begin(&PublishOptions {
        report: Some(s.tmp.path().join("meta/other.json")),
        ..PublishOptions::default()
    })
    .unwrap();
    drop(other);
    live.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "a.jsonl", "b.jsonl"]
    );
    assert_eq!(fs::read(s.decisions()).unwrap(), b"decisions one\n");
}

#[test]
fn a_dead_runs_leftovers_do_not_make_a_directory_non_empty() {
    let s = Setup::new("one");
    let dead = s.run(false, "dead");
    let staging = s.out().join(format!(".neardup-{}", dead.run_id()));
    let temp = temp_name(&std::path::absolute(s.decisions()).unwrap(), dead.run_id());
    // The process dies: its locks are released, its files stay.
    let mut dead = dead;
    dead.committed = true;
    drop(dead);
    assert!(staging.exists() && temp.exists());
    let p = s.run(false, "one");
    assert!(!staging.exists() && !temp.exists(), "swept");
    p.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "a.jsonl", "b.jsonl"]
    );
}

#[test]
fn a_single_file_replaces_its_target_atomically() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("table.ndk");
    fs::write(&target, b"old").unwrap();
    let mut a = AtomicFile::create(&target).unwrap();
    a.write_all(b"new").unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"old");
    a.commit().unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"new");
    assert_eq!(tree(tmp.path()), ["table.ndk"]);
    let mut a = AtomicFile::create(&target).unwrap();
    a.write_all(b"newer").unwrap();
    drop(a);
    assert_eq!(tree(tmp.path()), ["table.ndk"]);
    assert_eq!(fs::read(&target).unwrap(), b"new");
}

#[test]
fn dates_are_rfc3339() {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(951_782_400_123); // 2000-02-29
    assert_eq!(rfc3339_utc(t), "2000-02-29T00:00:00.123Z");
    let t = UNIX_EPOCH + std::time::Duration::from_secs(4_107_542_399); // 2100-02-28 23:59:59
    assert_eq!(rfc3339_utc(t), "2100-02-28T23:59:59.000Z");
}

#[test]
fn an_earlier_runs_files_in_subdirectories_go_with_their_emptied_directories() {
    let s = Setup::new("one");
    let mut nested = s.inputs[0].clone();
    nested.relative = PathBuf::from("sub/deeper/a.jsonl");
    let options = |overwrite, outputs: Vec<PathBuf>| PublishOptions {
        output: Some(OutputOptions {
            dir: s.out(),
            overwrite,
            max_output_bytes: None,
        }),
        outputs,
        ..PublishOptions::default()
    };
    let p = Publication::begin(&options(false, vec![nested.relative.clone()])).unwrap();
    copy_all(&p, &nested);
    p.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "sub/", "sub/deeper/", "sub/deeper/a.jsonl"]
    );
    fs::create_dir(s.out().join("sub/mine")).unwrap();
    let p = Publication::begin(&options(true, vec![s.inputs[1].relative.clone()])).unwrap();
    copy_all(&p, &s.inputs[1]);
    p.commit().unwrap();
    assert_eq!(
        tree(&s.out()),
        ["_SUCCESS", "a-1.jsonl", "sub/", "sub/mine/"],
        "sub/deeper emptied and removed, the user's sub/mine kept"
    );
}

/// A run publishing into a shared output directory sweeps it when it starts; the manifest another
/// run is committing there is still its temporary file, which must look live to that sweep
/// (its lock held until the commit renames it), or the other run's commit fails.
#[test]
fn a_manifest_being_committed_survives_another_runs_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let temp = liveness::temp_name(&dir.path().join("_SUCCESS.shard-00001"), RunId::new());
    let m = Manifest {
        format: MANIFEST_FORMAT.to_string(),
        format_version: 1,
        run_id: "0".into(),
        neardup_version: "0".into(),
        committed_at: "1970-01-01T00:00:00.000Z".into(),
        files: Vec::new(),
        decisions: None,
        report: None,
        distributed: None,
    };
    let held = write_manifest(&temp, &m).unwrap();
    let swept = sweep(dir.path()).unwrap();
    assert!(temp.exists(), "a live run's manifest was swept");
    assert_eq!(swept.live, vec![temp.clone()]);
    drop(held);
    sweep(dir.path()).unwrap();
    assert!(!temp.exists(), "a dead run's manifest is swept");
}

/// A system error writing a file keeps its kind and OS error code through the publication
/// (callers map them: Python raises the matching `OSError` subclass with its `errno`).
#[test]
fn a_system_error_keeps_its_kind_and_code() {
    let tmp = tempfile::tempdir().unwrap();
    // Longer than any file name may be (255 bytes on Linux file systems).
    let path = tmp.path().join("n".repeat(300));
    let Err(e) = AtomicFile::create(&path) else {
        panic!("the name is too long")
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidFilename, "{e}");
    assert_eq!(e.raw_os_error(), Some(36), "{e}");
    let Err(e) = Publication::begin(&PublishOptions {
        files: vec![path.clone()],
        ..PublishOptions::default()
    }) else {
        panic!("the name is too long")
    };
    assert!(e.to_string().contains("File name too long"), "{e}");
    let system = e.io_error().expect("the system's error is kept");
    assert_eq!(system.raw_os_error(), Some(36));
    // The message holds the system's error, so a chain-printing reporter must not get it again
    // as the source.
    assert!(std::error::Error::source(&e).is_none());
}
