//! The steps' values as Python classes: what every one of them does ([`PyStepValue`], given
//! by [`step_value!`]: save and load, bytes, equality, pickling through the bytes so that Ray's
//! object store can carry them), and the two of the distributed stage 2, `Signed` (one shard's
//! `sign` output) and `Decided` (one group's `decide` output). `KeyTable` and `HotKeys` are in
//! `tables.rs`.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::{PyBytes, PyList};
use pyo3::{PyClass, PyTypeCheck};

use neardup::{DecidedGroup, Error, SignedShard, StepValue};

use crate::errors::{keys_to_py, to_py};

/// A Python class holding one step's value (a [`neardup::StepValue`]), frozen: [`step_value!`]
/// implements it and gives the class the methods every value has.
pub(crate) trait PyStepValue: PyClass<Frozen = True> + PyTypeCheck + Sync {
    /// The library's value.
    type Value: StepValue + PartialEq + Send + Sync;
    /// The value held.
    fn value(&self) -> &Self::Value;
    /// The class holding a value read back from a file or bytes (which carry no statistics).
    fn read_back(value: Self::Value) -> Self;
}

/// A value's error as its Python exception. A key table's or hot keys' own errors keep their
/// message, which names the file: saving or reading a value is no stage of a run to name.
fn value_error(e: Error) -> PyErr {
    match e {
        Error::Keys(k) => keys_to_py(k),
        other => to_py(other),
    }
}

/// `save`: the value written at `path` as the step's `output=` writes it, with the GIL released.
pub(crate) fn save<T: PyStepValue>(py: Python<'_>, this: &T, path: &Path) -> PyResult<()> {
    py.detach(|| this.value().save(path)).map_err(value_error)
}

/// `load`: the value saved at `path`, checked.
pub(crate) fn load<T: PyStepValue>(py: Python<'_>, path: &Path) -> PyResult<T> {
    let value = py.detach(|| T::Value::load(path)).map_err(value_error)?;
    Ok(T::read_back(value))
}

/// `to_bytes`: the value as one checksummed buffer.
pub(crate) fn to_bytes<'py, T: PyStepValue>(
    py: Python<'py>,
    this: &T,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = py.detach(|| this.value().to_bytes()).map_err(value_error)?;
    Ok(PyBytes::new(py, &bytes))
}

/// `from_bytes`: the value of the bytes of `to_bytes`, verified.
pub(crate) fn from_bytes<T: PyStepValue>(py: Python<'_>, data: &[u8]) -> PyResult<T> {
    let value = py
        .detach(|| T::Value::from_bytes(data))
        .map_err(value_error)?;
    Ok(T::read_back(value))
}

/// `__eq__`: a value of the same class holding an equal value (statistics aside).
pub(crate) fn equal<T: PyStepValue>(this: &T, other: &Bound<'_, PyAny>) -> bool {
    other
        .cast::<T>()
        .is_ok_and(|o| o.get().value() == this.value())
}

/// What `__reduce__` returns: the function rebuilding a value, and its arguments (the value's
/// class name and bytes).
pub(crate) type Reduced<'py> = (Bound<'py, PyAny>, (&'static str, Bound<'py, PyBytes>));

/// `__reduce__`: ``neardup._from_bytes(class name, bytes)`` rebuilds the value.
pub(crate) fn reduce<'py, T: PyStepValue>(py: Python<'py>, this: &T) -> PyResult<Reduced<'py>> {
    let rebuild = py.import("neardup")?.getattr("_from_bytes")?;
    // The class's name in `neardup`, by which `_from_bytes` finds it.
    Ok((rebuild, (<T as PyClass>::NAME, to_bytes(py, this)?)))
}

/// Makes `$class`, a frozen `#[pyclass]` holding a step's value in its field `inner`, a
/// [`PyStepValue`], and gives it the methods every step value has: `save(path)`,
/// `load(path)`, `to_bytes()`, `from_bytes(data)`, `__eq__` and `__reduce__` (pickling through
/// the bytes). Its other fields are given as they are for a value read back:
/// `step_value!(KeyTable { inner: neardup::keys::KeyTable, stats: None })`. A new value class is
/// its struct, its own getters, this line, its `add_class` in `lib.rs`, its stub in
/// `_native.pyi` and its name in `neardup._from_bytes`'s docs. (A class has more than one
/// `#[pymethods]` block through pyo3's `multiple-pymethods` feature.)
macro_rules! step_value {
    ($class:ident { inner: $value:ty $(, $field:ident: $read_back:expr)* $(,)? }) => {
        impl $crate::values::PyStepValue for $class {
            type Value = $value;
            fn value(&self) -> &$value {
                &self.inner
            }
            fn read_back(inner: $value) -> Self {
                $class { inner $(, $field: $read_back)* }
            }
        }

        #[pyo3::pymethods]
        impl $class {
            /// Writes the value at ``path`` as the step that makes it writes its ``output=`` (the
            /// file or directory the CLI's command of the same name writes), published all or
            /// nothing. It replaces only what that step wrote there earlier (or an empty file).
            fn save(&self, py: pyo3::Python<'_>, path: std::path::PathBuf) -> pyo3::PyResult<()> {
                $crate::values::save(py, self, &path)
            }

            /// Reads a value saved at ``path`` (by :meth:`save`, the step's ``output=`` or the
            /// CLI), verifying it: :class:`CorruptFileError` when damaged.
            #[staticmethod]
            fn load(py: pyo3::Python<'_>, path: std::path::PathBuf) -> pyo3::PyResult<$class> {
                $crate::values::load(py, &path)
            }

            /// The value as one checksummed buffer (``docs/formats.md``).
            fn to_bytes<'py>(
                &self,
                py: pyo3::Python<'py>,
            ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyBytes>> {
                $crate::values::to_bytes(py, self)
            }

            /// Reads the bytes of :meth:`to_bytes`, verifying them: :class:`CorruptFileError`
            /// when damaged or truncated.
            #[staticmethod]
            fn from_bytes(py: pyo3::Python<'_>, data: &[u8]) -> pyo3::PyResult<$class> {
                $crate::values::from_bytes(py, data)
            }

            fn __eq__(&self, other: &pyo3::Bound<'_, pyo3::PyAny>) -> bool {
                $crate::values::equal(self, other)
            }

            /// Pickles the value through :meth:`to_bytes` (statistics, if any, are not carried).
            fn __reduce__<'py>(
                &self,
                py: pyo3::Python<'py>,
            ) -> pyo3::PyResult<$crate::values::Reduced<'py>> {
                $crate::values::reduce(py, self)
            }
        }
    };
}
pub(crate) use step_value;

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

step_value!(Signed {
    inner: SignedShard,
    stats: None
});

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

step_value!(Decided {
    inner: DecidedGroup
});

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
