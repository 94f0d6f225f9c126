//! The staged steps over files, for schedulers (the Ray runner, Slurm arrays, …): `keys` (one
//! shard's key-table file), `sign` (per shard), `decide` (per group) and `write` (per shard), as
//! the CLI's commands of the same names run them. Each runs on a thread of its own (a [`Run`]),
//! so that Python can wait with the GIL released and cancel it on Ctrl-C.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use neardup::keys::{HotKeys, KeysError, Progress};
use neardup::{CancelToken, Config, Error, RunControl, RunPaths};

use crate::errors::discovery_to_py;
use crate::run::{Run, report_json};
use crate::settings::{Scope, config_from, inputs_from};

/// Loads a hot-key file given as an argument: a wrong one is a mistake in the arguments, not a
/// failure of stage 1 (as the CLI's steps load it).
fn load_hot(path: &Path) -> Result<HotKeys, Error> {
    HotKeys::load(path).map_err(|e| match e {
        KeysError::Config(m) => Error::Usage(m),
        other => Error::Run(other.to_string()),
    })
}

fn progress() -> [Arc<Progress>; 2] {
    [Arc::new(Progress::default()), Arc::new(Progress::default())]
}

/// Starts `neardup.keys`: stage 1 of one shard, streamed into a key-table file.
#[pyfunction]
#[pyo3(signature = (inputs, shard, output, settings = None))]
pub fn start_keys(
    inputs: &Bound<'_, PyAny>,
    shard: u32,
    output: PathBuf,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let mut config = config_from(settings, Scope::NoOutputs)?;
    config.input.inputs = inputs_from(inputs)?;
    // Inputs that do not exist are FileNotFoundError at the call (the step lists them again).
    neardup::discover_inputs_and_sources(&config).map_err(discovery_to_py)?;
    let stages = progress();
    let control = RunControl {
        stage1: Some(stages[0].clone()),
        cancel: CancelToken::new(),
        ..RunControl::default()
    };
    let cancel = control.cancel.clone();
    Run::spawn("neardup-keys", stages, cancel, move || {
        let made = neardup::keys_shard(&config, shard, &output, None, &control)?;
        Ok(serde_json::to_string(&made).expect("a report serialises"))
    })
}

/// The settings of a step that writes no dataset (`sign`, `decide`).
fn step_config(settings: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let config = config_from(settings, Scope::NoOutputs)?;
    config.validate().map_err(crate::errors::to_py)?;
    Ok(config)
}

/// Starts `neardup.sign`: one shard's hot samples, signed into a directory of group streams.
#[pyfunction]
#[pyo3(signature = (table, hot, output, settings = None))]
pub fn start_sign(
    table: PathBuf,
    hot: PathBuf,
    output: PathBuf,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = step_config(settings)?;
    RunPaths::new()
        .read_file("the hot-key file", &hot)
        .read_file("the key table", &table)
        .check()
        .map_err(crate::errors::to_py)?;
    let stages = progress();
    let cancel = CancelToken::new();
    let control = RunControl {
        stage2: Some(stages[1].clone()),
        cancel: cancel.clone(),
        ..RunControl::default()
    };
    Run::spawn("neardup-sign", stages, cancel, move || {
        let hot = load_hot(&hot)?;
        let signed = neardup::sign_shard(&config, &table, &hot, &output, &control)?;
        Ok(serde_json::to_string(&signed).expect("reports serialise"))
    })
}

/// Starts `neardup.decide`: one group's hot samples of every shard, decided.
#[pyfunction]
#[pyo3(signature = (signed, hot, group, output, settings = None))]
pub fn start_decide(
    signed: Vec<PathBuf>,
    hot: PathBuf,
    group: u32,
    output: PathBuf,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = step_config(settings)?;
    RunPaths::new()
        .read_file("the hot-key file", &hot)
        .check()
        .map_err(crate::errors::to_py)?;
    let stages = progress();
    let cancel = CancelToken::new();
    let control = RunControl {
        cancel: cancel.clone(),
        ..RunControl::default()
    };
    Run::spawn("neardup-decide", stages, cancel, move || {
        let hot = load_hot(&hot)?;
        let decided = neardup::decide_group_dirs(&config, &signed, &hot, group, &output, &control)?;
        Ok(serde_json::to_string(&decided).expect("reports serialise"))
    })
}

/// Starts `neardup.write`: one shard's filtered dataset and decisions.
#[pyfunction]
#[pyo3(signature = (table, hot, decided, output = None, decisions = None, report = None, settings = None))]
pub fn start_write(
    table: PathBuf,
    hot: PathBuf,
    decided: Vec<PathBuf>,
    output: Option<PathBuf>,
    decisions: Option<PathBuf>,
    report: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let mut config = config_from(settings, Scope::Run)?;
    config.output.dir = output;
    config.output.decisions = decisions;
    config.output.report = report;
    if config.output.dir.is_none() && config.output.decisions.is_none() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "give output= and/or decisions=",
        ));
    }
    config.validate().map_err(crate::errors::to_py)?;
    let mut paths = RunPaths::new();
    paths
        .read_file("the hot-key file", &hot)
        .read_file("the key table", &table);
    paths.write_config_outputs(&config, &[]);
    paths.check().map_err(crate::errors::to_py)?;
    let stages = progress();
    let cancel = CancelToken::new();
    let control = RunControl {
        stage2: Some(stages[1].clone()),
        cancel: cancel.clone(),
        ..RunControl::default()
    };
    Run::spawn("neardup-write", stages, cancel, move || {
        let hot = load_hot(&hot)?;
        let report = neardup::write_shard(&config, &table, &hot, &decided, &control)?;
        Ok(report_json(&report))
    })
}
