//! Representative storage: every kept hot sample's signature once, in one contiguous arena, and
//! buckets that hold small indices into it.

use hashbrown::HashMap;

use neardup_corpus::SampleAddr;

/// Index of a representative in the arena.
pub type RepId = u32;

/// Signatures of representatives, back to back, with their sample addresses.
pub struct RepArena {
    num_perm: usize,
    signatures: Vec<u32>,
    addrs: Vec<SampleAddr>,
}

impl RepArena {
    pub fn new(num_perm: usize) -> RepArena {
        RepArena {
            num_perm,
            signatures: Vec::new(),
            addrs: Vec::new(),
        }
    }
    pub fn push(&mut self, signature: &[u32], addr: SampleAddr) -> RepId {
        debug_assert_eq!(signature.len(), self.num_perm);
        let id = RepId::try_from(self.addrs.len()).expect("more than 4 billion representatives");
        self.signatures.extend_from_slice(signature);
        self.addrs.push(addr);
        id
    }
    pub fn signature(&self, id: RepId) -> &[u32] {
        let start = id as usize * self.num_perm;
        &self.signatures[start..start + self.num_perm]
    }
    pub fn addr(&self, id: RepId) -> SampleAddr {
        self.addrs[id as usize]
    }
    pub fn len(&self) -> usize {
        self.addrs.len()
    }
    pub fn bytes_per_rep(&self) -> usize {
        4 * self.num_perm + std::mem::size_of::<SampleAddr>()
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
