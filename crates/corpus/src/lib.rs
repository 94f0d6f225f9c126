//! Corpus I/O for neardup: everything that touches input and output files.
//!
//! This crate owns:
//! - **discovery** of input files from file, directory and glob arguments ([`discover`]), with
//!   format and compression detection ([`Format`], [`Compression`]);
//! - **text selection** — which JSON fields / Parquet columns make up a sample ([`TextSelector`]);
//! - **chunk planning** so one large file can be read by several threads ([`plan_chunks`]);
//! - **streaming reads** of JSONL (plain, gzip, zstd) and Parquet as [`Block`]s of records, with
//!   every bad record turned into a typed [`SkipReason`] and every unreadable region into a
//!   [`ReadError`] that says which records it cost ([`Unreadable`]); reading goes on past a
//!   damaged Parquet row group, and a second read of a chunk stops where the first lost records
//!   ([`read_chunk`], [`reread_chunk`]); which selected fields the records have ([`FieldsSeen`],
//!   [`record_fields`]); where each record of a JSONL file lies in its (decompressed) stream
//!   ([`Block::jsonl_offset`]) and where the members of a compressed one start
//!   ([`Block::jsonl_resume_points`], [`ResumePoint`]), and reading only some records of a chunk
//!   by those places ([`read_records`]: stage 2 reads only the records it decides, entering a
//!   gzip file of several members or a zstd file of several frames at the member that holds
//!   them), or only some rows of a Parquet chunk ([`read_rows`]: the row groups and pages
//!   holding them);
//! - **in-memory Arrow tables** as inputs ([`ArrowTable`], [`Format::Arrow`]): registered record
//!   batches that every stage reads in place, as it reads a file, or a stream opened afresh for
//!   each stage and read batch by batch;
//! - **writing** filtered copies of the inputs ([`OutputDir`], [`FileWriter`]), atomic files
//!   ([`AtomicFile`]) and the per-sample decisions file ([`DecisionWriter`], [`read_decisions`]);
//! - **publishing** a run's outputs all or nothing ([`Publication`]): staging under hidden,
//!   locked names carrying a [`RunId`], one commit with a journal (finished by the next run if
//!   this one dies inside it), the output directory's manifest ([`Manifest`], `_SUCCESS`),
//!   `overwrite` replacing only files an earlier manifest lists; the life of scratch files and
//!   spill directories ([`ScratchFile`], [`ScratchDir`]) and the removal of what dead runs left.
//!   A publication looks a last time at the run's `neardup_exec::CancelToken` before it commits;
//! - **the framing** of neardup's own binary files and values ([`frame`]: magic, checksum, end
//!   marker), which the key tables, hot keys, step streams, saved indexes and step values share.
//!
//! Any of these paths may be an object storage URL (`s3://`, `gs://`, `az://`): discovery lists
//! prefixes, the readers take their bytes, and publication uploads its outputs, through
//! `neardup-storage`, which owns the clients; every rule about files stays here.
//!
//! It does not own hashing, sketching, deduplication, threading or reporting policy: callers
//! decide what an empty text means, whether an error stops the run, and how chunks are scheduled.
//!
//! Where things live: `block` is the base of reading (the [`Block`] and [`Sample`] types, skip
//! reasons, what a record's field values become); the format readers build on it (`jsonl` with
//! the JSON line scanner `json`, `parquet_read`, `picked`, which reads chosen records of a JSONL
//! chunk by their places, and `parquet_picked`, chosen rows of a Parquet chunk); `plan` cuts the
//! inputs into chunks; `read` picks the reader for a file and is the only module that knows every
//! format. Writing is `write` (filtered copies), `publish` and `decisions`. The JSON scanner's vector paths are chosen from
//! `neardup_cpu::Features`. `lib.rs` lists the modules from the bottom up: each names only those
//! above it.
//!
//! Addresses: a sample is identified by (file index, record index, field index). Record indexes
//! yielded by the reader are chunk-local ([`Block::first_record`] + [`Sample::record`]); because
//! [`plan_chunks`] is deterministic, adding the record counts of a file's earlier chunks gives the
//! same file-level index in both stages.

mod error;
mod format;
mod select;
mod chunk;
pub mod frame;
mod members;
mod discover;
mod block;
mod json;
mod parquet_read;
mod arrow_table;
mod jsonl;
mod picked;
mod parquet_picked;
mod plan;
mod read;
mod write;
mod publish;
mod decisions;

pub use arrow_table::{ArrowTable, NameTaken, OpenStream, StreamBatches};
pub use block::{
    Block, FieldsSeen, Projection, RankValue, ReadOptions, Sample, SampleAddr, SampleText,
    SkipReason,
};
pub use chunk::{Chunk, ChunkRange};
pub use decisions::{
    DecisionRow, DecisionWriter, OwnedDecisionRow, Reason, is_decisions_file, read_decisions,
};
pub use discover::{
    DiscoverOptions, Discovery, InputProblem, InputSource, SourceKind, SourceLink, discover,
};
pub use error::{ReadError, ReadErrorKind, Unreadable, UnreadableRange, WriteError};
pub use format::{Compression, Format, InputFile, current_size};
pub use members::ResumePoint;
pub use picked::{RecordPlace, RecordSpan};
pub use plan::{balanced_chunk_bytes, plan_chunks};
pub use publish::{
    AtomicFile, Distributed, MANIFEST, Manifest, ManifestEntry, ManifestFile, Publication,
    PublishOptions, Published, RunId, ScratchDir, ScratchFile, publish_whole, read_manifest,
    shard_manifest_name, special_node,
};
pub use read::{
    ChunkReader, read_chunk, read_records, read_records_whole, read_rows, record_fields,
    reread_chunk,
};
pub use select::{DEFAULT_SEPARATOR, FieldPath, FieldPathError, FieldsMode, TextSelector};
pub use write::{FileWriter, OutputDir, OutputOptions, WrittenFile};

#[cfg(test)]
mod tests {
    /// Readers, blocks and writers move between threads; the output directory is shared.
    #[test]
    fn thread_bounds() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<crate::ChunkReader>();
        send::<crate::Block>();
        sync::<crate::Block>();
        send::<crate::FileWriter>();
        send::<crate::DecisionWriter>();
        send::<crate::AtomicFile>();
        sync::<crate::OutputDir>();
        sync::<crate::Publication>();
        send::<crate::Publication>();
        send::<crate::ReadError>();
        send::<crate::WriteError>();
    }
}
