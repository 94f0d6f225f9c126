//! Keys of earlier runs that count towards this run's hot keys (`--against` a saved index).
//!
//! Deduplicating B against an index of A must give B's records the decisions they get in one run
//! over A then B. In that run a key is hot when A and B together hold it more than `min_count`
//! times. With `min_count` = 1 (the only value an index supports: with more, B could change A's
//! decisions) a key of B is hot when B holds it twice, or once and A holds it. Which keys of A
//! matter for B is the saved index's business (`neardup-index`): the band keys of A's kept
//! samples and the content keys of A's texts. Here they only add to the counts: each prior key
//! counts once more, and a prior content key makes B's first copy of that text a later copy.

/// The keys of earlier runs, sorted, with a small directory on their high 16 bits so that a
/// lookup is a short binary search within one slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriorKeys {
    /// Every key of the earlier runs that counts (band and content keys), ascending, distinct.
    keys: Vec<u64>,
    /// `directory[h]..directory[h + 1]` is the slice of `keys` whose high 16 bits are `h`.
    directory: Vec<u32>,
    /// Per key of `keys`: whether an earlier run held it in the content-key column.
    content: Vec<bool>,
}

impl PriorKeys {
    /// Prior keys from `(key, held as a content key)` pairs in any order, repeats allowed.
    pub fn new(mut pairs: Vec<(u64, bool)>) -> PriorKeys {
        pairs.sort_unstable();
        let mut keys: Vec<u64> = Vec::with_capacity(pairs.len());
        let mut content: Vec<bool> = Vec::with_capacity(pairs.len());
        for (k, c) in pairs {
            if keys.last() == Some(&k) {
                *content.last_mut().expect("a key was pushed") |= c;
            } else {
                keys.push(k);
                content.push(c);
            }
        }
        let mut directory = vec![0u32; (1 << 16) + 1];
        for &k in &keys {
            directory[(k >> 48) as usize + 1] += 1;
        }
        for h in 0..1 << 16 {
            directory[h + 1] += directory[h];
        }
        assert!(keys.len() < u32::MAX as usize, "fewer than 2^32 prior keys");
        PriorKeys {
            keys,
            directory,
            content,
        }
    }

    /// Distinct prior keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.keys.len() * 9 + self.directory.len() * 4
    }

    /// Whether an earlier run held `key`, and whether in the content-key column.
    #[inline]
    pub fn lookup(&self, key: u64) -> Option<bool> {
        if self.keys.is_empty() {
            return None;
        }
        let h = (key >> 48) as usize;
        let (lo, hi) = (self.directory[h] as usize, self.directory[h + 1] as usize);
        self.keys[lo..hi]
            .binary_search(&key)
            .ok()
            .map(|i| self.content[lo + i])
    }
}

/// When a key is hot: seen more than `min_count` times in this run's tables, a prior key
/// counting once more.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HotRule<'a> {
    pub min_count: u32,
    pub prior: Option<&'a PriorKeys>,
}

impl HotRule<'_> {
    /// Without prior keys.
    pub fn counting(min_count: u32) -> HotRule<'static> {
        HotRule {
            min_count,
            prior: None,
        }
    }

    /// Whether a key seen `count` times here is hot, and whether a prior run held it as a
    /// content key (so this run's first content-column copy of it is a later copy).
    #[inline]
    pub fn judge(&self, key: u64, count: u64) -> (bool, bool) {
        match self.prior.and_then(|p| p.lookup(key)) {
            Some(content) => (count + 1 > u64::from(self.min_count), content),
            None => (count > u64::from(self.min_count), false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lookup_finds_exactly_the_keys_given(
            keys in proptest::collection::vec((any::<u64>(), any::<bool>()), 0..300),
            probes in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            let prior = PriorKeys::new(keys.clone());
            for &(k, _) in &keys {
                let content = keys.iter().any(|&(k2, c)| k2 == k && c);
                prop_assert_eq!(prior.lookup(k), Some(content));
            }
            for p in probes {
                let want = keys.iter().any(|&(k, _)| k == p).then(|| keys.iter().any(|&(k, c)| k == p && c));
                prop_assert_eq!(prior.lookup(p), want);
            }
        }
    }

    #[test]
    fn keys_at_the_edges_of_the_directory_are_found() {
        let prior = PriorKeys::new(vec![(0, false), (u64::MAX - 1, true), (1 << 48, false)]);
        assert_eq!(prior.lookup(0), Some(false));
        assert_eq!(prior.lookup(u64::MAX - 1), Some(true));
        assert_eq!(prior.lookup(1 << 48), Some(false));
        assert_eq!(prior.lookup((1 << 48) - 1), None);
        assert_eq!(PriorKeys::default().lookup(0), None);
    }
}
