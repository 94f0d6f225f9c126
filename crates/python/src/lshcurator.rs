//! The native half of `neardup.lshcurator`: lshcurator 0.2.3's `process_corpus` and
//! `compute_bucket_keys` on the `--compat lshcurator` preset.

use std::collections::VecDeque;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, bounded};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use neardup::corpus::{
    Chunk, ChunkRange, ChunkReader, Format, InputFile, Projection, ReadOptions, Reason, SampleText,
    TextSelector, read_chunk,
};
use neardup::dedup::{Decision, SampleAddr};
use neardup::sketch::{NO_KEY, is_blank, py_strip};
use neardup::{Config, Error, ShingleUnit};

use crate::errors::to_py;

/// lshcurator's settings (its `CuratorConfig` and `process_corpus` arguments).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct CuratorSettings {
    inputs: Vec<String>,
    fields: Vec<String>,
    shingle_k: usize,
    shingle_step: usize,
    bands: usize,
    rows_per_band: usize,
    compute_mode: String,
    similarity_threshold: f64,
    max_representatives_per_bucket: Option<usize>,
    filter_low_freq_bucket_keys: u32,
    max_workers: usize,
}

/// The preset configuration for `s`, and the inputs it reads.
fn lshcurator_config(s: &CuratorSettings) -> PyResult<(Config, Vec<InputFile>)> {
    let mut c = Config::default();
    c.input.inputs = s.inputs.clone();
    c.input.fields = s.fields.clone();
    c.sketch.tokenize = match s.compute_mode.as_str() {
        "char" => ShingleUnit::Char,
        "byte" => ShingleUnit::Byte,
        other => {
            return Err(PyValueError::new_err(format!(
                "Invalid compute_mode: {other}. Must be one of {{'char', 'byte'}}"
            )));
        }
    };
    c.sketch.shingle = s.shingle_k;
    c.sketch.step = s.shingle_step;
    c.sketch.bands = Some(s.bands);
    c.sketch.rows = Some(s.rows_per_band);
    c.dedup.threshold = s.similarity_threshold;
    c.keys.min_key_count = s.filter_low_freq_bucket_keys;
    c.run.threads = s.max_workers;
    let mut c = c.lshcurator();
    // lshcurator creates a bucket with its first representative whatever the bound, so a bound
    // of 0 acts as 1.
    c.dedup.max_reps = s.max_representatives_per_bucket.map(|m| m.max(1));
    let (files, _problems) = neardup::discover_inputs(&c).map_err(to_py)?;
    // lshcurator strips JSONL values before signing them but signs Parquet values as they are:
    // the preset's trim matches the first, and an all-Parquet corpus gets the second exactly.
    if files.iter().all(|f| f.format == Format::Parquet) {
        c.sketch.trim = false;
    }
    c.validate().map_err(to_py)?;
    Ok((c, files))
}

/// Reads the texts lshcurator yields — every non-blank sample, stripped when it comes from
/// JSONL — in input order, with their addresses.
struct TextReader {
    files: Vec<InputFile>,
    options: ReadOptions,
    file: usize,
    blocks: Option<ChunkReader>,
    ready: VecDeque<(SampleAddr, String)>,
}

impl TextReader {
    fn new(files: Vec<InputFile>, selector: TextSelector) -> TextReader {
        TextReader {
            files,
            options: ReadOptions::new(selector, Projection::TextOnly),
            file: 0,
            blocks: None,
            ready: VecDeque::new(),
        }
    }

    /// The next text, or None at the end of the inputs. A file that stops being readable ends
    /// its texts there, as it ends its decisions.
    fn next_text(&mut self) -> Option<(SampleAddr, String)> {
        loop {
            if let Some(t) = self.ready.pop_front() {
                return Some(t);
            }
            let file = self.files.get(self.file)?;
            let blocks = self.blocks.get_or_insert_with(|| {
                let chunk = Chunk {
                    file: self.file,
                    seq: 0,
                    range: ChunkRange::Whole,
                };
                read_chunk(file, &chunk, &self.options)
            });
            match blocks.next() {
                Some(Ok(block)) => {
                    let strip = file.format == Format::Jsonl;
                    let index = self.file as u32;
                    let ready = &mut self.ready;
                    block.for_each_sample(&self.options.selector, |sample| {
                        if let SampleText::Text(text) = sample.text
                            && !is_blank(&text)
                        {
                            let addr = SampleAddr {
                                file: index,
                                record: block.first_record + sample.record as u64,
                                field: sample.field,
                            };
                            let text = if strip { py_strip(&text) } else { &text };
                            ready.push_back((addr, text.to_owned()));
                        }
                    });
                }
                Some(Err(_)) | None => {
                    self.blocks = None;
                    self.file += 1;
                }
            }
        }
    }
}

/// `Curator.process_corpus`'s `(text, keep)` pairs, in its order.
#[pyclass(module = "neardup._native")]
pub struct CorpusStream {
    hot: Receiver<bool>,
    decisions: Receiver<Decision>,
    thread: Option<JoinHandle<Result<(), Error>>>,
    /// Only ever used by the thread holding the object mutably; the lock makes it `Sync`.
    texts: std::sync::Mutex<TextReader>,
}

impl CorpusStream {
    /// The run's outcome once its thread has ended.
    fn join(&mut self) -> PyResult<()> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| PyRuntimeError::new_err("the neardup run panicked"))?
                .map_err(to_py),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl CorpusStream {
    /// Waits for stage 1 (GIL released): False when no bucket key is hot, so lshcurator yields
    /// nothing.
    fn has_hot_keys(&mut self, py: Python<'_>) -> PyResult<bool> {
        let hot = self.hot.clone();
        match py.detach(move || hot.recv()) {
            Ok(hot) => Ok(hot),
            Err(_) => {
                py.detach(|| self.join())?;
                Err(PyRuntimeError::new_err(
                    "the neardup run ended before stage 1 did",
                ))
            }
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<(String, bool)>> {
        let found = py.detach(|| -> Result<Option<(String, bool)>, String> {
            loop {
                let Ok(d) = self.decisions.recv() else {
                    return Ok(None);
                };
                if matches!(d.reason, Reason::Empty | Reason::Error) {
                    continue;
                }
                let mut texts = self.texts.lock().unwrap_or_else(|e| e.into_inner());
                return match texts.next_text() {
                    Some((addr, text)) if addr == d.addr => Ok(Some((text, d.keep))),
                    other => Err(format!(
                        "the texts read ({:?}) and the decisions made ({:?}) went out of step",
                        other.map(|(a, _)| a),
                        d.addr
                    )),
                };
            }
        });
        match found.map_err(PyRuntimeError::new_err)? {
            Some(pair) => Ok(Some(pair)),
            None => {
                py.detach(|| self.join())?;
                Ok(None)
            }
        }
    }
}

/// Starts `Curator.process_corpus`: stage 1, then (when a key is hot) stage 2 on a background
/// thread, decisions flowing through a bounded channel.
#[pyfunction]
pub fn process_corpus(settings: CuratorSettings) -> PyResult<CorpusStream> {
    let (config, files) = lshcurator_config(&settings)?;
    let keys = neardup::keys_config(&config).map_err(to_py)?;
    let apply = neardup::stage2_config(&config).map_err(to_py)?;
    let texts = TextReader::new(files.clone(), keys.selector.clone());
    let (hot_tx, hot_rx) = bounded(1);
    let (tx, rx) = bounded(4096);
    let thread = std::thread::Builder::new()
        .name("neardup-lshcurator".into())
        .spawn(move || -> Result<(), Error> {
            // The stream cannot be cancelled: the caller stops by no longer iterating.
            let control = neardup::exec::StepControl::default();
            let out = neardup::keys::run_keys(&files, 0, &keys, &control)?;
            let hot = !out.hot.is_empty();
            let _ = hot_tx.send(hot);
            if hot {
                // A closed channel only means the caller stopped iterating.
                neardup::dedup::run_dedup(&out.files, &out.mask, &apply, &control, &mut |d| {
                    let _ = tx.send(d.clone());
                })?;
            }
            Ok(())
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the run's thread: {e}")))?;
    Ok(CorpusStream {
        hot: hot_rx,
        decisions: rx,
        thread: Some(thread),
        texts: std::sync::Mutex::new(texts),
    })
}

/// `Curator.compute_bucket_keys`: every non-blank sample's band keys, shape `(samples, bands)`,
/// and each input's path and number of rows, in input order.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn compute_bucket_keys<'py>(
    py: Python<'py>,
    settings: CuratorSettings,
) -> PyResult<(Bound<'py, PyArray2<u64>>, Vec<(String, u64)>)> {
    let (config, files) = lshcurator_config(&settings)?;
    let (table, _stats) = py
        .detach(|| {
            neardup::Step::run(
                &neardup::KeysStep::with_files(&config, &files, 0)?,
                &neardup::RunControl::default(),
            )
        })
        .map_err(to_py)?;
    let bands = table.columns();
    let mut keys = Vec::with_capacity(table.keys().len());
    let mut per_file = Vec::with_capacity(table.files().len());
    let mut row = 0usize;
    for f in table.files() {
        let mut kept = 0u64;
        for _ in 0..f.rows {
            let r = table.row(row);
            row += 1;
            // Blank samples have a row of "no key"; lshcurator has no row for them.
            if r.first().is_some_and(|&k| k != NO_KEY) {
                keys.extend_from_slice(r);
                kept += 1;
            }
        }
        per_file.push((f.input.path.display().to_string(), kept));
    }
    let n = keys.len() / bands.max(1);
    let array = PyArray1::from_vec(py, keys).reshape([n, bands])?;
    Ok((array, per_file))
}
