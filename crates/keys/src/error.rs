//! Errors of stage 1.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why stage 1 (or reading / merging its files) failed.
#[derive(Debug)]
pub enum KeysError {
    /// An I/O error on a named file.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A key-table or hot-key file is damaged or not ours.
    Corrupt(String),
    /// Tables or hot keys made with different settings were combined.
    Incompatible(String),
    /// The settings are invalid.
    Config(String),
    /// Bad input with `on_error = fail`: the first problem, naming the file and record.
    Input(String),
    /// The run's [`neardup_exec::CancelToken`] was cancelled.
    Interrupted,
}

impl KeysError {
    pub(crate) fn io(path: &Path, source: io::Error) -> KeysError {
        KeysError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for KeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeysError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            KeysError::Corrupt(m)
            | KeysError::Incompatible(m)
            | KeysError::Config(m)
            | KeysError::Input(m) => f.write_str(m),
            KeysError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for KeysError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeysError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
