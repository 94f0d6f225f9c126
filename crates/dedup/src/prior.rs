//! What earlier runs leave to this one's decisions (`--against` a saved index): the
//! representatives and first copies of earlier runs that this run's hot keys reach.
//!
//! One run over A then B decides B's records against a state that A alone determines: each hot
//! bucket starts with the first `max_reps` kept samples of A holding its key, in A's order, and
//! each text seen in A maps to A's first sample with it and the kept sample its cluster resolves
//! to. Seeding a decision core with that state (only the buckets and texts B reaches) before B's
//! samples gives B exactly the decisions of the joint run. Building the state from a saved index
//! (which samples, read back by address and sketched again) is `neardup-index`'s job.

use neardup_corpus::SampleAddr;

/// A kept sample of an earlier run that represents buckets this run reaches.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorRepresentative {
    /// Its address, in the numbering where the earlier runs' files come first.
    pub addr: SampleAddr,
    /// Its id, when an id field is configured and the record has one.
    pub id: Option<String>,
    /// Its MinHash signature.
    pub signature: Vec<u32>,
    /// Its shingle set (exact verification only).
    pub shingles: Option<Vec<u32>>,
    /// Its band keys (the first columns of its row).
    pub bands: Vec<u64>,
}

/// The first sample of an earlier run with some text, and where its cluster resolves.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorCopy {
    /// The 128-bit content hash of its normalised text.
    pub content_hash: u128,
    /// Its address.
    pub addr: SampleAddr,
    /// The kept sample its duplicate set resolves to (itself when kept).
    pub cluster: SampleAddr,
    /// Its id, when an id field is configured and the record has one.
    pub id: Option<String>,
}

/// The part of earlier runs' decision state this run reaches, in the earlier runs' order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriorState {
    /// The earlier runs' files as decisions name them, in order: this run's files are numbered
    /// after them, so addresses are those of one run over all the inputs.
    pub names: Vec<String>,
    /// Representatives, in the earlier runs' order.
    pub representatives: Vec<PriorRepresentative>,
    /// First copies, in the earlier runs' order.
    pub copies: Vec<PriorCopy>,
    /// Records of the earlier runs read back to build this state (for the report).
    pub records_read: u64,
}
