//! The commit journal: the list of renames and removals that publish a run, written (and
//! fsynced) in every directory the commit touches before the first rename, and deleted after the
//! last. A run that dies inside its commit leaves the journal behind; the next run that sweeps
//! any of those directories finishes the commit from it (every file it names is complete), or,
//! if a file appeared meanwhile where the commit would put one, puts back what was moved — so the
//! published set is always one whole run.
//!
//! Every rename refuses to replace an existing file (`renameat2(RENAME_NOREPLACE)`): a file the
//! commit replaces is first moved aside under a hidden name, and the asides are removed last, so
//! until the manifest is in place every step can be undone.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::liveness::{HIDDEN_PREFIX, JOURNAL_SUFFIX, RunId, create_locked, try_lock};

/// Format version of journals.
const VERSION: u32 = 1;

/// One step of a commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    /// Move a file the commit replaces (or no longer publishes) to a hidden name of this run.
    Aside {
        /// The file.
        path: PathBuf,
        /// Its hidden name.
        aside: PathBuf,
    },
    /// Rename `from` (a file of this run) to `to`, which must not exist.
    Rename {
        /// The file's name before.
        from: PathBuf,
        /// Its published name.
        to: PathBuf,
    },
    /// Remove a file moved aside (missing is fine).
    Remove {
        /// The file.
        path: PathBuf,
    },
}

/// A commit's journal, identical in every directory it touches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Journal {
    /// Format version (1).
    pub neardup_commit: u32,
    /// The committing run.
    pub run_id: String,
    /// Every copy of this journal; all of them exist from before the first operation until after
    /// the last.
    pub copies: Vec<PathBuf>,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

impl Journal {
    pub(crate) fn new(run: RunId, dirs: impl IntoIterator<Item = PathBuf>, ops: Vec<Op>) -> Self {
        Journal {
            neardup_commit: VERSION,
            run_id: run.to_string(),
            copies: dirs
                .into_iter()
                .map(|d| d.join(format!("{HIDDEN_PREFIX}{run}{JOURNAL_SUFFIX}")))
                .collect(),
            ops,
        }
    }

    /// Writes every copy, each fsynced with its directory; returns their locks, held until the
    /// copies are removed. On failure the copies written so far are removed.
    pub(crate) fn write(&self) -> io::Result<Vec<File>> {
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let mut held = Vec::with_capacity(self.copies.len());
        for copy in &self.copies {
            let written = create_locked(copy).and_then(|mut f| {
                f.write_all(&bytes)?;
                f.sync_all()?;
                sync_dir(copy);
                Ok(f)
            });
            match written {
                Ok(f) => held.push(f),
                Err(e) => {
                    let _ = fs::remove_file(copy);
                    self.remove();
                    return Err(e);
                }
            }
        }
        Ok(held)
    }

    /// Removes every copy (the commit is complete, or undone).
    pub(crate) fn remove(&self) {
        for copy in &self.copies {
            let _ = fs::remove_file(copy);
        }
        for copy in &self.copies {
            sync_dir(copy);
        }
    }
}

/// How applying a journal went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Every operation is done.
    Done,
    /// A file exists where a rename would put one; what was moved has been put back.
    Conflict(PathBuf),
}

/// Whether `op` shows that it was done: a file moved aside is at its hidden name (names unique to
/// the run), a file of the run is at its published name and no longer at its own.
fn done(op: &Op) -> bool {
    match op {
        Op::Aside { aside, .. } => exists(aside),
        Op::Rename { from, to } => exists(to) && !exists(from),
        Op::Remove { .. } => false,
    }
}

/// Where a dead run's commit stopped: operations run strictly in order, so everything up to the
/// last one that shows it was done is done.
fn resume_point(ops: &[Op]) -> usize {
    ops.iter().rposition(done).map_or(0, |i| i + 1)
}

/// Applies `ops` in order. `recovering`: the journal of a dead run, whose operations may be partly
/// done already; they resume where it stopped. On a conflict or an error, what was moved so far
/// (by this call or by the dead run) is put back.
pub(crate) fn apply(ops: &[Op], recovering: bool) -> io::Result<Applied> {
    let mut created = Vec::new();
    let start = if recovering { resume_point(ops) } else { 0 };
    for (i, op) in ops.iter().enumerate().skip(start) {
        match op {
            Op::Aside { path, aside } => match rename_noreplace(path, aside) {
                Ok(()) => {}
                Err(e) if recovering && e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    undo(&ops[..i], &created);
                    return Ok(Applied::Conflict(aside.clone()));
                }
                Err(e) => {
                    undo(&ops[..i], &created);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("moving {} aside: {e}", path.display()),
                    ));
                }
            },
            Op::Rename { from, to } => {
                if let Some(parent) = to.parent() {
                    make_dirs(parent, &mut created)?;
                }
                match rename_noreplace(from, to) {
                    Ok(()) => {}
                    Err(e) if recovering && e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        undo(&ops[..i], &created);
                        return Ok(Applied::Conflict(to.clone()));
                    }
                    Err(e) => {
                        undo(&ops[..i], &created);
                        return Err(io::Error::new(
                            e.kind(),
                            format!("moving {} to {}: {e}", from.display(), to.display()),
                        ));
                    }
                }
            }
            Op::Remove { path } => match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // The commit is complete; a leftover aside is hidden and harmless.
                Err(e) => tracing::warn!("could not remove {}: {e}", path.display()),
            },
        }
    }
    Ok(Applied::Done)
}

/// Puts back what `ops` moved (last first) and removes the directories the commit created.
fn undo(ops: &[Op], created: &[PathBuf]) {
    for op in ops.iter().rev() {
        let (now, before) = match op {
            Op::Rename { from, to } if done(op) => (to, from),
            Op::Aside { path, aside } if exists(aside) && !exists(path) => (aside, path),
            _ => continue,
        };
        if let Err(e) = rename_noreplace(now, before) {
            tracing::warn!(
                "could not move {} back to {}: {e}",
                now.display(),
                before.display()
            );
        }
    }
    for dir in created.iter().rev() {
        let _ = fs::remove_dir(dir);
    }
}

fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Creates `dir` and its missing parents, recording the ones it created.
pub(crate) fn make_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !exists(at) {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(&d) {
            Ok(()) => created.push(d),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Renames `from` to `to` unless `to` exists (then `AlreadyExists`), atomically where the kernel
/// and filesystem allow it.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        let e = match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(errno) => io::Error::from(errno),
        };
        if !matches!(
            e.raw_os_error(),
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
        ) {
            return Err(e);
        }
    }
    // Without RENAME_NOREPLACE: a hard link fails when the target exists; then the old name goes.
    match fs::hard_link(from, to) {
        Ok(()) => fs::remove_file(from),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound
            ) =>
        {
            Err(e)
        }
        // No hard links either (some network and FAT filesystems): check, then rename.
        Err(_) if exists(to) => Err(io::Error::from(io::ErrorKind::AlreadyExists)),
        Err(_) => fs::rename(from, to),
    }
}

/// Makes the entries of `path`'s directory durable.
pub(crate) fn sync_dir(path: &Path) {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Ok(d) = File::open(dir.unwrap_or(Path::new("."))) {
        // Some filesystems refuse fsync on directories; the entries are written all the same.
        let _ = d.sync_all();
    }
}

/// Opens a journal copy for its lock: `None` when it is gone.
fn open_locked(path: &Path) -> io::Result<Option<Result<(File, Journal), File>>> {
    let mut file = match fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !try_lock(&file).unwrap_or(false) {
        return Err(io::Error::from(io::ErrorKind::WouldBlock));
    }
    // Another process may have finished the commit and removed this copy after we opened it.
    match fs::symlink_metadata(path) {
        Ok(m) if m.ino() == file.metadata()?.ino() && m.dev() == file.metadata()?.dev() => {}
        _ => return Ok(None),
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(match serde_json::from_slice::<Journal>(&bytes) {
        Ok(j) if j.neardup_commit == VERSION => Ok((file, j)),
        _ => Err(file),
    }))
}

/// Settles the journal at `path`, left by a run that may be dead. `Ok(false)`: its run is alive
/// (or another process is settling it) — leave its files alone; `Ok(true)`: nothing is left to
/// do for it.
pub(crate) fn recover(path: &Path) -> io::Result<bool> {
    let path = &std::path::absolute(path)?;
    let (lock, journal) = match open_locked(path) {
        Ok(None) => return Ok(true),
        Ok(Some(Ok(found))) => found,
        Ok(Some(Err(_half_written))) => {
            // The run died writing its journal, before any rename.
            let _ = fs::remove_file(path);
            tracing::info!(
                "removed {}: the journal of a commit that had not started",
                path.display()
            );
            return Ok(true);
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut locks = vec![lock];
    let mut complete = journal.copies.iter().any(|c| c == path);
    for copy in journal.copies.iter().filter(|c| *c != path) {
        match open_locked(copy) {
            Ok(Some(Ok((l, j)))) if j == journal => locks.push(l),
            Ok(Some(Ok((l, _)) | Err(l))) => {
                complete = false;
                locks.push(l);
            }
            Ok(None) => complete = false,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    let run = &journal.run_id;
    if !complete {
        // Copies are all written before the first operation and removed after the last: with
        // one missing, either nothing was done or everything was.
        tracing::info!(
            "removed the journal of run {run}'s commit, which had either not started or finished"
        );
    } else {
        match apply(&journal.ops, true)? {
            Applied::Done => tracing::info!(
                "finished the commit of run {run}, interrupted while it published its outputs \
                 (journal {})",
                path.display()
            ),
            Applied::Conflict(at) => tracing::warn!(
                "could not finish the interrupted commit of run {run}: {} exists now; what it had \
                 moved was put back and none of its outputs are published",
                at.display()
            ),
        }
    }
    journal.remove();
    let _ = fs::remove_file(path);
    drop(locks);
    // The dead run's other leftovers (its staging directory, temporary files) go too, in every
    // directory of the commit; the caller sweeps this one.
    let here = path.parent();
    for dir in journal.copies.iter().filter_map(|c| c.parent()) {
        if Some(dir) != here
            && let Err(e) = super::liveness::sweep(dir)
        {
            tracing::warn!("could not clean {}: {e}", dir.display());
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_never_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        assert_eq!(
            rename_noreplace(&a, &b).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&b).unwrap(), b"b");
        std::fs::remove_file(&b).unwrap();
        rename_noreplace(&a, &b).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"a");
        assert!(!a.exists());
    }

    #[test]
    fn a_conflict_puts_back_what_was_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let p = |n: &str| tmp.path().join(n);
        std::fs::write(p("old"), b"old").unwrap();
        std::fs::write(p("new1"), b"1").unwrap();
        std::fs::write(p("new2"), b"2").unwrap();
        std::fs::write(p("taken"), b"user").unwrap();
        let ops = vec![
            Op::Aside {
                path: p("old"),
                aside: p("aside"),
            },
            Op::Rename {
                from: p("new1"),
                to: p("sub/dir/one"),
            },
            Op::Rename {
                from: p("new2"),
                to: p("taken"),
            },
            Op::Remove { path: p("aside") },
        ];
        assert_eq!(apply(&ops, false).unwrap(), Applied::Conflict(p("taken")));
        assert_eq!(std::fs::read(p("old")).unwrap(), b"old");
        assert_eq!(std::fs::read(p("new1")).unwrap(), b"1");
        assert_eq!(std::fs::read(p("taken")).unwrap(), b"user");
        assert!(!p("aside").exists() && !p("sub").exists());
    }
}
