//! The staged steps, for schedulers (the Ray runner, Slurm arrays, …): `keys` (one shard's
//! key-table file), `sign` (per shard), `decide` (per group) and `write` (per shard), as the
//! CLI's commands of the same names run them, over files or values (`Signed`, `Decided`, and
//! `KeyTable` / `HotKeys`) mixed freely. Each runs on a thread of its own (a [`Run`]),
//! so that Python can wait with the GIL released and cancel it on Ctrl-C.

use std::path::{Path, PathBuf};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use neardup::keys::{HotKeys, HotSummary, KeysError};
use neardup::{
    Config, DecideStep, DecidedInput, Error, KeysStep, RunControl, RunPaths, SignStep, SignedInput,
    Step, StepInput, TableInput, WriteStep,
};

use crate::errors::to_py;
use crate::run::{Output, Run, report_json};
use crate::settings::{Scope, config_from, inputs_from};
use crate::tables::KeyTable;
use crate::values::{Decided, Signed, StepArg, step_args};

/// Loads a hot-key file given as an argument: a wrong one is a mistake in the arguments, not a
/// failure of stage 1 (as the CLI's steps load it).
fn load_hot(path: &Path) -> Result<HotKeys, Error> {
    HotKeys::load(path).map_err(hot_error)
}

/// A hot-key file that cannot be used: a usage error when it is the wrong file for the run.
fn hot_error(e: KeysError) -> Error {
    match e {
        e @ KeysError::Config(_) => Error::WrongKeyFiles(e),
        other => Error::KeyFile(other),
    }
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
    // Inputs that do not exist are FileNotFoundError at the call; the step keeps the listing.
    let step = KeysStep::new(&config, shard).map_err(to_py)?;
    let control = RunControl::watched();
    let watched = control.clone();
    Run::spawn("neardup-keys", &control, move || {
        let made = step.write(&output, None, &watched)?;
        Ok(serde_json::to_string(&made).expect("a report serialises"))
    })
    .map(|run| run.watching(&config))
}

/// The settings of a step that writes no dataset (`sign`, `decide`).
fn step_config(settings: Option<&Bound<'_, PyDict>>) -> PyResult<Config> {
    let config = config_from(settings, Scope::NoOutputs)?;
    config.validate().map_err(crate::errors::to_py)?;
    Ok(config)
}

/// A key table given to `sign` or `write`: a `KeyTable` value or a key-table file.
enum TableArg {
    Value(Py<KeyTable>),
    File(PathBuf),
}

impl TableArg {
    fn from_py(table: &Bound<'_, PyAny>) -> PyResult<TableArg> {
        if let Ok(t) = table.cast::<KeyTable>() {
            return Ok(TableArg::Value(t.clone().unbind()));
        }
        table.extract::<PathBuf>().map(TableArg::File).map_err(|_| {
            PyTypeError::new_err("table must be a KeyTable or the path of a key-table file")
        })
    }

    fn input(&self) -> TableInput<'_> {
        match self {
            TableArg::Value(t) => TableInput::Value(&t.get().inner),
            TableArg::File(p) => TableInput::File(p),
        }
    }

    fn read_paths(&self, paths: &mut RunPaths) {
        if let TableArg::File(p) = self {
            paths.read_file("the key table", p);
        }
    }
}

/// The hot keys given to a step: a `HotKeys` value or a hot-key file (loaded on the run's
/// thread).
enum HotArg {
    Value(Py<crate::tables::HotKeys>),
    File(PathBuf),
}

/// Hot keys ready for a step: borrowed from a value, or loaded from a file.
enum HotRef<'a> {
    Borrowed(&'a HotKeys),
    Loaded(Box<HotKeys>),
}

impl std::ops::Deref for HotRef<'_> {
    type Target = HotKeys;
    fn deref(&self) -> &HotKeys {
        match self {
            HotRef::Borrowed(h) => h,
            HotRef::Loaded(h) => h,
        }
    }
}

impl HotArg {
    fn from_py(hot: &Bound<'_, PyAny>) -> PyResult<HotArg> {
        if let Ok(h) = hot.cast::<crate::tables::HotKeys>() {
            return Ok(HotArg::Value(h.clone().unbind()));
        }
        hot.extract::<PathBuf>().map(HotArg::File).map_err(|_| {
            PyTypeError::new_err("hot must be a HotKeys or the path of a hot-key file")
        })
    }

    fn read_paths(&self, paths: &mut RunPaths) {
        if let HotArg::File(p) = self {
            paths.read_file("the hot-key file", p);
        }
    }

    fn get(&self) -> Result<HotRef<'_>, Error> {
        match self {
            HotArg::Value(h) => Ok(HotRef::Borrowed(&h.get().inner)),
            HotArg::File(p) => load_hot(p).map(|h| HotRef::Loaded(Box::new(h))),
        }
    }

    /// What `decide` needs: the summary, read from a file without holding its keys.
    fn summary(&self) -> Result<HotSummary, Error> {
        match self {
            HotArg::Value(h) => h.get().inner.summary().map_err(hot_error),
            HotArg::File(p) => HotSummary::load(p).map_err(hot_error),
        }
    }
}

fn signed_inputs(args: &[StepArg<Signed>]) -> Vec<SignedInput<'_>> {
    args.iter()
        .map(|a| match a {
            StepArg::Value(v) => StepInput::Value(&v.get().inner),
            StepArg::Dir(d) => StepInput::Dir(d),
        })
        .collect()
}

fn decided_inputs(args: &[StepArg<Decided>]) -> Vec<DecidedInput<'_>> {
    args.iter()
        .map(|a| match a {
            StepArg::Value(v) => StepInput::Value(&v.get().inner),
            StepArg::Dir(d) => StepInput::Dir(d),
        })
        .collect()
}

/// Starts `neardup.sign`: one shard's hot samples, signed into a directory of group streams
/// (`output`), or into a `Signed` value (no `output`; take it with [`signed_result`]).
#[pyfunction]
#[pyo3(signature = (table, hot, output = None, settings = None))]
pub fn start_sign(
    table: &Bound<'_, PyAny>,
    hot: &Bound<'_, PyAny>,
    output: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = step_config(settings)?;
    let table = TableArg::from_py(table)?;
    let hot = HotArg::from_py(hot)?;
    let mut paths = RunPaths::new();
    hot.read_paths(&mut paths);
    table.read_paths(&mut paths);
    paths.check().map_err(crate::errors::to_py)?;
    let control = RunControl::watched();
    let watched = control.clone();
    let tokenizer = config.clone();
    let Some(output) = output else {
        return Run::spawn_output("neardup-sign", &watched, crate::errors::to_py, move || {
            let hot = hot.get()?;
            let (signed, stats) = SignStep::new(&config, table.input(), &hot)?.run(&control)?;
            let stats = serde_json::to_value(stats).expect("statistics serialise");
            Ok(Output::Signed(Box::new(signed), stats))
        })
        .map(|run| run.watching(&tokenizer));
    };
    Run::spawn("neardup-sign", &watched, move || {
        let hot = hot.get()?;
        let signed = SignStep::new(&config, table.input(), &hot)?.write(&output, None, &control)?;
        Ok(serde_json::to_string(&signed).expect("reports serialise"))
    })
    .map(|run| run.watching(&tokenizer))
}

/// The `Signed` value a [`start_sign`] run without output made.
#[pyfunction]
pub fn signed_result(py: Python<'_>, run: &Bound<'_, Run>) -> PyResult<Signed> {
    match run.get().take(py)? {
        Output::Signed(inner, stats) => Ok(Signed {
            inner: *inner,
            stats: Some(stats),
        }),
        _ => Err(PyRuntimeError::new_err("this run made no signed value")),
    }
}

/// Starts `neardup.decide`: one group's hot samples of every shard (`Signed` values or sign
/// directories), decided into a directory (`output`) or a `Decided` value (no `output`; take it
/// with [`decided_result`]).
#[pyfunction]
#[pyo3(signature = (signed, hot, group, output = None, settings = None))]
pub fn start_decide(
    signed: &Bound<'_, PyAny>,
    hot: &Bound<'_, PyAny>,
    group: u32,
    output: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = step_config(settings)?;
    let signed: Vec<StepArg<Signed>> = step_args(
        signed,
        "signed must hold Signed values or the paths of sign output directories",
    )?;
    let hot = HotArg::from_py(hot)?;
    let mut paths = RunPaths::new();
    hot.read_paths(&mut paths);
    paths.check().map_err(crate::errors::to_py)?;
    let control = RunControl::watched();
    let watched = control.clone();
    // Deciding signs the group's hot samples: a tokenizer= callable runs here.
    let tokenizer = config.clone();
    let Some(output) = output else {
        return Run::spawn_output(
            "neardup-decide",
            &watched,
            crate::errors::to_py,
            move || {
                let hot = hot.summary()?;
                let inputs = signed_inputs(&signed);
                let (decided, ()) =
                    DecideStep::new(&config, &inputs, &hot, group)?.run(&control)?;
                Ok(Output::Decided(Box::new(decided)))
            },
        )
        .map(|run| run.watching(&tokenizer));
    };
    Run::spawn("neardup-decide", &watched, move || {
        let hot = hot.summary()?;
        let inputs = signed_inputs(&signed);
        let decided =
            DecideStep::new(&config, &inputs, &hot, group)?.write(&output, None, &control)?;
        Ok(serde_json::to_string(&decided).expect("reports serialise"))
    })
    .map(|run| run.watching(&tokenizer))
}

/// The `Decided` value a [`start_decide`] run without output made.
#[pyfunction]
pub fn decided_result(py: Python<'_>, run: &Bound<'_, Run>) -> PyResult<Decided> {
    match run.get().take(py)? {
        Output::Decided(inner) => Ok(Decided { inner: *inner }),
        _ => Err(PyRuntimeError::new_err("this run made no decided value")),
    }
}

/// Starts `neardup.write`: one shard's filtered dataset and decisions, the hot samples' verdicts
/// from `Decided` values or decide directories.
#[pyfunction]
#[pyo3(signature = (table, hot, decided, output = None, decisions = None, report = None, settings = None))]
#[allow(clippy::too_many_arguments)]
pub fn start_write(
    table: &Bound<'_, PyAny>,
    hot: &Bound<'_, PyAny>,
    decided: &Bound<'_, PyAny>,
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
    let table = TableArg::from_py(table)?;
    let hot = HotArg::from_py(hot)?;
    let decided: Vec<StepArg<Decided>> = step_args(
        decided,
        "decided must hold Decided values or the paths of decide output directories",
    )?;
    let mut paths = RunPaths::new();
    hot.read_paths(&mut paths);
    table.read_paths(&mut paths);
    paths.write_config_outputs(&config, &[]);
    paths.check().map_err(crate::errors::to_py)?;
    let control = RunControl::watched();
    let watched = control.clone();
    Run::spawn("neardup-write", &watched, move || {
        let hot = hot.get()?;
        let inputs = decided_inputs(&decided);
        let report =
            WriteStep::new(&config, table.input(), &hot, &inputs)?.run(&control, &mut |_| {})?;
        Ok(report_json(&report))
    })
}
