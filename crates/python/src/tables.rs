//! Stage 1's values: `KeyTable` (stage 1 of one shard) and `HotKeys` (the merged counts), with
//! their keys as numpy views; their files, bytes and pickling are every step value's
//! (`values.rs`), the steps that make them are in `steps.rs`.

use numpy::ndarray::ArrayView2;
use numpy::{PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::keys_to_py;
use crate::values::step_value;

/// Makes a numpy view read-only: the memory belongs to an immutable value.
fn read_only<'py, T>(array: Bound<'py, T>) -> PyResult<Bound<'py, T>> {
    array
        .as_any()
        .getattr("flags")?
        .setattr("writeable", false)?;
    Ok(array)
}

/// Stage 1's product for one shard: one row of ``uint64`` keys per sample (a bucket key per LSH
/// band, then the content key unless ``exact=False``; 0 is "no key"), and the input files the
/// rows come from.
///
/// ``table.keys`` is a read-only numpy view of the rows, shape ``(rows, columns)``, sharing the
/// table's memory (no copy). Save it with :meth:`save` / :meth:`to_bytes` (the format of
/// ``neardup keys --out``, ``docs/formats.md``) and read it back with :meth:`load` /
/// :meth:`from_bytes`.
#[pyclass(frozen, module = "neardup")]
pub struct KeyTable {
    pub inner: neardup::keys::KeyTable,
    /// Stage 1's statistics, for a table just computed.
    stats: Option<serde_json::Value>,
}

step_value!(KeyTable {
    inner: neardup::keys::KeyTable,
    stats: None
});

impl KeyTable {
    /// A table just computed, with stage 1's statistics.
    pub(crate) fn computed(inner: neardup::keys::KeyTable, stats: serde_json::Value) -> KeyTable {
        KeyTable {
            inner,
            stats: Some(stats),
        }
    }
}

#[pymethods]
impl KeyTable {
    /// The rows as a read-only ``numpy.uint64`` array of shape ``(rows, columns)`` that shares
    /// the table's memory.
    #[getter]
    fn keys<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyArray2<u64>>> {
        let table = &slf.get().inner;
        let view = ArrayView2::from_shape((table.rows(), table.columns()), table.keys())
            .expect("a table's keys are rows x columns");
        // SAFETY: the keys live in the frozen table, which the array keeps alive as its base and
        // which never changes them.
        let array = unsafe { PyArray2::borrow_from_array(&view, slf.clone().into_any()) };
        read_only(array)
    }

    /// Number of rows (samples with a text).
    #[getter]
    fn rows(&self) -> usize {
        self.inner.rows()
    }

    /// Keys per row: ``bands``, plus one content-key column unless ``exact=False``.
    #[getter]
    fn columns(&self) -> usize {
        self.inner.columns()
    }

    /// Band-key columns (the first columns of every row).
    #[getter]
    fn bands(&self) -> usize {
        self.inner.layout().bands
    }

    /// This table's shard number: the rows of all shards are counted in shard order.
    #[getter]
    fn shard(&self) -> u32 {
        self.inner.shard()
    }

    /// The input files, in row order: a list of dicts with ``path``, ``records`` (records read)
    /// and ``rows`` (rows contributed).
    #[getter]
    fn files<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for f in self.inner.files() {
            let d = PyDict::new(py);
            d.set_item("path", f.input.path.to_string_lossy())?;
            d.set_item("records", f.records)?;
            d.set_item("rows", f.rows)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Stage 1's statistics (as in a run report's ``stage1``) for a table made by
    /// :func:`compute_keys`; None for a table read back.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.stats
            .as_ref()
            .map(|s| crate::json_to_py(py, s))
            .transpose()
    }

    fn __len__(&self) -> usize {
        self.inner.rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyTable(shard={}, rows={}, columns={}, files={})",
            self.inner.shard(),
            self.inner.rows(),
            self.inner.columns(),
            self.inner.files().len()
        )
    }
}

/// The hot keys of a run: the keys seen more than ``min_key_count`` times across all shards'
/// tables, sorted, with the settings they were counted under.
///
/// ``hot.keys`` is a read-only ``numpy.uint64`` view (no copy). Save it with :meth:`save` /
/// :meth:`to_bytes` (the format of ``neardup hot --out``) and read it back with :meth:`load` /
/// :meth:`from_bytes`.
#[pyclass(frozen, module = "neardup")]
pub struct HotKeys {
    pub inner: neardup::keys::HotKeys,
    /// The merge's counts, for hot keys just computed.
    stats: Option<serde_json::Value>,
}

step_value!(HotKeys {
    inner: neardup::keys::HotKeys,
    stats: None
});

impl HotKeys {
    /// Hot keys just computed, with the merge's counts.
    pub(crate) fn computed(inner: neardup::keys::HotKeys, stats: serde_json::Value) -> HotKeys {
        HotKeys {
            inner,
            stats: Some(stats),
        }
    }
}

#[pymethods]
impl HotKeys {
    /// The hot keys, ascending, as a read-only ``numpy.uint64`` array sharing their memory.
    #[getter]
    fn keys<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let keys = numpy::ndarray::ArrayView1::from(slf.get().inner.keys());
        // SAFETY: as for KeyTable.keys: the frozen value owns the keys and outlives the view.
        let array = unsafe { PyArray1::borrow_from_array(&keys, slf.clone().into_any()) };
        read_only(array)
    }

    /// The groups stage 2 is planned in (``neardup.decide`` runs once per group): 1 without a
    /// plan.
    #[getter]
    fn groups(&self) -> u32 {
        self.inner.groups()
    }

    /// A checksum of the file's bytes: the steps of a distributed stage 2 record it in their
    /// manifests, and each refuses outputs made with another hot-key file.
    #[getter]
    fn fingerprint(&self) -> PyResult<u64> {
        self.inner.fingerprint().map_err(keys_to_py)
    }

    /// A key is hot when seen more than this many times.
    #[getter]
    fn min_key_count(&self) -> u32 {
        self.inner.min_count()
    }

    /// The merge's counts (keys, distinct keys, hot keys, …) for hot keys made by
    /// :func:`hot_keys`; None for hot keys read back.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.stats
            .as_ref()
            .map(|s| crate::json_to_py(py, s))
            .transpose()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: u64) -> bool {
        self.inner.contains(key)
    }

    fn __repr__(&self) -> String {
        format!(
            "HotKeys(keys={}, min_key_count={}, groups={})",
            self.inner.len(),
            self.inner.min_count(),
            self.inner.groups()
        )
    }
}
