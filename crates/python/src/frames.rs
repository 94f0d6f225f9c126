//! Tables in memory (`neardup.dedup_table`): anything that exports an Arrow stream (the Arrow
//! PyCapsule interface: pyarrow, polars, DuckDB, pandas through pyarrow, a Hugging Face dataset's
//! Arrow table) is deduplicated in place, both stages in Rust with the GIL released, and the
//! decisions come back as columns aligned with its rows.
//!
//! A table's batches are imported once and kept (no copy: they share the exporter's buffers), so
//! both stages read the same memory. A one-shot stream is read into memory the same way; one too
//! large for memory is handed in as a callable that returns a fresh stream for each stage
//! ([`start_dedup_stream`]), read batch by batch.

use std::ffi::CStr;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{
    Array, ArrayRef, LargeStringArray, RecordBatch, RecordBatchReader, StringArray, StringViewArray,
};
use arrow_schema::{DataType, Schema};
use neardup_online::{DocId, Text};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use neardup::corpus::ArrowTable;
use neardup::keys::{InputFailure, KeysError};
use neardup::{Error, Pipeline, RunControl};

use crate::errors::to_py;
use crate::run::{Output, Run};
use crate::settings::{Scope, config_from};
use crate::table_decisions::{DecisionColumns, IndexedDups, TableDecisions};

const STREAM_CAPSULE: &CStr = c"arrow_array_stream";

/// Reads the Arrow stream `data` exports (`__arrow_c_stream__`) into its batches, without
/// copying their buffers.
fn import_batches(data: &Bound<'_, PyAny>) -> PyResult<(Arc<Schema>, Vec<RecordBatch>)> {
    let reader = import_stream(data)?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))?;
    Ok((schema, batches))
}

/// The Arrow stream `data` exports (`__arrow_c_stream__`), not read yet.
fn import_stream(data: &Bound<'_, PyAny>) -> PyResult<RecordBatchStreamReader> {
    if !data.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(format!(
            "a table must export an Arrow stream (__arrow_c_stream__): a pyarrow Table or \
             RecordBatchReader, a polars or pandas DataFrame, a datasets.Dataset, a DuckDB \
             relation; got {}",
            data.get_type().name()?
        )));
    }
    let capsule = data.call_method1("__arrow_c_stream__", (data.py().None(),))?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
    // SAFETY: the capsule holds an exported Arrow stream, which is moved out (the capsule's copy
    // is marked released).
    unsafe { RecordBatchStreamReader::from_raw(ptr.as_ptr().cast()) }
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))
}

/// The texts of column `column` of a table (any type `neardup.drop_duplicates` takes) and the
/// ids of `id_column` (strings or integers), row by row: what `Index.check_table` checks. A null
/// text is an empty one, as in a table run; a null id is none (the index gives one).
pub(crate) fn column_of_table(
    data: &Bound<'_, PyAny>,
    column: &str,
    id_column: Option<&str>,
) -> PyResult<(Vec<ArrayRef>, Vec<Option<DocId>>)> {
    let py = data.py();
    let source = py
        .import("neardup.frames")?
        .getattr("_as_arrow")?
        .call1((data,))?
        .get_item(0)?;
    let (schema, batches) = import_batches(&source)?;
    let text_at = schema.index_of(column).map_err(|_| {
        PyKeyError::new_err(format!(
            "the table has no column {column:?}; its columns: {}",
            columns_list(&schema)
        ))
    })?;
    let text_type = schema.field(text_at).data_type();
    if !is_text(text_type) {
        return Err(PyTypeError::new_err(format!(
            "column {column:?} holds {text_type}, not strings"
        )));
    }
    let texts: Vec<ArrayRef> = batches.iter().map(|b| b.column(text_at).clone()).collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let Some(id_column) = id_column else {
        return Ok((texts, vec![None; rows]));
    };
    let id_at = schema.index_of(id_column).map_err(|_| {
        PyKeyError::new_err(format!(
            "id_column: the table has no column {id_column:?}; its columns: {}",
            columns_list(&schema)
        ))
    })?;
    let mut ids = Vec::with_capacity(rows);
    for b in &batches {
        let a = b.column(id_at);
        let str_ids = |it: &mut dyn Iterator<Item = Option<&str>>, ids: &mut Vec<Option<DocId>>| {
            ids.extend(it.map(|s| s.map(|s| DocId::Str(s.to_string()))));
        };
        if let Some(a) = a.as_any().downcast_ref::<StringArray>() {
            str_ids(&mut a.iter(), &mut ids);
        } else if let Some(a) = a.as_any().downcast_ref::<LargeStringArray>() {
            str_ids(&mut a.iter(), &mut ids);
        } else if let Some(a) = a.as_any().downcast_ref::<StringViewArray>() {
            str_ids(&mut a.iter(), &mut ids);
        } else if a.data_type().is_integer() {
            for i in 0..a.len() {
                if a.is_null(i) {
                    ids.push(None);
                    continue;
                }
                let id = int_at(a.as_ref(), i).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "id_column {id_column:?}: an id past the range of a 64-bit signed integer"
                    ))
                })?;
                ids.push(Some(DocId::Int(id)));
            }
        } else {
            return Err(PyTypeError::new_err(format!(
                "id_column {id_column:?} holds {}, not strings or integers",
                a.data_type()
            )));
        }
    }
    Ok((texts, ids))
}

/// Integer `i` of an integer array of any width, as an i64 (None past i64's range).
fn int_at(a: &dyn Array, i: usize) -> Option<i64> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    match a.data_type() {
        DataType::Int8 => Some(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => Some(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => Some(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => Some(a.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Some(a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => Some(a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => Some(a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => i64::try_from(a.as_primitive::<UInt64Type>().value(i)).ok(),
        _ => None,
    }
}

/// The rows of text arrays (string, large string, string view, or a dictionary of them) as
/// texts; a null is an empty text.
pub(crate) fn column_texts(arrays: &[ArrayRef]) -> Vec<Text<'_>> {
    let mut out = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
    for a in arrays {
        push_texts(a.as_ref(), &mut out);
    }
    out
}

fn push_texts<'a>(a: &'a dyn Array, out: &mut Vec<Text<'a>>) {
    // A null is no text, as `None` is to `Index.check` and a null field to the file runner.
    let text = |s: Option<&'a str>| s.map_or(Text::Unreadable, Text::Str);
    if let Some(a) = a.as_any().downcast_ref::<StringArray>() {
        out.extend(a.iter().map(text));
    } else if let Some(a) = a.as_any().downcast_ref::<LargeStringArray>() {
        out.extend(a.iter().map(text));
    } else if let Some(a) = a.as_any().downcast_ref::<StringViewArray>() {
        out.extend(a.iter().map(text));
    } else if let Some(d) = a.as_any_dictionary_opt() {
        let mut values = Vec::with_capacity(d.values().len());
        push_texts(d.values().as_ref(), &mut values);
        for (i, k) in d.normalized_keys().into_iter().enumerate() {
            out.push(if a.is_null(i) {
                Text::Unreadable
            } else {
                values.get(k).copied().unwrap_or(Text::Unreadable)
            });
        }
    }
}

/// Whether `t` holds texts: strings of any offset width, string views, or a dictionary of them.
fn is_text(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, values) => is_text(values),
        _ => false,
    }
}

/// The type of column `name` (a top-level column, or `struct.field` one level down), if the
/// table has it.
fn column_type<'a>(schema: &'a Schema, name: &str) -> Option<&'a DataType> {
    if let Ok(f) = schema.field_with_name(name) {
        return Some(f.data_type());
    }
    let (outer, inner) = name.split_once('.')?;
    match schema.field_with_name(outer).ok()?.data_type() {
        DataType::Struct(children) => children
            .iter()
            .find(|c| c.name() == inner)
            .map(|c| c.data_type()),
        _ => None,
    }
}

fn columns_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{:?}", f.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses a text column the table lacks or that does not hold strings, and an id or rank
/// column it lacks, naming the column and the table's columns.
fn check_columns(
    schema: &Schema,
    texts: &[String],
    id: Option<&str>,
    rank: Option<&str>,
) -> PyResult<()> {
    for name in texts {
        match column_type(schema, name) {
            None => {
                return Err(PyKeyError::new_err(format!(
                    "the table has no column {name:?}; its columns: {}",
                    columns_list(schema)
                )));
            }
            Some(t) if !is_text(t) => {
                return Err(PyTypeError::new_err(format!(
                    "column {name:?} holds {t}, not strings: give a string column (or cast \
                     it, e.g. pyarrow.compute.cast(table[{name:?}], pyarrow.string()))"
                )));
            }
            Some(_) => {}
        }
    }
    for (what, name) in [("id_field", id), ("prefer", rank)] {
        if let Some(name) = name
            && column_type(schema, name).is_none()
        {
            return Err(PyKeyError::new_err(format!(
                "{what}: the table has no column {name:?}; its columns: {}",
                columns_list(schema)
            )));
        }
    }
    Ok(())
}

/// Starts `neardup.dedup_table`: both stages over the table `data` exports, on a thread of its
/// own. `settings` holds `fields` (the text columns) and the other settings by name.
#[pyfunction]
#[pyo3(signature = (data, settings = None))]
pub fn start_dedup_table(
    data: &Bound<'_, PyAny>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = table_config(settings)?;
    let (schema, batches) = import_batches(data)?;
    check_columns(
        &schema,
        &config.input.fields,
        config.input.id_field.as_deref(),
        rank_column(&config).as_deref(),
    )?;
    let table = ArrowTable::register(&data.get_type().name()?.to_string(), batches);
    spawn_table_run(config, table)
}

/// Starts `neardup.dedup_table` over a stream too large for memory: `open` is a callable that
/// returns a fresh Arrow stream (an object with `__arrow_c_stream__`) each time it is called.
/// It is called now (for the schema, and that stream is stage 1's) and once more for each later
/// pass, by the run's thread, which takes the GIL for the call only; the batches are read with
/// the GIL released.
#[pyfunction]
#[pyo3(signature = (open, settings = None))]
pub fn start_dedup_stream(
    open: &Bound<'_, PyAny>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Run> {
    let config = table_config(settings)?;
    let first = open_stream(open)?;
    let schema = first.schema();
    check_columns(
        &schema,
        &config.input.fields,
        config.input.id_field.as_deref(),
        rank_column(&config).as_deref(),
    )?;
    let name = format!("stream of {}", open.get_type().name()?);
    let first = Mutex::new(Some(first));
    let open: Py<PyAny> = open.clone().unbind();
    let opener = move || -> Result<neardup::corpus::StreamBatches, String> {
        let reader = match first.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(reader) => reader,
            None => Python::attach(|py| open_stream(open.bind(py))).map_err(|e| e.to_string())?,
        };
        Ok(Box::new(reader.map(|b| b.map_err(|e| e.to_string()))))
    };
    let table = ArrowTable::register_stream(&name, schema, Arc::new(opener));
    spawn_table_run(config, table)
}

/// Calls `open` for a fresh stream and imports it, checking that it is one.
fn open_stream(open: &Bound<'_, PyAny>) -> PyResult<RecordBatchStreamReader> {
    let data = open.call0()?;
    import_stream(&data).map_err(|e| {
        PyTypeError::new_err(format!(
            "the callable handed to dedup_table must return an Arrow stream each time it is \
             called: {e}"
        ))
    })
}

/// Runs both stages over a registered table on a thread of its own.
fn spawn_table_run(config: neardup::Config, table: ArrowTable) -> PyResult<Run> {
    // Against saved indexes, the indexed runs' files are numbered first, then the table.
    let indexed = neardup::against::indexed_names(&config).map_err(to_py)?;
    let has_ids = config.input.id_field.is_some();
    let control = RunControl::watched();
    let (Some(stage1), Some(stage2)) = (control.stage1.clone(), control.stage2.clone()) else {
        unreachable!("a watched control has both stages' counters")
    };
    let pipeline = Pipeline::new(config)
        .map_err(to_py)?
        .with_progress(stage1, stage2)
        .with_cancel(control.cancel.clone());
    let watched = pipeline.config().clone();
    Run::spawn_output("neardup-table", &control, to_py, move || {
        run_table(&pipeline, &table, &indexed, has_ids).map(|d| Output::Table(Box::new(d)))
    })
    .map(|run| run.watching(&watched))
}

/// Runs `pipeline` over `table` and gathers one decision per row.
fn run_table(
    pipeline: &Pipeline,
    table: &ArrowTable,
    indexed: &[String],
    has_ids: bool,
) -> Result<TableDecisions, Error> {
    // A stream's rows are counted as it is read: its columns grow with its decisions.
    let rows = table.rows().unwrap_or(0) as usize;
    let me = indexed.len() as u32;
    let mut d = TableDecisions::new(rows, has_ids);
    if table.rows() == Some(0) {
        // Nothing to decide: a run would fail for want of any text.
        d.report = "null".into();
        return Ok(d);
    }
    let run = pipeline.run_tables(&[table], &mut |x| {
        if x.addr.file != me {
            return;
        }
        let row = x.addr.record as usize;
        d.reach(row);
        let dup_of = match x.dup_of {
            Some(a) if a.file == me => Some(a.record as i64),
            Some(a) => {
                d.indexed_dups.push((
                    row as u64,
                    indexed.get(a.file as usize).cloned().unwrap_or_default(),
                    a.record,
                ));
                None
            }
            None => None,
        };
        let cluster = (x.cluster.file == me).then_some(x.cluster.record as i64);
        d.record(row, x, dup_of, cluster);
    });
    let report = match run {
        // A stream that gave no row at all is an empty table: nothing to decide.
        Err(Error::Keys(KeysError::Input(failure)))
            if table.rows().is_none()
                && matches!(
                    &*failure,
                    InputFailure::NothingRead { records: 0, skipped, unreadable }
                        if skipped.values().all(|n| *n == 0) && unreadable.is_empty()
                ) =>
        {
            d.report = "null".into();
            return Ok(d);
        }
        run => run?,
    };
    d.report = crate::run::report_json(&report);
    Ok(d)
}

/// The decisions `neardup.dedup_table` made, as numpy columns and lists: `(keep, reason codes,
/// reason names, dup_of, similarity, cluster, ids, dup_of_ids, indexed_dups, report JSON)`.
#[pyfunction]
pub fn table_result<'py>(
    py: Python<'py>,
    run: &Run,
) -> PyResult<(DecisionColumns<'py>, IndexedDups, String)> {
    let Output::Table(d) = run.take(py)? else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "this run made no table decisions",
        ));
    };
    let mut d = *d;
    let columns = d.columns(py, "the table")?;
    Ok((columns, d.indexed_dups, d.report))
}

/// A block of a distributed dataset (`neardup.ray.drop_duplicates`) registered under the name
/// its key table records, so that each step, in whichever process it runs, reads the same input.
/// Its columns are checked as [`start_dedup_table`] checks a table's.
fn register_block(
    data: &Bound<'_, PyAny>,
    name: &str,
    config: &neardup::Config,
) -> PyResult<ArrowTable> {
    let (schema, batches) = import_batches(data)?;
    check_columns(
        &schema,
        &config.input.fields,
        config.input.id_field.as_deref(),
        rank_column(config).as_deref(),
    )?;
    ArrowTable::register_as(name, batches).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The settings of a step over a table: `fields_mode="expand"` is refused (a row would get
/// several decisions).
fn table_config(settings: Option<&Bound<'_, PyDict>>) -> PyResult<neardup::Config> {
    let config = config_from(settings, Scope::NoOutputs)?;
    if config.input.fields_mode == neardup::FieldsModeKind::Expand {
        return Err(PyValueError::new_err(
            "fields_mode=\"expand\" makes one sample per column, so a row would have several \
             decisions: a table is deduplicated with its columns joined (fields_mode=\"join\")",
        ));
    }
    Ok(config)
}

/// The column `prefer` ranks by, when it names one.
fn rank_column(config: &neardup::Config) -> Option<String> {
    match &config.dedup.prefer {
        neardup::dedup::Prefer::Field { field, .. } => Some(field.to_string()),
        _ => None,
    }
}

/// Stage 1 of one block of a distributed dataset, registered as `name`: its key table, shard
/// `shard`.
#[pyfunction]
#[pyo3(signature = (data, name, shard, settings = None))]
pub fn block_keys(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    name: &str,
    shard: u32,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<crate::tables::KeyTable> {
    let config = table_config(settings)?;
    let block = register_block(data, name, &config)?;
    let step = neardup::KeysStep::with_files(&config, std::slice::from_ref(block.input()), shard)
        .map_err(to_py)?;
    let (inner, stats) =
        crate::tokenizer::run_watched(py, &config, |control| neardup::Step::run(&step, control))?;
    drop(block);
    Ok(crate::tables::KeyTable::computed(
        inner,
        serde_json::to_value(stats).expect("stats serialise"),
    ))
}

/// The `sign` step of one block, registered as `name` again (the name its key table records).
#[pyfunction]
#[pyo3(signature = (data, name, table, hot, settings = None))]
pub fn block_sign(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    name: &str,
    table: PyRef<'_, crate::tables::KeyTable>,
    hot: PyRef<'_, crate::tables::HotKeys>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<crate::values::Signed> {
    let config = table_config(settings)?;
    let block = register_block(data, name, &config)?;
    let (table, hot) = (&table.inner, &hot.inner);
    let (inner, stats) = crate::tokenizer::run_watched(py, &config, |control| {
        neardup::Step::run(&neardup::SignStep::new(&config, table, hot)?, control)
    })?;
    drop(block);
    Ok(crate::values::Signed {
        inner,
        stats: Some(serde_json::to_value(stats).expect("statistics serialise")),
    })
}

/// The `write` step of one block without outputs: the decisions of its rows, as
/// [`table_result`] gives them; `dup_of` and `cluster` are global row numbers (`row_bases`: the
/// first global row of each block, in block order).
#[pyfunction]
#[pyo3(signature = (data, name, table, hot, decided, row_bases, settings = None))]
#[allow(clippy::too_many_arguments)]
pub fn block_decisions<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    name: &str,
    table: PyRef<'py, crate::tables::KeyTable>,
    hot: PyRef<'py, crate::tables::HotKeys>,
    decided: Vec<PyRef<'py, crate::values::Decided>>,
    row_bases: Vec<u64>,
    settings: Option<&Bound<'py, PyDict>>,
) -> PyResult<(DecisionColumns<'py>, String)> {
    let config = table_config(settings)?;
    let has_ids = config.input.id_field.is_some();
    let block = register_block(data, name, &config)?;
    let rows = block.rows().unwrap_or(0) as usize;
    let shard = table.inner.shard() as usize;
    let inputs: Vec<neardup::DecidedInput<'_>> = decided
        .iter()
        .map(|d| neardup::StepInput::Value(&d.inner))
        .collect();
    let (key_table, hot) = (&table.inner, &hot.inner);
    let mut d = TableDecisions::new(rows, has_ids);
    let global = |a: neardup::corpus::SampleAddr| -> i64 {
        row_bases
            .get(a.file as usize)
            .map_or(-1, |base| (base + a.record) as i64)
    };
    let report = py
        .detach(|| {
            neardup::WriteStep::new(&config, key_table, hot, &inputs)?.run(
                &RunControl::default(),
                &mut |x| {
                    if x.addr.file as usize != shard {
                        return;
                    }
                    let row = x.addr.record as usize;
                    d.record(row, x, x.dup_of.map(global), Some(global(x.cluster)));
                },
            )
        })
        .map_err(to_py)?;
    drop(block);
    let columns = d.columns(py, format!("block {name}"))?;
    Ok((columns, crate::run::report_json(&report)))
}
