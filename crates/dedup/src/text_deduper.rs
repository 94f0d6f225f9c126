//! [`TextDeduper`]: texts given one at a time, decided in memory as a run decides the same texts
//! in the same order. The Python package's `Deduper` is this type behind a lock.

use hashbrown::HashSet;
use neardup_corpus::Reason;
use neardup_keys::{HotKeys, KeysConfig, RowKind, RowRule, ShortTextPolicy, content_key};
use neardup_sketch::{NO_KEY, Scratch, Sketcher};

use crate::deduper::{Candidate, Deduper, DeduperConfig, DeduperStats, SampleAddr, Verdict};
use crate::error::SettingsError;
use crate::pass::{Decision, EmptyPolicy};

/// What a text given to a [`TextDeduper`] was decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TextVerdict {
    /// Blank as given or once normalised: kept or dropped by the [`EmptyPolicy`], never compared
    /// (blank texts must not all become copies of one another).
    Empty {
        /// Whether it is kept.
        keep: bool,
    },
    /// Decided by the decision core.
    Decided(Verdict),
}

impl TextVerdict {
    /// Whether the text is kept.
    pub fn keep(&self) -> bool {
        match self {
            TextVerdict::Empty { keep } => *keep,
            TextVerdict::Decided(v) => v.keep(),
        }
    }

    /// The reason a decisions file gives for it.
    pub fn reason(&self) -> Reason {
        match self {
            TextVerdict::Empty { .. } => Reason::Empty,
            TextVerdict::Decided(Verdict::Unique) => Reason::Unique,
            TextVerdict::Decided(Verdict::Exact { .. }) => Reason::Exact,
            TextVerdict::Decided(Verdict::Near { .. }) => Reason::Near,
        }
    }

    /// The decision about the text at position `record` with this verdict, as a run's
    /// decisions give it: the texts it names are positions too (file 0, field 0), and there
    /// are no ids.
    pub fn decision(&self, record: u64) -> Decision {
        let addr = SampleAddr {
            file: 0,
            record,
            field: 0,
        };
        let decided = match self {
            TextVerdict::Decided(v) => Some(v),
            TextVerdict::Empty { .. } => None,
        };
        let (dup_of, similarity) = decided.and_then(Verdict::dup_of).unzip();
        Decision {
            addr,
            id: None,
            keep: self.keep(),
            reason: self.reason(),
            dup_of,
            dup_of_id: None,
            similarity,
            cluster: decided.map_or(addr, |v| v.cluster(addr)),
        }
    }
}

/// A self-contained deduplicator for callers who bring their own texts one by one: it sketches
/// each text itself and decides it with the decision core of stage 2, first seen kept. A text's
/// address is its position in the sequence (file 0, field 0).
///
/// Every band key counts unless [`TextDeduper::with_hot_keys`] restricts them to a hot-key set
/// (from stage 1, possibly merged over shards): given the texts in the order stage 1 saw them,
/// the decisions are then the pipeline's.
///
/// Deciding is two steps, [`TextDeduper::sign`] then [`TextDeduper::decide_signed`], so that a
/// caller whose tokenizer can fail (the Python package's callables) can look between them and
/// leave a text it could not sign undecided; [`TextDeduper::check`] does both.
///
/// ```no_run
/// use neardup_dedup::{DeduperConfig, EmptyPolicy, TextDeduper};
/// use neardup_keys::{HotKeys, RowRule};
/// use neardup_sketch::{Sketcher, SketchConfig};
///
/// # fn sketch_config() -> SketchConfig { unimplemented!() }
/// // The sketch settings and row rule stage 1 used for these hot keys.
/// let sketcher = Sketcher::new(sketch_config()).unwrap();
/// let hot = HotKeys::load("hot.ndh".as_ref()).unwrap();
/// let mut dedup = TextDeduper::new(sketcher, RowRule::default(), DeduperConfig::default(), EmptyPolicy::Keep)
///     .unwrap()
///     .against(&hot)
///     .unwrap();
/// for text in ["first text …", "first text …!"] {
///     let verdict = dedup.check(text).unwrap();
///     println!("keep={} {:?}", verdict.keep(), verdict.reason());
/// }
/// ```
pub struct TextDeduper {
    sketcher: Sketcher,
    rule: RowRule,
    core: Deduper,
    /// Only these keys count; every key when `None`.
    hot: Option<HashSet<u64>>,
    empty: EmptyPolicy,
    sign_blank: bool,
    scratch: Scratch,
    sig: Vec<u32>,
    row: Vec<u64>,
    hot_columns: Vec<bool>,
    shingles: Vec<u32>,
    /// What [`TextDeduper::sign`] left for [`TextDeduper::decide_signed`].
    signed: Option<(RowKind, u128)>,
    next: u64,
}

impl TextDeduper {
    /// A deduplicator where every band key counts.
    pub fn new(
        sketcher: Sketcher,
        rule: RowRule,
        config: DeduperConfig,
        empty: EmptyPolicy,
    ) -> Result<TextDeduper, SettingsError> {
        let core = Deduper::new(config, sketcher.num_perm(), sketcher.bands(), rule)?;
        let scratch = if core.needs_shingles() {
            Scratch::collecting_shingle_sets()
        } else {
            Scratch::default()
        };
        let columns = rule.columns(sketcher.bands());
        Ok(TextDeduper {
            sig: vec![0; sketcher.num_perm()],
            row: vec![0; columns],
            hot_columns: vec![false; columns],
            shingles: Vec::new(),
            sketcher,
            rule,
            core,
            hot: None,
            empty,
            sign_blank: false,
            scratch,
            signed: None,
            next: 0,
        })
    }

    /// Only the keys of `hot` count, which must have been counted with this deduper's sketch
    /// settings and row rule (else the error names each setting that differs).
    pub fn against(self, hot: &HotKeys) -> Result<TextDeduper, SettingsError> {
        let theirs = hot.layout();
        // The deduper selects no fields: compared on the hot keys' own selection, only the
        // settings that make the keys differ count.
        let mut mine = KeysConfig::new(self.sketcher.clone(), theirs.selector.clone());
        mine.rule = self.rule;
        let mine = mine.layout();
        if *theirs != mine {
            return Err(SettingsError::OtherSketch {
                differences: theirs.differences(&mine),
            });
        }
        Ok(self.with_hot_keys(hot.lookup()))
    }

    /// Only these keys count (the caller has checked that they are keys of this deduper's
    /// settings).
    pub fn with_hot_keys(mut self, hot: HashSet<u64>) -> TextDeduper {
        self.hot = Some(hot);
        self
    }

    /// Signs whitespace-only texts like any other instead of deciding them empty (lshcurator's
    /// `Deduper` does). It needs band keys (`rule.band_keys`): without them such a text has
    /// nothing to be signed into, and is decided empty as without this option.
    pub fn signing_blank_texts(mut self) -> TextDeduper {
        self.sign_blank = self.rule.band_keys;
        self
    }

    /// Texts decided so far (the position the next one gets).
    pub fn seen(&self) -> u64 {
        self.next
    }

    /// How many keys count, when they are restricted ([`TextDeduper::with_hot_keys`]).
    pub fn hot_keys(&self) -> Option<usize> {
        self.hot.as_ref().map(|h| h.len())
    }

    /// Decides the next text.
    pub fn check(&mut self, text: &str) -> std::io::Result<TextVerdict> {
        self.sign(text);
        self.decide_signed()
    }

    /// Signs the next text, deciding nothing yet: [`TextDeduper::decide_signed`] decides it; a
    /// text signed and never decided is as if it had not been given.
    pub fn sign(&mut self, text: &str) {
        let signed = if self.sign_blank && self.rule.is_blank(&self.sketcher, text) {
            self.sign_blank_text(text)
        } else {
            let r = self.rule.sketch(
                &self.sketcher,
                text,
                &mut self.scratch,
                &mut self.sig,
                &mut self.row,
            );
            (r.kind, r.content_hash)
        };
        self.signed = Some(signed);
    }

    /// A whitespace-only text signed as any other (band keys are on, [`Self::signing_blank_texts`]).
    fn sign_blank_text(&mut self, text: &str) -> (RowKind, u128) {
        let bands = self.sketcher.bands();
        let (band_columns, rest) = self.row.split_at_mut(bands);
        let info = self
            .sketcher
            .sketch(text, &mut self.scratch, &mut self.sig, band_columns);
        if info.shingles == 0 && self.rule.short_texts == ShortTextPolicy::ExactOnly {
            band_columns.fill(NO_KEY);
        }
        if let Some(slot) = rest.first_mut() {
            *slot = content_key(info.content_hash);
        }
        let kind = if info.shingles == 0 {
            RowKind::Short
        } else {
            RowKind::Normal
        };
        (kind, info.content_hash)
    }

    /// Decides the text [`TextDeduper::sign`] signed last. An error is exact verification's
    /// spill file failing; the text is then decided all the same (as unique or by the sets still
    /// in memory), as stage 2 would not be.
    ///
    /// # Panics
    /// When no text was signed since the last decision.
    pub fn decide_signed(&mut self) -> std::io::Result<TextVerdict> {
        let (kind, content_hash) = self.signed.take().expect("decide_signed follows sign");
        let addr = SampleAddr {
            file: 0,
            record: self.next,
            field: 0,
        };
        self.next += 1;
        if kind == RowKind::Blank {
            return Ok(TextVerdict::Empty {
                keep: self.empty == EmptyPolicy::Keep,
            });
        }
        for (hot, key) in self.hot_columns.iter_mut().zip(&self.row) {
            *hot = *key != NO_KEY && self.hot.as_ref().is_none_or(|h| h.contains(key));
        }
        if !self.hot_columns.iter().any(|h| *h) {
            return Ok(TextVerdict::Decided(Verdict::Unique));
        }
        let shingles = if self.core.needs_shingles() {
            self.shingles.clear();
            self.sketcher
                .last_shingle_set(&mut self.scratch, &mut self.shingles);
            Some(self.shingles.as_slice())
        } else {
            None
        };
        let verdict = self.core.decide(&Candidate {
            addr,
            signature: &self.sig,
            row: &self.row,
            hot: &self.hot_columns,
            content_hash,
            shingles,
        });
        match self.core.take_io_error() {
            Some(e) => Err(e),
            None => Ok(TextVerdict::Decided(verdict)),
        }
    }

    /// The decision core's counters so far.
    pub fn stats(&self) -> DeduperStats {
        self.core.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_sketch::{LshParams, Shingler, SketchConfig};

    fn deduper(empty: EmptyPolicy) -> TextDeduper {
        let config = SketchConfig::new(
            Shingler::Chars { k: 5, step: 1 },
            128,
            LshParams::new(16, 8).unwrap(),
        );
        let sketcher = Sketcher::new(config).unwrap();
        TextDeduper::new(
            sketcher,
            RowRule::default(),
            DeduperConfig::default(),
            empty,
        )
        .unwrap()
    }

    const TEXT: &str = "the quick brown fox jumps over the lazy dog near the river bank today";

    #[test]
    fn first_seen_is_kept_and_later_copies_name_it() {
        let mut d = deduper(EmptyPolicy::Keep);
        assert_eq!(
            d.check(TEXT).unwrap(),
            TextVerdict::Decided(Verdict::Unique)
        );
        let copy = d.check(TEXT).unwrap();
        assert_eq!(copy.reason(), Reason::Exact);
        let TextVerdict::Decided(Verdict::Exact { of, .. }) = copy else {
            panic!("{copy:?}")
        };
        assert_eq!(of.record, 0);
        let near = d.check(&format!("{TEXT}!")).unwrap();
        assert_eq!(near.reason(), Reason::Near);
        assert!(!near.keep());
        assert_eq!(d.seen(), 3);
    }

    #[test]
    fn a_decision_names_positions_and_the_kept_text_of_its_set() {
        let mut d = deduper(EmptyPolicy::Keep);
        let kept = d.check(TEXT).unwrap().decision(0);
        assert_eq!((kept.keep, kept.reason), (true, Reason::Unique));
        assert_eq!(
            (kept.dup_of, kept.similarity, kept.cluster),
            (None, None, kept.addr)
        );
        let near = d.check(&format!("{TEXT}!")).unwrap().decision(1);
        assert_eq!(
            (near.keep, near.reason, near.addr.record),
            (false, Reason::Near, 1)
        );
        assert_eq!(near.dup_of, Some(kept.addr));
        assert!(near.similarity.is_some_and(|s| s < 1.0), "{near:?}");
        // A copy of the near duplicate names it, and resolves to the text kept.
        let copy = d.check(&format!("{TEXT}!")).unwrap().decision(2);
        assert_eq!(
            (copy.reason, copy.dup_of, copy.similarity),
            (Reason::Exact, Some(near.addr), Some(1.0))
        );
        assert_eq!(copy.cluster, kept.addr);
        let blank = d.check("  ").unwrap().decision(3);
        assert_eq!(
            (blank.keep, blank.reason, blank.dup_of, blank.similarity),
            (true, Reason::Empty, None, None)
        );
        assert_eq!(
            (blank.cluster.record, blank.id, blank.dup_of_id),
            (3, None, None)
        );
    }

    #[test]
    fn blank_texts_follow_the_empty_policy_unless_signed() {
        let mut keep = deduper(EmptyPolicy::Keep);
        let mut drop = deduper(EmptyPolicy::Drop);
        for d in [&mut keep, &mut drop] {
            assert_eq!(d.check("   ").unwrap().reason(), Reason::Empty);
        }
        assert!(keep.check("\n").unwrap().keep());
        assert!(!drop.check("\n").unwrap().keep());
        // Signed, two blank texts are copies of each other, as lshcurator's Deduper has them.
        let mut signing = deduper(EmptyPolicy::Keep).signing_blank_texts();
        assert_eq!(signing.check("   ").unwrap().reason(), Reason::Unique);
        assert_eq!(signing.check("   ").unwrap().reason(), Reason::Exact);
    }

    #[test]
    fn a_text_signed_and_not_decided_leaves_no_trace() {
        let mut d = deduper(EmptyPolicy::Keep);
        d.sign(TEXT);
        d.sign("another text entirely, with nothing in common with the first one");
        assert_eq!(d.decide_signed().unwrap().reason(), Reason::Unique);
        assert_eq!(d.seen(), 1);
        assert_eq!(d.check(TEXT).unwrap().reason(), Reason::Unique);
    }

    #[test]
    fn keys_outside_the_hot_set_do_not_count() {
        let mut d = deduper(EmptyPolicy::Keep).with_hot_keys(HashSet::new());
        assert_eq!(d.hot_keys(), Some(0));
        assert!(d.check(TEXT).unwrap().keep());
        assert!(d.check(TEXT).unwrap().keep());
    }
}
