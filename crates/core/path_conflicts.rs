//! Why a run's paths are refused ([`crate::RunPaths::check`]): each conflict, with the paths as
//! messages name them. A leaf of the facade, so that its error type names them without the
//! checks.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::own_files::OwnFile;

/// A path as messages name it: what it is for the user and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    /// What it is, e.g. "the decisions file (--decisions)", "the input glob".
    pub what: String,
    /// The path (or URL, or argument) as given.
    pub path: PathBuf,
}

impl NamedPath {
    pub(crate) fn new(what: &str, path: impl AsRef<Path>) -> NamedPath {
        NamedPath {
            what: what.to_string(),
            path: path.as_ref().to_path_buf(),
        }
    }
}

impl fmt::Display for NamedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.path.display())
    }
}

/// How an output directory stands to an input directory or glob it would replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRelation {
    /// The output directory contains it.
    Contains,
    /// The output directory is the glob's directory.
    DirectoryOf,
    /// The output directory is the input directory.
    Is,
}

impl SourceRelation {
    /// How messages say it: "contains", "is the directory of", "is".
    fn as_str(self) -> &'static str {
        match self {
            SourceRelation::Contains => "contains",
            SourceRelation::DirectoryOf => "is the directory of",
            SourceRelation::Is => "is",
        }
    }
}

/// Why an output's directory cannot take it (a [`PathConflict::Unwritable`]).
#[derive(Debug)]
pub enum Unwritable {
    /// The directory (or its nearest existing ancestor) cannot be looked at.
    Unreadable(io::Error),
    /// It is not a directory.
    NotADirectory,
    /// It does not accept new files.
    Refused(io::Error),
}

impl Unwritable {
    /// What follows the directory in the conflict's message.
    fn after_dir(&self) -> String {
        match self {
            Unwritable::Unreadable(e) => format!(": {e}"),
            Unwritable::NotADirectory => " is not a directory".to_string(),
            Unwritable::Refused(e) => format!(" does not accept new files ({e})"),
        }
    }
}

/// " (the same file)" when two paths name one file without being the same path.
fn same_file(same_path: bool) -> &'static str {
    if same_path { "" } else { " (the same file)" }
}

/// One conflict among a run's paths that [`RunPaths::check`](crate::RunPaths::check) refuses.
/// Its message prints every cause it holds (a field named `error`), so it has no source.
#[derive(Debug, thiserror::Error)]
pub enum PathConflict {
    /// The output's path is not UTF-8 (reports record paths as text).
    #[error(
        "{output} is not a valid UTF-8 path (reports record paths as text): choose another name"
    )]
    NotUtf8 {
        /// The output.
        output: NamedPath,
    },
    /// A single-file output's path holds a file neardup did not write of the output's kind
    /// (an output replaces only its own kind of file, or an empty one).
    #[error(
        "{output} is a file neardup did not write (not {kind}): choose a new path, or remove it \
         first"
    )]
    NotOwnFile {
        /// The output.
        output: NamedPath,
        /// What it would replace.
        kind: OwnFile,
    },
    /// A single-file output's path holds a file that cannot be read to tell whether neardup
    /// wrote it.
    #[error(
        "{output} cannot be read to tell whether neardup wrote it ({error}): choose a new path, \
         or remove it first"
    )]
    UnreadableExisting {
        /// The output.
        output: NamedPath,
        /// What reading met.
        error: io::Error,
    },
    /// The output's path cannot be resolved.
    #[error("cannot resolve {output}: {error}")]
    Unresolvable {
        /// The output.
        output: NamedPath,
        /// Why not.
        error: io::Error,
    },
    /// An output directory contains, or is, an input directory or glob's tree.
    #[error(
        "{output} {} {input_tree}: the outputs would replace or mix with the inputs; choose an \
         output directory outside the input tree",
        relation.as_str()
    )]
    HoldsSource {
        /// The output directory.
        output: NamedPath,
        /// How it stands to the input tree.
        relation: SourceRelation,
        /// The input directory or glob.
        input_tree: NamedPath,
    },
    /// An output a later run over the same arguments would read back as input.
    #[error(
        "{output} is within {input_tree}: a later run over it would read the outputs back as \
         input; choose a path outside {}",
        if *object_storage { "it" } else { "the input tree" }
    )]
    InsideSource {
        /// The output.
        output: NamedPath,
        /// The input directory, prefix or glob.
        input_tree: NamedPath,
        /// Both on object storage.
        object_storage: bool,
    },
    /// An output a symbolic link inside an input directory or glob's tree leads to (or a dataset
    /// directory holding where it leads): a later run over the same arguments would follow the
    /// link and read the outputs back.
    #[error(
        "{output} is where the symbolic link {} in {input_tree} leads: a later run over it would \
         follow the link and read the outputs back as input; remove the link or choose a path it \
         does not lead to",
        link.display()
    )]
    ThroughLink {
        /// The output.
        output: NamedPath,
        /// The link.
        link: PathBuf,
        /// The input directory or glob.
        input_tree: NamedPath,
    },
    /// A spill directory on object storage.
    #[error(
        "{output}: spill files are scratch space read back many times over; give a local \
         directory (object storage takes every input and output of a run, not its scratch space)"
    )]
    SpillOnObjectStorage {
        /// The spill directory.
        output: NamedPath,
    },
    /// An output on object storage that is (or, a dataset prefix, contains) an input object.
    #[error(
        "{output} {} {input}: the run would replace its own input; choose another path",
        if *contains { "contains" } else { "is" }
    )]
    ReplacesObjectInput {
        /// The output.
        output: NamedPath,
        /// The input.
        input: NamedPath,
        /// The output contains the input rather than being it.
        contains: bool,
    },
    /// Outputs on object storage that are one another, or one inside the other.
    #[error(
        "{inner} is {} {outer}: give each its own path",
        if *same { "the same as" } else { "inside" }
    )]
    ObjectOutputsOverlap {
        /// The output inside (or the same as) the other.
        inner: NamedPath,
        /// The other.
        outer: NamedPath,
        /// They are the same.
        same: bool,
    },
    /// An output file that is an input file (by path, link or inode).
    #[error(
        "{output} is {input}{}: writing it would destroy the input; choose another path",
        same_file(*same_path)
    )]
    IsInput {
        /// The output.
        output: NamedPath,
        /// The input.
        input: NamedPath,
        /// Both are given as the same path (otherwise: another name of the same file).
        same_path: bool,
    },
    /// A file of the dataset directory would be written over an input file.
    #[error(
        "the output of {} would be written to {}, which is {input}{}: choose an output directory \
         outside the inputs",
        from.display(),
        target.display(),
        same_file(*same_path)
    )]
    OutputIsInput {
        /// The input whose output it is.
        from: PathBuf,
        /// The file it would be written to.
        target: PathBuf,
        /// The input there.
        input: NamedPath,
        /// `target` is the input's path as given (otherwise: another name of the same file).
        same_path: bool,
    },
    /// An output directory holds an input file.
    #[error(
        "{output} contains {input}: the outputs would replace or mix with the inputs; choose an \
         output directory outside the inputs"
    )]
    HoldsInput {
        /// The output directory.
        output: NamedPath,
        /// The input.
        input: NamedPath,
    },
    /// Two outputs are the same path.
    #[error("{first} and {second} are the same path: give each its own")]
    SamePath {
        /// The first.
        first: NamedPath,
        /// The second.
        second: NamedPath,
    },
    /// An output inside the dataset directory, which holds only the filtered dataset.
    #[error(
        "{inner} is inside {outer}, which holds only the filtered dataset: choose a path outside \
         it"
    )]
    InsideDataset {
        /// The output.
        inner: NamedPath,
        /// The dataset directory.
        outer: NamedPath,
    },
    /// An output inside a step's output directory (`sign`, `decide`), which holds only the
    /// step's files.
    #[error(
        "{inner} is inside {outer}, which holds only that step's files: choose a path outside it"
    )]
    InsideStepOutput {
        /// The output.
        inner: NamedPath,
        /// The step's output directory.
        outer: NamedPath,
    },
    /// An output directory that is the output directory of an earlier `sign` or `decide` step.
    #[error(
        "{output} is the output of an earlier `{step}` step, which holds only that step's files: \
         choose another directory"
    )]
    IsStepOutput {
        /// The output directory.
        output: NamedPath,
        /// The step: `sign` or `decide`.
        step: &'static str,
    },
    /// An output inside the path of an output file.
    #[error("{inner} is inside {outer}, which is to be a file: give each its own path")]
    InsideFile {
        /// The output.
        inner: NamedPath,
        /// The output file.
        outer: NamedPath,
    },
    /// Two inputs whose outputs would be the same file of the dataset directory.
    #[error(
        "the inputs {} and {} would both be written to {}: outputs keep the inputs' paths below \
         their arguments, so pass inputs whose paths differ there (e.g. their parent directories \
         instead of the files)",
        first.display(),
        second.display(),
        target.display()
    )]
    SameOutputFile {
        /// The first input.
        first: PathBuf,
        /// The second.
        second: PathBuf,
        /// The file both would be written to.
        target: PathBuf,
    },
    /// An output file whose path is a directory.
    #[error("{output} is a directory: name a file")]
    FileIsDirectory {
        /// The output.
        output: NamedPath,
    },
    /// An output file whose path holds a node that is not a regular file (a FIFO, a device, a
    /// symbolic link): publishing renames a file into place, which would replace it.
    #[error(
        "{output} is {node}, not a regular file: outputs are published by renaming a finished \
         file into place, which would replace it; name a regular file or a new path"
    )]
    NotARegularFile {
        /// The output.
        output: NamedPath,
        /// What is there (`"a FIFO (named pipe)"`, `"a character device"`, …).
        node: &'static str,
    },
    /// An output directory whose path is a file.
    #[error("{output} exists and is not a directory")]
    DirectoryIsFile {
        /// The output.
        output: NamedPath,
    },
    /// The directory that would take the output cannot.
    #[error("cannot write {output}: {}{}", dir.display(), problem.after_dir())]
    Unwritable {
        /// The output.
        output: NamedPath,
        /// The directory (the output's own, its parent, or their nearest existing ancestor).
        dir: PathBuf,
        /// Why not.
        problem: Unwritable,
    },
}

/// The conflicts [`RunPaths::check`](crate::RunPaths::check) refused a run's paths for (an
/// [`Error::Paths`](crate::Error::Paths), exit code 2): the first few per output, one per line,
/// and how many more were found.
#[derive(Debug, thiserror::Error)]
#[error("{}", listed(shown, *hidden))]
pub struct PathConflicts {
    /// The conflicts shown, in the order found.
    pub shown: Vec<PathConflict>,
    /// Conflicts found beyond those shown.
    pub hidden: usize,
}

/// The conflicts shown, one per line, and how many more there are.
fn listed(shown: &[PathConflict], hidden: usize) -> String {
    let mut lines: Vec<String> = shown.iter().map(ToString::to_string).collect();
    if hidden > 0 {
        lines.push(format!("… and {hidden} more conflicts like these"));
    }
    lines.join("\n")
}
