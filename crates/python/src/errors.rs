//! neardup's errors as Python exceptions, with the CLI's messages.
//!
//! | Rust error | Python exception |
//! | --- | --- |
//! | invalid settings (`Error::Config`, `Error::Usage`, `Config` of either stage, tables made with other settings, `Error::WrongKeyFiles`), outputs of an earlier step that do not fit (`Error::StepInput`, `Error::StepOutputs`), paths that conflict (`Error::Paths`) | `ValueError` |
//! | bad input with `on_error="fail"`, inputs changed between the stages | `neardup.InputError` (a `ValueError`) |
//! | inputs that cannot be used or no input found (`Error::Inputs`) | `FileNotFoundError` |
//! | an I/O error on a named file (`Error::Io`, `KeysError::Io`, spill and step streams) | the `OSError` subclass of its kind (`FileNotFoundError`, `PermissionError`, …), `errno` set |
//! | a damaged key-table or hot-key file, or damaged bytes of a step value | `neardup.CorruptFileError` (an `OSError`) |
//! | publishing outputs, decisions or the report failed, a run's thread lost | `OSError` |
//! | a saved index made with other settings, not an index, or indexes that overlap (`IndexError::{OtherSettings, NotAnIndex, Overlap, …}`) | `ValueError` |
//! | a damaged index | `neardup.CorruptFileError` |
//! | an indexed run's file changed since the index was made | `neardup.InputError` |
//! | an indexed run's file gone, an index that cannot be read or written | the `OSError` subclass of its kind |
//! | the run was cancelled (Ctrl-C) | `KeyboardInterrupt` |
//! | a `tokenizer=` callable raised (the run stopped: see `tokenizer.rs`) | `neardup.TokenizerError` (a `RuntimeError`; `__cause__` the callable's exception) |
//!
//! The type is chosen from the error's variant and its source (an `io::Error`'s kind), never
//! from its message. The messages are the CLI's with its flags spelled as keyword arguments
//! (`pass overwrite=True`, `on_error="fail"`, `fields=`): as the caller spelled the setting.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyConnectionError, PyFileExistsError, PyFileNotFoundError, PyIsADirectoryError,
    PyKeyboardInterrupt, PyNotADirectoryError, PyOSError, PyPermissionError, PyValueError,
};
use pyo3::prelude::*;

use neardup::Error;
use neardup::dedup::DedupError;
use neardup::index::IndexError;
use neardup::keys::KeysError;
use neardup_online::IndexError as OnlineError;

create_exception!(
    neardup,
    InputError,
    PyValueError,
    "An input record or file could not be read with on_error=\"fail\", or the inputs changed \
     between the two stages. The message names the file and the record."
);
create_exception!(
    neardup,
    TokenizerError,
    pyo3::exceptions::PyRuntimeError,
    "A tokenizer= callable raised: the message names the tokenizer and the text (and where the \
     text was, when known), and __cause__ is the callable's own exception. The run stopped and \
     published nothing."
);
create_exception!(
    neardup,
    CorruptFileError,
    PyOSError,
    "A key-table or hot-key file, or a step value's bytes, is damaged, truncated or not \
     neardup's."
);

/// The exception for an I/O error of kind `kind`, carrying `message` (and `errno` when known).
pub fn os_error(py: Python<'_>, source: &std::io::Error, message: String) -> PyErr {
    use std::io::ErrorKind;
    let err = match source.kind() {
        ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
        ErrorKind::AlreadyExists => PyFileExistsError::new_err(message),
        ErrorKind::IsADirectory => PyIsADirectoryError::new_err(message),
        ErrorKind::NotADirectory => PyNotADirectoryError::new_err(message),
        _ => PyOSError::new_err(message),
    };
    if let Some(code) = source.raw_os_error() {
        // Only `errno`: with `filename` set too, str(exc) would become "[Errno N] …" instead of
        // the CLI's message.
        let _ = err.value(py).setattr("errno", code);
    }
    err
}

/// `message` with the settings a Python caller set by keyword named so: the library's messages
/// that tell the user what to pass name the CLI's flag (`pass --overwrite`, `--on-error fail`,
/// `chosen with --field`), and the caller wrote `overwrite=True`, `on_error="fail"`, `fields=`.
pub(crate) fn python_spelling(message: &str) -> String {
    const AS_KEYWORDS: [(&str, &str); 7] = [
        ("pass --overwrite", "pass overwrite=True"),
        ("--overwrite will not", "overwrite=True will not"),
        ("--overwrite replaces only", "overwrite=True replaces only"),
        ("--on-error fail", "on_error=\"fail\""),
        ("--on-error skip", "on_error=\"skip\""),
        ("chosen with --field)", "chosen with fields=)"),
        ("--field or --id-field", "fields= or id_field="),
    ];
    AS_KEYWORDS
        .iter()
        .fold(message.to_string(), |m, (flag, keyword)| {
            m.replace(flag, keyword)
        })
}

/// Converts a neardup error into the Python exception of its kind (see the module docs), its
/// message naming settings as keyword arguments.
pub fn to_py(e: Error) -> PyErr {
    let message = python_spelling(&e.to_string());
    match e {
        Error::Usage(_)
        | Error::Config(_)
        | Error::Paths(_)
        | Error::StepInput(_)
        | Error::StepOutputs(_)
        | Error::WrongKeyFiles(_)
        | Error::IndexUse(_)
        | Error::Eval(_) => PyValueError::new_err(message),
        Error::Inputs(_) => PyFileNotFoundError::new_err(message),
        Error::Io { error, .. } => Python::attach(|py| os_error(py, &error, message)),
        Error::Publish(w) => written(w, message),
        Error::Threads { .. } | Error::ThreadLost { .. } => PyOSError::new_err(message),
        Error::Corrupt(_) => CorruptFileError::new_err(message),
        Error::Interrupted => PyKeyboardInterrupt::new_err(message),
        Error::Keys(k) | Error::KeyFile(k) => keys_error(k, message),
        Error::Index(i) => match i {
            IndexError::Io { error, .. } | IndexError::Missing { error, .. } => {
                Python::attach(|py| os_error(py, &error, message))
            }
            IndexError::Damaged { .. } | IndexError::Version { .. } => {
                CorruptFileError::new_err(message)
            }
            IndexError::Changed { .. } | IndexError::Unreadable { .. } => {
                InputError::new_err(message)
            }
            IndexError::NotAnIndex { .. }
            | IndexError::OtherSettings { .. }
            | IndexError::Overlap { .. }
            | IndexError::NoIndex
            | IndexError::MinCount(_)
            | IndexError::TooManyFiles
            | IndexError::Decisions { .. } => PyValueError::new_err(message),
        },
        Error::Online(o) => Python::attach(|py| index_error(py, o)),
        Error::Dedup(d) => match d {
            DedupError::Config(_) | DedupError::Step(_) => PyValueError::new_err(message),
            DedupError::Input(_) | DedupError::Mismatch(_) | DedupError::BadRank(_) => {
                InputError::new_err(message)
            }
            DedupError::StepOutput { error, .. } | DedupError::Spill(error) => {
                Python::attach(|py| os_error(py, &error, message))
            }
            DedupError::Output(w) => written(w, message),
            DedupError::WriterStopped => PyOSError::new_err(message),
            DedupError::Interrupted => PyKeyboardInterrupt::new_err(message),
        },
    }
}

/// The exception of an output that could not be written: of the system's error when there is
/// one (`PermissionError`, `IsADirectoryError`, … with its `errno`), else `OSError`.
fn written(e: neardup::corpus::WriteError, message: String) -> PyErr {
    match e.io_error() {
        Some(source) => Python::attach(|py| os_error(py, source, message)),
        None => PyOSError::new_err(message),
    }
}

/// Converts an error of a key-table or hot-key value like [`to_py`], with the error's own
/// message (it names the file; there is no stage to name).
pub fn keys_to_py(e: KeysError) -> PyErr {
    let message = python_spelling(&e.to_string());
    keys_error(e, message)
}

/// The exception of a stage-1 or key-file error, carrying `message`.
fn keys_error(e: KeysError, message: String) -> PyErr {
    match e {
        KeysError::Io { error, .. } => Python::attach(|py| os_error(py, &error, message)),
        KeysError::Corrupt { .. } => CorruptFileError::new_err(message),
        KeysError::Incompatible(_) | KeysError::Config(_) => PyValueError::new_err(message),
        KeysError::Input(_) => InputError::new_err(message),
        KeysError::Interrupted => PyKeyboardInterrupt::new_err(message),
    }
}

/// The index's errors as Python exceptions: settings (invalid, or not a shared namespace's)
/// are a `ValueError`, a Redis server that cannot be reached or is lost a `ConnectionError`,
/// a spill file's failure the `OSError` of its kind, a namespace that cannot be read or other
/// producers in the way an `OSError`.
pub(crate) fn index_error(py: Python<'_>, e: OnlineError) -> PyErr {
    let message = e.to_string();
    match e {
        OnlineError::Settings(_)
        | OnlineError::SettingsDiffer { .. }
        | OnlineError::FileSettingsDiffer { .. }
        | OnlineError::NoPath => PyValueError::new_err(message),
        OnlineError::Save { error, .. } => os_error(py, &error, message),
        // A saved index that cannot be opened: the exception the same failure of a run's
        // `--against` gets, with this message.
        OnlineError::File { error, .. } => match error {
            IndexError::Io { error, .. } | IndexError::Missing { error, .. } => {
                os_error(py, &error, message)
            }
            IndexError::Damaged { .. } | IndexError::Version { .. } => {
                CorruptFileError::new_err(message)
            }
            IndexError::Changed { .. } | IndexError::Unreadable { .. } => {
                InputError::new_err(message)
            }
            _ => PyValueError::new_err(message),
        },
        OnlineError::Spill(io) => os_error(py, &io, message),
        OnlineError::Unreachable { .. } | OnlineError::Lost { .. } | OnlineError::Redis { .. } => {
            PyConnectionError::new_err(message)
        }
        _ => PyOSError::new_err(message),
    }
}
