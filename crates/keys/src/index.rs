//! Where a key sits among the sorted hot keys, found by its top bits.
//!
//! Every per-shard step of a distributed stage 2 (and the plan of `neardup hot --groups`) asks,
//! for every key of every row, whether it is hot and, if so, which hot key it is. A hash map of
//! the hot keys answered that, but building it was a random write per hot key in every process
//! and it held about 32 bytes per key. Band and content keys are hashes, so their top bits are
//! uniform: a directory of `2^b` bucket starts (`2^b ≤ hot keys`) over the sorted keys puts one
//! to two keys in a bucket on average. Building it is one sequential pass; it holds 2 to 4 bytes
//! per hot key; a lookup reads two neighbouring directory entries and one short run of keys.
//! Keys that are not uniform (a test's small integers) only make buckets longer; a long bucket is
//! searched by bisection, so no input makes a lookup worse than a binary search.

use neardup_sketch::NO_KEY;

/// The positions of sorted, distinct keys (see the module docs).
pub struct SortedKeyIndex<'a> {
    keys: &'a [u64],
    /// `64 - b`: a key's bucket is `key >> shift`.
    shift: u32,
    /// Bucket `i` holds `keys[starts[i]..starts[i + 1]]`; empty when the keys do not fit `u32`
    /// positions, and then every lookup bisects the whole slice.
    starts: Vec<u32>,
}

/// Buckets longer than this are bisected instead of scanned.
const SCAN_LIMIT: usize = 16;

impl<'a> SortedKeyIndex<'a> {
    /// An index of `keys`, which must be ascending and distinct (as hot keys are).
    pub fn new(keys: &'a [u64]) -> SortedKeyIndex<'a> {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let bits = keys.len().max(2).ilog2().min(32);
        let shift = 64 - bits;
        if u32::try_from(keys.len()).is_err() {
            return SortedKeyIndex {
                keys,
                shift,
                starts: Vec::new(),
            };
        }
        let buckets = 1usize << bits;
        let mut starts = Vec::with_capacity(buckets + 1);
        let mut next = 0usize;
        for bucket in 0..buckets {
            while next < keys.len() && ((keys[next] >> shift) as usize) < bucket {
                next += 1;
            }
            starts.push(next as u32);
        }
        starts.push(keys.len() as u32);
        SortedKeyIndex {
            keys,
            shift,
            starts,
        }
    }

    /// The position of `key` among the keys, if it is one of them.
    #[inline]
    pub fn position(&self, key: u64) -> Option<usize> {
        let (low, high) = self.bucket(key);
        let bucket = &self.keys[low..high];
        let found = if bucket.len() <= SCAN_LIMIT {
            bucket.iter().position(|&k| k == key)
        } else {
            bucket.binary_search(&key).ok()
        };
        found.map(|i| low + i)
    }

    /// Whether `key` is one of the keys.
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.position(key).is_some()
    }

    /// Calls `found(n, position)` for every `keys[n]` in order: what [`SortedKeyIndex::position`]
    /// says, with [`NO_KEY`] never found. A lookup waits on memory twice (the directory, then
    /// the keys; both far larger than a cache), so the directory entry of a key some lookups
    /// ahead and the keys of a nearer one are requested early: a batch waits on memory about once
    /// instead of twice per key.
    #[inline]
    pub fn each_position(&self, keys: &[u64], mut found: impl FnMut(usize, Option<usize>)) {
        const AHEAD: usize = 8;
        for key in keys.iter().take(2 * AHEAD) {
            self.prefetch_directory(*key);
        }
        for key in keys.iter().take(AHEAD) {
            self.prefetch_bucket(*key);
        }
        for (n, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(n + 2 * AHEAD) {
                self.prefetch_directory(ahead);
            }
            if let Some(&ahead) = keys.get(n + AHEAD) {
                self.prefetch_bucket(ahead);
            }
            found(
                n,
                if key == NO_KEY {
                    None
                } else {
                    self.position(key)
                },
            );
        }
    }

    #[inline]
    fn prefetch_directory(&self, key: u64) {
        if let Some(start) = self.starts.get((key >> self.shift) as usize) {
            prefetch(start);
        }
    }

    #[inline]
    fn prefetch_bucket(&self, key: u64) {
        if let Some(&start) = self.starts.get((key >> self.shift) as usize)
            && let Some(first) = self.keys.get(start as usize)
        {
            prefetch(first);
        }
    }

    #[inline]
    fn bucket(&self, key: u64) -> (usize, usize) {
        if self.starts.is_empty() {
            return (0, self.keys.len());
        }
        let b = (key >> self.shift) as usize;
        (self.starts[b] as usize, self.starts[b + 1] as usize)
    }
}

/// Starts loading the cache line of `value` (a hint; does nothing where unsupported).
#[inline]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, and the pointer comes from a reference.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(keys: &[u64], probes: &[u64]) {
        let index = SortedKeyIndex::new(keys);
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(index.position(k), Some(i), "key {k:#x}");
        }
        for &p in probes {
            assert_eq!(
                index.position(p),
                keys.binary_search(&p).ok(),
                "probe {p:#x}"
            );
        }
        let mut batch = Vec::new();
        let all: Vec<u64> = keys.iter().chain(probes).copied().collect();
        index.each_position(&all, |n, p| batch.push((n, p)));
        let expected: Vec<(usize, Option<usize>)> = all
            .iter()
            .map(|k| match *k {
                NO_KEY => None,
                k => keys.binary_search(&k).ok(),
            })
            .enumerate()
            .collect();
        assert_eq!(batch, expected);
    }

    #[test]
    fn edges_of_the_key_space() {
        check(&[], &[0, 1, u64::MAX]);
        check(&[0], &[1, u64::MAX]);
        check(&[u64::MAX], &[0, u64::MAX - 1]);
        check(&[0, u64::MAX], &[1, u64::MAX - 1, 1 << 63]);
        check(&[1 << 63, (1 << 63) + 1], &[(1 << 63) - 1, (1 << 63) + 2]);
    }

    #[test]
    fn skewed_keys_land_in_few_long_buckets() {
        // Small integers all fall in bucket 0: bisected, still exact.
        let keys: Vec<u64> = (0..10_000u64).map(|k| k * 3).collect();
        let probes: Vec<u64> = (0..30_010u64).collect();
        check(&keys, &probes);
    }

    proptest! {
        #[test]
        fn finds_exactly_the_keys(
            mut keys in proptest::collection::vec(any::<u64>(), 0..3000),
            probes in proptest::collection::vec(any::<u64>(), 0..500),
        ) {
            keys.sort_unstable();
            keys.dedup();
            check(&keys, &probes);
        }
    }
}
