//! The outputs of the distributed stage-2 steps as values: `Signed` (one shard's `sign` output)
//! and `Decided` (one group's `decide` output), with their directories and bytes, and pickling
//! (through the bytes) for all step values, so that Ray's object store can carry them.

use std::path::PathBuf;

use pyo3::PyClass;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use neardup::{DecidedGroup, SignedShard};

use crate::errors::to_py;

/// What `__reduce__` returns: the function rebuilding a value, and its arguments (the value's
/// type name and bytes).
pub(crate) type Reduced<'py> = (Bound<'py, PyAny>, (&'static str, Bound<'py, PyBytes>));

/// `__reduce__` of a step value: ``neardup._from_bytes(kind, bytes)`` rebuilds it.
pub(crate) fn reduce<'py>(
    py: Python<'py>,
    kind: &'static str,
    bytes: &[u8],
) -> PyResult<Reduced<'py>> {
    let rebuild = py.import("neardup")?.getattr("_from_bytes")?;
    Ok((rebuild, (kind, PyBytes::new(py, bytes))))
}

/// One shard's ``sign`` output: for each hot sample of the shard, what deciding it needs, in one
/// stream per group of the plan. Made by :func:`neardup.sign` without ``output``.
///
/// :meth:`group` takes one group's part (all a :func:`neardup.decide` of that group needs from
/// this shard; the bytes are shared, not copied), so that a scheduler ships each decide task
/// only its part. :meth:`save` writes the directory ``neardup sign -o`` writes and :meth:`load`
/// reads one; :meth:`to_bytes` / :meth:`from_bytes` carry the same as one checksummed buffer
/// (``docs/formats.md``), and pickling goes through them.
#[pyclass(frozen, module = "neardup")]
pub struct Signed {
    pub inner: SignedShard,
    /// The pass's statistics, for a value just signed.
    pub stats: Option<serde_json::Value>,
}

#[pymethods]
impl Signed {
    /// The shard's number.
    #[getter]
    fn shard(&self) -> u32 {
        self.inner.manifest().place.shard
    }

    /// The shard's place in shard order (0 for the lowest shard number counted).
    #[getter]
    fn place(&self) -> u32 {
        self.inner.manifest().place.index
    }

    /// The number of shards the hot keys were counted from.
    #[getter]
    fn shards(&self) -> u32 {
        self.inner.manifest().place.shards
    }

    /// The groups of the plan.
    #[getter]
    fn groups(&self) -> u32 {
        self.inner.manifest().groups
    }

    /// The groups whose streams this value holds: all of them, or one for a part.
    #[getter]
    fn groups_held(&self) -> Vec<u32> {
        self.inner.groups_held()
    }

    /// Hot samples signed, per group of the plan.
    #[getter]
    fn samples(&self) -> Vec<u64> {
        self.inner.manifest().signed.samples.clone()
    }

    /// Of those, later exact copies sent as their content hash alone.
    #[getter]
    fn copies_by_hash(&self) -> u64 {
        self.inner.manifest().signed.copies_by_hash
    }

    /// Bytes of the streams held.
    #[getter]
    fn stream_bytes(&self) -> u64 {
        self.inner.stream_bytes()
    }

    /// The shard's input files, as decisions name them.
    #[getter]
    fn files(&self) -> Vec<String> {
        self.inner.manifest().files.clone()
    }

    /// The fingerprint of the hot keys it was signed with (:attr:`HotKeys.fingerprint`).
    #[getter]
    fn fingerprint(&self) -> u64 {
        self.inner.manifest().hot
    }

    /// The manifest (the fields of ``manifest.json`` of the directory but its checksum), as a
    /// dict.
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::json_to_py(
            py,
            &serde_json::to_value(self.inner.manifest()).expect("manifests serialise"),
        )
    }

    /// The pass's statistics (records read, hot and cold samples) for a value just signed;
    /// None for a value read back.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.stats
            .as_ref()
            .map(|s| crate::json_to_py(py, s))
            .transpose()
    }

    /// This shard's part for group ``group`` alone: what ``decide(…, group=group)`` needs.
    fn group(&self, group: u32) -> PyResult<Signed> {
        Ok(Signed {
            inner: self.inner.group(group).map_err(to_py)?,
            stats: None,
        })
    }

    /// Writes the directory ``neardup sign -o`` writes (a part: the manifest and its group's
    /// stream), published all or nothing.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.inner.save(&path)).map_err(to_py)
    }

    /// Reads a sign output directory.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Signed> {
        let inner = py.detach(|| SignedShard::load(&path)).map_err(to_py)?;
        Ok(Signed { inner, stats: None })
    }

    /// The value as bytes: its manifest and streams, checksummed.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| self.inner.to_bytes());
        PyBytes::new(py, &bytes)
    }

    /// Reads the bytes of :meth:`to_bytes`, verifying them (:class:`CorruptFileError` when
    /// damaged or truncated).
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Signed> {
        let inner = py.detach(|| SignedShard::from_bytes(data)).map_err(to_py)?;
        Ok(Signed { inner, stats: None })
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Signed>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduced<'py>> {
        let bytes = py.detach(|| self.inner.to_bytes());
        reduce(py, "Signed", &bytes)
    }

    fn __repr__(&self) -> String {
        format!(
            "Signed(shard={}, groups={}, groups_held={:?}, samples={}, stream_bytes={})",
            self.shard(),
            self.groups(),
            self.groups_held(),
            self.samples().iter().sum::<u64>(),
            self.stream_bytes()
        )
    }
}

/// One group's ``decide`` output: the decisions of the group's hot samples, in one stream per
/// shard. Made by :func:`neardup.decide` without ``output``.
///
/// :meth:`shard` takes one shard's part (all a :func:`neardup.write` of that shard needs from
/// this group). Saved, loaded, turned into bytes and pickled like :class:`Signed`.
#[pyclass(frozen, module = "neardup")]
pub struct Decided {
    pub inner: DecidedGroup,
}

#[pymethods]
impl Decided {
    /// The group decided.
    #[getter]
    fn group(&self) -> u32 {
        self.inner.manifest().group
    }

    /// The groups of the plan.
    #[getter]
    fn groups(&self) -> u32 {
        self.inner.manifest().groups
    }

    /// The number of shards.
    #[getter]
    fn shards(&self) -> u32 {
        self.inner.manifest().shards
    }

    /// The shards (by place in shard order) whose streams this value holds: all, or one for a
    /// part.
    #[getter]
    fn shards_held(&self) -> Vec<u32> {
        self.inner.shards_held()
    }

    /// Decisions per shard (by place).
    #[getter]
    fn decided(&self) -> Vec<u64> {
        self.inner.manifest().decided.clone()
    }

    /// Bytes of the streams held.
    #[getter]
    fn stream_bytes(&self) -> u64 {
        self.inner.stream_bytes()
    }

    /// The fingerprint of the hot keys it was decided with.
    #[getter]
    fn fingerprint(&self) -> u64 {
        self.inner.manifest().hot
    }

    /// The manifest (as ``manifest.json`` of the directory: decisions per shard, the decision
    /// core's counters, …), as a dict.
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::json_to_py(
            py,
            &serde_json::to_value(self.inner.manifest()).expect("manifests serialise"),
        )
    }

    /// This group's part for the shard at place ``place`` alone: what ``write`` of that shard
    /// needs.
    fn shard(&self, place: u32) -> PyResult<Decided> {
        Ok(Decided {
            inner: self.inner.shard(place).map_err(to_py)?,
        })
    }

    /// Writes the directory ``neardup decide -o`` writes, published all or nothing.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.inner.save(&path)).map_err(to_py)
    }

    /// Reads a decide output directory.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Decided> {
        let inner = py.detach(|| DecidedGroup::load(&path)).map_err(to_py)?;
        Ok(Decided { inner })
    }

    /// The value as bytes: its manifest and streams, checksummed.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| self.inner.to_bytes());
        PyBytes::new(py, &bytes)
    }

    /// Reads the bytes of :meth:`to_bytes`, verifying them.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Decided> {
        let inner = py
            .detach(|| DecidedGroup::from_bytes(data))
            .map_err(to_py)?;
        Ok(Decided { inner })
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Decided>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduced<'py>> {
        let bytes = py.detach(|| self.inner.to_bytes());
        reduce(py, "Decided", &bytes)
    }

    fn __repr__(&self) -> String {
        format!(
            "Decided(group={}, shards={}, shards_held={:?}, decided={}, stream_bytes={})",
            self.group(),
            self.shards(),
            self.shards_held(),
            self.decided().iter().sum::<u64>(),
            self.stream_bytes()
        )
    }
}

/// A step's output given to the next step from Python: a value, or a directory.
pub(crate) enum StepArg<T: PyClass> {
    Value(Py<T>),
    Dir(PathBuf),
}

/// The items of `items` as values of `T` or directories; `what` names them in the error.
pub(crate) fn step_args<T: PyClass>(
    items: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<Vec<StepArg<T>>> {
    let list: Vec<Bound<'_, PyAny>> = match items.cast::<PyList>() {
        Ok(l) => l.iter().collect(),
        Err(_) => items.try_iter()?.collect::<PyResult<_>>()?,
    };
    list.iter()
        .map(|item| {
            if let Ok(v) = item.cast::<T>() {
                return Ok(StepArg::Value(v.clone().unbind()));
            }
            item.extract::<PathBuf>()
                .map(StepArg::Dir)
                .map_err(|_| PyTypeError::new_err(what.to_string()))
        })
        .collect()
}
