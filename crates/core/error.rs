//! The facade's error type: what failed, with the values and the source error its message is
//! built from (so a binding maps it to its own exception types by the data, not the text).

use std::fmt;
use std::io;
use std::path::PathBuf;

use neardup_corpus::{InputProblem, WriteError};
use neardup_dedup::StepInputError;
use neardup_keys::KeysError;

/// Why a run failed. [`Error::exit_code`] maps it to the CLI's exit status.
#[derive(Debug)]
pub enum Error {
    /// Invalid settings or arguments (exit code 2).
    Usage(String),
    /// Stage 1 failed.
    Keys(neardup_keys::KeysError),
    /// Stage 2 failed.
    Dedup(neardup_dedup::DedupError),
    /// The inputs cannot be used: an argument that names nothing usable, an unusable input
    /// under `on_error = fail`, or no input file at all.
    Inputs(InputsError),
    /// A file (or standard output) the run reads or writes failed.
    Io {
        /// Reading, writing or creating.
        op: IoOp,
        /// What was read or written.
        target: IoTarget,
        /// The system's error.
        source: io::Error,
    },
    /// Publishing the run's outputs (or beginning to) failed; the error names the file.
    Publish(WriteError),
    /// A key-table or hot-key file given to a step (not made by this run) cannot be used.
    KeyFile(KeysError),
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (exit code 2: the arguments name the wrong files).
    StepInput(StepInputError),
    /// The run's worker threads could not be started.
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not.
        source: rayon::ThreadPoolBuildError,
    },
    /// The thread a run was running on ended without its result (it panicked).
    ThreadLost {
        /// The thread, e.g. "the pipeline thread".
        thread: &'static str,
    },
    /// The evaluation (`neardup eval`) could not run.
    Eval(crate::eval::EvalError),
    /// A saved index (`--against`, `--index-out`, `neardup index`) cannot be made, read or used
    /// (exit code 2 when it was made with other settings or the arguments do not fit it).
    Index(neardup_index::IndexError),
    /// The bytes or files of a step's value are damaged, truncated or not neardup's.
    Corrupt(String),
    /// The run was cancelled (its [`neardup_exec::CancelToken`]; the CLI: a signal) before
    /// its outputs were published; nothing was published and what it wrote was removed
    /// (exit code 130).
    Interrupted,
}

impl Error {
    /// 2 for usage errors, 130 (128 + SIGINT) when interrupted, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::StepInput(_) => 2,
            Error::Index(
                neardup_index::IndexError::OtherSettings { .. }
                | neardup_index::IndexError::Overlap { .. }
                | neardup_index::IndexError::NotAnIndex { .. }
                | neardup_index::IndexError::MinCount(_)
                | neardup_index::IndexError::Decisions(_),
            ) => 2,
            Error::Interrupted => 130,
            Error::Keys(neardup_keys::KeysError::Config(_))
            | Error::Dedup(neardup_dedup::DedupError::Config(_)) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Corrupt(m) => f.write_str(m),
            Error::Inputs(e) => e.fmt(f),
            Error::Io { op, target, source } => match op {
                IoOp::Read => write!(f, "cannot read {target}: {source}"),
                IoOp::Write => write!(f, "cannot write {target}: {source}"),
                IoOp::Create { what } => write!(f, "cannot create {what} {target}: {source}"),
                IoOp::OpenStream => write!(f, "{target}: {source}"),
            },
            Error::Publish(e) => e.fmt(f),
            Error::KeyFile(e) => e.fmt(f),
            Error::StepInput(e) => e.fmt(f),
            Error::Threads { threads, source } => {
                write!(f, "cannot start {threads} threads: {source}")
            }
            Error::ThreadLost { thread } => write!(f, "{thread} panicked"),
            Error::Eval(e) => e.fmt(f),
            Error::Index(e) => e.fmt(f),
            Error::Interrupted => f.write_str(
                "interrupted before the outputs were published; nothing was published and the \
                 files the run had written were removed",
            ),
            Error::Keys(e) => write!(f, "stage 1: {e}"),
            Error::Dedup(e) => write!(f, "stage 2: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Keys(e) | Error::KeyFile(e) => Some(e),
            Error::Dedup(e) => Some(e),
            Error::Inputs(_) => None,
            Error::Io { source, .. } => Some(source),
            Error::Publish(e) => Some(e),
            Error::StepInput(e) => Some(e),
            Error::Threads { source, .. } => Some(source),
            Error::Eval(e) => Some(e),
            Error::Index(e) => Some(e),
            Error::Usage(_) | Error::Corrupt(_) | Error::ThreadLost { .. } | Error::Interrupted => {
                None
            }
        }
    }
}

impl From<neardup_index::IndexError> for Error {
    fn from(e: neardup_index::IndexError) -> Self {
        Error::Index(e)
    }
}

impl From<neardup_keys::KeysError> for Error {
    fn from(e: neardup_keys::KeysError) -> Self {
        match e {
            neardup_keys::KeysError::Interrupted => Error::Interrupted,
            e => Error::Keys(e),
        }
    }
}

impl From<neardup_dedup::DedupError> for Error {
    fn from(e: neardup_dedup::DedupError) -> Self {
        match e {
            neardup_dedup::DedupError::Interrupted => Error::Interrupted,
            e => Error::Dedup(e),
        }
    }
}

/// What an [`Error::Io`] was doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoOp {
    /// Reading.
    Read,
    /// Writing.
    Write,
    /// Creating a directory the run needs (`what` it is, e.g. "the spill directory").
    Create {
        /// What the directory is for.
        what: String,
    },
    /// Opening a framed stream of a step's output.
    OpenStream,
}

/// What an [`Error::Io`] read or wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoTarget {
    /// A file or directory.
    Path(PathBuf),
    /// A stream of a step's value, by the name messages give it.
    Stream(String),
    /// Something without a path, as messages name it ("the decisions", "memory").
    Named(&'static str),
    /// Standard output.
    Stdout,
}

impl fmt::Display for IoTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoTarget::Path(p) => write!(f, "{}", p.display()),
            IoTarget::Stream(name) => f.write_str(name),
            IoTarget::Named(name) => f.write_str(name),
            IoTarget::Stdout => f.write_str("to standard output"),
        }
    }
}

impl Error {
    /// An [`Error::Io`] on the file `path`.
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            target: IoTarget::Path(path.into()),
            source,
        }
    }
}

/// Why the inputs cannot be used (an [`Error::Inputs`]).
#[derive(Debug, Clone)]
pub enum InputsError {
    /// Arguments that cannot be used as given (a missing path, a glob without a match, a file
    /// named explicitly whose format is unknown, standard input or a pipe, a name that is not
    /// UTF-8): each with its problem.
    Unusable(Vec<InputProblem>),
    /// Inputs that could not be used, under `on_error = fail`.
    FailOnProblem(Vec<InputProblem>),
    /// No input file was found; the problems met while looking.
    NoneFound(Vec<InputProblem>),
}

impl InputsError {
    /// The problems, in the order met.
    pub fn problems(&self) -> &[InputProblem] {
        match self {
            InputsError::Unusable(p)
            | InputsError::FailOnProblem(p)
            | InputsError::NoneFound(p) => p,
        }
    }
}

impl fmt::Display for InputsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let listed = |problems: &[InputProblem], sep: &str, prefix: &str| {
            problems
                .iter()
                .map(|p| format!("{prefix}{}: {}", p.input, p.message))
                .collect::<Vec<_>>()
                .join(sep)
        };
        match self {
            InputsError::Unusable(p) => f.write_str(&listed(p, "\n", "input ")),
            InputsError::FailOnProblem(p) => write!(
                f,
                "{} (--on-error fail stops at the first unusable input)",
                listed(p, "; ", "")
            ),
            InputsError::NoneFound(p) if p.is_empty() => f.write_str("no input files found"),
            InputsError::NoneFound(p) => {
                write!(f, "no input files found: {}", listed(p, "; ", ""))
            }
        }
    }
}

impl std::error::Error for InputsError {}
