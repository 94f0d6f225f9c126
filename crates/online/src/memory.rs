//! The index in this process's memory: the decision core itself, every id's decision beside it,
//! and what a saved index holds of each document (so that it can be saved, and a batch run can
//! use it `--against`).

use hashbrown::{HashMap, HashSet};

use neardup_dedup::{Deduper, DeduperStats, PriorState, SampleAddr, Verdict};
use neardup_index::{EntryRecord, SavedDecision, SavedIndex, StoredId};

use crate::sign::{self, Decided, Signed, Signer};
use crate::{Decision, DocId, IndexError, IndexSettings, Text};

/// An online dedup index in this process's memory (see the crate docs).
pub struct MemoryIndex {
    settings: IndexSettings,
    core: Deduper,
    /// What a saved index holds: every document given to the core as an entry (its sketch
    /// too), and in its online state every id's decision (in the order decided) and the
    /// counters.
    saved: SavedIndex,
    /// Every id checked or inserted: its decision's place in the saved decisions.
    decided: HashMap<DocId, usize>,
    /// Hot bit per column: every key counts.
    all_hot: Vec<bool>,
}

impl MemoryIndex {
    /// An empty index.
    pub fn new(settings: IndexSettings) -> Result<MemoryIndex, IndexError> {
        let saved = SavedIndex::new_online(
            settings.recorded(),
            settings.sketcher.num_perm(),
            settings.deduper.verify == neardup_dedup::Verify::Jaccard,
            settings.keep_empty,
        );
        MemoryIndex::seeded(settings, saved, &PriorState::default())
    }

    /// The index of `saved` (self-contained, its settings checked), its decision core seeded
    /// with `state`, the whole decision state of `saved`.
    pub(crate) fn seeded(
        settings: IndexSettings,
        mut saved: SavedIndex,
        state: &PriorState,
    ) -> Result<MemoryIndex, IndexError> {
        let mut core = settings.deduper_core()?;
        core.seed(state);
        if let Some(e) = core.take_io_error() {
            return Err(IndexError::Spill(e));
        }
        saved.start_online(settings.keep_empty);
        let decided = saved
            .online()
            .expect("started")
            .decisions
            .iter()
            .enumerate()
            .map(|(at, d)| (doc_id(&d.id), at))
            .collect();
        let columns = settings.rule.columns(settings.sketcher.bands());
        Ok(MemoryIndex {
            core,
            saved,
            decided,
            all_hot: vec![true; columns],
            settings,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// The index as a saved index holds it.
    pub fn saved(&self) -> &SavedIndex {
        &self.saved
    }

    /// Documents checked or inserted (each id counted once).
    pub fn len(&self) -> usize {
        self.decided.len()
    }

    /// Whether nothing was checked or inserted yet.
    pub fn is_empty(&self) -> bool {
        self.decided.is_empty()
    }

    fn decisions(&self) -> &[SavedDecision] {
        &self.saved.online().expect("started").decisions
    }

    fn decision_at(&self, at: usize) -> Decision {
        let d = &self.decisions()[at];
        Decision {
            id: doc_id(&d.id),
            keep: d.keep,
            reason: d.reason,
            dup_of: d.dup_of.as_ref().map(doc_id),
            similarity: d.similarity,
        }
    }

    /// The decision an id got, if it was checked (inserted documents count as kept).
    pub fn decision_of(&self, id: &DocId) -> Option<Decision> {
        self.decided.get(id).map(|at| self.decision_at(*at))
    }

    /// The decision core's counters (representatives, buckets, comparisons, bytes).
    pub fn stats(&self) -> DeduperStats {
        self.core.stats()
    }

    /// See [`crate::Index::check_many`].
    pub fn check_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<Decision>, IndexError> {
        assert_eq!(texts.len(), ids.len(), "one id per text");
        let ids = self.assign_ids(ids);
        let fresh = self.fresh(&ids);
        let signed = Signer::new(&self.settings).sign_all(texts, &fresh);
        let mut out = Vec::with_capacity(texts.len());
        for ((id, signed), fresh) in ids.into_iter().zip(signed).zip(fresh) {
            if !fresh {
                out.push(self.decision_of(&id).expect("decided"));
                continue;
            }
            let addr = self.next_addr();
            let (decided, verdict) = sign::decide(
                &mut self.core,
                &self.all_hot,
                self.settings.keep_empty,
                addr,
                &id,
                signed.as_ref(),
            )?;
            if let (Some(s), Some(v)) = (&signed, &verdict) {
                match v {
                    Verdict::Unique => self.record_entry(addr, true, addr, &id, s),
                    Verdict::Near { .. } => self.record_entry(addr, false, v.cluster(addr), &id, s),
                    // An exact copy is no entry: its text's first copy is one.
                    Verdict::Exact { .. } => {}
                }
            }
            out.push(decided.to_decision(id.clone()));
            self.record_decision(id, decided);
        }
        Ok(out)
    }

    /// Records a document given to the core as an entry of the saved index.
    fn record_entry(
        &mut self,
        addr: SampleAddr,
        kept: bool,
        cluster: SampleAddr,
        id: &DocId,
        s: &Signed,
    ) {
        self.saved.push_entry(EntryRecord {
            record: addr.record,
            kept,
            cluster,
            row: &s.row,
            content_hash: s.content_hash,
            id: Some(stored_id(id)),
            signature: &s.sig,
            shingles: s.shingles.as_deref(),
        });
    }

    fn record_decision(&mut self, id: DocId, d: Decided) {
        self.saved.count_sample();
        let decisions = &mut self.saved.online_mut().expect("started").decisions;
        decisions.push(SavedDecision {
            id: stored_id(&id),
            keep: d.keep,
            reason: d.reason,
            dup_of: d.dup_of.as_ref().map(stored_id),
            similarity: d.similarity,
        });
        self.decided.insert(id, decisions.len() - 1);
    }

    /// Which of `ids` are to be signed and decided: those not decided yet, each at its first
    /// occurrence in `ids` (a later one gets the first one's decision).
    fn fresh(&self, ids: &[DocId]) -> Vec<bool> {
        let mut seen_here = HashSet::new();
        ids.iter()
            .map(|id| !self.decided.contains_key(id) && seen_here.insert(id.clone()))
            .collect()
    }

    /// See [`crate::Index::query_many`].
    pub fn query_many(&mut self, texts: &[&str]) -> Vec<Vec<(DocId, f64)>> {
        let signed = Signer::new(&self.settings).sign_texts(texts);
        signed
            .iter()
            .map(|s| match s {
                Some(s) => sign::matches(&mut self.core, &self.all_hot, s),
                None => Vec::new(),
            })
            .collect()
    }

    /// See [`crate::Index::insert_many`].
    pub fn insert_many(
        &mut self,
        texts: &[Text<'_>],
        ids: Vec<Option<DocId>>,
    ) -> Result<Vec<DocId>, IndexError> {
        assert_eq!(texts.len(), ids.len(), "one id per text");
        let ids = self.assign_ids(ids);
        let fresh = self.fresh(&ids);
        let signed = Signer::new(&self.settings).sign_all(texts, &fresh);
        for ((id, signed), fresh) in ids.iter().zip(signed).zip(fresh) {
            if !fresh {
                continue;
            }
            let addr = self.next_addr();
            let decided = sign::insert(&mut self.core, &self.all_hot, addr, id, signed.as_ref())?;
            if let Some(s) = signed.as_ref().filter(|s| s.has_keys()) {
                self.record_entry(addr, true, addr, id, s);
            }
            self.record_decision(id.clone(), decided);
        }
        Ok(ids)
    }

    /// Gives each document without an id the next integer no document has.
    fn assign_ids(&mut self, ids: Vec<Option<DocId>>) -> Vec<DocId> {
        let mut given: HashSet<DocId> = ids.iter().flatten().cloned().collect();
        let mut next_auto = self.saved.online().expect("started").next_auto;
        let out = ids
            .into_iter()
            .map(|id| {
                id.unwrap_or_else(|| {
                    loop {
                        let id = DocId::Int(next_auto);
                        next_auto += 1;
                        if !self.decided.contains_key(&id) && given.insert(id.clone()) {
                            break id;
                        }
                    }
                })
            })
            .collect();
        self.saved.online_mut().expect("started").next_auto = next_auto;
        out
    }

    /// The address of the next document: the next record of the index's online file.
    fn next_addr(&mut self) -> SampleAddr {
        let online = self.saved.online_mut().expect("started");
        let addr = SampleAddr {
            file: online.file,
            record: online.next_record,
            field: 0,
        };
        online.next_record += 1;
        addr
    }
}

/// The online id of a stored id.
pub(crate) fn doc_id(id: &StoredId) -> DocId {
    match id {
        StoredId::Int(n) => DocId::Int(*n),
        StoredId::Str(s) => DocId::Str(s.clone()),
    }
}

/// The stored id of an online id.
pub(crate) fn stored_id(id: &DocId) -> StoredId {
    match id {
        DocId::Int(n) => StoredId::Int(*n),
        DocId::Str(s) => StoredId::Str(s.clone()),
    }
}
