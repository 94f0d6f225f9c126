//! The crate's error type.

use std::fmt;

/// Everything that can go wrong when building sketching components from settings.
///
/// Sketching itself never fails once a [`crate::Sketcher`] exists; errors only come from invalid
/// parameters, so each variant carries enough text to tell the user which setting to fix.
#[derive(Debug, Clone, PartialEq)]
pub enum SketchError {
    /// A character-class spec such as `"0-9a-z"` could not be parsed.
    InvalidCharClass {
        /// The spec as given.
        spec: String,
        /// Why it was refused.
        reason: String,
    },
    /// A shingler setting is out of range (zero width or step).
    InvalidShingler(String),
    /// A MinHash setting is out of range (zero permutations, seed too large for numpy, ...).
    InvalidMinHash(String),
    /// An LSH setting is out of range (zero bands or rows, too many bands, bad threshold, ...).
    InvalidLsh(String),
    /// The settings are individually valid but do not fit together.
    InvalidConfig(String),
}

impl fmt::Display for SketchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SketchError::InvalidCharClass { spec, reason } => {
                write!(f, "invalid character class {spec:?}: {reason}")
            }
            SketchError::InvalidShingler(m) => write!(f, "invalid shingler: {m}"),
            SketchError::InvalidMinHash(m) => write!(f, "invalid MinHash settings: {m}"),
            SketchError::InvalidLsh(m) => write!(f, "invalid LSH settings: {m}"),
            SketchError::InvalidConfig(m) => write!(f, "invalid sketch config: {m}"),
        }
    }
}

impl std::error::Error for SketchError {}
