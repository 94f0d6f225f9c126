//! Run ids, liveness locks, scratch files and directories, and the sweep that removes what dead
//! runs left behind.
//!
//! Every artefact a run creates before publishing carries a run id in its name and is covered by
//! an exclusive `flock` the run holds for as long as it lives: a file artefact is locked itself, a
//! directory artefact through a `.lock` file inside it. The kernel drops the lock when the process
//! dies, even by SIGKILL, so a later run that can take the lock knows the owner is gone. Creating
//! an artefact and locking it are two steps; a sweeper that removed the artefact in between is
//! noticed (the path no longer names the locked file) and the creation is retried, so a live
//! run's artefacts are never removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::journal;

/// Prefix of a run's hidden artefacts: its staging directory `.neardup-<id>`, its commit journal
/// `.neardup-<id>.commit` and its scratch files `.neardup-<id>.<purpose>`.
pub(crate) const HIDDEN_PREFIX: &str = ".neardup-";
/// Prefix of spill directories (`neardup-spill-<id>`), visible like the system's temp files.
pub(crate) const SPILL_PREFIX: &str = "neardup-spill-";
/// The lock file inside a directory artefact.
pub(crate) const LOCK_FILE: &str = ".lock";
/// Suffix of a single-file output's temporary name `.<name>.neardup-<id>.tmp`.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";
/// Suffix of a file moved aside while a commit replaces it: `.<name>.neardup-<id>.old`.
pub(crate) const ASIDE_SUFFIX: &str = ".old";
/// Suffix of a commit journal.
pub(crate) const JOURNAL_SUFFIX: &str = ".commit";

/// Attempts at creating an artefact that a concurrent sweeper removed while it was being made.
const CREATE_ATTEMPTS: usize = 8;

/// A random identifier of one run, carried by the names of everything the run writes before
/// publishing (16 hexadecimal digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(u64);

impl RunId {
    /// A fresh random id.
    pub fn new() -> RunId {
        RunId(random_u64())
    }

    /// Parses the 16 lowercase hexadecimal digits of a name.
    pub(crate) fn parse(hex: &str) -> Option<RunId> {
        (hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(hex, 16).ok().map(RunId))
            .flatten()
    }
}

impl Default for RunId {
    fn default() -> Self {
        RunId::new()
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return u64::from_ne_bytes(bytes);
    }
    // No /dev/urandom (a chroot): the standard library's per-process random hash keys, the
    // process id, the time and a counter still make two runs' ids differ.
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// What a name says about the artefact it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Artefact {
    /// `.neardup-<id>`: a staging directory.
    Staging(RunId),
    /// `.neardup-<id>.commit`: a commit journal.
    Journal(RunId),
    /// `.neardup-<id>.<purpose>`: a scratch file.
    Scratch(RunId),
    /// `.<name>.neardup-<id>.tmp`: a single-file output being written.
    Temp(RunId),
    /// `.<name>.neardup-<id>.old`: a file moved aside by a commit (only a journal removes it).
    Aside(RunId),
    /// `neardup-spill-<id>`: a spill directory.
    Spill(RunId),
}

impl Artefact {
    pub(crate) fn run(self) -> RunId {
        match self {
            Artefact::Staging(r)
            | Artefact::Journal(r)
            | Artefact::Scratch(r)
            | Artefact::Temp(r)
            | Artefact::Aside(r)
            | Artefact::Spill(r) => r,
        }
    }

    /// Recognises the names of artefacts; anything else (a user's file) is `None`.
    pub(crate) fn parse(name: &str) -> Option<Artefact> {
        if let Some(rest) = name.strip_prefix(SPILL_PREFIX) {
            return RunId::parse(rest).map(Artefact::Spill);
        }
        if let Some(rest) = name.strip_prefix(HIDDEN_PREFIX) {
            let (id, suffix) = rest.split_at(rest.len().min(16));
            if let Some(id) = RunId::parse(id) {
                return match suffix {
                    "" => Some(Artefact::Staging(id)),
                    JOURNAL_SUFFIX => Some(Artefact::Journal(id)),
                    s if s.len() > 1 && s.starts_with('.') => Some(Artefact::Scratch(id)),
                    _ => None,
                };
            }
        }
        let marker = ".neardup-";
        if name.starts_with('.') {
            for (suffix, make) in [
                (TEMP_SUFFIX, Artefact::Temp as fn(RunId) -> Artefact),
                (ASIDE_SUFFIX, Artefact::Aside),
            ] {
                if let Some(rest) = name.strip_suffix(suffix)
                    && rest.len() >= marker.len() + 16 + 2
                {
                    let (head, id) = rest.split_at(rest.len() - 16);
                    if head.ends_with(marker)
                        && let Some(id) = RunId::parse(id)
                    {
                        return Some(make(id));
                    }
                }
            }
        }
        None
    }
}

/// Name of a single-file output's temporary file beside it.
pub(crate) fn temp_name(target: &Path, run: RunId) -> PathBuf {
    beside(target, run, TEMP_SUFFIX)
}

/// Name a commit moves `target` aside to before replacing it.
pub(crate) fn aside_name(target: &Path, run: RunId) -> PathBuf {
    beside(target, run, ASIDE_SUFFIX)
}

fn beside(target: &Path, run: RunId, suffix: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.neardup-{run}{suffix}"))
}

/// The temporary file of another live run (not `run`) writing the single-file output `target`:
/// a name `.<name>.neardup-<id>.tmp` beside it whose lock is held. Two runs writing one file
/// would each publish theirs and one run's manifest would describe the other's file.
pub(crate) fn live_temp_of(target: &Path, run: RunId) -> Option<PathBuf> {
    let dir = target.parent()?;
    let name = target.file_name()?.to_str()?;
    let (head, tail) = (format!(".{name}.neardup-"), TEMP_SUFFIX);
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let file_name = entry.file_name();
        let Some(id) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&head))
            .and_then(|n| n.strip_suffix(tail))
            .and_then(RunId::parse)
        else {
            continue;
        };
        if id == run {
            continue;
        }
        let path = entry.path();
        match open_rw(&path) {
            Ok(Opened::File(f)) if !try_lock(&f).unwrap_or(true) => return Some(path),
            Ok(Opened::Denied) => return Some(path),
            _ => {}
        }
    }
    None
}

/// Whether the exclusive lock was taken (`Ok(false)`: another open file holds it).
pub(crate) fn try_lock(file: &File) -> io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// A run's artefact was removed by a sweeper between its creation and its lock.
#[derive(Debug, thiserror::Error)]
#[error("removed by another process while it was being created")]
struct Vanished;

fn vanished(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|r| r.is::<Vanished>()) || e.kind() == io::ErrorKind::WouldBlock
}

/// Creates a new file at `path` (it must not exist), locked; read-write so that the lock also
/// works where `flock` is emulated by record locks (NFS).
fn create_locked_once(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    match try_lock(&file) {
        Ok(true) => {}
        Ok(false) => return Err(io::Error::new(io::ErrorKind::WouldBlock, Vanished)),
        // A filesystem without locks: nobody can take this lock, so nobody removes the file.
        Err(_) => {}
    }
    let on_disk = fs::symlink_metadata(path).map_err(|_| io::Error::other(Vanished))?;
    let ours = file.metadata()?;
    if on_disk.ino() != ours.ino() || on_disk.dev() != ours.dev() {
        return Err(io::Error::other(Vanished));
    }
    Ok(file)
}

/// [`create_locked_once`], again under the same name if a sweeper removed it meanwhile.
pub(crate) fn create_locked(path: &Path) -> io::Result<File> {
    let mut last = None;
    for _ in 0..CREATE_ATTEMPTS {
        match create_locked_once(path) {
            Err(e) if vanished(&e) => last = Some(e),
            r => return r,
        }
    }
    Err(last.expect("at least one attempt"))
}

/// Creates a new directory at `make(id)` for a fresh id with a locked `.lock` file inside;
/// returns the directory and the lock.
pub(crate) fn create_locked_dir(
    mut make: impl FnMut(RunId) -> PathBuf,
    first: RunId,
) -> io::Result<(PathBuf, File, RunId)> {
    let mut run = first;
    let mut last = None;
    for _ in 0..CREATE_ATTEMPTS {
        let dir = make(run);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                run = RunId::new();
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        }
        // A sweeper that finds the directory before its lock removes it if still empty; the
        // lock cannot be created then, and a new name is tried.
        match create_locked_once(&dir.join(LOCK_FILE)) {
            Ok(lock) => return Ok((dir, lock, run)),
            Err(e) if vanished(&e) || e.kind() == io::ErrorKind::NotFound => {
                let _ = fs::remove_dir(&dir);
                run = RunId::new();
                last = Some(e);
            }
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                return Err(e);
            }
        }
    }
    Err(last.expect("at least one attempt"))
}

/// A hidden file for a run's intermediate data (`<dir>/.neardup-<id>.<purpose>`), locked while
/// it exists and removed when dropped; if the process dies, the next run that sweeps the
/// directory removes it. Send.
#[derive(Debug)]
pub struct ScratchFile {
    path: PathBuf,
    file: File,
}

impl ScratchFile {
    /// Creates `<dir>/.neardup-<id>.<purpose>` (`dir` must exist), first removing what dead runs
    /// left in `dir`.
    pub fn create(dir: &Path, purpose: &str) -> io::Result<ScratchFile> {
        sweep(dir)?;
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            let path = dir.join(format!("{HIDDEN_PREFIX}{}.{purpose}", RunId::new()));
            match create_locked(&path) {
                Ok(file) => return Ok(ScratchFile { path, file }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (read-write).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file (read-write), for seeking and writing.
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A directory for a run's spill files (`<parent>/neardup-spill-<id>`), locked while it exists
/// and removed with its content when dropped; if the process dies, the next run that sweeps the
/// parent removes it. Send + Sync.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    _lock: File,
}

impl ScratchDir {
    /// Creates `<parent>/neardup-spill-<id>` (the system's temporary directory when `parent` is
    /// `None`; a missing parent is created), first removing what dead runs left in `parent`.
    pub fn create(parent: Option<&Path>) -> io::Result<ScratchDir> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        fs::create_dir_all(&parent)?;
        sweep(&parent)?;
        let (path, lock, _) = create_locked_dir(
            |id| parent.join(format!("{SPILL_PREFIX}{id}")),
            RunId::new(),
        )?;
        Ok(ScratchDir { path, _lock: lock })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// What a sweep found that belongs to runs still alive.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// Artefacts of live runs (or of commits another process is finishing), left alone.
    pub live: Vec<PathBuf>,
}

/// Removes from `dir` what dead runs left there: interrupted commits are finished (or undone)
/// first from their journals, then staging directories, temporary, scratch and spill files whose
/// lock can be taken are removed, one log line each. Artefacts whose lock is held belong to a
/// live run and are listed in the result. A missing `dir` has nothing to sweep.
pub(crate) fn sweep(dir: &Path) -> io::Result<Swept> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Swept::default()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(a) = Artefact::parse(name) {
            found.push((a, entry.path()));
        }
    }
    let mut swept = Swept::default();
    let mut unresolved = Vec::new();
    for (a, path) in &found {
        if let Artefact::Journal(run) = a
            && !journal::recover(path)?
        {
            unresolved.push(*run);
            swept.live.push(path.clone());
        }
    }
    for (a, path) in &found {
        if unresolved.contains(&a.run()) {
            continue;
        }
        let removed = match a {
            Artefact::Journal(_) | Artefact::Aside(_) => continue,
            Artefact::Staging(_) | Artefact::Spill(_) => remove_dead_dir(path)?,
            Artefact::Temp(_) | Artefact::Scratch(_) => remove_dead_file(path)?,
        };
        match removed {
            Removed::Yes => tracing::info!(
                "removed {}: left by an interrupted neardup run that is no longer running",
                path.display()
            ),
            Removed::Live => swept.live.push(path.clone()),
            Removed::Gone => {}
        }
    }
    Ok(swept)
}

enum Removed {
    Yes,
    Live,
    Gone,
}

/// How opening an artefact for its lock went.
enum Opened {
    File(File),
    Missing,
    /// Another user's artefact (in a shared temporary directory): not ours to remove, which the
    /// sweep treats like a live run's.
    Denied,
}

fn open_rw(path: &Path) -> io::Result<Opened> {
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => Ok(Opened::File(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Opened::Missing),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(Opened::Denied),
        Err(e) => Err(e),
    }
}

fn remove_dead_file(path: &Path) -> io::Result<Removed> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Gone),
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Ok(Removed::Gone);
    }
    let file = match open_rw(path)? {
        Opened::File(f) => f,
        Opened::Missing => return Ok(Removed::Gone),
        Opened::Denied => return Ok(Removed::Live),
    };
    if !try_lock(&file).unwrap_or(false) {
        return Ok(Removed::Live);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(Removed::Yes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Removed::Gone),
        Err(e) => Err(e),
    }
}

fn remove_dead_dir(path: &Path) -> io::Result<Removed> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Ok(Removed::Gone),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Gone),
        Err(e) => return Err(e),
    }
    let lock = match open_rw(&path.join(LOCK_FILE))? {
        Opened::File(lock) => lock,
        Opened::Denied => return Ok(Removed::Live),
        Opened::Missing => {
            // No lock yet: a run is creating it (then removing the empty directory makes it try
            // another name) or died before locking it, with nothing inside.
            return Ok(match fs::remove_dir(path) {
                Ok(()) => Removed::Yes,
                Err(_) => Removed::Live,
            });
        }
    };
    if !try_lock(&lock).unwrap_or(false) {
        return Ok(Removed::Live);
    }
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(Removed::Yes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Removed::Gone),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artefact_names_parse() {
        let id = RunId::parse("00ff00ff00ff00ff").unwrap();
        assert_eq!(id.to_string(), "00ff00ff00ff00ff");
        assert_eq!(
            Artefact::parse(".neardup-00ff00ff00ff00ff"),
            Some(Artefact::Staging(id))
        );
        assert_eq!(
            Artefact::parse(".neardup-00ff00ff00ff00ff.commit"),
            Some(Artefact::Journal(id))
        );
        assert_eq!(
            Artefact::parse(".neardup-00ff00ff00ff00ff.rows"),
            Some(Artefact::Scratch(id))
        );
        assert_eq!(
            Artefact::parse(".d.jsonl.neardup-00ff00ff00ff00ff.tmp"),
            Some(Artefact::Temp(id))
        );
        assert_eq!(
            Artefact::parse("._SUCCESS.neardup-00ff00ff00ff00ff.old"),
            Some(Artefact::Aside(id))
        );
        assert_eq!(
            Artefact::parse("neardup-spill-00ff00ff00ff00ff"),
            Some(Artefact::Spill(id))
        );
        assert_eq!(
            temp_name(Path::new("/a/d.jsonl"), id),
            Path::new("/a/.d.jsonl.neardup-00ff00ff00ff00ff.tmp")
        );
        for not_ours in [
            "d.jsonl",
            ".neardup-00FF00FF00FF00FF",
            ".neardup-00ff00ff00ff00f",
            ".neardup-00ff00ff00ff00ff.",
            "neardup-spill-abc123",
            ".d.jsonl.abc123.tmp",
            ".neardup-keys-abc123.rows",
            "x.neardup-00ff00ff00ff00ff.tmp",
        ] {
            assert_eq!(Artefact::parse(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn ids_differ() {
        let ids: std::collections::HashSet<RunId> = (0..1000).map(|_| RunId::new()).collect();
        assert_eq!(ids.len(), 1000);
    }

    #[test]
    fn a_sweep_removes_dead_artefacts_and_leaves_live_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let live_file = ScratchFile::create(tmp.path(), "rows").unwrap();
        let live_dir = ScratchDir::create(Some(tmp.path())).unwrap();
        // Artefacts of a dead run: named like ours, nobody holds their locks.
        let dead = RunId::new();
        let dead_file = tmp.path().join(format!(".neardup-{dead}.rows"));
        std::fs::write(&dead_file, b"x").unwrap();
        let dead_temp = temp_name(&tmp.path().join("d.jsonl"), dead);
        std::fs::write(&dead_temp, b"x").unwrap();
        let dead_dir = tmp.path().join(format!("neardup-spill-{dead}"));
        std::fs::create_dir(&dead_dir).unwrap();
        std::fs::write(dead_dir.join(LOCK_FILE), b"").unwrap();
        std::fs::write(dead_dir.join("part-000.bin"), b"x").unwrap();
        let staging = tmp.path().join(format!(".neardup-{dead}"));
        std::fs::create_dir(&staging).unwrap();
        // A user's files, one named almost like ours.
        let user = tmp.path().join("keep.jsonl");
        std::fs::write(&user, b"mine").unwrap();
        let lookalike = tmp.path().join(".neardup-keys-abc123.rows");
        std::fs::write(&lookalike, b"mine").unwrap();

        let swept = sweep(tmp.path()).unwrap();
        assert!(swept.live.contains(&live_file.path().to_path_buf()));
        assert!(swept.live.contains(&live_dir.path().to_path_buf()));
        assert!(live_file.path().exists() && live_dir.path().join(LOCK_FILE).exists());
        for gone in [&dead_file, &dead_temp, &dead_dir, &staging] {
            assert!(!gone.exists(), "{} was left", gone.display());
        }
        assert_eq!(std::fs::read(&user).unwrap(), b"mine");
        assert_eq!(std::fs::read(&lookalike).unwrap(), b"mine");

        let (file_path, dir_path) = (
            live_file.path().to_path_buf(),
            live_dir.path().to_path_buf(),
        );
        drop(live_file);
        drop(live_dir);
        assert!(
            !file_path.exists() && !dir_path.exists(),
            "dropped: removed"
        );
    }

    #[test]
    fn a_lock_held_by_another_open_file_is_seen_in_the_same_process() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let held = create_locked(&path).unwrap();
        let other = File::open(&path).unwrap();
        assert!(!try_lock(&other).unwrap());
        drop(held);
        assert!(try_lock(&other).unwrap());
    }
}
