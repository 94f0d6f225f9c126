//! Opt-in, composable text normalisation.
//!
//! A [`Normalizer`] applies its enabled steps in one fixed order: trim, NFKC, lowercase, strip
//! punctuation, keep-chars filter, collapse whitespace. The default normaliser is the identity,
//! so that, out of the box, shingles are taken from the text exactly as given (as lshcurator and
//! datasketch do). Each step first checks whether it would change anything and leaves the text
//! borrowed when it would not, so normalising already-normal text costs one scan per step and
//! no allocation.
//!
//! "Whitespace" everywhere in this module is Python's `str.isspace()` set: Unicode `White_Space`
//! plus the four information separators U+001C..U+001F, which Python also strips.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::SketchError;

/// Python's `str.isspace()` set: Unicode `White_Space` plus U+001C..U+001F.
#[inline]
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// True when the text is empty or only whitespace (same whitespace set as `trim`).
pub fn is_blank(text: &str) -> bool {
    text.chars().all(is_py_space)
}

/// Python's `str.strip()` (same whitespace set).
pub fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// A set of character ranges parsed from a spec like `"0-9a-zA-Z가-힣"` (single chars and `a-b`
/// ranges; `"\-"` escapes a literal dash and `"\\"` a literal backslash).
///
/// A dash that cannot start a range (first or last in the spec) is taken literally.
/// Serialises as its spec string.
#[derive(Clone, PartialEq, Eq)]
pub struct CharClassSet {
    spec: String,
    /// Sorted, non-overlapping, non-adjacent inclusive ranges, for binary search.
    ranges: Vec<(char, char)>,
}

impl fmt::Debug for CharClassSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CharClassSet").field(&self.spec).finish()
    }
}

impl FromStr for CharClassSet {
    type Err = SketchError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| SketchError::InvalidCharClass {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        // Resolve escapes first so that range detection only sees unescaped dashes.
        let mut items: Vec<(char, bool)> = Vec::new(); // (char, is_unescaped_dash)
        let mut chars = spec.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some(e) => items.push((e, false)),
                    None => return Err(err("trailing backslash")),
                }
            } else {
                items.push((c, c == '-'));
            }
        }
        if items.is_empty() {
            return Err(err("empty set"));
        }
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < items.len() {
            let lo = items[i].0;
            if i + 2 < items.len() && items[i + 1].1 {
                let hi = items[i + 2].0;
                if lo > hi {
                    return Err(err(&format!("range {lo}-{hi} is reversed")));
                }
                ranges.push((lo, hi));
                i += 3;
            } else {
                ranges.push((lo, lo));
                i += 1;
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(char, char)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if (lo as u32) <= (last.1 as u32).saturating_add(1) => {
                    last.1 = last.1.max(hi);
                }
                _ => merged.push((lo, hi)),
            }
        }
        Ok(CharClassSet {
            spec: spec.to_string(),
            ranges: merged,
        })
    }
}

impl CharClassSet {
    /// Whether `c` is in one of the ranges.
    pub fn contains(&self, c: char) -> bool {
        self.ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }

    /// The spec this set was parsed from.
    pub fn spec(&self) -> &str {
        &self.spec
    }
}

impl Serialize for CharClassSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spec)
    }
}

impl<'de> Deserialize<'de> for CharClassSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spec = String::deserialize(d)?;
        spec.parse().map_err(serde::de::Error::custom)
    }
}

/// Opt-in, composable text normalisation. Default = identity.
///
/// Applied in this fixed order: trim (Python `str.strip()` whitespace set: Rust `White_Space`
/// plus U+001C..U+001F), NFKC, lowercase, strip punctuation (Unicode general category `P*`,
/// removed without replacement), keep_chars filter, collapse whitespace (runs of whitespace ->
/// one ASCII space, and trims ends).
///
/// The keep_chars filter removes every character outside the set except whitespace, which it
/// keeps so that word boundaries survive the filter (collapse_whitespace then tidies them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Normalizer {
    /// Strip leading and trailing whitespace.
    pub trim: bool,
    /// Unicode NFKC normalisation.
    pub nfkc: bool,
    /// Unicode full lowercase mapping (as `str::to_lowercase` and Python's `str.lower()`).
    pub lowercase: bool,
    /// Remove characters of general category `P*`.
    pub strip_punctuation: bool,
    /// Keep only these characters (and whitespace).
    pub keep_chars: Option<CharClassSet>,
    /// Replace each whitespace run with one ASCII space and trim both ends.
    pub collapse_whitespace: bool,
}

/// Reusable buffers for [`Normalizer::normalize_into`].
#[derive(Default, Debug)]
pub struct NormalizeScratch {
    a: String,
    b: String,
}

/// Where the current text of a normalisation pipeline lives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Input,
    A,
    B,
}

impl Normalizer {
    /// True when no step is enabled.
    pub fn is_identity(&self) -> bool {
        !self.trim
            && !self.nfkc
            && !self.lowercase
            && !self.strip_punctuation
            && self.keep_chars.is_none()
            && !self.collapse_whitespace
    }

    /// Borrowed when nothing changes (always for the identity; also when the text is already
    /// normal).
    pub fn normalize<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut scratch = NormalizeScratch::default();
        let out = self.normalize_into(text, &mut scratch);
        // The result is either a sub-slice of `text` (only trimming happened) or a buffer.
        let base = text.as_ptr() as usize;
        let at = out.as_ptr() as usize;
        if at >= base && at + out.len() <= base + text.len() {
            let start = at - base;
            Cow::Borrowed(&text[start..start + out.len()])
        } else {
            Cow::Owned(out.to_string())
        }
    }

    /// Like [`Normalizer::normalize`], but writes into reusable buffers instead of allocating:
    /// the result is either a slice of `text` or of `scratch`.
    pub fn normalize_into<'a>(&self, text: &'a str, scratch: &'a mut NormalizeScratch) -> &'a str {
        let input = if self.trim { py_strip(text) } else { text };
        let mut slot = Slot::Input;
        let NormalizeScratch { a, b } = scratch;
        if self.nfkc {
            apply(&mut slot, input, a, b, nfkc_step);
        }
        if self.lowercase {
            apply(&mut slot, input, a, b, lowercase_step);
        }
        if self.strip_punctuation {
            apply(&mut slot, input, a, b, strip_punctuation_step);
        }
        if let Some(set) = &self.keep_chars {
            apply(&mut slot, input, a, b, |src, dst| {
                keep_chars_step(set, src, dst)
            });
        }
        if self.collapse_whitespace {
            apply(&mut slot, input, a, b, collapse_whitespace_step);
        }
        match slot {
            Slot::Input => input,
            Slot::A => a.as_str(),
            Slot::B => b.as_str(),
        }
    }
}

/// Runs one step reading the current slot; only when the step reports a change does its output
/// (written to the buffer that is not current) become current.
fn apply(
    slot: &mut Slot,
    input: &str,
    a: &mut String,
    b: &mut String,
    step: impl FnOnce(&str, &mut String) -> bool,
) {
    let changed = match *slot {
        Slot::Input => {
            a.clear();
            step(input, a)
        }
        Slot::A => {
            b.clear();
            step(a, b)
        }
        Slot::B => {
            a.clear();
            step(b, a)
        }
    };
    if changed {
        *slot = if *slot == Slot::A { Slot::B } else { Slot::A };
    }
}

/// Each step below returns false (and may leave `dst` in any state) when `src` is already
/// normal for it, so the caller keeps reading `src`.
fn nfkc_step(src: &str, dst: &mut String) -> bool {
    // ASCII is NFKC-invariant; the quick check settles most other text without composing.
    if src.is_ascii() || is_nfkc_quick(src.chars()) == IsNormalized::Yes {
        return false;
    }
    dst.extend(src.nfkc());
    dst != src
}

fn lowercase_step(src: &str, dst: &mut String) -> bool {
    if src.is_ascii() {
        if !src.bytes().any(|b| b.is_ascii_uppercase()) {
            return false;
        }
        dst.push_str(src);
        dst.make_ascii_lowercase();
        return true;
    }
    let unchanged = src.chars().all(|c| {
        let mut l = c.to_lowercase();
        l.next() == Some(c) && l.next().is_none()
    });
    if unchanged {
        return false;
    }
    // `str::to_lowercase` applies the final-sigma rule, as Python's `str.lower()` does.
    dst.push_str(&src.to_lowercase());
    true
}

#[inline]
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        // ASCII P* (the remaining ASCII symbols $+<=>^`|~ are S*, not punctuation).
        return matches!(
            c,
            '!' | '"'
                | '#'
                | '%'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | ','
                | '-'
                | '.'
                | '/'
                | ':'
                | ';'
                | '?'
                | '@'
                | '['
                | '\\'
                | ']'
                | '_'
                | '{'
                | '}'
        );
    }
    c.general_category_group() == GeneralCategoryGroup::Punctuation
}

fn strip_punctuation_step(src: &str, dst: &mut String) -> bool {
    if !src.chars().any(is_punctuation) {
        return false;
    }
    dst.extend(src.chars().filter(|&c| !is_punctuation(c)));
    true
}

fn keep_chars_step(set: &CharClassSet, src: &str, dst: &mut String) -> bool {
    let keep = |c: char| set.contains(c) || is_py_space(c);
    if src.chars().all(keep) {
        return false;
    }
    dst.extend(src.chars().filter(|&c| keep(c)));
    true
}

fn collapse_whitespace_step(src: &str, dst: &mut String) -> bool {
    // Already collapsed: no whitespace other than single inner ASCII spaces.
    let mut prev_space = true; // a leading space counts as a run start
    let mut normal = true;
    for c in src.chars() {
        if is_py_space(c) {
            if c != ' ' || prev_space {
                normal = false;
                break;
            }
            prev_space = true;
        } else {
            prev_space = false;
        }
    }
    let trailing_space = prev_space && !src.is_empty();
    if normal && !trailing_space {
        return false;
    }
    for word in src.split(is_py_space).filter(|w| !w.is_empty()) {
        if !dst.is_empty() {
            dst.push(' ');
        }
        dst.push_str(word);
    }
    true
}
