//! `tokenizer=`: a Python callable `str -> Iterable[str]` as the engine's
//! [`neardup_sketch::Tokenizer`], so shingles are n-grams of its tokens joined by one space
//! (hojichar's `GenerateDedupLSH` n-grams).
//!
//! The engine's workers call it. Each call needs the GIL, and Python runs one call at a time, so
//! a worker hands it a whole block of texts at once ([`neardup_sketch::Sketcher::prefetch`]): the
//! GIL is taken once per block, and the worker keeps the tokens for the sketching that follows
//! while the other workers hash and decide in parallel. A text outside any batch (the rare paths
//! that sketch one text) takes the GIL for itself; the tokens are the same either way.

use std::cell::RefCell;
use std::collections::HashMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use neardup::CustomTokenizer;
use neardup_sketch::Tokenizer;

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

/// The tokens a thread's last batch made, waiting to be sketched.
struct Batch {
    /// Which tokenizer made them (its address): one thread may serve two runs in turn.
    owner: usize,
    tokens: HashMap<String, Tokens>,
}

thread_local! {
    static BATCH: RefCell<Batch> = RefCell::new(Batch { owner: 0, tokens: HashMap::new() });
}

/// A Python callable as a tokenizer, named `custom:NAME` (the name the user gave, or the
/// function's module and qualified name).
pub struct PyTokenizer {
    name: String,
    function: Py<PyAny>,
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

    /// What a run does when the callable fails inside the engine, where no error can be
    /// returned: stop the run (nothing is published), saying why.
    fn failed(&self, py: Python<'_>, e: PyErr) -> ! {
        let why = e
            .value(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| e.to_string());
        panic!("tokenizer {} failed: {why}", self.name)
    }
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
            None => Python::attach(|py| self.call(py, text).unwrap_or_else(|e| self.failed(py, e))),
        };
        tokens.each(emit);
    }

    fn prefetch(&self, texts: &[&str]) {
        let mut tokens = HashMap::with_capacity(texts.len());
        Python::attach(|py| {
            for &text in texts {
                if !tokens.contains_key(text) {
                    let made = self.call(py, text).unwrap_or_else(|e| self.failed(py, e));
                    tokens.insert(text.to_string(), made);
                }
            }
        });
        let owner = self as *const PyTokenizer as usize;
        BATCH.with(|b| *b.borrow_mut() = Batch { owner, tokens });
    }

    fn wants_batches(&self) -> bool {
        true
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
    let t = PyTokenizer {
        name: format!("custom:{name}"),
        function: tokenizer.clone().unbind(),
    };
    t.call(tokenizer.py(), "neardup テスト 测试")?;
    config.sketch.tokenize = neardup::ShingleUnit::Custom(name);
    config.sketch.custom_tokenizer = Some(CustomTokenizer(std::sync::Arc::new(t)));
    Ok(())
}
