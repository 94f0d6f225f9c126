//! Files or objects by a path that may hold a URL, for the Ray runner (`neardup.ray`), whose
//! work directory, decisions and output may be on a shared disk or on object storage: whether a
//! step's output is there, its small JSON files read and written, and the shards' decisions
//! concatenated into one file published all or nothing. Not part of the public API.

use std::io::{Read, Write};
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use neardup::corpus::AtomicFile;

use crate::errors::os_error;

fn named(path: &std::path::Path, e: std::io::Error) -> PyErr {
    Python::attach(|py| os_error(py, &e, format!("{}: {e}", path.display())))
}

/// Whether the file or object `path` exists.
#[pyfunction]
pub fn file_exists(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
    py.detach(|| neardup::storage::file::exists(&path))
        .map_err(|e| named(&path, e))
}

/// The bytes of the file or object `path`, or None when there is none.
#[pyfunction]
pub fn read_file<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Option<Bound<'py, PyBytes>>> {
    match py.detach(|| neardup::storage::file::read(&path)) {
        Ok(bytes) => Ok(Some(PyBytes::new(py, &bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(named(&path, e)),
    }
}

/// Writes `data` as the file or object `path`, which appears whole or not at all.
#[pyfunction]
pub fn write_file(py: Python<'_>, path: PathBuf, data: Vec<u8>) -> PyResult<()> {
    py.detach(|| {
        let mut file = AtomicFile::create(&path)?;
        file.write_all(&data)?;
        file.commit()
    })
    .map_err(|e| named(&path, e))
}

/// Refuses, before any work, a decisions file at `path` that the run could not write or that
/// would replace a file neardup did not write (as every step's outputs are checked; an object on
/// object storage is not looked at): `ValueError`, naming the path and the fix.
#[pyfunction]
pub fn check_decisions_output(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    py.detach(|| {
        neardup::RunPaths::new()
            .write_file(
                "the decisions file (decisions=)",
                &path,
                neardup::OwnFile::Decisions,
            )
            .check()
    })
    .map_err(crate::errors::to_py)
}

/// Writes the files or objects `parts` one after the other as the file or object `target`,
/// which appears whole or not at all (streamed: no part is held whole).
#[pyfunction]
pub fn concatenate(py: Python<'_>, parts: Vec<PathBuf>, target: PathBuf) -> PyResult<()> {
    if let Some(p) = parts.iter().find(|p| **p == target) {
        return Err(PyValueError::new_err(format!(
            "{}: the target of the concatenation is one of its parts",
            p.display()
        )));
    }
    py.detach(|| -> Result<(), (PathBuf, std::io::Error)> {
        let at = |p: &std::path::Path| {
            let p = p.to_path_buf();
            move |e| (p, e)
        };
        let mut out = AtomicFile::create(&target).map_err(at(&target))?;
        let mut buf = vec![0u8; 1 << 20];
        for part in &parts {
            let mut input = neardup::storage::file::open(part).map_err(at(part))?;
            loop {
                let n = input.read(&mut buf).map_err(at(part))?;
                if n == 0 {
                    break;
                }
                out.write_all(&buf[..n]).map_err(at(&target))?;
            }
        }
        out.commit().map_err(at(&target))
    })
    .map_err(|(path, e)| named(&path, e))
}

/// Publishes the whole output's manifest `_SUCCESS` of a distributed run in `output` (a
/// directory or a prefix) once every shard's manifest is there; returns its JSON, or None while a
/// shard is missing. `hot_fingerprint`: the run's hot-key file's fingerprint.
#[pyfunction]
pub fn publish_output(
    py: Python<'_>,
    output: PathBuf,
    hot_fingerprint: u64,
) -> PyResult<Option<String>> {
    let manifest = py
        .detach(|| neardup::publish_output(&output, hot_fingerprint))
        .map_err(crate::errors::to_py)?;
    manifest
        .map(|m| serde_json::to_string(&m).map_err(|e| PyValueError::new_err(e.to_string())))
        .transpose()
}
