//! Turning command-line input arguments (files, directories, globs) into a deterministic file list.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

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
    /// Arguments or walked entries that could not be used.
    pub problems: Vec<InputProblem>,
}

/// An input argument (or a file under one) that was not turned into an [`InputFile`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputProblem {
    /// The argument as given, or the offending path found under it.
    pub input: String,
    /// Why it could not be used.
    pub message: String,
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
    fn problem(&mut self, input: impl Into<String>, message: impl Into<String>) {
        self.out.problems.push(InputProblem {
            input: input.into(),
            message: message.into(),
        });
    }

    fn input(&mut self, arg: &str) {
        let path = Path::new(arg);
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                let mut entries = Vec::new();
                let mut visited = HashSet::new();
                if let Err(e) = walk(path, Path::new(""), usize::MAX, &mut visited, &mut entries) {
                    self.problem(arg, format!("cannot read directory: {e}"));
                    return;
                }
                self.add_walked(arg, entries);
            }
            Ok(_) => {
                let name = path
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| path.to_path_buf());
                self.add_file(arg, path, &name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_glob(arg) => self.glob(arg),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.problem(arg, "no such file or directory")
            }
            Err(e) => self.problem(arg, format!("cannot access: {e}")),
        }
    }

    fn add_walked(&mut self, arg: &str, mut entries: Vec<Walked>) {
        entries.sort_by(|a, b| a.relative.cmp(&b.relative));
        for w in entries {
            match w.error {
                Some(msg) => self.problem(w.path.display().to_string(), msg),
                None => self.add_file(arg, &w.path, &w.relative),
            }
        }
    }

    fn add_file(&mut self, arg: &str, path: &Path, relative: &Path) {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if self.seen.contains(&key) {
            return;
        }
        match InputFile::detect(path, relative, self.opts.format) {
            Some(f) => {
                self.seen.insert(key);
                self.out.files.push(f);
            }
            None => {
                let shown = if path == Path::new(arg) {
                    arg.to_string()
                } else {
                    path.display().to_string()
                };
                self.problem(
                    shown,
                    "unknown extension (expected .jsonl, .json, .ndjson, optionally .gz/.zst, or .parquet; or pass a format)",
                );
            }
        }
    }

    fn glob(&mut self, arg: &str) {
        let (prefix, rest) = split_glob(arg);
        let matcher = match globset::GlobBuilder::new(arg)
            .literal_separator(true)
            .build()
        {
            Ok(g) => g.compile_matcher(),
            Err(e) => return self.problem(arg, format!("invalid glob: {e}")),
        };
        let depth = if rest.contains("**") {
            usize::MAX
        } else {
            rest.split('/').filter(|c| !c.is_empty()).count()
        };
        let root = if prefix.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            prefix.clone()
        };
        let mut entries = Vec::new();
        let mut visited = HashSet::new();
        if let Err(e) = walk(&root, Path::new(""), depth, &mut visited, &mut entries) {
            return self.problem(
                arg,
                format!("cannot read glob base {}: {e}", root.display()),
            );
        }
        entries.retain(|w| matcher.is_match(prefix.join(&w.relative)));
        if entries.is_empty() {
            return self.problem(arg, "glob matched no file");
        }
        self.add_walked(arg, entries);
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
    error: Option<String>,
}

/// Collects every regular file under `dir` up to `depth` levels; subdirectory read errors become
/// entries with an error so they are reported instead of dropped.
fn walk(
    dir: &Path,
    rel: &Path,
    depth: usize,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<Walked>,
) -> std::io::Result<()> {
    if depth == 0 {
        return Ok(());
    }
    if let Ok(canon) = std::fs::canonicalize(dir)
        && !visited.insert(canon)
    {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let relative = rel.join(entry.file_name());
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => {
                if let Err(e) = walk(&path, &relative, depth - 1, visited, out) {
                    out.push(Walked {
                        path,
                        relative,
                        error: Some(format!("cannot read directory: {e}")),
                    });
                }
            }
            Ok(_) => out.push(Walked {
                path,
                relative,
                error: None,
            }),
            Err(e) => out.push(Walked {
                path,
                relative,
                error: Some(format!("cannot access: {e}")),
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
