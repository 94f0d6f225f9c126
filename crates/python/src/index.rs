//! `neardup.Index`: the online dedup index (`neardup-online`) and its decisions.

use std::sync::Mutex;

use pyo3::exceptions::{PyConnectionError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};

use neardup::dedup::EmptyPolicy;
use neardup::sketch::Sketcher;
use neardup_online::{DocId, Index as Core, IndexError, IndexSettings, Store, Text};

use crate::settings::{Scope, config_from};
use crate::texts::str_of;

/// A document's id from Python: an int or a str (a bool is refused, so that ``True`` is not
/// taken for ``1``).
fn doc_id(id: &Bound<'_, PyAny>) -> PyResult<DocId> {
    if id.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "an id must be a str or an int, not bool",
        ));
    }
    if let Ok(s) = id.cast::<PyString>() {
        return Ok(DocId::Str(str_of(s)?.into_owned()));
    }
    if id.is_instance_of::<PyInt>() {
        return id.extract::<i64>().map(DocId::Int).map_err(|_| {
            PyValueError::new_err(format!("an int id must fit in 64 bits, got {id}"))
        });
    }
    Err(PyTypeError::new_err(format!(
        "an id must be a str or an int, not {}",
        type_name(id)
    )))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

fn id_to_py<'py>(py: Python<'py>, id: &DocId) -> PyResult<Bound<'py, PyAny>> {
    Ok(match id {
        DocId::Int(n) => n.into_pyobject(py)?.into_any(),
        DocId::Str(s) => PyString::new(py, s).into_any(),
    })
}

/// The decision an :class:`Index` made about one document.
///
/// ``id`` is the document's id (the one given, or the integer the index gave it); ``keep`` and
/// ``reason`` (``"unique"``, ``"near"``, ``"exact"``, ``"empty"``, ``"error"``) what was decided;
/// ``dup_of`` the id of the earlier document it duplicates and ``similarity`` the similarity
/// that decided (exact Jaccard under ``verify="exact"``, 1.0 for exact copies).
#[pyclass(frozen, module = "neardup", eq)]
#[derive(Clone, Debug, PartialEq)]
pub struct IndexDecision {
    inner: neardup_online::Decision,
}

#[pymethods]
impl IndexDecision {
    /// The document's id (str or int).
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        id_to_py(py, &self.inner.id)
    }
    /// Whether the document is kept (and joined the index).
    #[getter]
    fn keep(&self) -> bool {
        self.inner.keep
    }
    /// Why: "unique", "near", "exact", "empty" or "error".
    #[getter]
    fn reason(&self) -> &'static str {
        self.inner.reason.as_str()
    }
    /// The id of the earlier document this one duplicates (None when kept).
    #[getter]
    fn dup_of<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .dup_of
            .as_ref()
            .map(|d| id_to_py(py, d))
            .transpose()
    }
    /// The similarity that decided (1.0 for exact copies; None when kept).
    #[getter]
    fn similarity(&self) -> Option<f64> {
        self.inner.similarity
    }

    /// The decision as a dict with the keys ``id``, ``keep``, ``reason``, ``dup_of`` and
    /// ``similarity``.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("id", self.id(py)?)?;
        d.set_item("keep", self.inner.keep)?;
        d.set_item("reason", self.reason())?;
        d.set_item("dup_of", self.dup_of(py)?)?;
        d.set_item("similarity", self.inner.similarity)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let mut s = format!(
            "IndexDecision(id={}, keep={}, reason={:?}",
            self.inner.id,
            if self.inner.keep { "True" } else { "False" },
            self.inner.reason.as_str()
        );
        if let Some(d) = &self.inner.dup_of {
            s += &format!(", dup_of={d}");
        }
        if let Some(sim) = self.inner.similarity {
            s += &format!(", similarity={sim:?}");
        }
        s + ")"
    }
}

/// An online dedup index: documents are checked against everything kept before them, one at a
/// time or in batches, with the decisions ``neardup dedup`` makes over the same texts in the same
/// order (the same decision core: bounded representatives per bucket, verification, first seen
/// kept, ``dup_of`` named).
///
/// ``store=None`` keeps the index in this process's memory; ``store="PATH"`` opens the saved
/// index file at PATH into memory (the format of ``neardup dedup --index-out``, so a service can
/// start from a batch run's index; created when missing; refused, naming the setting, when made
/// with other settings) and :meth:`save` writes it back; ``store="redis://HOST:PORT/DB"``
/// keeps it in a Redis server, shared by every process and machine that opens the same
/// ``namespace`` (default ``"default"``): a check and its insert are one atomic step on the
/// server, so two producers that see near copies at the same moment never both keep them, and
/// one producer alone gets exactly the in-memory decisions. A namespace records the settings it
/// was made with and refuses others (``ValueError`` naming them); a server that cannot be
/// reached, or is lost in the middle of a batch, is a ``ConnectionError`` naming its address
/// (and how far the batch got). Settings are keyword arguments as for :class:`Deduper` (the
/// sketch settings and ``threshold``, ``max_reps``, ``verify``, ``exact``, ``near``,
/// ``empty``, …).
///
/// Ids are ``str`` or ``int`` (``7`` and ``"7"`` are different documents); a document checked
/// without one gets the next integer no document has. Checking an id again returns the decision
/// it got the first time and changes nothing, so a producer may retry. Batch verbs sign their
/// texts in parallel with the GIL released.
#[pyclass(frozen, module = "neardup")]
pub struct Index {
    core: Mutex<Core>,
    namespace: Option<String>,
    /// The `tokenizer=` callable, if one: what it raised is raised in place of the call's panic.
    tokenizer: Option<neardup::CustomTokenizer>,
}

/// Python values as texts: a `str`, or anything else (``None``, bytes, numbers), which has no
/// text and is decided ``"error"`` as the batch engine decides a record whose field is not a
/// string.
enum Given<'py> {
    Str(Bound<'py, PyString>),
    Unreadable,
}

fn given<'py>(text: &Bound<'py, PyAny>) -> Given<'py> {
    match text.cast::<PyString>() {
        Ok(s) => Given::Str(s.clone()),
        Err(_) => Given::Unreadable,
    }
}

fn ids_of(ids: Option<&Bound<'_, PyAny>>, n: usize) -> PyResult<Vec<Option<DocId>>> {
    let Some(ids) = ids.filter(|i| !i.is_none()) else {
        return Ok(vec![None; n]);
    };
    let ids: Vec<Option<DocId>> = ids
        .try_iter()?
        .map(|id| {
            let id = id?;
            if id.is_none() {
                Ok(None)
            } else {
                doc_id(&id).map(Some)
            }
        })
        .collect::<PyResult<_>>()?;
    if ids.len() != n {
        return Err(PyValueError::new_err(format!(
            "{} ids for {n} texts: give one id per text",
            ids.len()
        )));
    }
    Ok(ids)
}

/// What a query finds, as Python values: `(id, similarity)` pairs.
type Matches<'py> = Vec<(Bound<'py, PyAny>, f64)>;

/// The index's errors as Python exceptions: settings (invalid, or not a shared namespace's)
/// are a `ValueError`, a Redis server that cannot be reached or is lost a `ConnectionError`,
/// a spill file's failure the `OSError` of its kind, a namespace that cannot be read or other
/// producers in the way an `OSError`.
pub(crate) fn index_error(py: Python<'_>, e: IndexError) -> PyErr {
    let message = e.to_string();
    match e {
        IndexError::Settings(_)
        | IndexError::SettingsDiffer { .. }
        | IndexError::FileSettingsDiffer { .. }
        | IndexError::NoPath => PyValueError::new_err(message),
        IndexError::Save { source, .. } => crate::errors::os_error(py, &source, message),
        // A saved index that cannot be opened: the exception the same failure of a run's
        // `--against` gets, with this message.
        IndexError::File { source, .. } => {
            use neardup::index::IndexError as Saved;
            match source {
                Saved::Io { error, .. } | Saved::Missing { error, .. } => {
                    crate::errors::os_error(py, &error, message)
                }
                Saved::Damaged { .. } | Saved::Version { .. } => {
                    crate::errors::CorruptFileError::new_err(message)
                }
                Saved::Changed { .. } | Saved::Unreadable { .. } => {
                    crate::errors::InputError::new_err(message)
                }
                _ => PyValueError::new_err(message),
            }
        }
        IndexError::Spill(io) => crate::errors::os_error(py, &io, message),
        IndexError::Unreachable { .. } | IndexError::Lost { .. } | IndexError::Redis { .. } => {
            PyConnectionError::new_err(message)
        }
        _ => PyOSError::new_err(message),
    }
}

/// The store `store=` names: `None` (memory), a `redis://`/`rediss://`/`unix://` URL, or the
/// path of a saved index file (a `str` or an `os.PathLike`).
fn store_of(store: Option<&Bound<'_, PyAny>>, namespace: Option<&str>) -> PyResult<Store> {
    let Some(store) = store.filter(|s| !s.is_none()) else {
        return Ok(Store::Memory);
    };
    let Ok(url) = store.extract::<String>() else {
        return match store.extract::<std::path::PathBuf>() {
            Ok(path) => file_store(path, namespace),
            Err(_) => Err(PyValueError::new_err(format!(
                "store={store}: give None (this process's memory), a Redis URL \
                 (\"redis://HOST:PORT/DB\") or the path of an index file"
            ))),
        };
    };
    if ["redis://", "rediss://", "unix://"]
        .iter()
        .any(|p| url.starts_with(p))
    {
        return Ok(Store::Redis {
            url,
            namespace: namespace.unwrap_or(DEFAULT_NAMESPACE).to_string(),
        });
    }
    if url.contains("://") {
        return Err(PyValueError::new_err(format!(
            "store={url:?}: give None (this process's memory), a Redis URL \
             (\"redis://HOST:PORT/DB\") or the path of a local index file"
        )));
    }
    file_store(url.into(), namespace)
}

fn file_store(path: std::path::PathBuf, namespace: Option<&str>) -> PyResult<Store> {
    if namespace.is_some() {
        return Err(PyValueError::new_err(format!(
            "store={:?} is an index file, which has no namespaces: give namespace= only with a \
             Redis store",
            path.display()
        )));
    }
    Ok(Store::File(path))
}

/// The namespace of a shared store when none is given.
const DEFAULT_NAMESPACE: &str = "default";

impl Index {
    fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with the GIL released. A `tokenizer=` callable that raises ends the signing it
    /// was called from (before anything is decided: a batch is signed whole first), and what it
    /// raised comes back as `neardup.TokenizerError` with the exception as its `__cause__`.
    fn guarded<T: Send>(&self, py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
        match py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))) {
            Ok(out) => Ok(out),
            Err(panic) => match crate::tokenizer::failure(py, &self.tokenizer, None) {
                Some(raised) => Err(raised),
                None => std::panic::resume_unwind(panic),
            },
        }
    }

    /// Runs `f` over the texts with the GIL released.
    fn with_texts<T: Send>(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        f: impl FnOnce(&mut Core, &[Text<'_>]) -> T + Send,
    ) -> PyResult<T> {
        let given: Vec<Given<'_>> = texts
            .try_iter()?
            .map(|t| t.map(|t| given(&t)))
            .collect::<PyResult<_>>()?;
        let strs: Vec<Option<std::borrow::Cow<'_, str>>> = given
            .iter()
            .map(|g| match g {
                Given::Str(s) => str_of(s).map(Some),
                Given::Unreadable => Ok(None),
            })
            .collect::<PyResult<_>>()?;
        let texts: Vec<Text<'_>> = strs
            .iter()
            .map(|s| match s {
                Some(s) => Text::Str(s),
                None => Text::Unreadable,
            })
            .collect();
        self.guarded(py, || f(&mut self.core(), &texts))
    }
}

#[pymethods]
impl Index {
    #[new]
    #[pyo3(signature = (store = None, *, namespace = None, **settings))]
    fn new(
        py: Python<'_>,
        store: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let store = store_of(store, namespace.as_deref())?;
        let config = config_from(settings, Scope::Deduper)?;
        let sketcher = Sketcher::new(config.sketch_config().map_err(crate::errors::to_py)?)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let settings = IndexSettings {
            sketcher,
            rule: config.row_rule(),
            deduper: config.deduper_config(),
            keep_empty: config.dedup.empty == EmptyPolicy::Keep,
        };
        let core = py
            .detach(|| Core::open(settings, &store))
            .map_err(|e| index_error(py, e))?;
        let namespace = match &store {
            Store::Memory | Store::File(_) => namespace,
            Store::Redis { namespace, .. } => Some(namespace.clone()),
        };
        Ok(Index {
            core: Mutex::new(core),
            namespace,
            tokenizer: config.sketch.custom_tokenizer.clone(),
        })
    }

    /// Decides ``text`` against everything kept so far and adds it when it is kept. ``id`` is a
    /// str or an int (the next free integer when None); an id checked before gets its first
    /// decision back and nothing changes. A value that is not a str (``None``, bytes) is decided
    /// ``"error"`` and kept, an empty text ``"empty"``, as ``neardup dedup`` decides them.
    #[pyo3(signature = (text, id = None))]
    fn check(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<IndexDecision> {
        let id = id.filter(|i| !i.is_none()).map(doc_id).transpose()?;
        let texts = pyo3::types::PyTuple::new(py, [text])?;
        let out = self.with_texts(py, texts.as_any(), |core, texts| {
            core.check_many(texts, vec![id])
        })?;
        let mut out = out.map_err(|e| index_error(py, e))?;
        Ok(IndexDecision {
            inner: out.pop().expect("one decision"),
        })
    }

    /// :meth:`check` for each text in order (``ids`` one per text, or None), signing them in
    /// parallel first: the same decisions as the checks one by one.
    #[pyo3(signature = (texts, ids = None))]
    fn check_many(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<IndexDecision>> {
        let texts = pyo3::types::PyList::new(py, texts.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        let ids = ids_of(ids, texts.len())?;
        let out = self.with_texts(py, texts.as_any(), |core, texts| {
            core.check_many(texts, ids)
        })?;
        Ok(out
            .map_err(|e| index_error(py, e))?
            .into_iter()
            .map(|inner| IndexDecision { inner })
            .collect())
    }

    /// The earlier documents ``text`` duplicates, as ``(id, similarity)`` pairs, adding
    /// nothing: the first document with the same text (1.0), then the kept documents sharing a
    /// bucket with it whose similarity reaches the threshold (at most ``max_reps`` are kept per
    /// bucket, as in a run). Empty when :meth:`check` would keep it.
    fn query<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyString>,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, f64)>> {
        let text = str_of(text)?;
        let text: &str = &text;
        let found = self
            .guarded(py, || self.core().query(text))?
            .map_err(|e| index_error(py, e))?;
        found
            .iter()
            .map(|(id, sim)| Ok((id_to_py(py, id)?, *sim)))
            .collect()
    }

    /// :meth:`query` for each text, signed in parallel with the GIL released (and, in Redis,
    /// what they reach read in one round trip); adds nothing, so every text is answered against
    /// the index as it was before the call. A ``None`` (or another non-string) finds nothing, as
    /// :meth:`check` keeps it.
    fn query_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Matches<'py>>> {
        let found = self.with_texts(py, texts, |core, texts| {
            let strs: Vec<&str> = texts
                .iter()
                .filter_map(|t| match t {
                    Text::Str(s) => Some(*s),
                    Text::Unreadable => None,
                })
                .collect();
            core.query_many(&strs).map(|mut found| {
                let mut found = found.drain(..);
                texts
                    .iter()
                    .map(|t| match t {
                        Text::Str(_) => found.next().expect("one answer per text"),
                        Text::Unreadable => Vec::new(),
                    })
                    .collect::<Vec<_>>()
            })
        })?;
        found
            .map_err(|e| index_error(py, e))?
            .iter()
            .map(|matches| {
                matches
                    .iter()
                    .map(|(id, sim)| Ok((id_to_py(py, id)?, *sim)))
                    .collect()
            })
            .collect()
    }

    /// Adds ``text`` without deciding it, as a kept document (the collection an index starts
    /// from). Returns its id. An id already in the index is left as it was.
    #[pyo3(signature = (text, id = None))]
    fn insert<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyAny>,
        id: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let id = id.filter(|i| !i.is_none()).map(doc_id).transpose()?;
        let texts = pyo3::types::PyTuple::new(py, [text])?;
        let ids = self.with_texts(py, texts.as_any(), |core, texts| {
            core.insert_many(texts, vec![id])
        })?;
        let ids = ids.map_err(|e| index_error(py, e))?;
        id_to_py(py, &ids[0])
    }

    /// :meth:`insert` for each text, signing them in parallel. Returns the ids.
    #[pyo3(signature = (texts, ids = None))]
    fn insert_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        ids: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let texts = pyo3::types::PyList::new(py, texts.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        let ids = ids_of(ids, texts.len())?;
        let out = self.with_texts(py, texts.as_any(), |core, texts| {
            core.insert_many(texts, ids)
        })?;
        out.map_err(|e| index_error(py, e))?
            .iter()
            .map(|id| id_to_py(py, id))
            .collect()
    }

    /// :meth:`check_many` over the rows of a table, in row order: ``data`` is anything
    /// :func:`neardup.drop_duplicates` takes (a pyarrow Table, a polars or pandas DataFrame, a
    /// ``datasets.Dataset``, an Arrow stream), ``column`` its text column (read in place, no
    /// ``str`` made; a null is decided ``"error"`` and kept, as ``check(None)`` is) and
    /// ``id_column`` an optional column of str or int ids. Returns one decision per row.
    #[pyo3(signature = (data, column = "text", id_column = None))]
    fn check_table(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        column: &str,
        id_column: Option<&str>,
    ) -> PyResult<Vec<IndexDecision>> {
        let (arrays, ids) = crate::frames::column_of_table(data, column, id_column)?;
        let out = self.guarded(py, || {
            let texts = crate::frames::column_texts(&arrays);
            self.core().check_many(&texts, ids)
        })?;
        Ok(out
            .map_err(|e| index_error(py, e))?
            .into_iter()
            .map(|inner| IndexDecision { inner })
            .collect())
    }

    /// Saves the index at ``path`` in the format of ``neardup dedup --index-out`` (so that
    /// ``neardup dedup --against PATH`` and ``Index(store=PATH)`` use it), atomically: the whole
    /// index is there or what was there before is. ``path=None`` saves an index opened from a
    /// file back to it. An index in Redis is read in one atomic step (its producers may go on)
    /// and saved as ``neardup index pull`` saves it, the same bytes. A path holding anything
    /// but a neardup index is refused (``OSError``). Returns the bytes written.
    #[pyo3(signature = (path = None))]
    fn save(&self, py: Python<'_>, path: Option<std::path::PathBuf>) -> PyResult<u64> {
        py.detach(|| self.core().save(path.as_deref()))
            .map_err(|e| index_error(py, e))
    }

    /// The namespace given.
    #[getter]
    fn namespace(&self) -> Option<String> {
        self.namespace.clone()
    }

    /// The decision core's counters: documents checked, comparisons, near and exact
    /// duplicates, representatives and buckets held, and their bytes.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = py
            .detach(|| self.core().stats())
            .map_err(|e| index_error(py, e))?;
        crate::json_to_py(py, &stats)
    }

    /// Documents checked or inserted (each id once; in Redis, by every producer).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let n = py
            .detach(|| self.core().len())
            .map_err(|e| index_error(py, e))?;
        Ok(n as usize)
    }

    fn __repr__(&self) -> String {
        let core = self.core();
        match &*core {
            Core::Memory(m) => format!("Index(documents={})", m.len()),
            Core::File(f) => format!(
                "Index(store={:?}, documents={})",
                f.path().display().to_string(),
                f.memory().len()
            ),
            Core::Redis(r) => format!(
                "Index(store={:?}, namespace={:?})",
                r.address(),
                r.namespace()
            ),
        }
    }
}
