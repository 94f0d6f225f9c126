//! The staged steps, for schedulers (the Ray runner, Slurm arrays, …), in the shape of
//! [`neardup::Step`]: `keys` (per shard), `hot_keys` (once), `sign` (per shard) and `decide`
//! (per group) each make their value (`KeyTable`, `HotKeys`, `Signed`, `Decided`: taken with
//! [`step_value`]) or, given an output path, write it where the CLI's command of the same name
//! does and give its report ([`start_step`]); `write` (per shard) ends the run. Inputs are files
//! or values mixed freely. Each runs on a thread of its own (a [`Run`]), so that Python can wait
//! with the GIL released and cancel it on Ctrl-C.

use std::path::{Path, PathBuf};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use neardup::keys::{HotKeys, HotSummary, KeysError};
use neardup::{
    Config, DecideStep, DecidedInput, Error, KeysStep, RunControl, RunPaths, SignStep, SignedInput,
    Step, StepInput, StepValue, TableInput, WriteStep,
};

use crate::errors::to_py;
use crate::run::{Output, Run, report_json};
use crate::settings::{Scope, config_from, inputs_from};
use crate::tables::{HotKeys as PyHotKeys, KeyTable};
use crate::values::{Decided, Signed, StepArg, step_args};

/// Loads a hot-key file given as an argument: a wrong one is a mistake in the arguments, not a
/// failure of stage 1 (as the CLI's steps load it).
fn load_hot(path: &Path) -> Result<HotKeys, Error> {
    <HotKeys as StepValue>::load(path)
}

/// A hot-key file that cannot be used: a usage error when it is the wrong file for the run.
fn hot_error(e: KeysError) -> Error {
    match e {
        e @ KeysError::Config(_) => Error::WrongKeyFiles(e),
        other => Error::KeyFile(other),
    }
}

/// Runs `step` on the run's thread: into its value (`value` makes the run's [`Output`] of it)
/// without `output`, or written at `output`, its report's JSON the run's output.
fn run_step<S: Step>(
    step: S,
    output: Option<&Path>,
    control: &RunControl,
    value: impl FnOnce(S::Value, S::Stats) -> Output,
) -> Result<Output, Error> {
    match output {
        Some(out) => {
            let report = step.write(out, None, control)?;
            Ok(Output::Json(
                serde_json::to_string(&report).expect("reports serialise"),
            ))
        }
        None => step.run(control).map(|(made, stats)| value(made, stats)),
    }
}

/// A step's statistics as JSON.
fn stats_json(stats: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(stats).expect("statistics serialise")
}

/// Starts a step (`work`: [`run_step`] of the step it builds) on its own thread, watched, its
/// `tokenizer=` callable (in `config`) stopping it when it raises.
fn start_step(
    name: &str,
    config: &Config,
    error: fn(Error) -> PyErr,
    work: impl FnOnce(&RunControl) -> Result<Output, Error> + Send + 'static,
) -> PyResult<Run> {
    let control = RunControl::watched();
    let watched = control.clone();
    Run::spawn_output(name, &watched, error, move || work(&control)).map(|run| run.watching(config))
}

/// The value a step run without output made (waits for it): a `KeyTable`, `HotKeys`, `Signed`
/// or `Decided`; its error otherwise.
#[pyfunction]
pub fn step_value(py: Python<'_>, run: &Bound<'_, Run>) -> PyResult<Py<PyAny>> {
    Ok(match run.get().take(py)? {
        Output::Keys(inner, stats) => Py::new(py, KeyTable::computed(*inner, stats))?.into_any(),
        Output::Hot(inner, stats) => Py::new(py, PyHotKeys::computed(*inner, stats))?.into_any(),
        Output::Signed(inner, stats) => Py::new(
            py,
            Signed {
                inner: *inner,
                stats: Some(stats),
            },
        )?
        .into_any(),
        Output::Decided(inner) => Py::new(py, Decided { inner: *inner })?.into_any(),
        _ => return Err(PyRuntimeError::new_err("this run made no step value")),
    })
}

/// Starts `neardup.keys`: stage 1 of one shard, into a `KeyTable` or streamed into the
/// key-table file `output`.
#[pyfunction]
#[pyo3(signature = (inputs, shard, output = None, settings = None))]
pub fn start_keys(
    inputs: &Bound<'_, PyAny>,
    shard: u32,
    output: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let mut config = config_from(settings, Scope::NoOutputs)?;
    config.input.inputs = inputs_from(inputs)?;
    // Inputs that do not exist are FileNotFoundError at the call; the step keeps the listing.
    let step = KeysStep::new(&config, shard).map_err(to_py)?;
    start_step("neardup-keys", &config, to_py, move |control| {
        run_step(step, output.as_deref(), control, |table, stats| {
            Output::Keys(Box::new(table), stats_json(stats))
        })
    })
}

/// Starts `neardup.hot_keys`: every shard's key tables (`KeyTable` values or key-table files,
/// not a mix) counted into a `HotKeys`, or into the hot-key file `output`; planned in `groups`
/// groups when more than one.
#[pyfunction]
#[pyo3(signature = (tables, min_key_count = 1, groups = 1, memory_limit = None, spill_dir = None, threads = 0, against = Vec::new(), output = None))]
#[allow(clippy::too_many_arguments)]
pub fn start_hot(
    tables: &Bound<'_, PyAny>,
    min_key_count: u32,
    groups: u32,
    memory_limit: Option<u64>,
    spill_dir: Option<PathBuf>,
    threads: usize,
    against: Vec<PathBuf>,
    output: Option<PathBuf>,
) -> PyResult<Run> {
    if groups == 0 {
        return Err(PyValueError::new_err("groups must be at least 1"));
    }
    let items: Vec<Bound<'_, PyAny>> = tables.try_iter()?.collect::<PyResult<_>>()?;
    if items.is_empty() {
        return Err(PyValueError::new_err("no key tables given"));
    }
    let mut config = Config::default();
    config.keys.min_key_count = min_key_count;
    config.keys.memory_limit = memory_limit;
    config.keys.spill_dir = spill_dir;
    config.run.threads = threads;
    config.dedup.against = against;
    config.validate_run().map_err(to_py)?;
    // The merge's errors keep the key tables' own messages.
    fn merge_error(e: Error) -> PyErr {
        match e {
            Error::Keys(k) => crate::errors::keys_to_py(k),
            other => to_py(other),
        }
    }
    let hot_value = |hot: neardup::keys::HotKeys, stats: neardup::keys::CountStats| {
        Output::Hot(Box::new(hot), stats_json(stats))
    };
    if items.iter().all(|t| t.cast::<KeyTable>().is_ok()) {
        // In memory: the frozen tables are read on the run's thread without the GIL (no copy).
        let owned: Vec<Py<KeyTable>> = items
            .iter()
            .map(|t| t.cast::<KeyTable>().expect("checked").clone().unbind())
            .collect();
        return start_step(
            "neardup-hot",
            &config.clone(),
            merge_error,
            move |control| {
                let refs: Vec<&neardup::keys::KeyTable> =
                    owned.iter().map(|t| &t.get().inner).collect();
                let step = neardup::HotStep::new(&config, refs.as_slice(), groups)?;
                run_step(step, output.as_deref(), control, hot_value)
            },
        );
    }
    let paths: Vec<PathBuf> = items
        .iter()
        .map(|t| {
            t.extract::<PathBuf>().map_err(|_| {
                PyTypeError::new_err(
                    "tables must be KeyTable objects or paths of key-table files (not a mix)",
                )
            })
        })
        .collect::<PyResult<_>>()?;
    start_step(
        "neardup-hot",
        &config.clone(),
        merge_error,
        move |control| {
            let step = neardup::HotStep::new(&config, &paths, groups)?;
            run_step(step, output.as_deref(), control, hot_value)
        },
    )
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

/// Starts `neardup.sign`: one shard's hot samples, signed into a `Signed` value, or into a
/// directory of group streams (`output`; `overwrite`: replacing an earlier sign output there).
#[pyfunction]
#[pyo3(signature = (table, hot, output = None, settings = None, overwrite = false))]
pub fn start_sign(
    table: &Bound<'_, PyAny>,
    hot: &Bound<'_, PyAny>,
    output: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
    overwrite: bool,
) -> PyResult<Run> {
    let mut config = step_config(settings)?;
    config.output.overwrite = overwrite;
    let table = TableArg::from_py(table)?;
    let hot = HotArg::from_py(hot)?;
    // What can be checked before the hot keys are read; the step checks the rest (the input
    // files the table names, the directory's files) once it knows them.
    let mut paths = RunPaths::new();
    hot.read_paths(&mut paths);
    table.read_paths(&mut paths);
    if let Some(dir) = &output {
        paths.write_step_dir("the sign output (-o)", dir);
    }
    paths.check().map_err(crate::errors::to_py)?;
    start_step("neardup-sign", &config.clone(), to_py, move |control| {
        let hot = hot.get()?;
        let step = SignStep::new(&config, table.input(), &hot)?;
        run_step(step, output.as_deref(), control, |signed, stats| {
            Output::Signed(Box::new(signed), stats_json(stats))
        })
    })
}

/// Starts `neardup.decide`: one group's hot samples of every shard (`Signed` values or sign
/// directories), decided into a `Decided` value, or into a directory (`output`; `overwrite`:
/// replacing an earlier decide output there).
#[pyfunction]
#[pyo3(signature = (signed, hot, group, output = None, settings = None, overwrite = false))]
pub fn start_decide(
    signed: &Bound<'_, PyAny>,
    hot: &Bound<'_, PyAny>,
    group: u32,
    output: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
    overwrite: bool,
) -> PyResult<Run> {
    let mut config = step_config(settings)?;
    config.output.overwrite = overwrite;
    let signed: Vec<StepArg<Signed>> = step_args(
        signed,
        "signed must hold Signed values or the paths of sign output directories",
    )?;
    let hot = HotArg::from_py(hot)?;
    let mut paths = RunPaths::new();
    hot.read_paths(&mut paths);
    if let Some(dir) = &output {
        paths.write_step_dir("the decide output (-o)", dir);
    }
    paths.check().map_err(crate::errors::to_py)?;
    // Deciding signs the group's hot samples: a tokenizer= callable runs here.
    start_step("neardup-decide", &config.clone(), to_py, move |control| {
        let hot = hot.summary()?;
        let inputs = signed_inputs(&signed);
        let step = DecideStep::new(&config, &inputs, &hot, group)?;
        run_step(step, output.as_deref(), control, |decided, ()| {
            Output::Decided(Box::new(decided))
        })
    })
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
    // What can be checked before the hot keys are read; the step checks the rest (the input
    // files the table names, what the outputs would replace) once it knows them.
    let mut paths = RunPaths::new();
    paths.inputs_pending();
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
