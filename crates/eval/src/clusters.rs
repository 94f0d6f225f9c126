//! The largest duplicate clusters of a run, with the start of their texts side by side: what a
//! user looks at to see what the run treated as one document.

use super::*;
use std::collections::HashMap;

/// Members shown per cluster besides its kept sample (the earliest in input order).
const MEMBERS_SHOWN: usize = 3;

/// A cluster's kept record, as the decisions name it: `(file index, record)`.
pub(super) type ClusterKey = (u32, u64);

/// Every cluster with at least one duplicate: its size and its first members.
#[derive(Default)]
pub(super) struct ClusterTally {
    clusters: HashMap<ClusterKey, Members>,
}

#[derive(Default)]
struct Members {
    duplicates: u64,
    first: Vec<(SampleAddr, Reason, Option<f64>)>,
}

impl ClusterTally {
    /// A duplicate at `addr` whose cluster is `cluster`, given in address order.
    pub(super) fn add(
        &mut self,
        cluster: ClusterKey,
        addr: SampleAddr,
        reason: Reason,
        similarity: Option<f64>,
    ) {
        let m = self.clusters.entry(cluster).or_default();
        m.duplicates += 1;
        if m.first.len() < MEMBERS_SHOWN {
            m.first.push((addr, reason, similarity));
        }
    }

    /// The `n` largest clusters (ties: the earlier kept record first), texts still to be found.
    pub(super) fn largest(&self, n: usize) -> Vec<PendingCluster> {
        let mut all: Vec<(&ClusterKey, &Members)> = self.clusters.iter().collect();
        all.sort_unstable_by_key(|(k, m)| (std::cmp::Reverse(m.duplicates), **k));
        all.truncate(n);
        all.into_iter()
            .map(|(k, m)| PendingCluster {
                kept: *k,
                size: m.duplicates + 1,
                kept_sample: None,
                members: m.first.clone(),
                texts: HashMap::new(),
            })
            .collect()
    }
}

/// A cluster chosen for the report, collecting its texts while the inputs stream.
pub(super) struct PendingCluster {
    kept: ClusterKey,
    size: u64,
    /// The kept record's first sample with text, once streamed.
    kept_sample: Option<(SampleAddr, Option<String>, String)>,
    members: Vec<(SampleAddr, Reason, Option<f64>)>,
    texts: HashMap<SampleAddr, (Option<String>, String)>,
}

impl PendingCluster {
    /// Whether the sample at `addr` is one this cluster shows.
    pub(super) fn wants(&self, addr: SampleAddr) -> bool {
        (self.kept_sample.is_none() && (addr.file, addr.record) == self.kept)
            || self.members.iter().any(|m| m.0 == addr)
    }

    /// Takes the text of a sample it [`wants`](Self::wants).
    pub(super) fn offer(&mut self, addr: SampleAddr, id: Option<&str>, text: &str) {
        if self.kept_sample.is_none() && (addr.file, addr.record) == self.kept {
            self.kept_sample = Some((addr, id.map(str::to_owned), snippet(text)));
        } else if self.members.iter().any(|m| m.0 == addr) {
            self.texts
                .insert(addr, (id.map(str::to_owned), snippet(text)));
        }
    }

    pub(super) fn finish(self, ctx: &Ctx<'_>) -> ClusterExample {
        let (kept, kept_text) = match self.kept_sample {
            Some((addr, id, text)) => (ctx.sample_ref(addr, id), Some(text)),
            None => (
                ctx.sample_ref(
                    SampleAddr {
                        file: self.kept.0,
                        record: self.kept.1,
                        field: 0,
                    },
                    None,
                ),
                None,
            ),
        };
        let mut texts = self.texts;
        let members = self
            .members
            .into_iter()
            .map(|(addr, reason, similarity)| {
                let (id, text) = texts
                    .remove(&addr)
                    .map_or((None, None), |(i, t)| (i, Some(t)));
                ClusterMember {
                    sample: ctx.sample_ref(addr, id),
                    reason,
                    similarity,
                    text,
                }
            })
            .collect();
        ClusterExample {
            kept,
            size: self.size,
            kept_text,
            members,
        }
    }
}
