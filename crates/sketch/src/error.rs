//! The crate's error type.

/// Everything that can go wrong when building sketching components from settings.
///
/// Sketching itself never fails once a [`crate::Sketcher`] exists; errors only come from invalid
/// parameters, so each variant carries enough text to tell the user which setting to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SketchError {
    /// A character-class spec such as `"0-9a-z"` could not be parsed.
    #[error("invalid character class {spec:?}: {reason}")]
    InvalidCharClass {
        /// The spec as given.
        spec: String,
        /// Why it was refused.
        reason: String,
    },
    /// A shingler setting is out of range (zero width or step).
    #[error("invalid shingler: {0}")]
    InvalidShingler(String),
    /// A MinHash setting is out of range (zero permutations, seed too large for numpy, ...).
    #[error("invalid MinHash settings: {0}")]
    InvalidMinHash(String),
    /// An LSH setting is out of range (zero bands or rows, too many bands, bad threshold, ...).
    #[error("invalid LSH settings: {0}")]
    InvalidLsh(String),
    /// The settings are individually valid but do not fit together.
    #[error("invalid sketch config: {0}")]
    InvalidConfig(String),
}
