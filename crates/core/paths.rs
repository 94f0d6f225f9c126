//! Checks of a run's paths, made before any work starts: no output may be, or sit inside, or
//! contain an input; no output may be read back by a later run over the same arguments; outputs
//! may not collide with one another; two inputs may not map to the same output file; every output
//! must be writable. Paths are compared after resolving relative paths and symbolic links (a path
//! that does not exist yet is resolved through its nearest existing ancestor), and two names of
//! one file (hard links, same device and inode) are the same file.
//!
//! The CLI and the library call the same checks: [`crate::Pipeline::run`] and every step
//! ([`crate::Step`]s, [`crate::ApplyStep`], [`crate::WriteStep`]) refuse what the commands
//! refuse, with the same messages.
//!
//! ```no_run
//! use std::path::Path;
//! let mut paths = neardup::RunPaths::new();
//! paths.read_file("the key table", Path::new("keys-0.ndk"));
//! paths.write_file(
//!     "the hot-key file (--output)",
//!     Path::new("hot.ndh"),
//!     neardup::OwnFile::HotKeys,
//! );
//! paths.check()?;
//! # Ok::<(), neardup::Error>(())
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use neardup_corpus::{Discovery, InputFile, InputSource, SourceKind};
use neardup_storage::{ObjectUrl, is_url_path};

use crate::config::Config;
use crate::error::{Error, IoOp};
use crate::own_files::OwnFile;
use crate::path_conflicts::{NamedPath, PathConflict, PathConflicts, SourceRelation, Unwritable};

/// What one run reads and writes, to be checked together by [`RunPaths::check`] before the run
/// starts. Each path comes with what it is for the user ("the decisions file (--decisions)"),
/// which messages repeat.
#[derive(Debug, Default)]
pub struct RunPaths {
    sources: Vec<InputSource>,
    /// Input files, with what each is (`"the input file"`, `"the key table"`, …).
    inputs: Vec<(Cow<'static, str>, PathBuf)>,
    outputs: Vec<Output>,
    /// The run's memory limit and worker threads, when it has a limit: one below what the run
    /// needs beside what it spills is said before any work ([`RunPaths::prepare`]).
    memory: Option<(u64, usize)>,
    /// A check made before the run knows all its inputs (a command's, before the step reads
    /// the key tables naming them): what existing output files hold is left to the step's own
    /// check, so that an output over an input is refused as that.
    inputs_pending: bool,
}

#[derive(Debug)]
struct Output {
    what: String,
    path: PathBuf,
    kind: OutputKind,
}

impl Output {
    fn named(&self) -> NamedPath {
        NamedPath::new(&self.what, &self.path)
    }
}

#[derive(Debug)]
enum OutputKind {
    /// One file, written under a temporary name beside it and renamed: it replaces only a
    /// file of its kind that neardup wrote (or an empty one); `None` for a file whose content
    /// another check looks at ([`RunPaths::write_file_checked_later`]).
    File(Option<OwnFile>),
    /// The filtered dataset's directory and the files it will hold: it holds nothing else.
    Dataset { files: Vec<DatasetFile> },
    /// A directory in which spill files are made in private subdirectories: other files may sit
    /// beside them.
    SpillDir,
    /// A step's output directory (`sign`, `decide`): it holds only the step's own files, each
    /// registered as an [`OutputKind::File`] of the same name.
    StepDir,
}

impl OutputKind {
    /// A directory that holds only the run's own files there: it may neither hold nor be an
    /// input, and no other output may sit inside it.
    fn holds_only_its_own(&self) -> bool {
        matches!(self, OutputKind::Dataset { .. } | OutputKind::StepDir)
    }
}

/// One file of a dataset directory: the input's output, at the input's relative path.
#[derive(Debug)]
struct DatasetFile {
    relative: PathBuf,
    input: PathBuf,
}

/// Input files by device and inode, to find an output that is an input under another name.
type InputIds = HashMap<(u64, u64), usize>;

/// A path made absolute with every symbolic link of its existing part resolved; the part that
/// does not exist yet is appended as written (`.` dropped, `..` taken lexically).
#[derive(Debug)]
struct Resolved {
    path: PathBuf,
    exists: bool,
}

impl RunPaths {
    /// Nothing read or written yet.
    pub fn new() -> RunPaths {
        RunPaths::default()
    }

    /// The input arguments as discovered: their files and the directories and globs they came
    /// from (outputs are kept out of these trees, so a later run does not read them back).
    pub fn read_discovered(&mut self, discovery: &Discovery) -> &mut Self {
        self.sources.extend(discovery.sources.iter().cloned());
        self.read_inputs(&discovery.files)
    }

    /// Input files known without their arguments (the inputs recorded in key tables).
    pub fn read_inputs(&mut self, files: &[InputFile]) -> &mut Self {
        self.inputs.extend(
            files
                .iter()
                .map(|f| (Cow::Borrowed("the input file"), f.path.clone())),
        );
        self
    }

    /// Marks a check made before the run knows all its inputs, which a later check (the step's)
    /// repeats knowing them: what existing output files hold is looked at by that one, so that
    /// an output over an input is refused as that.
    pub fn inputs_pending(&mut self) -> &mut Self {
        self.inputs_pending = true;
        self
    }

    /// One more file the run reads: `what` names it for messages (`"the key table"`).
    pub fn read_file(&mut self, what: &str, path: &Path) -> &mut Self {
        self.inputs
            .push((Cow::Owned(what.to_string()), path.to_path_buf()));
        self
    }

    /// A file the run writes: `what` names it for messages, flag included
    /// (`"the decisions file (--decisions)"`), and `kind` says what it is: an existing file at
    /// `path` is replaced only when it is neardup's own file of that kind (or empty), told by a
    /// bounded read of it; any other is refused.
    pub fn write_file(&mut self, what: &str, path: &Path, kind: OwnFile) -> &mut Self {
        self.outputs.push(Output {
            what: what.to_string(),
            path: path.to_path_buf(),
            kind: OutputKind::File(Some(kind)),
        });
        self
    }

    /// A file the run writes whose existing content is not looked at here, because another
    /// check before any work does: a step's own files (its directory's check,
    /// `StepFiles::check_free`, refuses anything but its earlier output).
    pub(crate) fn write_file_checked_later(&mut self, what: &str, path: &Path) -> &mut Self {
        self.outputs.push(Output {
            what: what.to_string(),
            path: path.to_path_buf(),
            kind: OutputKind::File(None),
        });
        self
    }

    /// The filtered dataset's directory, which will hold one output per input file at
    /// `dir/<relative>`.
    pub fn write_dataset(&mut self, what: &str, dir: &Path, files: &[InputFile]) -> &mut Self {
        self.outputs.push(Output {
            what: what.to_string(),
            path: dir.to_path_buf(),
            kind: OutputKind::Dataset {
                files: files
                    .iter()
                    .map(|f| DatasetFile {
                        relative: f.relative.clone(),
                        input: f.path.clone(),
                    })
                    .collect(),
            },
        });
        self
    }

    /// A step's output directory (`sign`, `decide`), which holds only the step's files: those
    /// are registered with [`RunPaths::write_file`] under the same `what`
    /// (`"the sign output (-o)"`) with [`RunPaths::write_file_checked_later`]. The directory may not hold an input, be or lie in an input
    /// tree, or hold another output.
    pub fn write_step_dir(&mut self, what: &str, dir: &Path) -> &mut Self {
        self.outputs.push(Output {
            what: what.to_string(),
            path: dir.to_path_buf(),
            kind: OutputKind::StepDir,
        });
        self
    }

    /// The directory spill files go to (created by [`RunPaths::prepare`] when missing).
    pub fn spill_dir(&mut self, dir: &Path) -> &mut Self {
        self.outputs.push(Output {
            what: "the spill directory (--spill-dir)".to_string(),
            path: dir.to_path_buf(),
            kind: OutputKind::SpillDir,
        });
        self
    }

    /// The directory a run configured by `config` makes spill files in: `keys.spill_dir`, or,
    /// under a memory limit, the system's temporary directory (where they go without one), so
    /// that a limit the run could not keep fails it before any work ([`RunPaths::prepare`]).
    pub fn config_spill_dir(&mut self, config: &Config) -> &mut Self {
        self.spill_location(
            config.keys.spill_dir.as_deref(),
            config.keys.memory_limit,
            config.run.threads,
        )
    }

    /// [`RunPaths::config_spill_dir`] of a run whose spill directory is `spill_dir`, whose
    /// memory limit is `memory_limit` and whose worker threads are `threads` (0: all cores).
    pub fn spill_location(
        &mut self,
        spill_dir: Option<&Path>,
        memory_limit: Option<u64>,
        threads: usize,
    ) -> &mut Self {
        self.memory = memory_limit.map(|limit| (limit, threads));
        match (spill_dir, memory_limit) {
            (Some(dir), _) => self.spill_dir(dir),
            (None, Some(_)) => {
                self.outputs.push(Output {
                    what: "the spill directory (the system's temporary directory, TMPDIR; \
                           --spill-dir sets another)"
                        .to_string(),
                    path: std::env::temp_dir(),
                    kind: OutputKind::SpillDir,
                });
                self
            }
            (None, None) => self,
        }
    }

    /// Everything a run configured by `config` writes: the dataset directory (holding an output
    /// for each of `files`), the decisions file, the report and the spill directory.
    pub fn write_config_outputs(&mut self, config: &Config, files: &[InputFile]) -> &mut Self {
        if let Some(dir) = &config.output.dir {
            self.write_dataset("the output directory (--output)", dir, files);
        }
        if let Some(p) = &config.output.decisions {
            self.write_file("the decisions file (--decisions)", p, OwnFile::Decisions);
        }
        if let Some(p) = &config.output.report {
            self.write_file("the report (--report)", p, OwnFile::Report);
        }
        if let Some(p) = &config.output.index_out {
            self.write_file("the index (--index-out)", p, OwnFile::Index);
        }
        for p in &config.dedup.against {
            self.read_file("the index (--against)", p);
        }
        self.config_spill_dir(config)
    }

    /// Checks every output against every input and every other output, and that each can be
    /// written; nothing is created. A refusal (exit code 2 in the CLI) names both paths of each
    /// conflict, one conflict per line.
    pub fn check(&self) -> Result<(), Error> {
        let mut refusals = Refusals::default();
        let outputs = self.resolve_outputs(&mut refusals);
        // Only an output that exists already can be an input under another name: a fresh run
        // does not look at every input's inode.
        let ids = if outputs.iter().any(|(_, r)| r.exists) {
            self.input_ids()
        } else {
            InputIds::new()
        };
        // The gravest conflict of an output first (it would destroy an input), then one reason
        // per output is enough.
        self.check_against_input_files(&outputs, &ids, &mut refusals, false);
        self.check_against_sources(&outputs, &mut refusals);
        self.check_datasets_around_inputs(&outputs, &mut refusals);
        self.check_against_input_files(&outputs, &ids, &mut refusals, true);
        check_between_outputs(&outputs, &mut refusals);
        check_inside_earlier_steps(&outputs, &mut refusals);
        self.check_object_outputs(&mut refusals);
        check_dataset_names(&outputs, &mut refusals);
        for (out, resolved) in &outputs {
            if let Err(e) = writable(out, resolved) {
                refusals.push(out, e);
            }
        }
        if !self.inputs_pending {
            check_replaced_files(&outputs, &mut refusals);
        }
        refusals.into_result()
    }

    /// Makes what the run needs before it starts and after [`RunPaths::check`] passed: a missing
    /// spill directory is created (with its parents), and one spill file is made there and
    /// dropped: spill files are unnamed files made as the run goes, and a directory that cannot
    /// take them (a read-only mount, a missing `TMPDIR`, a file system without unnamed files)
    /// fails the run now, not halfway or by a run that goes on without its memory limit. Hold
    /// what it returns for the run: dropped, it removes again the directories it made that are
    /// empty then, so a run leaves no empty spill directory behind.
    pub fn prepare(&self) -> Result<PreparedDirs, Error> {
        if let Some((limit, threads)) = self.memory {
            let asked = neardup_exec::ExecOptions::threads(threads).threads;
            let threads = crate::config::threads_within(limit, asked);
            let floor = crate::config::memory_floor(threads);
            if limit < 4 * crate::config::MEMORY_PER_THREAD {
                tracing::warn!(
                    "--memory-limit {}: a run needs about {} beside what grows with the corpus \
                     (the program, the blocks being read and prepared, readers' and writers' \
                     buffers; see docs/tuning.md, \"Memory limit and spilling\"), so it will use \
                     about {}: everything that can spill spills",
                    mib(limit),
                    mib(floor),
                    mib(floor + limit),
                );
            }
            if threads < asked {
                tracing::info!(
                    "--memory-limit {}: running on {threads} thread{} instead of {asked}, \
                     what each thread holds beside its blocks (about {}) taking at most a \
                     quarter of the limit",
                    mib(limit),
                    if threads == 1 { "" } else { "s" },
                    mib(crate::config::MEMORY_PER_THREAD),
                );
            }
        }
        let mut prepared = PreparedDirs::default();
        for out in &self.outputs {
            if let OutputKind::SpillDir = out.kind {
                let failed = |what: String| move |e| Error::io(IoOp::Create { what }, &out.path, e);
                let mut missing = Vec::new();
                let mut at = Some(out.path.as_path());
                while let Some(dir) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                    missing.push(dir.to_path_buf());
                    at = dir.parent();
                }
                std::fs::create_dir_all(&out.path).map_err(failed(out.what.clone()))?;
                // Deepest first, the order they are removed in.
                prepared.made.extend(missing);
                tempfile::tempfile_in(&out.path)
                    .map_err(failed(format!("a spill file in {}", out.what)))?;
            }
        }
        Ok(prepared)
    }

    fn resolve_outputs(&self, refusals: &mut Refusals) -> Vec<(&Output, Resolved)> {
        let mut resolved = Vec::new();
        // Object storage outputs are checked by `check_object_outputs`.
        for out in self.outputs.iter().filter(|o| !is_url_path(&o.path)) {
            // Reports and decisions record paths as text.
            if out.path.to_str().is_none() {
                refusals.push(
                    out,
                    PathConflict::NotUtf8 {
                        output: out.named(),
                    },
                );
                continue;
            }
            match resolve(&out.path) {
                Ok(r) => resolved.push((out, r)),
                Err(error) => refusals.push(
                    out,
                    PathConflict::Unresolvable {
                        output: out.named(),
                        error,
                    },
                ),
            }
        }
        resolved
    }

    /// Outputs inside the trees that directory and glob arguments read, and output directories
    /// containing an argument. (A file argument is an input file: see
    /// [`RunPaths::check_against_input_files`].)
    fn check_against_sources(&self, outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
        self.check_against_links(outputs, refusals);
        for source in &self.sources {
            let what_source = match source.kind {
                SourceKind::File(_) => continue,
                SourceKind::Dir(_) => NamedPath::new("the input directory", &source.arg),
                SourceKind::Glob { .. } => NamedPath::new("the input glob", &source.arg),
            };
            let Ok(root) = std::fs::canonicalize(source.root()) else {
                continue;
            };
            for (out, r) in outputs {
                if refusals.refused(out) {
                    continue;
                }
                if out.kind.holds_only_its_own() && root.starts_with(&r.path) {
                    let relation = match (&source.kind, root == r.path) {
                        (_, false) => SourceRelation::Contains,
                        (SourceKind::Glob { .. }, true) => SourceRelation::DirectoryOf,
                        _ => SourceRelation::Is,
                    };
                    refusals.push(
                        out,
                        PathConflict::HoldsSource {
                            output: out.named(),
                            relation,
                            input_tree: what_source.clone(),
                        },
                    );
                    continue;
                }
                let Ok(below) = r.path.strip_prefix(&root) else {
                    continue;
                };
                let read_back = match out.kind {
                    OutputKind::File(_) => source.reads_file(below),
                    OutputKind::Dataset { .. } | OutputKind::SpillDir | OutputKind::StepDir => {
                        source.may_read_inside(below)
                    }
                };
                if read_back {
                    refusals.push(
                        out,
                        PathConflict::InsideSource {
                            output: out.named(),
                            input_tree: what_source.clone(),
                            object_storage: false,
                        },
                    );
                }
            }
        }
    }

    /// Outputs a symbolic link inside an input directory or glob's tree leads to (or, for a
    /// dataset directory, holds what it leads to): the next run over the same arguments follows
    /// the link and reads the outputs back. A link leading nowhere yet counts too: this run is
    /// about to make its target.
    fn check_against_links(&self, outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
        for source in &self.sources {
            let what_source = match source.kind {
                SourceKind::File(_) => continue,
                SourceKind::Dir(_) => NamedPath::new("the input directory", &source.arg),
                SourceKind::Glob { .. } => NamedPath::new("the input glob", &source.arg),
            };
            for link in &source.links {
                let Some(target) = link_target(&link.path) else {
                    continue;
                };
                for (out, r) in outputs {
                    if refusals.refused(out) {
                        continue;
                    }
                    let read_back = match r.path.strip_prefix(&target) {
                        Ok(rest) => {
                            let below = link.relative.join(rest);
                            match out.kind {
                                OutputKind::File(_) => source.reads_file(&below),
                                OutputKind::Dataset { .. }
                                | OutputKind::SpillDir
                                | OutputKind::StepDir => source.may_read_inside(&below),
                            }
                        }
                        Err(_) => {
                            out.kind.holds_only_its_own()
                                && target.starts_with(&r.path)
                                && source.may_read_inside(&link.relative)
                        }
                    };
                    if read_back {
                        refusals.push(
                            out,
                            PathConflict::ThroughLink {
                                output: out.named(),
                                link: link.path.clone(),
                                input_tree: what_source.clone(),
                            },
                        );
                    }
                }
            }
        }
    }

    /// The checks above for outputs on object storage, by URL: an output that is an input
    /// object, a dataset prefix holding inputs, an output a directory or glob argument would read
    /// back, and outputs that are one another or lie in a dataset prefix; and a spill directory,
    /// which must be local.
    fn check_object_outputs(&self, refusals: &mut Refusals) {
        // Spill files are scratch space the run reads back many times over: a local disk.
        for out in &self.outputs {
            if matches!(out.kind, OutputKind::SpillDir) && is_url_path(&out.path) {
                refusals.push(
                    out,
                    PathConflict::SpillOnObjectStorage {
                        output: out.named(),
                    },
                );
            }
        }
        let urls: Vec<(&Output, ObjectUrl)> = self
            .outputs
            .iter()
            .filter_map(|o| Some((o, ObjectUrl::from_path(&o.path)?)))
            .collect();
        for (i, (out, url)) in urls.iter().enumerate() {
            let is_dataset = out.kind.holds_only_its_own();
            for (input_what, input) in &self.inputs {
                let Some(input_url) = ObjectUrl::from_path(input) else {
                    continue;
                };
                let clash = if is_dataset {
                    url.contains(&input_url)
                } else {
                    url.trimmed_key() == input_url.trimmed_key() && url.contains(&input_url)
                };
                if clash {
                    refusals.push(
                        out,
                        PathConflict::ReplacesObjectInput {
                            output: out.named(),
                            input: NamedPath::new(input_what, input),
                            contains: is_dataset,
                        },
                    );
                }
            }
            for source in &self.sources {
                let Some(root) = ObjectUrl::from_path(source.root()) else {
                    continue;
                };
                let what_source = match source.kind {
                    SourceKind::File(_) => continue,
                    SourceKind::Dir(_) => NamedPath::new("the input prefix", &source.arg),
                    SourceKind::Glob { .. } => NamedPath::new("the input glob", &source.arg),
                };
                let Some(below) = root.relative(url) else {
                    continue;
                };
                let read_back = match out.kind {
                    OutputKind::File(_) => source.reads_file(Path::new(below)),
                    _ => source.may_read_inside(Path::new(below)),
                };
                if read_back {
                    refusals.push(
                        out,
                        PathConflict::InsideSource {
                            output: out.named(),
                            input_tree: what_source,
                            object_storage: true,
                        },
                    );
                }
            }
            for (other, other_url) in &urls[i + 1..] {
                if out.what == other.what {
                    // A step's directory and its own files.
                    continue;
                }
                let same = url.trimmed_key() == other_url.trimmed_key() && url.contains(other_url);
                let (outer, inner) = match (&out.kind, &other.kind) {
                    (k, _) if k.holds_only_its_own() && url.contains(other_url) => (out, other),
                    (_, k) if k.holds_only_its_own() && other_url.contains(url) => (other, out),
                    _ if same => (out, other),
                    _ => continue,
                };
                refusals.push(
                    inner,
                    PathConflict::ObjectOutputsOverlap {
                        inner: inner.named(),
                        outer: outer.named(),
                        same,
                    },
                );
            }
        }
    }

    fn input_ids(&self) -> InputIds {
        let mut ids = InputIds::new();
        for (i, (_, path)) in self.inputs.iter().enumerate() {
            if let Ok(m) = std::fs::metadata(path) {
                ids.entry((m.dev(), m.ino())).or_insert(i);
            }
        }
        ids
    }

    /// Output files that are an input file (by path, link or inode), or with `datasets` the files
    /// of dataset directories not refused yet.
    fn check_against_input_files(
        &self,
        outputs: &[(&Output, Resolved)],
        ids: &InputIds,
        refusals: &mut Refusals,
        datasets: bool,
    ) {
        let input_at = |path: &Path| -> Option<&(Cow<'static, str>, PathBuf)> {
            let m = std::fs::metadata(path).ok()?;
            ids.get(&(m.dev(), m.ino())).map(|&i| &self.inputs[i])
        };
        for (out, r) in outputs {
            let is_dataset = matches!(out.kind, OutputKind::Dataset { .. });
            if !r.exists || is_dataset != datasets || refusals.refused(out) {
                continue;
            }
            match &out.kind {
                OutputKind::File(_) => {
                    if let Some((input_what, input)) = input_at(&r.path) {
                        refusals.push(
                            out,
                            PathConflict::IsInput {
                                output: out.named(),
                                input: NamedPath::new(input_what, input),
                                same_path: out.path == *input,
                            },
                        );
                    }
                }
                OutputKind::Dataset { files } => {
                    for DatasetFile {
                        relative,
                        input: from,
                    } in files
                    {
                        let target = r.path.join(relative);
                        if let Some((input_what, input)) = input_at(&target) {
                            refusals.push(
                                out,
                                PathConflict::OutputIsInput {
                                    from: from.clone(),
                                    same_path: target == *input,
                                    target,
                                    input: NamedPath::new(input_what, input),
                                },
                            );
                        }
                    }
                }
                OutputKind::SpillDir | OutputKind::StepDir => {}
            }
        }
    }

    /// Dataset directories holding an input file (found through its resolved directory).
    fn check_datasets_around_inputs(
        &self,
        outputs: &[(&Output, Resolved)],
        refusals: &mut Refusals,
    ) {
        let mut parents = CanonicalParents::default();
        for (out, r) in outputs {
            // A directory that does not exist yet holds no input.
            if !out.kind.holds_only_its_own() || !r.exists || refusals.refused(out) {
                continue;
            }
            for (input_what, input) in &self.inputs {
                if parents
                    .resolve(input)
                    .is_some_and(|p| p.starts_with(&r.path))
                {
                    refusals.push(
                        out,
                        PathConflict::HoldsInput {
                            output: out.named(),
                            input: NamedPath::new(input_what, input),
                        },
                    );
                }
            }
        }
    }
}

/// The directories [`RunPaths::prepare`] made (a missing spill directory and its parents), removed
/// when dropped if they are empty then: held for the life of a run.
#[derive(Debug, Default)]
#[must_use = "dropping it removes the spill directory it made: hold it for the run"]
pub struct PreparedDirs {
    made: Vec<PathBuf>,
}

impl Drop for PreparedDirs {
    fn drop(&mut self) {
        for dir in &self.made {
            // Only an empty directory goes: another run's spill files, or the user's, keep it.
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// Refusals in the order found, a few per output: one mistake (an output directory over a whole
/// input tree) can conflict with thousands of inputs, and the first ones say it.
#[derive(Default)]
struct Refusals {
    shown: Vec<PathConflict>,
    per_output: HashMap<String, usize>,
}

/// Lines shown per output; the rest are counted.
const SHOWN_PER_OUTPUT: usize = 3;

impl Refusals {
    fn push(&mut self, output: &Output, conflict: PathConflict) {
        let n = self.per_output.entry(output.what.clone()).or_default();
        *n += 1;
        if *n <= SHOWN_PER_OUTPUT {
            // The same conflict can be found twice (through a link and through its target).
            let line = conflict.to_string();
            if !self.shown.iter().any(|c| c.to_string() == line) {
                self.shown.push(conflict);
            }
        }
    }

    fn refused(&self, output: &Output) -> bool {
        self.per_output.contains_key(&output.what)
    }

    fn into_result(self) -> Result<(), Error> {
        let hidden: usize = self
            .per_output
            .values()
            .map(|n| n.saturating_sub(SHOWN_PER_OUTPUT))
            .sum();
        if self.shown.is_empty() {
            Ok(())
        } else {
            Err(Error::Paths(PathConflicts {
                shown: self.shown,
                hidden,
            }))
        }
    }
}

/// Outputs that are one another, or one inside a directory that holds only its own files.
fn check_between_outputs(outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
    let same_inode = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    };
    for (i, (a, ra)) in outputs.iter().enumerate() {
        for (b, rb) in &outputs[i + 1..] {
            if a.what == b.what {
                // A step's directory and its own files.
                continue;
            }
            if ra.path == rb.path || (ra.exists && rb.exists && same_inode(&ra.path, &rb.path)) {
                refusals.push(
                    a,
                    PathConflict::SamePath {
                        first: a.named(),
                        second: b.named(),
                    },
                );
                continue;
            }
            for ((outer, router), (inner, rinner)) in [((a, ra), (b, rb)), ((b, rb), (a, ra))] {
                if !rinner.path.starts_with(&router.path) {
                    continue;
                }
                match outer.kind {
                    // Spill files live in private subdirectories of it: other outputs may too.
                    OutputKind::SpillDir => {}
                    OutputKind::Dataset { .. } => refusals.push(
                        inner,
                        PathConflict::InsideDataset {
                            inner: inner.named(),
                            outer: outer.named(),
                        },
                    ),
                    OutputKind::StepDir => refusals.push(
                        inner,
                        PathConflict::InsideStepOutput {
                            inner: inner.named(),
                            outer: outer.named(),
                        },
                    ),
                    OutputKind::File(_) => refusals.push(
                        inner,
                        PathConflict::InsideFile {
                            inner: inner.named(),
                            outer: outer.named(),
                        },
                    ),
                }
            }
        }
    }
}

/// Outputs that would be written into the output directory of an earlier `sign` or `decide`
/// step (a directory holding its manifest), which holds only that step's files: a file there
/// (but the step's own, written again) or a dataset that is that directory.
fn check_inside_earlier_steps(outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
    let step_dirs: Vec<&str> = outputs
        .iter()
        .filter(|(o, _)| matches!(o.kind, OutputKind::StepDir))
        .map(|(o, _)| o.what.as_str())
        .collect();
    for (out, r) in outputs {
        if refusals.refused(out) || step_dirs.contains(&out.what.as_str()) {
            continue;
        }
        match out.kind {
            OutputKind::File(_) => {
                let Some(step) = r.path.parent().and_then(earlier_step_in) else {
                    continue;
                };
                // The directory as the user named it.
                let dir = match out.path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                refusals.push(
                    out,
                    PathConflict::InsideStepOutput {
                        inner: out.named(),
                        outer: NamedPath::new(&format!("the {step} output"), dir),
                    },
                );
            }
            OutputKind::Dataset { .. } => {
                if let Some(step) = earlier_step_in(&r.path) {
                    refusals.push(
                        out,
                        PathConflict::IsStepOutput {
                            output: out.named(),
                            step,
                        },
                    );
                }
            }
            OutputKind::SpillDir | OutputKind::StepDir => {}
        }
    }
}

/// The step (`"sign"`, `"decide"`) whose output directory `dir` is, by the manifest it holds.
fn earlier_step_in(dir: &Path) -> Option<&'static str> {
    let manifest = dir.join(crate::step_manifests::STEP_MANIFEST);
    let meta = std::fs::symlink_metadata(&manifest).ok()?;
    // A step's manifest is small; anything else named so is not one.
    if !meta.is_file() || meta.len() > 1 << 26 {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Format {
        format: String,
    }
    let bytes = std::fs::read(&manifest).ok()?;
    let found: Format = serde_json::from_slice(&bytes).ok()?;
    [&crate::error::SIGN_STEP, &crate::error::DECIDE_STEP]
        .into_iter()
        .find(|s| s.format == found.format)
        .map(|s| s.step)
}

/// Two inputs whose outputs would be the same file of the dataset directory.
fn check_dataset_names(outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
    for (out, _) in outputs {
        let OutputKind::Dataset { files } = &out.kind else {
            continue;
        };
        let mut claimed: HashMap<PathBuf, &Path> = HashMap::new();
        for DatasetFile {
            relative,
            input: from,
        } in files
        {
            let key: PathBuf = relative
                .components()
                .filter(|c| !matches!(c, Component::CurDir))
                .collect();
            if let Some(first) = claimed.insert(key, from) {
                refusals.push(
                    out,
                    PathConflict::SameOutputFile {
                        first: first.to_path_buf(),
                        second: from.clone(),
                        target: out.path.join(relative),
                    },
                );
            }
        }
    }
}

/// Single-file outputs over existing regular files that neardup did not write of their kind (the
/// other checks passed: what is there is no input, no other output, no directory or special
/// node). Object storage outputs are not looked at (see docs/formats.md, "Object storage").
fn check_replaced_files(outputs: &[(&Output, Resolved)], refusals: &mut Refusals) {
    for (out, r) in outputs {
        let OutputKind::File(Some(kind)) = out.kind else {
            continue;
        };
        if !r.exists || refusals.refused(out) {
            continue;
        }
        match kind.may_replace(&r.path) {
            Ok(true) => {}
            Ok(false) => refusals.push(
                out,
                PathConflict::NotOwnFile {
                    output: out.named(),
                    kind,
                },
            ),
            Err(error) => refusals.push(
                out,
                PathConflict::UnreadableExisting {
                    output: out.named(),
                    error,
                },
            ),
        }
    }
}

/// Whether the output can be made: a file's directory, or a directory itself, must exist or be
/// creatable in a writable directory; a file must not be a directory and vice versa, nor any
/// other node but a regular file.
fn writable(out: &Output, r: &Resolved) -> Result<(), PathConflict> {
    if let OutputKind::File(_) = out.kind
        && let Some(node) = neardup_corpus::special_node(&out.path).filter(|n| *n != "a directory")
    {
        return Err(PathConflict::NotARegularFile {
            output: out.named(),
            node,
        });
    }
    match (&out.kind, std::fs::metadata(&r.path).map(|m| m.is_dir())) {
        (OutputKind::File(_), Ok(true)) => {
            return Err(PathConflict::FileIsDirectory {
                output: out.named(),
            });
        }
        (OutputKind::Dataset { .. } | OutputKind::SpillDir | OutputKind::StepDir, Ok(false)) => {
            return Err(PathConflict::DirectoryIsFile {
                output: out.named(),
            });
        }
        _ => {}
    }
    let unwritable = |dir: &Path, problem| PathConflict::Unwritable {
        output: out.named(),
        dir: dir.to_path_buf(),
        problem,
    };
    // The directory that must take new entries: a file's parent, or the directory itself; when
    // that does not exist yet, its nearest existing ancestor, in which it will be created.
    let mut dir = match out.kind {
        OutputKind::File(_) => r.path.parent().unwrap_or(&r.path),
        _ => &r.path,
    };
    let meta = loop {
        match std::fs::metadata(dir) {
            Ok(m) => break m,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) && dir.parent().is_some() =>
            {
                dir = dir.parent().expect("checked");
            }
            Err(e) => return Err(unwritable(dir, Unwritable::Unreadable(e))),
        }
    };
    if !meta.is_dir() {
        return Err(unwritable(dir, Unwritable::NotADirectory));
    }
    access_write(dir).map_err(|e| unwritable(dir, Unwritable::Refused(e)))
}

/// `bytes` in MiB, as messages give sizes.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// `access(2)` for writing and searching a directory: honours permissions, ACLs and read-only
/// mounts without creating anything.
fn access_write(dir: &Path) -> io::Result<()> {
    use rustix::fs::{Access, access};
    access(dir, Access::WRITE_OK | Access::EXEC_OK).map_err(io::Error::from)
}

/// Resolves input files through their parent directories, each resolved once: many inputs share
/// a few directories.
#[derive(Default)]
struct CanonicalParents {
    parents: HashMap<PathBuf, Option<PathBuf>>,
}

impl CanonicalParents {
    fn resolve(&mut self, file: &Path) -> Option<PathBuf> {
        // A file that is itself a symbolic link resolves wherever it points.
        if std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink()) {
            return std::fs::canonicalize(file).ok();
        }
        let name = file.file_name()?;
        let parent = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        self.parents
            .entry(parent.to_path_buf())
            .or_insert_with(|| std::fs::canonicalize(parent).ok())
            .as_ref()
            .map(|p| p.join(name))
    }
}

/// Where the symbolic link `link` leads, resolved like an output path (a target that does not
/// exist yet through its nearest existing ancestor).
fn link_target(link: &Path) -> Option<PathBuf> {
    let target = std::fs::read_link(link).ok()?;
    let full = match link.parent() {
        Some(parent) if target.is_relative() => parent.join(target),
        _ => target,
    };
    resolve(&full).ok().map(|r| r.path)
}

/// Resolves `path`: its longest existing ancestor through `canonicalize`, the rest lexically.
fn resolve(path: &Path) -> io::Result<Resolved> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    if let Ok(c) = std::fs::canonicalize(&absolute) {
        return Ok(Resolved {
            path: c,
            exists: true,
        });
    }
    let components: Vec<Component<'_>> = absolute.components().collect();
    for split in (1..components.len()).rev() {
        let head: PathBuf = components[..split].iter().collect();
        let Ok(existing) = std::fs::canonicalize(&head) else {
            continue;
        };
        let mut path = existing;
        for c in &components[split..] {
            match c {
                Component::CurDir => {}
                Component::ParentDir => {
                    path.pop();
                }
                other => path.push(other.as_os_str()),
            }
        }
        // `made/../a.jsonl` names `a.jsonl` once `made` exists (the run creates directories
        // before it writes): what the lexical path names now is what would be written.
        if let Ok(c) = std::fs::canonicalize(&path) {
            return Ok(Resolved {
                path: c,
                exists: true,
            });
        }
        return Ok(Resolved {
            path,
            exists: false,
        });
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no part of the path exists",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_corpus::{DiscoverOptions, discover};

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"{\"text\":\"x\"}\n").unwrap();
    }

    fn refusal(paths: &RunPaths) -> String {
        match paths.check() {
            Err(Error::Paths(c)) => c.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn discovered(args: &[String]) -> Discovery {
        let d = discover(args, &DiscoverOptions::default());
        assert!(d.errors().next().is_none(), "{:?}", d.problems);
        d
    }

    fn s(p: &Path) -> String {
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn resolves_missing_tails_through_the_existing_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let r = resolve(&tmp.path().join("link/new/./x/../y.jsonl")).unwrap();
        let canon = std::fs::canonicalize(&real).unwrap();
        assert_eq!(r.path, canon.join("new/y.jsonl"));
        assert!(!r.exists);
        // Through a directory that does not exist yet, back to one that does.
        std::fs::write(real.join("a.jsonl"), b"").unwrap();
        let r = resolve(&tmp.path().join("link/made/../a.jsonl")).unwrap();
        assert_eq!(r.path, canon.join("a.jsonl"));
        assert!(r.exists);
        let r = resolve(&tmp.path().join("link")).unwrap();
        assert!(r.exists);
        assert_eq!(r.path, canon);
    }

    #[test]
    fn an_output_file_that_is_an_input_by_any_name_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in/a.jsonl");
        touch(&input);
        std::os::unix::fs::symlink(&input, tmp.path().join("link.jsonl")).unwrap();
        std::fs::hard_link(&input, tmp.path().join("hard.jsonl")).unwrap();
        let d = discovered(&[s(&input)]);
        for out in [
            input.clone(),
            tmp.path().join("in/../in/a.jsonl"),
            tmp.path().join("link.jsonl"),
            tmp.path().join("hard.jsonl"),
        ] {
            let mut paths = RunPaths::new();
            paths.read_discovered(&d).write_file(
                "the decisions file (--decisions)",
                &out,
                OwnFile::Decisions,
            );
            let m = refusal(&paths);
            assert!(m.contains("--decisions"), "{m}");
            assert!(m.contains(&*out.to_string_lossy()), "{m}");
            assert!(m.contains("a.jsonl"), "{m}");
        }
        // Beside the input is fine.
        let mut paths = RunPaths::new();
        paths.read_discovered(&d).write_file(
            "the decisions file (--decisions)",
            &tmp.path().join("d.jsonl"),
            OwnFile::Decisions,
        );
        paths.check().unwrap();
    }

    #[test]
    fn outputs_inside_an_input_directory_or_containing_inputs_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("crawl");
        touch(&dir.join("a.jsonl"));
        let d = discovered(&[s(&dir)]);
        let cases = [
            ("dataset", dir.join("out"), "within the input directory"),
            ("dataset", dir.clone(), "is the input directory"),
            (
                "dataset",
                tmp.path().to_path_buf(),
                "contains the input directory",
            ),
            (
                "file",
                dir.join("report.json"),
                "within the input directory",
            ),
            ("spill", dir.join("spill"), "within the input directory"),
        ];
        for (kind, out, expected) in cases {
            let mut paths = RunPaths::new();
            paths.read_discovered(&d);
            match kind {
                "dataset" => paths.write_dataset("the output directory (--output)", &out, &d.files),
                "file" => paths.write_file("the report (--report)", &out, OwnFile::Report),
                _ => paths.spill_dir(&out),
            };
            let m = refusal(&paths);
            assert!(m.contains(expected), "{kind} {}: {m}", out.display());
        }
        // A spill directory may contain the inputs: spill files go to a private subdirectory.
        let mut paths = RunPaths::new();
        paths.read_discovered(&d).spill_dir(tmp.path());
        paths.check().unwrap();
    }

    #[test]
    fn globs_refuse_only_what_they_could_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        touch(&data.join("a.jsonl"));
        let flat = discovered(&[format!("{}/*.jsonl", data.display())]);
        let deep = discovered(&[format!("{}/**/*.jsonl", data.display())]);
        let check = |d: &Discovery, decisions: &str, dir: &str| {
            let mut paths = RunPaths::new();
            paths
                .read_discovered(d)
                .write_file(
                    "the decisions file (--decisions)",
                    &data.join(decisions),
                    OwnFile::Decisions,
                )
                .write_dataset("the output directory (--output)", &data.join(dir), &d.files);
            paths.check()
        };
        // `*.jsonl` reads neither data/d.parquet nor anything in data/out/.
        check(&flat, "d.parquet", "out").unwrap();
        let m = match check(&flat, "d.jsonl", "out") {
            Err(Error::Paths(c)) => c.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(m.contains("input glob") && m.contains("d.jsonl"), "{m}");
        // `**/*.jsonl` would read data/out/a.jsonl.
        let m = match check(&deep, "d.parquet", "out") {
            Err(Error::Paths(c)) => c.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(m.contains("input glob") && m.contains("out"), "{m}");
    }

    #[test]
    fn a_spill_directory_on_object_storage_is_refused_with_its_conflict() {
        let mut paths = RunPaths::new();
        paths.spill_dir(Path::new("s3://bucket/spill"));
        let Err(Error::Paths(conflicts)) = paths.check() else {
            panic!("expected a refusal of the paths");
        };
        assert!(
            matches!(
                &conflicts.shown[..],
                [PathConflict::SpillOnObjectStorage { output }]
                    if output.path == Path::new("s3://bucket/spill")
            ),
            "{conflicts:?}"
        );
        let m = conflicts.to_string();
        assert!(
            m.contains("many times over; give a local directory (object storage"),
            "{m}"
        );
        assert!(!m.contains("  "), "one sentence, no gaps: {m}");
    }

    #[test]
    fn outputs_may_not_collide_or_nest() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in/a.jsonl");
        touch(&input);
        let d = discovered(&[s(&input)]);
        let out = tmp.path().join("out");
        let base = || {
            let mut p = RunPaths::new();
            p.read_discovered(&d)
                .write_dataset("the output directory (--output)", &out, &d.files);
            p
        };
        let mut p = base();
        p.write_file(
            "the decisions file (--decisions)",
            &out.join("a.jsonl"),
            OwnFile::Decisions,
        );
        assert!(refusal(&p).contains("holds only the filtered dataset"));
        let mut p = base();
        p.write_file(
            "the decisions file (--decisions)",
            &tmp.path().join("x.json"),
            OwnFile::Decisions,
        )
        .write_file(
            "the report (--report)",
            &tmp.path().join("./x.json"),
            OwnFile::Report,
        );
        assert!(refusal(&p).contains("are the same path"));
        let mut p = base();
        p.spill_dir(&out.join("spill"));
        assert!(refusal(&p).contains("holds only the filtered dataset"));
        let mut p = base();
        p.spill_dir(tmp.path()).write_file(
            "the decisions file (--decisions)",
            &tmp.path().join("d.jsonl"),
            OwnFile::Decisions,
        );
        p.check().unwrap();
    }

    #[test]
    fn a_step_directory_holds_only_its_own_files() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in/a.jsonl");
        touch(&input);
        let step = |dir: &Path| {
            let mut p = RunPaths::new();
            p.read_file("the input file", &input)
                .write_step_dir("the sign output (-o)", dir)
                .write_file_checked_later("the sign output (-o)", &dir.join("group-00000.bin"))
                .write_file_checked_later("the sign output (-o)", &dir.join("manifest.json"));
            p
        };
        // Its own files are no conflict; another output inside it, or an input there, is.
        step(&tmp.path().join("sig")).check().unwrap();
        let mut p = step(&tmp.path().join("sig"));
        p.write_file(
            "the report (--report)",
            &tmp.path().join("sig/r.json"),
            OwnFile::Report,
        );
        assert!(refusal(&p).contains("which holds only that step's files"));
        let m = refusal(&step(&tmp.path().join("in")));
        assert!(m.contains("contains the input file"), "{m}");
        // Once a step's manifest is there, no other run's file goes into that directory.
        std::fs::create_dir(tmp.path().join("sig")).unwrap();
        std::fs::write(
            tmp.path().join("sig/manifest.json"),
            br#"{"format":"neardup-decide","format_version":4}"#,
        )
        .unwrap();
        let mut p = RunPaths::new();
        p.write_file(
            "the hot-key file (--output)",
            &tmp.path().join("sig/h.ndh"),
            OwnFile::HotKeys,
        );
        assert!(refusal(&p).contains("inside the decide output"));
        let mut p = RunPaths::new();
        p.write_dataset(
            "the output directory (--output)",
            &tmp.path().join("sig"),
            &[],
        );
        assert!(refusal(&p).contains("an earlier `decide` step"));
    }

    #[test]
    fn two_inputs_with_one_output_name_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a/x.jsonl");
        let b = tmp.path().join("b/x.jsonl");
        touch(&a);
        touch(&b);
        let d = discovered(&[s(&a), s(&b)]);
        let mut p = RunPaths::new();
        p.read_discovered(&d).write_dataset(
            "the output directory (--output)",
            &tmp.path().join("out"),
            &d.files,
        );
        let m = refusal(&p);
        assert!(
            m.contains("would both be written to") && m.contains("x.jsonl"),
            "{m}"
        );
    }

    #[test]
    fn unwritable_places_are_refused_and_nothing_is_created() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let mut p = RunPaths::new();
        p.write_file(
            "the report (--report)",
            &file.join("sub/r.json"),
            OwnFile::Report,
        );
        assert!(refusal(&p).contains("is not a directory"));
        let mut p = RunPaths::new();
        p.write_file("the report (--report)", tmp.path(), OwnFile::Report);
        assert!(refusal(&p).contains("is a directory"));
        let mut p = RunPaths::new();
        p.spill_dir(&file);
        assert!(refusal(&p).contains("not a directory"));
        // Missing parents that can be created are fine; nothing is created by the check.
        let mut p = RunPaths::new();
        p.write_file(
            "the report (--report)",
            &tmp.path().join("new/deeper/r.json"),
            OwnFile::Report,
        )
        .spill_dir(&tmp.path().join("spill/here"));
        p.check().unwrap();
        assert!(!tmp.path().join("new").exists() && !tmp.path().join("spill").exists());
        let prepared = p.prepare().unwrap();
        assert!(tmp.path().join("spill/here").is_dir());
        assert!(!tmp.path().join("new").exists());
        // What it made goes when the run ends, if empty; what holds a file stays.
        drop(prepared);
        assert!(!tmp.path().join("spill").exists());
        let prepared = p.prepare().unwrap();
        std::fs::write(tmp.path().join("spill/mine"), b"").unwrap();
        drop(prepared);
        assert!(!tmp.path().join("spill/here").exists());
        assert!(tmp.path().join("spill/mine").exists());
    }

    #[test]
    fn a_read_only_directory_is_refused_unless_privileges_ignore_it() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let locked = tmp.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        let privileged = std::fs::write(locked.join("probe"), b"").is_ok();
        let mut p = RunPaths::new();
        p.write_file(
            "the report (--report)",
            &locked.join("r.json"),
            OwnFile::Report,
        );
        if privileged {
            p.check().unwrap();
        } else {
            assert!(refusal(&p).contains("does not accept new files"));
        }
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn non_utf8_output_paths_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"r\xff.json");
        let mut p = RunPaths::new();
        p.write_file(
            "the report (--report)",
            &tmp.path().join(name),
            OwnFile::Report,
        );
        assert!(refusal(&p).contains("UTF-8"));
    }
}
