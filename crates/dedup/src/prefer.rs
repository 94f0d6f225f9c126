//! Which copy of a duplicate set is kept (`--prefer`): the order in which hot samples are
//! decided, given as one `u64` rank per sample (smaller is decided first, ties in input order).
//!
//! The default, [`Prefer::First`], decides in input order: the first copy seen is kept, and
//! nothing is ranked. Every other preference decides the hot samples in rank order with the same
//! bounded-representative rule, so every dropped sample's `dup_of` (and cluster) is at least as
//! preferred as the sample itself. Cold samples (no hot key) have no duplicate and are kept
//! whatever their rank.

use std::fmt;
use std::str::FromStr;

use neardup_corpus::{FieldPath, RankValue};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which copy of a duplicate set is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Prefer {
    /// The first in input order (decisions in input order; nothing is ranked).
    #[default]
    First,
    /// The one with the most UTF-8 bytes of text after trimming white space at both ends.
    Longest,
    /// The one with the fewest UTF-8 bytes of text after trimming.
    Shortest,
    /// The one whose numeric field is highest ([`FieldOrder::Desc`]) or lowest
    /// ([`FieldOrder::Asc`]). A record without the field, or with null (or a float NaN), ranks
    /// after every number; any other value is an error (see [`Prefer::rank`]).
    Field {
        /// The field (a dotted path, or a Parquet column).
        field: FieldPath,
        /// Highest or lowest first.
        order: FieldOrder,
    },
}

/// The order of [`Prefer::Field`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOrder {
    /// Highest value kept.
    Desc,
    /// Lowest value kept.
    Asc,
}

/// Why a `--prefer` value does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--prefer {0:?}: expected `first`, `longest`, `shortest`, `FIELD:desc` or `FIELD:asc` (FIELD \
     a numeric field, e.g. `quality:desc`)"
)]
pub struct PreferParseError(String);

impl FromStr for Prefer {
    type Err = PreferParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PreferParseError(s.to_string());
        match s {
            "first" => return Ok(Prefer::First),
            "longest" => return Ok(Prefer::Longest),
            "shortest" => return Ok(Prefer::Shortest),
            _ => {}
        }
        let (field, order) = s.rsplit_once(':').ok_or_else(bad)?;
        let order = match order {
            "desc" => FieldOrder::Desc,
            "asc" => FieldOrder::Asc,
            _ => return Err(bad()),
        };
        let field = field.parse::<FieldPath>().map_err(|_| bad())?;
        Ok(Prefer::Field { field, order })
    }
}

impl fmt::Display for Prefer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefer::First => f.write_str("first"),
            Prefer::Longest => f.write_str("longest"),
            Prefer::Shortest => f.write_str("shortest"),
            Prefer::Field { field, order } => write!(
                f,
                "{field}:{}",
                match order {
                    FieldOrder::Desc => "desc",
                    FieldOrder::Asc => "asc",
                }
            ),
        }
    }
}

impl Serialize for Prefer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The rank of a sample without a value for [`Prefer::Field`]: after every number.
const LAST: u64 = u64::MAX;

impl Prefer {
    /// Whether hot samples are decided in input order (nothing to rank).
    pub fn is_input_order(&self) -> bool {
        *self == Prefer::First
    }

    /// The field read with every record for the ranks, if any.
    pub fn rank_field(&self) -> Option<&FieldPath> {
        match self {
            Prefer::Field { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The rank of a sample with this `text` whose record's rank field holds `value` (smaller is
    /// preferred). `Err` says what the field held when it is neither a number nor absent.
    pub fn rank(&self, text: &str, value: RankValue) -> Result<u64, &'static str> {
        Ok(match self {
            Prefer::First => 0,
            Prefer::Longest => !(text.trim().len() as u64),
            Prefer::Shortest => text.trim().len() as u64,
            Prefer::Field { order, .. } => match value {
                RankValue::Absent => LAST,
                RankValue::NotANumber(what) => return Err(what),
                RankValue::Number(v) if v.is_nan() => LAST,
                RankValue::Number(v) => {
                    let ascending = ascending_bits(v);
                    match order {
                        // The top rank stays free for absent values.
                        FieldOrder::Asc => ascending.min(LAST - 1),
                        FieldOrder::Desc => (!ascending).min(LAST - 1),
                    }
                }
            },
        })
    }
}

/// `v`'s bits mapped so that unsigned order is numeric order (−0 and +0 equal).
fn ascending_bits(v: f64) -> u64 {
    let bits = if v == 0.0 { 0 } else { v.to_bits() };
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field(order: &str) -> Prefer {
        format!("meta.score:{order}").parse().unwrap()
    }

    #[test]
    fn parses_and_prints_every_form() {
        for s in ["first", "longest", "shortest", "score:desc", "meta.q:asc"] {
            let p: Prefer = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Prefer>(&json).unwrap(), p);
        }
        for bad in ["", "score", "score:up", ":desc", "a..b:asc", "Longest"] {
            let err = bad.parse::<Prefer>().unwrap_err().to_string();
            assert!(err.contains("FIELD:desc"), "{err}");
        }
        assert_eq!(
            "score:up".parse::<Prefer>().unwrap_err().to_string(),
            "--prefer \"score:up\": expected `first`, `longest`, `shortest`, `FIELD:desc` or \
             `FIELD:asc` (FIELD a numeric field, e.g. `quality:desc`)"
        );
        // A field name may itself hold a colon; the order is after the last one.
        assert_eq!(
            "a:b:asc"
                .parse::<Prefer>()
                .unwrap()
                .rank_field()
                .unwrap()
                .to_string(),
            "a:b"
        );
    }

    #[test]
    fn length_ranks_count_trimmed_utf8_bytes() {
        let long = Prefer::Longest;
        assert!(long.rank("  abc \n", RankValue::Absent) == long.rank("abc", RankValue::Absent));
        assert!(long.rank("abcd", RankValue::Absent) < long.rank("abc", RankValue::Absent));
        // "é" is two bytes.
        assert!(long.rank("é", RankValue::Absent) < long.rank("e", RankValue::Absent));
        let short = Prefer::Shortest;
        assert!(short.rank("abc", RankValue::Absent) < short.rank("abcd", RankValue::Absent));
    }

    #[test]
    fn absent_values_rank_last_and_other_values_are_refused() {
        for order in ["asc", "desc"] {
            let p = field(order);
            for v in [f64::INFINITY, f64::NEG_INFINITY, f64::MAX, -f64::MAX, 0.0] {
                assert!(p.rank("", RankValue::Number(v)).unwrap() < LAST);
            }
            assert_eq!(p.rank("", RankValue::Absent), Ok(LAST));
            assert_eq!(p.rank("", RankValue::Number(f64::NAN)), Ok(LAST));
            assert_eq!(
                p.rank("", RankValue::NotANumber("a string")),
                Err("a string")
            );
        }
        let asc = field("asc");
        assert_eq!(
            asc.rank("", RankValue::Number(-0.0)),
            asc.rank("", RankValue::Number(0.0))
        );
    }

    proptest! {
        #[test]
        fn numeric_ranks_follow_numeric_order(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (asc, desc) = (field("asc"), field("desc"));
            let r = |p: &Prefer, v: f64| p.rank("", RankValue::Number(v)).unwrap();
            prop_assert_eq!(r(&asc, a).cmp(&r(&asc, b)), a.partial_cmp(&b).unwrap());
            prop_assert_eq!(r(&desc, a).cmp(&r(&desc, b)), b.partial_cmp(&a).unwrap());
        }
    }
}
