//! `neardup.Decision` and the in-memory `neardup.Deduper`.

use std::sync::{Arc, Mutex};

use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use neardup::corpus::Reason;
use neardup::dedup::{SampleAddr, TextDeduper};
use neardup::sketch::Sketcher;

use crate::settings::{Scope, config_from};
use crate::tables::HotKeys;
use crate::texts::str_of;

/// One decision about one sample: the row of a decisions file.
///
/// ``file``, ``record`` and ``field`` give the sample's address (``file`` is the input path as
/// discovered, ``None`` for texts given to a :class:`Deduper`, whose ``record`` is the text's
/// position in the sequence it was given); ``keep`` and ``reason`` (``"unique"``, ``"near"``,
/// ``"exact"``, ``"empty"``, ``"error"``) what was decided; ``dup_of_*`` the sample it
/// duplicates and ``similarity`` the similarity that decided.
#[pyclass(frozen, module = "neardup", eq)]
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub file: Option<Arc<str>>,
    pub record: u64,
    pub field: u32,
    pub id: Option<String>,
    pub keep: bool,
    pub reason: Reason,
    pub dup_of_file: Option<Arc<str>>,
    pub dup_of_record: Option<u64>,
    pub dup_of_field: Option<u32>,
    pub dup_of_id: Option<String>,
    pub similarity: Option<f64>,
    pub cluster_file: Option<Arc<str>>,
    pub cluster_record: u64,
}

impl Decision {
    /// A decision of the pipeline, naming files by `names` (the discovered inputs, in order).
    pub fn from_pipeline(d: &neardup::dedup::Decision, names: &[Arc<str>]) -> Decision {
        let name = |a: &SampleAddr| names.get(a.file as usize).cloned();
        Decision {
            file: name(&d.addr),
            record: d.addr.record,
            field: d.addr.field,
            id: d.id.clone(),
            keep: d.keep,
            reason: d.reason,
            dup_of_file: d.dup_of.as_ref().and_then(name),
            dup_of_record: d.dup_of.map(|a| a.record),
            dup_of_field: d.dup_of.map(|a| a.field),
            dup_of_id: d.dup_of_id.clone(),
            similarity: d.similarity,
            cluster_file: name(&d.cluster),
            cluster_record: d.cluster.record,
        }
    }
}

#[pymethods]
impl Decision {
    /// Input file of the sample, as discovered (None for texts given to a Deduper).
    #[getter]
    fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }
    /// Record (JSONL line or Parquet row) within the file, from 0; for a Deduper, the text's
    /// position in the sequence it was given.
    #[getter]
    fn record(&self) -> u64 {
        self.record
    }
    /// Field slot within the record (0 unless fields_mode="expand").
    #[getter]
    fn field(&self) -> u32 {
        self.field
    }
    /// The record's id, when id_field is set and the record has one.
    #[getter]
    fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
    /// Whether the sample (its record) is kept.
    #[getter]
    fn keep(&self) -> bool {
        self.keep
    }
    /// Why: "unique", "near", "exact", "empty" or "error".
    #[getter]
    fn reason(&self) -> &'static str {
        self.reason.as_str()
    }
    /// File of the sample this one duplicates.
    #[getter]
    fn dup_of_file(&self) -> Option<&str> {
        self.dup_of_file.as_deref()
    }
    /// Record of the sample this one duplicates.
    #[getter]
    fn dup_of_record(&self) -> Option<u64> {
        self.dup_of_record
    }
    /// Field slot of the sample this one duplicates.
    #[getter]
    fn dup_of_field(&self) -> Option<u32> {
        self.dup_of_field
    }
    /// Id of the sample this one duplicates.
    #[getter]
    fn dup_of_id(&self) -> Option<&str> {
        self.dup_of_id.as_deref()
    }
    /// Similarity that decided (1.0 for exact copies; None when kept).
    #[getter]
    fn similarity(&self) -> Option<f64> {
        self.similarity
    }
    /// File of the kept sample this sample's duplicate set resolves to, whatever chain of
    /// ``dup_of`` led there (its own file when kept; None for texts given to a Deduper).
    #[getter]
    fn cluster_file(&self) -> Option<&str> {
        self.cluster_file.as_deref()
    }
    /// Record of that kept sample (its own record when kept).
    #[getter]
    fn cluster_record(&self) -> u64 {
        self.cluster_record
    }

    /// The decision as a decisions file's row: a dict with the keys ``file``, ``record``,
    /// ``field``, ``id``, ``keep``, ``reason``, ``dup_of_file``, ``dup_of_record``,
    /// ``dup_of_id``, ``similarity``, ``cluster_file`` and ``cluster_record``, in that order.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("file", self.file.as_deref())?;
        d.set_item("record", self.record)?;
        d.set_item("field", self.field)?;
        d.set_item("id", &self.id)?;
        d.set_item("keep", self.keep)?;
        d.set_item("reason", self.reason.as_str())?;
        d.set_item("dup_of_file", self.dup_of_file.as_deref())?;
        d.set_item("dup_of_record", self.dup_of_record)?;
        d.set_item("dup_of_id", &self.dup_of_id)?;
        d.set_item("similarity", self.similarity)?;
        d.set_item("cluster_file", self.cluster_file.as_deref())?;
        d.set_item("cluster_record", self.cluster_record)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let file = |f: &Option<Arc<str>>| match f {
            Some(f) => format!("{:?}", f),
            None => "None".into(),
        };
        let mut s = format!(
            "Decision(file={}, record={}, field={}, keep={}, reason={:?}",
            file(&self.file),
            self.record,
            self.field,
            if self.keep { "True" } else { "False" },
            self.reason.as_str()
        );
        if let Some(r) = self.dup_of_record {
            s += &format!(
                ", dup_of_file={}, dup_of_record={r}",
                file(&self.dup_of_file)
            );
        }
        if let Some(sim) = self.similarity {
            s += &format!(", similarity={sim:?}");
        }
        s + ")"
    }
}

/// The decision state of an in-memory deduper.
struct State {
    texts: TextDeduper,
    /// The `tokenizer=` callable, if one: a text it raised on is not decided.
    tokenizer: Option<neardup::CustomTokenizer>,
}

/// Why a text was not decided.
enum Undecided {
    /// Exact verification's spill file failed.
    Io(std::io::Error),
    /// The `tokenizer=` callable raised on it (the text is not counted).
    Tokenizer,
}

impl State {
    fn decide(&mut self, text: &str) -> Result<Decision, Undecided> {
        let record = self.texts.seen();
        self.texts.sign(text);
        if crate::tokenizer::has_failed(&self.tokenizer) {
            // Its sketch is of no tokens: deciding it would change the state for good.
            return Err(Undecided::Tokenizer);
        }
        let verdict = self.texts.decide_signed().map_err(Undecided::Io)?;
        Ok(Decision::from_pipeline(&verdict.decision(record), &[]))
    }
}

/// An in-memory deduplicator: give it texts one by one, the first seen of a group of near
/// duplicates is kept, every later one dropped — the decisions of a run over the same texts in
/// the same order. Built on the decision core of stage 2; it holds the signature of every kept
/// text that shares a bucket with another (with ``verify="exact"``, its shingle set too).
///
/// Settings are keyword arguments as for :func:`neardup.dedup` (the sketch settings and
/// ``threshold``, ``max_reps``, ``verify``, ``exact``, ``empty``, …). ``hot_keys`` (a
/// :class:`HotKeys` or an array of ``uint64`` keys) restricts the buckets to those keys, as
/// stage 2 does with a run's hot keys; without it every key counts. ``sign_blank=True`` signs
/// whitespace-only texts like any other instead of deciding them ``"empty"`` (lshcurator's
/// ``Deduper`` does that).
///
/// ``deduper(text)`` returns whether the text is kept; ``deduper.decide(text)`` the whole
/// :class:`Decision` (``record`` is the text's position, ``dup_of_record`` that of the text it
/// duplicates).
///
/// Its state (what it has kept) is this process's: it is no use in another. A forked child
/// (``multiprocessing``, ``datasets.Dataset.filter(..., num_proc=2)``) is refused, because each
/// child would decide against its own copy and keep what the others saw, and it does not
/// pickle. Decide in one process, or give a whole table to :func:`neardup.drop_duplicates`,
/// which uses every core.
#[pyclass(frozen, module = "neardup")]
pub struct Deduper {
    state: Mutex<State>,
    /// The process the deduper was made in.
    pid: u32,
}

/// Why a deduper is no use in another process, and what to do instead.
const ONE_PROCESS: &str = "each process would decide against its own copy of what the \
    Deduper has seen and keep duplicates the others saw. Decide in one process (for a \
    datasets.Dataset: filter(..., num_proc=1)), or deduplicate the whole table at once with \
    neardup.drop_duplicates(data, column=\"text\"), which uses every core";

/// The `hot_keys` argument: a HotKeys object (checked against the deduper's settings), or any
/// array or sequence of u64 keys.
fn with_hot_keys(texts: TextDeduper, hot: &Bound<'_, PyAny>) -> PyResult<TextDeduper> {
    if let Ok(table) = hot.cast::<HotKeys>() {
        return texts
            .against(&table.get().inner)
            .map_err(|e| PyValueError::new_err(e.to_string()));
    }
    if let Ok(array) = hot.extract::<PyReadonlyArray1<'_, u64>>() {
        let keys = match array.as_slice() {
            Ok(keys) => keys.iter().copied().collect(),
            Err(_) => array.as_array().iter().copied().collect(),
        };
        return Ok(texts.with_hot_keys(keys));
    }
    if hot.hasattr("ndim")? && hot.getattr("ndim")?.extract::<usize>()? != 1 {
        let shape: Vec<usize> = hot.getattr("shape")?.extract()?;
        return Err(PyValueError::new_err(format!(
            "hot_keys must be one-dimensional, got shape {shape:?}"
        )));
    }
    let keys: Vec<u64> = hot.extract().map_err(|_| {
        PyTypeError::new_err("hot_keys must be a HotKeys object or a sequence of uint64 keys")
    })?;
    Ok(texts.with_hot_keys(keys.into_iter().collect()))
}

#[pymethods]
impl Deduper {
    #[new]
    #[pyo3(signature = (*, hot_keys = None, sign_blank = false, **settings))]
    fn new(
        hot_keys: Option<&Bound<'_, PyAny>>,
        sign_blank: bool,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let config = config_from(settings, Scope::Deduper)?;
        let sketcher = Sketcher::new(config.sketch_config().map_err(crate::errors::to_py)?)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let rule = config.row_rule();
        if sign_blank && !rule.band_keys {
            return Err(PyValueError::new_err(
                "sign_blank=True needs near-duplicate detection (near=True)",
            ));
        }
        let mut texts =
            TextDeduper::new(sketcher, rule, config.deduper_config(), config.dedup.empty)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if let Some(hot) = hot_keys {
            texts = with_hot_keys(texts, hot)?;
        }
        if sign_blank {
            texts = texts.signing_blank_texts();
        }
        crate::tokenizer::watch(&config.sketch.custom_tokenizer);
        Ok(Deduper {
            pid: std::process::id(),
            state: Mutex::new(State {
                texts,
                tokenizer: config.sketch.custom_tokenizer.clone(),
            }),
        })
    }

    /// Decides the next text: True when it is kept (no earlier text is a near duplicate).
    fn __call__(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.decide(py, text)?.keep)
    }

    /// Decides the next text and returns the whole :class:`Decision`.
    fn decide(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Decision> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(PyRuntimeError::new_err(format!(
                "this Deduper was made in process {} and is used in process {pid}, a forked \
                 child: {ONE_PROCESS}",
                self.pid
            )));
        }
        let text = text.cast::<pyo3::types::PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a text must be a str, not {}",
                text.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let text = str_of(text)?;
        let text: &str = &text;
        let result = py.detach(|| {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.decide(text).map_err(|e| (e, state.texts.seen()))
        });
        result.map_err(|(e, next)| match e {
            Undecided::Io(e) => crate::errors::os_error(
                py,
                &e,
                format!("exact verification's spill file failed: {e}"),
            ),
            Undecided::Tokenizer => {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let place = format!("text {next} given to this Deduper (not decided)");
                crate::tokenizer::failure(py, &state.tokenizer, Some(&place))
                    .unwrap_or_else(|| PyRuntimeError::new_err("the tokenizer failed"))
            }
        })
    }

    /// Refuses to pickle: the state is this process's.
    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "a Deduper cannot be pickled or sent to another process: {ONE_PROCESS}"
        )))
    }

    /// Texts decided so far.
    #[getter]
    fn seen(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .texts
            .seen()
    }

    /// Number of keys given as ``hot_keys`` (None when every key counts).
    #[getter]
    fn num_bucket_keys(&self) -> Option<usize> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .texts
            .hot_keys()
    }

    /// The decision core's counters: texts checked, comparisons, near and exact duplicates,
    /// representatives and buckets held, and their bytes.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .texts
            .stats();
        crate::json_to_py(py, &serde_json::to_value(stats).expect("stats serialise"))
    }
}
