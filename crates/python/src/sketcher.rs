//! `neardup.Sketcher`: texts → MinHash signatures and LSH band keys, as numpy arrays.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rayon::prelude::*;

use neardup::keys::RowRule;
use neardup::sketch::Scratch;

use crate::settings::{Scope, config_from};
use crate::texts::Texts;

/// Texts per unit of parallel work: large enough that scheduling costs nothing next to signing,
/// small enough that a few thousand short texts still spread over every thread.
const TEXTS_PER_TASK: usize = 64;

/// Turns texts into MinHash signatures and LSH band keys, exactly as stage 1 does.
///
/// Takes the sketch settings of a run as keyword arguments (``num_perm``, ``threshold`` and
/// ``verify`` or ``bands`` + ``rows``, ``hash``, ``tokenizer`` (a name or a callable
/// ``str -> Iterable[str]``), ``shingle``, ``lowercase``, …, ``short_texts``,
/// ``threads``; see ``docs/tuning.md``), so its band keys equal the key table's band columns of a
/// run with the same settings. Work runs on ``threads`` threads (0: all cores) with the GIL
/// released; texts are a list of ``str`` or an Arrow string array (pyarrow ``Array`` or
/// ``ChunkedArray``), which is read in place.
#[pyclass(frozen, module = "neardup")]
pub struct Sketcher {
    sketcher: neardup::sketch::Sketcher,
    rule: RowRule,
    pool: Option<rayon::ThreadPool>,
    config: neardup::Config,
}

impl Sketcher {
    fn run<R: Send>(&self, py: Python<'_>, work: impl FnOnce() -> R + Send) -> R {
        py.detach(|| match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        })
    }

    /// Calls `per_text(text, scratch, sig, out_row)` for every text, in parallel, filling an
    /// `(n, width)` array.
    fn fill<'py, T>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        width: usize,
        per_text: impl Fn(&str, &mut Scratch, &mut [u32], &mut [T]) + Sync,
    ) -> PyResult<Bound<'py, PyArray2<T>>>
    where
        T: numpy::Element + Copy + Default + Send + Sync,
    {
        let texts = Texts::from_py(texts)?;
        let num_perm = self.sketcher.num_perm();
        let sketcher = &self.sketcher;
        let tokenizer = &self.config.sketch.custom_tokenizer;
        let (out, failed_at) = texts.with_slices(|slices| {
            let mut out = vec![T::default(); slices.len() * width];
            if width == 0 {
                return (out, None);
            }
            let task = |(texts, rows): (&[&str], &mut [T])| {
                let mut scratch = Scratch::default();
                let mut sig = vec![0u32; num_perm];
                // A Python tokenizer takes the task's texts under one hold of the GIL.
                sketcher.prefetch(texts.iter().copied());
                for (text, row) in texts.iter().zip(rows.chunks_exact_mut(width)) {
                    per_text(text, &mut scratch, &mut sig, row);
                }
            };
            if slices.len() <= TEXTS_PER_TASK {
                task((slices, &mut out));
            } else {
                self.run(py, || {
                    slices
                        .par_chunks(TEXTS_PER_TASK)
                        .zip(out.par_chunks_mut(TEXTS_PER_TASK * width))
                        .for_each(task)
                });
            }
            // A tokenizer= callable that raised gave some texts no tokens: where was it?
            let failed_at = crate::tokenizer::failed_text(tokenizer)
                .and_then(|t| slices.iter().position(|s| *s == t));
            (out, failed_at)
        })?;
        let place = failed_at.map(|i| format!("texts[{i}]"));
        if let Some(raised) = crate::tokenizer::failure(py, tokenizer, place.as_deref()) {
            return Err(raised);
        }
        let n = out.len() / width.max(1);
        PyArray1::from_vec(py, out).reshape([n, width])
    }
}

#[pymethods]
impl Sketcher {
    #[new]
    #[pyo3(signature = (**settings))]
    fn new(settings: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let config = config_from(settings, Scope::Sketch)?;
        let sketcher =
            neardup::sketch::Sketcher::new(config.sketch_config().map_err(crate::errors::to_py)?)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let pool = match config.run.threads {
            0 => None,
            n => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|e| {
                        pyo3::exceptions::PyOSError::new_err(format!(
                            "cannot start {n} threads: {e}"
                        ))
                    })?,
            ),
        };
        crate::tokenizer::watch(&config.sketch.custom_tokenizer);
        Ok(Sketcher {
            rule: RowRule {
                band_keys: true,
                exact_key: false,
                short_texts: config.keys.short_texts,
            },
            sketcher,
            pool,
            config,
        })
    }

    /// MinHash signatures: a ``numpy.uint32`` array of shape ``(len(texts), num_perm)``.
    ///
    /// A text with no shingle (shorter than one shingle after normalisation, or empty) gets the
    /// empty set's signature, ``2**32 - 1`` in every position, as datasketch gives it.
    fn signatures<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<u32>>> {
        let sketcher = &self.sketcher;
        self.fill(py, texts, sketcher.num_perm(), |text, scratch, _, row| {
            sketcher.signature(text, scratch, row);
        })
    }

    /// LSH band keys: a ``numpy.uint64`` array of shape ``(len(texts), bands)``, equal to the
    /// band columns of the key table of a run with the same settings.
    ///
    /// An empty or whitespace-only text gets a row of zeros (0 is "no key"); so does a text
    /// shorter than one shingle unless ``short_texts="empty_signature"``.
    fn band_keys<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<u64>>> {
        let (sketcher, rule) = (&self.sketcher, self.rule);
        self.fill(py, texts, sketcher.bands(), |text, scratch, sig, row| {
            rule.sketch(sketcher, text, scratch, sig, row);
        })
    }

    /// Signature width.
    #[getter]
    fn num_perm(&self) -> usize {
        self.sketcher.num_perm()
    }

    /// LSH bands (band keys per text).
    #[getter]
    fn bands(&self) -> usize {
        self.sketcher.bands()
    }

    /// Rows (signature positions) per band.
    #[getter]
    fn rows(&self) -> usize {
        self.sketcher.config().lsh.rows
    }

    /// The sketch settings in force, as a settings file's ``[sketch]`` section (with ``bands``
    /// and ``rows`` as chosen).
    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut sketch = serde_json::to_value(&self.config.sketch).expect("settings serialise");
        sketch["bands"] = self.sketcher.bands().into();
        sketch["rows"] = self.sketcher.config().lsh.rows.into();
        sketch["num_perm"] = self.sketcher.num_perm().into();
        crate::json_to_py(py, &sketch)
    }

    fn __repr__(&self) -> String {
        let c = self.sketcher.config();
        format!(
            "Sketcher(hash={:?}, num_perm={}, bands={}, rows={}, shingles={})",
            format!("{:?}", c.scheme).to_lowercase(),
            c.num_perm,
            c.lsh.bands,
            c.lsh.rows,
            c.shingler.describe()
        )
    }
}
