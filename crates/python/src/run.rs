//! Whole runs: `dedup` (both stages, outputs written, the report returned) and `stream`
//! (decisions as they are made, nothing written).

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use neardup::{Config, Error, NextDecision, Pipeline, Report, RunControl};

use crate::deduper::Decision;
use crate::errors::to_py;
use crate::settings::{Scope, config_from, inputs_from};

/// The report as the JSON `--report` writes.
pub(crate) fn report_json(report: &Report) -> String {
    serde_json::to_string(report).expect("reports serialise")
}

/// The discovered inputs' names as decisions print them (`Path::display`, as the decisions file
/// does), checked up front so that a missing input is a FileNotFoundError before any work.
fn input_names(config: &Config) -> PyResult<Vec<Arc<str>>> {
    let (files, _problems) = neardup::discover_inputs(config).map_err(to_py)?;
    Ok(files
        .iter()
        .map(|f| Arc::from(f.path.display().to_string()))
        .collect())
}

/// A run going on a background thread (`neardup.dedup`, or a step of the middle level): its
/// result is the JSON of its report.
#[pyclass(frozen, module = "neardup._native")]
pub struct Run {
    done: Receiver<Result<Output, Error>>,
    result: std::sync::Mutex<Option<Result<Output, Error>>>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// Its progress counters and cancel token.
    control: RunControl,
    /// How the run's error becomes a Python exception.
    error: fn(Error) -> PyErr,
    /// The run's `tokenizer=` callable: what it raised is the run's error ([`Run::watching`]).
    tokenizer: Option<neardup::CustomTokenizer>,
}

/// What a run made.
pub(crate) enum Output {
    /// The JSON of its report.
    Json(String),
    /// A shard's key table (and stage 1's statistics, as JSON).
    Keys(Box<neardup::keys::KeyTable>, serde_json::Value),
    /// Hot keys (and the merge's counts, as JSON).
    Hot(Box<neardup::keys::HotKeys>, serde_json::Value),
    /// A shard's signed samples (and the pass's statistics, as JSON).
    Signed(Box<neardup::SignedShard>, serde_json::Value),
    /// A group's decisions.
    Decided(Box<neardup::DecidedGroup>),
    /// The decisions of an in-memory table's rows.
    Table(Box<crate::frames::TableDecisions>),
}

/// How long a wait for the next decision lasts before Python's signal handlers get to run.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// A run nobody waits for any more — its Python object dropped, e.g. by a Ctrl-C that arrived
/// between the start of the run and the wait for it — is stopped, and its thread is waited for
/// (without the GIL), so that it removes what it wrote before the interpreter goes on or exits.
impl Drop for Run {
    fn drop(&mut self) {
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            if !thread.is_finished() {
                self.control.cancel.cancel();
            }
            Python::attach(|py| {
                py.detach(|| {
                    let _ = thread.join();
                })
            });
        }
    }
}

impl Run {
    fn finished(&self) -> bool {
        self.result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

#[pymethods]
impl Run {
    /// Waits up to `timeout` seconds (GIL released); True once the run has ended.
    fn wait(&self, py: Python<'_>, timeout: f64) -> bool {
        if self.finished() {
            return true;
        }
        // No lock is held while the GIL is released: another thread waiting for the lock while
        // holding the GIL would keep this one from taking the GIL back.
        let got = py.detach(|| {
            self.done
                .recv_timeout(Duration::from_secs_f64(timeout.max(0.0)))
        });
        let outcome = match got {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => return false,
            Err(RecvTimeoutError::Disconnected) => {
                // Another thread took the result first, or the run's thread died without one.
                if self.finished() {
                    return true;
                }
                Err(Error::ThreadLost {
                    thread: "the run's thread",
                })
            }
        };
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        true
    }

    /// Stops the run at its next block (Ctrl-C): nothing is published and what it wrote is
    /// removed, unless it had already begun publishing (then its outputs are published whole).
    fn cancel(&self) {
        self.control.cancel.cancel();
    }

    /// `(stage, bytes done, bytes expected, samples done)` of the stage running now (1 or 2).
    fn progress(&self) -> (u8, u64, u64, u64) {
        match self.control.current() {
            Some((stage, p)) => (stage, p.bytes(), p.total(), p.samples()),
            None => (1, 0, 0, 0),
        }
    }

    /// The report as JSON once the run has ended; raises its error otherwise.
    fn result(&self, py: Python<'_>) -> PyResult<String> {
        match self.take(py)? {
            Output::Json(json) => Ok(json),
            _ => Err(PyRuntimeError::new_err(
                "this run made a value: take it with step_value",
            )),
        }
    }
}

impl Run {
    /// Waits for the end of the run and takes what it made, or its error.
    pub(crate) fn take(&self, py: Python<'_>) -> PyResult<Output> {
        while !self.wait(py, 3600.0) {}
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = py.detach(|| t.join());
        }
        let result = self.result.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A callable tokenizer that raised stopped the run (or, raising on its last texts, left
        // it to finish with texts it gave no tokens): what it raised is the run's error.
        if result.is_some()
            && let Some(raised) = crate::tokenizer::failure(py, &self.tokenizer, None)
        {
            return Err(raised);
        }
        match result {
            Some(Ok(output)) => Ok(output),
            Some(Err(e)) => Err((self.error)(e)),
            None => Err(PyRuntimeError::new_err(
                "the run's result was already taken",
            )),
        }
    }
}

/// Starts `neardup.dedup`: both stages on a background thread.
#[pyfunction]
#[pyo3(signature = (inputs, output = None, decisions = None, report = None, settings = None))]
pub fn start_dedup(
    inputs: &Bound<'_, PyAny>,
    output: Option<PathBuf>,
    decisions: Option<PathBuf>,
    report: Option<PathBuf>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let mut config = config_from(settings, Scope::Run)?;
    config.input.inputs = inputs_from(inputs)?;
    config.output.dir = output;
    config.output.decisions = decisions;
    config.output.report = report;
    input_names(&config)?;
    let control = RunControl::watched();
    let (Some(stage1), Some(stage2)) = (control.stage1.clone(), control.stage2.clone()) else {
        unreachable!("a watched control has both stages' counters")
    };
    let pipeline = Pipeline::new(config)
        .map_err(to_py)?
        .with_progress(stage1, stage2)
        .with_cancel(control.cancel.clone());
    let watched = pipeline.config().clone();
    Run::spawn("neardup-dedup", &control, move || {
        pipeline.run().map(|r| report_json(&r))
    })
    .map(|run| run.watching(&watched))
}

impl Run {
    /// Runs `work` on a thread of its own; `control` holds the progress counters it updates and
    /// the token that stops it. `work` returns the JSON of its report.
    pub(crate) fn spawn(
        name: &str,
        control: &RunControl,
        work: impl FnOnce() -> Result<String, Error> + Send + 'static,
    ) -> PyResult<Run> {
        Run::spawn_output(name, control, to_py, move || work().map(Output::Json))
    }

    pub(crate) fn spawn_output(
        name: &str,
        control: &RunControl,
        error: fn(Error) -> PyErr,
        work: impl FnOnce() -> Result<Output, Error> + Send + 'static,
    ) -> PyResult<Run> {
        let (tx, rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _ = tx.send(work());
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the run's thread: {e}")))?;
        Ok(Run {
            done: rx,
            result: std::sync::Mutex::new(None),
            thread: std::sync::Mutex::new(Some(thread)),
            control: control.clone(),
            error,
            tokenizer: None,
        })
    }

    /// The run with `config`'s tokenizer watched, when it is a Python callable: its raising
    /// stops the run (at once if it already has), and what it raised becomes the run's error.
    /// Called as soon as the run has started, before it is handed to Python.
    pub(crate) fn watching(mut self, config: &Config) -> Run {
        crate::tokenizer::stop_with(config, &self.control.cancel);
        self.tokenizer = config.sketch.custom_tokenizer.clone();
        self
    }
}

/// Decisions of a running pipeline, in input order; see `neardup.stream`.
#[pyclass(frozen, module = "neardup")]
pub struct DecisionStream {
    state: std::sync::Mutex<StreamState>,
    /// The run's `tokenizer=` callable, whose raising stops it and is its error.
    tokenizer: Option<neardup::CustomTokenizer>,
    /// Every file decisions may name: the indexed runs' (against saved indexes), then the
    /// run's inputs.
    names: Vec<Arc<str>>,
    /// How many of `names` are the indexed runs'.
    indexed: usize,
}

enum StreamState {
    Running(neardup::DecisionStream),
    /// Taken by a thread reading the next decision.
    Busy,
    Finished(String),
    Failed,
}

#[pymethods]
impl DecisionStream {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Decision>> {
        // The stream is taken out of the lock while the GIL is released (see Run::wait).
        let taken = std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            StreamState::Busy,
        );
        let mut stream = match taken {
            StreamState::Running(stream) => stream,
            StreamState::Busy => {
                return Err(PyRuntimeError::new_err(
                    "this stream is being read by another thread",
                ));
            }
            done => {
                *self.state.lock().unwrap_or_else(|e| e.into_inner()) = done;
                return Ok(None);
            }
        };
        loop {
            let next = py.detach(|| stream.next_within(SIGNAL_POLL));
            if crate::tokenizer::has_failed(&self.tokenizer) {
                // No decision made after the callable raised is handed out (it may be of a
                // text the callable gave no tokens): the callable raised before the texts of
                // the decision's block were decided, so it is seen here by then.
                stream.cancel();
                let _ = py.detach(|| stream.finish());
                *self.state.lock().unwrap_or_else(|e| e.into_inner()) = StreamState::Failed;
                return Err(crate::tokenizer::failure(py, &self.tokenizer, None)
                    .unwrap_or_else(|| PyRuntimeError::new_err("the tokenizer failed")));
            }
            match next {
                NextDecision::Decision(d) => {
                    *self.state.lock().unwrap_or_else(|e| e.into_inner()) =
                        StreamState::Running(stream);
                    return Ok(Some(Decision::from_pipeline(&d, &self.names)));
                }
                NextDecision::Pending => {
                    if let Err(interrupt) = py.check_signals() {
                        // Ctrl-C: the run stops at its next block and removes what it wrote.
                        stream.cancel();
                        let _ = py.detach(|| stream.finish());
                        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = StreamState::Failed;
                        return Err(interrupt);
                    }
                }
                NextDecision::Ended => break,
            }
        }
        let finished = py.detach(|| stream.finish());
        if let Some(raised) = crate::tokenizer::failure(py, &self.tokenizer, None) {
            *self.state.lock().unwrap_or_else(|e| e.into_inner()) = StreamState::Failed;
            return Err(raised);
        }
        let outcome = finished.map_err(to_py).and_then(|report| {
            let discovered = report.files.iter().map(|f| f.display().to_string());
            let own = &self.names[self.names.len().saturating_sub(report.files.len())..];
            let prior = self.names.len() - own.len();
            if prior != self.indexed || discovered.ne(own.iter().map(|n| n.to_string())) {
                return Err(PyRuntimeError::new_err(
                    "the inputs changed while the run was starting (files appeared or \
                     vanished): the decisions' file names may be wrong",
                ));
            }
            Ok(report_json(&report))
        });
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(json) => {
                *state = StreamState::Finished(json);
                Ok(None)
            }
            Err(e) => {
                *state = StreamState::Failed;
                Err(e)
            }
        }
    }

    /// The run report (the JSON of ``--report``, as a dict) once every decision was taken;
    /// None before.
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            StreamState::Finished(json) => Ok(Some(crate::json_str_to_py(py, json)?)),
            _ => Ok(None),
        }
    }
}

/// Starts `neardup.stream`.
#[pyfunction]
#[pyo3(signature = (inputs, settings = None))]
pub fn stream(
    inputs: &Bound<'_, PyAny>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<DecisionStream> {
    let mut config = config_from(settings, Scope::NoOutputs)?;
    config.input.inputs = inputs_from(inputs)?;
    // Against saved indexes, the indexed runs' files are numbered first.
    let mut names: Vec<Arc<str>> = neardup::against::indexed_names(&config)
        .map_err(to_py)?
        .into_iter()
        .map(Arc::from)
        .collect();
    let indexed = names.len();
    names.extend(input_names(&config)?);
    let cancel = neardup::CancelToken::new();
    crate::tokenizer::stop_with(&config, &cancel);
    let tokenizer = config.sketch.custom_tokenizer.clone();
    let stream = Pipeline::new(config)
        .map_err(to_py)?
        .with_cancel(cancel)
        .stream();
    Ok(DecisionStream {
        state: std::sync::Mutex::new(StreamState::Running(stream)),
        tokenizer,
        names,
        indexed,
    })
}
