//! Signing texts for the index (in parallel, before the decisions, which are sequential) and
//! deciding one signed text with the decision core: what every store shares.

use rayon::prelude::*;

use neardup_corpus::Reason;
use neardup_dedup::{Candidate, Deduper, SampleAddr, Verdict, Verify};
use neardup_keys::RowKind;
use neardup_sketch::{NO_KEY, Scratch};

use crate::{DocId, IndexError, IndexSettings, Text};

/// What signing a text gives.
pub(crate) struct Signed {
    pub(crate) kind: RowKind,
    pub(crate) content_hash: u128,
    pub(crate) row: Vec<u64>,
    pub(crate) sig: Vec<u32>,
    pub(crate) shingles: Option<Vec<u32>>,
}

impl Signed {
    /// Whether the decision core sees it: it has text and at least one key (with near and
    /// exact detection both off, or a text shorter than a shingle with exact detection off, it
    /// has none and meets nothing, as in a batch run).
    pub(crate) fn has_keys(&self) -> bool {
        self.kind != RowKind::Blank && self.row.iter().any(|k| *k != NO_KEY)
    }
}

/// What was decided of an id, kept so that checking it again returns it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decided {
    pub(crate) keep: bool,
    pub(crate) reason: Reason,
    pub(crate) dup_of: Option<DocId>,
    pub(crate) similarity: Option<f64>,
}

impl Decided {
    pub(crate) fn plain(keep: bool, reason: Reason) -> Decided {
        Decided {
            keep,
            reason,
            dup_of: None,
            similarity: None,
        }
    }

    pub(crate) fn to_decision(&self, id: DocId) -> crate::Decision {
        crate::Decision {
            id,
            keep: self.keep,
            reason: self.reason,
            dup_of: self.dup_of.clone(),
            similarity: self.similarity,
        }
    }
}

/// Signs texts with an index's settings.
pub(crate) struct Signer<'a> {
    settings: &'a IndexSettings,
    columns: usize,
}

impl<'a> Signer<'a> {
    pub(crate) fn new(settings: &'a IndexSettings) -> Signer<'a> {
        Signer {
            columns: settings.rule.columns(settings.sketcher.bands()),
            settings,
        }
    }

    fn needs_shingles(&self) -> bool {
        self.settings.deduper.verify == Verify::Jaccard
    }

    /// Signs the texts marked `fresh` on all threads (`None` for the others and for
    /// unreadable texts).
    pub(crate) fn sign_all(&self, texts: &[Text<'_>], fresh: &[bool]) -> Vec<Option<Signed>> {
        let sign = |scratch: &mut Scratch, (text, fresh): (&Text<'_>, &bool)| match (text, fresh) {
            (Text::Str(t), true) => Some(self.sign(t, scratch)),
            _ => None,
        };
        // A handful of texts costs less than waking the pool, and a pool of one thread
        // (RAYON_NUM_THREADS=1, for producers sharing a machine's cores) only hands the work
        // to another thread while this one waits.
        if texts.len() < 8 || rayon::current_num_threads() == 1 {
            let mut scratch = self.scratch();
            return texts
                .iter()
                .zip(fresh)
                .map(|p| sign(&mut scratch, p))
                .collect();
        }
        texts
            .par_iter()
            .zip(fresh.par_iter())
            .map_init(|| self.scratch(), sign)
            .collect()
    }

    /// Texts to query signed on all threads, `None` for a blank one.
    pub(crate) fn sign_texts(&self, texts: &[&str]) -> Vec<Option<Signed>> {
        let texts: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
        self.sign_all(&texts, &vec![true; texts.len()])
            .into_iter()
            .map(|s| s.filter(|s| s.kind != RowKind::Blank))
            .collect()
    }

    fn scratch(&self) -> Scratch {
        if self.needs_shingles() {
            Scratch::collecting_shingle_sets()
        } else {
            Scratch::default()
        }
    }

    fn sign(&self, text: &str, scratch: &mut Scratch) -> Signed {
        let s = &self.settings.sketcher;
        let mut sig = vec![0; s.num_perm()];
        let mut row = vec![NO_KEY; self.columns];
        let r = self
            .settings
            .rule
            .sketch(s, text, scratch, &mut sig, &mut row);
        let shingles = (self.needs_shingles() && r.kind != RowKind::Blank).then(|| {
            let mut set = Vec::new();
            s.last_shingle_set(scratch, &mut set);
            set
        });
        Signed {
            kind: r.kind,
            content_hash: r.content_hash,
            row,
            sig,
            shingles,
        }
    }
}

/// What a query of a signed text finds in `core`: the earlier documents it duplicates, with
/// their similarity.
pub(crate) fn matches(core: &mut Deduper, hot: &[bool], s: &Signed) -> Vec<(DocId, f64)> {
    core.query(&candidate(s, hot, SampleAddr::default()))
        .into_iter()
        .filter_map(|m| Some((DocId::decode(m.id.as_deref()?)?, m.similarity)))
        .collect()
}

/// The decision core's view of a signed document at `addr`, every column hot.
pub(crate) fn candidate<'a>(s: &'a Signed, hot: &'a [bool], addr: SampleAddr) -> Candidate<'a> {
    Candidate {
        addr,
        signature: &s.sig,
        row: &s.row,
        hot,
        content_hash: s.content_hash,
        shingles: s.shingles.as_deref(),
    }
}

/// Decides one signed document (`None`: unreadable) at `addr` with `core` (every column hot) and
/// records it there under `id`. Returns the decision and the core's verdict (`None` when the
/// core did not see it: no text, or no key).
pub(crate) fn decide(
    core: &mut Deduper,
    hot: &[bool],
    keep_empty: bool,
    addr: SampleAddr,
    id: &DocId,
    signed: Option<&Signed>,
) -> Result<(Decided, Option<Verdict>), IndexError> {
    let Some(s) = signed else {
        return Ok((Decided::plain(true, Reason::Error), None));
    };
    if s.kind == RowKind::Blank {
        return Ok((Decided::plain(keep_empty, Reason::Empty), None));
    }
    if !s.has_keys() {
        return Ok((Decided::plain(true, Reason::Unique), None));
    }
    let verdict = core.decide(&candidate(s, hot, addr));
    let code = id.encode();
    let named = core.note(addr, &verdict, s.content_hash, Some(&code));
    if let Some(e) = core.take_io_error() {
        return Err(IndexError::Spill(e));
    }
    let dup_of = named.as_deref().and_then(DocId::decode);
    let decided = match verdict {
        Verdict::Unique => Decided::plain(true, Reason::Unique),
        Verdict::Exact { .. } => Decided {
            keep: false,
            reason: Reason::Exact,
            dup_of,
            similarity: Some(1.0),
        },
        Verdict::Near { similarity, .. } => Decided {
            keep: false,
            reason: Reason::Near,
            dup_of,
            similarity: Some(similarity),
        },
    };
    Ok((decided, Some(verdict)))
}

/// Adds one signed document at `addr` to `core` without deciding it (as a kept document) under
/// `id`. Returns what is recorded of the id.
pub(crate) fn insert(
    core: &mut Deduper,
    hot: &[bool],
    addr: SampleAddr,
    id: &DocId,
    signed: Option<&Signed>,
) -> Result<Decided, IndexError> {
    Ok(match signed {
        Some(s) if s.kind != RowKind::Blank => {
            if s.has_keys() {
                core.insert(&candidate(s, hot, addr));
                let code = id.encode();
                core.note(addr, &Verdict::Unique, s.content_hash, Some(&code));
                if let Some(e) = core.take_io_error() {
                    return Err(IndexError::Spill(e));
                }
            }
            Decided::plain(true, Reason::Unique)
        }
        Some(_) => Decided::plain(true, Reason::Empty),
        None => Decided::plain(true, Reason::Error),
    })
}
