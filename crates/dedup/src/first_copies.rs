//! The first sample seen with each full content hash: what a later exact copy names.

use neardup_corpus::SampleAddr;

use crate::scratch::{Backing, Plain, ScratchVec, Zeroable};

/// The first sample seen with a content hash, and the kept sample its cluster resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstCopy {
    /// The first sample.
    pub addr: SampleAddr,
    /// The kept sample it resolves to: itself, or what it was found to duplicate.
    pub cluster: SampleAddr,
}

/// One slot of the table: `hash` 0 is an empty slot (the hash 0 itself is kept aside).
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    hash: u128,
    first: FirstCopy,
}

// SAFETY: integers only (`SampleAddr` is three integers); all-zero is an empty slot.
unsafe impl Plain for Slot {}
// SAFETY: as above.
unsafe impl Zeroable for Slot {}

/// Full 128-bit content hash → its first copy: an open-addressing table (linear probing, at
/// most 7/8 full) in [`ScratchVec`]s, so that under a memory limit the decision state can hand
/// its pages back like the bucket index's.
pub struct FirstCopies {
    slots: ScratchVec<Slot>,
    len: usize,
    /// The entry of hash 0, which marks empty slots.
    zero: Option<FirstCopy>,
    backing: Backing,
    /// While growing into a mapped table, pages are handed back after this many entries moved.
    release_every: usize,
}

impl FirstCopies {
    /// An empty table kept as `backing` says; a growing mapped table holds at most about
    /// `budget` bytes of its pages at a time.
    pub fn new(backing: Backing, budget: u64) -> FirstCopies {
        FirstCopies {
            slots: ScratchVec::zeroed(&backing, 16),
            len: 0,
            zero: None,
            release_every: usize::try_from(budget / 4096).unwrap_or(usize::MAX).max(64),
            backing,
        }
    }

    fn home(&self, hash: u128) -> usize {
        let folded = (hash as u64) ^ ((hash >> 64) as u64);
        (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// The slot holding `hash`, or the empty slot where it would go (`hash` not 0).
    fn slot(&self, hash: u128) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let h = self.slots[i].hash;
            if h == hash || h == 0 {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The first copy of `hash`.
    pub fn get(&self, hash: u128) -> Option<FirstCopy> {
        if hash == 0 {
            return self.zero;
        }
        let s = &self.slots[self.slot(hash)];
        (s.hash != 0).then_some(s.first)
    }

    /// The first copy of `hash`, to change.
    pub fn get_mut(&mut self, hash: u128) -> Option<&mut FirstCopy> {
        if hash == 0 {
            return self.zero.as_mut();
        }
        let i = self.slot(hash);
        let s = &mut self.slots[i];
        (s.hash != 0).then_some(&mut s.first)
    }

    /// Whether `hash` has a first copy.
    pub fn contains(&self, hash: u128) -> bool {
        self.get(hash).is_some()
    }

    /// The first copy of `hash` when there is one; else records `first` as it and returns
    /// `None`.
    pub fn get_or_insert(&mut self, hash: u128, first: FirstCopy) -> Option<FirstCopy> {
        if hash == 0 {
            return match self.zero {
                Some(f) => Some(f),
                None => {
                    self.zero = Some(first);
                    None
                }
            };
        }
        let i = self.slot(hash);
        if self.slots[i].hash != 0 {
            return Some(self.slots[i].first);
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
            let i = self.slot(hash);
            self.slots[i] = Slot { hash, first };
        } else {
            self.slots[i] = Slot { hash, first };
        }
        self.len += 1;
        None
    }

    fn grow(&mut self) {
        let capacity = self.slots.len() * 2;
        let mut old =
            std::mem::replace(&mut self.slots, ScratchVec::zeroed(&self.backing, capacity));
        let mapped = self.slots.is_mapped();
        let mut moved = 0usize;
        for i in 0..old.len() {
            let s = old[i];
            if s.hash == 0 {
                continue;
            }
            let j = self.slot(s.hash);
            self.slots[j] = s;
            moved += 1;
            if mapped && moved.is_multiple_of(self.release_every) {
                self.slots.release();
                old.release();
            }
        }
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len + usize::from(self.zero.is_some())
    }

    /// Bytes its table may hold in memory (all of it, mapped or not).
    pub fn memory_bytes(&self) -> usize {
        self.slots.memory_bytes()
    }

    /// Hands its mapped pages back to the kernel.
    #[cfg(test)]
    fn release(&mut self) {
        self.slots.release();
    }

    /// Hands one of `parts` parts of its mapped table back to the kernel.
    pub fn release_part(&mut self, parts: usize) {
        self.slots.release_part(parts);
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
        let backings = [
            Backing::Heap,
            Backing::Scratch {
                dir: Some(dir.path().to_path_buf()),
            },
        ];
        for backing in backings {
            let mut table = FirstCopies::new(backing.clone(), 16 * 1024);
            let mut expected: std::collections::HashMap<u128, FirstCopy> = Default::default();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..50_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Repeats, hashes sharing their low or high half, and the hash 0.
                let hash = match i % 500 {
                    0 => 0,
                    1 => u128::from(x % 100) << 64,
                    _ => u128::from(x % 20_000) | (u128::from(x % 3) << 100),
                };
                let first = FirstCopy {
                    addr: addr(i),
                    cluster: addr(i / 2),
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
