//! The decisions of an in-memory table's rows as columns (`neardup.dedup_table`'s result),
//! filled by `frames.rs` as a run decides and handed over by a `Run` (`run.rs`).

use neardup::corpus::Reason;
use neardup::dedup::Decision;
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;

/// The ids of a table's rows and of the rows they duplicate, when an id column is set.
pub(crate) type Ids = (Vec<Option<String>>, Vec<Option<String>>);

/// Dropped rows that duplicate a record of an indexed run: (row, file, record).
pub(crate) type IndexedDups = Vec<(u64, String, u64)>;

/// A table's decisions as Python gets them: `(keep, reason codes, reason names, dup_of,
/// similarity, cluster, ids)`, the columns as numpy arrays.
pub(crate) type DecisionColumns<'py> = (
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<u8>>,
    Vec<&'static str>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<i64>>,
    Option<Ids>,
);

/// The decisions of a table's rows, as columns: what `neardup.dedup_table` turns into a
/// `pyarrow.Table`.
pub(crate) struct TableDecisions {
    pub(crate) keep: Vec<bool>,
    /// [`Reason`] as its index in [`REASONS`].
    pub(crate) reason: Vec<u8>,
    /// The row a dropped row duplicates; -1 for none (kept rows, and duplicates of a record of
    /// an indexed run, which `dup_of_input` names).
    pub(crate) dup_of: Vec<i64>,
    /// NaN for none.
    pub(crate) similarity: Vec<f64>,
    /// The row of the kept copy its set resolves to (its own when kept); -1 when that copy is
    /// an indexed run's.
    pub(crate) cluster: Vec<i64>,
    /// The ids, when an id column is set: the row's, and the one of the row it duplicates.
    pub(crate) ids: Option<Ids>,
    /// Dropped rows that duplicate a record of an indexed run (`against`): (row, file, record).
    pub(crate) indexed_dups: IndexedDups,
    /// The JSON of the run's report.
    pub(crate) report: String,
}

impl TableDecisions {
    /// The decision columns, refused when a row got none (`of`: the rows', for the message).
    pub(crate) fn columns<'py>(
        &mut self,
        py: Python<'py>,
        of: impl std::fmt::Display,
    ) -> PyResult<DecisionColumns<'py>> {
        if let Some(row) = self.reason.iter().position(|r| *r == u8::MAX) {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "no decision was made for row {row} of {of} (a bug: please report it)"
            )));
        }
        Ok((
            std::mem::take(&mut self.keep).into_pyarray(py),
            std::mem::take(&mut self.reason).into_pyarray(py),
            REASONS.to_vec(),
            std::mem::take(&mut self.dup_of).into_pyarray(py),
            std::mem::take(&mut self.similarity).into_pyarray(py),
            std::mem::take(&mut self.cluster).into_pyarray(py),
            self.ids.take(),
        ))
    }

    /// Columns for `rows` rows, none decided yet.
    pub(crate) fn new(rows: usize, has_ids: bool) -> TableDecisions {
        TableDecisions {
            keep: vec![true; rows],
            reason: vec![u8::MAX; rows],
            dup_of: vec![-1; rows],
            similarity: vec![f64::NAN; rows],
            cluster: vec![-1; rows],
            ids: has_ids.then(|| (vec![None; rows], vec![None; rows])),
            indexed_dups: Vec::new(),
            report: String::new(),
        }
    }

    /// Writes `decision` into `row`; `dup_of` and `cluster` are its addresses as the caller
    /// numbers rows (`None`: no row of these columns).
    pub(crate) fn record(
        &mut self,
        row: usize,
        decision: &Decision,
        dup_of: Option<i64>,
        cluster: Option<i64>,
    ) {
        self.keep[row] = decision.keep;
        self.reason[row] = reason_code(decision.reason);
        if let Some(s) = decision.similarity {
            self.similarity[row] = s;
        }
        if let Some(dup_of) = dup_of {
            self.dup_of[row] = dup_of;
        }
        if let Some(cluster) = cluster {
            self.cluster[row] = cluster;
        }
        if let Some((ids, dup_ids)) = &mut self.ids {
            ids[row].clone_from(&decision.id);
            dup_ids[row].clone_from(&decision.dup_of_id);
        }
    }

    /// Makes the columns reach `row` (a stream's rows are known as they are decided).
    pub(crate) fn reach(&mut self, row: usize) {
        if row < self.keep.len() {
            return;
        }
        let n = row + 1;
        self.keep.resize(n, true);
        self.reason.resize(n, u8::MAX);
        self.dup_of.resize(n, -1);
        self.similarity.resize(n, f64::NAN);
        self.cluster.resize(n, -1);
        if let Some((ids, dup_ids)) = &mut self.ids {
            ids.resize(n, None);
            dup_ids.resize(n, None);
        }
    }
}

/// The names of the reasons, by their code in [`TableDecisions::reason`].
const REASONS: [&str; 5] = ["unique", "near", "exact", "empty", "error"];

/// The code of a reason in [`TableDecisions::reason`].
fn reason_code(r: Reason) -> u8 {
    match r {
        Reason::Unique => 0,
        Reason::Near => 1,
        Reason::Exact => 2,
        Reason::Empty => 3,
        Reason::Error => 4,
    }
}
