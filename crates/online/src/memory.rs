//! The index in this process's memory: the decision core itself, every id's decision beside it.

use hashbrown::{HashMap, HashSet};

use neardup_dedup::{Deduper, DeduperStats, SampleAddr};

use crate::sign::{self, Decided, Signer};
use crate::{Decision, DocId, IndexError, IndexSettings, Text};

/// An online dedup index in this process's memory (see the crate docs).
pub struct MemoryIndex {
    settings: IndexSettings,
    core: Deduper,
    /// Every id checked or inserted, with its decision.
    decided: HashMap<DocId, Decided>,
    /// Documents given to the core: the record number of the next one's address.
    next_record: u64,
    /// The next integer id to try for a document without one.
    next_auto: i64,
    /// Hot bit per column: every key counts.
    all_hot: Vec<bool>,
}

impl MemoryIndex {
    /// An empty index.
    pub fn new(settings: IndexSettings) -> Result<MemoryIndex, IndexError> {
        let core = settings.deduper_core()?;
        let columns = settings.rule.columns(settings.sketcher.bands());
        Ok(MemoryIndex {
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
                out.push(self.decided[&id].to_decision(id));
                continue;
            }
            let addr = self.next_addr();
            let (decided, _) = sign::decide(
                &mut self.core,
                &self.all_hot,
                self.settings.keep_empty,
                addr,
                &id,
                signed.as_ref(),
            )?;
            out.push(decided.to_decision(id.clone()));
            self.decided.insert(id, decided);
        }
        Ok(out)
    }

    /// Which of `ids` are to be signed and decided: those not decided yet, each at its first
    /// occurrence in `ids` (a later one gets the first one's decision).
    fn fresh(&self, ids: &[DocId]) -> Vec<bool> {
        let mut seen_here = HashSet::new();
        ids.iter()
            .map(|id| !self.decided.contains_key(id) && seen_here.insert(id.clone()))
            .collect()
    }

    /// See [`crate::Index::query`].
    pub fn query(&mut self, text: &str) -> Vec<(DocId, f64)> {
        let Some(signed) = Signer::new(&self.settings).sign_one(text) else {
            return Vec::new();
        };
        let matches = self.core.query(&sign::candidate(
            &signed,
            &self.all_hot,
            SampleAddr::default(),
        ));
        matches
            .into_iter()
            .filter_map(|m| Some((DocId::decode(m.id.as_deref()?)?, m.similarity)))
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
            self.decided.insert(id.clone(), decided);
        }
        Ok(ids)
    }

    /// Gives each document without an id the next integer no document has.
    fn assign_ids(&mut self, ids: Vec<Option<DocId>>) -> Vec<DocId> {
        let mut given: HashSet<DocId> = ids.iter().flatten().cloned().collect();
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

    fn next_addr(&mut self) -> SampleAddr {
        let addr = SampleAddr {
            file: 0,
            record: self.next_record,
            field: 0,
        };
        self.next_record += 1;
        addr
    }
}
