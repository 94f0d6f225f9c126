//! The run's decisions, read compactly: which samples were decided how, and which dropped
//! samples name which `dup_of` record.

use super::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use neardup_corpus::{InputFile, OwnedDecisionRow, Reason};

/// One decided sample, compacted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Decided {
    pub(super) addr: SampleAddr,
    pub(super) keep: bool,
    pub(super) reason: Reason,
    /// The kept record its cluster resolves to, when the decisions say it and its file is an
    /// input.
    cluster: Option<ClusterKey>,
    /// The record it duplicates, when its file is an input.
    dup_of: Option<ClusterKey>,
    similarity: Option<f64>,
}

/// A dropped sample that names its `dup_of`.
#[derive(Clone, Debug)]
pub(super) struct DropItem {
    pub(super) addr: SampleAddr,
    /// `(file, record)` of the `dup_of`, `None` when its file is not among the inputs.
    pub(super) target: Option<(u32, u64)>,
    pub(super) dup_of_file: String,
    pub(super) dup_of_record: u64,
    pub(super) reason: Reason,
    pub(super) similarity: Option<f64>,
    pub(super) id: Option<String>,
    pub(super) dup_of_id: Option<String>,
}

/// The decisions file, indexed by address.
pub(super) struct Decisions {
    /// Sorted by address, one row per address (a repeated address keeps its first row).
    pub(super) rows: Vec<Decided>,
    /// Sorted by address.
    pub(super) drops: Vec<DropItem>,
    /// Dropped samples per `dup_of` record.
    pub(super) targets: HashMap<(u32, u64), u32>,
    pub(super) total_rows: u64,
    pub(super) unmatched_file: u64,
    /// Clusters with duplicates.
    pub(super) clusters: ClusterTally,
}

impl Decisions {
    pub(super) fn load(
        rows: Vec<OwnedDecisionRow>,
        files: &[InputFile],
        names: &[String],
    ) -> Decisions {
        let mut resolver = FileResolver::new(files, names);
        let total_rows = rows.len() as u64;
        let mut unmatched_file = 0;
        let mut decided = Vec::with_capacity(rows.len());
        let mut drops = Vec::new();
        for row in rows {
            let Some(file) = resolver.index(&row.file) else {
                unmatched_file += 1;
                continue;
            };
            let addr = SampleAddr {
                file,
                record: row.record,
                field: row.field,
            };
            let cluster = match (&row.cluster_file, row.cluster_record) {
                (Some(f), Some(r)) => resolver.index(f).map(|f| (f, r)),
                _ => None,
            };
            let dup_of = match (&row.dup_of_file, row.dup_of_record) {
                (Some(f), Some(r)) => resolver.index(f).map(|f| (f, r)),
                _ => None,
            };
            decided.push(Decided {
                addr,
                keep: row.keep,
                reason: row.reason,
                cluster,
                dup_of,
                similarity: row.similarity,
            });
            if row.keep {
                continue;
            }
            if let (Some(dup_of_file), Some(dup_of_record)) = (row.dup_of_file, row.dup_of_record) {
                let target = resolver.index(&dup_of_file).map(|f| (f, dup_of_record));
                drops.push(DropItem {
                    addr,
                    target,
                    dup_of_file,
                    dup_of_record,
                    reason: row.reason,
                    similarity: row.similarity,
                    id: row.id,
                    dup_of_id: row.dup_of_id,
                });
            }
        }
        decided.sort_by_key(|d| d.addr);
        decided.dedup_by_key(|d| d.addr);
        drops.sort_by_key(|d| d.addr);
        drops.dedup_by_key(|d| d.addr);
        let mut targets = HashMap::new();
        for t in drops.iter().filter_map(|d| d.target) {
            *targets.entry(t).or_insert(0) += 1;
        }
        Decisions {
            clusters: tally_clusters(&decided),
            rows: decided,
            drops,
            targets,
            total_rows,
            unmatched_file,
        }
    }

    pub(super) fn find(&self, addr: SampleAddr) -> Option<usize> {
        self.rows.binary_search_by_key(&addr, |d| d.addr).ok()
    }

    pub(super) fn find_drop(&self, addr: SampleAddr) -> Option<usize> {
        self.drops.binary_search_by_key(&addr, |d| d.addr).ok()
    }
}

/// The clusters of the duplicates among `decided` (in address order). Decisions written before
/// clusters were recorded name only `dup_of`, which may itself be a duplicate: such chains are
/// followed here (a `dup_of` always comes earlier).
fn tally_clusters(decided: &[Decided]) -> ClusterTally {
    let mut tally = ClusterTally::default();
    let mut resolved: HashMap<ClusterKey, ClusterKey> = HashMap::new();
    for d in decided {
        if !dropped_as_dup(d.keep, d.reason) {
            continue;
        }
        let cluster = d
            .cluster
            .or_else(|| d.dup_of.map(|t| resolved.get(&t).copied().unwrap_or(t)));
        let Some(cluster) = cluster else {
            continue;
        };
        if d.cluster.is_none() {
            resolved.insert((d.addr.file, d.addr.record), cluster);
        }
        tally.add(cluster, d.addr, d.reason, d.similarity);
    }
    tally
}

/// Maps the file names written in decisions to input indexes: by displayed path first, then by
/// canonical path, so `./data/a.jsonl` in the decisions still finds `data/a.jsonl`.
pub(super) struct FileResolver {
    pub(super) by_name: HashMap<String, Option<u32>>,
    pub(super) by_canonical: HashMap<PathBuf, u32>,
}

impl FileResolver {
    pub(super) fn new(files: &[InputFile], names: &[String]) -> FileResolver {
        let mut by_name = HashMap::new();
        let mut by_canonical = HashMap::new();
        for (i, (f, n)) in files.iter().zip(names).enumerate() {
            by_name.entry(n.clone()).or_insert(Some(i as u32));
            if let Ok(c) = std::fs::canonicalize(&f.path) {
                by_canonical.entry(c).or_insert(i as u32);
            }
        }
        FileResolver {
            by_name,
            by_canonical,
        }
    }

    pub(super) fn index(&mut self, name: &str) -> Option<u32> {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = std::fs::canonicalize(Path::new(name))
            .ok()
            .and_then(|c| self.by_canonical.get(&c).copied());
        self.by_name.insert(name.to_owned(), i);
        i
    }
}
