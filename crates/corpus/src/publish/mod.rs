//! All-or-nothing publication of a run's outputs, and the life of everything a run writes before
//! that (see `docs/formats.md`, "How outputs are published").
//!
//! A [`Publication`] is begun before any work: it checks the output directory (an existing
//! non-empty directory needs `overwrite`, and even then only files an earlier run's manifest
//! lists are replaced), removes what dead runs left where this run writes, and reserves hidden,
//! locked names carrying a random [`RunId`]: a staging directory `OUT/.neardup-<id>/` for the
//! dataset (its [`OutputDir`]) and `.<name>.neardup-<id>.tmp` beside each single-file output
//! (decisions, report, key table, …; see [`Publication::file`]). Everything is written, flushed
//! and fsynced under those names. [`Publication::commit`] then publishes all of it in one step:
//! a journal listing every rename is written where the commit touches, the renames run back to
//! back (never replacing a file: what is replaced was moved aside first), the manifest
//! (`OUT/_SUCCESS`, JSON listing every data file with its size and records) comes last, and the
//! journal is removed. A run that dies inside this step is finished by the next one from the
//! journal. A publication dropped without commit removes everything it created.
//!
//! Outputs on object storage (a dataset prefix, a decisions file or report named by URL) are
//! multipart uploads under their final names, which no reader sees before they complete: the
//! commit completes them all, then puts the prefix's manifest last; dropped without commit, the
//! publication aborts them (see `docs/formats.md`, "Object storage").
//!
//! Scratch files and spill directories ([`ScratchFile`], [`ScratchDir`]) follow the same
//! liveness rule: a run holds a lock on each as long as it lives, and a later run that can take
//! the lock removes them.

mod journal;
mod liveness;
mod whole;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use neardup_exec::CancelToken;
use serde::{Deserialize, Serialize};

use neardup_storage::{ObjectUrl, StorageError, UploadSet};

use crate::error::WriteError;
use crate::write::{LocalFile, OutFile, OutputDir, OutputOptions, part_name};
use journal::{Applied, Journal, Op, make_dirs, sync_dir};
pub use liveness::{RunId, ScratchDir, ScratchFile};
use liveness::{aside_name, create_locked, create_locked_dir, sweep, temp_name};
pub use whole::{publish_whole, shard_manifest_name};

/// The default name of an output directory's manifest (Hadoop's and Spark's success marker;
/// dataset readers such as `pyarrow.dataset` and Spark skip names starting with `_` or `.`).
pub const MANIFEST: &str = "_SUCCESS";

/// Buffer between writers and a single-file output.
const WRITE_BUF: usize = 1 << 20;

/// Everything a run will publish, known before it starts.
#[derive(Clone, Debug)]
pub struct PublishOptions {
    /// The dataset directory, if the run writes one.
    pub output: Option<OutputOptions>,
    /// The name of the dataset directory's manifest (default [`MANIFEST`]). Several writers
    /// sharing one directory give each its own name; `overwrite` replaces only the files listed
    /// in the manifest of this name.
    pub manifest: String,
    /// Relative output paths of the inputs (their [`crate::InputFile::relative`]): checked against
    /// the directory's files before any work.
    pub outputs: Vec<PathBuf>,
    /// The decisions file, if any (named in the manifest).
    pub decisions: Option<PathBuf>,
    /// The name the manifest gives the decisions file when the user reads them elsewhere than
    /// where they were written (`-`: standard output, which gets the file once it is
    /// published); None: its path.
    pub decisions_named: Option<PathBuf>,
    /// The run report, if any (named in the manifest).
    pub report: Option<PathBuf>,
    /// Other single-file outputs (a key table, a hot-key file, a stage report).
    pub files: Vec<PathBuf>,
    /// Further directories the run writes scratch files to (its spill directory): what dead runs
    /// left there is removed at the start.
    pub scratch_dirs: Vec<PathBuf>,
    /// Checked a last time when the commit starts.
    pub cancel: CancelToken,
    /// The dataset directory is shared with other writers (the per-shard `write` steps of one
    /// distributed run, each with its own `manifest`): files of others, and other live runs'
    /// staging directories, are allowed there; only this run's own output names must be free
    /// (or, with `overwrite`, listed in this run's manifest).
    pub shared_output: bool,
    /// With `shared_output`: the distributed run and the shard this run writes. Its manifest
    /// says so, an earlier whole-output manifest (`_SUCCESS`) is removed as the shard commits
    /// (the dataset it listed is changing), and once every shard's manifest is in, the commit
    /// publishes the whole output's `_SUCCESS` ([`publish_whole`]).
    pub shard: Option<Distributed>,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            output: None,
            manifest: MANIFEST.to_string(),
            outputs: Vec::new(),
            decisions: None,
            decisions_named: None,
            report: None,
            files: Vec::new(),
            scratch_dirs: Vec::new(),
            cancel: CancelToken::new(),
            shared_output: false,
            shard: None,
        }
    }
}

/// The manifest of a published output directory, written last by a commit (`OUT/_SUCCESS`): the
/// run, and every data file with its size and records. A reader may trust a directory holding it:
/// the files it lists are complete and are all the run wrote there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `"neardup-manifest"`.
    pub format: String,
    /// Format version (1).
    pub format_version: u32,
    /// The run that wrote the files.
    pub run_id: String,
    /// The version of neardup that wrote them.
    pub neardup_version: String,
    /// When the commit happened (RFC 3339, UTC).
    pub committed_at: String,
    /// Data files, relative to the directory (`/`-separated), in input order.
    pub files: Vec<ManifestFile>,
    /// The decisions file of the run, if any.
    pub decisions: Option<ManifestEntry>,
    /// The report of the run, if any.
    pub report: Option<ManifestEntry>,
    /// Set in the manifests of a distributed run's output (each shard's, and the whole
    /// output's); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Distributed>,
}

/// Where the files of a manifest belong in a distributed run's output: the per-shard steps each
/// publish their shard's files under `_SUCCESS.shard-NNNNN`, and the whole output's `_SUCCESS`
/// lists every shard's files once all are in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Distributed {
    /// The distributed run's id (the same in every shard's manifest: the hot-key file's
    /// fingerprint, which the shards' steps all checked their inputs against).
    pub dataset: String,
    /// How many shards the output has.
    pub shards: u32,
    /// This manifest's shard (its place in shard order); absent in the whole output's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

/// A data file listed in a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Path relative to the output directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Records (JSONL lines, Parquet rows) it holds.
    pub records: u64,
}

/// A single-file output named in a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Its absolute path.
    pub path: PathBuf,
    /// Size in bytes.
    pub bytes: u64,
}

const MANIFEST_FORMAT: &str = "neardup-manifest";

/// Reads the manifest `name` of directory `dir`: `None` when there is none; an error
/// (`"foreign_manifest"`) when the file is not a neardup manifest or lists a path outside `dir`.
pub fn read_manifest(dir: &Path, name: &str) -> Result<Option<Manifest>, WriteError> {
    let path = dir.join(name);
    // Reading a FIFO would wait forever, a device could stream without end.
    refuse_special(&path, &path)?;
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WriteError::io(&path, e)),
    };
    parse_manifest(&path, &bytes).map(Some)
}

/// A manifest's bytes, checked as [`read_manifest`] says.
fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest, WriteError> {
    let foreign = |why: &str| {
        WriteError::new(
            path,
            "foreign_manifest",
            format!(
                "not a neardup manifest ({why}); neardup replaces only files listed in its own \
                 manifest: move it away or choose another output directory"
            ),
        )
    };
    let m: Manifest =
        serde_json::from_slice(bytes).map_err(|_| foreign("not a neardup manifest's JSON"))?;
    if m.format != MANIFEST_FORMAT || m.format_version != 1 {
        return Err(foreign("unknown format"));
    }
    for f in &m.files {
        if !plain_relative(Path::new(&f.path)) {
            return Err(foreign(&format!(
                "it lists {:?}, outside the directory",
                f.path
            )));
        }
    }
    Ok(m)
}

/// What the node at `path` is when it is there and is not a regular file (`"a FIFO"`, `"a
/// character device"`, `"a symbolic link"`, …), read without following a link: outputs are
/// published by renaming a finished file onto their path, which would replace such a node with a
/// regular file (`/dev/null` made a file, a FIFO's reader left waiting), so no run writes there.
pub fn special_node(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = fs::symlink_metadata(path).ok()?.file_type();
    if t.is_file() {
        return None;
    }
    Some(if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

/// Refuses an output whose path (`abs`, named `shown`) is held by a node that is not a regular
/// file (see [`special_node`]); a directory is refused by the caller with its own message.
fn refuse_special(abs: &Path, shown: &Path) -> Result<(), WriteError> {
    match special_node(abs) {
        None | Some("a directory") => Ok(()),
        Some(node) => Err(WriteError::new(
            shown,
            "not_a_regular_file",
            format!(
                "this path is {node}, not a regular file; outputs are published by renaming a \
                 finished file into place, which would replace it: name a regular file or a new \
                 path"
            ),
        )),
    }
}

/// A relative path of normal components only (no `..`, no root).
fn plain_relative(p: &Path) -> bool {
    !p.as_os_str().is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// What a commit published.
#[derive(Clone, Debug)]
pub struct Published {
    /// The run.
    pub run_id: RunId,
    /// The output directory's manifest, when the run wrote a dataset.
    pub manifest: Option<Manifest>,
}

/// One run's outputs on their way to being published together; see the module docs. Sync: the
/// dataset's writers and the single-file writers may work on several threads.
pub struct Publication {
    shared: Arc<Shared>,
    dataset: Option<Dataset>,
    /// The run's object uploads (outputs on object storage), completed by the commit and
    /// aborted when the publication is dropped without one.
    uploads: Arc<UploadSet>,
    cancel: CancelToken,
    decisions: Option<PathBuf>,
    decisions_named: Option<PathBuf>,
    report: Option<PathBuf>,
    /// Directories this run created (output directory, parents of single-file outputs), removed
    /// again if it publishes nothing and they are empty.
    created: Mutex<Vec<PathBuf>>,
    /// Directories whose dead runs' leftovers were removed already.
    swept: Mutex<BTreeSet<PathBuf>>,
    committed: bool,
    /// Tests: the commit stops after this many operations as if the process died there.
    #[cfg(test)]
    die_after_ops: Option<usize>,
}

impl std::fmt::Debug for Publication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publication")
            .field("run", &self.shared.run)
            .field("dataset", &self.dataset.as_ref().map(|d| d.out.path()))
            .finish_non_exhaustive()
    }
}

struct Dataset {
    out: OutputDir,
    staging: PathBuf,
    _lock: Option<File>,
    manifest: String,
    overwrite: bool,
    /// The prefix, when the dataset goes to object storage.
    object: Option<ObjectUrl>,
    /// A shard of a distributed run's output ([`PublishOptions::shard`]).
    shard: Option<Distributed>,
}

struct Shared {
    run: RunId,
    files: Mutex<Vec<Staged>>,
    /// Single-file outputs on object storage.
    objects: Mutex<Vec<StagedObject>>,
}

impl Shared {
    fn new(run: RunId) -> Arc<Shared> {
        Arc::new(Shared {
            run,
            files: Mutex::new(Vec::new()),
            objects: Mutex::new(Vec::new()),
        })
    }

    fn files(&self) -> MutexGuard<'_, Vec<Staged>> {
        lock_ignoring_poison(&self.files)
    }

    fn objects(&self) -> MutexGuard<'_, Vec<StagedObject>> {
        lock_ignoring_poison(&self.objects)
    }
}

/// A single-file output on object storage: uploaded under its final name, visible once the
/// commit completes the upload.
struct StagedObject {
    target: ObjectUrl,
    state: State,
}

/// The lists behind these locks stay valid whatever a panicking holder was doing.
fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A single-file output: its final path, its temporary name and that file's lock.
struct Staged {
    target: PathBuf,
    temp: PathBuf,
    lock: File,
    state: State,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Reserved,
    Writing,
    Ready { bytes: u64 },
}

/// A single-file output (a local file or an object) can be written once per run.
fn still_reserved(state: State, path: &Path) -> Result<(), WriteError> {
    if state == State::Reserved {
        return Ok(());
    }
    Err(WriteError::new(
        path,
        "duplicate_output",
        "this file is already written by this run",
    ))
}

impl Publication {
    /// Checks where the run will write and reserves its names, before any work: creates the
    /// output directory (and single files' directories) when missing; removes what dead runs
    /// left there and in `scratch_dirs`; refuses an output directory another live run writes to
    /// (`"in_use"`), a non-empty one without overwrite (`"exists"`), one whose manifest is not
    /// neardup's (`"foreign_manifest"`), and, with overwrite, an input's output name taken by a
    /// file no manifest lists (`"not_ours"`) or a listed file changed since (`"changed"`).
    pub fn begin(opts: &PublishOptions) -> Result<Publication, WriteError> {
        let mut p = Publication {
            shared: Shared::new(RunId::new()),
            dataset: None,
            uploads: UploadSet::new(),
            cancel: opts.cancel.clone(),
            decisions: opts.decisions.as_deref().map(absolute_or_url).transpose()?,
            decisions_named: opts.decisions_named.clone(),
            report: opts.report.as_deref().map(absolute_or_url).transpose()?,
            created: Mutex::new(Vec::new()),
            swept: Mutex::new(BTreeSet::new()),
            committed: false,
            #[cfg(test)]
            die_after_ops: None,
        };
        if let Some(out) = &opts.output {
            let dataset =
                p.begin_dataset(out, &opts.manifest, &opts.outputs, opts.shared_output)?;
            // Held by the publication at once: refused below, it removes its staging directory.
            let dataset = p.dataset.insert(dataset);
            if let Some(shard) = opts.shard.as_ref().filter(|_| opts.shared_output) {
                // The whole output's manifest is replaced later: a foreign one is refused now.
                match &dataset.object {
                    Some(url) => read_object_manifest(url, MANIFEST).map(drop)?,
                    None => read_manifest(&absolute(&out.dir)?, MANIFEST).map(drop)?,
                }
                dataset.shard = Some(shard.clone());
            }
        }
        let singles = opts.decisions.iter().chain(&opts.report).chain(&opts.files);
        for target in singles {
            p.reserve(target)?;
        }
        for dir in &opts.scratch_dirs {
            p.sweep_once(&absolute(dir)?)?;
        }
        Ok(p)
    }

    fn begin_dataset(
        &mut self,
        opts: &OutputOptions,
        manifest: &str,
        outputs: &[PathBuf],
        shared: bool,
    ) -> Result<Dataset, WriteError> {
        if let Some(url) = ObjectUrl::from_path(&opts.dir) {
            return self.begin_object_dataset(opts, url, manifest, outputs, shared);
        }
        let dir = absolute(&opts.dir)?;
        match fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => {
                return Err(WriteError::new(
                    &opts.dir,
                    "not_a_directory",
                    "the output path exists and is not a directory",
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                make_dirs(&dir, &mut lock_ignoring_poison(&self.created))
                    .map_err(|e| WriteError::io(&opts.dir, e))?
            }
            Err(e) => return Err(WriteError::io(&opts.dir, e)),
        }
        let live = self.sweep_once(&dir)?;
        if let Some(other) = live.first().filter(|_| !shared) {
            return Err(WriteError::new(
                &opts.dir,
                "in_use",
                format!(
                    "another neardup run is writing to this directory ({} is in use); wait for it \
                     to finish or choose another output directory",
                    other.display()
                ),
            ));
        }
        let mut held: Vec<String> = fs::read_dir(&dir)
            .map_err(|e| WriteError::io(&opts.dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        held.sort();
        if shared {
            let previous = read_manifest(&dir, manifest)?;
            let listed = previous.as_ref().map(listed_files).unwrap_or_default();
            if opts.overwrite {
                check_unchanged(&dir, &listed)?;
            }
            let split = opts.max_output_bytes.is_some();
            for rel in outputs {
                let name = part_name(rel, 0, split);
                let path = dir.join(&name);
                if fs::symlink_metadata(&path).is_ok() {
                    if !opts.overwrite {
                        return Err(WriteError::new(
                            &path,
                            "exists",
                            format!(
                                "an output of this run already exists in the shared output \
                                 directory; pass --overwrite to replace what an earlier run with \
                                 the manifest {manifest} wrote, or choose another directory"
                            ),
                        ));
                    }
                    if !listed.contains_key(&name) {
                        return Err(not_ours(&path, manifest));
                    }
                }
            }
        } else if !opts.overwrite && !held.is_empty() {
            let more = match held.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            return Err(WriteError::new(
                &opts.dir,
                "exists",
                format!(
                    "the output directory is not empty (it holds {}{more}); pass --overwrite to \
                     replace the files an earlier neardup run wrote there, or choose another \
                     directory",
                    held[0]
                ),
            ));
        }
        if opts.overwrite && !shared {
            let previous = read_manifest(&dir, manifest)?;
            let listed = previous.as_ref().map(listed_files).unwrap_or_default();
            check_unchanged(&dir, &listed)?;
            let split = opts.max_output_bytes.is_some();
            for rel in outputs {
                let name = part_name(rel, 0, split);
                let path = dir.join(&name);
                if fs::symlink_metadata(&path).is_ok() && !listed.contains_key(&name) {
                    return Err(not_ours(&path, manifest));
                }
            }
        }
        let (staging, lock, run) = create_locked_dir(
            |id| dir.join(format!("{}{id}", liveness::HIDDEN_PREFIX)),
            self.shared.run,
        )
        .map_err(|e| WriteError::io(&opts.dir, e))?;
        if run != self.shared.run {
            // Nothing carries the first id yet: the dataset is reserved before any single file.
            self.shared = Shared::new(run);
        }
        Ok(Dataset {
            out: OutputDir::staged(opts.dir.clone(), staging.clone(), opts.max_output_bytes),
            staging,
            _lock: Some(lock),
            manifest: manifest.to_string(),
            overwrite: opts.overwrite,
            object: None,
            shard: None,
        })
    }

    /// [`Publication::begin_dataset`] for an object storage prefix: the same refusals, from a
    /// listing of the prefix and its manifest object. There is no staging: outputs are uploads
    /// under their final names, invisible until the commit completes them. (Object storage has
    /// no locks: a concurrent run writing the same prefix is not detected.)
    fn begin_object_dataset(
        &mut self,
        opts: &OutputOptions,
        dir: ObjectUrl,
        manifest: &str,
        outputs: &[PathBuf],
        shared: bool,
    ) -> Result<Dataset, WriteError> {
        let held = object_sizes(&dir)?;
        let listed = if opts.overwrite || shared {
            read_object_manifest(&dir, manifest)?
                .as_ref()
                .map(listed_files)
                .unwrap_or_default()
        } else {
            BTreeMap::new()
        };
        if !opts.overwrite && !shared && !held.is_empty() {
            let first = held.keys().next().expect("not empty");
            let more = match held.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            return Err(WriteError::new(
                &opts.dir,
                "exists",
                format!(
                    "the output prefix is not empty (it holds {}{more}); pass --overwrite to \
                     replace the objects an earlier neardup run wrote there, or choose another \
                     prefix",
                    first.display()
                ),
            ));
        }
        if opts.overwrite {
            check_unchanged_objects(&dir, &listed, &held)?;
        }
        let split = opts.max_output_bytes.is_some();
        for rel in outputs {
            let name = part_name(rel, 0, split);
            if !held.contains_key(&name) {
                continue;
            }
            let path = PathBuf::from(dir.join(&name.to_string_lossy()).to_string());
            if !opts.overwrite {
                return Err(WriteError::new(
                    &path,
                    "exists",
                    format!(
                        "an output of this run already exists in the shared output prefix; pass \
                         --overwrite to replace what an earlier run with the manifest {manifest} \
                         wrote, or choose another prefix"
                    ),
                ));
            }
            if !listed.contains_key(&name) {
                return Err(not_ours(&path, manifest));
            }
        }
        Ok(Dataset {
            out: OutputDir::uploaded(
                opts.dir.clone(),
                self.uploads.clone(),
                opts.max_output_bytes,
            ),
            staging: PathBuf::new(),
            _lock: None,
            manifest: manifest.to_string(),
            overwrite: opts.overwrite,
            object: Some(dir),
            shard: None,
        })
    }

    /// Removes dead runs' leftovers from `dir` once per publication; returns live artefacts.
    fn sweep_once(&self, dir: &Path) -> Result<Vec<PathBuf>, WriteError> {
        let mut swept = lock_ignoring_poison(&self.swept);
        if !swept.insert(dir.to_path_buf()) {
            return Ok(Vec::new());
        }
        Ok(sweep(dir).map_err(|e| WriteError::io(dir, e))?.live)
    }

    /// Reserves the temporary name of single-file output `target` (creating its directory).
    fn reserve(&self, target: &Path) -> Result<(), WriteError> {
        if let Some(url) = ObjectUrl::from_path(target) {
            let mut objects = self.shared.objects();
            if !objects.iter().any(|o| o.target == url) {
                // A missing bucket or refused credentials are found before any work, not when
                // the output is written at the end of it.
                neardup_storage::head(&url).map_err(|e| storage_error(target, e))?;
                objects.push(StagedObject {
                    target: url,
                    state: State::Reserved,
                });
            }
            return Ok(());
        }
        let abs = absolute(target)?;
        if self.shared.files().iter().any(|s| s.target == abs) {
            return Ok(());
        }
        if fs::metadata(&abs).is_ok_and(|m| m.is_dir()) {
            return Err(WriteError::new(
                target,
                "not_a_file",
                "a directory has this name; name a file",
            ));
        }
        refuse_special(&abs, target)?;
        let dir = abs.parent().unwrap_or(Path::new("/")).to_path_buf();
        make_dirs(&dir, &mut lock_ignoring_poison(&self.created))
            .map_err(|e| WriteError::io(target, e))?;
        self.sweep_once(&dir)?;
        let temp = temp_name(&abs, self.shared.run);
        let lock = create_locked(&temp).map_err(|e| WriteError::io(target, e))?;
        // Looked for once this run's own temporary file holds its lock: of two runs starting
        // together, at least one sees the other.
        if let Some(other) = liveness::live_temp_of(&abs, self.shared.run) {
            drop(lock);
            let _ = fs::remove_file(&temp);
            return Err(WriteError::new(
                target,
                "in_use",
                format!(
                    "another neardup run is writing this file ({} is in use); wait for it to \
                     finish or choose another path",
                    other.display()
                ),
            ));
        }
        self.shared.files().push(Staged {
            target: abs,
            temp,
            lock,
            state: State::Reserved,
        });
        Ok(())
    }

    /// The manifest's entry of the decisions file under the name the user reads it by.
    fn named_decisions(&self, entry: Option<ManifestEntry>) -> Option<ManifestEntry> {
        entry.map(|e| ManifestEntry {
            path: self.decisions_named.clone().unwrap_or(e.path),
            ..e
        })
    }

    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.shared.run
    }

    /// The token checked when the commit starts.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// The dataset directory's writer, when the run writes one.
    pub fn dataset(&self) -> Option<&OutputDir> {
        self.dataset.as_ref().map(|d| &d.out)
    }

    /// A writer for single-file output `path`, published with the rest: its [`AtomicFile::commit`]
    /// only marks it complete; [`Publication::commit`] renames it into place. Each path can be
    /// written once.
    pub fn file(&self, path: &Path) -> Result<AtomicFile, WriteError> {
        self.reserve(path)?;
        if let Some(url) = ObjectUrl::from_path(path) {
            let mut objects = self.shared.objects();
            let (index, staged) = objects
                .iter_mut()
                .enumerate()
                .find(|(_, s)| s.target == url)
                .expect("reserved above");
            still_reserved(staged.state, path)?;
            let writer = self
                .uploads
                .create(&url)
                .map_err(|e| storage_error(path, e))?;
            staged.state = State::Writing;
            return Ok(AtomicFile {
                path: path.to_path_buf(),
                out: BufWriter::with_capacity(WRITE_BUF, OutFile::Object(Box::new(writer))),
                owner: Owner::SharedObject(self.shared.clone(), index),
            });
        }
        let abs = absolute(path)?;
        let mut files = self.shared.files();
        let (index, staged) = files
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.target == abs)
            .expect("reserved above");
        still_reserved(staged.state, path)?;
        let file = staged
            .lock
            .try_clone()
            .map_err(|e| WriteError::io(path, e))?;
        staged.state = State::Writing;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(WRITE_BUF, OutFile::Local(LocalFile::new(file))),
            owner: Owner::Shared(self.shared.clone(), index),
        })
    }

    /// Publishes everything at once; see the module docs. Fails (and publishes nothing) when the
    /// token was cancelled (`"interrupted"`), when an output was not finished, or when a file
    /// appeared where an output goes (`"not_ours"`); from its start on, the token is no longer
    /// looked at.
    pub fn commit(mut self) -> Result<Published, WriteError> {
        if self.cancel.is_cancelled() {
            let first = self
                .dataset
                .as_ref()
                .map(|d| d.out.path().to_path_buf())
                .unwrap_or_default();
            return Err(WriteError::new(
                &first,
                "interrupted",
                "interrupted before the outputs were published",
            ));
        }
        // The side that holds the dataset's manifest publishes last, so the manifest comes
        // after every other output.
        let object_dataset = match &self.dataset {
            Some(d) if d.object.is_some() => self.dataset.take(),
            _ => None,
        };
        if object_dataset.is_none() {
            self.commit_objects(None)?;
        }
        let local_manifest = self.commit_local()?;
        let manifest = match &object_dataset {
            Some(d) => self.commit_objects(Some(d))?,
            None => local_manifest,
        };
        Ok(Published {
            run_id: self.shared.run,
            manifest,
        })
    }

    /// Publishes the outputs on object storage: checks them all, then completes every upload
    /// at once but one; for a dataset prefix, the earlier manifest is deleted first (so no
    /// manifest ever lists objects being replaced), the objects it listed that this run does not
    /// write again are deleted after, and the new manifest is put. The one upload completed last
    /// is the report, or without a dataset the file reserved last (a step directory's manifest):
    /// whoever finds it finds every other output of the run (object storage has no rename that
    /// would publish several objects at once). Any error before the uploads are completed aborts
    /// them all: nothing is published.
    fn commit_objects(
        &mut self,
        dataset: Option<&Dataset>,
    ) -> Result<Option<Manifest>, WriteError> {
        let result = self.publish_objects(dataset);
        if result.is_err() {
            self.uploads.abort_all();
        }
        result
    }

    fn publish_objects(&self, dataset: Option<&Dataset>) -> Result<Option<Manifest>, WriteError> {
        let mut urls = Vec::new();
        let mut sizes: Vec<(PathBuf, u64)> = Vec::new();
        for o in self.shared.objects().iter() {
            let path = PathBuf::from(o.target.to_string());
            match o.state {
                State::Ready { bytes } => {
                    urls.push(o.target.clone());
                    sizes.push((path, bytes));
                }
                _ => {
                    return Err(WriteError::new(
                        &path,
                        "unfinished",
                        "this output was not finished; nothing was published",
                    ));
                }
            }
        }
        let report = self.report.as_deref().and_then(ObjectUrl::from_path);
        let last = match (report, dataset) {
            (Some(r), _) if urls.contains(&r) => Some(r),
            (_, None) => urls.last().cloned(),
            _ => None,
        };
        if let Some(last) = &last {
            urls.retain(|u| u != last);
        }
        let complete_last = || match &last {
            Some(url) => self
                .uploads
                .complete(std::slice::from_ref(url))
                .map_err(storage_failure),
            None => Ok(()),
        };
        let Some(d) = dataset else {
            self.uploads.complete(&urls).map_err(storage_failure)?;
            complete_last()?;
            return Ok(None);
        };
        let dir = d.object.as_ref().expect("an object dataset");
        let (claimed, parts) = d.out.finished();
        if claimed != parts.iter().map(|p| p.file).collect::<BTreeSet<_>>().len() {
            return Err(WriteError::new(
                d.out.path(),
                "unfinished",
                "an output file was not finished; nothing was published",
            ));
        }
        let held = object_sizes(dir)?;
        let listed = if d.overwrite {
            read_object_manifest(dir, &d.manifest)?
                .as_ref()
                .map(listed_files)
                .unwrap_or_default()
        } else {
            BTreeMap::new()
        };
        check_unchanged_objects(dir, &listed, &held)?;
        let mut listing = Vec::with_capacity(parts.len());
        for part in &parts {
            let url = dir.join(&utf8(&part.rel, d.out.path())?);
            // An object that appeared meanwhile is not replaced.
            if held.contains_key(&part.rel) && !listed.contains_key(&part.rel) {
                return Err(not_ours(Path::new(&url.to_string()), &d.manifest));
            }
            urls.push(url);
            listing.push(ManifestFile {
                path: utf8(&part.rel, d.out.path())?,
                bytes: part.bytes,
                records: part.records,
            });
        }
        let files = self.shared.files();
        let entry = |target: &Option<PathBuf>| {
            let t = target.as_ref()?;
            files
                .iter()
                .map(|f| (&f.target, f.state))
                .chain(sizes.iter().map(|(p, b)| (p, State::Ready { bytes: *b })))
                .find(|(p, _)| *p == t)
                .and_then(|(p, state)| match state {
                    State::Ready { bytes } => Some(ManifestEntry {
                        path: p.clone(),
                        bytes,
                    }),
                    _ => None,
                })
        };
        let m = Manifest {
            format: MANIFEST_FORMAT.to_string(),
            format_version: 1,
            run_id: self.shared.run.to_string(),
            neardup_version: env!("CARGO_PKG_VERSION").to_string(),
            committed_at: rfc3339_utc(SystemTime::now()),
            files: listing,
            decisions: self.named_decisions(entry(&self.decisions)),
            report: entry(&self.report),
            distributed: d.shard.clone(),
        };
        drop(files);
        let mut manifest_bytes = serde_json::to_vec_pretty(&m).map_err(|e| {
            WriteError::new(d.out.path(), "invalid_output", format!("manifest: {e}"))
        })?;
        manifest_bytes.push(b'\n');
        let manifest_url = dir.join(&d.manifest);
        let at = storage_failure;
        if d.overwrite && held.contains_key(Path::new(&d.manifest)) {
            neardup_storage::delete(&manifest_url).map_err(at)?;
        }
        if d.shard.is_some() && held.contains_key(Path::new(MANIFEST)) {
            // As in a directory: the whole output's manifest goes before this shard changes.
            neardup_storage::delete(&dir.join(MANIFEST)).map_err(at)?;
        }
        self.uploads.complete(&urls).map_err(at)?;
        let written: BTreeSet<&PathBuf> = parts.iter().map(|p| &p.rel).collect();
        for rel in listed.keys().filter(|r| !written.contains(r)) {
            neardup_storage::delete(&dir.join(&utf8(rel, d.out.path())?)).map_err(at)?;
        }
        neardup_storage::put(&manifest_url, manifest_bytes).map_err(at)?;
        complete_last()?;
        if let Some(shard) = &d.shard {
            publish_whole(d.out.path(), &shard.dataset)?;
        }
        Ok(Some(m))
    }

    /// Publishes the local outputs (see the module docs); returns the local dataset's manifest.
    fn commit_local(&mut self) -> Result<Option<Manifest>, WriteError> {
        let run = self.shared.run;
        let first_output = || {
            self.dataset
                .as_ref()
                .map(|d| d.out.path().to_path_buf())
                .or_else(|| self.shared.files().first().map(|s| s.target.clone()))
                .unwrap_or_default()
        };
        if self.cancel.is_cancelled() {
            return Err(WriteError::new(
                &first_output(),
                "interrupted",
                "interrupted before the outputs were published",
            ));
        }
        let files: Vec<(PathBuf, PathBuf, u64)> = {
            let files = self.shared.files();
            let mut ready = Vec::new();
            for s in files.iter() {
                match s.state {
                    State::Ready { bytes } => ready.push((s.target.clone(), s.temp.clone(), bytes)),
                    _ => {
                        return Err(WriteError::new(
                            &s.target,
                            "unfinished",
                            "this output was not finished; nothing was published",
                        ));
                    }
                }
            }
            ready
        };
        let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
        if let Some(d) = &self.dataset {
            dirs.insert(absolute(d.out.path())?);
        }
        for (target, ..) in &files {
            dirs.insert(target.parent().unwrap_or(Path::new("/")).to_path_buf());
        }
        // Interrupted commits of dead runs in these directories are settled first, so this one
        // starts from one whole state.
        for dir in &dirs {
            sweep(dir).map_err(|e| WriteError::io(dir, e))?;
        }

        let mut asides = Vec::new();
        let mut renames = Vec::new();
        let mut manifest = None;
        let mut manifest_temp = None;
        let mut dir_lock = None;
        if let Some(d) = &self.dataset {
            let dir = absolute(d.out.path())?;
            if d.shard.is_some() {
                dir_lock = Some(whole::lock_dir(&dir).map_err(|e| WriteError::io(&dir, e))?);
                // The whole output's manifest lists this shard's earlier files, or a dataset
                // without this shard: it goes first, and comes back below if the output is whole.
                let whole = dir.join(MANIFEST);
                if fs::symlink_metadata(&whole).is_ok() {
                    read_manifest(&dir, MANIFEST)?;
                    asides.push(whole);
                }
            }
            let (claimed, parts) = d.out.finished();
            if claimed != parts.iter().map(|p| p.file).collect::<BTreeSet<_>>().len() {
                return Err(WriteError::new(
                    d.out.path(),
                    "unfinished",
                    "an output file was not finished; nothing was published",
                ));
            }
            let listed = if d.overwrite {
                read_manifest(&dir, &d.manifest)?
                    .as_ref()
                    .map(listed_files)
                    .unwrap_or_default()
            } else {
                BTreeMap::new()
            };
            check_unchanged(&dir, &listed)?;
            let manifest_path = dir.join(&d.manifest);
            refuse_special(&manifest_path, &manifest_path)?;
            if d.overwrite && fs::symlink_metadata(&manifest_path).is_ok() {
                asides.push(manifest_path.clone());
            }
            for rel in listed.keys() {
                if fs::symlink_metadata(dir.join(rel)).is_ok() {
                    asides.push(dir.join(rel));
                }
            }
            let mut listing = Vec::with_capacity(parts.len());
            for part in &parts {
                let to = dir.join(&part.rel);
                if fs::symlink_metadata(&to).is_ok() && !listed.contains_key(&part.rel) {
                    return Err(not_ours(&to, &d.manifest));
                }
                renames.push((d.staging.join(&part.rel), to));
                listing.push(ManifestFile {
                    path: utf8(&part.rel, d.out.path())?,
                    bytes: part.bytes,
                    records: part.records,
                });
            }
            let entry = |target: &Option<PathBuf>| {
                target.as_ref().and_then(|t| {
                    files.iter().find(|f| &f.0 == t).map(|f| ManifestEntry {
                        path: f.0.clone(),
                        bytes: f.2,
                    })
                })
            };
            let now = SystemTime::now();
            let m = Manifest {
                format: MANIFEST_FORMAT.to_string(),
                format_version: 1,
                run_id: run.to_string(),
                neardup_version: env!("CARGO_PKG_VERSION").to_string(),
                committed_at: rfc3339_utc(now),
                files: listing,
                decisions: self.named_decisions(entry(&self.decisions)),
                report: entry(&self.report),
                distributed: d.shard.clone(),
            };
            let temp = temp_name(&manifest_path, run);
            let lock = write_manifest(&temp, &m).map_err(|e| {
                let _ = fs::remove_file(&temp);
                WriteError::io(&manifest_path, e)
            })?;
            manifest_temp = Some((temp, manifest_path, lock));
            manifest = Some(m);
        }
        for (target, temp, _) in &files {
            // A node made there during the run (a FIFO, a link) is not replaced either.
            refuse_special(target, target)?;
            if fs::symlink_metadata(target).is_ok() {
                asides.push(target.clone());
            }
            renames.push((temp.clone(), target.clone()));
        }

        let result = if self.dataset.is_none() && files.len() == 1 && asides.len() <= 1 {
            // One file: a plain rename replaces it atomically; no journal is needed.
            let (target, temp, _) = &files[0];
            fs::rename(temp, target)
                .map(|()| sync_dir(target))
                .map_err(|e| WriteError::io(target, e))
        } else {
            let mut ops: Vec<Op> = asides
                .iter()
                .map(|p| Op::Aside {
                    path: p.clone(),
                    aside: aside_name(p, run),
                })
                .collect();
            ops.extend(renames.iter().map(|(from, to)| Op::Rename {
                from: from.clone(),
                to: to.clone(),
            }));
            if let Some((temp, path, _)) = &manifest_temp {
                ops.push(Op::Rename {
                    from: temp.clone(),
                    to: path.clone(),
                });
            }
            ops.extend(asides.iter().map(|p| Op::Remove {
                path: aside_name(p, run),
            }));
            self.run_journal(dirs.iter().cloned().collect(), ops, &first_output())
        };
        if let Err(e) = result {
            #[cfg(test)]
            if e.kind() == "died" {
                // A dead process cleans nothing up.
                self.committed = true;
                return Err(e);
            }
            if let Some((temp, ..)) = &manifest_temp {
                let _ = fs::remove_file(temp);
            }
            return Err(e);
        }
        self.committed = true;
        if let Some(d) = &self.dataset {
            let _ = fs::remove_dir_all(&d.staging);
            // Subdirectories that only held an earlier run's files, now removed, go too.
            let dir = absolute(d.out.path())?;
            for gone in &asides {
                let mut at = gone.parent();
                while let Some(sub) = at.filter(|p| p.starts_with(&dir) && *p != dir) {
                    if fs::remove_dir(sub).is_err() {
                        break;
                    }
                    at = sub.parent();
                }
            }
        }
        if let (Some(d), Some(_locked)) = (&self.dataset, &dir_lock)
            && let Some(shard) = &d.shard
        {
            whole::publish_whole_locked(&absolute(d.out.path())?, &shard.dataset)?;
        }
        Ok(manifest)
    }

    /// Writes the journal, applies its operations and removes it.
    fn run_journal(&self, dirs: Vec<PathBuf>, ops: Vec<Op>, at: &Path) -> Result<(), WriteError> {
        if ops.is_empty() {
            return Ok(());
        }
        let journal = Journal::new(self.shared.run, dirs.clone(), ops);
        let locks = journal.write().map_err(|e| WriteError::io(at, e))?;
        #[cfg(test)]
        if let Some(n) = self.die_after_ops {
            let n = n.min(journal.ops.len());
            assert_eq!(
                journal::apply(&journal.ops[..n], false).unwrap(),
                Applied::Done
            );
            drop(locks);
            return Err(WriteError::new(at, "died", "the process died here"));
        }
        let applied = journal::apply(&journal.ops, false);
        if let Ok(Applied::Done) = applied {
            let mut synced = BTreeSet::new();
            for op in &journal.ops {
                if let Op::Rename { from, to } = op {
                    for p in [from, to] {
                        if let Some(parent) = p.parent()
                            && synced.insert(parent.to_path_buf())
                        {
                            sync_dir(p);
                        }
                    }
                }
            }
        }
        journal.remove();
        drop(locks);
        match applied {
            Ok(Applied::Done) => Ok(()),
            Ok(Applied::Conflict(path)) => Err(WriteError::new(
                &path,
                "not_ours",
                "a file appeared here while the outputs were being published; nothing was \
                 published, move it away and run again",
            )),
            Err(e) => Err(WriteError::io(at, e)),
        }
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        self.uploads.abort_all();
        if let Some(d) = self.dataset.as_ref().filter(|d| d.object.is_none()) {
            let _ = fs::remove_dir_all(&d.staging);
        }
        for s in self.shared.files().iter() {
            let _ = fs::remove_file(&s.temp);
        }
        for dir in lock_ignoring_poison(&self.created).iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// The files a manifest lists, by relative path, with their sizes.
fn listed_files(m: &Manifest) -> BTreeMap<PathBuf, u64> {
    m.files
        .iter()
        .map(|f| (PathBuf::from(&f.path), f.bytes))
        .collect()
}

/// Refuses to replace a listed file that changed size since the manifest was written.
fn check_unchanged(dir: &Path, listed: &BTreeMap<PathBuf, u64>) -> Result<(), WriteError> {
    for (rel, bytes) in listed {
        let path = dir.join(rel);
        if let Ok(m) = fs::symlink_metadata(&path)
            && (!m.is_file() || m.len() != *bytes)
        {
            return Err(WriteError::new(
                &path,
                "changed",
                format!(
                    "this file changed since neardup wrote it ({} bytes now, {bytes} then), so \
                     --overwrite will not replace it; move it away or choose another output \
                     directory",
                    m.len()
                ),
            ));
        }
    }
    Ok(())
}

fn not_ours(path: &Path, manifest: &str) -> WriteError {
    WriteError::new(
        path,
        "not_ours",
        format!(
            "an output would replace this file, which no neardup run wrote here (the directory's \
             {manifest} does not list it); move it away or choose another output directory"
        ),
    )
}

fn utf8(rel: &Path, dir: &Path) -> Result<String, WriteError> {
    rel.to_str().map(str::to_string).ok_or_else(|| {
        WriteError::new(
            &dir.join(rel),
            "invalid_output",
            "output names must be UTF-8 to be listed in the manifest",
        )
    })
}

/// A local path made absolute; an object URL as it is.
fn absolute_or_url(path: &Path) -> Result<PathBuf, WriteError> {
    if neardup_storage::is_url_path(path) {
        Ok(path.to_path_buf())
    } else {
        absolute(path)
    }
}

/// A failed object storage request, as the error of the output `path`.
fn storage_error(path: &Path, e: StorageError) -> WriteError {
    WriteError::io(path, e.into_unnamed_io())
}

/// A failed object storage request, as the error of the object it concerns.
fn storage_failure(e: StorageError) -> WriteError {
    let path = PathBuf::from(e.url());
    storage_error(&path, e)
}

/// The objects below the prefix `dir`, by relative path, with their sizes.
fn object_sizes(dir: &ObjectUrl) -> Result<BTreeMap<PathBuf, u64>, WriteError> {
    let entries =
        neardup_storage::list(dir).map_err(|e| storage_error(Path::new(&dir.to_string()), e))?;
    Ok(entries
        .iter()
        .filter_map(|e| Some((PathBuf::from(dir.relative(&e.url)?), e.size)))
        .collect())
}

/// [`read_manifest`] of a prefix's manifest object.
fn read_object_manifest(dir: &ObjectUrl, name: &str) -> Result<Option<Manifest>, WriteError> {
    let url = dir.join(name);
    let path = PathBuf::from(url.to_string());
    match neardup_storage::get(&url).map_err(|e| storage_error(&path, e))? {
        Some(bytes) => parse_manifest(&path, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Refuses to replace a listed object that changed size since the manifest was written.
fn check_unchanged_objects(
    dir: &ObjectUrl,
    listed: &BTreeMap<PathBuf, u64>,
    held: &BTreeMap<PathBuf, u64>,
) -> Result<(), WriteError> {
    for (rel, bytes) in listed {
        if let Some(now) = held.get(rel).filter(|now| *now != bytes) {
            return Err(WriteError::new(
                Path::new(&dir.join(&rel.to_string_lossy()).to_string()),
                "changed",
                format!(
                    "this object changed since neardup wrote it ({now} bytes now, {bytes} then), \
                     so --overwrite will not replace it; move it away or choose another prefix"
                ),
            ));
        }
    }
    Ok(())
}

fn absolute(path: &Path) -> Result<PathBuf, WriteError> {
    std::path::absolute(path).map_err(|e| WriteError::io(path, e))
}

/// Writes the manifest's temporary file and returns it still open: its lock tells a concurrent
/// sweep (another run publishing into the same shared directory) that it belongs to a live run
/// until the commit has renamed it.
fn write_manifest(path: &Path, m: &Manifest) -> io::Result<File> {
    let mut f = create_locked(path)?;
    let mut bytes = serde_json::to_vec_pretty(m).map_err(io::Error::other)?;
    bytes.push(b'\n');
    f.write_all(&bytes)?;
    f.sync_all()?;
    Ok(f)
}

/// `2024-05-01T12:34:56.789Z`.
fn rfc3339_utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

enum Owner {
    /// A file of its own: committing it publishes it.
    Alone(Box<Publication>),
    /// One output of a [`Publication`]: committing it marks it ready.
    Shared(Arc<Shared>, usize),
    /// One object output of a [`Publication`]: committing it marks it ready.
    SharedObject(Arc<Shared>, usize),
}

/// One file written atomically: the bytes go to a hidden, locked temporary file beside `path`
/// (`.<name>.neardup-<id>.tmp`), and [`AtomicFile::commit`] flushes, fsyncs and renames it into
/// place — or, for a file of a [`Publication`] ([`Publication::file`]), marks it ready for the
/// publication's commit. Dropped without commit, it leaves the target untouched (and a file of
/// its own removes its temporary file; one of a publication keeps the publication from
/// committing).
pub struct AtomicFile {
    path: PathBuf,
    out: BufWriter<OutFile>,
    owner: Owner,
}

impl std::fmt::Debug for AtomicFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AtomicFile {
    /// Starts writing `path` (a missing directory is created), first removing what dead runs
    /// left in its directory.
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        let p = Publication::begin(&PublishOptions {
            files: vec![path.to_path_buf()],
            ..PublishOptions::default()
        })
        .map_err(without_path)?;
        let mut f = p.file(path).map_err(without_path)?;
        f.owner = Owner::Alone(Box::new(p));
        Ok(f)
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes and fsyncs; then renames to the final path, or, for a file of a publication,
    /// marks it ready to be published.
    pub fn commit(self) -> io::Result<()> {
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        let bytes = file.finish()?;
        match self.owner {
            Owner::Alone(p) => {
                if let Some(o) = p.shared.objects().first_mut() {
                    o.state = State::Ready { bytes };
                } else {
                    p.shared.files()[0].state = State::Ready { bytes };
                }
                p.commit().map(|_| ()).map_err(without_path)
            }
            Owner::Shared(shared, index) => {
                shared.files()[index].state = State::Ready { bytes };
                Ok(())
            }
            Owner::SharedObject(shared, index) => {
                shared.objects()[index].state = State::Ready { bytes };
                Ok(())
            }
        }
    }
}

/// An error of a file's own publication, for callers who name the file themselves: the
/// system's error itself when there is one (so its kind and OS error code survive).
fn without_path(e: WriteError) -> io::Error {
    let message = e.message().to_string();
    let kind = match e.kind() {
        "not_a_file" => io::ErrorKind::IsADirectory,
        "not_a_directory" => io::ErrorKind::NotADirectory,
        "interrupted" => io::ErrorKind::Interrupted,
        _ => io::ErrorKind::Other,
    };
    match e.into_io_error() {
        Some(system) => system,
        None => io::Error::new(kind, message),
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
