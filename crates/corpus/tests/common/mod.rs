//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use neardup_corpus::{
    Block, Chunk, ChunkRange, FieldPath, InputFile, Projection, ReadError, ReadOptions, SampleText,
    TextSelector, read_chunk,
};

pub fn data(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(sub)
}

pub fn input(path: &Path) -> InputFile {
    let name = PathBuf::from(path.file_name().unwrap());
    InputFile::detect(path, &name, None).expect("known format")
}

pub fn selector(fields: &[&str], id: Option<&str>) -> TextSelector {
    TextSelector {
        fields: fields
            .iter()
            .map(|f| f.parse::<FieldPath>().unwrap())
            .collect(),
        mode: Default::default(),
        id_field: id.map(|i| i.parse().unwrap()),
        rank_field: None,
    }
}

pub fn whole(file: usize) -> Chunk {
    Chunk {
        file,
        seq: 0,
        range: ChunkRange::Whole,
    }
}

/// A sample with an owned text, for comparisons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Got {
    pub record: u64,
    pub field: u32,
    /// "T:<text>" or "S:<reason kind>"
    pub text: String,
    pub id: Option<String>,
}

pub fn block_samples(block: &Block, sel: &TextSelector, base: u64, out: &mut Vec<Got>) {
    block.for_each_sample(sel, |s| {
        out.push(Got {
            record: base + block.first_record + s.record as u64,
            field: s.field,
            text: match s.text {
                SampleText::Text(t) => format!("T:{t}"),
                SampleText::Skipped(r) => format!("S:{}", r.kind()),
            },
            id: s.id.map(|c| c.into_owned()),
        })
    });
}

/// Reads one chunk; returns samples (chunk-local records + `base`), the records delivered and the
/// first error.
pub fn read_all(
    file: &InputFile,
    chunk: &Chunk,
    opts: &ReadOptions,
    base: u64,
) -> (Vec<Got>, u64, Option<ReadError>) {
    let (got, records, errors) = read_all_errors(file, chunk, opts, base);
    (got, records, errors.into_iter().next())
}

/// Reads one chunk; returns samples (chunk-local records + `base`), the records delivered and
/// every error. Checks that blocks follow each other and every error's loss, in order: each
/// block starts where the last block or loss ended (a loss of unknown size ends the chunk).
pub fn read_all_errors(
    file: &InputFile,
    chunk: &Chunk,
    opts: &ReadOptions,
    base: u64,
) -> (Vec<Got>, u64, Vec<ReadError>) {
    let mut out = Vec::new();
    let mut records = 0;
    let mut next = Some(0u64);
    let mut errors: Vec<ReadError> = Vec::new();
    for b in read_chunk(file, chunk, opts) {
        match b {
            Ok(block) => {
                assert!(!block.texts_only(), "a plain read has no texts-only blocks");
                assert_eq!(Some(block.first_record), next, "blocks are contiguous");
                records += block.num_records() as u64;
                next = Some(block.first_record + block.num_records() as u64);
                block_samples(&block, &opts.selector, base, &mut out);
            }
            Err(e) => {
                let lost = e.unreadable();
                assert_eq!(
                    Some(lost.first_record),
                    next,
                    "a loss starts where reading stopped"
                );
                next = lost.records.map(|n| lost.first_record + n);
                errors.push(e);
            }
        }
    }
    (out, records, errors)
}

pub fn opts(sel: TextSelector, projection: Projection, block_bytes: usize) -> ReadOptions {
    ReadOptions {
        selector: sel,
        projection,
        block_bytes,
    }
}
