//! `neardup._native`: the compiled half of the `neardup` Python package (`pip install
//! ./crates/python`; the Python half is `crates/python/python/neardup/`).
//!
//! This crate owns the bindings only: Python values in (settings as keyword arguments, texts as
//! `str` lists or Arrow arrays, paths), neardup's library calls with the GIL released, and Python
//! values out (numpy arrays, dicts, `Decision` objects, exceptions with the CLI's messages). It
//! owns no algorithm: signing, keys, counting and decisions are the library crates', so Python and
//! the CLI decide alike. Tested from Python (`crates/python/tests/`, run by `tests/run`).

mod errors;
mod texts;
mod tokenizer;
mod settings;
mod files;
mod table_decisions;
mod values;
mod tables;
mod sketcher;
mod deduper;
mod lshcurator;
mod run;
mod frames;
mod index;
mod steps;
mod cli;

use pyo3::prelude::*;

/// A JSON value as the Python object `json.loads` makes of it.
pub(crate) fn json_to_py<'py>(
    py: Python<'py>,
    value: &serde_json::Value,
) -> PyResult<Bound<'py, PyAny>> {
    json_str_to_py(py, &value.to_string())
}

/// `json.loads(text)`.
pub(crate) fn json_str_to_py<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("InputError", py.get_type::<errors::InputError>())?;
    m.add("TokenizerError", py.get_type::<errors::TokenizerError>())?;
    m.add(
        "CorruptFileError",
        py.get_type::<errors::CorruptFileError>(),
    )?;
    m.add_class::<sketcher::Sketcher>()?;
    m.add_class::<deduper::Decision>()?;
    m.add_class::<deduper::Deduper>()?;
    m.add_class::<index::Index>()?;
    m.add_class::<index::IndexDecision>()?;
    m.add_class::<tables::KeyTable>()?;
    m.add_class::<tables::HotKeys>()?;
    m.add_class::<values::Signed>()?;
    m.add_class::<values::Decided>()?;
    m.add_class::<run::Run>()?;
    m.add_class::<run::DecisionStream>()?;
    m.add_class::<lshcurator::CorpusStream>()?;
    m.add_function(wrap_pyfunction!(cli::run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(settings::settings, m)?)?;
    m.add_function(wrap_pyfunction!(settings::defaults, m)?)?;
    m.add_function(wrap_pyfunction!(run::start_dedup, m)?)?;
    m.add_function(wrap_pyfunction!(run::stream, m)?)?;
    m.add_function(wrap_pyfunction!(frames::start_dedup_table, m)?)?;
    m.add_function(wrap_pyfunction!(frames::start_dedup_stream, m)?)?;
    m.add_function(wrap_pyfunction!(frames::table_result, m)?)?;
    m.add_function(wrap_pyfunction!(frames::block_keys, m)?)?;
    m.add_function(wrap_pyfunction!(frames::block_sign, m)?)?;
    m.add_function(wrap_pyfunction!(frames::block_decisions, m)?)?;
    m.add_function(wrap_pyfunction!(steps::start_keys, m)?)?;
    m.add_function(wrap_pyfunction!(steps::start_hot, m)?)?;
    m.add_function(wrap_pyfunction!(steps::start_sign, m)?)?;
    m.add_function(wrap_pyfunction!(steps::start_decide, m)?)?;
    m.add_function(wrap_pyfunction!(steps::step_value, m)?)?;
    m.add_function(wrap_pyfunction!(steps::start_write, m)?)?;
    m.add_function(wrap_pyfunction!(lshcurator::process_corpus, m)?)?;
    m.add_function(wrap_pyfunction!(files::file_exists, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::concatenate, m)?)?;
    m.add_function(wrap_pyfunction!(files::check_decisions_output, m)?)?;
    m.add_function(wrap_pyfunction!(files::publish_output, m)?)?;
    m.add_function(wrap_pyfunction!(lshcurator::compute_bucket_keys, m)?)?;
    Ok(())
}
