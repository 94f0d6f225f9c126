//! Why a run's paths are refused ([`crate::RunPaths::check`]): each conflict, with the paths as
//! messages name them. A leaf of the facade, so that its error type names them without the
//! checks.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

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

/// One conflict among a run's paths that [`RunPaths::check`](crate::RunPaths::check) refuses.
#[derive(Debug)]
pub enum PathConflict {
    /// The output's path is not UTF-8 (reports record paths as text).
    NotUtf8 {
        /// The output.
        output: NamedPath,
    },
    /// The output's path cannot be resolved.
    Unresolvable {
        /// The output.
        output: NamedPath,
        /// Why not.
        source: io::Error,
    },
    /// An output directory contains, or is, an input directory or glob's tree.
    HoldsSource {
        /// The output directory.
        output: NamedPath,
        /// How it stands to the source.
        relation: SourceRelation,
        /// The input directory or glob.
        source: NamedPath,
    },
    /// An output a later run over the same arguments would read back as input.
    InsideSource {
        /// The output.
        output: NamedPath,
        /// The input directory, prefix or glob.
        source: NamedPath,
        /// Both on object storage.
        object_storage: bool,
    },
    /// An output a symbolic link inside an input directory or glob's tree leads to (or a dataset
    /// directory holding where it leads): a later run over the same arguments would follow the
    /// link and read the outputs back.
    ThroughLink {
        /// The output.
        output: NamedPath,
        /// The link.
        link: PathBuf,
        /// The input directory or glob.
        source: NamedPath,
    },
    /// A spill directory on object storage.
    SpillOnObjectStorage {
        /// The spill directory.
        output: NamedPath,
    },
    /// An output on object storage that is (or, a dataset prefix, contains) an input object.
    ReplacesObjectInput {
        /// The output.
        output: NamedPath,
        /// The input.
        input: NamedPath,
        /// The output contains the input rather than being it.
        contains: bool,
    },
    /// Outputs on object storage that are one another, or one inside the other.
    ObjectOutputsOverlap {
        /// The output inside (or the same as) the other.
        inner: NamedPath,
        /// The other.
        outer: NamedPath,
        /// They are the same.
        same: bool,
    },
    /// An output file that is an input file (by path, link or inode).
    IsInput {
        /// The output.
        output: NamedPath,
        /// The input.
        input: NamedPath,
        /// Both are given as the same path (otherwise: another name of the same file).
        same_path: bool,
    },
    /// A file of the dataset directory would be written over an input file.
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
    HoldsInput {
        /// The output directory.
        output: NamedPath,
        /// The input.
        input: NamedPath,
    },
    /// Two outputs are the same path.
    SamePath {
        /// The first.
        first: NamedPath,
        /// The second.
        second: NamedPath,
    },
    /// An output inside the dataset directory, which holds only the filtered dataset.
    InsideDataset {
        /// The output.
        inner: NamedPath,
        /// The dataset directory.
        outer: NamedPath,
    },
    /// An output inside the path of an output file.
    InsideFile {
        /// The output.
        inner: NamedPath,
        /// The output file.
        outer: NamedPath,
    },
    /// Two inputs whose outputs would be the same file of the dataset directory.
    SameOutputFile {
        /// The first input.
        first: PathBuf,
        /// The second.
        second: PathBuf,
        /// The file both would be written to.
        target: PathBuf,
    },
    /// An output file whose path is a directory.
    FileIsDirectory {
        /// The output.
        output: NamedPath,
    },
    /// An output file whose path holds a node that is not a regular file (a FIFO, a device, a
    /// symbolic link): publishing renames a file into place, which would replace it.
    NotARegularFile {
        /// The output.
        output: NamedPath,
        /// What is there (`"a FIFO (named pipe)"`, `"a character device"`, …).
        node: &'static str,
    },
    /// An output directory whose path is a file.
    DirectoryIsFile {
        /// The output.
        output: NamedPath,
    },
    /// The directory that would take the output cannot.
    Unwritable {
        /// The output.
        output: NamedPath,
        /// The directory (the output's own, its parent, or their nearest existing ancestor).
        dir: PathBuf,
        /// Why not.
        problem: Unwritable,
    },
}

impl fmt::Display for PathConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let same_file = |same_path: bool| if same_path { "" } else { " (the same file)" };
        match self {
            PathConflict::NotUtf8 { output } => write!(
                f,
                "{output} is not a valid UTF-8 path (reports record paths as text): choose \
                 another name"
            ),
            PathConflict::Unresolvable { output, source } => {
                write!(f, "cannot resolve {output}: {source}")
            }
            PathConflict::HoldsSource {
                output,
                relation,
                source,
            } => {
                let relation = match relation {
                    SourceRelation::Contains => "contains",
                    SourceRelation::DirectoryOf => "is the directory of",
                    SourceRelation::Is => "is",
                };
                write!(
                    f,
                    "{output} {relation} {source}: the outputs would replace or mix with the \
                     inputs; choose an output directory outside the input tree"
                )
            }
            PathConflict::InsideSource {
                output,
                source,
                object_storage,
            } => write!(
                f,
                "{output} is within {source}: a later run over it would read the outputs back \
                 as input; choose a path outside {}",
                if *object_storage {
                    "it"
                } else {
                    "the input tree"
                }
            ),
            PathConflict::ThroughLink {
                output,
                link,
                source,
            } => write!(
                f,
                "{output} is where the symbolic link {} in {source} leads: a later run over it \
                 would follow the link and read the outputs back as input; remove the link or \
                 choose a path it does not lead to",
                link.display()
            ),
            PathConflict::SpillOnObjectStorage { output } => write!(
                f,
                "{output}: spill files are scratch space read back many times over; give a \
                 local directory (object storage takes every input and output of a run, not its \
                 scratch space)"
            ),
            PathConflict::ReplacesObjectInput {
                output,
                input,
                contains,
            } => write!(
                f,
                "{output} {} {input}: the run would replace its own input; choose another path",
                if *contains { "contains" } else { "is" }
            ),
            PathConflict::ObjectOutputsOverlap { inner, outer, same } => write!(
                f,
                "{inner} is {} {outer}: give each its own path",
                if *same { "the same as" } else { "inside" }
            ),
            PathConflict::IsInput {
                output,
                input,
                same_path,
            } => write!(
                f,
                "{output} is {input}{}: writing it would destroy the input; choose another path",
                same_file(*same_path)
            ),
            PathConflict::OutputIsInput {
                from,
                target,
                input,
                same_path,
            } => write!(
                f,
                "the output of {} would be written to {}, which is {input}{}: choose an output \
                 directory outside the inputs",
                from.display(),
                target.display(),
                same_file(*same_path)
            ),
            PathConflict::HoldsInput { output, input } => write!(
                f,
                "{output} contains {input}: the outputs would replace or mix with the inputs; \
                 choose an output directory outside the inputs"
            ),
            PathConflict::SamePath { first, second } => {
                write!(
                    f,
                    "{first} and {second} are the same path: give each its own"
                )
            }
            PathConflict::InsideDataset { inner, outer } => write!(
                f,
                "{inner} is inside {outer}, which holds only the filtered dataset: choose a path \
                 outside it"
            ),
            PathConflict::InsideFile { inner, outer } => write!(
                f,
                "{inner} is inside {outer}, which is to be a file: give each its own path"
            ),
            PathConflict::SameOutputFile {
                first,
                second,
                target,
            } => write!(
                f,
                "the inputs {} and {} would both be written to {}: outputs keep the inputs' \
                 paths below their arguments, so pass inputs whose paths differ there (e.g. \
                 their parent directories instead of the files)",
                first.display(),
                second.display(),
                target.display()
            ),
            PathConflict::FileIsDirectory { output } => {
                write!(f, "{output} is a directory: name a file")
            }
            PathConflict::NotARegularFile { output, node } => write!(
                f,
                "{output} is {node}, not a regular file: outputs are published by renaming a \
                 finished file into place, which would replace it; name a regular file or a new \
                 path"
            ),
            PathConflict::DirectoryIsFile { output } => {
                write!(f, "{output} exists and is not a directory")
            }
            PathConflict::Unwritable {
                output,
                dir,
                problem,
            } => {
                write!(f, "cannot write {output}: {}", dir.display())?;
                match problem {
                    Unwritable::Unreadable(e) => write!(f, ": {e}"),
                    Unwritable::NotADirectory => f.write_str(" is not a directory"),
                    Unwritable::Refused(e) => write!(f, " does not accept new files ({e})"),
                }
            }
        }
    }
}

/// The conflicts [`RunPaths::check`](crate::RunPaths::check) refused a run's paths for (an
/// [`Error::Paths`](crate::Error::Paths), exit code 2): the first few per output, one per line,
/// and how many more were found.
#[derive(Debug)]
pub struct PathConflicts {
    /// The conflicts shown, in the order found.
    pub shown: Vec<PathConflict>,
    /// Conflicts found beyond those shown.
    pub hidden: usize,
}

impl fmt::Display for PathConflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.shown.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            c.fmt(f)?;
        }
        if self.hidden > 0 {
            write!(f, "\n… and {} more conflicts like these", self.hidden)?;
        }
        Ok(())
    }
}

impl std::error::Error for PathConflicts {}
