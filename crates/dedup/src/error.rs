//! Errors of stage 2.

use std::fmt;

/// Why stage 2 failed.
#[derive(Debug)]
pub enum DedupError {
    /// Invalid settings.
    Config(String),
    /// Bad input with `on_error = fail`, or an input that could not be read.
    Input(String),
    /// Stage 2 saw different inputs than stage 1 (files changed in between, or a mismatched table).
    Mismatch(String),
    /// Writing the filtered dataset or the decisions failed.
    Output(String),
    /// The exact-verification spill file could not be written or read.
    Spill(String),
    /// The run's [`neardup_corpus::CancelToken`] was cancelled; nothing was published.
    Interrupted,
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (another hot-key file, group or shard).
    Step(String),
}

impl fmt::Display for DedupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupError::Config(m) => write!(f, "invalid settings: {m}"),
            DedupError::Input(m) => write!(f, "input error: {m}"),
            DedupError::Mismatch(m) => write!(f, "inputs changed since stage 1: {m}"),
            DedupError::Output(m) => write!(f, "output error: {m}"),
            DedupError::Spill(m) => write!(f, "spill error: {m}"),
            DedupError::Interrupted => f.write_str("interrupted"),
            DedupError::Step(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DedupError {}
