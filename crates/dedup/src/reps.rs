//! Representative storage: every kept hot sample's signature (and shingle set) once, in a store
//! that spills past its budget, and buckets that hold small indices into it.

use std::path::PathBuf;

use hashbrown::HashMap;

use neardup_corpus::SampleAddr;
use neardup_sketch::jaccard_at_least;

use crate::verify::SpillArena;

/// Index of a representative in the store.
pub type RepId = u32;

/// The representatives' signatures and (under exact verification) shingle sets, within a memory
/// budget: a record goes to memory while it fits, else to a scratch file ([`SpillArena`]), the
/// signature before the set (every comparison reads a signature, only a candidate's verification
/// reads a set). Their addresses and the places of the records stay in memory.
pub struct RepStore {
    num_perm: usize,
    addrs: Vec<SampleAddr>,
    signatures: SpillArena,
    /// `None` when candidates are not verified.
    sets: Option<SpillArena>,
    /// Bytes the decision state may take in memory: records, and what stays in memory wherever
    /// they are (see [`RepStore::push`]).
    memory_budget: u64,
    /// Bytes sets may take in memory (their own bound, `verify_memory`).
    sets_budget: u64,
}

/// What a [`RepStore`] may hold in memory.
pub struct RepBudget {
    /// The decision state (`None`: no bound): signatures and sets in memory, and what stays in
    /// memory wherever they are.
    pub records: Option<u64>,
    /// Sets, when they are kept at all (`None`: no sets).
    pub sets: Option<u64>,
}

impl RepStore {
    pub fn new(num_perm: usize, budget: RepBudget, spill_dir: Option<PathBuf>) -> RepStore {
        RepStore {
            num_perm,
            addrs: Vec::new(),
            signatures: SpillArena::new("signature", spill_dir.clone()),
            sets: budget
                .sets
                .map(|_| SpillArena::new("shingle set", spill_dir)),
            memory_budget: budget.records.unwrap_or(u64::MAX),
            sets_budget: budget.sets.unwrap_or(0),
        }
    }

    /// Whether representatives keep their shingle sets.
    pub fn keeps_sets(&self) -> bool {
        self.sets.is_some()
    }

    /// Adds a representative; `set` is its shingle set when the store keeps sets. `others` is
    /// what the rest of the decision state holds in memory (bucket index, first copies): a record
    /// stays in memory only while it, the records already there, the store's own bookkeeping and
    /// `others` fit the budget, so the state as a whole stays within it for as long as what
    /// cannot spill does.
    pub fn push(
        &mut self,
        signature: &[u32],
        set: Option<&[u32]>,
        addr: SampleAddr,
        others: u64,
    ) -> RepId {
        debug_assert_eq!(signature.len(), self.num_perm);
        let id = RepId::try_from(self.addrs.len()).expect("more than 4 billion representatives");
        self.addrs.push(addr);
        // The bookkeeping of this representative counts before its records are placed.
        self.signatures.reserve_place();
        if let Some(sets) = &mut self.sets {
            sets.reserve_place();
        }
        let held = self.memory_bytes().saturating_add(others);
        let fits = |bytes: usize| held.saturating_add(4 * bytes as u64) <= self.memory_budget;
        let signature_in_memory = fits(signature.len());
        let held = held
            + if signature_in_memory {
                4 * signature.len() as u64
            } else {
                0
            };
        self.signatures.push(signature, signature_in_memory);
        if let Some(sets) = &mut self.sets {
            match set {
                Some(set) => {
                    let bytes = 4 * set.len() as u64;
                    let in_memory = held.saturating_add(bytes) <= self.memory_budget
                        && sets.memory_bytes() + bytes <= self.sets_budget;
                    sets.push(set, in_memory);
                }
                // Known to confirm nothing, as a set lost to a disk error.
                None => sets.push_missing(),
            }
        }
        id
    }

    /// Representative `id`'s signature; `None` when a disk error lost it.
    pub fn signature(&mut self, id: RepId) -> Option<&[u32]> {
        self.signatures.get(id as usize)
    }

    /// Exact Jaccard between representative `id`'s set and `other` when it reaches `threshold`
    /// (`None` below it, and when the set was lost to a disk error or is not kept).
    pub fn jaccard_at_least(&mut self, id: RepId, other: &[u32], threshold: f64) -> Option<f64> {
        let set = self.sets.as_mut()?.get(id as usize)?;
        jaccard_at_least(set, other, threshold)
    }

    pub fn addr(&self, id: RepId) -> SampleAddr {
        self.addrs[id as usize]
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Bytes per representative of its signature and address.
    pub fn bytes_per_rep(&self) -> usize {
        4 * self.num_perm + std::mem::size_of::<SampleAddr>()
    }

    /// Bytes of shingle sets, in memory and spilled.
    pub fn set_bytes(&self) -> u64 {
        self.sets
            .as_ref()
            .map_or(0, |s| s.memory_bytes() + s.disk_bytes())
    }

    /// Bytes of signatures and sets that went to the scratch files.
    pub fn spilled_bytes(&self) -> u64 {
        self.signatures.disk_bytes() + self.sets.as_ref().map_or(0, |s| s.disk_bytes())
    }

    /// Bytes held in memory: signatures and sets there, and every representative's address and
    /// record places.
    pub fn memory_bytes(&self) -> u64 {
        let arena = |a: &SpillArena| a.memory_bytes() + a.place_bytes();
        arena(&self.signatures)
            + self.sets.as_ref().map_or(0, arena)
            + (self.addrs.capacity() * std::mem::size_of::<SampleAddr>()) as u64
    }

    /// The first disk error of the scratch files, if any (taken: reported once).
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        let signatures = self.signatures.take_error();
        let sets = self.sets.as_mut().and_then(|s| s.take_error());
        signatures.or(sets)
    }
}

/// One bucket: its first representative inline, the rest in a shared linked list, so a bucket
/// costs no allocation of its own and keeps insertion order.
#[derive(Clone, Copy)]
struct Bucket {
    first: RepId,
    /// Index into `links` of the second entry, or `NONE`.
    head: u32,
    tail: u32,
    len: u32,
}

const NONE: u32 = u32::MAX;

/// Hot bucket key → its representatives, in insertion order.
#[derive(Default)]
pub struct BucketIndex {
    buckets: HashMap<u64, Bucket>,
    /// (representative, next link)
    links: Vec<(RepId, u32)>,
}

impl BucketIndex {
    pub fn len(&self, key: u64) -> usize {
        self.buckets.get(&key).map_or(0, |b| b.len as usize)
    }

    pub fn push(&mut self, key: u64, rep: RepId) {
        match self.buckets.get_mut(&key) {
            None => {
                self.buckets.insert(
                    key,
                    Bucket {
                        first: rep,
                        head: NONE,
                        tail: NONE,
                        len: 1,
                    },
                );
            }
            Some(b) => {
                let link =
                    u32::try_from(self.links.len()).expect("more than 4 billion bucket entries");
                self.links.push((rep, NONE));
                if b.tail == NONE {
                    b.head = link;
                } else {
                    self.links[b.tail as usize].1 = link;
                }
                b.tail = link;
                b.len += 1;
            }
        }
    }

    pub fn reps(&self, key: u64) -> BucketIter<'_> {
        match self.buckets.get(&key) {
            None => BucketIter {
                links: &self.links,
                first: None,
                next: NONE,
            },
            Some(b) => BucketIter {
                links: &self.links,
                first: Some(b.first),
                next: b.head,
            },
        }
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * (8 + std::mem::size_of::<Bucket>() + 1)
            + self.links.capacity() * 8
    }
}

pub struct BucketIter<'a> {
    links: &'a [(RepId, u32)],
    first: Option<RepId>,
    next: u32,
}

impl Iterator for BucketIter<'_> {
    type Item = RepId;
    fn next(&mut self) -> Option<RepId> {
        if let Some(f) = self.first.take() {
            return Some(f);
        }
        if self.next == NONE {
            return None;
        }
        let (rep, next) = self.links[self.next as usize];
        self.next = next;
        Some(rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(record: u64) -> SampleAddr {
        SampleAddr {
            file: 0,
            record,
            field: 0,
        }
    }

    #[test]
    fn records_past_the_budget_spill_and_read_back_alike() {
        let dir = tempfile::tempdir().unwrap();
        let reps: Vec<(Vec<u32>, Vec<u32>)> = (0..40u32)
            .map(|i| ((i..i + 4).collect(), (i..i + 10 + i % 7).collect()))
            .collect();
        let budgets = [None, Some(0), Some(600), Some(5_000)];
        let mut spilled = Vec::new();
        for records in budgets {
            let budget = RepBudget {
                records,
                sets: Some(1 << 20),
            };
            let mut store = RepStore::new(4, budget, Some(dir.path().to_path_buf()));
            let mut records_before = 0;
            for (i, (sig, set)) in reps.iter().enumerate() {
                let id = store.push(sig, Some(set), addr(i as u64), 100);
                assert_eq!(id as usize, i);
                // A push that kept a record in memory left everything held within the budget.
                let records_in_memory =
                    store.signatures.memory_bytes() + store.sets.as_ref().unwrap().memory_bytes();
                if let Some(b) = records
                    && records_in_memory > records_before
                {
                    assert!(
                        store.memory_bytes() + 100 <= b,
                        "budget {b}: {} held",
                        store.memory_bytes()
                    );
                }
                records_before = records_in_memory;
            }
            for (i, (sig, set)) in reps.iter().enumerate().rev() {
                let id = i as RepId;
                assert_eq!(store.signature(id), Some(&sig[..]));
                assert_eq!(store.jaccard_at_least(id, set, 1.0), Some(1.0));
                assert_eq!(store.addr(id), addr(i as u64));
            }
            assert!(store.take_error().is_none());
            let total: u64 = reps
                .iter()
                .map(|(a, b)| 4 * (a.len() + b.len()) as u64)
                .sum();
            assert_eq!(
                store.spilled_bytes()
                    + store.signatures.memory_bytes()
                    + store.sets.as_ref().unwrap().memory_bytes(),
                total
            );
            spilled.push(store.spilled_bytes());
        }
        assert_eq!(spilled[0], 0, "no budget: nothing spills");
        let total: u64 = reps
            .iter()
            .map(|(a, b)| 4 * (a.len() + b.len()) as u64)
            .sum();
        assert_eq!(spilled[1], total, "no room: everything spills");
        assert!(spilled[2] > spilled[3] && spilled[3] > 0, "{spilled:?}");
    }

    #[test]
    fn a_missing_set_confirms_nothing_and_sets_have_their_own_bound() {
        let budget = RepBudget {
            records: None,
            sets: Some(8),
        };
        let mut store = RepStore::new(2, budget, None);
        store.push(&[1, 2], None, addr(0), 0);
        store.push(&[3, 4], Some(&[5, 6]), addr(1), 0);
        store.push(&[7, 8], Some(&[9, 10, 11]), addr(2), 0);
        assert_eq!(store.jaccard_at_least(0, &[], 0.0), None);
        assert_eq!(store.jaccard_at_least(1, &[5, 6], 1.0), Some(1.0));
        assert_eq!(store.jaccard_at_least(2, &[9, 10, 11], 1.0), Some(1.0));
        assert_eq!(store.spilled_bytes(), 12, "the second set is past `sets`");
        assert_eq!(store.signature(2), Some(&[7, 8][..]));
    }

    #[test]
    fn buckets_keep_insertion_order_and_lengths() {
        let mut idx = BucketIndex::default();
        for (key, rep) in [(7u64, 0u32), (9, 1), (7, 2), (7, 3), (9, 4)] {
            idx.push(key, rep);
        }
        assert_eq!(idx.reps(7).collect::<Vec<_>>(), vec![0, 2, 3]);
        assert_eq!(idx.reps(9).collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(idx.reps(8).count(), 0);
        assert_eq!(idx.len(7), 3);
        assert_eq!(idx.buckets(), 2);
    }
}
