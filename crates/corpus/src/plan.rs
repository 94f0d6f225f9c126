//! Splitting input files into independently readable chunks ([`Chunk`]): JSONL cut at line
//! starts, Parquet by row groups (read from the footer).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use crate::chunk::{Chunk, ChunkRange};
use crate::format::{Compression, Format, InputFile};
use crate::parquet_read::read_footer;

/// How many chunks [`balanced_chunk_bytes`] aims for: enough that the last chunks to finish leave
/// threads idle only briefly, few enough that per-chunk costs (an open, a seek, a partial block)
/// stay negligible.
const BALANCED_CHUNKS: u64 = 64;

/// The smallest chunk [`balanced_chunk_bytes`] picks.
const MIN_CHUNK_BYTES: u64 = 1 << 20;

/// The chunk size to plan `files` with: `max_bytes`, or less when chunks that large would be few
/// — about a 64th of the input, at least 1 MiB. With few large chunks the threads that finish
/// early wait for the one reading the last chunk (docs/benchmarks.md, "Measurements behind the
/// code"). Depends on the files alone, never on the thread count, so the chunks, and all that
/// is recorded per chunk, are the same for every thread count.
pub fn balanced_chunk_bytes(files: &[InputFile], max_bytes: u64) -> u64 {
    let total: u64 = files.iter().map(|f| f.size).sum();
    (total / BALANCED_CHUNKS).clamp(MIN_CHUNK_BYTES.min(max_bytes), max_bytes.max(1))
}

/// Chunks in file order then seq order; a file smaller than target_bytes, or compressed, is one
/// chunk. Reads Parquet footers (a file whose footer can't be read becomes one Whole chunk, its
/// error surfaces when it is read).
///
/// Uncompressed JSONL is cut at the first line start at or after each multiple of `target_bytes`
/// (reading a few bytes around each cut), so every chunk starts on a line and none is empty.
/// Parquet row groups are grouped so each chunk holds about `target_bytes` of compressed data.
/// Deterministic for unchanged files, so stage 1 and stage 2 get the same chunks and addresses.
pub fn plan_chunks(files: &[InputFile], target_bytes: u64) -> Vec<Chunk> {
    let target = target_bytes.max(1);
    let mut out = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let ranges = match (file.format, file.compression) {
            _ if file.size <= target => vec![ChunkRange::Whole],
            (Format::Arrow, _) => vec![ChunkRange::Whole],
            (Format::Jsonl, Compression::None) => jsonl_ranges(file, target),
            (Format::Jsonl, _) => vec![ChunkRange::Whole],
            (Format::Parquet, _) => parquet_ranges(file, target),
        };
        out.extend(ranges.into_iter().enumerate().map(|(seq, range)| Chunk {
            file: i,
            seq,
            range,
        }));
    }
    out
}

fn jsonl_ranges(file: &InputFile, target: u64) -> Vec<ChunkRange> {
    if let Some(url) = file.object_url() {
        return cut_ranges(file.size, target, |pos| {
            let reader = neardup_storage::ObjectReader::open(&url, file.size, pos - 1, pos + 4096)?;
            first_line_start(reader, pos - 1, file.size)
        });
    }
    let Ok(mut f) = File::open(&file.path) else {
        return vec![ChunkRange::Whole];
    };
    cut_ranges(file.size, target, |pos| {
        next_line_start(&mut f, pos, file.size)
    })
}

/// Cuts `size` bytes at the line start found at or after each multiple of `target`.
fn cut_ranges(
    size: u64,
    target: u64,
    mut next_line_start: impl FnMut(u64) -> std::io::Result<u64>,
) -> Vec<ChunkRange> {
    let mut cuts = vec![0u64];
    let mut nominal = target;
    while nominal < size {
        match next_line_start(nominal) {
            Ok(ls) if ls < size => {
                cuts.push(ls);
                nominal = ls + target;
            }
            Ok(_) => break,
            Err(_) => return vec![ChunkRange::Whole],
        }
    }
    if cuts.len() == 1 {
        return vec![ChunkRange::Whole];
    }
    cuts.push(size);
    cuts.windows(2)
        .map(|w| ChunkRange::Bytes {
            start: w[0],
            end: w[1],
        })
        .collect()
}

/// The smallest line start `>= pos` (a line starts at 0 or right after a newline), or `size`.
fn next_line_start(f: &mut File, pos: u64, size: u64) -> std::io::Result<u64> {
    f.seek(SeekFrom::Start(pos - 1))?;
    first_line_start(f, pos - 1, size)
}

/// The offset after the first newline `reader` (positioned at `at`) meets, or `size`.
fn first_line_start(mut reader: impl Read, mut at: u64, size: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    while at < size {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(at + i as u64 + 1);
        }
        at += n as u64;
    }
    Ok(size)
}

fn parquet_ranges(file: &InputFile, target: u64) -> Vec<ChunkRange> {
    let Ok((_, meta)) = read_footer(file) else {
        return vec![ChunkRange::Whole];
    };
    let groups = meta.row_groups();
    if groups.len() <= 1 {
        return vec![ChunkRange::Whole];
    }
    let mut ranges = Vec::new();
    let (mut start, mut acc) = (0usize, 0u64);
    for (g, rg) in groups.iter().enumerate() {
        acc += rg.compressed_size().max(0) as u64;
        if acc >= target {
            ranges.push(ChunkRange::RowGroups { start, end: g + 1 });
            start = g + 1;
            acc = 0;
        }
    }
    if start < groups.len() {
        ranges.push(ChunkRange::RowGroups {
            start,
            end: groups.len(),
        });
    }
    if ranges.len() == 1 {
        return vec![ChunkRange::Whole];
    }
    ranges
}
