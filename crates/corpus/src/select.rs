//! Which fields of a record make up its text samples.

use std::fmt;
use std::str::FromStr;

/// A dotted path into a JSON object (`"meta.body"`); for Parquet, a top-level column or a struct
/// child. Keys containing a literal dot cannot be addressed (the dot always separates segments).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldPath {
    segments: Vec<String>,
}

/// Why a string is not a valid [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid field path {0:?}: empty segment")]
pub struct FieldPathError(String);

impl FieldPath {
    /// A single top-level field.
    pub fn top(name: impl Into<String>) -> FieldPath {
        FieldPath {
            segments: vec![name.into()],
        }
    }

    /// The path's segments, outermost first (never empty).
    pub fn segments(&self) -> &[String] {
        &self.segments
    }
}

impl FromStr for FieldPath {
    type Err = FieldPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let segments: Vec<String> = s.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(FieldPathError(s.to_owned()));
        }
        Ok(FieldPath { segments })
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.segments.join("."))
    }
}

impl serde::Serialize for FieldPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for FieldPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What [`FieldsMode::Join`] puts between fields by default: a newline.
pub const DEFAULT_SEPARATOR: &str = "\n";

/// How several selected fields become samples.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FieldsMode {
    /// One sample per record: present fields joined with `separator` ([`DEFAULT_SEPARATOR`]).
    Join {
        /// Inserted between the texts of consecutive present fields.
        separator: String,
    },
    /// One sample per field (lshcurator's semantics).
    Expand,
}

impl Default for FieldsMode {
    fn default() -> Self {
        FieldsMode::Join {
            separator: DEFAULT_SEPARATOR.to_owned(),
        }
    }
}

/// The text fields of a record and how they form samples, plus an optional id field.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TextSelector {
    /// Text fields, in sample-field order; must not be empty.
    pub fields: Vec<FieldPath>,
    /// Join or expand.
    pub mode: FieldsMode,
    /// Field whose value identifies the record in decisions.
    pub id_field: Option<FieldPath>,
    /// A numeric field read with every record as its [`crate::Sample::rank`] (stage 2's
    /// `--prefer FIELD:desc|asc`). Stage 1 never reads it, so key tables do not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_field: Option<FieldPath>,
}

impl TextSelector {
    /// One text field, joined mode, no id: the common `--text-field text` case.
    pub fn single(field: FieldPath) -> TextSelector {
        TextSelector {
            fields: vec![field],
            mode: FieldsMode::default(),
            id_field: None,
            rank_field: None,
        }
    }

    /// Number of sample slots per record: 1 for Join, fields.len() for Expand.
    pub fn samples_per_record(&self) -> usize {
        match self.mode {
            FieldsMode::Join { .. } => 1,
            FieldsMode::Expand => self.fields.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_display_serde() {
        let p: FieldPath = "meta.body".parse().unwrap();
        assert_eq!(p.segments(), ["meta", "body"]);
        assert_eq!(p.to_string(), "meta.body");
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"meta.body\"");
        let back: FieldPath = serde_json::from_str("\"meta.body\"").unwrap();
        assert_eq!(back, p);
        assert!("a..b".parse::<FieldPath>().is_err());
        assert!("".parse::<FieldPath>().is_err());
        assert!(serde_json::from_str::<FieldPath>("\"a.\"").is_err());
    }

    #[test]
    fn samples_per_record() {
        let mut s = TextSelector::single(FieldPath::top("text"));
        s.fields.push(FieldPath::top("title"));
        assert_eq!(s.samples_per_record(), 1);
        s.mode = FieldsMode::Expand;
        assert_eq!(s.samples_per_record(), 2);
    }
}
