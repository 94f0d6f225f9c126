//! Errors of stage 2: what failed, with the value or the error it failed on; the messages are
//! built from them.

use std::fmt;
use std::io;

use neardup_corpus::WriteError;

/// Why stage 2 failed.
#[derive(Debug)]
pub enum DedupError {
    /// Invalid settings.
    Config(SettingsError),
    /// Bad input with `on_error = fail`, or an input that could not be read.
    Input(String),
    /// Stage 2 saw different inputs than stage 1 (files changed in between, or a mismatched table).
    Mismatch(String),
    /// Writing the filtered dataset or the decisions failed (the error names the file).
    Output(WriteError),
    /// Writing the streams of a distributed step failed.
    StepOutput {
        /// What was being written, e.g. "the signed samples".
        what: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The thread writing the filtered dataset stopped; the error it stopped with is the run's.
    WriterStopped,
    /// The exact-verification spill file could not be written or read.
    Spill(io::Error),
    /// The run's [`neardup_exec::CancelToken`] was cancelled; nothing was published.
    Interrupted,
    /// The outputs of an earlier distributed step given to this one are damaged, missing, or
    /// belong to another run (another hot-key file, group or shard).
    Step(String),
}

/// Settings stage 2 cannot run with.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingsError {
    /// The similarity threshold is outside [0, 1] or not a number.
    Threshold(f64),
    /// A bound of 0 representatives per bucket (no bound is `None`).
    NoRepresentatives,
    /// The hot keys were made with other sketch settings or another row rule than the deduper's.
    OtherSketch,
    /// Any other setting, as a message naming it and the fix.
    Message(String),
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::Threshold(t) => write!(f, "threshold must be in [0, 1], got {t}"),
            SettingsError::NoRepresentatives => {
                f.write_str("max_reps must be at least 1 (or unset for no bound)")
            }
            SettingsError::OtherSketch => {
                f.write_str("the hot keys were made with different sketch settings")
            }
            SettingsError::Message(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for SettingsError {}

impl From<String> for SettingsError {
    fn from(message: String) -> Self {
        SettingsError::Message(message)
    }
}

impl From<&str> for SettingsError {
    fn from(message: &str) -> Self {
        SettingsError::Message(message.to_string())
    }
}

impl From<SettingsError> for DedupError {
    fn from(e: SettingsError) -> Self {
        DedupError::Config(e)
    }
}

impl fmt::Display for DedupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupError::Config(e) => write!(f, "invalid settings: {e}"),
            DedupError::Input(m) => write!(f, "input error: {m}"),
            DedupError::Mismatch(m) => write!(f, "inputs changed since stage 1: {m}"),
            DedupError::Output(e) => write!(f, "output error: {e}"),
            DedupError::StepOutput { what, source } => {
                write!(f, "output error: writing {what}: {source}")
            }
            DedupError::WriterStopped => f.write_str("output error: the output writer stopped"),
            DedupError::Spill(e) => write!(f, "spill error: {e}"),
            DedupError::Interrupted => f.write_str("interrupted"),
            DedupError::Step(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DedupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DedupError::Config(e) => Some(e),
            DedupError::Output(e) => Some(e),
            DedupError::StepOutput { source, .. } | DedupError::Spill(source) => Some(source),
            _ => None,
        }
    }
}
