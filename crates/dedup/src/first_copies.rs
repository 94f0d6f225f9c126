//! The first sample seen with each full content hash: what a later exact copy names.

use neardup_corpus::SampleAddr;

use neardup_scratch::{Backing, KeyedSlot, Plain, ProbeTable, Zeroable};

use crate::sample_ids::IdRef;

/// The first sample seen with a content hash, and the kept sample its cluster resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstCopy {
    /// The first sample.
    pub addr: SampleAddr,
    /// The kept sample it resolves to: itself, or what it was found to duplicate.
    pub cluster: SampleAddr,
    /// Its id, for a later copy that names it ([`IdRef::NONE`] when not kept).
    pub id: IdRef,
}

/// One slot of the table: `hash` 0 is an empty slot (the hash 0 itself is kept aside).
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    hash: u128,
    first: FirstCopy,
}

// SAFETY: integers only (`SampleAddr` is three integers, `IdRef` two); all-zero is an empty
// slot.
unsafe impl Plain for Slot {}
// SAFETY: as above.
unsafe impl Zeroable for Slot {}

impl KeyedSlot for Slot {
    type Key = u128;
    const EMPTY: u128 = 0;
    fn key(&self) -> u128 {
        self.hash
    }
    fn fold(hash: u128) -> u64 {
        (hash as u64) ^ ((hash >> 64) as u64)
    }
}

/// Full 128-bit content hash → its first copy: a [`ProbeTable`], so that under a memory limit
/// the decision state can hand its pages back like the bucket index's.
pub struct FirstCopies {
    table: ProbeTable<Slot>,
    /// The entry of hash 0, which marks empty slots.
    zero: Option<FirstCopy>,
}

impl FirstCopies {
    /// An empty table kept as `backing` says; a growing mapped table holds at most about
    /// `budget` bytes of its pages at a time.
    pub fn new(backing: Backing, budget: u64) -> FirstCopies {
        FirstCopies {
            table: ProbeTable::new(backing, budget),
            zero: None,
        }
    }

    /// The first copy of `hash`.
    pub fn get(&self, hash: u128) -> Option<FirstCopy> {
        match hash {
            0 => self.zero,
            _ => self.table.find(hash).map(|s| s.first),
        }
    }

    /// The first copy of `hash`, to change.
    pub fn get_mut(&mut self, hash: u128) -> Option<&mut FirstCopy> {
        match hash {
            0 => self.zero.as_mut(),
            _ => self.table.find_mut(hash).map(|s| &mut s.first),
        }
    }

    /// Whether `hash` has a first copy.
    pub fn contains(&self, hash: u128) -> bool {
        self.get(hash).is_some()
    }

    /// The first copy of `hash` when there is one; else records `first` as it and returns
    /// `None`.
    pub fn get_or_insert(&mut self, hash: u128, first: FirstCopy) -> Option<FirstCopy> {
        if hash == 0 {
            let had = self.zero;
            self.zero.get_or_insert(first);
            return had;
        }
        match self.table.entry(hash) {
            Ok(slot) => Some(slot.first),
            Err(i) => {
                self.table.fill(i, Slot { hash, first });
                None
            }
        }
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len() + usize::from(self.zero.is_some())
    }

    /// Bytes its table may hold in memory (all of it, mapped or not).
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// Hands its mapped pages back to the kernel.
    #[cfg(test)]
    fn release(&mut self) {
        self.table.release();
    }

    /// Hands one of `parts` parts of its mapped table back to the kernel.
    pub fn release_part(&mut self, parts: usize) {
        self.table.release_part(parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u64) -> SampleAddr {
        SampleAddr {
            file: (i % 7) as u32,
            record: i,
            field: (i % 3) as u32,
        }
    }

    #[test]
    fn first_copies_hold_what_a_map_holds_on_the_heap_and_mapped() {
        let dir = tempfile::tempdir().unwrap();
        for backing in neardup_scratch::both_backings(&dir) {
            let mut table = FirstCopies::new(backing.clone(), 16 * 1024);
            let mut expected: std::collections::HashMap<u128, FirstCopy> = Default::default();
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..50_000u64 {
                let x = neardup_scratch::xorshift(&mut state);
                // Repeats, hashes sharing their low or high half, and the hash 0.
                let hash = match i % 500 {
                    0 => 0,
                    1 => u128::from(x % 100) << 64,
                    _ => u128::from(x % 20_000) | (u128::from(x % 3) << 100),
                };
                let first = FirstCopy {
                    addr: addr(i),
                    cluster: addr(i / 2),
                    id: IdRef::NONE,
                };
                let had = table.get_or_insert(hash, first);
                assert_eq!(had, expected.get(&hash).copied(), "{backing:?} {i}");
                expected.entry(hash).or_insert(first);
                if i % 977 == 0 {
                    if let Some(f) = table.get_mut(hash) {
                        f.cluster = addr(1);
                    }
                    expected.get_mut(&hash).unwrap().cluster = addr(1);
                }
                if i % 10_000 == 0 {
                    table.release();
                }
            }
            assert_eq!(table.len(), expected.len());
            for (hash, first) in &expected {
                assert_eq!(table.get(*hash), Some(*first));
                assert!(table.contains(*hash));
            }
            assert!(!table.contains(u128::MAX));
            assert_eq!(table.get(12_345_678_901), None);
        }
    }
}
