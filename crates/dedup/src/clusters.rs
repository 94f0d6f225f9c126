//! Duplicate clusters: every kept sample with the duplicates that resolve to it.
//!
//! A drop's `dup_of` may name a dropped sample (an exact copy of a text that was itself a near
//! duplicate), so users chasing chains get the cluster directly: each decision carries the kept
//! sample its set resolves to ([`crate::Verdict::cluster`]). This module counts the clusters'
//! sizes for the report. A cluster never spans two groups of a distributed run (its members
//! share hot keys with its kept sample, so they are in one connected component), so each decide
//! step counts its clusters completely and the groups' counts add up ([`ClusterStats::merge`]).

use std::collections::BTreeMap;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use neardup_corpus::SampleAddr;

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

/// Counts the duplicates of each kept sample as decisions are made.
#[derive(Default)]
pub struct ClusterCounter {
    duplicates: HashMap<SampleAddr, u64>,
}

impl ClusterCounter {
    /// A dropped duplicate whose cluster is `cluster`.
    pub fn add_drop(&mut self, cluster: SampleAddr) {
        *self.duplicates.entry(cluster).or_default() += 1;
    }

    /// The sizes and the largest clusters, files named by `names` (indexed by
    /// [`SampleAddr::file`]).
    pub fn finish(&self, names: &[String]) -> ClusterStats {
        let mut sizes = BTreeMap::new();
        for n in self.duplicates.values() {
            *sizes.entry(n + 1).or_default() += 1;
        }
        let name = |a: &SampleAddr| -> String {
            names
                .get(a.file as usize)
                .cloned()
                .unwrap_or_else(|| a.file.to_string())
        };
        let mut all: Vec<(SampleAddr, u64)> =
            self.duplicates.iter().map(|(a, n)| (*a, *n)).collect();
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
