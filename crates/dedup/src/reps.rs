//! Representative storage: every kept hot sample's signature (and shingle set) once, in a store
//! that spills past its budget, and buckets that hold small indices into it.

use std::path::PathBuf;
use std::sync::Arc;

use neardup_corpus::SampleAddr;
use neardup_sketch::NO_KEY;

use crate::large_set::{SetRef, SpilledSet, jaccard_at_least};
use crate::verify::SpillArena;
use neardup_scratch::{Backing, KeyedSlot, Plain, ProbeTable, ScratchVec, Zeroable};

/// Index of a representative in the store.
pub type RepId = u32;

/// The representatives' signatures (each with its sample's address) and, under exact
/// verification, shingle sets, within a memory budget: a record goes to memory while it fits,
/// else to a scratch file ([`SpillArena`]), the signature before the set (every comparison reads
/// a signature, only a candidate's verification reads a set). Only the places of the records stay
/// in memory whatever the budget.
pub struct RepStore {
    num_perm: usize,
    /// Signature, then the address as [`ADDR_VALUES`] values.
    signatures: SpillArena,
    record: Vec<u32>,
    /// `None` when candidates are not verified.
    sets: Option<SpillArena>,
    /// Bytes the decision state may take in memory: records, and what stays in memory wherever
    /// they are (see [`RepStore::push`]).
    memory_budget: u64,
    /// Bytes sets may take in memory (their own bound, `verify_memory`).
    sets_budget: u64,
    /// The sets that were built in scratch files ([`crate::large_set`]), by representative: they
    /// stay there (their place in `sets` is a missing record).
    spilled_sets: hashbrown::HashMap<RepId, SpilledSet>,
    /// The sets a caller holds and shares with the store ([`RepStore::push_shared`]), by
    /// representative: neither copied nor counted (their place in `sets` is a missing record).
    shared_sets: hashbrown::HashMap<RepId, Arc<[u32]>>,
    /// The first error reading a spilled set.
    spilled_error: Option<std::io::Error>,
}

/// Values a sample address takes at the end of a signature record.
const ADDR_VALUES: usize = 4;

fn addr_values(a: SampleAddr) -> [u32; ADDR_VALUES] {
    [a.file, a.record as u32, (a.record >> 32) as u32, a.field]
}

fn addr_of(v: &[u32]) -> SampleAddr {
    SampleAddr {
        file: v[0],
        record: u64::from(v[1]) | (u64::from(v[2]) << 32),
        field: v[3],
    }
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
    /// An empty store of signatures of `num_perm` values within `budget`, spilling to
    /// `spill_dir`, the records' places kept as `places` says.
    pub fn new(
        num_perm: usize,
        budget: RepBudget,
        spill_dir: Option<PathBuf>,
        places: &Backing,
    ) -> RepStore {
        RepStore {
            num_perm,
            record: Vec::new(),
            signatures: SpillArena::new("signature", spill_dir.clone(), places),
            sets: budget
                .sets
                .map(|_| SpillArena::new("shingle set", spill_dir, places)),
            memory_budget: budget.records.unwrap_or(u64::MAX),
            sets_budget: budget.sets.unwrap_or(0),
            spilled_sets: hashbrown::HashMap::new(),
            shared_sets: hashbrown::HashMap::new(),
            spilled_error: None,
        }
    }

    /// Whether representatives keep their shingle sets.
    pub fn keeps_sets(&self) -> bool {
        self.sets.is_some()
    }

    /// Adds a representative; `set` is its shingle set when the store keeps sets. `others` is
    /// what the rest of the decision state holds in memory (bucket index, first copies): a record
    /// goes to memory only while it, the records already there, the store's own bookkeeping and
    /// `others` fit the budget, and when they no longer fit, the oldest records in memory move to
    /// disk; so the state as a whole stays within the budget for as long as what cannot spill
    /// fits in it.
    pub fn push(
        &mut self,
        signature: &[u32],
        set: Option<SetRef<'_>>,
        addr: SampleAddr,
        others: u64,
    ) -> RepId {
        debug_assert_eq!(signature.len(), self.num_perm);
        let id = RepId::try_from(self.signatures.len())
            .ok()
            .filter(|id| *id < 1 << 31)
            .expect("fewer than 2^31 representatives");
        self.record.clear();
        self.record.extend_from_slice(signature);
        self.record.extend_from_slice(&addr_values(addr));
        // The bookkeeping of this representative counts before its records are placed.
        self.signatures.reserve_place();
        if let Some(sets) = &mut self.sets {
            sets.reserve_place();
        }
        let held = self.counted_bytes(others);
        let fits = |bytes: usize| held.saturating_add(4 * bytes as u64) <= self.memory_budget;
        let signature_in_memory = fits(self.record.len());
        let held = held
            + if signature_in_memory {
                4 * self.record.len() as u64
            } else {
                0
            };
        self.signatures.push(&self.record, signature_in_memory);
        if let Some(sets) = &mut self.sets {
            match set {
                Some(SetRef::Spilled(set)) => {
                    // It stays in its file: its record here is never read.
                    sets.push_missing();
                    self.spilled_sets.insert(id, set.clone());
                }
                Some(SetRef::Memory(set)) => {
                    let bytes = 4 * set.len() as u64;
                    let in_memory = held.saturating_add(bytes) <= self.memory_budget
                        && sets.memory_bytes() + bytes <= self.sets_budget;
                    sets.push(set, in_memory);
                }
                // Known to confirm nothing, as a set lost to a disk error.
                None => sets.push_missing(),
            }
        }
        // What cannot spill grew since the records in memory were placed: the oldest make room,
        // sets first (only verifications read them).
        while self.counted_bytes(others) > self.memory_budget {
            let freed = match self.sets.as_mut().map_or(0, SpillArena::evict_oldest_chunk) {
                0 => self.signatures.evict_oldest_chunk(),
                freed => freed,
            };
            if freed == 0 {
                break;
            }
        }
        id
    }

    /// [`RepStore::push`] of a representative whose shingle set the caller holds (the online
    /// index's cache of the representatives a Redis server holds, which seeds a store for every
    /// batch): the store keeps a share of it, neither copied nor counted in its budgets.
    pub fn push_shared(
        &mut self,
        signature: &[u32],
        set: Option<&Arc<[u32]>>,
        addr: SampleAddr,
        others: u64,
    ) -> RepId {
        let id = self.push(signature, None, addr, others);
        if let (Some(set), true) = (set, self.sets.is_some()) {
            self.shared_sets.insert(id, Arc::clone(set));
        }
        id
    }

    /// Starts loading representative `id`'s signature into the cache, to be compared soon.
    #[inline]
    pub fn prefetch_signature(&self, id: RepId) {
        self.signatures.prefetch(id as usize, self.num_perm);
    }

    /// Asks the CPU to start loading where representative `id`'s signature is (which
    /// [`RepStore::prefetch_signature`] reads first).
    #[inline]
    pub fn prefetch_place(&self, id: RepId) {
        self.signatures.prefetch_place(id as usize);
    }

    /// Representative `id`'s signature; `None` when a disk error lost it.
    pub fn signature(&mut self, id: RepId) -> Option<&[u32]> {
        let num_perm = self.num_perm;
        Some(&self.signatures.get(id as usize)?[..num_perm])
    }

    /// Representative `id`'s sample; `None` when a disk error lost it.
    pub fn addr(&mut self, id: RepId) -> Option<SampleAddr> {
        let num_perm = self.num_perm;
        let record = self.signatures.get(id as usize)?;
        Some(addr_of(&record[num_perm..]))
    }

    /// Exact Jaccard between representative `id`'s set and `other` when it reaches `threshold`
    /// (`None` below it, and when the set was lost to a disk error or is not kept).
    pub fn jaccard_at_least(
        &mut self,
        id: RepId,
        other: SetRef<'_>,
        threshold: f64,
    ) -> Option<f64> {
        let set = match (self.shared_sets.get(&id), self.spilled_sets.get(&id)) {
            (Some(shared), _) => SetRef::Memory(shared),
            (None, Some(spilled)) => SetRef::Spilled(spilled),
            (None, None) => SetRef::Memory(self.sets.as_mut()?.get(id as usize)?),
        };
        match jaccard_at_least(set, other, threshold) {
            Ok(j) => j,
            // A set that cannot be read confirms nothing; the error fails the run.
            Err(e) => {
                self.spilled_error.get_or_insert(e);
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.signatures.len()
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
            + self.spilled_set_bytes()
    }

    /// Bytes of the sets that were built in scratch files.
    fn spilled_set_bytes(&self) -> u64 {
        self.spilled_sets.values().map(SpilledSet::disk_bytes).sum()
    }

    /// Bytes of signatures and sets that went to the scratch files.
    pub fn spilled_bytes(&self) -> u64 {
        self.signatures.disk_bytes()
            + self.sets.as_ref().map_or(0, |s| s.disk_bytes())
            + self.spilled_set_bytes()
    }

    /// Bytes held in memory: signatures (with addresses) and sets there, and the places of every
    /// record (all of them, mapped or not).
    pub fn memory_bytes(&self) -> u64 {
        self.record_bytes() + self.place_bytes()
    }

    /// Bytes of signatures (with addresses) and sets in memory.
    fn record_bytes(&self) -> u64 {
        self.signatures.memory_bytes() + self.sets.as_ref().map_or(0, SpillArena::memory_bytes)
    }

    /// Bytes of the records' places (all of them, mapped or not).
    pub fn place_bytes(&self) -> u64 {
        self.signatures.place_bytes() + self.sets.as_ref().map_or(0, SpillArena::place_bytes)
    }

    /// What counts against the budget: the records in memory, and the bookkeeping (the places
    /// and the caller's `others`) up to all of the budget: past it, the caller hands the
    /// bookkeeping's pages back ([`crate::scratch`]), so the records keep what it leaves.
    fn counted_bytes(&self, others: u64) -> u64 {
        let bookkeeping = self.place_bytes().saturating_add(others);
        self.record_bytes() + bookkeeping.min(self.memory_budget)
    }

    /// Hands one of `parts` parts of the mapped places back to the kernel.
    pub fn release_places_part(&mut self, parts: usize) {
        self.signatures.release_places_part(parts);
        if let Some(sets) = &mut self.sets {
            sets.release_places_part(parts);
        }
    }

    /// The first disk error of the scratch files, if any (taken: reported once).
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        let signatures = self.signatures.take_error();
        let sets = self.sets.as_mut().and_then(|s| s.take_error());
        signatures.or(sets).or(self.spilled_error.take())
    }
}

/// Representatives a [`List`] holds itself, before the rest go to its chain of [`Chunk`]s.
const HELD: usize = 5;

/// A bucket holding more than one representative: its first [`HELD`] in the record, the rest in
/// a chain of chunks, in insertion order: with one held here and one per link of a shared
/// linked list, listing a bucket waited on each link in turn, one cache miss after another.
#[derive(Clone, Copy)]
struct List {
    held: [RepId; HELD],
    /// Index into `chunks` of the first chunk, [`NONE`] until there is one.
    head: u32,
    tail: u32,
    len: u32,
}

/// Representatives per [`Chunk`].
const CHUNK: usize = 7;

/// Up to [`CHUNK`] representatives of one bucket after its held ones, and the next chunk
/// (32 bytes).
#[derive(Clone, Copy)]
struct Chunk {
    reps: [RepId; CHUNK],
    next: u32,
}

// SAFETY: plain integers.
unsafe impl Plain for Chunk {}

const NONE: u32 = u32::MAX;
/// A slot's value with this bit set is an index into `lists`; without, the bucket's only
/// representative.
const LISTED: u32 = 1 << 31;
/// An empty slot's key: no band or content key is ever [`NO_KEY`], which is 0, so zeroed memory
/// (and a scratch file's new blocks) is a table of empty slots.
const EMPTY: u64 = NO_KEY;
const _: () = assert!(EMPTY == 0, "zeroed slots are empty");

// SAFETY: plain integers.
unsafe impl Plain for List {}

/// A bucket's key and value side by side (12 bytes), so that a lookup touches one cache line,
/// and one page of a mapped table, not two. The key is kept as two halves, so that slots need
/// only 4-byte alignment.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    key_low: u32,
    key_high: u32,
    /// The representative, or a list index with [`LISTED`].
    value: u32,
}

impl Slot {
    #[inline(always)]
    fn new(key: u64, value: u32) -> Slot {
        Slot {
            key_low: key as u32,
            key_high: (key >> 32) as u32,
            value,
        }
    }
}

// SAFETY: plain integers; all-zero is an empty slot.
unsafe impl Plain for Slot {}
// SAFETY: as above.
unsafe impl Zeroable for Slot {}

impl KeyedSlot for Slot {
    type Key = u64;
    const EMPTY: u64 = EMPTY;
    #[inline(always)]
    fn key(&self) -> u64 {
        u64::from(self.key_low) | (u64::from(self.key_high) << 32)
    }
    #[inline(always)]
    fn fold(key: u64) -> u64 {
        key
    }
}

/// Hot bucket key → its representatives, in insertion order.
///
/// Most hot buckets hold one representative, so the table is built for them: open addressing
/// with linear probing over 12-byte slots of a key and a 32-bit value (against 25 bytes for a
/// general map of key to list), the value being the representative itself until a second one
/// arrives and moves the bucket to a list. Its arrays are [`ScratchVec`]s: under a memory
/// limit the decision state hands their pages back as it needs
/// ([`BucketIndex::release_part`]).
pub struct BucketIndex {
    slots: ProbeTable<Slot>,
    lists: ScratchVec<List>,
    chunks: ScratchVec<Chunk>,
}

impl Default for BucketIndex {
    fn default() -> Self {
        BucketIndex::new(Backing::Heap, u64::MAX)
    }
}

impl BucketIndex {
    /// An empty index whose arrays are kept as `backing` says; a growing mapped table holds at
    /// most about `budget` bytes of its pages at a time.
    pub fn new(backing: Backing, budget: u64) -> BucketIndex {
        BucketIndex {
            lists: ScratchVec::new(&backing),
            chunks: ScratchVec::new(&backing),
            slots: ProbeTable::new(backing, budget),
        }
    }

    /// Asks the CPU to start loading the slot where the probe for `key` starts: a sample's
    /// buckets lie anywhere in a table of megabytes, and looking them up one after the other
    /// waited on each in turn.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        self.slots.prefetch(key);
    }

    fn find(&self, key: u64) -> Option<u32> {
        self.slots.find(key).map(|s| s.value)
    }

    pub fn len(&self, key: u64) -> usize {
        match self.find(key) {
            None => 0,
            Some(v) if v & LISTED != 0 => self.lists[(v & !LISTED) as usize].len as usize,
            Some(_) => 1,
        }
    }

    pub fn push(&mut self, key: u64, rep: RepId) {
        assert!(rep < LISTED, "more than 2^31 representatives");
        let slot = match self.slots.entry(key) {
            Ok(slot) => slot,
            Err(i) => {
                self.slots.fill(i, Slot::new(key, rep));
                return;
            }
        };
        let value = slot.value;
        if value & LISTED == 0 {
            let list = u32::try_from(self.lists.len())
                .ok()
                .filter(|l| *l < LISTED)
                .expect("fewer than 2^31 buckets with several representatives");
            slot.value = list | LISTED;
            let mut held = [NONE; HELD];
            held[..2].copy_from_slice(&[value, rep]);
            self.lists.push(List {
                held,
                head: NONE,
                tail: NONE,
                len: 2,
            });
            return;
        }
        let list = &mut self.lists[(value & !LISTED) as usize];
        if let Some(place) = list.held.get_mut(list.len as usize) {
            *place = rep;
            list.len += 1;
            return;
        }
        let beyond = list.len as usize - HELD;
        list.len += 1;
        if !beyond.is_multiple_of(CHUNK) {
            self.chunks[list.tail as usize].reps[beyond % CHUNK] = rep;
            return;
        }
        let chunk = u32::try_from(self.chunks.len())
            .ok()
            .filter(|c| *c != NONE)
            .expect("fewer than 4 billion chunks of bucket entries");
        let previous = std::mem::replace(&mut list.tail, chunk);
        if list.head == NONE {
            list.head = chunk;
        } else {
            self.chunks[previous as usize].next = chunk;
        }
        let mut reps = [NONE; CHUNK];
        reps[0] = rep;
        self.chunks.push(Chunk { reps, next: NONE });
    }

    pub fn reps(&self, key: u64) -> BucketIter<'_> {
        let (only, held, next, left) = match self.find(key) {
            None => (None, &[][..], NONE, 0),
            Some(v) if v & LISTED != 0 => {
                let list = &self.lists[(v & !LISTED) as usize];
                let len = list.len as usize;
                let held = &list.held[..HELD.min(len)];
                (None, held, list.head, len.saturating_sub(HELD))
            }
            Some(rep) => (Some(rep), &[][..], NONE, 0),
        };
        BucketIter {
            chunks: &self.chunks,
            only,
            held: held.iter(),
            next,
            left,
        }
    }

    pub fn buckets(&self) -> usize {
        self.slots.len()
    }

    /// Bytes its arrays may hold in memory (all of them, mapped or not).
    pub fn memory_bytes(&self) -> usize {
        self.slots.memory_bytes() + self.lists.memory_bytes() + self.chunks.memory_bytes()
    }

    /// Hands one of `parts` parts of its mapped arrays back to the kernel
    /// ([`ScratchVec::release_part`]).
    pub fn release_part(&mut self, parts: usize) {
        self.slots.release_part(parts);
        self.lists.release_part(parts);
        self.chunks.release_part(parts);
    }

    /// Hands its mapped pages back to the kernel ([`ScratchVec::release`]).
    #[cfg(test)]
    pub fn release(&mut self) {
        self.slots.release();
        self.lists.release();
        self.chunks.release();
    }
}

pub struct BucketIter<'a> {
    chunks: &'a [Chunk],
    /// The representative of a bucket that has only one (held in its slot).
    only: Option<RepId>,
    /// The held representatives not yet given, then those of the current chunk.
    held: std::slice::Iter<'a, RepId>,
    /// The next chunk to go on with.
    next: u32,
    /// Representatives in `next` and the chunks after it.
    left: usize,
}

impl Iterator for BucketIter<'_> {
    type Item = RepId;
    fn next(&mut self) -> Option<RepId> {
        if let Some(only) = self.only.take() {
            return Some(only);
        }
        if let Some(&held) = self.held.next() {
            return Some(held);
        }
        if self.left == 0 {
            return None;
        }
        let chunk = &self.chunks[self.next as usize];
        let here = self.left.min(CHUNK);
        self.left -= here;
        self.next = chunk.next;
        self.held = chunk.reps[..here].iter();
        self.held.next().copied()
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
            let mut store =
                RepStore::new(4, budget, Some(dir.path().to_path_buf()), &Backing::Heap);
            for (i, (sig, set)) in reps.iter().enumerate() {
                // What cannot spill grows as representatives come.
                let others = 20 * i as u64;
                let id = store.push(sig, Some(SetRef::Memory(set)), addr(i as u64), others);
                assert_eq!(id as usize, i);
                // While records are in memory, everything held is within the budget: a push
                // that no longer fits moves the oldest to disk.
                let records_in_memory =
                    store.signatures.memory_bytes() + store.sets.as_ref().unwrap().memory_bytes();
                if let Some(b) = records
                    && records_in_memory > 0
                {
                    assert!(
                        store.memory_bytes() + others <= b,
                        "budget {b}: {} held",
                        store.memory_bytes()
                    );
                }
            }
            for (i, (sig, set)) in reps.iter().enumerate().rev() {
                let id = i as RepId;
                assert_eq!(store.signature(id), Some(&sig[..]));
                assert_eq!(
                    store.jaccard_at_least(id, SetRef::Memory(set), 1.0),
                    Some(1.0)
                );
                assert_eq!(store.addr(id), Some(addr(i as u64)));
            }
            assert!(store.take_error().is_none());
            let total: u64 = reps
                .iter()
                .map(|(a, b)| 4 * (a.len() + ADDR_VALUES + b.len()) as u64)
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
            .map(|(a, b)| 4 * (a.len() + ADDR_VALUES + b.len()) as u64)
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
        let mut store = RepStore::new(2, budget, None, &Backing::Heap);
        store.push(&[1, 2], None, addr(0), 0);
        store.push(&[3, 4], Some(SetRef::Memory(&[5, 6])), addr(1), 0);
        store.push(&[7, 8], Some(SetRef::Memory(&[9, 10, 11])), addr(2), 0);
        assert_eq!(store.jaccard_at_least(0, SetRef::Memory(&[]), 0.0), None);
        assert_eq!(
            store.jaccard_at_least(1, SetRef::Memory(&[5, 6]), 1.0),
            Some(1.0)
        );
        assert_eq!(
            store.jaccard_at_least(2, SetRef::Memory(&[9, 10, 11]), 1.0),
            Some(1.0)
        );
        assert_eq!(store.spilled_bytes(), 12, "the second set is past `sets`");
        assert_eq!(store.signature(2), Some(&[7, 8][..]));
    }

    #[test]
    fn a_shared_set_verifies_as_a_copied_one_and_takes_no_room() {
        let budget = RepBudget {
            records: None,
            sets: Some(0),
        };
        let mut store = RepStore::new(2, budget, None, &Backing::Heap);
        let set: Arc<[u32]> = Arc::from(&[5u32, 6, 7][..]);
        store.push_shared(&[1, 2], Some(&set), addr(0), 0);
        store.push_shared(&[3, 4], None, addr(1), 0);
        assert_eq!(
            store.jaccard_at_least(0, SetRef::Memory(&[5, 6, 7]), 1.0),
            Some(1.0)
        );
        assert_eq!(
            store.jaccard_at_least(0, SetRef::Memory(&[5, 6]), 0.5),
            Some(2.0 / 3.0)
        );
        assert_eq!(store.jaccard_at_least(1, SetRef::Memory(&[]), 0.0), None);
        assert_eq!(store.set_bytes(), 0, "the caller holds it");
        assert_eq!(Arc::strong_count(&set), 2);
        assert_eq!(store.signature(1), Some(&[3, 4][..]));
    }

    /// Against a map of key to list, through growth and collisions of the table's slots.
    #[test]
    fn buckets_hold_what_a_map_of_lists_holds() {
        let dir = tempfile::tempdir().unwrap();
        for backing in neardup_scratch::both_backings(&dir) {
            // A small budget: a mapped table hands its pages back many times while it grows.
            let mut idx = BucketIndex::new(backing.clone(), 64 * 1024);
            let mut expected: std::collections::HashMap<u64, Vec<RepId>> = Default::default();
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            for rep in 0..60_000u32 {
                let x = neardup_scratch::xorshift(&mut state);
                // Few distinct keys, some sharing low bits: lists of every length, and probing;
                // and the extreme keys.
                let key = match rep % 1000 {
                    0 => 1,
                    1 => u64::MAX,
                    _ if rep < 20_000 => ((x % 3000) << 40) | 1,
                    _ => x % 30_000 + 2,
                };
                idx.push(key, rep);
                expected.entry(key).or_default().push(rep);
                if rep % 5000 == 0 {
                    idx.release();
                }
            }
            assert_eq!(idx.buckets(), expected.len(), "{backing:?}");
            for (key, reps) in &expected {
                assert_eq!(idx.len(*key), reps.len());
                assert_eq!(idx.reps(*key).collect::<Vec<_>>(), *reps);
            }
            assert_eq!(idx.len(u64::MAX - 1), 0);
            assert_eq!(idx.reps(u64::MAX - 1).count(), 0);
            assert!(idx.memory_bytes() >= idx.slots.capacity() * 12);
            assert_eq!(
                idx.slots.is_mapped(),
                matches!(backing, Backing::Scratch { .. })
            );
        }
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
        // Past the representatives a list holds itself, through several chunks.
        for n in 0..(HELD + 3 * CHUNK) as u32 {
            idx.push(5, 100 + n);
            idx.push(6, 200 + n);
            let listed = |base| (0..=n).map(|i| base + i).collect::<Vec<_>>();
            assert_eq!(idx.reps(5).collect::<Vec<_>>(), listed(100));
            assert_eq!(idx.reps(6).collect::<Vec<_>>(), listed(200));
            assert_eq!(idx.len(5), n as usize + 1);
        }
    }
}
