//! Keyword arguments → [`neardup::Config`].
//!
//! Settings are keyword arguments named as in a settings file (`docs/tuning.md`): the field names
//! of `Config`'s sections, flat (`threshold=0.7`, `num_perm=256`, `fields=["title", "body"]`),
//! since no name appears in two sections. Two more names work as the CLI's flags of the same
//! name: `config` (a settings file) and `compat` (`"lshcurator"`, a preset), and two stand for
//! the setting `tokenize`: `tokenizer` (its name, or a Python callable, [`crate::tokenizer`]) and
//! `tokenizer_name` (the callable's name); the layers apply in
//! the library's one order ([`neardup::Layers`]), the CLI's. The list of names comes from
//! `Config` itself, so a new setting is accepted as soon as the library has it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use neardup::{Config, Layers, Preset};

/// What an entry point accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `dedup`: everything but the output paths, which are its own arguments.
    Run,
    /// `stream`, `compute_keys`, the lshcurator runs: nothing that names an output.
    NoOutputs,
    /// `Sketcher`: how texts become signatures and band keys.
    Sketch,
    /// `Deduper`: the sketch settings and the decision settings.
    Deduper,
}

/// Names of the `dedup` section a sketcher needs too (`threshold` and `verify` choose bands and
/// rows).
const SKETCH_EXTRA: &[&str] = &["threshold", "verify", "short_texts", "threads"];
/// Names outside the sketch section an in-memory deduper uses.
const DEDUPER_EXTRA: &[&str] = &[
    "threshold",
    "max_reps",
    "verify",
    "verify_memory",
    "empty",
    "near",
    "exact",
    "short_texts",
    "spill_dir",
];

impl Scope {
    /// Whether `name` of `section` is taken; otherwise why not.
    fn check(self, section: &str, name: &str) -> Result<(), String> {
        match self {
            Scope::Run => match name {
                "inputs" => Err("inputs are the first argument".into()),
                "dir" => Err("the output directory is given as output=".into()),
                "decisions" | "report" => Err(format!("{name} is an argument of its own")),
                _ => Ok(()),
            },
            Scope::NoOutputs => {
                if name == "inputs" {
                    Err("inputs are the first argument".into())
                } else if section == "output" {
                    Err("this writes nothing; use neardup.dedup() for outputs".into())
                } else {
                    Ok(())
                }
            }
            Scope::Sketch => {
                if section == "sketch" || SKETCH_EXTRA.contains(&name) {
                    Ok(())
                } else {
                    Err("not a sketch setting".into())
                }
            }
            Scope::Deduper => {
                if section == "sketch" || DEDUPER_EXTRA.contains(&name) {
                    Ok(())
                } else {
                    Err("not a setting of an in-memory deduper".into())
                }
            }
        }
    }

    /// The names this scope takes, sorted, for error messages.
    fn valid_names(self) -> Vec<String> {
        let mut names: Vec<String> = setting_sections()
            .into_iter()
            .flat_map(|(section, names)| {
                names
                    .into_iter()
                    .filter(move |n| self.check(&section, n).is_ok())
            })
            .chain(["config", "compat", "tokenizer", "tokenizer_name"].map(String::from))
            .collect();
        names.sort();
        names
    }
}

/// Every setting name by section, read off the default configuration.
pub fn setting_sections() -> BTreeMap<String, Vec<String>> {
    let defaults = serde_json::to_value(Config::default()).expect("the config serialises");
    let Value::Object(sections) = defaults else {
        unreachable!("a config serialises as an object")
    };
    sections
        .into_iter()
        .map(|(section, fields)| {
            let names = match fields {
                Value::Object(f) => f.keys().cloned().collect(),
                _ => Vec::new(),
            };
            (section, names)
        })
        .collect()
}

/// The section holding `name`.
fn section_of(name: &str) -> Option<String> {
    setting_sections()
        .into_iter()
        .find(|(_, names)| names.iter().any(|n| n == name))
        .map(|(section, _)| section)
}

/// The closest valid name, when one is close enough to be a likely typo.
fn suggestion<'a>(name: &str, valid: &'a [String]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    valid
        .iter()
        .map(|v| (distance(name, v), v))
        .filter(|(d, v)| *d <= 2.max(v.len() / 4))
        .min()
        .map(|(_, v)| v.as_str())
}

/// A Python value as JSON, for the settings' serde types.
fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: True is an int in Python.
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Ok(Value::from(value.extract::<i64>()?));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{} is not a finite number", f.value())));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        return value
            .try_iter()?
            .map(|item| to_json(&item?))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if value.hasattr("__fspath__")? {
        let path: PathBuf = value.extract()?;
        return Ok(Value::String(path.to_string_lossy().into_owned()));
    }
    Err(PyTypeError::new_err(format!(
        "a setting cannot be a {}",
        value.get_type().name()?
    )))
}

/// Writes one setting into its section of `config`, through the section's serde type so that the
/// value is checked exactly as a settings file's would be.
fn apply_one(config: &mut Config, section: &str, name: &str, value: Value) -> Result<(), String> {
    fn set<T: serde::Serialize + serde::de::DeserializeOwned>(
        target: &mut T,
        name: &str,
        value: Value,
    ) -> Result<(), String> {
        let mut json = serde_json::to_value(&*target).map_err(|e| e.to_string())?;
        json[name] = value;
        *target = serde_json::from_value(json).map_err(|e| e.to_string())?;
        Ok(())
    }
    match section {
        "input" => set(&mut config.input, name, value),
        "sketch" => set(&mut config.sketch, name, value),
        "keys" => set(&mut config.keys, name, value),
        "dedup" => set(&mut config.dedup, name, value),
        "run" => set(&mut config.run, name, value),
        "output" => set(&mut config.output, name, value),
        other => Err(format!("unknown settings section {other:?}")),
    }
}

/// Builds the configuration of a call from its keyword arguments, in the library's one order
/// ([`Layers`]): the defaults, the `compat=` preset's defaults, the settings file `config=`,
/// every other setting, then what the preset pins.
pub fn config_from(settings: Option<&Bound<'_, PyDict>>, scope: Scope) -> PyResult<Config> {
    let Some(settings) = settings else {
        return Ok(Config::default());
    };
    let preset = match settings.get_item("compat")? {
        Some(name) => Some(
            name.extract::<String>()?
                .parse::<Preset>()
                .map_err(|e| PyValueError::new_err(e.to_string()))?,
        ),
        None => None,
    };
    let file: Option<PathBuf> = settings
        .get_item("config")?
        .map(|path| path.extract())
        .transpose()?;
    let mut layers = Layers::new(preset, file.as_deref()).map_err(crate::errors::to_py)?;
    let config = layers.given();
    for (key, value) in settings.iter() {
        let name: String = key.extract()?;
        if matches!(
            name.as_str(),
            "config" | "compat" | "tokenizer" | "tokenizer_name"
        ) {
            continue;
        }
        let unknown = || {
            let valid = scope.valid_names();
            let hint = suggestion(&name, &valid)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            PyTypeError::new_err(format!(
                "unknown setting {name}{hint}; valid settings: {}",
                valid.join(", ")
            ))
        };
        let section = section_of(&name).ok_or_else(unknown)?;
        if let Err(why) = scope.check(&section, &name) {
            return Err(PyTypeError::new_err(format!(
                "{name} is not taken here: {why}; valid settings: {}",
                scope.valid_names().join(", ")
            )));
        }
        let mut json =
            to_json(&value).map_err(|e| PyTypeError::new_err(format!("setting {name}: {e}")))?;
        // One text field may be given as a plain string.
        if name == "fields"
            && let Value::String(s) = json
        {
            json = Value::Array(vec![Value::String(s)]);
        }
        apply_one(config, &section, &name, json)
            .map_err(|e| PyValueError::new_err(format!("setting {name}: {e}")))?;
    }
    // After the other settings: each of them is written through its section's serde type,
    // which leaves out the tokenizer object.
    let tokenizer_name = settings
        .get_item("tokenizer_name")?
        .map(|n| n.extract::<String>())
        .transpose()?;
    crate::tokenizer::apply(
        layers.given(),
        settings.get_item("tokenizer")?.as_ref(),
        tokenizer_name,
        matches!(scope, Scope::Run | Scope::NoOutputs),
    )?;
    let config = layers.finish();
    config.validate().map_err(crate::errors::to_py)?;
    Ok(config)
}

/// Input paths as given (a path or a list of paths), as the strings discovery takes.
pub fn inputs_from(inputs: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let one = |v: &Bound<'_, PyAny>| -> PyResult<String> {
        if let Ok(s) = v.cast::<PyString>() {
            return Ok(s.to_cow()?.into_owned());
        }
        if v.hasattr("__fspath__")? {
            let p: PathBuf = v.extract()?;
            return Ok(p.to_string_lossy().into_owned());
        }
        Err(PyTypeError::new_err(format!(
            "an input must be a path (str or os.PathLike), not {}",
            v.get_type().name()?
        )))
    };
    if inputs.is_instance_of::<PyString>() || inputs.hasattr("__fspath__")? {
        return Ok(vec![one(inputs)?]);
    }
    let list: Vec<String> = inputs
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(
                "inputs must be a path or a list of paths (files, directories, globs)",
            )
        })?
        .map(|v| one(&v?))
        .collect::<PyResult<_>>()?;
    if list.is_empty() {
        return Err(PyValueError::new_err("no inputs given"));
    }
    Ok(list)
}

/// `{section: [names]}` of every setting, for documentation and completion.
#[pyfunction]
pub fn settings(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (section, names) in setting_sections() {
        out.set_item(section, names)?;
    }
    Ok(out)
}

/// The default value of every setting, flat (`{name: value}`), as a settings file gives them.
#[pyfunction]
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let Value::Object(sections) =
        serde_json::to_value(Config::default()).expect("the config serialises")
    else {
        unreachable!("a config serialises as an object")
    };
    let flat: serde_json::Map<String, Value> = sections
        .into_iter()
        .flat_map(|(_, fields)| match fields {
            Value::Object(f) => f.into_iter().collect::<Vec<_>>(),
            _ => Vec::new(),
        })
        .collect();
    crate::json_to_py(py, &Value::Object(flat))
}
