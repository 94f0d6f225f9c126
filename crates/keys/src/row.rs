//! How one sample becomes one row of the key table.
//!
//! Both stages must turn a sample into exactly the same row, so the rule lives here, once, and
//! stage 2 calls it for the samples it re-checks.

use neardup_sketch::{NO_KEY, Scratch, Sketcher, is_blank};
use serde::{Deserialize, Serialize};

/// What to do with samples whose shingle set is empty (text shorter than the shingle size after
/// normalisation).
///
/// MinHash gives every empty set the same signature (all slots `u32::MAX`), so taken literally all
/// short texts would be near-duplicates of one another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShortTextPolicy {
    /// Short texts get no band keys; only their content key (exact duplicates) is counted. The
    /// default: two different three-letter texts are not near-duplicates.
    #[default]
    ExactOnly,
    /// Short texts keep the all-`u32::MAX` signature and its band keys, as datasketch and
    /// lshcurator do (used by the lshcurator compatibility preset).
    EmptySignature,
}

/// The per-sample rule of both stages: which columns a sample fills and with what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowRule {
    /// Compute MinHash band keys. Off for exact-only deduplication, where the content key is the
    /// only column and no signature is ever computed.
    pub band_keys: bool,
    /// Count the content hash of the normalised text as an extra column, so stage 2 can drop exact
    /// copies without comparing signatures.
    pub exact_key: bool,
    /// What short texts get.
    pub short_texts: ShortTextPolicy,
}

impl Default for RowRule {
    fn default() -> Self {
        RowRule {
            band_keys: true,
            exact_key: true,
            short_texts: ShortTextPolicy::ExactOnly,
        }
    }
}

/// What kind of row a sample produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// Empty or whitespace-only text: every column is [`NO_KEY`].
    Blank,
    /// Fewer shingles than one: band keys per [`ShortTextPolicy`].
    Short,
    /// An ordinary text with band keys.
    Normal,
}

/// Rows made earlier, by the content hash of their text (stage 1's `RowCache`): a text found
/// there takes its row unsigned, since the row rule is a function of the normalised text.
pub(crate) trait KnownRows {
    /// Copies into `row` the row of the text with this content hash, if held, and returns its
    /// kind.
    fn get(&self, content_hash: u128, row: &mut [u64]) -> Option<RowKind>;
    /// Keeps the row of a text just signed.
    fn put(&self, content_hash: u128, kind: RowKind, row: &[u64]);
}

/// The outcome of sketching one sample into a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSketch {
    /// The row's kind.
    pub kind: RowKind,
    /// The 128-bit content hash of the normalised text (0 for blank samples).
    pub content_hash: u128,
}

/// The 64-bit content key stored in the table for a 128-bit content hash; never [`NO_KEY`].
pub fn content_key(content_hash: u128) -> u64 {
    let key = content_hash as u64;
    if key == NO_KEY { 1 } else { key }
}

impl RowRule {
    /// Number of band-key columns for `bands` bands (0 when band keys are off).
    pub fn band_columns(&self, bands: usize) -> usize {
        if self.band_keys { bands } else { 0 }
    }

    /// Number of u64 columns per row for `bands` bands.
    pub fn columns(&self, bands: usize) -> usize {
        self.band_columns(bands) + usize::from(self.exact_key)
    }

    /// Whether a text counts as empty: blank as given, or blank once normalised (e.g. a
    /// `keep_chars` filter removed every character) — such texts must not all become copies of
    /// one another.
    pub fn is_blank(&self, sketcher: &Sketcher, text: &str) -> bool {
        if is_blank(text) {
            return true;
        }
        let n = &sketcher.config().normalizer;
        // Trimming alone cannot make a non-blank text blank; skip the second normalisation then.
        let only_trim = !(n.nfkc
            || n.lowercase
            || n.strip_punctuation
            || n.collapse_whitespace
            || n.keep_chars.is_some());
        !only_trim && is_blank(&n.normalize(text))
    }

    /// Sketches `text` into `row` (`row.len() == self.columns(bands)`), using `sig`
    /// (`len == num_perm`) as the signature buffer, which holds the signature afterwards for
    /// [`RowKind::Normal`] (and for [`RowKind::Short`]).
    pub fn sketch(
        &self,
        sketcher: &Sketcher,
        text: &str,
        scratch: &mut Scratch,
        sig: &mut [u32],
        row: &mut [u64],
    ) -> RowSketch {
        self.sketch_known(sketcher, text, scratch, sig, row, None).0
    }

    /// [`RowRule::sketch`], except that a text whose content hash `known` holds takes its row
    /// from there unsigned (`sig` is then left as it was, and the flag returned is true), and a
    /// text signed here leaves its row in `known`.
    pub(crate) fn sketch_known(
        &self,
        sketcher: &Sketcher,
        text: &str,
        scratch: &mut Scratch,
        sig: &mut [u32],
        row: &mut [u64],
        known: Option<&dyn KnownRows>,
    ) -> (RowSketch, bool) {
        let bands = sketcher.bands();
        debug_assert_eq!(row.len(), self.columns(bands));
        // Normalised once for the blank test, the content hash and the signature.
        let normalized = sketcher.normalize(text, scratch);
        // [`RowRule::is_blank`], with the normalised text at hand.
        if is_blank(text) || is_blank(normalized.text()) {
            row.fill(NO_KEY);
            let blank = RowSketch {
                kind: RowKind::Blank,
                content_hash: 0,
            };
            return (blank, false);
        }
        let content_hash = normalized.content_hash();
        if !self.band_keys {
            if let Some(slot) = row.first_mut() {
                *slot = content_key(content_hash);
            }
            let exact_only = RowSketch {
                kind: RowKind::Normal,
                content_hash,
            };
            return (exact_only, false);
        }
        if let Some(kind) = known.and_then(|k| k.get(content_hash, row)) {
            return (RowSketch { kind, content_hash }, true);
        }
        let (band_cols, rest) = row.split_at_mut(bands);
        let info = normalized.sketch(sig, band_cols);
        let kind = if info.shingles == 0 {
            if self.short_texts == ShortTextPolicy::ExactOnly {
                band_cols.fill(NO_KEY);
            }
            RowKind::Short
        } else {
            RowKind::Normal
        };
        if let Some(slot) = rest.first_mut() {
            *slot = content_key(content_hash);
        }
        if let Some(known) = known {
            known.put(content_hash, kind, row);
        }
        (RowSketch { kind, content_hash }, false)
    }
}
