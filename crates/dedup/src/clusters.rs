//! Duplicate clusters: every kept sample with the duplicates that resolve to it.
//!
//! A drop's `dup_of` may name a dropped sample (an exact copy of a text that was itself a near
//! duplicate), so users chasing chains get the cluster directly: each decision carries the kept
//! sample its set resolves to ([`crate::Verdict::cluster`]). This module counts the clusters'
//! sizes for the report. A cluster never spans two groups of a distributed run (its members
//! share hot keys with its kept sample, so they are in one connected component), so each decide
//! step counts its clusters completely and the groups' counts add up ([`ClusterStats::merge`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use neardup_corpus::SampleAddr;

use neardup_scratch::{Backing, KeyedSlot, Plain, ProbeTable, Zeroable};

/// How many of the largest clusters a report lists.
pub const LARGEST_CLUSTERS: usize = 10;

/// Cluster sizes of a run (or of one group of a distributed run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStats {
    /// Clusters with at least one duplicate, by size (kept sample included), ascending sizes.
    /// Every other kept sample is a cluster of size 1.
    pub sizes: Vec<ClusterSize>,
    /// The largest clusters (at most [`LARGEST_CLUSTERS`]), largest first; ties by the kept
    /// sample's file name, record and field.
    pub largest: Vec<ClusterHead>,
}

/// How many clusters have one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSize {
    /// Samples in each, the kept one included.
    pub size: u64,
    /// Clusters of that size.
    pub clusters: u64,
}

/// One cluster: its kept sample and its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterHead {
    /// The kept sample's file.
    pub file: String,
    /// Its record.
    pub record: u64,
    /// Its field (0 unless fields are expanded into samples).
    pub field: u32,
    /// Samples in the cluster, the kept one included.
    pub size: u64,
}

impl ClusterStats {
    /// Clusters with at least one duplicate.
    pub fn duplicated(&self) -> u64 {
        self.sizes.iter().map(|s| s.clusters).sum()
    }

    /// Adds the clusters of another group of the same run (no cluster is in both).
    pub fn merge(&mut self, other: &ClusterStats) {
        let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
        for s in self.sizes.iter().chain(&other.sizes) {
            *sizes.entry(s.size).or_default() += s.clusters;
        }
        self.sizes = size_list(sizes);
        self.largest.extend(other.largest.iter().cloned());
        sort_largest(&mut self.largest);
    }
}

/// A sample's address as the key of a [`KeyedSlot`]: the record is held plus one, so that the
/// all-zero key of an empty slot is no sample's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct AddrKey {
    record_plus_one: u64,
    file: u32,
    field: u32,
}

impl AddrKey {
    /// The key of an empty slot.
    pub const EMPTY: AddrKey = AddrKey {
        record_plus_one: 0,
        file: 0,
        field: 0,
    };

    /// The key of `addr`.
    pub fn of(addr: SampleAddr) -> AddrKey {
        AddrKey {
            record_plus_one: addr
                .record
                .checked_add(1)
                .expect("a record number below 2^64 - 1"),
            file: addr.file,
            field: addr.field,
        }
    }

    /// The address it is the key of.
    pub fn addr(self) -> SampleAddr {
        SampleAddr {
            file: self.file,
            record: self.record_plus_one - 1,
            field: self.field,
        }
    }

    /// The key folded to 64 bits ([`KeyedSlot::fold`]): records of a file are consecutive
    /// numbers, so the three parts are spread before they are mixed.
    pub fn fold(self) -> u64 {
        let place = (u64::from(self.file) << 32) | u64::from(self.field);
        let h = self.record_plus_one.wrapping_mul(0xD6E8_FEB8_6659_FD93)
            ^ place.wrapping_mul(0xA076_1D64_78BD_642F);
        h ^ (h >> 32)
    }
}

/// One slot of the counter's table: a kept sample and its duplicates so far.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    kept: AddrKey,
    duplicates: u64,
}

// SAFETY: integers only; all-zero is an empty slot (the empty key).
unsafe impl Plain for Slot {}
// SAFETY: as above.
unsafe impl Zeroable for Slot {}

impl KeyedSlot for Slot {
    type Key = AddrKey;
    const EMPTY: AddrKey = AddrKey::EMPTY;
    fn key(&self) -> AddrKey {
        self.kept
    }
    fn fold(key: AddrKey) -> u64 {
        key.fold()
    }
}

/// Counts the duplicates of each kept sample as decisions are made: a [`ProbeTable`], so that
/// under a memory limit it hands its pages back with the rest of the decision state's
/// bookkeeping ([`crate::Deduper`] keeps one).
pub struct ClusterCounter {
    duplicates: ProbeTable<Slot>,
}

impl Default for ClusterCounter {
    /// A counter in ordinary memory.
    fn default() -> ClusterCounter {
        ClusterCounter::new(Backing::Heap, u64::MAX)
    }
}

impl ClusterCounter {
    /// An empty counter kept as `backing` says; a growing mapped table holds at most about
    /// `budget` bytes of its pages at a time.
    pub(crate) fn new(backing: Backing, budget: u64) -> ClusterCounter {
        ClusterCounter {
            duplicates: ProbeTable::new(backing, budget),
        }
    }

    /// A dropped duplicate whose cluster is `cluster`.
    pub fn add_drop(&mut self, cluster: SampleAddr) {
        let kept = AddrKey::of(cluster);
        match self.duplicates.entry(kept) {
            Ok(slot) => slot.duplicates += 1,
            Err(i) => self.duplicates.fill(
                i,
                Slot {
                    kept,
                    duplicates: 1,
                },
            ),
        }
    }

    /// Bytes its table may hold in memory (all of it, mapped or not).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.duplicates.memory_bytes()
    }

    /// Hands one of `parts` parts of its mapped table back to the kernel.
    pub(crate) fn release_part(&mut self, parts: usize) {
        self.duplicates.release_part(parts);
    }

    /// The sizes and the largest clusters, files named by `names` (indexed by
    /// [`SampleAddr::file`]).
    pub fn finish(&self, names: &[String]) -> ClusterStats {
        let mut sizes = BTreeMap::new();
        for slot in self.duplicates.iter() {
            *sizes.entry(slot.duplicates + 1).or_default() += 1;
        }
        let name = |a: &SampleAddr| -> String {
            names
                .get(a.file as usize)
                .cloned()
                .unwrap_or_else(|| a.file.to_string())
        };
        let mut all: Vec<(SampleAddr, u64)> = self
            .duplicates
            .iter()
            .map(|slot| (slot.kept.addr(), slot.duplicates))
            .collect();
        if all.len() > LARGEST_CLUSTERS {
            // Only the largest need their names; a tie at the cut is settled by names below.
            all.sort_unstable_by_key(|(_, n)| std::cmp::Reverse(*n));
            let cut = all[LARGEST_CLUSTERS - 1].1;
            all.retain(|(_, n)| *n >= cut);
        }
        let mut largest: Vec<ClusterHead> = all
            .into_iter()
            .map(|(a, n)| ClusterHead {
                file: name(&a),
                record: a.record,
                field: a.field,
                size: n + 1,
            })
            .collect();
        sort_largest(&mut largest);
        ClusterStats {
            sizes: size_list(sizes),
            largest,
        }
    }
}

fn size_list(sizes: BTreeMap<u64, u64>) -> Vec<ClusterSize> {
    sizes
        .into_iter()
        .map(|(size, clusters)| ClusterSize { size, clusters })
        .collect()
}

/// Largest first; ties by file name, record and field, so that the list is the same whichever
/// groups counted the clusters.
fn sort_largest(heads: &mut Vec<ClusterHead>) {
    heads.sort_by(|a, b| {
        (std::cmp::Reverse(a.size), &a.file, a.record, a.field).cmp(&(
            std::cmp::Reverse(b.size),
            &b.file,
            b.record,
            b.field,
        ))
    });
    heads.truncate(LARGEST_CLUSTERS);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(file: u32, record: u64) -> SampleAddr {
        SampleAddr {
            file,
            record,
            field: 0,
        }
    }

    #[test]
    fn sizes_count_the_kept_sample_and_ties_go_by_name_and_record() {
        let mut c = ClusterCounter::default();
        for (cluster, drops) in [
            (addr(1, 5), 3),
            (addr(0, 9), 1),
            (addr(0, 2), 3),
            (addr(2, 0), 1),
        ] {
            for _ in 0..drops {
                c.add_drop(cluster);
            }
        }
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let s = c.finish(&names);
        let sizes: Vec<(u64, u64)> = s.sizes.iter().map(|c| (c.size, c.clusters)).collect();
        assert_eq!(sizes, [(2, 2), (4, 2)]);
        assert_eq!(s.duplicated(), 4);
        let heads: Vec<(&str, u64, u64)> = s
            .largest
            .iter()
            .map(|h| (h.file.as_str(), h.record, h.size))
            .collect();
        assert_eq!(heads, [("a", 2, 4), ("b", 5, 4), ("a", 9, 2), ("c", 0, 2)]);
    }

    #[test]
    fn counts_hold_on_both_backings_when_pages_are_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..4).map(|f| format!("f{f}")).collect();
        let mut results = Vec::new();
        for backing in neardup_scratch::both_backings(&dir) {
            let mut c = ClusterCounter::new(backing, 16 * 1024);
            let mut expected: std::collections::HashMap<SampleAddr, u64> = Default::default();
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..100_000u64 {
                let x = neardup_scratch::xorshift(&mut state);
                // Skewed: a few large clusters among many of one or two duplicates.
                let record = if x.is_multiple_of(10) {
                    x % 7
                } else {
                    x % 30_000
                };
                let kept = addr((x >> 32) as u32 % 4, record);
                c.add_drop(kept);
                *expected.entry(kept).or_default() += 1;
                if i % 7_000 == 0 {
                    c.release_part(4);
                }
            }
            let stats = c.finish(&names);
            let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
            for n in expected.values() {
                *sizes.entry(n + 1).or_default() += 1;
            }
            assert_eq!(stats.sizes, size_list(sizes));
            let mut largest: Vec<(SampleAddr, u64)> =
                expected.iter().map(|(a, n)| (*a, n + 1)).collect();
            largest.sort_by_key(|(a, n)| (std::cmp::Reverse(*n), a.file, a.record));
            largest.truncate(LARGEST_CLUSTERS);
            let heads: Vec<(SampleAddr, u64)> = stats
                .largest
                .iter()
                .map(|h| {
                    let file = h.file[1..].parse().unwrap();
                    (addr(file, h.record), h.size)
                })
                .collect();
            assert_eq!(heads, largest);
            results.push(stats);
        }
        assert_eq!(results[0], results[1]);
    }

    #[test]
    fn only_the_largest_are_listed_and_groups_merge() {
        let names: Vec<String> = vec!["f".into()];
        let mut one = ClusterCounter::default();
        let mut two = ClusterCounter::default();
        for r in 0..30u64 {
            let target = if r % 2 == 0 { &mut one } else { &mut two };
            for _ in 0..=r {
                target.add_drop(addr(0, r));
            }
        }
        let (a, b) = (one.finish(&names), two.finish(&names));
        assert_eq!(a.largest.len(), LARGEST_CLUSTERS);
        assert_eq!(a.largest[0].record, 28);
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.duplicated(), 30);
        let records: Vec<u64> = merged.largest.iter().map(|h| h.record).collect();
        assert_eq!(records, (20..30).rev().collect::<Vec<u64>>());
    }
}
