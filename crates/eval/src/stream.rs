//! Streaming the inputs: each sample's text and exact shingle set, built as the run built it.

use super::*;
use neardup_corpus::{Chunk, ChunkRange, SampleText, read_chunk};
use neardup_sketch::is_blank;
use neardup_sketch::normalize::NormalizeScratch;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// A streamed sample whose text is needed.
pub(super) struct Streamed {
    pub(super) addr: SampleAddr,
    pub(super) text: String,
    pub(super) id: Option<String>,
    /// Index into the decisions' rows.
    pub(super) decision: Option<usize>,
    /// Index into the decisions' drops.
    pub(super) drop: Option<usize>,
}

/// Streams one whole file block by block. `visit` gets each block's first record, its record
/// count, and the samples with non-blank text it accepted through `accept` (which sees every such
/// sample, in order); it returns false to stop reading. A read error ends the file: the blocks
/// before it stand and the error is returned.
pub(super) fn stream_file(
    ctx: &Ctx<'_>,
    file: usize,
    accept: &mut dyn FnMut(SampleAddr, Option<&str>) -> Option<Streamed>,
    visit: &mut dyn FnMut(u64, usize, Vec<Streamed>) -> bool,
) -> Result<(), String> {
    let chunk = Chunk {
        file,
        seq: 0,
        range: ChunkRange::Whole,
    };
    for block in read_chunk(&ctx.files[file], &chunk, &ctx.read) {
        let block = block.map_err(|e| e.to_string())?;
        let mut batch = Vec::new();
        block.for_each_sample(&ctx.read.selector, |s| {
            let SampleText::Text(text) = s.text else {
                return;
            };
            if is_blank(&text) {
                return;
            }
            let addr = SampleAddr {
                file: file as u32,
                record: block.first_record + s.record as u64,
                field: s.field,
            };
            if let Some(mut item) = accept(addr, s.id.as_deref()) {
                item.text = text.into_owned();
                batch.push(item);
            }
        });
        if !visit(block.first_record, block.num_records(), batch) {
            break;
        }
    }
    Ok(())
}

pub(super) fn streamed(addr: SampleAddr, id: Option<&str>) -> Streamed {
    Streamed {
        addr,
        text: String::new(),
        id: id.map(str::to_owned),
        decision: None,
        drop: None,
    }
}

/// The exact shingle set of a text: xxh3 of every shingle of the normalised text, sorted and
/// deduplicated; a text without any shingle is one element standing for the whole text.
pub(super) fn shingle_set(
    opts: &EvalOptions,
    text: &str,
    scratch: &mut NormalizeScratch,
    out: &mut Vec<u64>,
) {
    let normal = opts.normalizer.normalize_into(text, scratch);
    out.clear();
    opts.shingler.for_each(normal, |sh| out.push(xxh3_64(sh)));
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        out.push(xxh3_64_with_seed(normal.as_bytes(), SHORT_TEXT_SEED));
    }
}

pub(super) fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
