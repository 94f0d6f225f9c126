//! The ids of the samples a later decision may name as its original (`dup_of_id`): their bytes
//! in one array, in the order they came, each referred to by where it lies ([`IdRef`]). The
//! representatives and the first copies of texts hold those references (they are what a
//! decision names), so keeping an id appends to the array and naming one reads it, without a
//! lookup by address.

use neardup_scratch::{Backing, Plain, ScratchVec, Zeroable};

/// Where one id lies in an [`IdStore`], or [`IdRef::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct IdRef {
    start: u64,
    len: u64,
}

// SAFETY: integers only; any bit pattern is a value (all-zero is the empty id at 0).
unsafe impl Plain for IdRef {}
// SAFETY: as above.
unsafe impl Zeroable for IdRef {}

impl IdRef {
    /// No id.
    pub const NONE: IdRef = IdRef {
        start: u64::MAX,
        len: 0,
    };
}

/// The bytes of the ids kept, one after the other: appending touches only the end of the array,
/// so under a memory limit its pages can be handed back like the rest of the decision state's
/// bookkeeping and only the ids named again fault back in.
pub struct IdStore {
    bytes: ScratchVec<u8>,
}

impl IdStore {
    /// An empty store kept as `backing` says.
    pub fn new(backing: &Backing) -> IdStore {
        IdStore {
            bytes: ScratchVec::new(backing),
        }
    }

    /// Keeps `id`; returns where it lies.
    pub fn push(&mut self, id: &str) -> IdRef {
        let start = self.bytes.len() as u64;
        self.bytes.extend_from_slice(id.as_bytes());
        IdRef {
            start,
            len: id.len() as u64,
        }
    }

    /// The id `at` refers to; `None` for [`IdRef::NONE`].
    pub fn get(&self, at: IdRef) -> Option<&str> {
        if at == IdRef::NONE {
            return None;
        }
        let bytes = &self.bytes[at.start as usize..(at.start + at.len) as usize];
        Some(std::str::from_utf8(bytes).expect("ids are kept as whole strings"))
    }

    /// Bytes it may hold in memory (all of them, mapped or not).
    pub fn memory_bytes(&self) -> usize {
        self.bytes.memory_bytes()
    }

    /// Hands one of `parts` parts of its mapped bytes back to the kernel.
    pub fn release_part(&mut self, parts: usize) {
        self.bytes.release_part(parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_scratch::{both_backings, xorshift};

    #[test]
    fn ids_read_back_after_growing_and_after_their_pages_are_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        for backing in both_backings(&dir) {
            let mut store = IdStore::new(&backing);
            let mut kept = Vec::new();
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            for i in 0..60_000u64 {
                let x = xorshift(&mut state) % 200_000;
                // Empty, ASCII and multi-byte ids, some repeated.
                let id = match i % 4 {
                    0 => String::new(),
                    1 => format!("doc-{x}"),
                    2 => format!("страница/{x}/{i}"),
                    _ => format!("{}", x % 50),
                };
                kept.push((store.push(&id), id));
                if i % 5_000 == 0 {
                    store.release_part(4);
                }
            }
            for (at, id) in &kept {
                assert_eq!(store.get(*at), Some(id.as_str()));
            }
            assert_eq!(store.get(IdRef::NONE), None);
            assert!(store.memory_bytes() >= kept.iter().map(|(_, id)| id.len()).sum::<usize>());
        }
    }
}
