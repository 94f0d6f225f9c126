//! Reading some records of a JSONL chunk by their places in the file ([`crate::read_records`]): stage
//! 2 reads only the records it has to decide, given where stage 1 found each record. Of an
//! uncompressed file, nearby records are read together (one read, or one ranged request, per
//! run of records close enough), the rest of the file is not read at all; of a compressed file
//! (a whole-file chunk) whose members stage 1 noted, the members holding them are decompressed
//! (`crate::members`). A run that copies the records it keeps reads the chunk whole but parses
//! only those records ([`crate::read_records_whole`]): the others are copied as the bytes they are.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use neardup_storage::ObjectUrl;

use crate::block::{Block, BlockData, Picked, buffers};
use crate::error::{ReadError, ReadErrorKind};
use crate::format::{Compression, Format, InputFile};
use crate::members::{Raw, ResumePoint, ResumedStream};

/// One record of a JSONL chunk to read: which it is and where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPlace {
    /// Its chunk-local index.
    pub record: u64,
    /// The offset of its first byte in the file (in its decompressed stream, for a compressed
    /// file).
    pub offset: u64,
    /// Its line's length in bytes, the line end included.
    pub len: u64,
}

/// What a chunk read by [`crate::read_records`] spans: its records and their bytes (offsets in the
/// decompressed stream, for a compressed file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordSpan {
    /// The chunk's records.
    pub records: u64,
    /// The file offset of its first record.
    pub start: u64,
    /// The file offset after its last record.
    pub end: u64,
}

/// Records closer than this in a local file are read with one read: a read costs more than
/// copying a few kilobytes more.
const LOCAL_GAP: u64 = 4 << 10;
/// Records closer than this in an object are fetched with one ranged request (as
/// `neardup_storage::ObjectRanges` joins ranges): a request costs more than the bytes between.
const OBJECT_GAP: u64 = 64 << 10;

/// The records of a chunk read whole to parse ([`crate::read_records_whole`]), marked block by
/// block.
pub(crate) struct PickedLines {
    path: PathBuf,
    picks: Vec<RecordPlace>,
    /// The first pick not marked yet.
    next: usize,
}

impl PickedLines {
    /// The picks (ascending) of a chunk of the file at `path`, none marked yet.
    pub(crate) fn new(path: PathBuf, picks: Vec<RecordPlace>) -> PickedLines {
        PickedLines {
            path,
            picks,
            next: 0,
        }
    }

    /// Marks the picks among `block`'s records (the chunk's next block) as the only ones it
    /// yields, checking that each lies where the earlier read found it.
    pub(crate) fn mark(&mut self, block: &mut Block) -> Result<(), ReadError> {
        let first = block.first_record;
        let BlockData::Jsonl {
            bytes,
            starts,
            offset,
            picked,
            ..
        } = &mut block.data
        else {
            unreachable!("a whole read of a JSONL chunk yields JSONL blocks")
        };
        let end = first + starts.len() as u64;
        let mut records = Vec::new();
        while let Some(p) = self.picks.get(self.next).filter(|p| p.record < end) {
            let i = p.record.checked_sub(first).map(|i| i as usize);
            let line = i.map(|i| {
                let stop = starts.get(i + 1).copied().unwrap_or(bytes.len());
                (starts[i], stop - starts[i])
            });
            let in_place = matches!((line, *offset), (Some((at, len)), Some(o))
                if o + at as u64 == p.offset && len as u64 == p.len);
            if !in_place {
                return Err(ReadError::new(
                    &self.path,
                    ReadErrorKind::Changed,
                    Some(format!("chunk-local record {}", p.record)),
                    format!(
                        "bytes {} to {} no longer hold one line: the file changed since its \
                         records were counted",
                        p.offset,
                        p.offset + p.len
                    ),
                )
                .losing(first, None, None, *offset));
            }
            records.extend(i);
            self.next += 1;
        }
        // The file's bytes the block stands for are read (a compressed file's, as stored).
        let len = bytes.len() as u64;
        *picked = Some(Box::new(Picked {
            records,
            spanned: len,
            read: block.disk_bytes,
            whole: true,
        }));
        Ok(())
    }
}

/// Where the bytes come from.
enum Bytes {
    File(File),
    Object(ObjectUrl),
    /// The decompressed stream of a compressed file.
    Compressed(Box<ResumedStream>),
}

pub(crate) struct PickedSource {
    path: PathBuf,
    bytes: Option<Bytes>,
    /// The size of the stream read: the file's, or its decompressed stream's.
    size: u64,
    /// The file's size on disk.
    file_size: u64,
    span: RecordSpan,
    picks: Vec<RecordPlace>,
    /// The next pick to read.
    next: usize,
    /// The chunk-local index of the next block's first record, and its file offset.
    record: u64,
    offset: u64,
    gap: u64,
    block_bytes: u64,
    /// An error that ends the read, to hand out.
    failed: Option<ReadError>,
}

impl PickedSource {
    /// The reader of the records `picks` of `span` (see [`crate::read_records`]).
    pub(crate) fn open(
        file: &InputFile,
        span: RecordSpan,
        resumes: Vec<ResumePoint>,
        picks: Vec<RecordPlace>,
        block_bytes: usize,
    ) -> PickedSource {
        let mut failed = None;
        let compressed = file.compression != Compression::None;
        if file.format != Format::Jsonl || (compressed && (resumes.is_empty() || span.start != 0)) {
            failed = Some(
                ReadError::new(
                    &file.path,
                    ReadErrorKind::InvalidChunk,
                    None,
                    "only a JSONL file (a compressed one read whole, its members' starts noted) \
                     can be read by the places of its records",
                )
                .losing(0, None, None, Some(span.start)),
            );
        }
        let (bytes, gap) = match file.object_url() {
            _ if compressed && failed.is_none() => {
                let raw = match file.object_url() {
                    Some(url) => Raw::Object(url),
                    None => Raw::File(file.path.clone()),
                };
                let stream = ResumedStream::new(raw, file.size, file.compression, resumes);
                (Some(Bytes::Compressed(Box::new(stream))), LOCAL_GAP)
            }
            Some(url) => (Some(Bytes::Object(url)), OBJECT_GAP),
            None if failed.is_none() => match File::open(&file.path) {
                Ok(f) => (Some(Bytes::File(f)), LOCAL_GAP),
                Err(e) => {
                    failed = Some(ReadError::from_io(&file.path, None, e).losing(
                        0,
                        None,
                        None,
                        Some(span.start),
                    ));
                    (None, LOCAL_GAP)
                }
            },
            None => (None, LOCAL_GAP),
        };
        PickedSource {
            path: file.path.clone(),
            bytes,
            // The stream's size: a compressed file's chunk is its whole decompressed stream.
            size: if compressed { span.end } else { file.size },
            file_size: file.size,
            span,
            picks,
            next: 0,
            record: 0,
            offset: span.start,
            gap,
            block_bytes: block_bytes.max(1) as u64,
            failed,
        }
    }

    /// Reads `ranges` (ascending offsets in the stream) into one buffer, back to back; returns
    /// the file's bytes that took (those of the ranges, or a compressed file's read for them).
    fn read(&mut self, ranges: &[Range<u64>], buf: &mut Vec<u8>) -> std::io::Result<u64> {
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        buf.clear();
        match self.bytes.as_mut().expect("an open source has its bytes") {
            Bytes::Compressed(stream) => {
                let before = stream.bytes_read();
                buf.reserve(total as usize);
                for r in ranges {
                    stream.read_range(r.clone(), buf)?;
                }
                return Ok(stream.bytes_read() - before);
            }
            Bytes::File(f) => {
                buf.resize(total as usize, 0);
                let mut at = 0usize;
                for r in ranges {
                    let len = (r.end - r.start) as usize;
                    f.read_exact_at(&mut buf[at..at + len], r.start)?;
                    at += len;
                }
            }
            Bytes::Object(url) => {
                let fetched = neardup_storage::read_ranges(url, ranges)
                    .map_err(neardup_storage::StorageError::into_unnamed_io)?;
                buf.reserve(total as usize);
                for b in fetched {
                    buf.extend_from_slice(&b);
                }
            }
        }
        Ok(total)
    }

    /// The file's bytes on disk the stream's bytes before `offset` stand for (for a compressed
    /// file, its share of the file by decompressed bytes), for progress.
    fn disk_offset(&self, offset: u64) -> u64 {
        match self.bytes {
            Some(Bytes::Compressed(_)) if self.size > 0 => {
                (u128::from(offset) * u128::from(self.file_size) / u128::from(self.size)) as u64
            }
            _ => offset,
        }
    }

    /// The next block, with the bytes of the file it spans (passed-over records included: over a
    /// chunk they add up to its share of the file, as progress counts).
    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        if let Some(e) = self.failed.take() {
            self.record = self.span.records;
            self.next = self.picks.len();
            return Some(Err(e));
        }
        if self.record >= self.span.records {
            return None;
        }
        // The block's picks: at least one, and more while they fit in a block.
        let from = self.next;
        let mut to = from;
        let mut ranges: Vec<Range<u64>> = Vec::new();
        let mut held = 0u64;
        while let Some(p) = self.picks.get(to) {
            if to > from && held >= self.block_bytes {
                break;
            }
            let end = p.offset + p.len;
            match ranges.last_mut() {
                Some(last) if p.offset <= last.end + self.gap => {
                    held += end - last.end;
                    last.end = end;
                }
                _ => {
                    held += p.len;
                    ranges.push(p.offset..end);
                }
            }
            to += 1;
        }
        let last_block = to == self.picks.len();
        // The block spans the records up to its last pick, or to the chunk's end.
        let (records_end, offset_end) = match (last_block, to.checked_sub(1)) {
            (false, Some(last)) => {
                let p = &self.picks[last];
                (p.record + 1, p.offset + p.len)
            }
            _ => (self.span.records, self.span.end),
        };
        let mut buf = buffers::take();
        let read = match self.read(&ranges, &mut buf) {
            Ok(read) => read,
            Err(e) => {
                buffers::give(buf);
                let e = ReadError::from_io(
                    &self.path,
                    Some(format!("chunk-local record {}", self.record)),
                    e,
                )
                .losing(self.record, None, None, Some(self.offset));
                self.failed = Some(e);
                return self.next_block();
            }
        };
        // Each record's start in `buf`: a picked record's own, and for a record passed over
        // the end of the picked record before it, so every picked line is exactly its bytes.
        let n = (records_end - self.record) as usize;
        let mut starts = Vec::with_capacity(n);
        let mut records = Vec::with_capacity(to - from);
        let (mut range, mut base) = (0usize, 0u64);
        let mut after_last = 0usize;
        let mut k = from;
        for r in self.record..records_end {
            match self.picks.get(k) {
                Some(p) if p.record == r && k < to => {
                    while ranges[range].end < p.offset + p.len {
                        base += ranges[range].end - ranges[range].start;
                        range += 1;
                    }
                    let start = (base + p.offset - ranges[range].start) as usize;
                    let end = start + p.len as usize;
                    let ends_line = buf[end - 1] == b'\n' || p.offset + p.len == self.size;
                    if p.len == 0 || !ends_line {
                        buffers::give(buf);
                        self.failed = Some(
                            ReadError::new(
                                &self.path,
                                ReadErrorKind::Changed,
                                Some(format!("chunk-local record {r}")),
                                format!(
                                    "bytes {} to {} no longer hold one line: the file changed \
                                     since its records were counted",
                                    p.offset,
                                    p.offset + p.len
                                ),
                            )
                            .losing(
                                self.record,
                                None,
                                None,
                                Some(self.offset),
                            ),
                        );
                        return self.next_block();
                    }
                    records.push(starts.len());
                    starts.push(start);
                    after_last = end;
                    k += 1;
                }
                _ => starts.push(after_last),
            }
        }
        let len = buf.len();
        let first = self.record;
        let spanned = offset_end - self.offset;
        let disk = self.disk_offset(offset_end) - self.disk_offset(self.offset);
        self.record = records_end;
        self.offset = offset_end;
        self.next = to;
        Some(Ok((
            first,
            BlockData::Jsonl {
                bytes: buffers::Recycled::new(buf, len),
                starts,
                offset: None,
                resumes: Vec::new(),
                picked: Some(Box::new(Picked {
                    records,
                    spanned,
                    read,
                    whole: false,
                })),
            },
            disk,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::test_support::samples;
    use crate::block::{Projection, ReadOptions};
    use crate::chunk::Chunk;
    use crate::chunk::ChunkRange;
    use crate::read::{read_chunk, read_records, read_records_whole};
    use crate::select::{FieldPath, TextSelector};

    #[test]
    fn picked_records_read_as_a_whole_read_reads_them_and_the_rest_are_passed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.jsonl");
        let mut body = Vec::new();
        for i in 0..200 {
            match i % 7 {
                0 => body.extend_from_slice(b"\n"),
                1 => body.extend_from_slice(b"{bad\r\n"),
                _ => body.extend_from_slice(
                    format!(
                        "{{\"text\":\"record {i} {}\"}}\n",
                        "x".repeat(i * 37 % 5000)
                    )
                    .as_bytes(),
                ),
            }
        }
        // The last line has no line end.
        body.extend_from_slice(b"{\"text\":\"last\"}");
        std::fs::write(&path, &body).unwrap();
        let name = PathBuf::from("a.jsonl");
        let file = InputFile::detect(&path, &name, None).unwrap();
        let chunk = Chunk {
            file: 0,
            seq: 0,
            range: ChunkRange::Whole,
        };
        let sel = TextSelector::single(FieldPath::top("text"));
        let opts = ReadOptions {
            selector: sel.clone(),
            projection: Projection::TextOnly,
            block_bytes: 8 << 10,
        };
        let whole: Vec<_> = read_chunk(&file, &chunk, &opts)
            .map(Result::unwrap)
            .collect();
        let mut places = Vec::new();
        for b in &whole {
            for i in 0..b.num_records() {
                let len = b.jsonl_line(i).unwrap().len() as u64;
                let offset = places.last().map_or(0, |p: &RecordPlace| p.offset + p.len);
                places.push(RecordPlace {
                    record: b.first_record + i as u64,
                    offset,
                    len,
                });
            }
        }
        assert_eq!(places.len(), 201);
        let span = RecordSpan {
            records: 201,
            start: 0,
            end: body.len() as u64,
        };
        let all = samples(&whole, &sel);
        for every in [1usize, 2, 5, 13, 400] {
            let picks: Vec<RecordPlace> = places
                .iter()
                .copied()
                .filter(|p| p.record as usize % every == 3 % every || p.record == 200)
                .collect();
            let blocks: Vec<_> =
                read_records(&file, &chunk, span, Vec::new(), picks.clone(), 8 << 10)
                    .map(Result::unwrap)
                    .collect();
            // Every record is in a block, in order.
            let mut next = 0;
            for b in &blocks {
                assert_eq!(b.first_record, next);
                next += b.num_records() as u64;
            }
            assert_eq!(next, 201, "every {every}");
            let picked: Vec<u64> = picks.iter().map(|p| p.record).collect();
            let want: Vec<_> = all
                .iter()
                .filter(|(r, _)| picked.contains(r))
                .cloned()
                .collect();
            assert_eq!(samples(&blocks, &sel), want, "every {every}");
            let read: u64 = blocks.iter().map(|b| b.bytes_read().unwrap()).sum();
            let spanned: u64 = blocks.iter().map(|b| b.input_bytes()).sum();
            let picked_bytes: u64 = picks.iter().map(|p| p.len).sum();
            assert_eq!(spanned, body.len() as u64);
            assert!(read >= picked_bytes && read <= body.len() as u64);
            if every >= 13 {
                assert!(read < body.len() as u64 / 2, "every {every}: {read}");
            }
            // Read whole, the blocks hold every record's line but yield the picks' samples only.
            let blocks: Vec<_> = read_records_whole(&file, &chunk, &opts, &[], picks.clone())
                .map(Result::unwrap)
                .collect();
            assert_eq!(samples(&blocks, &sel), want, "whole, every {every}");
            let lines = |blocks: &[crate::Block]| -> Vec<Vec<u8>> {
                let mut out = Vec::new();
                for b in blocks {
                    out.extend((0..b.num_records()).map(|i| b.jsonl_line(i).unwrap().to_vec()));
                }
                out
            };
            assert_eq!(lines(&blocks), lines(&whole), "whole, every {every}");
            let read: u64 = blocks.iter().map(|b| b.bytes_read().unwrap()).sum();
            assert_eq!(read, body.len() as u64);
        }
        // A file whose lines moved since their places were noted is refused, not misread.
        let mut moved = body.clone();
        moved.insert(0, b' ');
        moved.pop();
        std::fs::write(&path, &moved).unwrap();
        let picks = vec![places[5]];
        let got: Vec<_> =
            read_records(&file, &chunk, span, Vec::new(), picks.clone(), 8 << 10).collect();
        let err = got.into_iter().find_map(Result::err).expect("an error");
        assert_eq!(err.kind(), ReadErrorKind::Changed);
        let got: Vec<_> = read_records_whole(&file, &chunk, &opts, &[], picks).collect();
        let err = got.into_iter().find_map(Result::err).expect("an error");
        assert_eq!(err.kind(), ReadErrorKind::Changed);
    }
}
