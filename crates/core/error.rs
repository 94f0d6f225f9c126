//! The facade's error type.

use std::fmt;

/// Why a run failed. [`Error::exit_code`] maps it to the CLI's exit status.
#[derive(Debug)]
pub enum Error {
    /// Invalid settings or arguments (exit code 2).
    Usage(String),
    /// Stage 1 failed.
    Keys(neardup_keys::KeysError),
    /// Stage 2 failed.
    Dedup(neardup_dedup::DedupError),
    /// Anything else that stopped the run (inputs missing, outputs unwritable).
    Run(String),
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
            Error::Usage(_) => 2,
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
            Error::Usage(m) | Error::Run(m) | Error::Corrupt(m) => f.write_str(m),
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
            Error::Keys(e) => Some(e),
            Error::Dedup(e) => Some(e),
            _ => None,
        }
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
