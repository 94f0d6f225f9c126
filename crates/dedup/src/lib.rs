//! Stage 2 of neardup: bounded-representative near-duplicate decisions while re-streaming the
//! inputs.
//!
//! This crate owns:
//! - the **decision core** ([`Deduper`]): for each hot sample, in input order, an exact-copy check
//!   by content hash, then a comparison with the representatives of each of its hot buckets (each
//!   representative compared once); a match at the threshold drops the sample and names the
//!   representative, otherwise the sample is kept and joins every hot bucket with room
//!   (`max_reps`). Representatives' signatures live once in a contiguous arena; buckets hold small
//!   indices ([`DeduperStats`] reports the bytes). Optional exact verification ([`Verify::Jaccard`])
//!   confirms each candidate with the true Jaccard of the shingle sets;
//! - the **pipeline** ([`run_dedup`]), a step of the one executor (`neardup_exec`): worker threads
//!   re-read the inputs chunk by chunk (the chunks stage 1 recorded, so each worker knows the
//!   table row of every sample) and sign only hot
//!   samples; one thread decides in input order, so the decisions are identical for any thread
//!   count; the filtered dataset (through `neardup-corpus` writers, on their own thread) and the
//!   decisions file come out of the same pass, into a `neardup_corpus::Publication` that
//!   publishes them all or nothing; a cancel token stops the pass between blocks. Stage 2 reads
//!   each chunk up to where stage 1 lost records and reports every loss itself
//!   ([`DedupStats::unreadable`]), so its statistics account for every record without stage 1's;
//!   an input of which nothing could be read gets no output file;
//! - the **distributed steps** ([`run_sign`], [`decide_group`], [`run_write`]): stage 2 split
//!   into sign per shard, decide per group of connected components, write per shard, with the
//!   values between them ([`SignedSample`], [`DecidedSample`], framed streams); the same
//!   pipeline with another route for the hot samples (the one-process decision core, the signer
//!   or the decided streams: `route.rs`), and the same decision core, fed in decide by
//!   sketching the texts sign sent;
//! - **which copy is kept** ([`Prefer`]): input order by default; any other preference ranks
//!   the hot samples in the sign step (`prefer`), sorts each group's stream by rank (`rank_order`,
//!   spilling past a budget), and decide takes them in that order and puts its decisions back
//!   in row order with the same sorter; a one-process run with a preference runs the three
//!   steps itself;
//! - **the state earlier runs leave** ([`PriorState`], [`Deduper::seed`]): against a saved
//!   index, the decision core starts from the representatives and first copies of earlier runs
//!   that this run's hot keys reach, and this run's files are numbered after theirs
//!   ([`Stage2Config::prior`]); building that state from an index is `neardup-index`'s;
//! - [`TextDeduper`], for callers who feed texts one by one (the Python package's `Deduper`),
//!   with every key counting or against a hot-key set.
//!
//! It does not compute keys, count them or plan the groups (stage 1, `neardup-keys`), parse
//! inputs or format outputs (`neardup-corpus`), run threads (`neardup-exec`), or keep the arrays
//! of its bookkeeping (`neardup-scratch`: in scratch files' mappings under a memory limit, so
//! that their pages can be handed back).
//!
//! Where things live, each module building only on those before it: the decision core is
//! `verify` (records that spill, and exact
//! verification's shingle sets), `large_set` (under a memory limit, the shingle set of a text
//! too long to hold it in memory: built by an external sort into a scratch file and compared by a
//! streaming merge), `reps` (buckets and the representatives' store),
//! `first_copies` (the first sample of each text), `sample_ids` and `clusters` (the ids later
//! decisions may name and the clusters' sizes, [`Deduper::note`]) and `deduper`; a stage-2 pass
//! starts from `pass` (its settings, [`Decision`], [`DedupStats`]), then `prepare` (what the workers make of a block), `route` (the deciding
//! thread and the routes of hot samples), `stage` (the pass on the executor); `handoff` is the
//! values between the distributed steps, `step_sink` where their streams go, `rank_order` the
//! sorter of ranked streams, and `distributed` the steps themselves, the same pass with the
//! signer's and the decided streams' routes; `ranked` is one process with a preference (the
//! three steps with one group), and `run` ([`run_dedup`]) the one-process stage 2 that takes
//! the pass or the ranked steps; `text_deduper` decides texts given one by one with the core.
#![warn(missing_docs)]

// Modules from the bottom up: each names only those above it.
mod error;
mod prefer;
mod clusters;
mod sample_ids;
mod first_copies;
mod verify;
mod large_set;
mod reps;
mod prior;
mod deduper;
mod handoff;
mod pass;
mod prepare;
mod route;
mod stage;
mod step_sink;
mod rank_order;
mod distributed;
mod ranked;
mod run;
mod text_deduper;

pub use clusters::{ClusterCounter, ClusterHead, ClusterSize, ClusterStats, LARGEST_CLUSTERS};
pub use deduper::{
    Candidate, Deduper, DeduperConfig, DeduperStats, Match, SampleAddr, Verdict, Verify,
};
pub use distributed::{
    DecideShape, DecidedMerge, GroupDecided, SignedCounts, Signer, decide_group, run_sign,
    run_write, signed_shape,
};
pub use error::{BadRank, DedupError, Mismatch, SettingsError, StepInputError};
pub use handoff::{
    DecidedSample, RecordReader, RecordWriter, SignedKind, SignedSample, SignedShape,
    decode_decided, decode_signed, encode_decided, encode_signed,
};
pub use pass::{Decision, DedupStats, EmptyPolicy, OutputFile, Stage2Config};
pub use prefer::{FieldOrder, Prefer, PreferParseError};
pub use prior::{PriorCopy, PriorRepresentative, PriorState};
pub use run::{run_dedup, run_dedup_into};
pub use step_sink::StepSink;
pub use text_deduper::{TextDeduper, TextVerdict};
