//! `tokenizer=`: a Python callable `str -> Iterable[str]` as the engine's
//! [`neardup_sketch::Tokenizer`], so shingles are n-grams of its tokens joined by one space
//! (hojichar's `GenerateDedupLSH` n-grams).
//!
//! The engine's workers call it. Each call needs the GIL, and Python runs one call at a time, so
//! a worker hands it a whole block of texts at once ([`neardup_sketch::Sketcher::prefetch`]): the
//! GIL is taken once per block, and the worker keeps the tokens for the sketching that follows
//! while the other workers hash and decide in parallel. A text outside any batch (the rare paths
//! that sketch one text) takes the GIL for itself; the tokens are the same either way.
//!
//! A run signs its hot texts a second time in stage 2, and the callable's time is the floor of
//! the run, so the tokens stage 1 made are kept (up to a budget, [`Kept`]) and stage 2 takes them
//! instead of calling the callable again.
//!
//! A callable that raises cannot fail the engine's worker where it is called (the engine's
//! tokenizers cannot fail): the tokenizer keeps what it raised and on which text, stops the runs
//! it serves (their cancel tokens, [`PyTokenizer::stop_with`]; nothing is published), gives no
//! more tokens, and the entry point that ran it raises [`crate::errors::TokenizerError`] with
//! the callable's exception as its `__cause__` ([`failure`]) instead of whatever the stopped
//! run returned. A user that does not watch it so (the online `Index`, so far) gets the old
//! behaviour: the calling thread panics with what the callable raised.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use neardup::{CancelToken, CustomTokenizer};
use neardup_sketch::Tokenizer;

use crate::errors::TokenizerError;

/// The tokens of one text: their text back to back, and where each ends.
#[derive(Default)]
struct Tokens {
    text: String,
    ends: Vec<usize>,
}

impl Tokens {
    fn each(&self, emit: &mut dyn FnMut(&str)) {
        let mut start = 0;
        for &end in &self.ends {
            emit(&self.text[start..end]);
            start = end;
        }
    }
}

impl Tokens {
    /// The memory it holds, as the budget of [`Kept`] counts it.
    fn bytes(&self) -> usize {
        self.text.len() + self.ends.len() * std::mem::size_of::<usize>() + 64
    }
}

/// The tokens a thread's last batch made, waiting to be sketched.
struct Batch {
    /// Which tokenizer made them (its address): one thread may serve two runs in turn.
    owner: usize,
    tokens: HashMap<String, Arc<Tokens>>,
}

/// The tokens of the texts tokenized so far, by a 128-bit hash of the text, until they hold
/// `budget` bytes: a run's stage 2 re-signs its hot texts, and takes their tokens from here
/// instead of calling Python again (the callable is taken to be a function of its text, as the
/// settings fingerprint takes it to be). Past the budget, texts are tokenized again.
struct Kept {
    budget: usize,
    used: usize,
    tokens: HashMap<u128, Arc<Tokens>>,
}

impl Kept {
    fn get(&self, text: &str) -> Option<Arc<Tokens>> {
        self.tokens
            .get(&xxhash_rust::xxh3::xxh3_128(text.as_bytes()))
            .cloned()
    }

    fn keep(&mut self, text: &str, tokens: &Arc<Tokens>) {
        let bytes = tokens.bytes();
        if self.used + bytes > self.budget {
            return;
        }
        let key = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
        if self.tokens.insert(key, tokens.clone()).is_none() {
            self.used += bytes;
        }
    }
}

/// Memory the tokens kept for stage 2 may hold, without `memory_limit`: a Python analyser
/// tokenizes about a megabyte of text a second, so this covers several minutes of its work.
const KEPT_TOKENS_BYTES: usize = 1 << 30;

/// The share of `memory_limit` the kept tokens may hold (stage 2's decision state takes half).
const KEPT_TOKENS_SHARE: u64 = 8;

thread_local! {
    static BATCH: RefCell<Batch> = RefCell::new(Batch { owner: 0, tokens: HashMap::new() });
}

/// A Python callable as a tokenizer, named `custom:NAME` (the name the user gave, or the
/// function's module and qualified name).
pub struct PyTokenizer {
    name: String,
    function: Py<PyAny>,
    /// Tokens kept for a run's second stage; None where nothing is signed twice (`Sketcher`,
    /// `Deduper`, the online index).
    kept: Option<Mutex<Kept>>,
    watch: Mutex<Watch>,
}

/// What the callable raised, and the runs to stop when it does.
#[derive(Default)]
struct Watch {
    /// The first exception, and the text it was called on.
    failure: Option<(PyErr, String)>,
    /// The cancel tokens of the runs using the tokenizer.
    stops: Vec<CancelToken>,
    /// Whether its user takes what it raised ([`failure`]) after each call. A user that does not
    /// (yet) gets the failure as a panic of the thread that called it, which stops the work.
    watched: bool,
}

impl std::fmt::Debug for PyTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyTokenizer({})", self.name)
    }
}

impl PyTokenizer {
    /// The tokens of `text`: the callable's result, iterated, every item a `str`.
    fn call(&self, py: Python<'_>, text: &str) -> PyResult<Tokens> {
        let result = self.function.bind(py).call1((text,))?;
        let mut tokens = Tokens::default();
        for item in result.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "tokenizer {} returned a {}, not an iterable of str",
                self.name,
                result
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })? {
            let item = item?;
            let token = item.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "tokenizer {} gave a token of type {}, not str",
                    self.name,
                    item.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
            tokens.text.push_str(&token.to_cow()?);
            tokens.ends.push(tokens.text.len());
        }
        Ok(tokens)
    }

    /// The tokens of `text`, or none once the callable has raised (on this text or an earlier
    /// one): what it raised is kept for the caller, and the runs using the tokenizer are
    /// stopped, since inside the engine no error can be returned.
    fn tokens(&self, py: Python<'_>, text: &str) -> Tokens {
        if self.has_failed() {
            return Tokens::default();
        }
        self.call(py, text).unwrap_or_else(|e| {
            let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
            if !watch.watched {
                let why = e
                    .value(py)
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| e.to_string());
                // Kept for a user that catches the panic and raises it instead (the online
                // `Index`, whose core cannot take an error from inside its signing).
                if watch.failure.is_none() {
                    watch.failure = Some((e, text.to_string()));
                }
                drop(watch);
                panic!("tokenizer {} failed: {why}", self.name)
            }
            if watch.failure.is_none() {
                watch.failure = Some((e, text.to_string()));
            }
            for stop in &watch.stops {
                stop.cancel();
            }
            Tokens::default()
        })
    }

    fn has_failed(&self) -> bool {
        self.watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failure
            .is_some()
    }

    /// Stops the run `token` belongs to when the callable raises, at once if it already has.
    pub fn stop_with(&self, token: &CancelToken) {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        if watch.failure.is_some() {
            token.cancel();
        }
        watch.watched = true;
        watch.stops.retain(|t| !t.is_cancelled());
        watch.stops.push(token.clone());
    }

    /// What the callable raised, as the exception its caller gets: a [`TokenizerError`] naming
    /// the tokenizer, the text (and `place`, where it is known: "text 3 of the list") whose
    /// `__cause__` is the callable's own exception. Taken: the tokenizer works again after.
    fn take_failure(&self, py: Python<'_>, place: Option<&str>) -> Option<PyErr> {
        let (cause, text) = self
            .watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failure
            .take()?;
        let raised = cause
            .value(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| cause.to_string());
        let err = TokenizerError::new_err(format!(
            "tokenizer {} raised {raised} on {}{}",
            self.name,
            place.map(|p| format!("{p}, ")).unwrap_or_default(),
            excerpt(&text)
        ));
        err.set_cause(py, Some(cause));
        Some(err)
    }
}

/// The start of `text`, quoted, for a message: enough to find the document by.
fn excerpt(text: &str) -> String {
    const SHOWN: usize = 80;
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("the text {:?}… ({} bytes)", &text[..end], text.len()),
        None => format!("the text {text:?}"),
    }
}

/// The Python callable `config`'s tokenizer is, if it is one.
fn callable_of(tokenizer: &Option<CustomTokenizer>) -> Option<&PyTokenizer> {
    tokenizer
        .as_ref()?
        .0
        .as_any()?
        .downcast_ref::<PyTokenizer>()
}

/// Marks `tokenizer`, if a Python callable, as watched by a user that takes what it raised
/// ([`failure`]) after each call (`Sketcher`, `Deduper`).
pub fn watch(tokenizer: &Option<CustomTokenizer>) {
    if let Some(t) = callable_of(tokenizer) {
        t.watch.lock().unwrap_or_else(|p| p.into_inner()).watched = true;
    }
}

/// Stops the run `token` belongs to when `config`'s tokenizer, a Python callable, raises.
pub fn stop_with(config: &neardup::Config, token: &CancelToken) {
    if let Some(t) = callable_of(&config.sketch.custom_tokenizer) {
        t.stop_with(token);
    }
}

/// Whether `tokenizer`, a Python callable, has raised since its failure was last taken.
pub fn has_failed(tokenizer: &Option<CustomTokenizer>) -> bool {
    callable_of(tokenizer).is_some_and(PyTokenizer::has_failed)
}

/// Runs `work`, a step in the calling thread with the GIL released, with `config`'s tokenizer
/// watched when it is a Python callable: its raising stops the step and is the step's error.
pub fn run_watched<T: Send>(
    py: Python<'_>,
    config: &neardup::Config,
    work: impl FnOnce(&neardup::RunControl) -> Result<T, neardup::Error> + Send,
) -> PyResult<T> {
    let control = neardup::RunControl::default();
    stop_with(config, &control.cancel);
    let result = py.detach(|| work(&control));
    if let Some(raised) = failure(py, &config.sketch.custom_tokenizer, None) {
        return Err(raised);
    }
    result.map_err(crate::errors::to_py)
}

/// The text `tokenizer`, a Python callable, raised on, if it has.
pub fn failed_text(tokenizer: &Option<CustomTokenizer>) -> Option<String> {
    let watch = callable_of(tokenizer)?
        .watch
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    watch.failure.as_ref().map(|(_, text)| text.clone())
}

/// What `tokenizer`, a Python callable, raised, as the exception to raise in its place (see
/// [`PyTokenizer::take_failure`]); `None` when it has not raised.
pub fn failure(
    py: Python<'_>,
    tokenizer: &Option<CustomTokenizer>,
    place: Option<&str>,
) -> Option<PyErr> {
    callable_of(tokenizer)?.take_failure(py, place)
}

impl Tokenizer for PyTokenizer {
    fn name(&self) -> &str {
        &self.name
    }

    fn tokenize(&self, text: &str, emit: &mut dyn FnMut(&str)) {
        let owner = self as *const PyTokenizer as usize;
        let kept = BATCH.with(|b| {
            let mut b = b.borrow_mut();
            if b.owner == owner {
                b.tokens.remove(text)
            } else {
                None
            }
        });
        let tokens = match kept {
            Some(tokens) => tokens,
            None => Arc::new(Python::attach(|py| self.tokens(py, text))),
        };
        tokens.each(emit);
    }

    fn prefetch(&self, texts: &[&str]) {
        let mut tokens: HashMap<String, Arc<Tokens>> = HashMap::with_capacity(texts.len());
        let mut kept = self
            .kept
            .as_ref()
            .map(|k| k.lock().unwrap_or_else(|e| e.into_inner()));
        // Tokens an earlier pass made are taken without the GIL.
        let mut missing = Vec::with_capacity(texts.len());
        for &text in texts {
            if tokens.contains_key(text) {
                continue;
            }
            match kept.as_ref().and_then(|k| k.get(text)) {
                Some(t) => {
                    tokens.insert(text.to_string(), t);
                }
                None => missing.push(text),
            }
        }
        // The lock is not held across the call: other workers take their kept tokens meanwhile.
        drop(kept.take());
        let mut made = Vec::with_capacity(missing.len());
        if !missing.is_empty() {
            Python::attach(|py| {
                for &text in &missing {
                    if !tokens.contains_key(text) {
                        let t = Arc::new(self.tokens(py, text));
                        tokens.insert(text.to_string(), t.clone());
                        made.push((text, t));
                    }
                }
            });
        }
        // Once the callable has raised, what it gave is no tokens at all: none are kept.
        if let Some(k) = self.kept.as_ref().filter(|_| !self.has_failed()) {
            let mut k = k.lock().unwrap_or_else(|e| e.into_inner());
            for (text, t) in &made {
                k.keep(text, t);
            }
        }
        let owner = self as *const PyTokenizer as usize;
        BATCH.with(|b| *b.borrow_mut() = Batch { owner, tokens });
    }

    fn wants_batches(&self) -> bool {
        true
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// The name a callable enters the settings (and their fingerprint) under: `name` when given,
/// else the function's module and qualified name. A lambda, a nested function or a callable
/// object must be named: their qualified names do not tell two of them apart.
fn name_of(function: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<String> {
    if let Some(name) = name {
        if name.is_empty() {
            return Err(PyValueError::new_err("tokenizer_name must not be empty"));
        }
        return Ok(name);
    }
    let attr = |a: &str| -> Option<String> { function.getattr(a).ok()?.extract().ok() };
    let is_function =
        function.hasattr("__code__")? || function.is_instance_of::<pyo3::types::PyCFunction>();
    match (attr("__module__"), attr("__qualname__")) {
        (Some(module), Some(qualname)) if is_function && !qualname.contains('<') => {
            Ok(format!("{module}.{qualname}"))
        }
        _ => Err(PyValueError::new_err(format!(
            "name this tokenizer with tokenizer_name=\"...\": {} has no name that tells it from \
             another tokenizer (a lambda, a nested function or a callable object), and the name \
             keeps runs with different tokenizers from mixing their key tables",
            function.repr().map(|r| r.to_string()).unwrap_or_default()
        ))),
    }
}

/// Sets `config`'s tokenizer from the keywords `tokenizer=` (a name, or a callable
/// `str -> Iterable[str]`) and `tokenizer_name=` (a callable's name). The callable is tried on
/// a short text first, so a tokenizer that cannot work fails here, before any run starts.
pub fn apply(
    config: &mut neardup::Config,
    tokenizer: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    two_pass: bool,
) -> PyResult<()> {
    let Some(tokenizer) = tokenizer else {
        if name.is_some() {
            return Err(PyTypeError::new_err(
                "tokenizer_name names a callable tokenizer=, and none was given",
            ));
        }
        return Ok(());
    };
    if let Ok(unit) = tokenizer.cast::<PyString>() {
        if name.is_some() {
            return Err(PyTypeError::new_err(
                "tokenizer_name names a callable tokenizer=, not a native one given by name",
            ));
        }
        config.sketch.tokenize = unit
            .to_cow()?
            .parse()
            .map_err(|e: String| PyValueError::new_err(format!("tokenizer: {e}")))?;
        config.sketch.custom_tokenizer = None;
        return Ok(());
    }
    if !tokenizer.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "tokenizer must be a name (\"char\", \"alnum\", \"jieba\", ...) or a callable \
             str -> Iterable[str], not {}",
            tokenizer.get_type().name()?
        )));
    }
    let name = name_of(tokenizer, name)?;
    // Runs (both stages, or stage steps) sign hot texts twice; a sketcher or an index once.
    let kept = two_pass.then(|| {
        let budget = match config.keys.memory_limit {
            Some(limit) => (limit / KEPT_TOKENS_SHARE) as usize,
            None => KEPT_TOKENS_BYTES,
        };
        Mutex::new(Kept {
            budget,
            used: 0,
            tokens: HashMap::new(),
        })
    });
    let t = PyTokenizer {
        name: format!("custom:{name}"),
        function: tokenizer.clone().unbind(),
        kept,
        watch: Mutex::default(),
    };
    t.call(tokenizer.py(), "neardup テスト 测试")?;
    config.sketch.tokenize = neardup::ShingleUnit::Custom(name);
    config.sketch.custom_tokenizer = Some(CustomTokenizer(std::sync::Arc::new(t)));
    Ok(())
}
