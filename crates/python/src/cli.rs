//! The `neardup` command line run from Python: the `neardup` script pip installs and `python -m
//! neardup` (`crates/python/python/neardup/__main__.py`) call [`run_cli`], so they are the
//! binary's program (`neardup::cli::run`), not a copy of it.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `neardup` command line with `args`, the program's name first, and returns its exit
/// code. The GIL is released while it runs; SIGINT, SIGTERM and SIGHUP stop it as they stop the
/// binary (it removes what it wrote and returns 128 + the signal's number), and Python's own
/// handlers come back when it returns.
#[pyfunction]
pub(crate) fn run_cli(py: Python<'_>, args: Vec<OsString>) -> u8 {
    py.detach(|| neardup::cli::run(args))
}
