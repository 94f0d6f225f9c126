//! Online dedup: an index that documents are checked against one at a time or in batches, with
//! the decisions the batch engine (`neardup dedup`) makes over the same texts in the same order.
//!
//! [`Index`] holds the decision core of stage 2 ([`neardup_dedup::Deduper`]) with every key
//! counting: a batch run looks only at keys seen twice in the whole corpus, but a bucket whose key
//! occurs once never holds anything a later document meets, so deciding against all keys gives
//! the same verdicts (tested against the CLI in the Python tests). On top of the core it keeps:
//! - **ids**: each document has the caller's id (an integer or a string, never conflated) or
//!   the next free integer; decisions name the earlier document by its id;
//! - **idempotence**: the decision of every id checked, so that checking an id again (a retry
//!   after a timeout) returns the first decision and changes nothing;
//! - **batches**: [`Index::check_many`] signs its texts on all threads, then decides them in
//!   order, so a batch decides exactly as the same checks one by one.
//!
//! It owns the online verbs (check, query, insert) and ids. It does not sign (`neardup-sketch`,
//! `neardup-keys`' row rule) or decide (`neardup-dedup`).
#![warn(missing_docs)]

use std::fmt;

use hashbrown::HashMap;
use rayon::prelude::*;

use neardup_corpus::Reason;
use neardup_dedup::{
    Candidate, Deduper, DeduperConfig, DeduperStats, SampleAddr, SettingsError, Verdict,
};
use neardup_keys::{RowKind, RowRule};
use neardup_sketch::{NO_KEY, Scratch, Sketcher};

/// A document's id: the caller's integer or string. `7` and `"7"` are different ids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DocId {
    /// An integer id (also the ids the index gives documents checked without one).
    Int(i64),
    /// A string id.
    Str(String),
}

impl DocId {
    /// The id as the decision core keeps it: a tag telling integers from strings, then the
    /// value.
    fn encode(&self) -> String {
        match self {
            DocId::Int(n) => format!("i{n}"),
            DocId::Str(s) => format!("s{s}"),
        }
    }

    /// The id [`DocId::encode`] wrote.
    fn decode(s: &str) -> Option<DocId> {
        match s.split_at_checked(1)? {
            ("i", n) => n.parse().ok().map(DocId::Int),
            ("s", v) => Some(DocId::Str(v.to_string())),
            _ => None,
        }
    }
}

impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocId::Int(n) => write!(f, "{n}"),
            DocId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The decision about one document.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The document.
    pub id: DocId,
    /// Whether it is kept (it then joins the index).
    pub keep: bool,
    /// Why: unique, near, exact, empty (kept or dropped per the `empty` setting) or error (no
    /// text: kept, as the batch engine keeps a record whose text cannot be read).
    pub reason: Reason,
    /// The earlier document it duplicates (a near duplicate's representative, an exact copy's
    /// first copy).
    pub dup_of: Option<DocId>,
    /// The similarity that decided (1.0 for exact copies; exact Jaccard under verify="exact").
    pub similarity: Option<f64>,
}

/// A text to check: a document's text, or nothing readable (a `None` or a value that is not a
/// string, which the batch engine decides `error` and keeps).
#[derive(Clone, Copy, Debug)]
pub enum Text<'a> {
    /// The text.
    Str(&'a str),
    /// No text could be taken from the document.
    Unreadable,
}

/// The settings of an index: how texts are signed and how they are decided.
#[derive(Clone, Debug)]
pub struct IndexSettings {
    /// Signatures and band keys.
    pub sketcher: Sketcher,
    /// Which keys a text's row holds.
    pub rule: RowRule,
    /// The decision rule.
    pub deduper: DeduperConfig,
    /// Whether empty texts are kept (`empty="keep"`).
    pub keep_empty: bool,
}

/// What signing a text gives (done in parallel before the decisions, which are sequential).
struct Signed {
    kind: RowKind,
    content_hash: u128,
    row: Vec<u64>,
    sig: Vec<u32>,
    shingles: Option<Vec<u32>>,
}

/// What was decided of an id, kept so that checking it again returns it.
#[derive(Clone, Debug)]
struct Decided {
    keep: bool,
    reason: Reason,
    dup_of: Option<DocId>,
    similarity: Option<f64>,
}

/// An online dedup index in memory: see the crate docs.
pub struct Index {
    settings: IndexSettings,
    core: Deduper,
    /// Every id checked or inserted, with its decision.
    decided: HashMap<DocId, Decided>,
    /// Documents signed and given to the core: the record number of the next one's address.
    next_record: u64,
    /// The next integer id to try for a document without one.
    next_auto: i64,
    /// Hot bit per column: every key counts.
    all_hot: Vec<bool>,
}

/// An error the index met while deciding.
#[derive(Debug)]
pub enum IndexError {
    /// The settings are not valid.
    Settings(SettingsError),
    /// The representatives' spill file failed (exact verification past `verify_memory`).
    Spill(std::io::Error),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Settings(e) => write!(f, "{e}"),
            IndexError::Spill(e) => write!(f, "exact verification's spill file failed: {e}"),
        }
    }
}

impl std::error::Error for IndexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexError::Settings(e) => Some(e),
            IndexError::Spill(e) => Some(e),
        }
    }
}

impl Index {
    /// An empty index.
    pub fn new(settings: IndexSettings) -> Result<Index, IndexError> {
        let s = &settings.sketcher;
        let core = Deduper::new(
            settings.deduper.clone(),
            s.num_perm(),
            s.bands(),
            settings.rule,
        )
        .map_err(IndexError::Settings)?;
        let columns = settings.rule.columns(s.bands());
        Ok(Index {
            core,
            decided: HashMap::new(),
            next_record: 0,
            next_auto: 0,
            all_hot: vec![true; columns],
            settings,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// Documents checked or inserted (each id counted once).
    pub fn len(&self) -> usize {
        self.decided.len()
    }

    /// Whether nothing was checked or inserted yet.
    pub fn is_empty(&self) -> bool {
        self.decided.is_empty()
    }

    /// The decision an id got, if it was checked (inserted documents count as kept).
    pub fn decision_of(&self, id: &DocId) -> Option<Decision> {
        self.decided.get(id).map(|d| d.to_decision(id.clone()))
    }

    /// The decision core's counters (representatives, buckets, comparisons, bytes).
    pub fn stats(&self) -> DeduperStats {
        self.core.stats()
    }

    /// Decides `text` against everything inserted so far and inserts it when it is kept.
    /// Checking an id again returns its first decision and changes nothing.
    pub fn check(&mut self, text: Text<'_>, id: Option<DocId>) -> Result<Decision, IndexError> {
        let mut out = self.check_many(&[text], vec![id])?;
        Ok(out.pop().expect("one decision per text"))
    }

    /// [`Index::check`] for each text in order (`ids[i]` the id of `texts[i]`, `None` for the
    /// next free integer), signing the texts in parallel first: the same decisions as the
    /// checks one by one.
    ///
    /// # Panics
    /// When `ids.len() != texts.len()`.
    pub fn check_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<Decision>, IndexError> {
        assert_eq!(texts.len(), ids.len(), "one id per text");
        let ids = self.assign_ids(ids);
        let fresh = self.fresh(&ids);
        let signed = self.sign_all(texts, &fresh);
        let mut out = Vec::with_capacity(texts.len());
        for ((id, signed), fresh) in ids.into_iter().zip(signed).zip(fresh) {
            if !fresh {
                let d = self.decided[&id].to_decision(id);
                out.push(d);
                continue;
            }
            let decided = self.decide(&id, signed.as_ref())?;
            out.push(decided.to_decision(id.clone()));
            self.decided.insert(id, decided);
        }
        Ok(out)
    }

    /// Which of `ids` are to be signed and decided: those not decided yet, each at its first
    /// occurrence in `ids` (a later one gets the first one's decision).
    fn fresh(&self, ids: &[DocId]) -> Vec<bool> {
        let mut seen_here = hashbrown::HashSet::new();
        ids.iter()
            .map(|id| !self.decided.contains_key(id) && seen_here.insert(id.clone()))
            .collect()
    }

    /// The earlier documents `text` duplicates, with their similarity, inserting nothing: the
    /// first document with the same text (1.0), then the kept documents of its buckets whose
    /// similarity reaches the threshold. An empty list when `check` would keep it.
    pub fn query(&mut self, text: &str) -> Vec<(DocId, f64)> {
        let Some(signed) = self.sign_one(text) else {
            return Vec::new();
        };
        let matches = self
            .core
            .query(&candidate(&signed, &self.all_hot, SampleAddr::default()));
        matches
            .into_iter()
            .filter_map(|m| Some((DocId::decode(m.id.as_deref()?)?, m.similarity)))
            .collect()
    }

    /// Adds documents without deciding them: each becomes the first document with its text
    /// (unless an earlier one has it) and a representative of each of its buckets with room, as
    /// a kept document does. An id already checked or inserted is left as it was. Returns the
    /// ids (given, or the next free integers).
    pub fn insert_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<DocId>, IndexError> {
        assert_eq!(texts.len(), ids.len(), "one id per text");
        let ids = self.assign_ids(ids);
        let fresh = self.fresh(&ids);
        let signed = self.sign_all(texts, &fresh);
        for ((id, signed), fresh) in ids.iter().zip(signed).zip(fresh) {
            if !fresh {
                continue;
            }
            let reason = match &signed {
                Some(s) if s.kind != RowKind::Blank => {
                    let addr = self.next_addr();
                    let c = candidate(s, &self.all_hot, addr);
                    self.core.insert(&c);
                    let code = id.encode();
                    self.core
                        .note(addr, &Verdict::Unique, s.content_hash, Some(&code));
                    if let Some(e) = self.core.take_io_error() {
                        return Err(IndexError::Spill(e));
                    }
                    Reason::Unique
                }
                Some(_) => Reason::Empty,
                None => Reason::Error,
            };
            self.decided.insert(
                id.clone(),
                Decided {
                    keep: true,
                    reason,
                    dup_of: None,
                    similarity: None,
                },
            );
        }
        Ok(ids)
    }

    /// Gives each document without an id the next integer no document has.
    fn assign_ids(&mut self, ids: Vec<Option<DocId>>) -> Vec<DocId> {
        let mut given: hashbrown::HashSet<DocId> = ids.iter().flatten().cloned().collect();
        ids.into_iter()
            .map(|id| {
                id.unwrap_or_else(|| {
                    loop {
                        let id = DocId::Int(self.next_auto);
                        self.next_auto += 1;
                        if !self.decided.contains_key(&id) && given.insert(id.clone()) {
                            break id;
                        }
                    }
                })
            })
            .collect()
    }

    /// Signs the texts marked `fresh` on all threads (`None` for the others and for
    /// unreadable texts).
    fn sign_all(&self, texts: &[Text<'_>], fresh: &[bool]) -> Vec<Option<Signed>> {
        let sign = |scratch: &mut Scratch, (text, fresh): (&Text<'_>, &bool)| match (text, fresh) {
            (Text::Str(t), true) => Some(self.sign(t, scratch)),
            _ => None,
        };
        // A handful of texts costs less than waking the pool.
        if texts.len() < 8 {
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

    fn sign_one(&self, text: &str) -> Option<Signed> {
        let signed = self.sign(text, &mut self.scratch());
        (signed.kind != RowKind::Blank).then_some(signed)
    }

    fn scratch(&self) -> Scratch {
        if self.core.needs_shingles() {
            Scratch::collecting_shingle_sets()
        } else {
            Scratch::default()
        }
    }

    fn sign(&self, text: &str, scratch: &mut Scratch) -> Signed {
        let s = &self.settings.sketcher;
        let mut sig = vec![0; s.num_perm()];
        let mut row = vec![NO_KEY; self.all_hot.len()];
        let r = self
            .settings
            .rule
            .sketch(s, text, scratch, &mut sig, &mut row);
        let shingles = (self.core.needs_shingles() && r.kind != RowKind::Blank).then(|| {
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

    fn next_addr(&mut self) -> SampleAddr {
        let addr = SampleAddr {
            file: 0,
            record: self.next_record,
            field: 0,
        };
        self.next_record += 1;
        addr
    }

    /// Decides one signed document (`None`: unreadable) and records it in the core.
    fn decide(&mut self, id: &DocId, signed: Option<&Signed>) -> Result<Decided, IndexError> {
        let plain = |keep, reason| Decided {
            keep,
            reason,
            dup_of: None,
            similarity: None,
        };
        let Some(s) = signed else {
            return Ok(plain(true, Reason::Error));
        };
        if s.kind == RowKind::Blank {
            return Ok(plain(self.settings.keep_empty, Reason::Empty));
        }
        if s.row.iter().all(|k| *k == NO_KEY) {
            // No key at all (near and exact detection both off, or a text shorter than a
            // shingle with exact detection off): nothing to meet, as in a batch run.
            return Ok(plain(true, Reason::Unique));
        }
        let addr = self.next_addr();
        let verdict = self.core.decide(&candidate(s, &self.all_hot, addr));
        let code = id.encode();
        let named = self.core.note(addr, &verdict, s.content_hash, Some(&code));
        if let Some(e) = self.core.take_io_error() {
            return Err(IndexError::Spill(e));
        }
        let dup_of = named.as_deref().and_then(DocId::decode);
        Ok(match verdict {
            Verdict::Unique => plain(true, Reason::Unique),
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
        })
    }
}

/// The decision core's view of a signed document at `addr`, every column hot.
fn candidate<'a>(s: &'a Signed, hot: &'a [bool], addr: SampleAddr) -> Candidate<'a> {
    Candidate {
        addr,
        signature: &s.sig,
        row: &s.row,
        hot,
        content_hash: s.content_hash,
        shingles: s.shingles.as_deref(),
    }
}

impl Decided {
    fn to_decision(&self, id: DocId) -> Decision {
        Decision {
            id,
            keep: self.keep,
            reason: self.reason,
            dup_of: self.dup_of.clone(),
            similarity: self.similarity,
        }
    }
}
