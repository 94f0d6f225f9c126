//! What a step does with input it cannot read.

use serde::{Deserialize, Serialize};

/// What to do when an input record or file cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Count it, quote it in the report, and go on.
    #[default]
    Skip,
    /// Stop the run at the first problem.
    Fail,
}
