//! Turning command-line input arguments (files, directories, globs) into a deterministic file list.

use std::collections::HashSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use neardup_storage::{ObjectEntry, ObjectUrl};

use crate::format::{Format, InputFile};

/// Options for [`discover`].
#[derive(Clone, Debug, Default)]
pub struct DiscoverOptions {
    /// Force a format for files whose extension says nothing (e.g. `--format jsonl`).
    pub format: Option<Format>,
}

/// Files found, plus inputs that could not be used (missing path, unreadable dir, glob with no
/// match, unknown extension) each with a reason. Deterministic order: arguments in the order given;
/// directories walked recursively and sorted by path; globs expanded sorted. Duplicate paths once.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// Usable input files, in processing order; their index is the file index of every address.
    pub files: Vec<InputFile>,
    /// Arguments or walked entries that could not be used, in the order met. Those marked
    /// [`InputProblem::fatal`] are errors whatever the caller's error policy.
    pub problems: Vec<InputProblem>,
    /// Where each usable argument reads from, in argument order: what a later run with the same
    /// arguments would read, so that outputs can be kept out of it.
    pub sources: Vec<InputSource>,
}

impl Discovery {
    /// The problems that make the arguments unusable as given ([`InputProblem::fatal`]).
    pub fn errors(&self) -> impl Iterator<Item = &InputProblem> {
        self.problems.iter().filter(|p| p.fatal)
    }
}

/// An input argument (or a file under one) that was not turned into an [`InputFile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputProblem {
    /// The argument as given, or the offending path found under it.
    pub input: String,
    /// Why it could not be used.
    pub message: String,
    /// True when the run cannot go on as asked: an argument that names nothing (a missing path, a
    /// glob without a match), a file named explicitly whose format is unknown, something that
    /// cannot be read twice (standard input, a pipe, a device), or a file name that is not UTF-8.
    /// False for entries met while walking a directory or expanding a glob that hold no records
    /// (unknown extension, a link leading nowhere or in a loop), which are reported and left
    /// out; an entry the walk cannot look at or read (a path too long to open, a subdirectory
    /// without permission) may hold records that would be in no total, so it is fatal.
    pub fatal: bool,
}

impl InputProblem {
    /// Problems as a message lists them: "{lead}{input}: {message}" joined by `sep`, nothing
    /// when there are none.
    pub fn listed(problems: &[InputProblem], lead: &str, sep: &str) -> String {
        if problems.is_empty() {
            return String::new();
        }
        let each: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.input, p.message))
            .collect();
        format!("{lead}{}", each.join(sep))
    }
}

/// Where one input argument reads from.
#[derive(Clone, Debug)]
pub struct InputSource {
    /// The argument as given.
    pub arg: String,
    /// What it names.
    pub kind: SourceKind,
    /// The symbolic links met walking a directory or glob, whatever they lead to (even nowhere
    /// yet): a later walk follows them, so an output they lead to would be read back.
    pub links: Vec<SourceLink>,
}

/// A symbolic link below a directory or glob argument; see [`InputSource::links`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLink {
    /// The link's path (as walked: the argument joined with `relative`).
    pub path: PathBuf,
    /// Its path below [`InputSource::root`].
    pub relative: PathBuf,
}

/// What an input argument names; see [`InputSource`].
#[derive(Clone, Debug)]
pub enum SourceKind {
    /// One file.
    File(PathBuf),
    /// A directory: every file below it is read.
    Dir(PathBuf),
    /// A glob: files below `base` (its literal directory prefix, `.` when it has none) whose path
    /// matches, at most `depth` levels down.
    Glob {
        /// The literal directory prefix the walk starts from.
        base: PathBuf,
        /// The pattern's literal prefix as written (empty when the pattern starts with a wildcard);
        /// walked paths are matched as `prefix/<path below base>`.
        prefix: PathBuf,
        /// The compiled pattern.
        matcher: globset::GlobMatcher,
        /// Levels below `base` the walk descends (`usize::MAX` with `**`).
        depth: usize,
    },
}

impl InputSource {
    /// The file or directory the argument starts from (for a glob, its literal directory prefix).
    pub fn root(&self) -> &Path {
        match &self.kind {
            SourceKind::File(p) | SourceKind::Dir(p) => p,
            SourceKind::Glob { base, .. } => base,
        }
    }

    /// Whether a file at `below` (a relative path under [`InputSource::root`]; empty for the
    /// root itself) would be read by this argument.
    pub fn reads_file(&self, below: &Path) -> bool {
        match &self.kind {
            SourceKind::File(_) => below.as_os_str().is_empty(),
            SourceKind::Dir(_) => !below.as_os_str().is_empty(),
            SourceKind::Glob {
                prefix,
                matcher,
                depth,
                ..
            } => {
                let levels = below.components().count();
                levels >= 1 && levels <= *depth && matcher.is_match(prefix.join(below))
            }
        }
    }

    /// Whether some file inside the directory at `below` (a relative path under
    /// [`InputSource::root`]; empty for the root itself) could be read by this argument, whatever
    /// its name: for a directory always, for a glob when its walk reaches that deep.
    pub fn may_read_inside(&self, below: &Path) -> bool {
        match &self.kind {
            SourceKind::File(_) => false,
            SourceKind::Dir(_) => true,
            SourceKind::Glob {
                depth,
                prefix,
                matcher,
                ..
            } => {
                below.components().count() < *depth
                    && glob_may_enter(matcher.glob().glob(), prefix, below)
            }
        }
    }
}

/// Whether the walk of glob `pattern` (literal directory prefix `prefix`) could read a file
/// inside the directory `below` (relative to the prefix): each of its components must match the
/// pattern's component at that level (`gg/data*/*.jsonl` enters `data1`, never `x2`); from a
/// `**` on, anything below may match.
fn glob_may_enter(pattern: &str, prefix: &Path, below: &Path) -> bool {
    let skip = prefix.components().count();
    let parts: Vec<Component<'_>> = Path::new(pattern).components().skip(skip).collect();
    for (i, c) in below.components().enumerate() {
        let Some(part) = parts.get(i) else {
            return false;
        };
        let part = part.as_os_str().to_string_lossy();
        if part.contains("**") {
            return true;
        }
        let matches = globset::GlobBuilder::new(&part)
            .literal_separator(true)
            .build()
            .map(|g| g.compile_matcher().is_match(c.as_os_str()))
            // A component that is no pattern alone (a brace spanning components): assume it may.
            .unwrap_or(true);
        if !matches {
            return false;
        }
    }
    true
}

/// Expands input arguments into files. Never fails as a whole: every argument either contributes
/// files or a problem. An argument that exists is taken literally (even if it contains glob
/// characters); otherwise, if it contains `*`, `?`, `[` or `{` it is a glob, else a missing path.
/// Symbolic links are followed; directory cycles are cut. Files whose format cannot be determined
/// are problems ("unknown extension"), so nothing under a directory is ignored silently.
pub fn discover<S: AsRef<str>>(inputs: &[S], opts: &DiscoverOptions) -> Discovery {
    let mut d = Discoverer {
        opts,
        out: Discovery::default(),
        seen: HashSet::new(),
    };
    for input in inputs {
        d.input(input.as_ref());
    }
    d.out
}

struct Discoverer<'o> {
    opts: &'o DiscoverOptions,
    out: Discovery,
    seen: HashSet<PathBuf>,
}

impl Discoverer<'_> {
    /// An entry met while walking: reported, and the run goes on.
    fn problem(&mut self, input: impl Into<String>, message: impl Into<String>) {
        self.push_problem(input.into(), message.into(), false);
    }

    /// An argument that cannot be used as given.
    fn error(&mut self, input: impl Into<String>, message: impl Into<String>) {
        self.push_problem(input.into(), message.into(), true);
    }

    fn push_problem(&mut self, input: String, message: String, fatal: bool) {
        self.out.problems.push(InputProblem {
            input,
            message,
            fatal,
        });
    }

    fn input(&mut self, arg: &str) {
        if arg == "-" {
            return self.error(
                arg,
                format!("standard input cannot be an input: {READ_TWICE}"),
            );
        }
        if neardup_storage::is_url(arg) {
            return self.object_input(arg);
        }
        let path = Path::new(arg);
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                let mut w = Walk::default();
                if let Err(e) = w.walk(path, Path::new(""), usize::MAX) {
                    return self.error(arg, format!("cannot read directory: {e}"));
                }
                let Walk { entries, links, .. } = w;
                self.source(arg, SourceKind::Dir(path.to_path_buf()), links);
                self.add_walked(arg, entries);
            }
            Ok(meta) => {
                let name = path
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| path.to_path_buf());
                if let Some(kind) = not_a_file(&meta) {
                    return self.error(arg, format!("is {kind}, not a file: {READ_TWICE}"));
                }
                self.source(arg, SourceKind::File(path.to_path_buf()), Vec::new());
                self.add_file(arg, path, &name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_glob(arg) => self.glob(arg),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.error(arg, "no such file or directory")
            }
            Err(e) => self.error(arg, format!("cannot access: {e}")),
        }
    }

    /// An object storage URL: the object it names, else every object below it as a
    /// directory, or, with glob characters in the key, the objects below its literal prefix that
    /// match. Listings are sorted like a local walk, so the same files in a bucket and on disk
    /// get the same order.
    fn object_input(&mut self, arg: &str) {
        let url = match ObjectUrl::parse(arg) {
            Ok(Some(url)) => url,
            Ok(None) => unreachable!("is_url said it is a URL"),
            Err(e) => return self.error(arg, e.to_string()),
        };
        if is_glob(url.key()) {
            return self.object_glob(arg, &url);
        }
        if !url.key().ends_with('/') {
            match neardup_storage::head(&url) {
                Ok(Some(size)) => {
                    self.source(arg, SourceKind::File(PathBuf::from(arg)), Vec::new());
                    let name = url.file_name().to_string();
                    return self.add_object(arg, &url, Path::new(&name), size);
                }
                Ok(None) => {}
                Err(e) => return self.error(arg, e.message()),
            }
        }
        let entries = match neardup_storage::list(&url) {
            Ok(entries) => entries,
            Err(e) => return self.error(arg, e.message()),
        };
        if entries.is_empty() {
            return self.error(arg, "no such object, and no object below this prefix");
        }
        self.source(arg, SourceKind::Dir(PathBuf::from(arg)), Vec::new());
        self.add_listed(arg, &url, entries, |_| true);
    }

    fn object_glob(&mut self, arg: &str, url: &ObjectUrl) {
        let (prefix, rest) = split_glob(url.key());
        let (matcher, depth) = match compile_glob(url.key(), &rest) {
            Ok(m) => m,
            Err(e) => return self.error(arg, format!("invalid glob: {e}")),
        };
        let base = url.with_key(prefix.to_str().unwrap_or(""));
        let entries = match neardup_storage::list(&base) {
            Ok(entries) => entries,
            Err(e) => return self.error(arg, format!("glob matched no object: {}", e.message())),
        };
        let matching = |e: &ObjectEntry| matcher.is_match(e.url.key());
        if !entries.iter().any(matching) {
            return self.error(arg, "glob matched no object");
        }
        self.source(
            arg,
            SourceKind::Glob {
                base: PathBuf::from(base.to_string()),
                prefix,
                matcher: matcher.clone(),
                depth,
            },
            Vec::new(),
        );
        self.add_listed(arg, &base, entries, matching);
    }

    fn add_listed(
        &mut self,
        arg: &str,
        base: &ObjectUrl,
        entries: Vec<ObjectEntry>,
        keep: impl Fn(&ObjectEntry) -> bool,
    ) {
        let mut found: Vec<(PathBuf, ObjectEntry)> = entries
            .into_iter()
            .filter(|e| keep(e))
            .filter_map(|e| Some((PathBuf::from(base.relative(&e.url)?), e)))
            .collect();
        // By path components, as a local walk sorts.
        found.sort_by(|a, b| a.0.cmp(&b.0));
        for (relative, e) in found {
            self.add_object(arg, &e.url, &relative, e.size);
        }
    }

    fn add_object(&mut self, arg: &str, url: &ObjectUrl, relative: &Path, size: u64) {
        let shown = url.to_string();
        let named = shown == arg;
        let key = PathBuf::from(&shown);
        if self.seen.contains(&key) {
            return;
        }
        match InputFile::detect_object(url, relative, size, self.opts.format) {
            Some(f) => {
                self.seen.insert(key);
                self.out.files.push(f);
            }
            None if named => self.error(
                shown,
                format!("{UNKNOWN_EXTENSION}; to read it anyway, name its format with --format"),
            ),
            None => self.problem(shown, format!("{UNKNOWN_EXTENSION}: left out")),
        }
    }

    fn source(&mut self, arg: &str, kind: SourceKind, links: Vec<SourceLink>) {
        self.out.sources.push(InputSource {
            arg: arg.to_string(),
            kind,
            links,
        });
    }

    fn add_walked(&mut self, arg: &str, mut entries: Vec<Walked>) {
        entries.sort_by(|a, b| a.relative.cmp(&b.relative));
        for w in entries {
            match w.error {
                Some((msg, fatal)) => self.push_problem(w.path.display().to_string(), msg, fatal),
                None => self.add_file(arg, &w.path, &w.relative),
            }
        }
    }

    fn add_file(&mut self, arg: &str, path: &Path, relative: &Path) {
        let named = path == Path::new(arg);
        let shown = if named {
            arg.to_string()
        } else {
            path.display().to_string()
        };
        // Decisions and reports name files as text, so a name that is not UTF-8 could not be
        // written or matched back; refuse it before anything is read.
        if path.to_str().is_none() {
            return self.error(
                shown,
                "the file name is not valid UTF-8 (decisions and reports name files as text): \
                 rename it",
            );
        }
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if self.seen.contains(&key) {
            return;
        }
        if let Some(kind) = std::fs::metadata(path).ok().as_ref().and_then(not_a_file) {
            return self.error(shown, format!("is {kind}, not a file: {READ_TWICE}"));
        }
        match InputFile::detect(path, relative, self.opts.format) {
            Some(f) => {
                self.seen.insert(key);
                self.out.files.push(f);
            }
            // Named on purpose, it must be read: an error. Met while walking a directory, it is
            // one of the files a dataset directory often holds besides its data (a README).
            None if named => self.error(
                shown,
                format!("{UNKNOWN_EXTENSION}; to read it anyway, name its format with --format"),
            ),
            None => self.problem(shown, format!("{UNKNOWN_EXTENSION}: left out")),
        }
    }

    fn glob(&mut self, arg: &str) {
        let (prefix, rest) = split_glob(arg);
        let (matcher, depth) = match compile_glob(arg, &rest) {
            Ok(m) => m,
            Err(e) => return self.error(arg, format!("invalid glob: {e}")),
        };
        let root = if prefix.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            prefix.clone()
        };
        let mut w = Walk::default();
        if let Err(e) = w.walk(&root, Path::new(""), depth) {
            return self.error(
                arg,
                format!("glob matched no file: cannot read {}: {e}", root.display()),
            );
        }
        let Walk {
            mut entries, links, ..
        } = w;
        entries.retain(|w| matcher.is_match(prefix.join(&w.relative)));
        if entries.is_empty() {
            return self.error(arg, "glob matched no file");
        }
        self.source(
            arg,
            SourceKind::Glob {
                base: root,
                prefix,
                matcher,
                depth,
            },
            links,
        );
        self.add_walked(arg, entries);
    }
}

const UNKNOWN_EXTENSION: &str =
    "unknown extension (expected .jsonl, .json, .ndjson, optionally .gz/.zst, or .parquet)";

/// Why inputs must be files: both stages read every input, so a stream would be consumed by the
/// first. Spooling it to a temporary file would hide a copy of the whole input on disk and leave
/// its outputs and decisions without a file name to carry.
const READ_TWICE: &str = "neardup reads every input twice (once per stage), which standard \
                          input, a pipe or a device cannot give; save the data to a file first \
                          and pass that file";

/// What a non-regular file is, for the message refusing it.
fn not_a_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() || t.is_dir() {
        None
    } else if t.is_fifo() {
        Some("a pipe (FIFO)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else {
        Some("a special file")
    }
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// Splits a glob into its literal directory prefix and the pattern part below it.
fn split_glob(pattern: &str) -> (PathBuf, String) {
    let comps: Vec<Component<'_>> = Path::new(pattern).components().collect();
    let mut prefix = PathBuf::new();
    let mut taken = 0;
    for (i, c) in comps.iter().enumerate() {
        let lit = match c {
            Component::Normal(s) => !is_glob(&s.to_string_lossy()),
            _ => true,
        };
        // The last component is the file pattern even when literal (a missing file), so the walk
        // happens in its parent.
        if !lit || i + 1 == comps.len() {
            break;
        }
        prefix.push(c.as_os_str());
        taken = i + 1;
    }
    let rest: PathBuf = comps[taken..].iter().collect();
    (prefix, rest.to_string_lossy().into_owned())
}

struct Walked {
    path: PathBuf,
    relative: PathBuf,
    /// Why it could not be walked, and whether that is fatal (see [`walk_error`]).
    error: Option<(String, bool)>,
}

/// The problem of an entry the walk could not look at or read (`what` failed): fatal unless
/// nothing is there to hold records (a link leading nowhere, a loop of links), since the
/// records of what the walk cannot see would be in no total.
fn walk_error(what: &str, e: &std::io::Error) -> (String, bool) {
    let empty = e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP);
    if empty {
        (format!("{what}: {e}: left out"), false)
    } else {
        (
            format!(
                "{what}: {e}; the records it holds would be in no total: make it readable (a \
                 path too long to open: move it higher up), or leave it out of the inputs"
            ),
            true,
        )
    }
}

/// What a walk found: files (and entries that could not be read), and symbolic links.
#[derive(Default)]
struct Walk {
    visited: HashSet<PathBuf>,
    entries: Vec<Walked>,
    links: Vec<SourceLink>,
}

impl Walk {
    /// Collects every regular file under `dir` up to `depth` levels; subdirectory read errors
    /// become entries with an error so they are reported instead of dropped.
    fn walk(&mut self, dir: &Path, rel: &Path, depth: usize) -> std::io::Result<()> {
        if depth == 0 {
            return Ok(());
        }
        if let Ok(canon) = std::fs::canonicalize(dir)
            && !self.visited.insert(canon)
        {
            return Ok(());
        }
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let relative = rel.join(entry.file_name());
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                self.links.push(SourceLink {
                    path: path.clone(),
                    relative: relative.clone(),
                });
            }
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    if let Err(e) = self.walk(&path, &relative, depth - 1) {
                        self.entries.push(Walked {
                            path,
                            relative,
                            error: Some(walk_error("cannot read directory", &e)),
                        });
                    }
                }
                Ok(_) => self.entries.push(Walked {
                    path,
                    relative,
                    error: None,
                }),
                Err(e) => self.entries.push(Walked {
                    path,
                    relative,
                    error: Some(walk_error("cannot access", &e)),
                }),
            }
        }
        Ok(())
    }
}

/// The matcher of glob `pattern` (`*` stays within one path component, as in a shell) and how
/// many components below its literal prefix it can reach (`rest`, the part from its first glob
/// character; unbounded with `**`).
fn compile_glob(
    pattern: &str,
    rest: &str,
) -> Result<(globset::GlobMatcher, usize), globset::Error> {
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()?
        .compile_matcher();
    let depth = if rest.contains("**") {
        usize::MAX
    } else {
        rest.split('/').filter(|c| !c.is_empty()).count()
    };
    Ok((matcher, depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"{}\n").unwrap();
    }

    fn s(p: &Path) -> String {
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn arguments_that_name_nothing_usable_are_fatal_entries_met_walking_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        touch(&r.join("d/a.jsonl"));
        touch(&r.join("d/README.md"));
        touch(&r.join("notes.txt"));
        let d = discover(
            &[
                s(&r.join("d")),
                s(&r.join("typo.jsonl")),
                format!("{}/*.parquet", r.display()),
                s(&r.join("notes.txt")),
                "-".to_string(),
            ],
            &DiscoverOptions::default(),
        );
        assert_eq!(d.files.len(), 1);
        let got: Vec<(bool, &str)> = d
            .problems
            .iter()
            .map(|p| (p.fatal, p.message.as_str()))
            .collect();
        assert_eq!(got.len(), 5, "{:?}", d.problems);
        assert!(
            !got[0].0 && got[0].1.contains("unknown extension"),
            "{got:?}"
        );
        assert!(got[1].0 && got[1].1.contains("no such file"), "{got:?}");
        assert!(got[2].0 && got[2].1.contains("matched no file"), "{got:?}");
        assert!(got[3].0 && got[3].1.contains("--format"), "{got:?}");
        assert!(got[4].0 && got[4].1.contains("standard input"), "{got:?}");
        assert_eq!(d.errors().count(), 4);
    }

    #[test]
    fn pipes_are_refused_wherever_they_are_met() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("d/stream.jsonl");
        std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        for arg in [s(&fifo), s(&tmp.path().join("d"))] {
            let d = discover(&[arg], &DiscoverOptions::default());
            assert!(d.files.is_empty());
            let e: Vec<_> = d.errors().collect();
            assert_eq!(e.len(), 1, "{:?}", d.problems);
            assert!(e[0].message.contains("pipe") && e[0].message.contains("twice"));
        }
    }

    #[test]
    fn file_names_that_are_not_utf8_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"caf\xe9.jsonl");
        touch(&tmp.path().join("d").join(name));
        let d = discover(&[s(&tmp.path().join("d"))], &DiscoverOptions::default());
        assert!(d.files.is_empty());
        let e: Vec<_> = d.errors().collect();
        assert_eq!(e.len(), 1);
        assert!(e[0].input.contains("caf\u{fffd}.jsonl") && e[0].message.contains("UTF-8"));
    }

    #[test]
    fn sources_tell_what_a_later_run_would_read() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        touch(&r.join("dir/a.jsonl"));
        touch(&r.join("g/b.jsonl"));
        let d = discover(
            &[
                s(&r.join("dir")),
                format!("{}/g/*.jsonl", r.display()),
                format!("{}/g/**/*.jsonl", r.display()),
            ],
            &DiscoverOptions::default(),
        );
        assert_eq!(d.sources.len(), 3);
        let (dir, flat, deep) = (&d.sources[0], &d.sources[1], &d.sources[2]);
        assert_eq!(dir.root(), r.join("dir"));
        assert!(dir.reads_file(Path::new("x/anything.txt")));
        assert!(dir.may_read_inside(Path::new("out")));
        assert_eq!(flat.root(), r.join("g"));
        assert!(flat.reads_file(Path::new("c.jsonl")));
        assert!(!flat.reads_file(Path::new("c.parquet")));
        assert!(!flat.reads_file(Path::new("out/c.jsonl")));
        assert!(!flat.may_read_inside(Path::new("out")));
        assert!(flat.may_read_inside(Path::new("")));
        assert!(deep.reads_file(Path::new("out/c.jsonl")));
        assert!(deep.may_read_inside(Path::new("out/deeper")));
    }

    #[test]
    fn glob_prefix() {
        assert_eq!(
            split_glob("data/x/*.jsonl"),
            (PathBuf::from("data/x"), "*.jsonl".to_string())
        );
        assert_eq!(
            split_glob("/a/**/p*.parquet"),
            (PathBuf::from("/a"), "**/p*.parquet".to_string())
        );
        assert_eq!(
            split_glob("*.jsonl"),
            (PathBuf::new(), "*.jsonl".to_string())
        );
        assert_eq!(
            split_glob("d/{a,b}/f.jsonl"),
            (PathBuf::from("d"), "{a,b}/f.jsonl".to_string())
        );
    }
}
